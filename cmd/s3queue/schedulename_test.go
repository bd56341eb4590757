package main

import "testing"

// A bad schedule name is a usage error (exit 2) for every subcommand that
// takes one, before any request.
func TestScheduleBadNameIsAUsageError(t *testing.T) {
	store, _ := newStore(t)
	must(t, "submit", "--store", store, "--type", "job")
	for _, sub := range []string{"remove", "pause", "resume"} {
		wantExit(t, cli(t, "", "schedule", sub, "BAD/../x", "--store", store), exitUsage, `invalid schedule name "BAD/../x"`)
	}
	wantExit(t, cli(t, "", "schedule", "add", "BAD/../x", "--every", "1m", "--type", "job", "--store", store), exitUsage, `invalid schedule name "BAD/../x"`)
}
