package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
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

// The wake-up run (issue 24): how soon an elastic fleet is at work on a
// backlog that appears at once. It uses only the public APIs of worker,
// producer and monitor, so that the same scenario runs on older commits
// for a before-and-after.

// Wake-up variants: what the backlog meets.
const (
	// WakeAsleep: the fleet settled idle until it slept (WakeupOptions.Settle
	// after the last worker started), then the backlog appears.
	WakeAsleep = "asleep"
	// WakeAwake: the backlog appears once the fleet has settled with one
	// member awake and the rest standing by, every worker past its
	// first 30 s, before the member puts the fleet to sleep.
	WakeAwake = "awake"
	// WakeCold: the backlog is submitted first, then the workers start
	// together on it.
	WakeCold = "cold"
)

// WakeupOptions size a wake-up run. Zero fields take the defaults.
type WakeupOptions struct {
	// Variant is WakeAsleep (the default), WakeAwake or WakeCold.
	Variant string
	// Workers in the fleet (default 10), elastic, each with Concurrency
	// handler slots (default 4).
	Workers, Concurrency int
	// Shards of the queue (default: max(16, Workers), so that every worker
	// can hold one).
	Shards int
	// TasksPerSlot sizes the backlog: Workers × Concurrency × TasksPerSlot
	// tasks (default 4), each running HandlerTime (default 5 s).
	TasksPerSlot int
	HandlerTime  time.Duration
	// Producers submit the backlog, each one task at a time as fast as it
	// can, an equal share each (default: one per 64 tasks). They are open
	// from the start, as a service that submits now and then is.
	Producers int
	// Spread: workers start spread over this long (default 3 s; 1 s for
	// WakeCold, started together).
	Spread time.Duration
	// Settle bounds the wait for the fleet's state before the backlog
	// (default 20 min after the last worker started). WakeAsleep waits
	// from 30 s after the last start for the first second the fleet
	// object says asleep with at most one member, then a minute more;
	// WakeAwake waits from 31 s after the last start for the first second
	// with one member, awake.
	Settle time.Duration
	// Limit bounds the episode (default 15 min of virtual time): what is
	// not done by then is reported as not done.
	Limit time.Duration
	// Seed draws the service times, the start times and every process's ids.
	Seed uint64
	// Model configures the modelled S3.
	Model S3ModelConfig
	// Progress, if set, gets a line every 30 s of the episode.
	Progress io.Writer
	// Trace, if set, gets the workers' events and debug logs, one line
	// each, stamped with the virtual time since the run began.
	Trace io.Writer
}

func (o *WakeupOptions) fill() {
	if o.Variant == "" {
		o.Variant = WakeAsleep
	}
	if o.Workers == 0 {
		o.Workers = 10
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.Shards == 0 {
		o.Shards = max(16, o.Workers)
	}
	if o.TasksPerSlot == 0 {
		o.TasksPerSlot = 4
	}
	if o.HandlerTime == 0 {
		o.HandlerTime = 5 * time.Second
	}
	if o.Producers == 0 {
		o.Producers = (o.tasks() + 63) / 64
	}
	if o.Spread == 0 {
		o.Spread = 3 * time.Second
		if o.Variant == WakeCold {
			o.Spread = time.Second
		}
	}
	if o.Settle == 0 {
		o.Settle = 20 * time.Minute
	}
	if o.Limit == 0 {
		o.Limit = 15 * time.Minute
	}
}

func (o WakeupOptions) tasks() int { return o.Workers * o.Concurrency * o.TasksPerSlot }

// WakeupResult is what a wake-up run measured. Times are from the moment
// the backlog met the fleet: the first Submit (WakeAsleep, WakeAwake), or
// the first worker's start (WakeCold, whose backlog was submitted before).
type WakeupResult struct {
	Options WakeupOptions
	Tasks   int
	// The fleet as the backlog met it: members (live or not, as listed in
	// the fleet object), whether it was asleep, its standbys' roster.
	Members, Standbys int
	Asleep            bool
	// At: the backlog's moment, into the run (virtual time).
	At time.Duration
	// Submitted: the last Submit acknowledged, from the first.
	Submitted time.Duration
	// FirstClaim: the first claim of a backlog task. Busy50, Busy90 and
	// Busy100: until half, 90 % and every worker had started a task (-1:
	// not within the episode). Busy counts the workers that did.
	FirstClaim, Busy50, Busy90, Busy100 time.Duration
	Busy                                int
	// Joined50, Joined90, Joined100: until half, 90 % and every worker had
	// been a member (at the backlog's moment, or by taking a shard since;
	// -1: not within the episode).
	Joined50, Joined90, Joined100 time.Duration
	// Done: tasks that succeeded; Makespan: until the last did (-1: not
	// every task did within Limit); Ideal: tasks × handler time / slots.
	Done            int
	Makespan, Ideal time.Duration
	MembersBySecond []int // members sampled each second of the episode
	// Left says where the tasks not done at the end were (shard, status,
	// the shard's member), when some were not.
	Left         string
	SubmitErrors int
	SlowDowns    int
	Requests     cost.Requests // the episode's, every process's
	Fleet        cost.Requests // of them, on fleet.json and fleet/leases/
	Dollars      float64
	// IdlePerHour: the sleeping fleet's requests (every process's) per
	// hour, over the minute before the backlog (WakeAsleep);
	// IdleFleetPerHour those on the fleet's objects.
	IdlePerHour, IdleFleetPerHour cost.Requests
}

// Wakeup runs a wake-up episode: Workers elastic workers, one monitor and
// Producers producers against a modelled S3, the backlog appearing as
// Variant says, and measures how soon the fleet is at work on it. It must
// be called inside a synctest bubble.
func Wakeup(opts WakeupOptions) (WakeupResult, error) {
	opts.fill()
	began := time.Now()
	model, err := NewS3Model(opts.Model, rand.New(rand.NewPCG(opts.Seed, 0x5ca1e)), began)
	if err != nil {
		return WakeupResult{}, err
	}
	srv := NewServer(Providers[0], rand.New(rand.NewPCG(opts.Seed, 0x5e4e)), 0)
	srv.SetModel(model)
	srv.lean = true
	manifest, _ := json.Marshal(map[string]any{"format": shards.FormatVersion, "shards": opts.Shards,
		"created_at": began.UTC(), "conditional_delete": s3store.DeleteHonoured})
	srv.Put(shards.ManifestKey, manifest)
	srv.Start()

	// The scale run's plumbing: its stores count requests, its seeded
	// sources draw ids. Every process's requests on the fleet's objects
	// count as the fleet's here, producers' reads too.
	sr := &scaleRun{opts: ScaleOptions{Seed: opts.Seed}, srv: srv}
	r := &wakeRun{opts: opts, sr: sr, began: began, firstStart: make(map[string]time.Time), acked: make(map[string]bool), joined: make(map[string]time.Time),
		ids: make(map[*worker.Worker]string), done: make(map[string]bool)}
	store := func(proc string) *countingStore { return sr.store(proc, true) }
	ctx, cancel := context.WithCancel(context.Background())
	var procs sync.WaitGroup
	spawn := func(f func()) {
		procs.Add(1)
		go func() {
			defer procs.Done()
			f()
		}()
	}
	fail := func(err error) (WakeupResult, error) {
		cancel()
		procs.Wait()
		srv.Close()
		return WakeupResult{}, err
	}

	mon, err := monitor.New(ctx, store("m1"), monitor.Config{ID: "m1", Rand: sr.rand("m1"), Logger: discard})
	if err != nil {
		return fail(fmt.Errorf("open the monitor: %w", err))
	}
	spawn(func() { mon.Run(ctx) })
	prods := make([]*producer.Producer, opts.Producers)
	for i := range prods {
		name := fmt.Sprintf("p%d", i+1)
		st := store(name)
		if prods[i], err = producer.New(ctx, st, producer.Config{Rand: sr.rand(name), Clock: clock.New(st, clock.Config{}), Logger: discard}); err != nil {
			return fail(fmt.Errorf("open producer %s: %w", name, err))
		}
	}
	startWorkers := func() {
		rng := rand.New(rand.NewPCG(opts.Seed, 0x5747))
		for i := range opts.Workers {
			id := fmt.Sprintf("w%04d", i+1)
			delay := time.Duration(rng.Int64N(int64(opts.Spread)))
			spawn(func() { r.runWorker(ctx, store(id), id, delay) })
		}
	}
	submit := func() {
		var wg sync.WaitGroup
		for i, p := range prods {
			n := opts.tasks()/opts.Producers + btoi(i < opts.tasks()%opts.Producers)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.produce(ctx, p, n)
			}()
		}
		wg.Wait()
	}

	res := WakeupResult{Options: opts, Tasks: opts.tasks(),
		Ideal: time.Duration(float64(opts.tasks()) * float64(opts.HandlerTime) / float64(opts.Workers*opts.Concurrency))}
	var t0 time.Time
	var before countsSnapshot
	var beforeSlow int
	if opts.Variant == WakeCold {
		before, beforeSlow = sr.counts.snapshot(), srv.Counts()["slowdown"]
		r.mu.Lock()
		r.submitting = true
		r.mu.Unlock()
		submit()
		t0 = time.Now()
		r.mu.Lock()
		r.from = t0
		r.mu.Unlock()
		startWorkers()
	} else {
		startWorkers()
		lastStart := began.Add(opts.Spread)
		switch opts.Variant {
		case WakeAsleep:
			// Until the fleet object says asleep, with at most one member
			// (a sleeping member at the doorbell, as older commits keep;
			// none once it dozed off), then a minute more: what the
			// sleeping fleet costs.
			time.Sleep(time.Until(lastStart.Add(30 * time.Second)))
			for time.Since(lastStart) < opts.Settle-time.Minute {
				if f := r.fleet(); f.Asleep && len(f.Members) <= 1 {
					break
				}
				time.Sleep(time.Second)
			}
			idle := sr.counts.snapshot()
			time.Sleep(time.Minute)
			d := sr.counts.snapshot().sub(idle)
			res.IdlePerHour, res.IdleFleetPerHour = cost.FromCounts(d.all).Scale(60), cost.FromCounts(d.fleet).Scale(60)
		case WakeAwake:
			// Every worker past its first 30 s, when a new worker reads
			// the fleet object every second.
			time.Sleep(time.Until(lastStart.Add(31 * time.Second)))
			for time.Since(lastStart) < opts.Settle {
				if f := r.fleet(); len(f.Members) == 1 && !f.Asleep {
					break
				}
				time.Sleep(time.Second)
			}
		default:
			return fail(fmt.Errorf("wake-up variant %q: want %q, %q or %q", opts.Variant, WakeAsleep, WakeAwake, WakeCold))
		}
		t0 = time.Now()
		before, beforeSlow = sr.counts.snapshot(), srv.Counts()["slowdown"]
		r.mu.Lock()
		for _, wk := range r.workers {
			if m, _ := wk.Member(); m {
				r.joined[r.ids[wk]] = t0
			}
		}
		r.mu.Unlock()
		f := r.fleet()
		res.Members, res.Standbys, res.Asleep = len(f.Members), len(f.Standbys), f.Asleep
		r.mu.Lock()
		r.from, r.submitting = t0, true
		r.mu.Unlock()
		spawn(submit)
	}
	res.At = t0.Sub(began)

	// The episode: until every task succeeded, or Limit.
	for time.Since(t0) < opts.Limit {
		time.Sleep(time.Second)
		res.MembersBySecond = append(res.MembersBySecond, r.members())
		if opts.Progress != nil && len(res.MembersBySecond)%30 == 0 {
			r.mu.Lock()
			fmt.Fprintf(opts.Progress, "wake-up %d/%s: %v into the episode, %d members, %d workers busy, %d of %d tasks done\n",
				opts.Workers, opts.Variant, time.Since(t0), res.MembersBySecond[len(res.MembersBySecond)-1], len(r.firstStart), r.ackedDone, opts.tasks())
			r.mu.Unlock()
		}
		r.mu.Lock()
		finished := r.ackedDone >= opts.tasks()
		r.mu.Unlock()
		if finished {
			break
		}
	}
	r.mu.Lock()
	end, endCounts := r.lastDone, r.endCounts
	if r.ackedDone < opts.tasks() {
		end, endCounts = time.Time{}, sr.counts.snapshot()
	}
	res.Done, res.SubmitErrors = r.ackedDone, r.submitErr
	res.Submitted = r.lastAck.Sub(t0)
	if !r.firstClaim.IsZero() {
		res.FirstClaim = r.firstClaim.Sub(t0)
	} else {
		res.FirstClaim = -1
	}
	var starts, joins []time.Duration
	for _, at := range r.firstStart {
		starts = append(starts, at.Sub(t0))
	}
	for _, at := range r.joined {
		joins = append(joins, max(0, at.Sub(t0)))
	}
	r.mu.Unlock()
	if opts.Variant == WakeCold {
		res.Submitted = 0
	}
	res.Busy = len(starts)
	pct := func(ds []time.Duration, p float64) time.Duration {
		slices.Sort(ds)
		i := int(math.Ceil(p*float64(opts.Workers))) - 1
		if i >= len(ds) {
			return -1
		}
		return ds[i]
	}
	res.Busy50, res.Busy90, res.Busy100 = pct(starts, 0.5), pct(starts, 0.9), pct(starts, 1)
	res.Joined50, res.Joined90, res.Joined100 = pct(joins, 0.5), pct(joins, 0.9), pct(joins, 1)
	res.Makespan = -1
	if !end.IsZero() {
		res.Makespan = end.Sub(t0)
	}
	if res.Done < res.Tasks {
		res.Left = r.left()
	}
	res.SlowDowns = srv.Counts()["slowdown"] - beforeSlow
	d := endCounts.sub(before)
	res.Requests, res.Fleet = cost.FromCounts(d.all), cost.FromCounts(d.fleet)
	res.Dollars = res.Requests.Dollars(cost.S3Standard)

	cancel()
	procs.Wait()
	srv.Close()
	return res, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wakeRun is the state of one wake-up run.
type wakeRun struct {
	opts WakeupOptions
	sr   *scaleRun

	began time.Time

	mu         sync.Mutex
	from       time.Time // the backlog's moment
	submitting bool
	firstClaim time.Time
	firstStart map[string]time.Time // worker -> its first handler start of the episode
	joined     map[string]time.Time // worker -> when it was first a member in the episode
	done       map[string]bool      // tasks that succeeded
	lastDone   time.Time
	endCounts  countsSnapshot // the counts when the last task succeeded
	lastAck    time.Time
	acked      map[string]bool // tasks acknowledged to their producers
	ackedDone  int             // of them, those that succeeded
	submitErr  int
	workers    []*worker.Worker
	ids        map[*worker.Worker]string
}

// runWorker starts elastic worker id after delay and runs it until ctx ends.
func (r *wakeRun) runWorker(ctx context.Context, st *countingStore, id string, delay time.Duration) {
	time.Sleep(delay)
	log := discard
	if r.opts.Trace != nil {
		log = slog.New(slog.NewTextHandler(&traceWriter{r: r}, &slog.HandlerOptions{Level: slog.LevelDebug,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.String("t", fmt.Sprintf("%.3f", time.Since(r.began).Seconds()))
				}
				return a
			}})).With("worker", id)
	}
	wk, err := worker.New(ctx, st, worker.Config{ID: id, Concurrency: r.opts.Concurrency, Dedicated: false,
		Rand: r.sr.rand(id), Clock: clock.New(st, clock.Config{}), Logger: log, ShutdownGrace: time.Second,
		OnEvent: func(e worker.Event) { r.event(id, e) }})
	if err != nil {
		return // the run reports the workers that never started a task
	}
	wk.Handle(taskType, func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		r.mu.Lock()
		if _, ok := r.firstStart[id]; !ok && r.submitting {
			r.firstStart[id] = time.Now()
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(r.opts.HandlerTime):
			return json.RawMessage(`{}`), nil
		}
	})
	r.mu.Lock()
	r.workers = append(r.workers, wk)
	r.ids[wk] = id
	r.mu.Unlock()
	wk.Run(ctx)
}

// event records the first claim and each success.
func (r *wakeRun) event(id string, e worker.Event) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opts.Trace != nil {
		fmt.Fprintf(r.opts.Trace, "t=%.3f worker=%s event=%s task=%s shard=%d\n", now.Sub(r.began).Seconds(), id, e.Kind, e.TaskID, e.Shard)
	}
	switch e.Kind {
	case "claimed":
		if r.firstClaim.IsZero() && r.submitting {
			r.firstClaim = now
		}
	case "shard_acquired":
		if _, ok := r.joined[id]; !ok && r.submitting {
			r.joined[id] = now
		}
	case "succeeded":
		if !r.done[e.TaskID] {
			r.done[e.TaskID] = true
			if r.acked[e.TaskID] {
				r.ackedDone++
			}
			if r.ackedDone == r.opts.tasks() {
				r.lastDone, r.endCounts = now, r.sr.counts.snapshot()
			}
		}
	}
}

// produce submits n tasks, one Submit at a time, as fast as p can. A
// submit that fails (the modelled S3's 503s, past the producer's own
// retries) is tried again 200 ms later, as an application would: the
// backlog is n tasks acknowledged.
func (r *wakeRun) produce(ctx context.Context, p *producer.Producer, n int) {
	for n > 0 {
		id, err := p.Submit(ctx, taskType, json.RawMessage(`{"n":1}`), producer.Options{})
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if err != nil {
			r.submitErr++
		} else {
			n--
			r.lastAck = time.Now()
			r.acked[id] = true
			if r.done[id] {
				r.ackedDone++
				if r.ackedDone == r.opts.tasks() {
					r.lastDone, r.endCounts = r.lastAck, r.sr.counts.snapshot()
				}
			}
		}
		r.mu.Unlock()
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// members returns how many workers are members of the fleet now.
func (r *wakeRun) members() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, wk := range r.workers {
		if m, _ := wk.Member(); m {
			n++
		}
	}
	return n
}

// wakeFleet is what the run reads of the fleet object: decoded apart from
// shards.Fleet, whose roster older commits lack.
type wakeFleet struct {
	Members  []json.RawMessage `json:"members"`
	Standbys []json.RawMessage `json:"standbys"`
	Asleep   bool              `json:"asleep"`
}

func (r *wakeRun) fleet() wakeFleet {
	var f wakeFleet
	json.Unmarshal(r.sr.srv.Objects(shards.FleetKey)[shards.FleetKey], &f)
	return f
}

// traceWriter writes the workers' logs to the run's Trace, a line at a
// time under the run's lock.
type traceWriter struct{ r *wakeRun }

func (w *traceWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.opts.Trace.Write(p)
}

// left summarizes the tasks not done at the end: by shard and status,
// with the member polling the shard, the largest groups first.
func (r *wakeRun) left() string {
	type group struct {
		shard  int
		status task.Status
	}
	counts := make(map[group]int)
	total := 0
	r.mu.Lock()
	for key, body := range r.sr.srv.Objects("tasks/") {
		shard, id, err := task.ParseKey(key)
		if err != nil || r.done[id] {
			continue
		}
		var t task.Task
		json.Unmarshal(body, &t)
		counts[group{shard, t.Status}]++
		total++
	}
	owner := make(map[int]string)
	for _, wk := range r.workers {
		if m, a := wk.Member(); m {
			for _, s := range a.Own {
				owner[s] = r.ids[wk]
			}
		}
	}
	r.mu.Unlock()
	groups := slices.Collect(maps.Keys(counts))
	slices.SortFunc(groups, func(a, b group) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return a.shard - b.shard
	})
	out := fmt.Sprintf("%d tasks not done:", total)
	for i, g := range groups {
		if i == 8 {
			out += fmt.Sprintf(" and %d more groups", len(groups)-i)
			break
		}
		m := owner[g.shard]
		if m == "" {
			m = "no member"
		}
		out += fmt.Sprintf(" shard %d %s %d (%s);", g.shard, g.status, counts[g], m)
	}
	return out
}
