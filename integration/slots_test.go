package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// slotsConfig: depsConfig's quick workers and monitor, and submits whose
// lease (3s) a killed worker loses quickly, retried 200ms later.
const slotsConfig = depsConfig + `
[submit]
timeout = "3s"
max_attempts = 20
retry_initial = "200ms"
`

// slotsHandler appends each run's start and end (local time, one host for
// every process) to the shared file $RUNS, with the task's slot key (from
// its input), its attempt and its worker, and takes a second. A run whose
// worker is killed writes no end: the worker's death kills the shell
// (Pdeathsig).
const slotsHandler = `key=$(sed -n 's/.*"key":"\([^"]*\)".*/\1/p'); ` +
	`echo "start $S3QUEUE_TASK_ID $key $S3QUEUE_ATTEMPT $S3QUEUE_WORKER_ID $(date +%s.%N)" >> "$RUNS"; sleep 1; ` +
	`echo "end $S3QUEUE_TASK_ID $key $S3QUEUE_ATTEMPT $S3QUEUE_WORKER_ID $(date +%s.%N)" >> "$RUNS"; echo '{"ok":true}'`

// TestSlotsSurviveKilledWorkers: 6 tasks on each of 3 slot keys, submitted
// with `s3queue submit --slot KEY` (queue admission) while 3 `s3queue
// worker` processes run them (a second each) and an `s3queue monitor`
// repairs every 2s; then a replace on the first key, and a drop-if-running
// on the second, which is refused ("slot busy", exit 1) and creates
// nothing. The worker running a slot's holder is killed (SIGKILL) four
// times, at different moments of its run (the last ones near its end,
// where the end is recorded and the slot passed on), and replaced.
//
// Checked from the tasks' histories (S3 time): every task queued ends
// succeeded, but the one the replace took out of the queue (canceled) and
// the holder it asked to stop (canceled, or succeeded if its run ended
// first); the tasks of one key never run at once (from a task's first
// claim to its end, so also from its last claim, the spans of a key are
// disjoint, within the S3 clock's resolution); each key's tasks ran in
// submit order (the replace in the place of the task it replaced); and at
// the end every slot object has no holder and an empty queue, and ended/
// is empty. The runs' own log (local time) is reported, not asserted: a
// killed worker's run is counted up to its kill.
func TestSlotsSurviveKilledWorkers(t *testing.T) {
	q := newMinIOQueue(t, 4, 3*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "queue.toml")
	if err := os.WriteFile(cfg, []byte(slotsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	runsFile := filepath.Join(dir, "runs")
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_MONITOR_REPAIR_AFTER=2s", "S3QUEUE_MONITOR_SWEEP_MAX=4s", "RUNS=" + runsFile}
	workers := map[string]*cliProcess{}
	startWorker := func(name string) {
		workers[name] = startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+name),
			"worker", "--config", cfg, "--exec", "job="+slotsHandler)
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		startWorker(name)
	}
	mon := startCLI(t, bin, env, "monitor", "--config", cfg)

	// submit runs `s3queue submit` to completion.
	type submitted struct {
		id, stderr string
		code       int
	}
	submit := func(key, admission string, seq int) submitted {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, "submit", "--config", cfg, "--type", "job",
			"--input", fmt.Sprintf(`{"key":%q,"seq":%d}`, key, seq), "--slot", key, "--admission", admission)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("s3queue submit --slot %s: %v", key, err)
		}
		return submitted{id: strings.TrimSpace(stdout.String()), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	}

	keys := []string{"customer-1", "customer-2", "customer-3"}
	const perKey = 6
	order := map[string][]string{} // each key's tasks, in submit order
	keyOf := map[string]string{}
	began := time.Now()
	for seq := range perKey {
		for _, key := range keys {
			s := submit(key, "queue", seq)
			if s.code != 0 || !task.ValidID(s.id) {
				t.Fatalf("submit %s #%d: exit %d, id %q:\n%s", key, seq, s.code, s.id, s.stderr)
			}
			order[key] = append(order[key], s.id)
			keyOf[s.id] = key
		}
	}
	submitTook := time.Since(began)

	// A replace on the first key (its queue still has tasks waiting) and a
	// drop-if-running on the second, which must create nothing.
	replace := submit(keys[0], "replace", perKey)
	if replace.code != 0 || !task.ValidID(replace.id) {
		t.Fatalf("submit --admission replace: exit %d, id %q:\n%s", replace.code, replace.id, replace.stderr)
	}
	keyOf[replace.id] = keys[0]
	// Task objects only: the workers and the monitor run meanwhile, and
	// the ready pointers they write and delete (a slot granted to the next
	// task) come and go under tasks/ too.
	taskObjects := func() []string {
		keys := listPrefix(ctx, t, q.srv.Minio(), q.bucket, "q/tasks/")
		return slices.DeleteFunc(keys, shards.IsPointer)
	}
	before := taskObjects()
	drop := submit(keys[1], "drop-if-running", perKey)
	after := taskObjects()
	if drop.code != 1 || drop.id != "" || !strings.Contains(drop.stderr, "slot busy") {
		t.Errorf("submit --admission drop-if-running on a busy slot: exit %d, stdout %q, stderr %q; want exit 1, nothing printed, \"slot busy\"",
			drop.code, drop.id, drop.stderr)
	}
	if !slices.Equal(before, after) {
		t.Errorf("a refused drop-if-running changed tasks/: %d objects before, %d after", len(before), len(after))
	}
	t.Logf("submitted %d tasks on %d keys through the CLI in %v; drop-if-running: exit %d, %s",
		perKey*len(keys), len(keys), submitTook.Round(time.Millisecond), drop.code, strings.TrimSpace(drop.stderr))

	// Kill the worker running a slot's holder, six times, each at another
	// moment of its run: mid-run (the lease expires, the task runs again
	// and keeps its slot), as the run's end line is written (before the
	// outcome's commit), twice as its ended marker lands (before or after
	// the end's write: then the monitor's repair passes the slot on), and
	// as its end lands in the bucket (before or while its slot is passed
	// on). A new worker takes its place each time.
	label := func(id string) string {
		if id == replace.id {
			return keys[0] + " replace"
		}
		return fmt.Sprintf("%s #%d", keyOf[id], slices.Index(order[keyOf[id]], id))
	}
	type moment int
	const (
		intoRun moment = iota
		atEndLine
		atMarker
		atEnd
	)
	kills := []struct {
		at   moment
		into time.Duration
	}{{intoRun, 300 * time.Millisecond}, {intoRun, 900 * time.Millisecond}, {at: atEndLine}, {at: atMarker}, {at: atMarker}, {at: atEnd}}
	type kill struct {
		run  slotRun
		what string
	}
	var killed []kill
	killedAt := map[string]time.Time{} // worker → when it was killed
	// closely polls cond (every 2ms) for up to 5s.
	closely := func(what string, cond func() bool) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen within 5s", what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for i, k := range kills {
		var picked slotRun
		waitUntil(t, ctx, "a slot's holder to start running", time.Minute, func() bool {
			for _, r := range readSlotRuns(t, runsFile) {
				if r.end.IsZero() && workers[r.worker] != nil && !slices.ContainsFunc(killed, func(k kill) bool { return k.run.id == r.id }) &&
					time.Since(r.start) < 250*time.Millisecond {
					picked = r
					return true
				}
			}
			return false
		})
		var what string
		switch k.at {
		case intoRun:
			time.Sleep(time.Until(picked.start.Add(k.into)))
			what = fmt.Sprintf("%v into the run", k.into)
		case atEndLine:
			closely("the run's end line", func() bool {
				return slices.ContainsFunc(readSlotRuns(t, runsFile), func(r slotRun) bool {
					return r.id == picked.id && r.attempt == picked.attempt && r.worker == picked.worker && !r.end.IsZero()
				})
			})
			what = "at the run's end line"
		case atMarker:
			closely("the ended marker", func() bool {
				return slices.ContainsFunc(listPrefix(ctx, t, q.srv.Minio(), q.bucket, "q/"+deps.EndedPrefix), func(k string) bool {
					return strings.Contains(k, picked.id)
				})
			})
			what = "as the ended marker landed"
		case atEnd:
			closely("the task's end", func() bool {
				tk, err := q.prod.Get(ctx, picked.id)
				return err == nil && tk.Status.Terminal()
			})
			what = "as the end landed"
		}
		workers[picked.worker].kill(t)
		workers[picked.worker] = nil
		killedAt[picked.worker] = time.Now()
		killed = append(killed, kill{run: picked, what: what})
		t.Logf("kill %d: %s, %s of task %s (%s, attempt %d)", i+1, picked.worker, what, picked.id, label(picked.id), picked.attempt)
		startWorker(fmt.Sprintf("w%d", 4+i))
	}
	var killedTasks []string
	for _, k := range killed {
		killedTasks = append(killedTasks, k.run.id)
	}

	all := slices.Concat(order[keys[0]], order[keys[1]], order[keys[2]], []string{replace.id})
	tasks := map[string]*task.Task{}
	waitUntil(t, ctx, "every task to end", 2*time.Minute, func() bool {
		for _, id := range all {
			tk, err := q.prod.Get(ctx, id)
			if err != nil || !tk.Status.Terminal() {
				return false
			}
			tasks[id] = tk
		}
		return true
	})
	done := time.Since(began)

	// Outcomes: the replace took the task waiting next out of the queue,
	// and asked the holder of that moment to stop.
	var replaced, stopped []string
	for _, id := range all {
		tk := tasks[id]
		for _, h := range tk.History {
			switch {
			case h.To == task.Canceled && h.Reason == "replaced in slot "+keys[0]+" by "+replace.id:
				replaced = append(replaced, id)
			case h.From == task.Running && h.To == task.Running && h.Reason == "cancel requested",
				h.From == task.Pending && h.To == task.Canceled:
				stopped = append(stopped, id)
			}
		}
	}
	if len(replaced) != 1 || keyOf[replaced[0]] != keys[0] {
		t.Fatalf("the replace took %v out of the queue of %s; want one task of that key", replaced, keys[0])
	}
	if len(stopped) > 1 || len(stopped) == 1 && keyOf[stopped[0]] != keys[0] {
		t.Errorf("tasks asked to stop: %v; want the holder of %s at the replace, at most", stopped, keys[0])
	}
	for _, id := range all {
		want := []task.Status{task.Succeeded}
		switch {
		case id == replaced[0]:
			want = []task.Status{task.Canceled}
		case slices.Contains(stopped, id):
			want = []task.Status{task.Canceled, task.Succeeded}
		}
		if st := tasks[id].Status; !slices.Contains(want, st) {
			t.Errorf("task %s (%s) ended %s; want one of %v:\n%s", id, keyOf[id], st, want, historyText(tasks[id]))
		}
	}
	for _, id := range stopped {
		t.Logf("the holder of %s at the replace, %s, was asked to stop and ended %s", keys[0], id, tasks[id].Status)
	}

	// Each key's tasks that ran, by their first claim: in submit order (the
	// replace in the replaced task's place), and never two at once.
	runs := readSlotRuns(t, runsFile)
	want := map[string][]string{}
	for _, key := range keys {
		for _, id := range order[key] {
			if id == replaced[0] {
				id = replace.id
			}
			if transitionAt(*tasks[id], task.Pending, task.Running).IsZero() {
				continue // canceled before it ran
			}
			want[key] = append(want[key], id)
		}
	}
	const tolerance = time.Second // the S3 Date header's resolution
	var s3Handoffs, grantLags, localHandoffs, killedHandoffs []time.Duration
	minGap := time.Hour
	for _, key := range keys {
		spans := []slotSpan{}
		for _, id := range want[key] {
			spans = append(spans, spanOf(tasks[id]))
		}
		ran := slices.Clone(spans)
		slices.SortStableFunc(ran, func(a, b slotSpan) int { return a.firstClaim.Compare(b.firstClaim) })
		var got []string
		for _, s := range ran {
			got = append(got, s.id)
		}
		if !slices.Equal(got, want[key]) {
			t.Errorf("%s: tasks claimed in the order %v; submitted in the order %v", key, got, want[key])
		}
		for i := 1; i < len(spans); i++ {
			prev, next := spans[i-1], spans[i]
			gap := next.firstClaim.Sub(prev.end)
			minGap = min(minGap, gap)
			if gap < -tolerance {
				t.Errorf("%s: task %s claimed at %s, while task %s ran until %s (%v before its end)",
					key, next.id, next.firstClaim.Format(time.StampMilli), prev.id, prev.end.Format(time.StampMilli), -gap)
			}
			for j := range i - 1 {
				if other := spans[j]; other.end.After(next.firstClaim.Add(tolerance)) {
					t.Errorf("%s: task %s claimed at %s, while task %s ran until %s", key, next.id,
						next.firstClaim.Format(time.StampMilli), other.id, other.end.Format(time.StampMilli))
				}
			}
			s3Handoffs = append(s3Handoffs, gap)
			if !next.granted.IsZero() {
				grantLags = append(grantLags, next.granted.Sub(prev.end))
			}
			if l, ok := localHandoff(runs, prev.id, next.id); ok {
				if slices.Contains(killedTasks, prev.id) {
					killedHandoffs = append(killedHandoffs, l)
				} else {
					localHandoffs = append(localHandoffs, l)
				}
			}
		}
	}

	// What each kill interrupted: the attempt's end recorded by the killed
	// worker or not (then the task ran again), and the slot's hand-off.
	for i, k := range killed {
		tk := tasks[k.run.id]
		by := ""
		for _, h := range tk.History {
			if h.To.Terminal() {
				by = h.Worker
			}
		}
		committed := by == k.run.worker
		next := "none (the key's last task)"
		if ids := want[keyOf[k.run.id]]; slices.Contains(ids, k.run.id) {
			if j := slices.Index(ids, k.run.id) + 1; j < len(ids) {
				gap := spanOf(tasks[ids[j]]).firstClaim.Sub(spanOf(tk).end)
				next = fmt.Sprintf("claimed %v after its end (S3 time)", gap.Round(time.Millisecond))
			}
		}
		sp := spanOf(tk)
		passed := "no grant (the key's last task)"
		if ids := want[keyOf[k.run.id]]; slices.Contains(ids, k.run.id) {
			if j := slices.Index(ids, k.run.id) + 1; j < len(ids) {
				passed = fmt.Sprintf("granted %v after its end", spanOf(tasks[ids[j]]).granted.Sub(sp.end).Round(time.Millisecond))
			}
		}
		t.Logf("kill %d (%s %s, task %s): end recorded by the killed worker: %v; %d attempts; ended %s; next task %s, %s",
			i+1, k.run.worker, k.what, label(k.run.id), committed, tk.Attempt, tk.Status, passed, next)
	}

	// The runs' log, in local time: runs of two tasks of a key that overlap
	// (a killed run counts until its kill, a run stopped by its cancel until
	// its second's end).
	overlaps := 0
	for _, key := range keys {
		var rs []slotRun
		for _, r := range runs {
			if r.key == key {
				rs = append(rs, r)
			}
		}
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				ae, be := runEnd(a, killedAt), runEnd(b, killedAt)
				if a.id != b.id && a.start.Before(be) && b.start.Before(ae) {
					overlaps++
					t.Logf("runs overlap in the log: %s %s attempt %d on %s [%s, %s] and %s attempt %d on %s [%s, %s]", key,
						a.id, a.attempt, a.worker, a.start.Format(time.StampMilli), ae.Format(time.StampMilli),
						b.id, b.attempt, b.worker, b.start.Format(time.StampMilli), be.Format(time.StampMilli))
				}
			}
		}
	}

	// Every slot free, and no ended marker left, once the repair has passed
	// on what the kills interrupted.
	var slots []deps.Slot
	waitUntil(t, ctx, "every slot to be free", 30*time.Second, func() bool {
		slots = readSlots(t, q.srv.Minio(), q.bucket)
		for _, s := range slots {
			if s.Holder != nil || len(s.Queue) > 0 {
				return false
			}
		}
		return len(listPrefix(ctx, t, q.srv.Minio(), q.bucket, "q/"+deps.EndedPrefix)) == 0
	})
	freeAfter := time.Since(began)
	var names []string
	for _, s := range slots {
		names = append(names, s.Key)
	}
	slices.Sort(names)
	if !slices.Equal(names, keys) {
		t.Errorf("slot objects of %v; want %v", names, keys)
	}

	attempts := 0
	for _, id := range all {
		attempts += tasks[id].Attempt
	}
	t.Logf("every task ended after %v, every slot free after %v; %d runs logged, %d attempts recorded, for %d tasks",
		done.Round(time.Millisecond), freeAfter.Round(time.Millisecond), len(runs), attempts, len(all))
	t.Logf("hand-off in S3 time, from a holder's end to the next task's first claim: %s", durStats(s3Handoffs))
	t.Logf("  from a holder's end to the next task's grant (blocked to pending): %s", durStats(grantLags))
	t.Logf("  least gap: %v (asserted above -%v)", minGap.Round(time.Millisecond), tolerance)
	t.Logf("hand-off in the runs' log, from a holder's last run's end to the next task's first start: %s", durStats(localHandoffs))
	t.Logf("  after a holder whose worker was killed: %s", durStats(killedHandoffs))
	t.Logf("runs of two tasks of one key overlapping in the log: %d", overlaps)

	for _, p := range workers {
		if p != nil {
			p.stop(t)
		}
	}
	mon.stop(t)
}

// slotRun is one run recorded by slotsHandler.
type slotRun struct {
	id, key, worker string
	attempt         int
	start, end      time.Time
}

// readSlotRuns reads the runs' file: a start line per run, and an end line
// for each run that finished.
func readSlotRuns(t *testing.T, path string) []slotRun {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []slotRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 {
			continue // a line still being written
		}
		attempt, err1 := strconv.Atoi(fields[3])
		secs, err2 := strconv.ParseFloat(fields[5], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		r := slotRun{id: fields[1], key: fields[2], attempt: attempt, worker: fields[4], start: time.Unix(0, int64(secs*1e9))}
		switch fields[0] {
		case "start":
			out = append(out, r)
		case "end":
			for i := len(out) - 1; i >= 0; i-- {
				if o := out[i]; o.id == r.id && o.attempt == r.attempt && o.worker == r.worker && o.end.IsZero() {
					out[i].end = r.start
					break
				}
			}
		}
	}
	return out
}

// runEnd is when a run stopped: its end line, else (its worker killed, or
// the run stopped by a cancel) its worker's kill or its second's end,
// whichever came first: a run that sleeps its second writes its end line.
func runEnd(r slotRun, killedAt map[string]time.Time) time.Time {
	if !r.end.IsZero() {
		return r.end
	}
	end := r.start.Add(time.Second)
	if at, ok := killedAt[r.worker]; ok && at.After(r.start) && at.Before(end) {
		end = at
	}
	return end
}

// localHandoff is the time in the runs' log from the end of prev's last
// finished run to next's first start.
func localHandoff(runs []slotRun, prev, next string) (time.Duration, bool) {
	var end, start time.Time
	for _, r := range runs {
		if r.id == prev && r.end.After(end) {
			end = r.end
		}
		if r.id == next && (start.IsZero() || r.start.Before(start)) {
			start = r.start
		}
	}
	return start.Sub(end), !end.IsZero() && !start.IsZero()
}

// slotSpan is a task's time holding its slot's run, from its history (S3
// time): its first claim, the slot's grant (zero if it took a free slot at
// submit), and its end.
type slotSpan struct {
	id                       string
	granted, firstClaim, end time.Time
}

func spanOf(tk *task.Task) slotSpan {
	s := slotSpan{id: tk.ID}
	for _, h := range tk.History {
		switch {
		case h.From == task.Blocked && h.To == task.Pending:
			s.granted = h.At
		case h.From == task.Pending && h.To == task.Running:
			if s.firstClaim.IsZero() {
				s.firstClaim = h.At
			}
		case h.To.Terminal():
			s.end = h.At
		}
	}
	return s
}

// readSlots reads every slot object under q/slots/ with minio-go.
func readSlots(t *testing.T, c *minio.Client, bucket string) []deps.Slot {
	t.Helper()
	var out []deps.Slot
	for _, key := range listPrefix(t.Context(), t, c, bucket, "q/"+deps.SlotsPrefix) {
		obj, err := c.GetObject(t.Context(), bucket, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		var s deps.Slot
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("slot object %s: %v", key, err)
		}
		out = append(out, s)
	}
	return out
}

// historyText is a task's history, a line per transition.
func historyText(tk *task.Task) string {
	var b strings.Builder
	for _, h := range tk.History {
		fmt.Fprintf(&b, "  %s %s -> %s %s attempt %d %q\n", h.At.Format(time.StampMilli), h.From, h.To, h.Worker, h.Attempt, h.Reason)
	}
	return b.String()
}

// durStats is the min, median and max of ds.
func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("min %v, median %v, max %v over %d", r(ds[0]), r(ds[len(ds)/2]), r(ds[len(ds)-1]), len(ds))
}
