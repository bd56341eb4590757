package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// --deadline takes an RFC 3339 time or a duration from now, on the command
// line and on batch lines; a malformed one is a usage error (exit 2) that
// writes nothing.
func TestSubmitDeadline(t *testing.T) {
	store, _ := newStore(t)
	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--deadline", at.Format(time.RFC3339)))
	if got := getTask(t, store, id); !got.Deadline.Equal(at) {
		t.Errorf("--deadline %v gave deadline %v", at, got.Deadline)
	}
	if out := must(t, "get", "--store", store, id); !strings.Contains(out, at.Format("2006-01-02T15:04:05.000Z")) {
		t.Errorf("get does not show the deadline:\n%s", out)
	}
	id = strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--deadline", "2h"))
	got := getTask(t, store, id)
	if d := got.Deadline.Sub(got.CreatedAt); d < 119*time.Minute || d > 121*time.Minute {
		t.Errorf("--deadline 2h gave a deadline %v after creation", d)
	}
	id = strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	if got := getTask(t, store, id); !got.Deadline.IsZero() {
		t.Errorf("no --deadline gave deadline %v", got.Deadline)
	}

	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	os.WriteFile(file, []byte(`{"deadline": "30m"}`+"\n"+`{"deadline": "soon"}`+"\n"), 0o644)
	r := cli(t, "", "submit", "--store", store, "--batch", file, "--type", "x")
	if r.code != 2 || !strings.Contains(r.stdout, `"deadline" "soon"`) {
		t.Errorf("batch with a malformed deadline: exit %d, stdout %q, want 2 and the line's error", r.code, r.stdout)
	}
	res := batchResults(t, r.stdout)
	if got := getTask(t, store, res[1]); got.Deadline.Sub(got.CreatedAt) < 29*time.Minute {
		t.Errorf(`batch "deadline": "30m" gave %v after creation`, got.Deadline.Sub(got.CreatedAt))
	}

	for _, bad := range []string{"tomorrow", "-5m", "0s", "2026-13-01T00:00:00Z"} {
		empty, dir := newStore(t)
		wantExit(t, cli(t, "", "submit", "--store", empty, "--type", "x", "--deadline", bad), 2, "--deadline")
		if entries, _ := os.ReadDir(filepath.Join(dir, "tasks")); len(entries) > 0 {
			t.Errorf("--deadline %q wrote %d entries", bad, len(entries))
		}
	}
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if r := cli(t, "", "submit", "--store", store, "--type", "x", "--deadline", past); r.code != 2 {
		t.Errorf("--deadline in the past: exit %d (stderr %q), want 2", r.code, r.stderr)
	}
}
