package integration

// The harness every benchmark shares (bench_*_test.go, one file per
// workload; docs/performance.md has the results and what they are held
// against). The benchmarks run against the MinIO server the harness starts,
// only with -bench, so `make test` is unaffected:
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
// its own HTTP client, its own clock fed only by its own responses, and
// s3store.Counters that count every request it makes by type and by the
// key it touches (fleet object, task objects, shard listings, ready
// pointers, clock), which is how the tables split tasks from liveness.
//
// Environment:
//
//	S3QUEUE_BENCH_WINDOW        measurement window of the workload and idle benchmarks (default 3m)
//	S3QUEUE_BENCH_WARMUP        load before a workload benchmark's window opens (default 2m)
//	S3QUEUE_BENCH_SEGMENT       also report the window in segments this long (default: off)
//	S3QUEUE_BENCH_IDLE_WARMUP   idle time before BenchmarkIdleFleet's window (default 10m)
//	S3QUEUE_BENCH_HEAVY_TASKS   tasks of BenchmarkHeavyLoad's burst (default 3000)
//	S3QUEUE_BENCH_HEAVY_WORKERS workers of BenchmarkHeavyLoad (default 4)
//	S3QUEUE_BENCH_HEAVY_SLOTS   slots per worker of BenchmarkHeavyLoad (default 32)
//	S3QUEUE_BENCH_MEMBER_TASKS  tasks of each phase of BenchmarkMemberThroughput (default 3000)
//	S3QUEUE_BENCH_MEMBER_SLOTS  slots of BenchmarkMemberThroughput's member (default 64)
//	S3QUEUE_BENCH_MEMBER_WORK   its handler's duration (default 10ms)
//	S3QUEUE_BENCH_MEMBER_LATENCY latency added to each of its requests (default 0)
//	S3QUEUE_BENCH_LOG           log level of the queue's components (default error)

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
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
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
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
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	c, err := config.Load("", environ)
	if err != nil {
		tb.Fatalf("settings %v: %v", env, err)
	}
	return c
}

// directEnv returns env with [queue] dispatch_mode = "direct" added: the
// benchmarks' direct-dispatch cases. Each case runs on a fresh bucket
// (newRig), so the queue is created in that mode.
func directEnv(env map[string]string) map[string]string {
	out := map[string]string{config.EnvPrefix + "QUEUE_DISPATCH_MODE": string(shards.DispatchDirect)}
	for k, v := range env {
		out[k] = v
	}
	return out
}

// describeSettings renders env as queue.toml-ish text for the tables.
func describeSettings(env map[string]string) string {
	if len(env) == 0 {
		return "defaults"
	}
	var parts []string
	for k, v := range env {
		key := strings.ToLower(strings.TrimPrefix(k, config.EnvPrefix))
		if sec, rest, ok := strings.Cut(key, "_"); ok && (sec == "worker" || sec == "monitor" || sec == "queue") {
			key = sec + "." + rest
		}
		parts = append(parts, key+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// Key classes of requests.
const (
	classFleet    = "fleet"    // fleet.json: renewals, standby reads, doorbell
	classClock    = "clock"    // HEADs a clock makes when no response refreshed it
	classScan0    = "scan0"    // LIST of shard 0, the active shard of a one-member fleet
	classScanN    = "scanN"    // LIST of another shard (other members' scans, drain sweeps, monitor sweeps)
	classTask     = "task"     // GET/PUT of task objects
	classPointer  = "pointer"  // ready pointers
	classManifest = "manifest" // queue.json
	classInbox    = "inbox"    // direct dispatch: inbox entries and the workers' listings of their inboxes
	classOverflow = "overflow" // direct dispatch: dead workers' entries moved to overflow/, and its scavenging
	classLease    = "lease"    // direct dispatch: worker leases workers/{id}.lease.json, and LISTs of workers/
	classBell     = "bell"     // direct dispatch: per-worker doorbells workers/{id}.bell
	classOther    = "other"
)

var classes = []string{classTask, classScan0, classScanN, classPointer, classInbox, classOverflow, classFleet,
	classLease, classBell, classClock, classManifest, classOther}

func keyClass(op s3store.Op, key string) string {
	switch {
	case strings.HasPrefix(key, direct.InboxPrefix):
		return classInbox
	case strings.HasPrefix(key, direct.OverflowPrefix):
		return classOverflow
	case strings.HasPrefix(key, direct.WorkersPrefix) && strings.HasSuffix(key, ".bell"):
		return classBell
	case strings.HasPrefix(key, direct.WorkersPrefix):
		return classLease
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

// classCounter counts a component's requests by the key class they touch:
// it hands each request to the s3store.Counter of its class, all of them
// over the component's store. It forwards that store's Date headers, so
// the clocks above it sync from responses exactly as on the bare store.
type classCounter struct {
	inner s3store.Store
	by    map[string]*s3store.Counter // by key class; fixed at creation
}

func newClassCounter(inner s3store.Store) *classCounter {
	c := &classCounter{inner: inner, by: make(map[string]*s3store.Counter, len(classes))}
	for _, cl := range classes {
		c.by[cl] = s3store.NewCounter(inner)
	}
	return c
}

// counts returns the requests so far by key class.
func (c *classCounter) counts() map[string]cost.Requests {
	out := make(map[string]cost.Requests, len(c.by))
	for cl, ctr := range c.by {
		out[cl] = cost.FromCounts(ctr.Counts())
	}
	return out
}

// refused returns the requests so far that failed a precondition (412:
// a lost CAS, an If-None-Match on an existing key), by key class.
func (c *classCounter) refused() map[string]int64 {
	out := make(map[string]int64, len(c.by))
	for cl, ctr := range c.by {
		n := ctr.Counts()
		for _, op := range s3store.Ops() {
			out[cl] += n[op][s3store.OutcomePrecondition]
		}
	}
	return out
}

func (c *classCounter) Get(ctx context.Context, key string) (s3store.Object, error) {
	return c.by[keyClass(s3store.OpGet, key)].Get(ctx, key)
}

func (c *classCounter) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	return c.by[keyClass(s3store.OpHead, key)].Head(ctx, key)
}

func (c *classCounter) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	return c.by[keyClass(s3store.OpPut, key)].Put(ctx, key, body, opts)
}

func (c *classCounter) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	return c.by[keyClass(s3store.OpDelete, key)].Delete(ctx, key, opts)
}

func (c *classCounter) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	return c.by[keyClass(s3store.OpList, prefix)].List(ctx, prefix, opts)
}

// Now is counted as the HEAD it costs, in classClock.
func (c *classCounter) Now(ctx context.Context) (time.Time, error) { return c.by[classClock].Now(ctx) }

func (c *classCounter) WatchDates(fn func(s3store.DateSample)) { s3store.WatchDates(c.inner, fn) }

// TestBenchClassCounter checks the benchmarks' accounting on an in-memory
// store: each request is counted once, by type, in the class of the key it
// touches (refused and not-found requests too: S3 bills them), and a
// clock's HEAD in classClock.
func TestBenchClassCounter(t *testing.T) {
	ctx := context.Background()
	c := newClassCounter(mem.New())
	c.Put(ctx, shards.FleetKey, []byte("{}"), s3store.PutOptions{})
	c.Put(ctx, shards.FleetKey, []byte("{}"), s3store.PutOptions{IfNoneMatch: true})
	c.Get(ctx, shards.FleetKey)
	c.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{})
	c.List(ctx, shards.TasksPrefix(1), s3store.ListOptions{})
	c.Get(ctx, shards.TasksPrefix(1)+"missing")
	c.Head(ctx, shards.ManifestKey)
	c.Delete(ctx, "elsewhere", s3store.DeleteOptions{})
	c.Now(ctx)
	// Direct dispatch's keys.
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	id, err := task.NewID(at, strings.NewReader("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	c.Put(ctx, direct.EntryKey("w001", at, id, 3), nil, s3store.PutOptions{})
	c.List(ctx, direct.Inbox("w001"), s3store.ListOptions{})
	c.Put(ctx, direct.OverflowKey(direct.Bucket(at), id, 3), nil, s3store.PutOptions{})
	c.List(ctx, direct.OverflowPrefix, s3store.ListOptions{})
	c.List(ctx, direct.WorkersPrefix, s3store.ListOptions{})
	c.Put(ctx, direct.LeaseKey("w001"), []byte("{}"), s3store.PutOptions{})
	c.Get(ctx, direct.LeaseKey("w001"))
	c.Put(ctx, direct.BellKey("w001"), []byte("x"), s3store.PutOptions{})
	c.Head(ctx, direct.BellKey("w001"))
	want := map[string]cost.Requests{
		classFleet:    {PUT: 2, GET: 1},
		classScan0:    {LIST: 1},
		classScanN:    {LIST: 1},
		classTask:     {GET: 1},
		classManifest: {HEAD: 1},
		classOther:    {DELETE: 1},
		classClock:    {HEAD: 1},
		classInbox:    {PUT: 1, LIST: 1},
		classOverflow: {PUT: 1, LIST: 1},
		classLease:    {PUT: 1, GET: 1, LIST: 1},
		classBell:     {PUT: 1, HEAD: 1},
	}
	got := c.counts()
	for _, cl := range classes {
		if got[cl] != want[cl] {
			t.Errorf("class %s: counted %v, want %v", cl, got[cl], want[cl])
		}
	}
	// The If-None-Match PUT on the existing fleet object was refused.
	if r := c.refused(); r[classFleet] != 1 || r[classTask] != 0 {
		t.Errorf("refused by class: %v, want fleet 1 and no other", r)
	}
}

// Sources of requests.
const (
	srcProducer = "producer"
	srcWorkers  = "workers"
	srcMonitor  = "monitor"
)

// component is one process of the queue with a store of its own.
type component struct {
	name, source string
	ctr          *classCounter
}

// meter opens the components' stores and reads their counts.
type meter struct {
	tb   testing.TB
	url  string
	mu   sync.Mutex
	list []*component
}

func newMeter(tb testing.TB, url string) *meter {
	return &meter{tb: tb, url: url}
}

// open returns a fresh, counted store on the meter's queue for the named
// component.
func (m *meter) open(name, source string) s3store.Store {
	m.tb.Helper()
	st, err := storeurl.Open(context.Background(), m.url)
	if err != nil {
		m.tb.Fatalf("open store: %v", err)
	}
	c := &component{name: name, source: source, ctr: newClassCounter(st)}
	m.mu.Lock()
	m.list = append(m.list, c)
	m.mu.Unlock()
	return c.ctr
}

// reading is a snapshot of every component's counts.
type reading struct {
	at      time.Time
	comp    map[string]cost.Requests            // by component
	live    map[string]cost.Requests            // by component, its requests in livenessClasses
	class   map[string]map[string]cost.Requests // by source, then key class
	refused map[string]int64                    // requests refused with 412, by key class (every source)
}

func (m *meter) read() reading {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := reading{at: time.Now(), comp: map[string]cost.Requests{}, live: map[string]cost.Requests{},
		class: map[string]map[string]cost.Requests{}, refused: map[string]int64{}}
	for _, c := range m.list {
		if r.class[c.source] == nil {
			r.class[c.source] = map[string]cost.Requests{}
		}
		var all cost.Requests
		counts := c.ctr.counts()
		for k, v := range counts {
			all = all.Add(v)
			r.class[c.source][k] = r.class[c.source][k].Add(v)
		}
		r.comp[c.name] = all
		r.live[c.name] = workerLiveness(counts)
		for k, v := range c.ctr.refused() {
			r.refused[k] += v
		}
	}
	return r
}

// since returns the requests made between e and r.
func (r reading) since(e reading) reading {
	out := reading{at: r.at, comp: map[string]cost.Requests{}, live: map[string]cost.Requests{},
		class: map[string]map[string]cost.Requests{}, refused: map[string]int64{}}
	for k, v := range r.comp {
		out.comp[k] = v.Sub(e.comp[k])
	}
	for k, v := range r.live {
		out.live[k] = v.Sub(e.live[k])
	}
	for k, v := range r.refused {
		out.refused[k] = v - e.refused[k]
	}
	for src, m := range r.class {
		out.class[src] = map[string]cost.Requests{}
		for k, v := range m {
			out.class[src][k] = v.Sub(e.class[src][k])
		}
	}
	return out
}

func (r reading) total() cost.Requests {
	var t cost.Requests
	for _, v := range r.comp {
		t = t.Add(v)
	}
	return t
}

func (r reading) bySource(src string) cost.Requests {
	var t cost.Requests
	for _, v := range r.class[src] {
		t = t.Add(v)
	}
	return t
}

// livenessClasses are the key classes of a worker's requests that are paid
// per hour whatever the load: the fleet object, the clock, and under direct
// dispatch the worker's own lease and doorbell.
var livenessClasses = []string{classFleet, classClock, classLease, classBell}

// workerLiveness is the part of a source's class counts in livenessClasses.
func workerLiveness(byClass map[string]cost.Requests) cost.Requests {
	var t cost.Requests
	for _, cl := range livenessClasses {
		t = t.Add(byClass[cl])
	}
	return t
}

// liveness is the part of the requests that is paid per hour whatever the
// load: the workers' requests in livenessClasses, and the monitor.
func (r reading) liveness() cost.Requests {
	return workerLiveness(r.class[srcWorkers]).Add(r.bySource(srcMonitor))
}

// refusedTotal counts the window's 412s, every class.
func (r reading) refusedTotal() int64 {
	var n int64
	for _, v := range r.refused {
		n += v
	}
	return n
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
			if v == (cost.Requests{}) {
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t", src, cl)
			for _, op := range s3store.Ops() {
				fmt.Fprintf(tw, "%s\t", fmtRate(v.Of(op)/div))
			}
			fmt.Fprint(tw, "\n")
		}
	}
	t := r.total()
	fmt.Fprint(tw, "  total\t\t")
	for _, op := range s3store.Ops() {
		fmt.Fprintf(tw, "%s\t", fmtRate(t.Of(op)/div))
	}
	fmt.Fprint(tw, "\n")
	tw.Flush()
	var refused []string
	for _, cl := range classes {
		if n := r.refused[cl]; n > 0 {
			refused = append(refused, fmt.Sprintf("%s %s", cl, fmtRate(float64(n)/div)))
		}
	}
	if len(refused) == 0 {
		refused = []string{"none"}
	}
	fmt.Fprintf(w, "  refused with 412 (lost CAS, If-None-Match on an existing key) %s, by class: %s\n", unit, strings.Join(refused, ", "))
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
	slices.Sort(ds)
	return ds, early
}

// spread returns, for the tasks in seqs that a handler started, how many
// each of workers first started: the least, the median and the most, and
// how many workers started none.
func (tr *tracker) spread(seqs []int, workers []string) (lo, med, hi, idle int) {
	tr.mu.Lock()
	by := map[string]int{}
	for _, s := range seqs {
		if w, ok := tr.startedBy[s]; ok {
			by[w]++
		}
	}
	tr.mu.Unlock()
	n := make([]int, 0, len(workers))
	for _, w := range workers {
		n = append(n, by[w])
		if by[w] == 0 {
			idle++
		}
	}
	if len(n) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(n)
	return n[0], n[len(n)/2], n[len(n)-1], idle
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
	c.attrs = slices.Concat(t.attrs, as)
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
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

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

// startProducer starts the producer with cfg (config.Config.Producer:
// the same settings as the workers and the monitor, so that the first of
// them to open the queue creates it in the dispatch mode they share).
func (r *rig) startProducer(cfg producer.Config) {
	cfg.Logger = r.logger()
	p, err := producer.New(r.ctx, r.m.open("producer", srcProducer), cfg)
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

// inboxesAsleep reads the worker leases (uncounted) and reports whether
// every worker's lease is marked asleep (direct dispatch).
func (r *rig) inboxesAsleep() bool {
	ws, err := direct.ReadWorkers(r.ctx, r.observer)
	if err != nil || len(ws) != len(r.workers) {
		return false
	}
	for _, w := range ws {
		if !w.Asleep {
			return false
		}
	}
	return true
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

// settle waits until the elastic fleet is idle: asleep, with no member (the
// doorbell, past its awake grace.
func (r *rig) settle(timeout time.Duration) time.Duration {
	start := time.Now()
	ok := r.waitUntil(timeout, time.Second, r.asleepWithNoMember)
	if !ok {
		r.tb.Fatalf("the fleet did not settle (asleep, no member) within %v: %d members, asleep=%v", timeout, r.members(), r.asleep())
	}
	return time.Since(start)
}

// asleepWithNoMember reports whether the elastic fleet sleeps with no
// member: its last member has left it, after its awake grace, to the
// standbys' turns at the doorbell.
func (r *rig) asleepWithNoMember() bool { return r.members() == 0 && r.asleep() }

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
