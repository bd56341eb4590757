package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/task"
)

// list shows who runs a running task and until when its lease holds: a
// WORKER and a LEASE UNTIL column in text, claim.worker and
// claim.expires_at in --json. Without running tasks the columns are not
// printed.
func TestListShowsTheWorkerOfRunningTasks(t *testing.T) {
	store, _ := newStore(t)
	release := filepath.Join(t.TempDir(), "release")
	cfg := writeConfig(t, fastWorker)
	hold := submit(t, store, cfg, "hold")
	waiting := submit(t, store, cfg, "other")
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg,
		"--exec", "hold=while [ ! -e "+release+" ]; do sleep 0.05; done")
	var running *task.Task
	waitFor(t, "the task to run", func() bool {
		running = getTask(t, store, hold)
		return running.Status == task.Running && running.Claim != nil
	})

	out := must(t, "list", "--store", store)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^ID\s+STATUS\s+TYPE\s+PRIORITY\s+ATTEMPT\s+SHARD\s+UPDATED\s+WORKER\s+LEASE UNTIL\s+LAST ERROR$`).MatchString(lines[0]) {
		t.Fatalf("list with a running task printed:\n%s", out)
	}
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, hold):
			if !strings.Contains(l, " "+running.Claim.Worker+" ") || !strings.Contains(l, " "+fmtTime(running.Claim.ExpiresAt)+" ") {
				t.Errorf("the running task's line lacks its worker %s and lease expiry %s:\n%s", running.Claim.Worker, fmtTime(running.Claim.ExpiresAt), l)
			}
		case strings.HasPrefix(l, waiting):
			if !regexp.MustCompile(`pending .* - +- +-$`).MatchString(l) {
				t.Errorf("the pending task's line has a worker or lease:\n%s", l)
			}
		}
	}

	var listed []map[string]any
	if err := json.Unmarshal([]byte(must(t, "list", "--status", "running", "--json", "--store", store)), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 {
		t.Fatalf("list --status running --json: %d tasks, want 1", len(listed))
	}
	claim, _ := listed[0]["claim"].(map[string]any)
	if claim["worker"] != running.Claim.Worker || claim["expires_at"] == nil {
		t.Errorf("list --json of a running task: claim %v, want its worker and expires_at", listed[0]["claim"])
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, store, hold)
	if code := stop(); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, stderr)
	}
	if out := must(t, "list", "--store", store); strings.Contains(out, "WORKER") {
		t.Errorf("list without running tasks prints the worker columns:\n%s", out)
	}
}
