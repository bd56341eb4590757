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
		`s3queue demo: 40 tasks and 7 in a dependency graph, 6 in two slots, 2 workers and 1 killed mid-task`,
		`succeeded 48\b`, // 39, the graph's 5, the slot's 3 and the replacing render
		`dead\s+2\b`,     // the poison task and the graph's failing one
		`canceled\s+3\b`, // its dependent, and the replaced render and the holder it stopped
		`build → test, lint, docs → package\s+5 of 5 succeeded`,
		`fetch \(fails for good\) → deploy\s+fetch dead, deploy canceled without running`,
		`started early \(before a dependency finished, or beside its slot's holder\)\s+0\n`,
		`slot customer-42: 3 tasks, one at a time\s+3 of 3 succeeded`,
		`slot customer-42: drop-if-running\s+refused: slot busy, nothing created`,
		`slot doc-7: replace \(latest wins\)\s+render 3 succeeded; render 2 canceled, render 1 canceled, neither ran`,
		`duplicate executions\s+[1-9]`, // the killed worker's task ran again
		`re-dispatches\s+[1-9]`,        // because the monitor took its lease back
		`retries\s+[1-9]`,              // flaky tasks and the poison task
		`store requests: PUT=\d+.* GET=\d+.* LIST=\d+`,
		`per task: PUT \d+\.\d\d`,
		`elapsed: `,
		`result: OK, all 53 tasks reached their expected status \(48 succeeded, 2 dead, 3 canceled\)`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("summary lacks %s:\n%s", re, r.stdout)
		}
	}
	// stderr is not a terminal here: plain progress lines, no redraws.
	if !strings.Contains(r.stderr, "demo: 53/53 tasks finished") || strings.Contains(r.stderr, "\r") {
		t.Errorf("progress on stderr:\n%q", r.stderr)
	}
	// --dir keeps the queue for inspection, and the CLI reads it.
	if keys := storeKeys(t, "file://"+dir); len(keys) < 53 {
		t.Errorf("demo --dir did not keep the queue: %v", keys)
	}
	stats := must(t, "stats", "--store", "file://"+dir)
	if !regexp.MustCompile(`succeeded\s+48`).MatchString(stats) || !regexp.MustCompile(`dead\s+2`).MatchString(stats) ||
		!regexp.MustCompile(`canceled\s+3`).MatchString(stats) || !regexp.MustCompile(`blocked\s+0`).MatchString(stats) {
		t.Errorf("stats of the demo queue:\n%s", stats)
	}
	// A second run refuses the used directory.
	wantExit(t, cli(t, "", "demo", "--dir", dir), exitUsage, "not empty")
}
