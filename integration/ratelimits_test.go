package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// A rate limit through the binary, on MinIO, with three worker processes
// (two given the limit by --rate-limit, one by queue.toml's [rate_limits]):
// 20 tasks of the limited type start at most 3 per 2 s window of S3 time
// between them (by their claims in the tasks' histories), all succeed at
// their first attempt, and tasks of another type submitted behind them do
// not wait for the limited tasks' windows.
func TestRateLimitThroughTheBinaryWithThreeWorkers(t *testing.T) {
	q := newMinIOQueue(t, 2, 3*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	const limit, interval = 3, 2 * time.Second
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_WORKER_POLL_MAX=1s", "S3QUEUE_WORKER_DEDICATED=true"}
	config := filepath.Join(t.TempDir(), "queue.toml")
	if err := os.WriteFile(config, []byte("[rate_limits]\napi = \"3/2s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var workers []*cliProcess
	for i, id := range []string{"A", "B", "C"} {
		args := []string{"worker", "--exec", "api=cat", "--exec", "job=cat", "--concurrency", "8"}
		if i < 2 {
			args = append(args, "--rate-limit", fmt.Sprintf("api=%d/%v", limit, interval))
		} else {
			args = append(args, "--config", config)
		}
		// scan_lag 1s: the tasks, submitted by separate processes whose
		// clocks read S3's one-second Date, get ids of the same second out
		// of submit order, so many land behind keys a scan has passed; the
		// scans find them within a scan lag (docs/shards.md), which
		// is not what this test measures.
		workers = append(workers, startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+id, "S3QUEUE_WORKER_SCAN_LAG=1s"), args...))
	}
	var api, jobs []string
	for i := range 20 {
		api = append(api, submitCLI(t, ctx, bin, env, "api", fmt.Sprintf(`{"n":%d}`, i), time.Minute))
	}
	for i := range 4 {
		jobs = append(jobs, submitCLI(t, ctx, bin, env, "job", fmt.Sprintf(`{"n":%d}`, i), time.Minute))
	}
	jobsAt := time.Now()
	done := func(ids []string) bool {
		for _, id := range ids {
			if getCLI(t, ctx, bin, env, id).Status != task.Succeeded {
				return false
			}
		}
		return true
	}
	waitUntil(t, ctx, "the job tasks to run", 15*time.Second, func() bool { return done(jobs) })
	// Their wait, by S3 time: from their submit to their claim.
	var jobWait time.Duration
	jobClaims := map[string]time.Time{}
	for _, id := range jobs {
		tk := getCLI(t, ctx, bin, env, id)
		for _, h := range tk.History {
			if h.To == task.Running {
				jobWait = max(jobWait, h.At.Sub(tk.CreatedAt))
				jobClaims[id] = h.At
			}
		}
	}
	t.Logf("the 4 job tasks were claimed within %v of their submit (done %v after the last)", jobWait.Round(100*time.Millisecond), time.Since(jobsAt).Round(100*time.Millisecond))
	waitUntil(t, ctx, "the rate-limited api tasks to run", 2*time.Minute, func() bool { return done(api) })

	perWindow := map[int64][]string{}
	var starts []time.Time
	for _, id := range api {
		tk := getCLI(t, ctx, bin, env, id)
		if tk.Attempt != 1 {
			t.Errorf("api task %s ran at attempt %d, want 1: waiting for the limit uses no attempt", id, tk.Attempt)
		}
		for _, h := range tk.History {
			if h.To == task.Running {
				k := h.At.UnixNano() / int64(interval)
				perWindow[k] = append(perWindow[k], h.Worker)
				starts = append(starts, h.At)
			}
		}
	}
	if len(starts) != len(api) {
		t.Errorf("%d starts of %d api tasks", len(starts), len(api))
	}
	for k, who := range perWindow {
		if len(who) > limit {
			t.Errorf("the window at %v has %d starts (by %v), over the limit of %d", time.Unix(0, k*int64(interval)).UTC(), len(who), who, limit)
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	span := starts[len(starts)-1].Sub(starts[0])
	t.Logf("20 api tasks started in %d windows over %v; by worker: %v", len(perWindow), span.Round(100*time.Millisecond), workersOf(perWindow))
	if !strings.Contains(workers[2].stderr.String(), `rate_limits="api=3/2s"`) {
		t.Errorf("worker C did not start with the limit of its queue.toml:\n%s", workers[2].stderr.String())
	}
	if min := time.Duration(len(api)/limit-1) * interval; span < min {
		t.Errorf("20 starts within %v, less than the %v a limit of %d per %v allows", span, min, limit, interval)
	}
	// Queued behind the api tasks, a job would start in their last window
	// (the 6th or later, 10 s or more after the first), when the last of
	// them are claimed, or after it: by S3 time, each job's claim comes
	// before that window opens.
	last := time.Unix(0, starts[len(starts)-1].UnixNano()/int64(interval)*int64(interval))
	for _, id := range jobs {
		if at := jobClaims[id]; !at.Before(last) {
			t.Errorf("job task %s was claimed at %v, %v after the first api start: it waited for the api tasks' last window (opened %v)",
				id, at.UTC(), at.Sub(starts[0]), last.UTC())
		}
	}
	for _, w := range workers {
		w.stop(t)
	}
}

// workersOf counts the starts of each worker.
func workersOf(perWindow map[int64][]string) map[string]int {
	n := map[string]int{}
	for _, who := range perWindow {
		for _, w := range who {
			n[w]++
		}
	}
	return n
}
