package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// ScaleOptions size a scale run (issue 10, item 4). Zero fields take the
// defaults.
type ScaleOptions struct {
	// Workers in the fleet (default 10), each with Concurrency handler
	// slots (default 16). Workers are dedicated (always members of the
	// fleet, as a fixed deployment runs them) unless Elastic.
	Workers, Concurrency int
	Elastic              bool
	// Shards of the queue (default 16).
	Shards int
	// RootMembers is the workers' root_members (0: the default, 16);
	// 1,000 puts every member's renewal in the fleet object, as before
	// leased members.
	RootMembers int
	// TasksPerSecond is the offered load (default 100): producers submit
	// at this fixed rate whatever the queue does, so a queue that cannot
	// keep up grows a backlog instead of slowing them.
	TasksPerSecond float64
	// Producers share the rate (default: one per 16 tasks a second, each
	// submitting one task at a time).
	Producers int
	// HandlerTime is how long each task's handler runs (default 100 ms).
	HandlerTime time.Duration
	// Warmup runs before the measured Window (defaults 30 s and 30 s of
	// virtual time). Workers start spread over the first 5 s. Tail runs
	// after the window, at the same load, so that tasks submitted near
	// its end have their pickup measured too (default 10 s).
	Warmup, Window, Tail time.Duration
	// Seed draws the service times, the schedule and every process's ids.
	Seed uint64
	// Model configures the modelled S3 (zero: its defaults, one partition
	// at the start).
	Model S3ModelConfig
}

func (o *ScaleOptions) fill() {
	if o.Workers == 0 {
		o.Workers = 10
	}
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.Shards == 0 {
		o.Shards = 16
	}
	if o.TasksPerSecond == 0 {
		o.TasksPerSecond = 100
	}
	if o.Producers == 0 {
		o.Producers = int(math.Ceil(o.TasksPerSecond / 16))
	}
	if o.HandlerTime == 0 {
		o.HandlerTime = 100 * time.Millisecond
	}
	if o.Warmup == 0 {
		o.Warmup = 30 * time.Second
	}
	if o.Window == 0 {
		o.Window = 30 * time.Second
	}
	if o.Tail == 0 {
		o.Tail = 10 * time.Second
	}
}

// ScaleResult is what a scale run measured over its window.
type ScaleResult struct {
	Options ScaleOptions
	// Submitted: tasks acknowledged to producers in the window;
	// SubmitErrors: submits that failed in it. Completed: tasks whose
	// handler succeeded and whose outcome was written in it.
	Submitted, SubmitErrors, Completed int
	// Throughput is Completed per second of the window.
	Throughput float64
	// Requests is every request made in the window, by type (refused ones
	// too: S3 bills a 412 or a 404, and the model counts a 503 as offered
	// load); PerMillion is Requests per million completed tasks, and
	// DollarsPerMillion their price at S3 Standard list prices.
	Requests          cost.Requests
	PerMillion        cost.Requests
	DollarsPerMillion float64
	// Pickup is the time from a Submit call to the task's first claim,
	// over the tasks submitted in the window. Unclaimed counts those not
	// claimed by the end of the tail; when a percentile falls among them
	// it is reported as -1 (the queue did not keep up).
	PickupP50, PickupP99 time.Duration
	Unclaimed            int
	// Membership traffic: the workers' requests on the fleet object and
	// on leased members' lease objects (fleet/leases/) in the window, by
	// type and outcome, and the member-seconds they served (members
	// sampled once a second). Fleet412s are the PUTs refused with 412.
	FleetGets, FleetPuts, FleetLists, Fleet412s int
	// Joined is when, into the warm-up, every worker was a member (0: not
	// all were by its end); JoinFleetPuts and Join412s are the fleet
	// writes, and those refused, until then.
	Joined                  time.Duration
	JoinFleetPuts, Join412s int
	MemberSeconds           float64
	// Members is how many workers were members at the end of the window;
	// Working how many of them claimed a task in it.
	Members, Working int
	// SlowDowns are the 503s the model answered in the window;
	// SlowDownsBy splits those the processes saw by what they were for:
	// "fleet" (the fleet object), "tasks" (task objects and pointers,
	// listings of shards), "other".
	SlowDowns   int
	SlowDownsBy map[string]int
	// Partitions is the bucket's partition count at the end; Splits what
	// the model split during the run.
	Partitions int
	Splits     []Split
	// ShardsAtEnd is the queue's shard count at the end of the window:
	// more than Options.Shards when the workers' automatic reshard grew it.
	ShardsAtEnd int
}

// FleetRequestsPerMemberHour is the fleet-object requests per member-hour.
func (r ScaleResult) FleetRequestsPerMemberHour() float64 {
	if r.MemberSeconds == 0 {
		return 0
	}
	return float64(r.FleetGets+r.FleetPuts+r.FleetLists) / r.MemberSeconds * 3600
}

// ConflictsPerFleetWrite is the 412s per successful fleet write (mostly
// renewals, in the fleet object or of a lease object): how often a write
// lost a race for the fleet object.
func (r ScaleResult) ConflictsPerFleetWrite() float64 {
	ok := r.FleetPuts - r.Fleet412s
	if ok <= 0 {
		return 0
	}
	return float64(r.Fleet412s) / float64(ok)
}

// Scale runs a fleet of real workers, producers at a fixed rate and one
// monitor against a modelled S3 (s3model.go) with no fault but its 503
// SlowDowns, and measures the queue over a window after a warm-up. It
// must be called inside a synctest bubble.
func Scale(opts ScaleOptions) (ScaleResult, error) {
	opts.fill()
	start := time.Now()
	model, err := NewS3Model(opts.Model, rand.New(rand.NewPCG(opts.Seed, 0x5ca1e)), start)
	if err != nil {
		return ScaleResult{}, err
	}
	srv := NewServer(Providers[0], rand.New(rand.NewPCG(opts.Seed, 0x5e4e)), 0)
	srv.SetModel(model)
	srv.lean = true
	manifest, _ := json.Marshal(map[string]any{"format": shards.FormatVersion, "shards": opts.Shards,
		"created_at": start.UTC(), "conditional_delete": s3store.DeleteHonoured})
	srv.Put(shards.ManifestKey, manifest)
	srv.Start()

	r := &scaleRun{opts: opts, srv: srv, submitted: make(map[string]time.Time), claimed: make(map[string]time.Time),
		working: make(map[string]bool)}
	ctx, cancel := context.WithCancel(context.Background())
	var procs sync.WaitGroup
	spawn := func(f func()) {
		procs.Add(1)
		go func() {
			defer procs.Done()
			f()
		}()
	}

	mon, err := monitor.New(ctx, r.store("m1", false), monitor.Config{ID: "m1", Rand: r.rand("m1"), Logger: discard})
	if err != nil {
		cancel()
		srv.Close()
		return ScaleResult{}, fmt.Errorf("open the monitor: %w", err)
	}
	spawn(func() { mon.Run(ctx) })
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5747))
	for i := range opts.Workers {
		id := fmt.Sprintf("w%04d", i+1)
		delay := time.Duration(rng.Int64N(int64(5 * time.Second)))
		spawn(func() { r.runWorker(ctx, id, delay) })
	}
	for i := range opts.Producers {
		spawn(func() { r.produce(ctx, i) })
	}

	// The window: snapshot the counters at both ends, sample membership
	// once a second in between.
	// The warm-up: the fleet joins. Sampled once a second, to time the
	// joins and count what they cost.
	began, joinCounts := time.Now(), r.counts.snapshot()
	var joined time.Duration
	for time.Since(began) < opts.Warmup {
		time.Sleep(min(time.Second, opts.Warmup-time.Since(began)))
		if joined == 0 && r.members() >= opts.Workers {
			joined, joinCounts = time.Since(began), r.counts.snapshot().sub(joinCounts)
		}
	}
	r.mu.Lock()
	r.from, r.to = time.Now(), time.Now().Add(opts.Window)
	r.mu.Unlock()
	before, beforeSrv := r.counts.snapshot(), srv.Counts()
	var memberSeconds float64
	for range int(opts.Window / time.Second) {
		time.Sleep(time.Second)
		memberSeconds += float64(r.members())
	}
	after, afterSrv := r.counts.snapshot(), srv.Counts()
	members := r.members()
	var layout shards.Manifest
	json.Unmarshal(srv.Objects(shards.ManifestKey)[shards.ManifestKey], &layout)
	// The tail: the load goes on while tasks submitted near the end of
	// the window are claimed.
	time.Sleep(opts.Tail)
	cancel()
	procs.Wait()
	srv.Close()
	st := model.Stats(time.Now())

	res := ScaleResult{Options: opts, MemberSeconds: memberSeconds, Members: members, Joined: joined, ShardsAtEnd: layout.Shards,
		JoinFleetPuts: int(joinCounts.fleet.Of(s3store.OpPut)), Join412s: int(joinCounts.fleet[s3store.OpPut][s3store.OutcomePrecondition]),
		SlowDowns: afterSrv["slowdown"] - beforeSrv["slowdown"], Partitions: len(st.Partitions), Splits: st.Splits}
	d := after.sub(before)
	res.Requests = cost.FromCounts(d.all)
	res.FleetGets = int(d.fleet.Of(s3store.OpGet))
	res.FleetPuts = int(d.fleet.Of(s3store.OpPut))
	res.FleetLists = int(d.fleet.Of(s3store.OpList))
	res.Fleet412s = int(d.fleet[s3store.OpPut][s3store.OutcomePrecondition])
	res.SlowDownsBy = map[string]int{"fleet": d.slow[0], "tasks": d.slow[1], "other": d.slow[2]}
	r.summarize(&res)
	return res, nil
}

// scaleRun is the state of one scale run.
type scaleRun struct {
	opts   ScaleOptions
	srv    *Server
	counts scaleCounts

	mu        sync.Mutex
	from, to  time.Time            // the window
	submitted map[string]time.Time // task id -> when its Submit was called
	claimed   map[string]time.Time // task id -> its first claim
	submitErr int
	completed int
	working   map[string]bool // workers that claimed in the window
	workers   []*worker.Worker
}

func (r *scaleRun) rand(name string) *rand.ChaCha8 {
	var key [32]byte
	h := fnvString(name)
	for i := range 8 {
		key[i] = byte(r.opts.Seed >> (8 * i))
		key[8+i] = byte(h >> (8 * i))
	}
	return rand.NewChaCha8(key)
}

func (r *scaleRun) store(proc string, worker bool) *countingStore {
	return &countingStore{Handle: r.srv.Handle(proc), counts: &r.counts, worker: worker}
}

// runWorker starts worker id after delay and runs it until ctx ends.
func (r *scaleRun) runWorker(ctx context.Context, id string, delay time.Duration) {
	time.Sleep(delay)
	st := r.store(id, true)
	wk, err := worker.New(ctx, st, worker.Config{ID: id, Concurrency: r.opts.Concurrency, Dedicated: !r.opts.Elastic, RootMembers: r.opts.RootMembers,
		Rand: r.rand(id), Clock: clock.New(st, clock.Config{}), Logger: discard, ShutdownGrace: time.Second,
		OnEvent: func(e worker.Event) { r.event(id, e) }})
	if err != nil {
		return // the run reports too few members
	}
	wk.Handle(taskType, func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(r.opts.HandlerTime):
			return json.RawMessage(`{}`), nil
		}
	})
	r.mu.Lock()
	r.workers = append(r.workers, wk)
	r.mu.Unlock()
	wk.Run(ctx)
}

func (r *scaleRun) inWindow(t time.Time) bool {
	return !t.Before(r.from) && t.Before(r.to) && !r.from.IsZero()
}

// event records claims and completions.
func (r *scaleRun) event(workerID string, e worker.Event) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case "claimed":
		if _, ok := r.claimed[e.TaskID]; !ok {
			r.claimed[e.TaskID] = now
		}
		if r.inWindow(now) {
			r.working[workerID] = true
		}
	case "succeeded":
		if r.inWindow(now) {
			r.completed++
		}
	}
}

// produce submits this producer's share of the rate on a fixed schedule,
// one Submit at a time: one that falls behind (a slow or refused PUT)
// submits at once until it is back on schedule. (Fewer producers each
// submitting batches with SubmitBatch were tried for wall time: the
// producers' CPU is per task, not per producer, and they read the fleet
// object less, which changes the results; see docs/scale.md.)
func (r *scaleRun) produce(ctx context.Context, i int) {
	name := fmt.Sprintf("p%d", i+1)
	st := r.store(name, false)
	var prod *producer.Producer
	for prod == nil {
		var err error
		if prod, err = producer.New(ctx, st, producer.Config{Rand: r.rand(name), Clock: clock.New(st, clock.Config{}), Logger: discard}); err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
	every := time.Duration(float64(time.Second) * float64(r.opts.Producers) / r.opts.TasksPerSecond)
	// Each producer has its own phase, so that their submits do not all
	// land at one instant.
	next := time.Now().Add(every * time.Duration(i) / time.Duration(r.opts.Producers))
	for ctx.Err() == nil {
		if wait := time.Until(next); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		next = next.Add(every)
		at := time.Now()
		id, err := prod.Submit(ctx, taskType, json.RawMessage(`{"n":1}`), producer.Options{})
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		switch {
		case err != nil && r.inWindow(at):
			r.submitErr++
		case err == nil:
			r.submitted[id] = at
		}
		r.mu.Unlock()
	}
}

// members returns how many workers are members of the fleet now.
func (r *scaleRun) members() int {
	n := 0
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, wk := range r.workers {
		if m, _ := wk.Member(); m {
			n++
		}
	}
	return n
}

// summarize fills in the window's tasks, throughput, pickup and costs.
func (r *scaleRun) summarize(res *ScaleResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var waits []time.Duration
	unclaimed := 0
	for id, at := range r.submitted {
		if !r.inWindow(at) {
			continue
		}
		res.Submitted++
		c, ok := r.claimed[id]
		if !ok {
			unclaimed++
			continue
		}
		waits = append(waits, c.Sub(at))
	}
	res.Working = len(r.working)
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	pct := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(res.Submitted))) - 1
		if i < 0 || i >= len(waits) {
			return -1
		}
		return waits[i]
	}
	res.PickupP50, res.PickupP99 = pct(0.50), pct(0.99)
	res.Unclaimed = unclaimed
	res.SubmitErrors = r.submitErr
	res.Completed = r.completed
	res.Throughput = float64(r.completed) / r.opts.Window.Seconds()
	if r.completed > 0 {
		res.PerMillion = res.Requests.Scale(1e6 / float64(r.completed))
		res.DollarsPerMillion = res.PerMillion.Dollars(cost.S3Standard)
	}
}

// fnvString hashes s (FNV-1a, 64 bits).
func fnvString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// scaleCounts counts every request of a run by type and outcome, and the
// workers' requests on the fleet object apart.
type scaleCounts struct {
	mu    sync.Mutex
	all   s3store.Counts
	fleet s3store.Counts
	slow  [3]int // 503s seen on the fleet object, under tasks/, elsewhere
}

type countsSnapshot struct {
	all, fleet s3store.Counts
	slow       [3]int
}

func (c *scaleCounts) add(op s3store.Op, key string, fleet bool, err error) {
	o := s3store.OutcomeOf(err)
	c.mu.Lock()
	c.all[op][o]++
	if fleet {
		c.fleet[op][o]++
	}
	if errors.Is(err, s3store.ErrInjected503) {
		switch {
		case key == shards.FleetKey || strings.HasPrefix(key, shards.LeasePrefix):
			c.slow[0]++
		case strings.HasPrefix(key, "tasks/"):
			c.slow[1]++
		default:
			c.slow[2]++
		}
	}
	c.mu.Unlock()
}

func (c *scaleCounts) snapshot() countsSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return countsSnapshot{c.all, c.fleet, c.slow}
}

func (a countsSnapshot) sub(b countsSnapshot) countsSnapshot {
	for op := range a.all {
		for o := range a.all[op] {
			a.all[op][o] -= b.all[op][o]
			a.fleet[op][o] -= b.fleet[op][o]
		}
	}
	for i := range a.slow {
		a.slow[i] -= b.slow[i]
	}
	return a
}

// countingStore is one process's connection, counting its requests.
type countingStore struct {
	*Handle
	counts *scaleCounts
	worker bool
}

func (s *countingStore) onFleet(key string) bool {
	return s.worker && (key == shards.FleetKey || strings.HasPrefix(key, shards.LeasePrefix))
}

// Get implements s3store.Store.
func (s *countingStore) Get(ctx context.Context, key string) (s3store.Object, error) {
	o, err := s.Handle.Get(ctx, key)
	s.counts.add(s3store.OpGet, key, s.onFleet(key), err)
	return o, err
}

// Head implements s3store.Store.
func (s *countingStore) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	o, err := s.Handle.Head(ctx, key)
	s.counts.add(s3store.OpHead, key, s.onFleet(key), err)
	return o, err
}

// Put implements s3store.Store.
func (s *countingStore) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	etag, err := s.Handle.Put(ctx, key, body, opts)
	s.counts.add(s3store.OpPut, key, s.onFleet(key), err)
	return etag, err
}

// Delete implements s3store.Store.
func (s *countingStore) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	err := s.Handle.Delete(ctx, key, opts)
	s.counts.add(s3store.OpDelete, key, s.onFleet(key), err)
	return err
}

// List implements s3store.Store.
func (s *countingStore) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	p, err := s.Handle.List(ctx, prefix, opts)
	s.counts.add(s3store.OpList, prefix, s.onFleet(prefix), err)
	return p, err
}

// Now implements s3store.Store: a HEAD of the bucket.
func (s *countingStore) Now(ctx context.Context) (time.Time, error) {
	t, err := s.Handle.Now(ctx)
	s.counts.add(s3store.OpHead, "", false, err)
	return t, err
}
