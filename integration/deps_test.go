package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/task"
)

// depsConfig: quick polls, short leases noticed quickly, and a monitor
// that repairs every 2s (repair_after comes from the environment, as
// S3QUEUE_MONITOR_REPAIR_AFTER); finished tasks are kept for the checks.
const depsConfig = `
[worker]
concurrency = 2
poll_min = "20ms"
poll_max = "200ms"
lease_margin = "200ms"
shutdown_grace = "2s"
member_ttl = "3s"
standby_poll = "1s"
drain_max = "2s"
dedicated = true
[monitor]
interval = "200ms"
stale_after = "500ms"
retention = "0"
`

// depsHandler records each run's start and end (local time, one host for
// every process) in the worker's own file, and takes a second.
const depsHandler = `echo "start $S3QUEUE_TASK_ID $(date +%s.%N)" >> "$RUNS"; sleep 1; ` +
	`echo "end $S3QUEUE_TASK_ID $(date +%s.%N)" >> "$RUNS"; echo '{"ok":true}'`

// TestDependencyChainSurvivesKilledWorkers: a chain of 8 tasks and a
// fan-out/fan-in DAG (a root, 10 tasks after it, a join after all 10, a
// tail after the join), submitted up front through the Go producer
// (DependsOn; `s3queue submit --after` was not on this branch yet), run by 3 `s3queue worker` processes and an `s3queue
// monitor`, while the worker running a mid-chain task is killed (SIGKILL)
// four times, at different moments of its run (the last ones near the
// run's end, where the end and its settle are written), and replaced.
//
// Every task succeeds; no task starts before the last of its parents has
// succeeded (by the runs' local times on this one host, and by the tasks'
// histories in S3 time, within the S3 clock's uncertainty); each child is
// released exactly once; nothing is left under deps/ or ended/.
func TestDependencyChainSurvivesKilledWorkers(t *testing.T) {
	q := newMinIOQueue(t, 4, 4*time.Minute)
	ctx := q.ctx
	prod, err := producer.New(ctx, q.st, producer.Config{LeaseMargin: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	bin := buildCLI(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "queue.toml")
	if err := os.WriteFile(cfg, []byte(depsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_MONITOR_REPAIR_AFTER=2s"}
	var runFiles []string
	workers := map[string]*cliProcess{}
	startWorker := func(name string) {
		runs := filepath.Join(dir, "runs-"+name)
		runFiles = append(runFiles, runs)
		workers[name] = startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+name, "RUNS="+runs),
			"worker", "--config", cfg, "--exec", "job="+depsHandler)
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		startWorker(name)
	}
	mon := startCLI(t, bin, env, "monitor", "--config", cfg)

	// The graph: parents[id] are the tasks id waits for.
	parents := map[string][]string{}
	submit := func(after ...string) string {
		id, err := prod.Submit(ctx, "job", nil, producer.Options{DependsOn: after, Timeout: 3 * time.Second, MaxAttempts: 20})
		if err != nil {
			t.Fatalf("submit after %v: %v", after, err)
		}
		parents[id] = after
		return id
	}
	began := time.Now()
	chain := []string{submit()}
	for range 7 {
		chain = append(chain, submit(chain[len(chain)-1]))
	}
	root := submit()
	var middle []string
	for range 10 {
		middle = append(middle, submit(root))
	}
	join := submit(middle...)
	tail := submit(join)
	all := append(append(append([]string(nil), chain...), root, join, tail), middle...)
	t.Logf("submitted %d tasks (a chain of %d, a DAG of %d) in %v", len(all), len(chain), len(all)-len(chain), time.Since(began).Round(time.Millisecond))

	// Kill the worker running a mid-chain task, four times, each at
	// another moment of the run; a new worker takes its place.
	delays := []time.Duration{300 * time.Millisecond, 900 * time.Millisecond, 1000 * time.Millisecond, 1100 * time.Millisecond}
	var killed []string
	for i, delay := range delays {
		var name, id string
		var at time.Time
		waitUntil(t, ctx, "a mid-chain task to run", time.Minute, func() bool {
			for n, p := range workers {
				if p == nil {
					continue
				}
				for _, r := range readDepRuns(t, filepath.Join(dir, "runs-"+n)) {
					if r.end.IsZero() && slices.Contains(chain[1:len(chain)-1], r.id) && !slices.Contains(killed, r.id) {
						name, id, at = n, r.id, r.start
						return true
					}
				}
			}
			return false
		})
		time.Sleep(time.Until(at.Add(delay)))
		workers[name].kill(t)
		workers[name] = nil
		killed = append(killed, id)
		t.Logf("kill %d: %s, %v into task %s (chain position %d)", i+1, name, delay, id, slices.Index(chain, id))
		startWorker(fmt.Sprintf("w%d", 4+i))
	}

	waitUntil(t, ctx, "every task to succeed", 3*time.Minute, func() bool {
		for _, id := range all {
			tk, err := prod.Get(ctx, id)
			if err != nil || tk.Status != task.Succeeded {
				return false
			}
		}
		return true
	})
	done := time.Since(began)

	// Runs, by their local times: no child starts before the end of its
	// parents' successful runs (the last run of each: a killed run never
	// ends).
	starts, ends := map[string][]time.Time{}, map[string]time.Time{}
	for _, f := range runFiles {
		for _, r := range readDepRuns(t, f) {
			starts[r.id] = append(starts[r.id], r.start)
			if r.end.After(ends[r.id]) {
				ends[r.id] = r.end
			}
		}
	}
	var hops []time.Duration // from the last parent's end to the child's first start
	var chainHops []string
	for _, id := range all {
		if len(parents[id]) == 0 {
			continue
		}
		var last time.Time
		for _, p := range parents[id] {
			if ends[p].After(last) {
				last = ends[p]
			}
		}
		first := firstStart(starts[id])
		if first.Before(last) {
			t.Errorf("task %s started at %s, before its last parent's run ended at %s", id, first.Format(time.StampMicro), last.Format(time.StampMicro))
		}
		hops = append(hops, first.Sub(last))
		if i := slices.Index(chain, id); i > 0 {
			chainHops = append(chainHops, fmt.Sprintf("%d:%v", i, first.Sub(last).Round(time.Millisecond)))
		}
	}
	t.Logf("chain hops (position: from the parent's end to the start): %s", strings.Join(chainHops, " "))
	for i, id := range killed {
		// A killed run that wrote its end line was killed while its worker
		// committed the end or settled the child: the next run or the
		// monitor's repair finished the work.
		pos := slices.Index(chain, id)
		t.Logf("kill %d (chain position %d): %d runs; the child started %v after this task's last run ended",
			i+1, pos, len(starts[id]), firstStart(starts[chain[pos+1]]).Sub(ends[id]).Round(time.Millisecond))
	}

	// Histories, in S3 time: the first claim of a child is no earlier than
	// its last parent's success, within the uncertainty of the clocks that
	// stamped them (S3's Date has a resolution of 1s); each child was
	// released once, and learned that each parent succeeded.
	minGap := time.Hour
	for _, id := range all {
		tk, err := prod.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(parents[id]) == 0 {
			continue
		}
		if n := countRelease(*tk); n != 1 {
			t.Errorf("task %s released %d times", id, n)
		}
		for _, d := range tk.Deps {
			if d.Ended != task.Succeeded {
				t.Errorf("task %s: dependency %s ended %q", id, d.ID, d.Ended)
			}
		}
		var last time.Time
		for _, p := range parents[id] {
			pt, err := prod.Get(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if at := transitionAt(*pt, task.Running, task.Succeeded); at.After(last) {
				last = at
			}
		}
		claimed := transitionAt(*tk, task.Pending, task.Running)
		if gap := claimed.Sub(last); gap < minGap {
			minGap = gap
		}
		if claimed.Before(last.Add(-time.Second)) {
			t.Errorf("task %s claimed at %s, before its last parent succeeded at %s", id, claimed, last)
		}
	}

	// Nothing left of the edges and markers, once the repair has settled
	// what the kills interrupted.
	waitUntil(t, ctx, "deps/ and ended/ to empty", 30*time.Second, func() bool {
		return len(listPrefix(ctx, t, q.srv.Minio(), q.bucket, "q/deps/"))+len(listPrefix(ctx, t, q.srv.Minio(), q.bucket, "q/"+deps.EndedPrefix)) == 0
	})
	cleanAfter := time.Since(began)

	slices.Sort(hops)
	t.Logf("every task succeeded after %v (the critical path, %d runs of 1s, is the chain's); deps/ and ended/ empty after %v",
		done.Round(time.Millisecond), len(chain), cleanAfter.Round(time.Millisecond))
	t.Logf("from the last parent's end to the child's start: min %v, median %v, max %v over %d children",
		hops[0].Round(time.Millisecond), hops[len(hops)/2].Round(time.Millisecond), hops[len(hops)-1].Round(time.Millisecond), len(hops))
	t.Logf("least gap from the last parent's success to the child's claim in the histories (S3 time): %v", minGap.Round(time.Millisecond))
	runs := 0
	for _, s := range starts {
		runs += len(s)
	}
	t.Logf("%d runs for %d tasks", runs, len(all))

	for _, p := range workers {
		if p != nil {
			p.stop(t)
		}
	}
	mon.stop(t)
}

// depRun is one run recorded by depsHandler.
type depRun struct {
	id         string
	start, end time.Time
}

// readDepRuns reads a worker's run file: a start line per run, and an end
// line for each run that finished.
func readDepRuns(t *testing.T, path string) []depRun {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []depRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line still being written
		}
		secs, err := strconv.ParseFloat(fields[2], 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, int64(secs*1e9))
		switch fields[0] {
		case "start":
			out = append(out, depRun{id: fields[1], start: at})
		case "end":
			for i := len(out) - 1; i >= 0; i-- {
				if out[i].id == fields[1] && out[i].end.IsZero() {
					out[i].end = at
					break
				}
			}
		}
	}
	return out
}

func firstStart(ts []time.Time) time.Time {
	return slices.MinFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
}

// countRelease counts a task's moves from blocked to pending.
func countRelease(tk task.Task) int {
	n := 0
	for _, h := range tk.History {
		if h.From == task.Blocked && h.To == task.Pending {
			n++
		}
	}
	return n
}

// transitionAt is the time of the task's first move from one status to
// another (zero if none): the first claim, or the success.
func transitionAt(tk task.Task, from, to task.Status) time.Time {
	for _, h := range tk.History {
		if h.From == from && h.To == to {
			return h.At
		}
	}
	return time.Time{}
}

// listPrefix lists the keys under prefix with minio-go.
func listPrefix(ctx context.Context, t *testing.T, c *minio.Client, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}
