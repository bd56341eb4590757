package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// Priorities through the binary, on MinIO: a backlog of default tasks is
// submitted while no worker runs, then high and low ones (`submit --batch`
// lines with "priority", and `submit --priority`); one worker of
// concurrency 1 then runs them all, a second each. The high tasks run
// first, the low ones last, as the handler's own record of its runs and the
// tasks' histories (S3 time) both show; `get` shows each task's priority.
func TestPrioritiesThroughTheBinary(t *testing.T) {
	q := newMinIOQueue(t, 1, 3*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_WORKER_POLL_MAX=1s", "RUNS=" + runs}

	const backlog = 10
	batch := func(name string, lines []string) []string {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(lines))
		for _, l := range strings.Split(strings.TrimSpace(string(runCLI(t, ctx, bin, env, "submit", "--batch", f))), "\n") {
			var n int
			var id string
			if _, err := fmt.Sscanf(l, "%d %s", &n, &id); err != nil || n < 1 || n > len(lines) {
				t.Fatalf("submit --batch printed %q", l)
			}
			ids[n-1] = id
		}
		return ids
	}
	var lines []string
	for i := range backlog {
		lines = append(lines, fmt.Sprintf(`{"type": "job", "input": {"n": %d}}`, i))
	}
	defaults := batch("backlog.jsonl", lines)
	highs := batch("high.jsonl", []string{`{"type": "job", "input": {"h": 1}, "priority": "high"}`, `{"type": "job", "input": {"h": 2}, "priority": "high"}`})
	highs = append(highs, strings.TrimSpace(string(runCLI(t, ctx, bin, env, "submit", "--type", "job", "--input", `{"h":3}`, "--priority", "high"))))
	var lows []string
	for i := range 3 {
		lows = append(lows, strings.TrimSpace(string(runCLI(t, ctx, bin, env, "submit", "--type", "job", "--input", fmt.Sprintf(`{"l":%d}`, i), "--priority", "low"))))
	}
	if tk := getCLI(t, ctx, bin, env, highs[2]); tk.Priority != task.PriorityHigh {
		t.Fatalf("get --json: priority %q, want high", tk.Priority)
	}
	if out := string(runCLI(t, ctx, bin, env, "get", lows[0])); !strings.Contains(out, "priority") || !strings.Contains(out, "low") {
		t.Fatalf("get does not show the priority:\n%s", out)
	}

	w := startCLI(t, bin, env, "worker", "--concurrency", "1", "--exec", `job=echo "$S3QUEUE_TASK_ID" >> "$RUNS"; sleep 1; cat`)
	all := append(append(slices.Clone(defaults), highs...), lows...)
	waitUntil(t, ctx, "every task to run", 150*time.Second, func() bool {
		for _, tk := range listCLI(t, ctx, bin, env) {
			if tk.Status != task.Succeeded {
				return false
			}
		}
		return true
	})
	w.stop(t)

	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	order := strings.Fields(string(b))
	if len(order) != len(all) {
		t.Fatalf("%d runs for %d tasks", len(order), len(all))
	}
	if got := order[:len(highs)]; !sameSet(got, highs) {
		t.Errorf("the first runs were %v, want the high tasks %v", got, highs)
	}
	if got := order[len(order)-len(lows):]; !sameSet(got, lows) {
		t.Errorf("the last runs were %v, want the low tasks %v", got, lows)
	}
	// The histories say the same on S3 time: every high task was claimed
	// no later than any default one, every low one no earlier, within the
	// S3 clock's resolution (a second: claim times are bounds from Date
	// headers, and a worker may claim the next task while one runs).
	claimed := func(ids []string) (first, last time.Time) {
		for _, id := range ids {
			tk := getCLI(t, ctx, bin, env, id)
			for _, h := range tk.History {
				if h.To == task.Running {
					if first.IsZero() || h.At.Before(first) {
						first = h.At
					}
					if h.At.After(last) {
						last = h.At
					}
				}
			}
		}
		return first, last
	}
	_, lastHigh := claimed(highs)
	firstDefault, lastDefault := claimed(defaults)
	firstLow, _ := claimed(lows)
	if lastHigh.After(firstDefault.Add(time.Second)) || lastDefault.After(firstLow.Add(time.Second)) {
		t.Errorf("claims by S3 time: last high %s, defaults %s..%s, first low %s", lastHigh.Format(time.StampMilli),
			firstDefault.Format(time.StampMilli), lastDefault.Format(time.StampMilli), firstLow.Format(time.StampMilli))
	}
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}

// A high task submitted behind more than a window of due tasks reaches a
// busy worker through its shard's lane: the worker (concurrency 1) works
// through a backlog of 1,100 tasks, marks itself busy in fleet.json, and
// `s3queue submit --priority high` then writes lanes/{shard}/{id} beside the
// task; the task runs within a few runs of its submit, a thousand tasks
// before its place in time order, and its lane entry is deleted.
func TestALaneThroughTheBinary(t *testing.T) {
	q := newMinIOQueue(t, 1, 4*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_WORKER_POLL_MAX=1s", "S3QUEUE_WORKER_MEMBER_TTL=6s", "RUNS=" + runs}
	var lines []string
	for i := range 1100 {
		lines = append(lines, fmt.Sprintf(`{"type": "job", "input": {"n": %d}}`, i))
	}
	f := filepath.Join(dir, "backlog.jsonl")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runCLI(t, ctx, bin, env, "submit", "--batch", f)
	w := startCLI(t, bin, env, "worker", "--concurrency", "1", "--exec", `job=echo "$S3QUEUE_TASK_ID" >> "$RUNS"; sleep 0.1; cat`)
	defer w.stop(t)
	waitUntil(t, ctx, "the worker to say it is busy", time.Minute, func() bool {
		o, err := q.st.Get(ctx, "fleet.json")
		return err == nil && strings.Contains(string(o.Body), `"busy":true`)
	})
	ranBefore := func() int {
		b, _ := os.ReadFile(runs)
		return len(strings.Fields(string(b)))
	}
	before := ranBefore()
	high := strings.TrimSpace(string(runCLI(t, ctx, bin, env, "submit", "--type", "job", "--input", `{"high":1}`, "--priority", "high")))
	c := q.srv.Minio()
	if keys := listPrefix(ctx, t, c, q.bucket, "q/lanes/"); !slices.Contains(keys, "q/lanes/000/"+high) {
		t.Fatalf("no lane entry for the high task: %v", keys)
	}
	waitUntil(t, ctx, "the high task to run", time.Minute, func() bool { return getCLI(t, ctx, bin, env, high).Status == task.Succeeded })
	b, _ := os.ReadFile(runs)
	order := strings.Fields(string(b))
	at := slices.Index(order, high)
	t.Logf("the high task ran %d runs after its submit (%d backlog tasks had run)", at-before+1, before)
	if at < 0 || at-before > 10 {
		t.Errorf("the high task ran %d runs after its submit, want within 10", at-before+1)
	}
	if len(order) > 1000 {
		t.Errorf("%d tasks ran: the backlog was not deep enough to prove anything", len(order))
	}
	waitUntil(t, ctx, "the lane entry to be deleted", 30*time.Second, func() bool { return len(listPrefix(ctx, t, c, q.bucket, "q/lanes/")) == 0 })
}
