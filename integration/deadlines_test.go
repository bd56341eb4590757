package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// Deadlines and timeouts through the binary, on MinIO, with two worker
// processes: a task whose deadline passed before any worker ran is ended
// dead unstarted; a running command is killed at its task's deadline and
// the task is dead, not retried; one killed at its timeout fails the
// attempt as timed out. Checked from `s3queue get --json`.
func TestDeadlinesThroughTheBinaryWithTwoWorkers(t *testing.T) {
	q := newMinIOQueue(t, 2, 3*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_WORKER_POLL_MAX=1s"}
	submit := func(typ string, args ...string) string {
		out := runCLI(t, ctx, bin, env, append([]string{"submit", "--type", typ, "--input", "{}"}, args...)...)
		return strings.TrimSpace(string(out))
	}

	// Missed: due at once, its deadline 2s later, and no worker yet.
	missed := submit("quick", "--deadline", "2s")
	missedAt := time.Now()
	start := func() []*cliProcess {
		var ws []*cliProcess
		for _, id := range []string{"A", "B"} {
			ws = append(ws, startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+id),
				"worker", "--exec", "quick=echo '\"ok\"'", "--exec", "slow=exec sleep 120"))
		}
		return ws
	}
	// A stretch of time under test: the deadline passes (and S3's 1 s
	// Date with it) before any worker looks.
	waitUntil(t, ctx, "the first task's deadline to pass", 10*time.Second, func() bool { return time.Since(missedAt) > 4*time.Second })
	workers := start()
	// Stopped at the deadline: a 5s deadline, a 60s timeout.
	stopped := submit("slow", "--deadline", "5s", "--timeout", "60s")
	// Timed out: a 5s timeout, one attempt, no deadline.
	timedOut := submit("slow", "--timeout", "5s", "--max-attempts", "1")
	// In time: a deadline far away.
	inTime := submit("quick", "--deadline", "10m")

	final := func(id string) task.Task {
		var tk task.Task
		waitUntil(t, ctx, "task "+id+" to finish", time.Minute, func() bool {
			tk = getCLI(t, ctx, bin, env, id)
			return tk.Status.Terminal()
		})
		return tk
	}
	if tk := final(missed); tk.Status != task.Dead || tk.Attempt != 0 ||
		!strings.HasPrefix(tk.LastError, "deadline passed at ") || !strings.HasSuffix(tk.LastError, ", not started") {
		t.Errorf("the task found past its deadline: %s attempt %d last error %q, want dead, never started", tk.Status, tk.Attempt, tk.LastError)
	}
	if tk := final(stopped); tk.Status != task.Dead || tk.Attempt != 1 ||
		!strings.HasPrefix(tk.LastError, "deadline passed at ") || !strings.Contains(tk.LastError, " while running: command killed") {
		t.Errorf("the command running at its deadline: %s attempt %d last error %q, want dead, stopped while running", tk.Status, tk.Attempt, tk.LastError)
	} else if d := tk.UpdatedAt.Sub(tk.Deadline); d < -2*time.Second || d > 10*time.Second {
		t.Errorf("the command running at its deadline ended %v after it", d)
	}
	if tk := final(timedOut); tk.Status != task.Dead || tk.Attempt != 1 || !strings.HasPrefix(tk.LastError, "timed out after 5s: command killed") {
		t.Errorf("the command running past its timeout: %s attempt %d last error %q, want \"timed out after 5s: command killed\"", tk.Status, tk.Attempt, tk.LastError)
	}
	if tk := final(inTime); tk.Status != task.Succeeded || tk.Deadline.IsZero() {
		t.Errorf("the task with a far deadline: %s (deadline %v), want succeeded", tk.Status, tk.Deadline)
	}
	for _, w := range workers {
		w.stop(t)
	}
}
