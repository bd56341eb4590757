package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/shards"
)

// The dispatch queue sits between discovery and the handlers (seeds 000,
// 001, 002; docs/flow-control.md). Each pool of task types has its own:
//
//   - in-flight: handlers running, at most MaxInFlight, each on one of the
//     pool's long-lived loops;
//   - pending: tasks claimed by this worker, waiting for one of the pool's
//     handlers, at most MaxQueueDepth (claimed ahead under the
//     load-shedding policies; under block only a task requeued after its
//     handler crashed waits here);
//   - waiting: tasks discovery found due for the pool but did not accept
//     (not claimed: they stay in the bucket, where any worker may take them).
//
// Discovery (the scheduler) asks a pool for room before it claims (admit),
// and hands what it claimed to the pool (push). A loop that finishes a run
// takes the next pending task, or waits, idle, for one; each push wakes
// one idle loop, or starts one while the pool has fewer than MaxInFlight.
// Idle loops retire after loopIdle.

// QueuePolicy says what a pool does with a task its queue has no room for.
type QueuePolicy string

const (
	// Block (the default): discovery claims a task only for a free handler
	// and leaves what it cannot start in the bucket until a handler frees
	// up. A worker never claims more than it can start at once.
	Block QueuePolicy = "block"
	// Reject: the pool claims ahead up to MaxQueueDepth; a task discovery
	// loaded for a full pool is refused (an event "rejected") and left in
	// the bucket for others.
	Reject QueuePolicy = "reject"
	// DropLatest is Reject reported as a drop of the incoming task (an
	// event "dropped").
	DropLatest QueuePolicy = "drop-latest"
	// DropOldest: the pool claims ahead up to MaxQueueDepth; newer work
	// found for a full pool (a task newer than a pending one claimed by an
	// earlier poll, which this worker has not refused before unchanged)
	// evicts the oldest such pending one, which is released (its claim
	// undone by CAS: pending again, due at once, its attempt not used), and
	// takes its place. Any other task found is left waiting, as under
	// Block, with no event.
	DropOldest QueuePolicy = "drop-oldest"
)

// Unbounded, as MaxInFlight or MaxQueueDepth, opts out of the bound (0 or
// "unbounded" in queue.toml).
const Unbounded = -1

// Phase is where a task is in a worker's dispatch queue.
type Phase string

const (
	// PhaseWaiting: found by discovery, not accepted, not claimed.
	PhaseWaiting Phase = "waiting"
	// PhasePending: claimed by this worker, waiting for a handler.
	PhasePending Phase = "pending"
	// PhaseInFlight: its handler runs.
	PhaseInFlight Phase = "in-flight"
)

// Pool is a set of task types with its own dispatch queue: its own
// handlers and limits, as the seed's io and compute pools.
type Pool struct {
	// Name names the pool in events, gauges and logs.
	Name string
	// Types are the task types the pool runs; a type in no pool runs in
	// the default pool, which Config's MaxInFlight, MaxQueueDepth and
	// QueuePolicy shape. Empty: the pool's Name is its one type.
	Types []string
	// MaxInFlight bounds the pool's running handlers (0: Config.Concurrency;
	// Unbounded: none).
	MaxInFlight int
	// MaxQueueDepth bounds the pool's tasks found and waiting to start (0:
	// the default, see Config.MaxQueueDepth; Unbounded: none).
	MaxQueueDepth int
	// QueuePolicy: "" is Block.
	QueuePolicy QueuePolicy
}

// QueueState is a snapshot of one pool's dispatch queue: its gauges.
type QueueState struct {
	Pool          string
	InFlight      int // handlers running
	Pending       int // claimed, waiting for a handler
	Waiting       int // found due by the last poll, not accepted
	MaxInFlight   int // Unbounded for none
	MaxQueueDepth int
	QueuePolicy   QueuePolicy
	Stopping      bool
}

// Queued describes a task at a dispatch queue's hook.
type Queued struct {
	Pool    string
	TaskID  string
	Shard   int
	Type    string
	Attempt int
	// Phase the task was in: for a drop or a cancel, the phase it left;
	// at OnDispatch always pending (a task claimed for a free handler
	// passes through it at once).
	Phase Phase
	// Wait is how long the task took from discovery to dispatch (waiting
	// included): the seeds' queue.wait_ms. Set at OnDispatch.
	Wait time.Duration
	// Reason says why, for a reject, a drop or a cancel.
	Reason string
}

// Hooks are called by the dispatch queues, synchronously, on the worker's
// goroutines: keep them short. Nil hooks are skipped.
type Hooks struct {
	// OnDispatch: a task was handed to a handler.
	OnDispatch func(Queued)
	// OnReject: a task found for a full pool was refused (Reject); once
	// per task version (a task refused again unchanged is not reported
	// again).
	OnReject func(Queued)
	// OnDrop: a task was dropped: the incoming one (DropLatest, once per
	// task version), or the oldest pending one, released to the bucket
	// (DropOldest).
	OnDrop func(Queued)
	// OnCancel: a task this worker had claimed was canceled, in the phase
	// it was in (pending: before its handler started; in-flight: while it
	// ran). A task canceled before any worker claimed it (waiting) never
	// reaches a worker: Cancel tells its caller.
	OnCancel func(Queued)
	// OnStateChange: a pool's gauges changed.
	OnStateChange func(QueueState)
	// OnWindow: a listing of shard offered window, the due candidates of
	// its first page in key order, each with the priority its size says
	// (shards.Scan.Window); the worker attempts them highest priority
	// first. Called on the scheduler; window is the hook's to keep.
	OnWindow func(shard int, window []shards.Candidate)
	// OnAttempt: the worker is about to read candidate c of shard's scan
	// and claim it if it is pending and due, in the order it attempts
	// them. Called on the scheduler.
	OnAttempt func(shard int, c shards.Candidate)
}

// loopIdle is how long a pool's loop waits for work before it retires.
const loopIdle = time.Minute

// pool is a Pool at work.
type pool struct {
	w           *Worker
	name        string
	maxInFlight int // Unbounded for none
	maxDepth    int
	policy      QueuePolicy

	mu       sync.Mutex
	running  int    // runs handed to loops (in-flight)
	reserved int    // claims in progress that start at once
	ahead    int    // claims in progress that will wait in pending
	pending  []*run // claimed, waiting for a handler; the front runs next
	waiting  int
	idle     []chan *run // idle loops, the last idle first
	closed   bool
	retiring bool // Wait: loops end rather than idle
	wait     Histogram
}

// poolFor returns the pool that runs typ.
func (w *Worker) poolFor(typ string) *pool {
	if p, ok := w.poolOf[typ]; ok {
		return p
	}
	return w.pools[0]
}

// newPools builds the default pool and cfg.Pools.
func (w *Worker) newPools() {
	c := &w.cfg
	def := &pool{w: w, name: "default", maxInFlight: c.MaxInFlight, maxDepth: c.MaxQueueDepth, policy: c.QueuePolicy}
	w.pools = []*pool{def}
	w.poolOf = make(map[string]*pool)
	for _, pc := range c.Pools {
		p := &pool{w: w, name: pc.Name, maxInFlight: pc.MaxInFlight, maxDepth: pc.MaxQueueDepth, policy: pc.QueuePolicy}
		w.pools = append(w.pools, p)
		for _, t := range pc.Types {
			w.poolOf[t] = p
		}
	}
	for _, p := range w.pools {
		p.wait.init()
	}
}

// maxRoom stands for an unbounded room: a listing returns at most 1,000
// keys.
const maxRoom = 1000

// room is how many more tasks discovery may claim for the pool now: a free
// handler each, and under the load-shedding policies a place in pending.
func (p *pool) room() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.roomLocked()
}

func (p *pool) roomLocked() int {
	if p.closed {
		return 0
	}
	n := bounded(p.maxInFlight, p.running+p.reserved)
	if p.policy != Block {
		n += bounded(p.maxDepth, len(p.pending)+p.ahead)
	}
	if n == 0 && p.policy == DropOldest {
		// A full DropOldest pool looks for newer work, once per poll_max,
		// for each pending task that has waited poll_max: a newer task
		// found replaces the oldest, which goes back to the fleet, where
		// an idle worker may start it now. (Only a newer task evicts; a
		// look reads only tasks it has not refused before unchanged, see
		// refusals.go.)
		now := p.w.now()
		for _, r := range p.pending {
			if now.Sub(r.claimed) >= p.w.cfg.PollMax && now.Sub(r.looked) >= p.w.cfg.PollMax {
				n++
			}
		}
	}
	return min(n, maxRoom)
}

// bounded is what limit leaves over used; maxRoom when unbounded.
func bounded(limit, used int) int {
	if limit == Unbounded {
		return maxRoom
	}
	return max(limit-used, 0)
}

// capacity is how many tasks the pool holds when full: its handlers, and
// pending under the load-shedding policies.
func (p *pool) capacity() int {
	n := bounded(p.maxInFlight, 0)
	if p.policy != Block {
		n += bounded(p.maxDepth, 0)
	}
	return min(n, maxRoom)
}

// admission is a pool's answer to a task discovery wants to claim.
type admission int

const (
	refused admission = iota
	startNow
	queueAhead
	evictOldest // queueAhead once the oldest pending task is released
)

// admit reserves room for one claim of the task id: a free handler first,
// then (not under Block) a place in pending. A full DropOldest pool takes
// its oldest pending task (the smallest id: ids grow with time) claimed
// before the current discovery pass out for the caller to release, if id
// is newer; it reserves its place. A task older than every such pending
// one is the oldest entry itself: refused (left waiting); so is any task
// when evict is false (one this worker has refused before, unchanged: it
// was waiting when the pending tasks were claimed, and is no newer work
// for them to make way for).
func (p *pool) admit(id string, evict bool) (admission, *run) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return refused, nil
	case bounded(p.maxInFlight, p.running+p.reserved) > 0:
		p.reserved++
		return startNow, nil
	case p.policy == Block:
		return refused, nil
	case bounded(p.maxDepth, len(p.pending)+p.ahead) > 0:
		p.ahead++
		return queueAhead, nil
	case p.policy == DropOldest && evict:
		// Only a run claimed before the current discovery pass may be
		// evicted: a listing does not trade a task it just claimed (a
		// released one claimed again has the oldest id) for a newer one
		// it brings too, a release and a claim for nothing.
		i := -1
		for j, r := range p.pending {
			if r.poll < p.w.polls && (i < 0 || r.id < p.pending[i].id) {
				i = j
			}
		}
		if i < 0 || id <= p.pending[i].id {
			return refused, nil
		}
		r := p.pending[i]
		p.pending = slices.Delete(p.pending, i, i+1)
		p.ahead++
		return evictOldest, r
	}
	return refused, nil
}

// places is how many tasks the pool may take now without evicting one: a
// free handler each, and under the load-shedding policies a place in
// pending (room without a drop-oldest pool's look, see roomLocked).
func (p *pool) places() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	n := bounded(p.maxInFlight, p.running+p.reserved)
	if p.policy != Block {
		n += bounded(p.maxDepth, len(p.pending)+p.ahead)
	}
	return n
}

// markLooked records that a poll has looked for newer work for the
// DropOldest pool's stale pending tasks (see roomLocked).
func (p *pool) markLooked() {
	if p.policy != DropOldest {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.w.now()
	for _, r := range p.pending {
		if now.Sub(r.claimed) >= p.w.cfg.PollMax && now.Sub(r.looked) >= p.w.cfg.PollMax {
			r.looked = now
		}
	}
}

// unadmit gives back the room admit reserved for a claim that failed.
func (p *pool) unadmit(a admission) {
	p.mu.Lock()
	if a == startNow {
		p.reserved--
	} else {
		p.ahead--
	}
	p.mu.Unlock()
	p.w.roomFreed()
}

// push hands a claimed task to the pool, into the room admit reserved for
// it: to a loop at once if a handler is free, else to the back of pending.
func (p *pool) push(r *run, a admission) {
	p.mu.Lock()
	if a == startNow {
		p.reserved--
	} else {
		p.ahead--
	}
	r.pool = p
	now := p.startableLocked()
	if now {
		p.running++
	} else {
		p.pending = append(p.pending, r)
	}
	p.mu.Unlock()
	if now {
		p.begin(r)
	}
	p.changed()
}

// requeue puts a claimed task back at the front of pending, bypassing
// admission (a crashed handler's task under the requeue policy). It
// reports false, and leaves r to the caller, once the pool is closed: its
// pending tasks have been handed back already.
func (p *pool) requeue(r *run) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.enqueueLocked(r, true)
	p.mu.Unlock()
	p.changed()
	return true
}

func (p *pool) enqueueLocked(r *run, front bool) {
	r.pool = p
	if p.startableLocked() {
		p.running++
		p.startLocked(r)
		return
	}
	if front {
		p.pending = slices.Insert(p.pending, 0, r)
	} else {
		p.pending = append(p.pending, r)
	}
}

// startableLocked reports whether a run pushed now starts at once: a
// handler is free and nothing waits before it.
func (p *pool) startableLocked() bool {
	return (p.maxInFlight == Unbounded || p.running < p.maxInFlight) && len(p.pending) == 0 && !p.closed
}

// begin hands r, already counted in running, to a loop. It runs on the
// scheduler, and checks r's lease there first: a run whose lease was lost
// before it started (it waited too long, or its claim came late) would
// end on the loop at the very instant it was handed over, and the loop's
// giving its handler back would race with the scheduler's next steps at
// that instant (which of them runs first is the Go scheduler's choice, and
// a seeded simulation would not replay). Its handler is given back here
// instead, as the loop would have.
func (p *pool) begin(r *run) {
	if r.lostBeforeStart() {
		p.mu.Lock()
		p.running--
		p.mu.Unlock()
		p.w.roomFreed()
		return
	}
	p.mu.Lock()
	p.startLocked(r)
	p.mu.Unlock()
}

// startLocked hands r to an idle loop, or to a new one. The run holds a
// handler from here: its start time is set now, by the goroutine that
// decided it, not by the loop when the Go scheduler runs it (the fleet's
// judgement of its backlog reads it, runEstimate).
func (p *pool) startLocked(r *run) {
	r.began.Store(p.w.now().UnixNano())
	if n := len(p.idle); n > 0 {
		ch := p.idle[n-1]
		p.idle = p.idle[:n-1]
		ch <- r // buffered: the loop takes it when it wakes
		return
	}
	p.w.loops.Add(1)
	go p.loop(r)
}

// takeNextLocked takes the front pending run for a loop whose run ended,
// if the pool is open. Runs whose lease was lost while they waited are
// given up here, before the loop wakes the scheduler (roomFreed): once
// woken, the scheduler reads the pool at the same virtual instant as the
// loop would be giving such a run up, and what it does would depend on
// which of them ran first. Called with p.mu held; it returns with p.mu
// held (it lets go of it while it checks a lease).
func (p *pool) takeNextLocked() *run {
	for len(p.pending) > 0 && !p.closed {
		r := p.pending[0]
		p.pending = p.pending[1:]
		p.mu.Unlock()
		lost := r.lostBeforeStart()
		if lost {
			p.changed()
		}
		p.mu.Lock()
		if !lost {
			return r
		}
	}
	return nil
}

// loop runs tasks until the pool has none for loopIdle, or closes.
func (p *pool) loop(r *run) {
	w := p.w
	defer w.loops.Done()
	ch := make(chan *run, 1)
	for {
		r.start()
		p.mu.Lock()
		if next := p.takeNextLocked(); next != nil {
			r = next
			r.began.Store(w.now().UnixNano()) // before the scheduler is woken (startLocked)
			p.mu.Unlock()
			p.changed()
			if p.policy != Block {
				w.roomFreed() // a place in pending: the scheduler may claim ahead again
			}
			continue
		}
		p.running--
		if p.closed || p.retiring {
			p.mu.Unlock()
			p.changed()
			w.roomFreed()
			return
		}
		p.idle = append(p.idle, ch)
		p.mu.Unlock()
		p.changed()
		w.roomFreed()

		timer := w.local.NewTimer(loopIdle)
		select {
		case next, ok := <-ch:
			timer.Stop()
			if !ok {
				return
			}
			r = next
			continue
		case <-timer.C():
		}
		p.mu.Lock()
		if i := slices.Index(p.idle, ch); i >= 0 {
			p.idle = slices.Delete(p.idle, i, i+1)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// Handed a run as the timer fired.
		next, ok := <-ch
		if !ok {
			return
		}
		r = next
	}
}

// close stops the pool's loops once they finish their runs, and returns
// its pending tasks, which were never started.
func (p *pool) close() []*run {
	p.mu.Lock()
	p.closed = true
	for _, ch := range p.idle {
		close(ch)
	}
	p.idle = nil
	out := p.pending
	p.pending = nil
	p.mu.Unlock()
	p.changed()
	return out
}

// retireIdle ends the pool's idle loops, and makes loops that finish
// their runs end rather than idle, until unretire; a later push starts new
// ones.
func (p *pool) retireIdle() {
	p.mu.Lock()
	p.retiring = true
	for _, ch := range p.idle {
		close(ch)
	}
	p.idle = nil
	p.mu.Unlock()
}

// takePending removes r from pending and reports whether it was there (not
// yet started).
func (p *pool) takePending(r *run) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.pending, r)
	if i < 0 {
		return false
	}
	p.pending = slices.Delete(p.pending, i, i+1)
	return true
}

// setWaiting records how many tasks of the pool the last poll found due and
// left unclaimed.
func (p *pool) setWaiting(n int) {
	p.mu.Lock()
	same := p.waiting == n
	p.waiting = n
	p.mu.Unlock()
	if !same {
		p.changed()
	}
}

func (p *pool) state() QueueState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return QueueState{Pool: p.name, InFlight: p.running, Pending: len(p.pending), Waiting: p.waiting,
		MaxInFlight: p.maxInFlight, MaxQueueDepth: p.maxDepth, QueuePolicy: p.policy, Stopping: p.closed}
}

func (p *pool) changed() {
	if h := p.w.cfg.Hooks.OnStateChange; h != nil {
		h(p.state())
	}
}

// QueueStates returns the gauges of the worker's pools, the default pool
// first.
func (w *Worker) QueueStates() []QueueState {
	out := make([]QueueState, len(w.pools))
	for i, p := range w.pools {
		out[i] = p.state()
	}
	return out
}

// QueueWait returns each pool's histogram of the time from discovery to
// dispatch (queue.wait_ms), by pool name.
func (w *Worker) QueueWait() map[string]Histogram {
	out := make(map[string]Histogram, len(w.pools))
	for _, p := range w.pools {
		p.mu.Lock()
		out[p.name] = p.wait.clone()
		p.mu.Unlock()
	}
	return out
}

// free is how many more tasks discovery may claim now, over every pool.
func (w *Worker) free() int {
	n := 0
	for _, p := range w.pools {
		n += p.room()
	}
	return min(n, maxRoom)
}

// capacity is how many tasks the worker holds when every pool is full.
func (w *Worker) capacity() int {
	n := 0
	for _, p := range w.pools {
		n += p.capacity()
	}
	return min(n, maxRoom)
}

// busy reports whether any handler runs or any task waits in pending.
func (w *Worker) busy() bool {
	for _, p := range w.pools {
		s := p.state()
		if s.InFlight > 0 || s.Pending > 0 {
			return true
		}
	}
	return false
}

// roomFreed wakes the scheduler (Run), which may claim for the room.
func (w *Worker) roomFreed() {
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// dispatch hands the task v, claimed under claimID for handler h, to its
// pool, into the room admit reserved; parent is the span context of the
// run's spans (see claim).
func (w *Worker) dispatch(p *pool, a admission, v taskio.Versioned, claimID string, h Handler, found time.Time, parent trace.SpanContext) {
	r := w.newRun(v, claimID, h, found)
	r.parent = parent
	w.inflight.Add(1)
	w.running.Store(claimID, r)
	p.push(r, a)
}

// newRun is the run of the task v, claimed under claimID for h, found
// by discovery at found.
func (w *Worker) newRun(v taskio.Versioned, claimID string, h Handler, found time.Time) *run {
	now := w.now()
	r := &run{w: w, v: v, claimID: claimID, handler: h, found: found, claimed: now, renewed: now, target: -1,
		id: v.Task.ID, every: w.pendingRenewal(v.Task.Timeout.D()), poll: w.polls}
	// Its context exists before the run is in w.running, where a shutdown
	// may cancel it before its handler starts.
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	return r
}

// pendingRenewal is how often a pending task's lease of length timeout is
// renewed: every third of it, as a running task's (nextRenewal), and in any
// case twice while the lease is certainly the worker's (timeout less the
// lease margin), so that a short lease with a wide margin never lapses
// before its handler starts.
func (w *Worker) pendingRenewal(timeout time.Duration) time.Duration {
	d := timeout / 3
	if half := (timeout - w.cfg.LeaseMargin) / 2; half < d {
		d = half
	}
	return max(d, 50*time.Millisecond)
}

// closePools closes every pool at shutdown and releases the tasks that
// were pending (claimed, never started): back in the bucket at once, their
// attempts not used. It returns once their releases are written.
func (w *Worker) closePools(ctx context.Context) {
	var held []*run
	for _, p := range w.pools {
		held = append(held, p.close()...)
	}
	sort.Slice(held, func(i, j int) bool { return held[i].claimID < held[j].claimID })
	concurrently(len(held), func(i int) {
		held[i].giveBack(ctx, PhasePending, "worker shut down before it started")
	})
}

// Histogram counts durations in fixed buckets (milliseconds).
type Histogram struct {
	// Bounds are the buckets' upper bounds in milliseconds; Counts has one
	// more entry, for the durations above the last bound.
	Bounds []float64
	Counts []uint64
	// Count and SumMs are the number of durations and their sum.
	Count uint64
	SumMs float64
}

// WaitBounds are the bounds of the queue.wait_ms histogram.
var WaitBounds = []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

func (h *Histogram) init() {
	h.Bounds = WaitBounds
	h.Counts = make([]uint64, len(WaitBounds)+1)
}

func (h *Histogram) observe(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	i := sort.SearchFloat64s(h.Bounds, ms)
	h.Counts[i]++
	h.Count++
	h.SumMs += ms
}

func (h *Histogram) clone() Histogram {
	c := *h
	c.Counts = slices.Clone(h.Counts)
	return c
}

// Quantile estimates the q-quantile (0..1) in milliseconds from the
// buckets: the upper bound of the bucket that holds it (the last bound
// for the overflow bucket), 0 for an empty histogram.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	want := uint64(q*float64(h.Count) + 0.5)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= max(want, 1) {
			if i < len(h.Bounds) {
				return h.Bounds[i]
			}
			break
		}
	}
	return h.Bounds[len(h.Bounds)-1]
}

// checkPools checks the pools of c: names and types set once each, limits
// in range, known policies.
func checkPools(c *Config) error {
	names := map[string]bool{"default": true}
	types := map[string]string{}
	for i := range c.Pools {
		pc := &c.Pools[i]
		if pc.Name == "" {
			return fmt.Errorf("pool %d has no name", i)
		}
		if names[pc.Name] {
			return fmt.Errorf("pool %q declared twice (\"default\" is the default pool's)", pc.Name)
		}
		names[pc.Name] = true
		if len(pc.Types) == 0 {
			pc.Types = []string{pc.Name}
		}
		for _, t := range pc.Types {
			if other, dup := types[t]; dup {
				return fmt.Errorf("type %q is in pools %q and %q", t, other, pc.Name)
			}
			types[t] = pc.Name
		}
		if pc.MaxInFlight == 0 {
			pc.MaxInFlight = c.Concurrency
		}
		if pc.MaxQueueDepth == 0 {
			pc.MaxQueueDepth = defaultDepth(pc.MaxInFlight, c.PollBatch)
		}
		if pc.QueuePolicy == "" {
			pc.QueuePolicy = Block
		}
		if err := checkLimit(pc.MaxInFlight); err != nil {
			return fmt.Errorf("pools.%s.max_in_flight: %w", pc.Name, err)
		}
		if err := checkLimit(pc.MaxQueueDepth); err != nil {
			return fmt.Errorf("pools.%s.max_queue_depth: %w", pc.Name, err)
		}
		if err := checkPolicy(pc.QueuePolicy); err != nil {
			return fmt.Errorf("pools.%s.queue_policy: %w", pc.Name, err)
		}
	}
	return nil
}

// CheckPools checks the pools of c as New does: names and types given
// once each, limits in range, known policies.
func CheckPools(c Config) error {
	configKeys.Fill(&c)
	c.Pools = slices.Clone(c.Pools)
	return checkPools(&c)
}

// defaultDepth is a pool's default MaxQueueDepth: what one listing brings
// for it (its handlers' worth or poll_batch, and one more), as the held
// candidates of a listing always were.
func defaultDepth(inFlight int, pollBatch float64) int {
	if inFlight == Unbounded {
		return Unbounded
	}
	return max(inFlight, int(pollBatch+0.999999)) + 1
}

func checkLimit(n int) error {
	if n != Unbounded && (n < 1 || n > 100000) {
		return fmt.Errorf("%d out of range: 1..100000, or unbounded", n)
	}
	return nil
}

// ParsePolicy parses a queue policy's name.
func ParsePolicy(s string) (QueuePolicy, error) {
	p := QueuePolicy(s)
	return p, checkPolicy(p)
}

func checkPolicy(p QueuePolicy) error {
	switch p {
	case Block, Reject, DropLatest, DropOldest:
		return nil
	}
	return fmt.Errorf("unknown queue policy %q: want block, reject, drop-latest or drop-oldest", string(p))
}

// tendPending renews the leases of the tasks waiting in pending, on the
// scheduler, every third of their timeout (pendingRenewal), and returns
// how long until the next renewal is due. A renewal that finds a cancel requested cancels the
// task there (phase pending), before its handler starts; one that finds
// the lease lost forgets it.
func (w *Worker) tendPending(ctx context.Context) time.Duration {
	next := time.Duration(1<<63 - 1)
	for _, p := range w.pools {
		p.mu.Lock()
		held := slices.Clone(p.pending)
		p.mu.Unlock()
		var kept []*run
		gone := 0
		for _, r := range held {
			// Only the scheduler writes renewed, and every never changes:
			// a loop may be starting r meanwhile.
			every := r.every
			if due := every - w.now().Sub(r.renewed); due > 0 {
				next = min(next, due)
				continue
			}
			if ctx.Err() != nil || !p.takePending(r) {
				continue
			}
			gone++
			switch err := r.renew(); {
			case errors.Is(err, ErrCanceled):
				// commit calls OnCancel.
				r.giveBack(ctx, PhasePending, "canceled before its handler started")
			case errors.Is(err, ErrLeaseLost):
				t := r.v.Task
				w.stats.leaseLost.Add(1)
				w.emit(Event{Kind: "lease_lost", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Pool: p.name, Phase: string(PhasePending), Err: ErrLeaseLost})
				w.running.Delete(r.claimID)
				w.inflight.Done()
			default:
				if err != nil {
					w.log.Warn("renew the lease of a pending task", "task_id", r.v.Task.ID, "err", err)
				} else {
					r.renewed = w.now()
				}
				next = min(next, every)
				kept = append(kept, r)
				gone--
			}
		}
		if len(kept) > 0 {
			p.restore(kept)
		}
		if gone > 0 {
			p.changed()
			w.roomFreed()
		}
	}
	return next
}

// restore puts runs taken out of pending back at its front, in order, and
// starts what free handlers can take.
func (p *pool) restore(rs []*run) {
	p.mu.Lock()
	p.pending = append(rs, p.pending...)
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if len(p.pending) == 0 || p.closed || p.maxInFlight != Unbounded && p.running >= p.maxInFlight {
			p.mu.Unlock()
			break
		}
		r := p.pending[0]
		p.pending = p.pending[1:]
		p.running++
		p.mu.Unlock()
		p.begin(r)
	}
	p.changed()
}
