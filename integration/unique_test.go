package integration

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// Uniqueness windows through the binary, on MinIO: a key submitted with
// --unique-for returns its task within the window and a new task once the
// window has passed by S3 time; --unique makes one task per type and
// input; two binaries racing on a key whose window passed create one task
// between them.
func TestUniquenessWindowsThroughTheBinary(t *testing.T) {
	q := newMinIOQueue(t, 2, 3*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	env := []string{"S3QUEUE_STORE=" + q.url}
	submit := func(args ...string) string {
		t.Helper()
		out := runCLI(t, ctx, bin, env, append([]string{"submit", "--type", "report"}, args...)...)
		id := strings.TrimSpace(string(out))
		if _, err := task.IDTime(id); err != nil {
			t.Fatalf("s3queue submit %v printed %q, not a task id", args, out)
		}
		return id
	}
	// passed waits until the window of key's record has passed by S3 time
	// (the server's Date), as a submit judges it: its LastModified, the
	// window, and a second for LastModified's resolution and one for the
	// Date header's.
	passed := func(key string, window time.Duration) {
		t.Helper()
		info, err := q.st.Head(ctx, task.IdempotencyRecordKey(key))
		if err != nil {
			t.Fatal(err)
		}
		end := info.LastModified.Add(window + 2*time.Second)
		waitUntil(t, ctx, "the window of "+key+" to pass by S3 time", time.Minute, func() bool {
			now, err := q.st.Now(ctx)
			return err == nil && !now.Before(end)
		})
	}

	x := submit("--input", `{"day":1}`, "--idempotency-key", "daily", "--unique-for", "3s")
	if again := submit("--input", `{"day":1}`, "--idempotency-key", "daily", "--unique-for", "3s"); again != x {
		t.Fatalf("a submit within the window printed %s, want %s", again, x)
	}
	passed("daily", 3*time.Second)
	y := submit("--input", `{"day":1}`, "--idempotency-key", "daily", "--unique-for", "3s")
	if y == x {
		t.Fatalf("a submit after the window printed the first task %s, want a new one", x)
	}
	for _, id := range []string{x, y} {
		if tk := getCLI(t, ctx, bin, env, id); tk.IdempotencyKey != "daily" || tk.UniqueFor.D() != 3*time.Second {
			t.Fatalf("task %s: key %q window %v", id, tk.IdempotencyKey, tk.UniqueFor)
		}
	}

	u := submit("--input", `{"day": 2}`, "--unique")
	if again := submit("--input", `{"day":2}`, "--unique"); again != u {
		t.Fatalf("--unique with the same type and input printed %s, want %s", again, u)
	}
	if other := submit("--input", `{"day":3}`, "--unique"); other == u {
		t.Fatalf("--unique with another input printed the first task %s", u)
	}

	// Two binaries at once on a key whose window passed.
	first := submit("--input", `{"day":4}`, "--idempotency-key", "race", "--unique-for", "2s")
	passed("race", 2*time.Second)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 2 {
		cmd := exec.CommandContext(ctx, bin, "submit", "--type", "report", "--input", `{"day":4}`, "--idempotency-key", "race", "--unique-for", "2s")
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("racing submit %d: %v\n%s", i, err, outs[i])
		}
	}
	a, b := strings.TrimSpace(outs[0].String()), strings.TrimSpace(outs[1].String())
	if a != b || a == first {
		t.Fatalf("racing submits printed %q and %q (the first window's task %s): want one new task", a, b, first)
	}
	n := 0
	for _, tk := range listCLI(t, ctx, bin, env) {
		if tk.IdempotencyKey == "race" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d tasks of key race, want 2 (one per window)", n)
	}
}
