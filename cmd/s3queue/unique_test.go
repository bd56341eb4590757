package main

import (
	"os"
	"strings"
	"testing"
)

// Bad uniqueness flags are refused before the store is opened (exit 2,
// nothing written).
func TestSubmitUniqueErrors(t *testing.T) {
	store, dir := newStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--unique", "--idempotency-key", "k"}, "--unique derives the idempotency key"},
		{[]string{"--idempotency-key", "k", "--unique-for", "0s"}, "--unique-for 0s: want 1s..720h"},
		{[]string{"--idempotency-key", "k", "--unique-for", "500ms"}, "unique_for 500ms outside"},
		{[]string{"--unique", "--unique-for", "721h"}, "outside 1s.."},
		{[]string{"--unique-for", "1h"}, "a uniqueness window needs an idempotency key"},
		{[]string{"--idempotency-key", "unique:x"}, `reserved for --unique`},
		{[]string{"--unique", "--slot", "s"}, "cannot be combined with --after or --slot"},
	} {
		args := append([]string{"submit", "--store", store, "--type", "x"}, tc.args...)
		wantExit(t, cli(t, "", args...), exitUsage, tc.want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("refused submits wrote %d entries", len(entries))
	}
}

// --unique returns the first task for the same type and input, however
// it is spaced, and a new one for another input; a batch line may ask for
// it too.
func TestSubmitUnique(t *testing.T) {
	store, _ := newStore(t)
	first := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--input", `{"a":1}`, "--unique", "--unique-for", "1h"))
	again := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--input", `{ "a": 1 }`, "--unique"))
	other := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--input", `{"a":2}`, "--unique"))
	if again != first || other == first {
		t.Fatalf("ids %s %s %s: want the first twice, then another", first, again, other)
	}
	r := cli(t, `{"type":"x","input":{"a":1},"unique":true}`+"\n"+`{"type":"x","input":{"a":1},"unique":true,"unique_for":"0s"}`+"\n",
		"submit", "--store", store, "--batch", "-")
	if !strings.Contains(r.stdout, "1 "+first) || !strings.Contains(r.stdout, `2 error: "unique_for" "0s"`) {
		t.Fatalf("batch output:\n%s%s", r.stdout, r.stderr)
	}
}
