package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// wait and submit --wait print how each task ended and exit with a code
// that says it: 0 succeeded, 6 dead, 7 canceled, 8 timeout.
func TestWaitExitCodes(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+`
[handlers]
ok = "echo '{\"done\": true}'"
fail = "echo 'disk on fire' >&2; exit 3"
`)
	ok := submit(t, store, cfg, "ok")
	fail := submit(t, store, cfg, "fail", "--max-attempts", "1")
	held := submit(t, store, cfg, "nobody-runs-this")
	canceled := submit(t, store, cfg, "nobody-runs-this")
	must(t, "cancel", canceled, "--store", store)
	_, stop := background(t, "worker", "--store", store, "--config", cfg)
	defer stop()

	r := cli(t, "", "wait", ok, "--store", store, "--poll-max", "50ms")
	if r.code != exitOK || !regexp.MustCompile(`(?m)^`+ok+`\s+succeeded\s+ok\s+1/3\s+\S+\s+\{"done":true\}$`).MatchString(r.stdout) {
		t.Errorf("wait for a task that succeeds: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", "wait", ok, fail, "--store", store, "--poll-max", "50ms", "--json")
	var outs []outcome
	if err := json.Unmarshal([]byte(r.stdout), &outs); err != nil || len(outs) != 2 {
		t.Fatalf("wait --json: %v\n%s", err, r.stdout)
	}
	if r.code != exitDead || outs[0].Status != task.Succeeded || outs[1].Status != task.Dead || !outs[1].Finished || !strings.Contains(outs[1].LastError, "disk on fire") {
		t.Errorf("wait for a dead task: exit %d, %+v", r.code, outs)
	}
	for _, field := range []string{`"id"`, `"type"`, `"status"`, `"finished"`, `"attempt"`, `"max_attempts"`, `"updated_at"`, `"last_error"`} {
		if !strings.Contains(r.stdout, field) {
			t.Errorf("wait --json lacks %s:\n%s", field, r.stdout)
		}
	}
	wantExit(t, cli(t, "", "wait", ok, canceled, "--store", store), exitCanceled, "1 of 2 tasks canceled")
	r = cli(t, "", "wait", ok, held, "--store", store, "--wait-timeout", "300ms", "--poll-max", "50ms")
	wantExit(t, r, exitTimeout, "1 of 2 tasks not finished after 300ms")
	if !regexp.MustCompile(`(?m)^` + held + `\s+pending\s`).MatchString(r.stdout) {
		t.Errorf("a timed-out wait does not print the unfinished task as it stands:\n%s", r.stdout)
	}

	// submit --wait prints the id at once, then the outcome.
	r = cli(t, "", "submit", "--store", store, "--config", cfg, "--type", "ok", "--wait", "--poll-max", "50ms")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != exitOK || len(lines) != 3 || !task.ValidID(lines[0]) || !strings.HasPrefix(lines[2], lines[0]) || !strings.Contains(lines[2], "succeeded") {
		t.Errorf("submit --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", "submit", "--store", store, "--config", cfg, "--type", "fail", "--max-attempts", "1", "--wait", "--json", "--poll-max", "50ms")
	if err := json.Unmarshal([]byte(r.stdout), &outs); err != nil || r.code != exitDead || len(outs) != 1 || outs[0].Status != task.Dead {
		t.Errorf("submit --wait --json of a failing task: exit %d %v\n%s", r.code, err, r.stdout)
	}
	r = cli(t, "", "submit", "--store", store, "--config", cfg, "--type", "nobody-runs-this", "--wait", "--wait-timeout", "200ms", "--poll-max", "50ms")
	wantExit(t, r, exitTimeout, "not finished after 200ms")
}

func TestWaitUsageErrors(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	wantExit(t, cli(t, "", "wait", "--store", store), exitUsage, "want at least one task ID")
	wantExit(t, cli(t, "", "wait", "not-an-id", "--store", store), exitUsage, `"not-an-id" is not a task id`)
	wantExit(t, cli(t, "", "wait", id, "--store", store, "--wait-timeout", "-1s"), exitUsage, "wait: --wait-timeout -1s must not be negative")
	wantExit(t, cli(t, "", "wait", id, "--store", store, "--poll-max", "0s"), exitUsage, "--poll-max 0s must be positive")
	wantExit(t, cli(t, "", "wait", mustID(t), "--store", store), exitNotFound, "wait: task ")
	// Ctrl-C at the first read of the task.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	st := &onTaskGet{Store: openStore(t, store), fn: cancel}
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: func() []string { return nil },
		open: func(context.Context, string) (s3store.Store, error) { return st, nil }}
	code := a.report(a.dispatch(ctx, []string{"wait", id, "--store", "s3://x"}))
	wantExit(t, cliResult{code, out.String(), errb.String()}, exitRuntime, "wait: interrupted")
	wantExit(t, cli(t, "", "submit", "--store", store, "--type", "x", "--wait-timeout", "1s"), exitUsage, "--wait-timeout needs --wait")
	wantExit(t, cli(t, "", "submit", "--store", store, "--type", "x", "--json"), exitUsage, "--json needs --wait")
	wantExit(t, cli(t, "", "submit", "--store", store, "--batch", "-", "--wait"), exitUsage, "--wait waits for a single task")
	wantExit(t, cli(t, "", "get", id, "--store", store, "--poll-max", "1s"), exitUsage, "--poll-max needs --watch")
}

// get --watch prints the task, then each change, and ends when it
// finishes.
func TestGetWatch(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+`
[handlers]
flaky = "if [ \"$S3QUEUE_ATTEMPT\" = 1 ]; then echo 'first try fails' >&2; exit 1; fi; echo 42"
`)
	id := submit(t, store, cfg, "flaky")
	_, stop := background(t, "worker", "--store", store, "--config", cfg)
	defer stop()
	r := cli(t, "", "get", id, "--watch", "--store", store, "--poll-max", "20ms")
	if r.code != exitOK {
		t.Fatalf("get --watch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, re := range []string{`status:\s+pending`, `→succeeded\s+attempt 2/3\s+result 42`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("get --watch output lacks %s:\n%s", re, r.stdout)
		}
	}
	// The watch of a finished task prints it and ends at once.
	r = cli(t, "", "get", id, "--watch", "--json", "--store", store)
	var got task.Task
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != exitOK || err != nil || got.Status != task.Succeeded {
		t.Errorf("get --watch --json of a finished task: exit %d %v\n%s", r.code, err, r.stdout)
	}
	c := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	must(t, "cancel", c, "--store", store)
	wantExit(t, cli(t, "", "get", c, "--watch", "--store", store), exitCanceled, "canceled")
}

// onTaskGet is a store that calls fn at each GET of a task object.
type onTaskGet struct {
	s3store.Store
	fn func()
}

func (s *onTaskGet) Get(ctx context.Context, key string) (s3store.Object, error) {
	if strings.HasPrefix(key, "tasks/") {
		s.fn()
	}
	return s.Store.Get(ctx, key)
}
