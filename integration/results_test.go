package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// Results through the binary, on MinIO, with two worker processes: a
// command's 1 MiB result is stored apart under results/ and read back
// intact by `get --json` and `s3queue result`; a small one stays inline;
// a monitor with result_ttl drops both (the object deleted, the tasks
// kept, `get` saying when); a monitor's retention deletes a result object
// with its task.
func TestResultsStoredApartExpireAndGoWithTheirTask(t *testing.T) {
	q := newMinIOQueue(t, 2, 4*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_WORKER_POLL_MAX=1s", "S3QUEUE_WORKER_RESULT_INLINE_MAX=16384"}
	const big = `head -c 1048576 /dev/zero | tr '\0' x`
	var workers []*cliProcess
	for _, id := range []string{"A", "B"} {
		workers = append(workers, startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+id),
			"worker", "--exec", "big="+big, "--exec", "small=cat"))
	}
	large := submitCLI(t, ctx, bin, env, "big", `{}`, time.Minute)
	small := submitCLI(t, ctx, bin, env, "small", `{"n":1}`, time.Minute)
	waitUntil(t, ctx, "both tasks to succeed", time.Minute, func() bool {
		return getCLI(t, ctx, bin, env, large).Status == task.Succeeded && getCLI(t, ctx, bin, env, small).Status == task.Succeeded
	})
	for _, w := range workers {
		w.stop(t)
	}

	want, _ := json.Marshal(strings.Repeat("x", 1<<20))
	lt := getCLI(t, ctx, bin, env, large)
	if lt.ResultRef == nil || !bytes.Equal(lt.Result, want) || lt.ResultRef.Size != int64(len(want)) {
		t.Fatalf("large result: ref %+v, %d bytes read back, want %d", lt.ResultRef, len(lt.Result), len(want))
	}
	if obj, err := q.st.Get(ctx, lt.ResultRef.Key); err != nil || !bytes.Equal(obj.Body, want) || !strings.HasPrefix(lt.ResultRef.Key, "results/") {
		t.Fatalf("result object %s: %v", lt.ResultRef.Key, err)
	}
	if out := runCLI(t, ctx, bin, env, "result", large); !bytes.Equal(out, append(want, '\n')) {
		t.Fatalf("s3queue result printed %d bytes, want %d", len(out), len(want)+1)
	}
	if out := string(runCLI(t, ctx, bin, env, "get", large)); !strings.Contains(out, "stored apart at "+lt.ResultRef.Key) {
		t.Fatalf("s3queue get does not say where the result is:\n%.2000s", out)
	}
	var compact bytes.Buffer
	if st := getCLI(t, ctx, bin, env, small); st.ResultRef != nil || json.Compact(&compact, st.Result) != nil || compact.String() != `{"n":1}` {
		t.Fatalf("small result: ref %+v, result %s; want inline", st.ResultRef, st.Result)
	}

	// The result TTL drops both results; the tasks stay.
	mon := startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_MONITOR_RESULT_TTL=3s", "S3QUEUE_MONITOR_INTERVAL=500ms", "S3QUEUE_MONITOR_SWEEP_MAX=1s"), "monitor")
	waitUntil(t, ctx, "both results to expire", time.Minute, func() bool {
		return !getCLI(t, ctx, bin, env, large).ResultExpiredAt.IsZero() && !getCLI(t, ctx, bin, env, small).ResultExpiredAt.IsZero()
	})
	mon.stop(t)
	for _, id := range []string{large, small} {
		tk := getCLI(t, ctx, bin, env, id)
		if tk.Status != task.Succeeded || tk.HoldsResult() {
			t.Fatalf("task %s after its result TTL: %s, result %d bytes, ref %+v", id, tk.Status, len(tk.Result), tk.ResultRef)
		}
		if out := string(runCLI(t, ctx, bin, env, "get", id)); !strings.Contains(out, "expired at") {
			t.Fatalf("s3queue get %s does not say the result expired:\n%s", id, out)
		}
	}
	if _, err := q.st.Get(ctx, lt.ResultRef.Key); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("expired result object: %v, want deleted", err)
	}
	cmd := exec.CommandContext(ctx, bin, "result", large)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "expired at") {
		t.Fatalf("s3queue result of an expired result: %v\n%s", err, out)
	}

	// Retention deletes a result object with its task.
	w := startCLI(t, bin, env, "worker", "--exec", "big="+big)
	kept := submitCLI(t, ctx, bin, env, "big", `{}`, time.Minute)
	waitUntil(t, ctx, "the third task to succeed", time.Minute, func() bool { return getCLI(t, ctx, bin, env, kept).Status == task.Succeeded })
	w.stop(t)
	ref := getCLI(t, ctx, bin, env, kept).ResultRef
	if ref == nil {
		t.Fatal("the third task's result is not stored apart")
	}
	mon = startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_MONITOR_RETENTION=2s", "S3QUEUE_MONITOR_INTERVAL=500ms", "S3QUEUE_MONITOR_SWEEP_MAX=1s"), "monitor")
	waitUntil(t, ctx, "retention to delete the task", time.Minute, func() bool {
		_, err := q.prod.Get(ctx, kept)
		return errors.Is(err, producer.ErrNotFound)
	})
	mon.stop(t)
	if _, err := q.st.Get(ctx, ref.Key); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("result object %s outlived its task: %v", ref.Key, err)
	}
	page, err := q.st.List(ctx, task.ResultsPrefix, s3store.ListOptions{})
	if err != nil || len(page.Objects) != 0 {
		t.Fatalf("objects left under results/: %+v %v", page.Objects, err)
	}
}
