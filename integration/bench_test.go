package integration

// Benchmarks of s3queue against the MinIO server the harness starts (see
// docs/performance.md for the results and what they are held against).
// They run only with -bench, so `make test` is unaffected:
//
//	make bench                   # scripts/bench.sh: servers, then every benchmark once
//	scripts/bench.sh HeavyLoad   # one benchmark (a -bench regexp)
//
// or by hand, after eval "$(scripts/servers.sh)":
//
//	go test ./integration -run '^$' -bench . -benchtime 1x -timeout 60m
//
// Each benchmark runs its workload once whatever b.N (a run takes seconds
// to minutes), prints a readable table on stdout and reports its figures
// with b.ReportMetric. Every process of the queue (each worker, the
// producer, the monitor) gets a store of its own, as separate hosts would:
// its own HTTP client, its own clock fed only by its own responses, and an
// s3store.Counter that counts every request it makes by type. A second
// wrapper classifies the same requests by the key they touch (fleet
// object, task objects, shard listings, ready pointers, clock), which is how
// the tables split tasks from liveness.
//
// Environment:
//
//	S3QUEUE_BENCH_WINDOW        measurement window of the workload and idle benchmarks (default 3m)
//	S3QUEUE_BENCH_SEGMENT       also report the window in segments this long (default: off)
//	S3QUEUE_BENCH_HEAVY_TASKS   tasks of BenchmarkHeavyLoad's burst (default 3000)
//	S3QUEUE_BENCH_HEAVY_WORKERS workers of BenchmarkHeavyLoad (default 4)
//	S3QUEUE_BENCH_HEAVY_SLOTS   slots per worker of BenchmarkHeavyLoad (default 32)
//	S3QUEUE_BENCH_LOG           log level of the queue's components (default error)

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

const benchType = "bench.task"

// benchInput is every benchmark task's input.
type benchInput struct {
	Seq   int  `json:"seq"`
	Block bool `json:"block,omitempty"` // the killed worker's task: it runs until the worker dies
}

// ---------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return def
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

func benchWindow() time.Duration { return envDuration("S3QUEUE_BENCH_WINDOW", 3*time.Minute) }

// seedTasksPerDay is the seed workload: 100K tasks/day, 1.16 tasks/s.
const seedTasksPerDay = 100_000

// settings returns the service configuration of queue.toml with no keys
// but these environment overrides, e.g. {"S3QUEUE_PROFILE": "economy"}: the
// benchmarks measure the settings a user gets, through internal/config.
func settings(tb testing.TB, env map[string]string) config.Config {
	tb.Helper()
	c, err := config.Load("", func(k string) string { return env[k] })
	if err != nil {
		tb.Fatalf("settings %v: %v", env, err)
	}
	return c
}

// describeSettings renders env as queue.toml-ish text for the tables.
func describeSettings(env map[string]string) string {
	if len(env) == 0 {
		return "defaults"
	}
	var parts []string
	for k, v := range env {
		key := strings.ToLower(strings.TrimPrefix(k, config.EnvPrefix))
		if sec, rest, ok := strings.Cut(key, "_"); ok && (sec == "worker" || sec == "monitor") {
			key = sec + "." + rest
		}
		parts = append(parts, key+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// ---------------------------------------------------------------------
// Request accounting
// ---------------------------------------------------------------------

// Key classes of requests.
const (
	classFleet    = "fleet"    // fleet.json: renewals, standby reads, doorbell
	classClock    = "clock"    // HEADs a clock makes when no response refreshed it
	classScan0    = "scan0"    // LIST of shard 0, the active shard of a one-member fleet
	classScanN    = "scanN"    // LIST of another shard (other members' scans, drain sweeps, monitor sweeps)
	classTask     = "task"     // GET/PUT of task objects
	classPointer  = "pointer"  // ready pointers
	classManifest = "manifest" // queue.json
	classOther    = "other"
)

var classes = []string{classTask, classScan0, classScanN, classPointer, classFleet, classClock, classManifest, classOther}

func keyClass(op s3store.Op, key string) string {
	switch {
	case op == s3store.OpList && key == shards.TasksPrefix(0):
		return classScan0
	case op == s3store.OpList && strings.HasPrefix(key, "tasks/"):
		return classScanN
	case key == shards.FleetKey:
		return classFleet
	case key == shards.ManifestKey:
		return classManifest
	case shards.IsPointer(key):
		return classPointer
	case strings.HasPrefix(key, "tasks/"):
		return classTask
	}
	return classOther
}

// opCounts is one count per request type, indexed by s3store.Op.
type opCounts [5]int64

func (c opCounts) add(o opCounts) opCounts {
	for i := range c {
		c[i] += o[i]
	}
	return c
}

func (c opCounts) sub(o opCounts) opCounts {
	for i := range c {
		c[i] -= o[i]
	}
	return c
}

func (c opCounts) requests() cost.Requests {
	return cost.Requests{PUT: float64(c[s3store.OpPut]), GET: float64(c[s3store.OpGet]), HEAD: float64(c[s3store.OpHead]),
		LIST: float64(c[s3store.OpList]), DELETE: float64(c[s3store.OpDelete])}
}

// classified counts the requests passing through it by key class. It
// forwards the Date headers of the store it wraps, so clocks above it sync
// from responses exactly as they would on the bare store.
type classified struct {
	inner s3store.Store
	mu    sync.Mutex
	n     map[string]opCounts
}

func newClassified(inner s3store.Store) *classified {
	return &classified{inner: inner, n: map[string]opCounts{}}
}

func (c *classified) count(op s3store.Op, class string) {
	c.mu.Lock()
	v := c.n[class]
	v[op]++
	c.n[class] = v
	c.mu.Unlock()
}

func (c *classified) snapshot() map[string]opCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]opCounts, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *classified) Get(ctx context.Context, key string) (s3store.Object, error) {
	c.count(s3store.OpGet, keyClass(s3store.OpGet, key))
	return c.inner.Get(ctx, key)
}

func (c *classified) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	c.count(s3store.OpHead, keyClass(s3store.OpHead, key))
	return c.inner.Head(ctx, key)
}

func (c *classified) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	c.count(s3store.OpPut, keyClass(s3store.OpPut, key))
	return c.inner.Put(ctx, key, body, opts)
}

func (c *classified) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	c.count(s3store.OpDelete, keyClass(s3store.OpDelete, key))
	return c.inner.Delete(ctx, key, opts)
}

func (c *classified) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	c.count(s3store.OpList, keyClass(s3store.OpList, prefix))
	return c.inner.List(ctx, prefix, opts)
}

func (c *classified) Now(ctx context.Context) (time.Time, error) {
	c.count(s3store.OpHead, classClock)
	return c.inner.Now(ctx)
}

func (c *classified) WatchDates(fn func(s3store.DateSample)) { s3store.WatchDates(c.inner, fn) }

// Sources of requests.
const (
	srcProducer = "producer"
	srcWorkers  = "workers"
	srcMonitor  = "monitor"
)

// component is one process of the queue with a store of its own.
type component struct {
	name, source string
	ctr          *s3store.Counter
	cls          *classified
}

// meter opens the components' stores and reads their counts.
type meter struct {
	tb   testing.TB
	url  string
	mu   sync.Mutex
	byID map[string]*component
	list []*component
}

func newMeter(tb testing.TB, url string) *meter {
	return &meter{tb: tb, url: url, byID: map[string]*component{}}
}

// open returns a fresh, counted store on the meter's queue for the named
// component.
func (m *meter) open(name, source string) *s3store.Counter {
	m.tb.Helper()
	st, err := storeurl.Open(context.Background(), m.url)
	if err != nil {
		m.tb.Fatalf("open store: %v", err)
	}
	cls := newClassified(st)
	c := &component{name: name, source: source, ctr: s3store.NewCounter(cls), cls: cls}
	m.mu.Lock()
	m.byID[name] = c
	m.list = append(m.list, c)
	m.mu.Unlock()
	return c.ctr
}

// reading is a snapshot of every component's counts.
type reading struct {
	at    time.Time
	comp  map[string]opCounts            // by component
	class map[string]map[string]opCounts // by source, then key class
}

func (m *meter) read() reading {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := reading{at: time.Now(), comp: map[string]opCounts{}, class: map[string]map[string]opCounts{}}
	for _, c := range m.list {
		counts := c.ctr.Counts()
		var oc opCounts
		for _, op := range s3store.Ops() {
			oc[op] = counts.Of(op)
		}
		r.comp[c.name] = oc
		if r.class[c.source] == nil {
			r.class[c.source] = map[string]opCounts{}
		}
		for k, v := range c.cls.snapshot() {
			r.class[c.source][k] = r.class[c.source][k].add(v)
		}
	}
	return r
}

// since returns the requests made between e and r.
func (r reading) since(e reading) reading {
	out := reading{at: r.at, comp: map[string]opCounts{}, class: map[string]map[string]opCounts{}}
	for k, v := range r.comp {
		out.comp[k] = v.sub(e.comp[k])
	}
	for src, m := range r.class {
		out.class[src] = map[string]opCounts{}
		for k, v := range m {
			out.class[src][k] = v.sub(e.class[src][k])
		}
	}
	return out
}

func (r reading) total() opCounts {
	var t opCounts
	for _, v := range r.comp {
		t = t.add(v)
	}
	return t
}

func (r reading) bySource(src string) opCounts {
	var t opCounts
	for _, v := range r.class[src] {
		t = t.add(v)
	}
	return t
}

// liveness is the part of the requests that is paid per hour whatever the
// load: the workers' fleet-object and clock requests, and the monitor.
func (r reading) liveness() opCounts {
	w := r.class[srcWorkers]
	return w[classFleet].add(w[classClock]).add(r.bySource(srcMonitor))
}

// printBreakdown prints the requests of a window by source and key class,
// per task when tasks > 0 and per hour otherwise.
func printBreakdown(w io.Writer, r reading, d time.Duration, tasks int) {
	unit, div := "per task", float64(tasks)
	if tasks <= 0 {
		unit, div = "per hour", d.Hours()
	}
	fmt.Fprintf(w, "requests %s, by source and key class (counted over %v):\n", unit, d.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  source\tclass\t")
	for _, op := range s3store.Ops() {
		fmt.Fprintf(tw, "%s\t", op)
	}
	fmt.Fprint(tw, "\n")
	for _, src := range []string{srcProducer, srcWorkers, srcMonitor} {
		for _, cl := range classes {
			v := r.class[src][cl]
			if v == (opCounts{}) {
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t", src, cl)
			for _, op := range s3store.Ops() {
				fmt.Fprintf(tw, "%s\t", fmtRate(float64(v[op])/div))
			}
			fmt.Fprint(tw, "\n")
		}
	}
	t := r.total()
	fmt.Fprint(tw, "  total\t\t")
	for _, op := range s3store.Ops() {
		fmt.Fprintf(tw, "%s\t", fmtRate(float64(t[op])/div))
	}
	fmt.Fprint(tw, "\n")
	tw.Flush()
}

func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// ---------------------------------------------------------------------
// Task tracking
// ---------------------------------------------------------------------

// tracker follows every task of a run by its sequence number: when its
// Submit returned, when a handler first started it, when it succeeded.
type tracker struct {
	mu        sync.Mutex
	submitted map[int]time.Time
	started   map[int]time.Time
	startedBy map[int]string
	runs      map[int]int
	seqOf     map[string]int
	succeeded map[int]time.Time
	firstSub  time.Time
	lastOK    time.Time
	changed   chan struct{}
}

func newTracker() *tracker {
	return &tracker{submitted: map[int]time.Time{}, started: map[int]time.Time{}, startedBy: map[int]string{},
		runs: map[int]int{}, seqOf: map[string]int{}, succeeded: map[int]time.Time{}, changed: make(chan struct{}, 1)}
}

func (tr *tracker) notify() {
	select {
	case tr.changed <- struct{}{}:
	default:
	}
}

func (tr *tracker) submitStart(now time.Time) {
	tr.mu.Lock()
	if tr.firstSub.IsZero() || now.Before(tr.firstSub) {
		tr.firstSub = now
	}
	tr.mu.Unlock()
}

func (tr *tracker) submittedAt(seq int, at time.Time) {
	tr.mu.Lock()
	tr.submitted[seq] = at
	tr.mu.Unlock()
}

// handler runs a task for work, or until its worker dies for a blocking
// task run by a worker in doomed.
func (tr *tracker) handler(workerID string, work time.Duration, doomed func(string) bool) worker.Handler {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		now := time.Now()
		var in benchInput
		if err := json.Unmarshal(t.Input, &in); err != nil {
			return nil, worker.Permanent(err)
		}
		tr.mu.Lock()
		_, ok := tr.started[in.Seq]
		if !ok || doomed != nil && doomed(tr.startedBy[in.Seq]) && !doomed(workerID) {
			// The first start, or the first after the killed worker's.
			tr.started[in.Seq], tr.startedBy[in.Seq] = now, workerID
		}
		tr.runs[in.Seq]++
		tr.seqOf[t.ID] = in.Seq
		tr.mu.Unlock()
		tr.notify()
		if in.Block && doomed != nil && doomed(workerID) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}
		if work > 0 {
			timer := time.NewTimer(work)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		return nil, nil
	}
}

func (tr *tracker) onEvent(e worker.Event) {
	if e.Kind != "succeeded" {
		return
	}
	now := time.Now()
	tr.mu.Lock()
	if seq, ok := tr.seqOf[e.TaskID]; ok {
		if _, dup := tr.succeeded[seq]; !dup {
			tr.succeeded[seq] = now
			if now.After(tr.lastOK) {
				tr.lastOK = now
			}
		}
	}
	tr.mu.Unlock()
	tr.notify()
}

// span returns when the first Submit started and the last task succeeded.
func (tr *tracker) span() (time.Time, time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.firstSub, tr.lastOK
}

func (tr *tracker) doneCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.succeeded)
}

func (tr *tracker) startedAt(seq int) (time.Time, string, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	t, ok := tr.started[seq]
	return t, tr.startedBy[seq], ok
}

// startedBetween counts the tasks a handler first started in [from, to).
func (tr *tracker) startedBetween(from, to time.Time) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, at := range tr.started {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

func (tr *tracker) succeededAt(seq int) (time.Time, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	t, ok := tr.succeeded[seq]
	return t, ok
}

// waitFor waits until cond holds (checked on every change and every 50ms).
func (tr *tracker) waitFor(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tr.changed:
		case <-tick.C:
		}
	}
	return true
}

// pickups returns the pickup latencies (handler start minus submit return)
// of the tasks in seqs (for a task not started yet, the time since its
// submit: a lower bound), and how many handlers started before their Submit
// returned (counted as 0: the task was claimed while the producer was
// still ringing the doorbell or reading the fleet object).
func (tr *tracker) pickups(seqs []int) (ds []time.Duration, early int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, s := range seqs {
		sub, ok1 := tr.submitted[s]
		st, ok2 := tr.started[s]
		if !ok1 {
			continue
		}
		if !ok2 {
			// Never started: its pickup is at least this long.
			st = time.Now()
		}
		d := st.Sub(sub)
		if d < 0 {
			d, early = 0, early+1
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds, early
}

func (tr *tracker) duplicates() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, r := range tr.runs {
		n += r - 1
	}
	return n
}

// pct is the nearest-rank percentile of sorted ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ---------------------------------------------------------------------
// Logging
// ---------------------------------------------------------------------

// tally is a slog handler that counts records by level and message and
// prints only the first few of each message, so fifty workers cannot flood
// the output.
type tally struct {
	level slog.Level
	w     io.Writer
	mu    *sync.Mutex
	n     map[string]int
	attrs []slog.Attr
}

func newTally() *tally {
	lvl := slog.LevelError
	switch strings.ToLower(os.Getenv("S3QUEUE_BENCH_LOG")) {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn":
		lvl = slog.LevelWarn
	}
	return &tally{level: lvl, w: os.Stderr, mu: &sync.Mutex{}, n: map[string]int{}}
}

func (t *tally) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || l >= t.level
}

func (t *tally) Handle(_ context.Context, r slog.Record) error {
	key := r.Level.String() + " " + r.Message
	t.mu.Lock()
	t.n[key]++
	n := t.n[key]
	t.mu.Unlock()
	if r.Level < t.level || n > 3 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "    log: %s %s", r.Level, r.Message)
	for _, a := range t.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
	fmt.Fprintln(t.w, b.String())
	return nil
}

func (t *tally) WithAttrs(as []slog.Attr) slog.Handler {
	c := *t
	c.attrs = append(append([]slog.Attr(nil), t.attrs...), as...)
	return &c
}

func (t *tally) WithGroup(string) slog.Handler { return t }

func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.n) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range t.n {
		parts = append(parts, fmt.Sprintf("%q x%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------------
// A queue in one process
// ---------------------------------------------------------------------

// rig is one benchmark's queue: a fresh bucket on MinIO, a meter, a
// tracker, the producer, the monitor and the workers.
type rig struct {
	tb       testing.TB
	srv      *harness.Server
	url      string
	m        *meter
	tr       *tracker
	log      *tally
	observer s3store.Store // uncounted: the benchmark's own looks at the bucket

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	prod    *producer.Producer
	mon     *monitor.Monitor
	workers []*benchWorker
	seq     atomic.Int64
}

type benchWorker struct {
	w      *worker.Worker
	id     string
	kill   context.CancelFunc
	faults *s3store.Faults // non-nil for a worker that can be killed
	done   chan struct{}
}

func newRig(tb testing.TB, prefix string) *rig {
	srv := harness.MinIO(tb)
	url := srv.StoreURL(srv.NewBucket(tb), prefix)
	obs, err := storeurl.Open(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{tb: tb, srv: srv, url: url, m: newMeter(tb, url), tr: newTracker(), log: newTally(), observer: obs,
		ctx: ctx, cancel: cancel}
	tb.Cleanup(r.stop)
	return r
}

func (r *rig) logger() *slog.Logger { return slog.New(r.log) }

func (r *rig) startProducer() {
	p, err := producer.New(r.ctx, r.m.open("producer", srcProducer), producer.Config{Logger: r.logger()})
	if err != nil {
		r.tb.Fatal(err)
	}
	r.prod = p
}

func (r *rig) startMonitor(cfg monitor.Config) {
	cfg.Logger = r.logger()
	mon, err := monitor.New(r.ctx, r.m.open("monitor", srcMonitor), cfg)
	if err != nil {
		r.tb.Fatal(err)
	}
	r.mon = mon
	r.wg.Add(1)
	go func() { defer r.wg.Done(); mon.Run(r.ctx) }()
}

// startWorker starts a worker with a store of its own. killable wraps the
// store in a fault injector, so the worker can be cut off as if its host
// died.
func (r *rig) startWorker(cfg worker.Config, work time.Duration, killable bool, doomed func(string) bool) *benchWorker {
	if cfg.ID == "" {
		cfg.ID = fmt.Sprintf("w%03d", len(r.workers))
	}
	var st s3store.Store = r.m.open(cfg.ID, srcWorkers)
	bw := &benchWorker{id: cfg.ID, done: make(chan struct{})}
	if killable {
		bw.faults = s3store.NewFaults(st)
		st = bw.faults
	}
	cfg.Logger = r.logger()
	cfg.OnEvent = r.tr.onEvent
	w, err := worker.New(r.ctx, st, cfg)
	if err != nil {
		r.tb.Fatal(err)
	}
	w.Handle(benchType, r.tr.handler(cfg.ID, work, doomed))
	bw.w = w
	wctx, kill := context.WithCancel(r.ctx)
	bw.kill = kill
	r.workers = append(r.workers, bw)
	r.wg.Add(1)
	go func() { defer r.wg.Done(); defer close(bw.done); w.Run(wctx) }()
	return bw
}

// members counts the workers that are fleet members, by their own word.
func (r *rig) members() int {
	n := 0
	for _, bw := range r.workers {
		if ok, _ := bw.w.Member(); ok {
			n++
		}
	}
	return n
}

// agreed reports whether every member's view has n active shards, one of
// them its own, and no two members own the same shard: the fleet's views
// have converged (a member learns of joins at its next renewal or re-read).
func (r *rig) agreed(n int) bool {
	owned := map[int]bool{}
	for _, bw := range r.workers {
		ok, a := bw.w.Member()
		if !ok {
			continue
		}
		if a.Active != n || len(a.Own) != 1 || owned[a.Own[0]] {
			return false
		}
		owned[a.Own[0]] = true
	}
	return len(owned) == n
}

// asleep reads the doorbell (uncounted).
func (r *rig) asleep() bool {
	f, _, err := shards.ReadFleet(r.ctx, r.observer)
	return err == nil && f.Asleep
}

// waitUntil polls cond every interval until it holds or timeout passes.
func (r *rig) waitUntil(timeout, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// settle waits until the elastic fleet is idle: one member, asleep at the
// doorbell, past its awake grace.
func (r *rig) settle(timeout time.Duration) time.Duration {
	start := time.Now()
	ok := r.waitUntil(timeout, time.Second, func() bool { return r.members() == 1 && r.asleep() })
	if !ok {
		r.tb.Fatalf("the fleet did not settle (1 member, asleep) within %v: %d members, asleep=%v", timeout, r.members(), r.asleep())
	}
	time.Sleep(6 * time.Second) // AwakeGrace (5s): the member now only watches the doorbell
	return time.Since(start)
}

// submit submits one task and records when Submit returned.
func (r *rig) submit(in benchInput, opts producer.Options) (string, error) {
	r.tr.submitStart(time.Now())
	id, err := r.prod.Submit(r.ctx, benchType, in, opts)
	if err == nil {
		r.tr.submittedAt(in.Seq, time.Now())
	}
	return id, err
}

func (r *rig) nextSeq() int { return int(r.seq.Add(1)) }

func (r *rig) stop() {
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		r.tb.Logf("components still running 90s after stop")
	}
}

// ---------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------

type resultRow struct{ name, value, target, verdict string }

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func printRows(w io.Writer, title string, rows []resultRow) {
	fmt.Fprintf(w, "\n=== %s\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "  measure\tvalue\ttarget\t\n")
	for _, row := range rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", row.name, row.value, row.target, row.verdict)
	}
	tw.Flush()
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// ---------------------------------------------------------------------
// Raw conditional PUT rate
// ---------------------------------------------------------------------

// rawPutRate is the server's ceiling for the queue's kind of write: clients
// goroutines PUT 500-byte objects with If-None-Match: * for d through the
// queue's own store (the same client stack the queue uses).
func rawPutRate(ctx context.Context, st s3store.Store, clients int, d time.Duration) (rate float64, n, errs int64) {
	body := []byte(strings.Repeat("x", 500))
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("raw/%02d/%08d", c, i)
				if _, err := st.Put(ctx, key, body, s3store.PutOptions{IfNoneMatch: true}); err != nil {
					bad.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	return float64(ok.Load()) / el.Seconds(), ok.Load(), bad.Load()
}

// rawTaskRate is the server's ceiling for the queue's request mix with no
// coordination at all: each of clients goroutines repeats the minimal
// life of a task — create (If-None-Match: *), GET, two If-Match PUTs —
// on task-sized objects (800 bytes).
func rawTaskRate(ctx context.Context, st s3store.Store, clients int, d time.Duration) (rate float64, errs int64) {
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			body := []byte(strings.Repeat("y", 800)) // each client changes its own
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("rawtask/%02d/%08d", c, i)
				etag, err := st.Put(ctx, key, body, s3store.PutOptions{IfNoneMatch: true})
				if err == nil {
					var o s3store.Object
					if o, err = st.Get(ctx, key); err == nil {
						body[0] = 'a'
						if etag, err = st.Put(ctx, key, body, s3store.PutOptions{IfMatch: o.ETag}); err == nil {
							body[0] = 'b'
							_, err = st.Put(ctx, key, body, s3store.PutOptions{IfMatch: etag})
						}
					}
				}
				if err != nil {
					bad.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(ok.Load()) / time.Since(start).Seconds(), bad.Load()
}

// measureRawTask runs rawTaskRate on a new bucket and prints it.
func measureRawTask(b *testing.B, clients int, d time.Duration) float64 {
	srv := harness.MinIO(b)
	st, err := storeurl.Open(context.Background(), srv.StoreURL(srv.NewBucket(b), "rawtask"))
	if err != nil {
		b.Fatal(err)
	}
	rate, errs := rawTaskRate(context.Background(), st, clients, d)
	fmt.Printf("raw task-shaped sequences (PUT create, GET, 2 x PUT If-Match; 800 bytes; %d clients, %v): %.0f/s (%d failed)\n", clients, d, rate, errs)
	return rate
}

func measureRawPut(b *testing.B, clients int, d time.Duration) float64 {
	srv := harness.MinIO(b)
	st, err := storeurl.Open(context.Background(), srv.StoreURL(srv.NewBucket(b), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	rate, n, errs := rawPutRate(context.Background(), st, clients, d)
	if errs > 0 {
		b.Logf("raw PUT: %d requests failed", errs)
	}
	fmt.Printf("\nraw conditional PUT (If-None-Match: *, 500 bytes, %d clients, %v): %d PUTs, %.0f PUTs/s\n", clients, d, n, rate)
	return rate
}

// BenchmarkRawConditionalPut measures the server's conditional-PUT rate:
// the physical ceiling every other figure is held against.
func BenchmarkRawConditionalPut(b *testing.B) {
	rate := measureRawPut(b, 8, 10*time.Second)
	b.ReportMetric(rate, "puts/s")
	b.ReportMetric(0, "ns/op")
}

// ---------------------------------------------------------------------
// Heavy load
// ---------------------------------------------------------------------

// BenchmarkHeavyLoad drives MinIO as fast as it goes: dedicated workers
// (S3QUEUE_BENCH_HEAVY_WORKERS, default 4) with S3QUEUE_BENCH_HEAVY_SLOTS
// slots each (default 32) and a no-op handler, and the monitor with its
// defaults. It has two phases:
//
//   - burst: a producer submits S3QUEUE_BENCH_HEAVY_TASKS tasks (default
//     3000) from 8 goroutines (SubmitBatch's parallelism; each Submit is
//     timed on its own): throughput from the first submit to the last
//     success, and requests per task;
//   - paced: Poisson arrivals at half the burst's throughput for 20 s: the
//     pickup latency of a busy queue that is not behind (in the burst, the
//     backlog's queueing time dominates every pickup).
//
// After a 15 s warm-up of the server, the raw conditional-PUT rate and the
// raw task-shaped rate (rawTaskRate) are measured in the same run, 10 s each
// before and after (MinIO's rate drifts); the ceilings use their means.
func BenchmarkHeavyLoad(b *testing.B) {
	const parallel = 8
	workers := envInt("S3QUEUE_BENCH_HEAVY_WORKERS", 4)
	slots := envInt("S3QUEUE_BENCH_HEAVY_SLOTS", 32)
	n := envInt("S3QUEUE_BENCH_HEAVY_TASKS", 3000)
	// A MinIO just started serves its first seconds of load markedly
	// slower (measured: 309 then 653 PUTs/s a minute apart): warm it up
	// first, so that neither ceiling nor burst runs on a cold server.
	fmt.Print("\nwarm-up:")
	measureRawPut(b, 8, 15*time.Second)
	rawBefore := measureRawPut(b, 8, 10*time.Second)
	mixBefore := measureRawTask(b, 8, 10*time.Second)

	r := newRig(b, "heavy")
	conf := settings(b, nil)
	r.startProducer()
	r.startMonitor(conf.Monitor())
	for range workers {
		wc := conf.Worker()
		wc.Concurrency, wc.Dedicated = slots, true
		r.startWorker(wc, 0, false, nil)
	}
	if !r.waitUntil(time.Minute, 100*time.Millisecond, func() bool { return r.members() == workers && r.agreed(min(workers, 16)) }) {
		b.Fatalf("%d workers did not all join the fleet: %d members", workers, r.members())
	}
	time.Sleep(2 * time.Second) // the producer's fleet cache sees every member

	// Burst.
	before := r.m.read()
	monBefore := r.mon.Stats()
	var next atomic.Int64
	var wg sync.WaitGroup
	var subErr atomic.Value
	burst := make([]int, n)
	for i := range burst {
		burst[i] = r.nextSeq()
	}
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, err := r.submit(benchInput{Seq: burst[i]}, producer.Options{}); err != nil {
					subErr.Store(err)
				}
			}
		})
	}
	wg.Wait()
	submitted := time.Now()
	if err := subErr.Load(); err != nil {
		b.Fatalf("submit: %v", err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Minute)
	defer cancel()
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= n }) {
		b.Fatalf("only %d of %d tasks succeeded within 5 minutes", r.tr.doneCount(), n)
	}
	after := r.m.read()
	monListed := r.mon.Stats().Listed - monBefore.Listed
	win := after.since(before)
	tot := win.total()
	first, last := r.tr.span()
	elapsed := last.Sub(first)
	tput := float64(n) / elapsed.Seconds()
	burstDs, _ := r.tr.pickups(burst)
	per := func(c opCounts, tasks int, op s3store.Op) float64 { return float64(c[op]) / float64(tasks) }

	// Paced, at half the burst throughput.
	time.Sleep(2 * time.Second)
	pacedRate := tput / 2
	const pacedFor = 20 * time.Second
	pBefore := r.m.read()
	rng := rand.New(rand.NewPCG(2, 2))
	var paced []int
	var pwg sync.WaitGroup
	start := time.Now()
	for at := start; ; {
		at = at.Add(time.Duration(rng.ExpFloat64() / pacedRate * float64(time.Second)))
		if at.Sub(start) > pacedFor {
			break
		}
		time.Sleep(time.Until(at))
		seq := r.nextSeq()
		paced = append(paced, seq)
		pwg.Go(func() {
			if _, err := r.submit(benchInput{Seq: seq}, producer.Options{}); err != nil {
				subErr.Store(err)
			}
		})
	}
	pwg.Wait()
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= n+len(paced) }) {
		b.Fatalf("paced phase: only %d of %d tasks succeeded", r.tr.doneCount()-n, len(paced))
	}
	pAfter := r.m.read()
	pWin := pAfter.since(pBefore)
	pTot := pWin.total()
	ds, early := r.tr.pickups(paced)
	r.stop()

	rawAfter := measureRawPut(b, 8, 10*time.Second)
	raw := (rawBefore + rawAfter) / 2
	mixAfter := measureRawTask(b, 8, 10*time.Second)
	mix := (mixBefore + mixAfter) / 2
	putClass := per(tot, n, s3store.OpPut) + per(tot, n, s3store.OpList)
	ceiling := raw / per(tot, n, s3store.OpPut)
	ratio := tput / ceiling
	pPutClass := per(pTot, len(paced), s3store.OpPut) + per(pTot, len(paced), s3store.OpList)

	printRows(os.Stdout, fmt.Sprintf("BenchmarkHeavyLoad: %d dedicated workers x %d slots, no-op handler", workers, slots), []resultRow{
		{"burst: tasks", strconv.Itoa(n), "", ""},
		{"burst: submit phase", fmt.Sprintf("%v (%.0f submits/s)", fmtDur(submitted.Sub(first)), float64(n)/submitted.Sub(first).Seconds()), "", ""},
		{"burst: throughput (first submit -> last success)", fmt.Sprintf("%.0f tasks/s over %v", tput, fmtDur(elapsed)), "", ""},
		{"raw conditional PUT rate (before / after / mean)", fmt.Sprintf("%.0f / %.0f / %.0f PUTs/s", rawBefore, rawAfter, raw), "", ""},
		{"ceiling = raw / PUTs per task", fmt.Sprintf("%.0f tasks/s", ceiling), "", ""},
		{"burst: throughput / ceiling", fmt.Sprintf("%.0f%%", 100*ratio), ">= 70%", verdict(ratio >= 0.7)},
		{"raw task-shaped rate (3 PUT + 1 GET, no coordination; before / after / mean)", fmt.Sprintf("%.0f / %.0f / %.0f tasks/s", mixBefore, mixAfter, mix), "", ""},
		{"burst: throughput / raw task-shaped rate", fmt.Sprintf("%.0f%%", 100*tput/mix), "", ""},
		{"burst: PUT-class per task (PUT + LIST)", fmt.Sprintf("%.2f (PUT %.3f, LIST %.3f)", putClass, per(tot, n, s3store.OpPut), per(tot, n, s3store.OpList)), "<= 3.2", verdict(putClass <= 3.2)},
		{"burst: GET per task", fmt.Sprintf("%.3f (HEAD %.3f)", per(tot, n, s3store.OpGet), per(tot, n, s3store.OpHead)), "<= 2", verdict(per(tot, n, s3store.OpGet) <= 2)},
		{"burst: keys the monitor's sweeps listed per task", fmt.Sprintf("%.1f", float64(monListed)/float64(n)), "", ""},
		{"burst: pickup p50 / p99 (backlog queueing)", fmtDur(pct(burstDs, 50)) + " / " + fmtDur(pct(burstDs, 99)), "", ""},
		{"paced: tasks, rate", fmt.Sprintf("%d at %.0f tasks/s (Poisson)", len(paced), pacedRate), "", ""},
		{"paced: pickup p50", fmtDur(pct(ds, 50)), "<= 250ms", verdict(pct(ds, 50) <= 250*time.Millisecond)},
		{"paced: pickup p99", fmtDur(pct(ds, 99)), "", ""},
		{"paced: pickups before Submit returned", strconv.Itoa(early), "", ""},
		{"paced: PUT-class per task", fmt.Sprintf("%.2f (PUT %.3f, LIST %.3f)", pPutClass, per(pTot, len(paced), s3store.OpPut), per(pTot, len(paced), s3store.OpList)), "", ""}, // 3 + 1/poll_batch below poll_batch/poll_min tasks/s per member: see docs/performance.md
		{"paced: GET per task", fmt.Sprintf("%.3f (HEAD %.3f)", per(pTot, len(paced), s3store.OpGet), per(pTot, len(paced), s3store.OpHead)), "<= 2", verdict(per(pTot, len(paced), s3store.OpGet) <= 2)},
		{"duplicate executions", strconv.Itoa(r.tr.duplicates()), "0", verdict(r.tr.duplicates() == 0)},
	})
	fmt.Println("burst:")
	printBreakdown(os.Stdout, win, after.at.Sub(before.at), n)
	fmt.Println("paced:")
	printBreakdown(os.Stdout, pWin, pAfter.at.Sub(pBefore.at), len(paced))
	fmt.Printf("logs: %s\n", r.log.summary())

	b.ReportMetric(tput, "tasks/s")
	b.ReportMetric(raw, "raw-puts/s")
	b.ReportMetric(100*ratio, "%-of-ceiling")
	b.ReportMetric(mix, "raw-task-mix/s")
	b.ReportMetric(ms(pct(ds, 50)), "p50-ms")
	b.ReportMetric(ms(pct(ds, 99)), "p99-ms")
	for _, op := range s3store.Ops() {
		b.ReportMetric(per(tot, n, op), op.String()+"/task")
	}
	b.ReportMetric(0, "ns/op")
}

// ---------------------------------------------------------------------
// Workloads at a steady rate
// ---------------------------------------------------------------------

type workload struct {
	name        string
	workers     int
	tasksPerDay float64
	work        time.Duration // handler time per task
	window      time.Duration
	env         map[string]string // settings: environment overrides of queue.toml
	// targets
	costTarget float64
	p50Target  time.Duration
}

type workloadResult struct {
	tasks        int // submitted in the window
	claimed      int // first started in the window
	elapsed      time.Duration
	settle       time.Duration
	win          reading
	perTask      cost.Requests // every request in the window that is not liveness, per task
	perWorkerHr  cost.Requests // a standby's requests per hour
	perFleetHr   cost.Requests // the rest of liveness per hour
	bill         cost.Bill
	measuredBill float64 // the window's requests / its length x a month, at the measured rate
	p50, p99     time.Duration
	membersMax   int
	membersMean  float64
}

// runWorkload starts the fleet, lets it settle to idle (one member asleep
// at the doorbell: an elastic fleet's state after a quiet spell), then
// submits tasks at the workload's rate (Poisson arrivals, fixed seed) for
// the warm-up and the window, and counts every request in the window (or,
// without a warm-up, until the window's last task finished).
func runWorkload(b *testing.B, wl workload) workloadResult {
	r := newRig(b, "q")
	r.startProducer()
	conf := settings(b, wl.env)
	r.startMonitor(conf.Monitor())
	for range wl.workers {
		r.startWorker(conf.Worker(), wl.work, false, nil)
	}
	// The window spans at least one standby poll, so every standby's reads
	// are in it.
	wl.window = max(wl.window, conf.WorkerSection.StandbyPoll+time.Minute)
	var res workloadResult
	res.settle = r.settle(5 * time.Minute)

	// Sample membership once a second while the load runs.
	var memMu sync.Mutex
	var memSum, memN int
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				n := r.members()
				memMu.Lock()
				memSum, memN = memSum+n, memN+1
				res.membersMax = max(res.membersMax, n)
				memMu.Unlock()
			}
		}
	}()
	// Which workers are members at any moment of the window: the others
	// were standbys throughout, and their requests are pure liveness.
	everMember := map[string]bool{}
	var emMu sync.Mutex
	markMembers := func() {
		emMu.Lock()
		defer emMu.Unlock()
		for _, bw := range r.workers {
			if ok, _ := bw.w.Member(); ok {
				everMember[bw.id] = true
			}
		}
	}
	markMembers()
	stopMark := make(chan struct{})
	marked := make(chan struct{})
	go func() {
		defer close(marked)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopMark:
				return
			case <-t.C:
				markMembers()
			}
		}
	}()

	rate := wl.tasksPerDay / 86400
	rng := rand.New(rand.NewPCG(1, uint64(wl.workers)))
	// The load runs for S3QUEUE_BENCH_WARMUP before the window opens, so
	// that the back-offs of quiet sweeps (drain shards, the monitor's quiet
	// shards) are past their first steps, as they are on a queue that has
	// run for a while.
	warmup := envDuration("S3QUEUE_BENCH_WARMUP", 2*time.Minute)
	measuring := warmup <= 0
	before := r.m.read()
	start := time.Now()
	at := start
	var subWG sync.WaitGroup
	var seqs, warm []int
	var subErrs atomic.Int64
	// Optional segments: a reading every S3QUEUE_BENCH_SEGMENT, to show how
	// the rates settle as back-offs (drain sweeps, monitor sweeps) reach
	// their caps over a long window.
	segEvery := envDuration("S3QUEUE_BENCH_SEGMENT", 0)
	segs := []reading{before}
	segTasks := []int{0}
	for {
		at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if at.Sub(start) > max(warmup, 0)+wl.window {
			break
		}
		time.Sleep(time.Until(at))
		if !measuring && at.Sub(start) >= warmup {
			measuring = true
			before = r.m.read()
			segs, segTasks = []reading{before}, []int{0}
			memMu.Lock()
			memSum, memN, res.membersMax = 0, 0, 0
			memMu.Unlock()
			emMu.Lock()
			clear(everMember)
			emMu.Unlock()
			markMembers()
		}
		if measuring && segEvery > 0 && time.Since(segs[len(segs)-1].at) >= segEvery {
			segs, segTasks = append(segs, r.m.read()), append(segTasks, len(seqs))
		}
		seq := r.nextSeq()
		if measuring {
			seqs = append(seqs, seq)
		} else {
			warm = append(warm, seq)
		}
		// Submits run on their own so a slow one does not delay the next
		// arrival.
		subWG.Go(func() {
			if _, err := r.submit(benchInput{Seq: seq}, producer.Options{}); err != nil {
				subErrs.Add(1)
				b.Logf("submit: %v", err)
			}
		})
	}
	subWG.Wait()
	// After a warm-up the queue is in a steady state, so the window is
	// the submit window itself: work carried into it from the warm-up
	// balances work carried out of it. From a standing start the window
	// runs until its last task finished instead.
	var after reading
	if warmup > 0 {
		after = r.m.read()
	}
	ctx, cancel := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel()
	unfinished := 0
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= len(warm)+len(seqs)-int(subErrs.Load()) }) {
		// Reported, not fatal: the table still says what happened.
		unfinished = len(warm) + len(seqs) - r.tr.doneCount()
		b.Errorf("%s: %d of %d tasks unfinished 3 minutes after the last submit", wl.name, unfinished, len(seqs))
	}
	if warmup <= 0 {
		after = r.m.read()
	}
	close(stopSampling)
	close(stopMark)
	<-sampled
	<-marked

	res.tasks = len(seqs)
	res.elapsed = after.at.Sub(before.at)
	res.win = after.since(before)
	if memN > 0 {
		res.membersMean = float64(memSum) / float64(memN)
	}
	ds, _ := r.tr.pickups(seqs)
	res.p50, res.p99 = pct(ds, 50), pct(ds, 99)

	hours := res.elapsed.Hours()
	live := res.win.liveness()
	// Work carried across the window's edges need not balance: a member
	// that claims a listing's worth of tasks at a time (economy: about 20
	// every 17 s) may claim 20 more or fewer than were submitted in the
	// window, ±0.2 PUT per task. So the workers' requests on task objects
	// (claim, commit) count per task claimed in the window, and the rest
	// per task submitted.
	res.claimed = r.tr.startedBetween(before.at, after.at)
	mine := res.win.class[srcWorkers][classTask].requests()
	res.perTask = res.win.total().sub(live).requests().Sub(mine).Scale(1 / float64(res.tasks))
	claimed := res.claimed
	if claimed == 0 {
		claimed = res.tasks // nothing claimed: no better measure than submits
	}
	res.perTask = res.perTask.Add(mine.Scale(1 / float64(claimed)))
	var standby opCounts
	nStandby := 0
	for _, bw := range r.workers {
		if !everMember[bw.id] {
			standby = standby.add(res.win.comp[bw.id])
			nStandby++
		}
	}
	if nStandby > 0 {
		res.perWorkerHr = standby.requests().Scale(1 / float64(nStandby) / hours)
	}
	res.perFleetHr = clampZero(live.requests().Scale(1 / hours).Sub(res.perWorkerHr.Scale(float64(wl.workers))))
	res.bill = cost.Monthly(cost.Workload{TasksPerDay: wl.tasksPerDay, Workers: wl.workers,
		Rates: cost.Rates{PerTask: res.perTask, PerWorkerHour: res.perWorkerHr, PerFleetHour: res.perFleetHr}})
	res.measuredBill = res.win.total().requests().Scale(cost.HoursPerMonth / hours).Dollars(cost.S3Standard)

	rows := []resultRow{
		{"settle (start -> 1 member asleep)", fmtDur(res.settle), "", ""},
		{"load before the window (warm-up)", fmtDur(max(warmup, 0)), "", ""},
		{"tasks submitted in the window", fmt.Sprintf("%d in %v (%.0f/day at this rate)", res.tasks, fmtDur(res.elapsed), float64(res.tasks)/res.elapsed.Seconds()*86400), "", ""},
		{"members during the load (max / mean)", fmt.Sprintf("%d / %.1f", res.membersMax, res.membersMean), "", ""},
		{"tasks unfinished 3 min after the last submit", strconv.Itoa(unfinished), "0", verdict(unfinished == 0)},
		{"pickup p50", fmtDur(res.p50), "<= " + wl.p50Target.String(), verdict(res.p50 <= wl.p50Target)},
		{"pickup p99", fmtDur(res.p99), "", ""},
		{"tasks claimed in the window (first handler start)", strconv.Itoa(res.claimed), "", ""},
		{"requests per task (all-in, window total / tasks)", res.win.total().requests().Scale(1 / float64(res.tasks)).String(), "", ""},
		{"per task, excluding liveness (workers' task-object requests per task claimed)", res.perTask.String(), "", ""},
		{"liveness per standby worker-hour", res.perWorkerHr.String(), "", ""},
		{"liveness per fleet-hour (members' fleet/clock requests beyond a standby's, monitor)", res.perFleetHr.String(), "", ""},
		{fmt.Sprintf("$/month at %s tasks/day, %d workers", strconv.FormatFloat(wl.tasksPerDay, 'f', 0, 64), wl.workers),
			fmt.Sprintf("$%.2f (tasks $%.2f + liveness $%.2f)", res.bill.Total, res.bill.Source(cost.SourceTasks), res.bill.Source(cost.SourceLiveness)),
			fmt.Sprintf("<= $%.0f", wl.costTarget), verdict(res.bill.Total <= wl.costTarget)},
		{"$/month of the window as measured (its own arrival rate)", fmt.Sprintf("$%.2f", res.measuredBill), "", ""},
		{"duplicate executions", strconv.Itoa(r.tr.duplicates()), "0", verdict(r.tr.duplicates() == 0)},
	}
	printRows(os.Stdout, fmt.Sprintf("%s: %d elastic workers, %s tasks/day, handler %v, settings: %s", wl.name, wl.workers,
		strconv.FormatFloat(wl.tasksPerDay, 'f', 0, 64), wl.work, describeSettings(wl.env)), rows)
	printBreakdown(os.Stdout, res.win, res.elapsed, res.tasks)
	if len(segs) > 1 {
		printSegments(os.Stdout, wl, append(segs, after), append(segTasks, len(seqs)))
	}
	fmt.Println()
	res.bill.Print(os.Stdout)
	fmt.Printf("logs: %s\n", r.log.summary())

	b.ReportMetric(ms(res.p50), "p50-ms")
	b.ReportMetric(ms(res.p99), "p99-ms")
	b.ReportMetric(res.bill.Total, "$/month")
	tot := res.win.total()
	for _, op := range s3store.Ops() {
		b.ReportMetric(float64(tot[op])/float64(res.tasks), op.String()+"/task")
	}
	b.ReportMetric(0, "ns/op")
	return res
}

// printSegments prints the bill each segment of the window extrapolates to,
// with the same split as the whole window (liveness per hour, the rest per
// task), so the settling of the back-offs shows.
func printSegments(w io.Writer, wl workload, segs []reading, tasks []int) {
	fmt.Fprintf(w, "segments (each extrapolated to %s tasks/day):\n", strconv.FormatFloat(wl.tasksPerDay, 'f', 0, 64))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  from\tto\ttasks\tLIST/task (excl. liveness)\tliveness/h\t$/month\t\n")
	for i := 1; i < len(segs); i++ {
		d := segs[i].since(segs[i-1])
		n := tasks[i] - tasks[i-1]
		h := segs[i].at.Sub(segs[i-1].at).Hours()
		if n == 0 || h == 0 {
			continue
		}
		live := d.liveness()
		perTask := d.total().sub(live).requests().Scale(1 / float64(n))
		bill := cost.Monthly(cost.Workload{TasksPerDay: wl.tasksPerDay, Workers: wl.workers,
			Rates: cost.Rates{PerTask: perTask, PerFleetHour: live.requests().Scale(1 / h)}})
		fmt.Fprintf(tw, "  %v\t%v\t%d\t%.3f\t%s\t%.2f\t\n", segs[i-1].at.Sub(segs[0].at).Round(time.Second),
			segs[i].at.Sub(segs[0].at).Round(time.Second), n, perTask.LIST, live.requests().Scale(1/h), bill.Total)
	}
	tw.Flush()
}

func clampZero(r cost.Requests) cost.Requests {
	for _, p := range []*float64{&r.PUT, &r.GET, &r.HEAD, &r.LIST, &r.DELETE} {
		*p = max(*p, 0)
	}
	return r
}

// BenchmarkSeedWorkload is the seed workload: 50 elastic workers, 100K
// tasks/day (1.16 tasks/s), a 100 ms handler, over S3QUEUE_BENCH_WINDOW
// (default 3 minutes) after the fleet settled and a warm-up under load;
// with default settings, and with profile = "economy"
// (internal/config.EconomyProfile).
func BenchmarkSeedWorkload(b *testing.B) {
	for _, c := range []struct {
		name   string
		env    map[string]string
		target float64
		p50    time.Duration
	}{
		{"default", nil, 65, 2 * time.Second},
		{"economy", map[string]string{"S3QUEUE_PROFILE": "economy"}, 50, time.Minute},
	} {
		b.Run(c.name, func(b *testing.B) {
			runWorkload(b, workload{name: "BenchmarkSeedWorkload/" + c.name, workers: 50, tasksPerDay: seedTasksPerDay,
				work: 100 * time.Millisecond, window: benchWindow(), env: c.env, costTarget: c.target, p50Target: c.p50})
		})
	}
}

// BenchmarkMillionPerDay: 200 elastic workers, 1M tasks/day (11.6
// tasks/s), a 100 ms handler, over S3QUEUE_BENCH_WINDOW; with default
// settings, and tuned for fewer requests per task: poll_batch 30 (after
// finding work, list when ~30 tasks have arrived: 2.6 s at 11.6/s), 16
// slots (a batch never keeps a member full for long, so it does not ask for
// help), standbys reading the fleet object every 2 minutes (with 199 of
// them at random phases one still reads every 0.6 s), and the monitor's
// walk of the retained history once a day (7M keys at this volume; the
// walk does not fall in the window, docs/performance.md adds it).
func BenchmarkMillionPerDay(b *testing.B) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"default", nil},
		{"tuned", map[string]string{"S3QUEUE_WORKER_CONCURRENCY": "16", "S3QUEUE_WORKER_POLL_BATCH": "30", "S3QUEUE_WORKER_STANDBY_POLL": "2m", "S3QUEUE_MONITOR_FULL_SWEEP": "24h"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			runWorkload(b, workload{name: "BenchmarkMillionPerDay/" + c.name, workers: 200, tasksPerDay: 1_000_000,
				work: 100 * time.Millisecond, window: benchWindow(), env: c.env, costTarget: 480, p50Target: 2 * time.Second})
		})
	}
}

// ---------------------------------------------------------------------
// Idle fleet
// ---------------------------------------------------------------------

// BenchmarkIdleFleet: 50 elastic workers with default settings and a
// monitor, idle. After the fleet settled (one member asleep at the
// doorbell) and a warm-up of S3QUEUE_BENCH_IDLE_WARMUP (default 10m: the
// monitor's back-off on the quiet shards reaches sweep_max), it counts
// every request for S3QUEUE_BENCH_WINDOW, at least 10m (one cycle of the
// monitor's quiet sweeps), then submits one task at a time (three times,
// each after the fleet fell asleep again) and measures its pickup.
func BenchmarkIdleFleet(b *testing.B) {
	const workers = 50
	window := max(benchWindow(), 10*time.Minute)
	warmup := envDuration("S3QUEUE_BENCH_IDLE_WARMUP", 10*time.Minute)
	r := newRig(b, "q")
	conf := settings(b, nil)
	r.startProducer()
	r.startMonitor(conf.Monitor())
	for range workers {
		r.startWorker(conf.Worker(), 0, false, nil)
	}
	settle := r.settle(5 * time.Minute)
	time.Sleep(warmup) // a stretch of idle time under measurement, not a wait for work

	before := r.m.read()
	segs := []reading{before}
	if segEvery := envDuration("S3QUEUE_BENCH_SEGMENT", 0); segEvery > 0 {
		for end := before.at.Add(window); time.Until(end) > segEvery; {
			time.Sleep(segEvery)
			segs = append(segs, r.m.read())
		}
	}
	time.Sleep(time.Until(before.at.Add(window)))
	after := r.m.read()
	segs = append(segs, after)
	win := after.since(before)
	hours := win.at.Sub(before.at).Hours()
	elapsed := after.at.Sub(before.at)

	// Per-worker rates: the median worker is a standby; the fleet's fixed
	// part is everything beyond workers x the median.
	var perWorker []opCounts
	for _, bw := range r.workers {
		perWorker = append(perWorker, win.comp[bw.id])
	}
	sort.Slice(perWorker, func(i, j int) bool { return sum(perWorker[i]) < sum(perWorker[j]) })
	median := perWorker[len(perWorker)/2]
	all := win.total().requests().Scale(1 / hours)
	perWorkerHr := median.requests().Scale(1 / hours)
	perFleetHr := clampZero(all.Sub(perWorkerHr.Scale(workers)))
	bill := cost.Monthly(cost.Workload{Workers: workers, Rates: cost.Rates{PerWorkerHour: perWorkerHr, PerFleetHour: perFleetHr}})
	monthly := all.Scale(cost.HoursPerMonth).Dollars(cost.S3Standard)
	anchor := perWorker[len(perWorker)-1]

	// Pickups from the sleeping fleet.
	var pickups []time.Duration
	for i := range 3 {
		if i > 0 && !r.waitUntil(2*time.Minute, 500*time.Millisecond, r.asleep) {
			b.Fatalf("the fleet did not fall asleep again")
		}
		time.Sleep(6 * time.Second) // past the awake grace: the member only reads the doorbell
		seq := r.nextSeq()
		if _, err := r.submit(benchInput{Seq: seq}, producer.Options{}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		ok := r.tr.waitFor(ctx, func() bool { _, _, ok := r.tr.startedAt(seq); return ok })
		cancel()
		if !ok {
			b.Fatalf("the task submitted to the idle fleet was not picked up within a minute")
		}
		ds, _ := r.tr.pickups([]int{seq})
		pickups = append(pickups, ds[0])
	}
	worst := slicesMax(pickups)

	printRows(os.Stdout, fmt.Sprintf("BenchmarkIdleFleet: %d elastic workers + monitor, default settings, idle", workers), []resultRow{
		{"settle (start -> 1 member asleep)", fmtDur(settle), "", ""},
		{"warm-up before the window", fmtDur(warmup), "", ""},
		{"window", fmtDur(elapsed), "", ""},
		{"requests per hour, whole fleet + monitor", all.String(), "", ""},
		{"per idle worker-hour (median worker: a standby)", perWorkerHr.String(), "", ""},
		{"per fleet-hour beyond that (anchor member, monitor)", perFleetHr.String(), "", ""},
		{"busiest worker (the anchor) per hour", anchor.requests().Scale(1 / hours).String(), "", ""},
		{"$/month idle (measured rate x 720 h)", fmt.Sprintf("$%.2f", monthly), "<= $3", verdict(monthly <= 3)},
		{"pickup of a task submitted to the sleeping fleet", fmt.Sprintf("%v (max of %d)", fmtDur(worst), len(pickups)), "<= 5s", verdict(worst <= 5*time.Second)},
		{"pickups", fmt.Sprint(pickups), "", ""},
	})
	printBreakdown(os.Stdout, win, elapsed, 0)
	if len(segs) > 2 {
		fmt.Println("segments:")
		for i := 1; i < len(segs); i++ {
			d := segs[i].since(segs[i-1])
			h := segs[i].at.Sub(segs[i-1].at).Hours()
			perH := d.total().requests().Scale(1 / h)
			fmt.Printf("  %v-%v: per hour %s: $%.2f/month\n", segs[i-1].at.Sub(before.at).Round(time.Second),
				segs[i].at.Sub(before.at).Round(time.Second), perH, perH.Scale(cost.HoursPerMonth).Dollars(cost.S3Standard))
		}
	}
	fmt.Println()
	bill.Print(os.Stdout)
	fmt.Printf("logs: %s\n", r.log.summary())

	b.ReportMetric(monthly, "$/month")
	b.ReportMetric(ms(worst), "pickup-ms")
	for _, op := range s3store.Ops() {
		b.ReportMetric(perWorkerHr.Of(op), op.String()+"/worker-h")
	}
	b.ReportMetric(0, "ns/op")
}

func sum(c opCounts) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// ---------------------------------------------------------------------
// Failover
// ---------------------------------------------------------------------

// BenchmarkFailover kills a member while it runs a task: from that moment
// every request it makes fails (a 503 from a fault injector around its
// store) and its context is canceled, which is all a kill -9 looks like from
// the bucket. It measures, from the kill, when another worker claims a new
// task routed to the dead member's shard, and when the dead member's
// running task is re-dispatched by the monitor and finished by another
// worker. Default settings throughout (member_ttl 30s, lease 30s, monitor
// interval 5s, stale_after 10s).
//
// dedicated: four dedicated workers; the victim owns one of four active
// shards. elastic: four elastic workers settled to one member; the victim is
// that member, so the standbys must notice it is gone.
func BenchmarkFailover(b *testing.B) {
	b.Run("dedicated", func(b *testing.B) { runFailover(b, true) })
	b.Run("elastic", func(b *testing.B) { runFailover(b, false) })
}

func runFailover(b *testing.B, dedicated bool) {
	const workers = 4
	r := newRig(b, "q")
	conf := settings(b, nil)
	r.startProducer()
	r.startMonitor(conf.Monitor())
	var victim atomic.Pointer[benchWorker]
	doomed := func(id string) bool { v := victim.Load(); return v != nil && v.id == id }
	for range workers {
		// Every worker can be killed; the victim is chosen once the fleet
		// has formed. A dead process hands nothing back: no grace.
		wc := conf.Worker()
		wc.Dedicated, wc.ShutdownGrace = dedicated, time.Millisecond
		r.startWorker(wc, 10*time.Millisecond, true, doomed)
	}
	var v *benchWorker
	if dedicated {
		if !r.waitUntil(time.Minute, 100*time.Millisecond, func() bool { return r.members() == workers && r.agreed(workers) }) {
			b.Fatalf("the fleet did not form: %d members", r.members())
		}
		v = r.workers[workers-1]
	} else {
		if !r.waitUntil(3*time.Minute, 500*time.Millisecond, func() bool { return r.members() == 1 && r.agreed(1) }) {
			b.Fatalf("the elastic fleet did not settle to one member: %d", r.members())
		}
		for _, bw := range r.workers {
			if ok, _ := bw.w.Member(); ok {
				v = bw
			}
		}
	}
	time.Sleep(3 * time.Second) // the producer's cached fleet is current
	victim.Store(v)
	_, a := v.w.Member()
	if len(a.Own) == 0 {
		b.Fatalf("the victim polls no shard: %+v", a)
	}
	shard := a.Own[0]
	n := r.prod.Manifest().Shards
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); task.ShardFor(k, n) == shard {
			key = k
		}
	}

	// The victim's task: the victim blocks on it until it dies.
	blockSeq := r.nextSeq()
	if _, err := r.submit(benchInput{Seq: blockSeq, Block: true}, producer.Options{ShardKey: key}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if !r.tr.waitFor(ctx, func() bool { _, by, ok := r.tr.startedAt(blockSeq); return ok && by == v.id }) {
		_, by, ok := r.tr.startedAt(blockSeq)
		var as []string
		for _, bw := range r.workers {
			m, a := bw.w.Member()
			as = append(as, fmt.Sprintf("%s member=%v own=%v drain=%v", bw.id, m, a.Own, a.Drain))
		}
		b.Fatalf("the victim %s (shard %d) did not start its task (started=%v by %q); fleet: %s", v.id, shard, ok, by, strings.Join(as, "; "))
	}
	time.Sleep(500 * time.Millisecond)
	for _, op := range s3store.Ops() {
		v.faults.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
	}
	v.kill()
	killed := time.Now()

	// A new task for the dead member's shard, submitted right away: the
	// producer's view still lists the victim as live.
	probeSeq := r.nextSeq()
	if _, err := r.submit(benchInput{Seq: probeSeq}, producer.Options{ShardKey: key}); err != nil {
		b.Fatal(err)
	}

	var reassigned, redispatched, probeAt, blockStart, blockDone time.Time
	ctx2, cancel2 := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel2()
	for ctx2.Err() == nil && (reassigned.IsZero() || redispatched.IsZero() || probeAt.IsZero() || blockDone.IsZero()) {
		now := time.Now()
		if reassigned.IsZero() {
			for _, bw := range r.workers {
				if bw == v {
					continue
				}
				if ok, as := bw.w.Member(); ok && (containsInt(as.Own, shard) || containsInt(as.Drain, shard)) {
					reassigned = now
				}
			}
		}
		if redispatched.IsZero() && r.mon.Stats().Redispatched > 0 {
			redispatched = now
		}
		if t, by, ok := r.tr.startedAt(probeSeq); probeAt.IsZero() && ok && by != v.id {
			probeAt = t
		}
		if t, by, ok := r.tr.startedAt(blockSeq); blockStart.IsZero() && ok && by != v.id {
			blockStart = t
		}
		if t, ok := r.tr.succeededAt(blockSeq); blockDone.IsZero() && ok {
			blockDone = t
		}
		time.Sleep(20 * time.Millisecond)
	}
	since := func(t time.Time) (string, time.Duration) {
		if t.IsZero() {
			return "not within 3m", 3 * time.Minute
		}
		return fmtDur(t.Sub(killed)), t.Sub(killed)
	}
	reS, reD := since(reassigned)
	prS, prD := since(probeAt)
	rdS, _ := since(redispatched)
	bsS, _ := since(blockStart)
	bdS, bdD := since(blockDone)
	mode := "elastic (the sole member killed; 3 standbys)"
	if dedicated {
		mode = "dedicated (1 of 4 members killed)"
	}
	printRows(os.Stdout, "BenchmarkFailover: "+mode+", default settings, times from the kill", []resultRow{
		{"dead member's shard polled by another worker (own or drain)", reS, "", ""},
		{"new task for that shard claimed", prS, "<= 60s", verdict(!probeAt.IsZero() && prD <= time.Minute)},
		{"running task re-dispatched by the monitor", rdS, "", ""},
		{"running task started again elsewhere", bsS, "", ""},
		{"running task finished", bdS, "<= 60s", verdict(!blockDone.IsZero() && bdD <= time.Minute)},
	})
	fmt.Printf("logs: %s\n", r.log.summary())
	b.ReportMetric(reD.Seconds(), "reassign-s")
	b.ReportMetric(prD.Seconds(), "shard-served-s")
	b.ReportMetric(bdD.Seconds(), "task-finished-s")
	b.ReportMetric(0, "ns/op")
	if probeAt.IsZero() || blockDone.IsZero() {
		b.Errorf("failover incomplete after 3 minutes")
	}
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
