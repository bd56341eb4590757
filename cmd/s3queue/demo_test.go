package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	dir := filepath.Join(t.TempDir(), "demo")
	start := time.Now()
	r := cli(t, "", "demo", "--tasks", "40", "--workers", "2", "--dir", dir)
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if d := time.Since(start); d > 45*time.Second {
		t.Errorf("demo of 40 tasks took %v", d)
	}
	for _, re := range []string{
		`s3queue demo: 40 tasks, 2 workers and 1 killed mid-task`,
		`succeeded 39\b`,
		`dead\s+1\b`,
		`duplicate executions\s+[1-9]`, // the killed worker's task ran again
		`re-dispatches\s+[1-9]`,        // because the monitor took its lease back
		`retries\s+[1-9]`,              // flaky tasks and the poison task
		`store requests: PUT=\d+.* GET=\d+.* LIST=\d+`,
		`per task: PUT \d+\.\d\d`,
		`elapsed: `,
		`result: OK, all 40 tasks reached their expected status`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("summary lacks %s:\n%s", re, r.stdout)
		}
	}
	// stderr is not a terminal here: plain progress lines, no redraws.
	if !strings.Contains(r.stderr, "demo: 40/40 tasks finished") || strings.Contains(r.stderr, "\r") {
		t.Errorf("progress on stderr:\n%q", r.stderr)
	}
	// --dir keeps the queue for inspection, and the CLI reads it.
	if keys := storeKeys(t, "file://"+dir); len(keys) < 40 {
		t.Errorf("demo --dir did not keep the queue: %v", keys)
	}
	stats := must(t, "stats", "--store", "file://"+dir)
	if !regexp.MustCompile(`succeeded\s+39`).MatchString(stats) || !regexp.MustCompile(`dead\s+1`).MatchString(stats) {
		t.Errorf("stats of the demo queue:\n%s", stats)
	}
	// A second run refuses the used directory.
	wantExit(t, cli(t, "", "demo", "--dir", dir), exitUsage, "not empty")
}
