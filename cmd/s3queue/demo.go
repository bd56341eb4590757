package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// The demo's settings are tuned for a run of seconds, not for production:
// fast polling, short leases and retries, a monitor ticking twice a second.
const (
	demoType          = "demo.square"
	demoTimeout       = 3 * time.Second // lease of one attempt
	demoLeaseMargin   = 500 * time.Millisecond
	demoMemberTTL     = 3 * time.Second
	demoPollMin       = 20 * time.Millisecond
	demoPollMax       = 200 * time.Millisecond
	demoMonitorTick   = 500 * time.Millisecond
	demoDeadline      = 90 * time.Second
	demoConcurrency   = 4
	demoFlakyEvery    = 12 // one task in demoFlakyEvery fails its first attempt
	demoPoisonAttempt = 2  // the poison task's attempts
)

var demoRetry = task.RetryPolicy{
	InitialDelay: task.Duration(200 * time.Millisecond),
	MaxDelay:     task.Duration(time.Second),
	Multiplier:   2,
	Jitter:       0.2,
}

// Task modes of the demo.
const (
	modeOK     = ""
	modeFlaky  = "flaky"  // fails its first attempt, then succeeds
	modePoison = "poison" // always fails: dead after demoPoisonAttempt attempts
	modeVictim = "victim" // its first worker is killed while running it
	// modeFatal (demo_deps.go): fails for good, its dependents canceled
)

type demoInput struct {
	N    int    `json:"n"`
	Mode string `json:"mode,omitempty"`
	// Step names a task of the dependency graph (demo_deps.go).
	Step string `json:"step,omitempty"`
}

var demoCommand = &command{
	name: "demo", nargs: 0,
	ownStore: "run the demo on the store at `URL` instead of a directory; it must hold no queue yet",
	summary:  "run a whole queue in one process: producer, workers, monitor, and a worker killed mid-task",
	examples: []string{
		"s3queue demo",
		"s3queue demo --tasks 1000 --workers 8",
	},
	details: "Submits --tasks tasks to a fresh file:// store (a temporary directory, or --dir) and runs\n" +
		"--workers workers and a monitor against it. Some tasks fail once and are retried, one task\n" +
		"always fails and ends dead, and 7 more form a dependency graph (a build pipeline whose steps\n" +
		"wait for each other, and a task canceled because the one it depends on failed for good);\n" +
		"6 more use slots (three that run one at a time, a drop-if-running refused while the slot is\n" +
		"busy, and a replace that cancels the task waiting and the holder); one worker is killed while\n" +
		"it runs a task (from then on every\n" +
		"request it makes fails, as if its host died): the monitor re-dispatches that task after its\n" +
		"lease expires. Ends with the final status of every task read back from the store, retries,\n" +
		"duplicate executions, re-dispatches and the store requests by type. Exit 0 only if every task\n" +
		"reached its expected status. --store runs the demo on another store instead (it must hold no\n" +
		"queue yet). The demo reads neither S3QUEUE_* variables nor queue.toml, so it never touches a\n" +
		"real queue by accident.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var o demoOptions
		fs.StringVar(&o.dir, "dir", "", "keep the queue in this empty or new `directory` (default: a temporary one, removed afterwards)")
		fs.IntVar(&o.tasks, "tasks", 300, "how many tasks to submit (3..100000)")
		fs.IntVar(&o.workers, "workers", 4, "how many workers to run (1..64), besides the one that is killed")
		fs.IntVar(&o.shards, "shards", 4, "shard count of the demo queue (1..1000)")
		return func(ctx context.Context, _ []string) error {
			return a.demo(ctx, o)
		}
	},
}

type demoOptions struct {
	dir                    string
	tasks, workers, shards int
}

// demo is one run's shared state: what the handlers and worker events saw.
type demo struct {
	mu       sync.Mutex
	execs    map[string]int         // handler runs per task
	failures map[string]int         // runs that returned an error, per task
	finished map[string]task.Status // terminal outcomes committed by workers
	retried  int                    // failed attempts that went back to pending
	lost     int                    // leases healthy workers lost
	// completed: handlers that returned success; early: dependents whose
	// handler started before a dependency's had (demo_deps.go).
	completed map[string]bool
	early     []string
	// slotRunning is the task whose handler runs now, per slot key: a
	// second one starting is a breach of the slot (recorded in early).
	slotRunning map[string]string
	slotRefused bool

	victimClaimed chan struct{}
	victimOnce    sync.Once
}

func (a *app) demo(ctx context.Context, o demoOptions) (err error) {
	switch {
	case o.tasks < 3 || o.tasks > 100000:
		return usageError("demo: --tasks %d out of range 3..100000", o.tasks)
	case o.workers < 1 || o.workers > 64:
		return usageError("demo: --workers %d out of range 1..64", o.workers)
	case o.shards < 1 || o.shards > shards.MaxShards:
		return usageError("demo: --shards %d out of range 1..%d", o.shards, shards.MaxShards)
	case o.dir != "" && a.storeFlag != "":
		return usageError("demo: --dir and --store exclude each other")
	}
	start := time.Now()
	base, where, cleanup, err := a.demoStore(ctx, o)
	if err != nil {
		return err
	}
	defer cleanup()

	// Logs stay quiet so the progress line is readable.
	log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	counter := s3store.NewCounter(base)
	clk := clock.New(counter, clock.Config{})
	d := &demo{execs: map[string]int{}, failures: map[string]int{}, finished: map[string]task.Status{},
		completed: map[string]bool{}, victimClaimed: make(chan struct{})}

	p, err := producer.New(ctx, counter, producer.Config{Shards: o.shards, Logger: log, Clock: clk, LeaseMargin: demoLeaseMargin})
	if err != nil {
		return err
	}
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	mon, err := monitor.New(ctx, counter, monitor.Config{Interval: demoMonitorTick, LeaseMargin: demoLeaseMargin,
		RepairAfter: 2 * time.Second, KeepForever: true, Logger: log, Clock: clk})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() { defer wg.Done(); mon.Run(runCtx) }()
	defer func() { stopAll(); wg.Wait() }()

	opts := producer.Options{MaxAttempts: 3, Timeout: demoTimeout, Retry: &demoRetry}
	ids := make([]string, o.tasks)
	want := make(map[string]task.Status, o.tasks)

	// The victim goes first, to a worker of its own, which is then killed
	// while it runs the task.
	ids[0], err = p.Submit(ctx, demoType, demoInput{N: 0, Mode: modeVictim}, opts)
	if err != nil {
		return err
	}
	if err := d.runVictimWorker(ctx, counter, &wg); err != nil {
		return err
	}

	for i := range o.workers {
		w, err := worker.New(ctx, counter, worker.Config{
			ID: fmt.Sprintf("demo-worker-%d", i+1), Concurrency: demoConcurrency,
			PollMin: demoPollMin, PollMax: demoPollMax, ScanLag: 2 * time.Second, LeaseMargin: demoLeaseMargin,
			ShutdownGrace: 5 * time.Second, Logger: log, Clock: clk, OnEvent: d.onEvent,
			// Every demo worker polls a shard of its own from the start,
			// and a dead one's shard moves on within seconds.
			Dedicated: true, MemberTTL: demoMemberTTL,
		})
		if err != nil {
			return err
		}
		w.Handle(demoType, d.handler(false))
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(runCtx) }()
	}

	poison := o.tasks / 2
	reqs := make([]producer.Request, 0, o.tasks-1)
	for n := 1; n < o.tasks; n++ {
		in, ro := demoInput{N: n}, opts
		switch {
		case n == poison:
			in.Mode, ro.MaxAttempts = modePoison, demoPoisonAttempt
		case n%demoFlakyEvery == 5:
			in.Mode = modeFlaky
		}
		reqs = append(reqs, producer.Request{Type: demoType, Input: in, Options: ro})
	}
	for i, r := range p.SubmitBatch(ctx, reqs) {
		if r.Err != nil {
			return fmt.Errorf("demo: submit task %d: %w", i+1, r.Err)
		}
		ids[i+1] = r.ID
	}
	for n, id := range ids {
		want[id] = task.Succeeded
		if n == poison {
			want[id] = task.Dead
		}
	}
	graph, err := d.submitGraph(ctx, p, opts, o.tasks)
	if err != nil {
		return err
	}
	for _, g := range demoGraph {
		want[graph[g.step]] = g.want
	}
	slotIDs, err := d.submitSlot(ctx, p, opts, o.tasks+len(demoGraph))
	if err != nil {
		return err
	}
	for _, id := range slotIDs {
		want[id] = task.Succeeded
	}
	replace, err := d.submitReplace(ctx, p, opts, o.tasks+len(demoGraph)+len(slotIDs)+1)
	if err != nil {
		return err
	}
	want[replace.holder], want[replace.replaced], want[replace.latest] = task.Canceled, task.Canceled, task.Succeeded
	total := len(want)

	progress := newProgress(a.stderr, total)
	deadline := time.NewTimer(demoDeadline)
	defer deadline.Stop()
	ticker := time.NewTicker(progress.every)
	defer ticker.Stop()
	var stopped error
	for stopped == nil {
		done, ok, dead, retried := d.progress()
		ms := mon.Stats()
		done += ms.DeadLettered
		progress.draw(done, ok, dead+ms.DeadLettered, retried, ms.Redispatched, time.Since(start))
		if done >= total {
			break
		}
		select {
		case <-ctx.Done():
			stopped = errors.New("demo: interrupted")
		case <-deadline.C:
			stopped = fmt.Errorf("demo: tasks still unfinished after %v", demoDeadline)
		case <-ticker.C:
		}
	}
	progress.end()
	stopAll()
	wg.Wait()
	elapsed := time.Since(start)
	counts := counter.Counts()

	// Read the outcome back from the bucket rather than trusting the
	// workers' word; these requests are not counted above.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	final, skipped, err := readBack(rctx, base, log)
	if err != nil {
		return fmt.Errorf("demo: read back tasks: %w", err)
	}
	sum := d.summary(o, where, final, want, mon.Stats(), counts, elapsed)
	sum.skipped = skipped
	sum.graph = append(d.graphLines(final, graph), d.slotLines(final, slotIDs, replace)...)
	sum.graphProblems = append(d.checkGraph(rctx, p, graph), d.checkReplace(rctx, p, replace)...)
	sum.print(a.stdout)
	if stopped != nil {
		return stopped
	}
	if sum.wrong > 0 || len(skipped) > 0 {
		return fmt.Errorf("demo: %d of %d tasks did not reach their expected status", sum.wrong, total)
	}
	if len(sum.graphProblems) > 0 {
		return fmt.Errorf("demo: the dependency graph or a slot went wrong: %s", sum.graphProblems[0])
	}
	return nil
}

// readBack reads the status of every task in st, and the keys of the
// objects under tasks/ that are not readable tasks.
func readBack(ctx context.Context, st s3store.Store, log *slog.Logger) (final map[string]task.Status, skipped []string, err error) {
	q, err := s3queue.OpenStore(ctx, st, s3queue.Config{Logger: log, MustExist: true,
		OnSkip: func(key string, _ error) { skipped = append(skipped, key) }})
	if err != nil {
		return nil, nil, cause(err)
	}
	final = map[string]task.Status{}
	for t, err := range q.Tasks(ctx) {
		if err != nil {
			return nil, nil, cause(err)
		}
		final[t.ID] = t.Status
	}
	return final, skipped, nil
}

// demoStore opens the store the demo runs on and returns a cleanup that
// removes a temporary directory.
func (a *app) demoStore(ctx context.Context, o demoOptions) (s3store.Store, string, func(), error) {
	nop := func() {}
	url := ""
	cleanup := nop
	switch {
	case a.storeFlag != "":
		url = a.storeFlag
		if _, err := storeurl.Parse(url); err != nil {
			return nil, "", nop, withCode(exitUsage, err)
		}
	case o.dir != "":
		dir, err := filepath.Abs(o.dir)
		if err != nil {
			return nil, "", nop, usageError("demo: --dir: %v", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", nop, usageError("demo: --dir: %v", err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, "", nop, usageError("demo: --dir: %v", err)
		}
		if len(entries) > 0 {
			return nil, "", nop, usageError("demo: --dir %s is not empty; the demo needs a fresh queue", dir)
		}
		url = "file://" + filepath.ToSlash(dir)
	default:
		dir, err := os.MkdirTemp("", "s3queue-demo-")
		if err != nil {
			return nil, "", nop, err
		}
		url = "file://" + filepath.ToSlash(dir)
		cleanup = func() { os.RemoveAll(dir) }
	}
	st, err := a.open(ctx, url)
	if err != nil {
		cleanup()
		return nil, "", nop, err
	}
	if _, err := st.Head(ctx, shards.ManifestKey); err == nil {
		cleanup()
		return nil, "", nop, usageError("demo: %s already holds a queue; the demo needs a fresh one", storeurl.Redact(url))
	} else if !errors.Is(err, s3store.ErrNotFound) {
		cleanup()
		return nil, "", nop, err
	}
	return st, storeurl.Redact(url), cleanup, nil
}

// runVictimWorker starts the worker that will die, waits until it runs the
// victim task, and kills it: from then on every request it makes fails,
// so it can neither renew its lease nor record an outcome, which is all a
// crash looks like from the bucket.
func (d *demo) runVictimWorker(ctx context.Context, st s3store.Store, wg *sync.WaitGroup) error {
	faults := s3store.NewFaults(st)
	w, err := worker.New(ctx, faults, worker.Config{
		ID: "demo-worker-killed", Concurrency: 1, PollMin: demoPollMin, PollMax: demoPollMax,
		ScanLag: 2 * time.Second, LeaseMargin: demoLeaseMargin, ShutdownGrace: time.Millisecond,
		Dedicated: true, MemberTTL: demoMemberTTL,
		// A dead process says nothing; its clock is its own.
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	w.Handle(demoType, d.handler(true))
	wctx, kill := context.WithCancel(ctx)
	wg.Add(1)
	go func() { defer wg.Done(); w.Run(wctx) }()
	select {
	case <-d.victimClaimed:
	case <-time.After(30 * time.Second):
		kill()
		return errors.New("demo: the worker to be killed did not claim its task within 30s")
	case <-ctx.Done():
		kill()
		return ctx.Err()
	}
	for _, op := range s3store.Ops() {
		faults.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
	}
	kill()
	return nil
}

func (d *demo) handler(doomed bool) worker.Handler {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		var in demoInput
		if err := json.Unmarshal(t.Input, &in); err != nil {
			return nil, worker.Permanent(fmt.Errorf("bad demo input: %w", err))
		}
		d.mu.Lock()
		d.execs[t.ID]++
		d.startAfterDeps(t)
		d.startInSlot(t)
		d.mu.Unlock()
		defer d.endInSlot(t)
		fail := func(err error) (json.RawMessage, error) {
			d.mu.Lock()
			d.failures[t.ID]++
			d.mu.Unlock()
			return nil, err
		}
		switch in.Mode {
		case modeVictim:
			if doomed {
				d.victimOnce.Do(func() { close(d.victimClaimed) })
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
		case modePoison:
			return fail(fmt.Errorf("task %d is poison: it always fails", in.N))
		case modeFatal:
			return fail(worker.Permanent(fmt.Errorf("task %d (%s) fails for good", in.N, in.Step)))
		case modeFlaky:
			if t.Attempt == 1 {
				return fail(fmt.Errorf("task %d fails its first attempt", in.N))
			}
		}
		work := time.NewTimer(time.Duration(5+in.N%20) * time.Millisecond)
		defer work.Stop()
		select {
		case <-work.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		d.mu.Lock()
		d.completed[t.ID] = true
		d.mu.Unlock()
		return json.Marshal(map[string]int{"n": in.N, "square": in.N * in.N})
	}
}

func (d *demo) onEvent(e worker.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch e.Kind {
	case "succeeded":
		d.finished[e.TaskID] = task.Succeeded
	case "dead":
		d.finished[e.TaskID] = task.Dead
	case "canceled", "dependency_failed":
		// The demo's dependents are canceled when a dependency fails.
		d.finished[e.TaskID] = task.Canceled
	case "failed":
		d.retried++
	case "lease_lost":
		d.lost++
	}
}

func (d *demo) progress() (done, ok, dead, retried int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.finished {
		switch s {
		case task.Succeeded:
			ok++
		case task.Dead:
			dead++
		}
	}
	return len(d.finished), ok, dead, d.retried
}

// progressLine draws progress on stderr: a bar redrawn in place on a
// terminal, otherwise a plain line about once a second.
type progressLine struct {
	w     io.Writer
	tty   bool
	total int
	every time.Duration
	drawn bool
}

func newProgress(w io.Writer, total int) *progressLine {
	p := &progressLine{w: w, tty: isTerminal(w), total: total, every: time.Second}
	if p.tty {
		p.every = 100 * time.Millisecond
	}
	return p
}

func (p *progressLine) draw(done, ok, dead, retried, redispatched int, elapsed time.Duration) {
	elapsed = elapsed.Truncate(100 * time.Millisecond)
	if !p.tty {
		fmt.Fprintf(p.w, "demo: %d/%d tasks finished (%d succeeded, %d dead), %d retries, %d re-dispatched, %v\n",
			done, p.total, ok, dead, retried, redispatched, elapsed)
		return
	}
	const width = 30
	filled := width * done / max(p.total, 1)
	bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
	fmt.Fprintf(p.w, "\r[%s] %d/%d  ok %d  dead %d  retries %d  re-dispatched %d  %v \x1b[K",
		bar, done, p.total, ok, dead, retried, redispatched, elapsed)
	p.drawn = true
}

func (p *progressLine) end() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// demoSummary is what the demo reports at the end.
type demoSummary struct {
	opts                              demoOptions
	store                             string
	byStatus                          map[task.Status]int
	missing, wrong                    int
	total                             int                 // tasks, the graph's included
	wantStatus                        map[task.Status]int // how many of each status are expected
	wrongExamples                     []string
	runs, retries, duplicates, lost   int
	redispatched, monitorDeadLettered int
	counts                            s3store.Counts
	elapsed                           time.Duration
	skipped                           []string
	graph                             [][2]string // the dependency graph's outcome
	graphProblems                     []string
}

func (d *demo) summary(o demoOptions, store string, final, want map[string]task.Status, ms monitor.TickStats,
	counts s3store.Counts, elapsed time.Duration) *demoSummary {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &demoSummary{opts: o, store: store, byStatus: map[task.Status]int{}, counts: counts, elapsed: elapsed,
		retries: d.retried, lost: d.lost, redispatched: ms.Redispatched, monitorDeadLettered: ms.DeadLettered,
		total: len(want), wantStatus: map[task.Status]int{}}
	for _, st := range want {
		s.wantStatus[st]++
	}
	for _, st := range final {
		s.byStatus[st]++
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		got, ok := final[id]
		if !ok {
			s.missing++
		}
		if got != want[id] {
			s.wrong++
			if len(s.wrongExamples) < 5 {
				s.wrongExamples = append(s.wrongExamples, fmt.Sprintf("%s is %s, want %s", id, orNone(got), want[id]))
			}
		}
	}
	for id, n := range d.execs {
		s.runs += n
		// A run beyond one per recorded failure repeats work whose outcome
		// was never recorded: a duplicate execution (invariant 5).
		if extra := n - d.failures[id] - 1; extra > 0 {
			s.duplicates += extra
		}
	}
	return s
}

func orNone(s task.Status) string {
	if s == "" {
		return "missing"
	}
	return string(s)
}

func (s *demoSummary) print(w io.Writer) {
	n := s.total
	fmt.Fprintf(w, "\ns3queue demo: %d tasks and %d in a dependency graph, 6 in two slots, %d workers and 1 killed mid-task, 1 monitor, %d shards\n",
		s.opts.tasks, len(demoGraph), s.opts.workers, s.opts.shards)
	fmt.Fprintf(w, "store: %s\n\n", s.store)

	fmt.Fprintln(w, "final status (read back from the store):")
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.AlignRight)
	for _, st := range statuses {
		if c := s.byStatus[st]; c > 0 || s.wantStatus[st] > 0 {
			fmt.Fprintf(tw, "  %s\t%d\t\n", st, c)
		}
	}
	tw.Flush()

	fmt.Fprintln(w, "\nexecution:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  handler runs\t%d\tfor %d tasks\n", s.runs, n)
	fmt.Fprintf(tw, "  retries\t%d\tfailed attempts sent back to pending (flaky tasks, the poison task)\n", s.retries)
	fmt.Fprintf(tw, "  duplicate executions\t%d\truns repeating work whose outcome was never recorded (the killed worker's task)\n", s.duplicates)
	fmt.Fprintf(tw, "  re-dispatches\t%d\texpired leases the monitor took back\n", s.redispatched)
	if s.monitorDeadLettered > 0 {
		fmt.Fprintf(tw, "  dead-lettered by monitor\t%d\texpired leases with no attempts left\n", s.monitorDeadLettered)
	}
	if s.lost > 0 {
		fmt.Fprintf(tw, "  leases lost by live workers\t%d\t\n", s.lost)
	}
	tw.Flush()

	fmt.Fprintln(w, "\ndependencies and slots (docs/dependencies.md, docs/slots.md):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range s.graph {
		fmt.Fprintf(tw, "  %s\t%s\n", l[0], l[1])
	}
	tw.Flush()
	for _, p := range s.graphProblems {
		fmt.Fprintf(w, "  WRONG: %s\n", p)
	}

	fmt.Fprintf(w, "\nstore requests: %s\n", s.counts.String())
	var per []string
	for _, op := range s3store.Ops() {
		per = append(per, fmt.Sprintf("%s %.2f", op, float64(s.counts.Of(op))/float64(n)))
	}
	fmt.Fprintf(w, "per task: %s (total %.1f; idle polling included)\n", strings.Join(per, "  "), float64(s.counts.Total())/float64(n))
	fmt.Fprintf(w, "\nelapsed: %v\n", s.elapsed.Round(10*time.Millisecond))
	if len(s.skipped) > 0 {
		fmt.Fprintf(w, "unreadable objects: %s\n", strings.Join(s.skipped, ", "))
	}
	if s.wrong == 0 && len(s.skipped) == 0 && len(s.graphProblems) == 0 {
		fmt.Fprintf(w, "result: OK, all %d tasks reached their expected status (%d succeeded, %d dead, %d canceled)\n",
			n, s.wantStatus[task.Succeeded], s.wantStatus[task.Dead], s.wantStatus[task.Canceled])
		return
	}
	if s.wrong == 0 && len(s.skipped) == 0 {
		fmt.Fprintf(w, "result: FAILED, the dependency graph went wrong\n")
		return
	}
	fmt.Fprintf(w, "result: FAILED, %d tasks did not reach their expected status (%d missing)\n", s.wrong, s.missing)
	for _, e := range s.wrongExamples {
		fmt.Fprintf(w, "  %s\n", e)
	}
}
