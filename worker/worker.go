// Package worker claims tasks by CAS and runs registered handlers with
// bounded concurrency. It renews each task's lease while its handler runs,
// commits outcomes fenced on its claim (invariant 3), retries by policy and
// dead-letters when attempts run out. It never claims a type it has no
// handler for.
//
// The worker must not decide anything by the local wall clock: lease and
// availability decisions use the authoritative S3 clock.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Handler runs one attempt of a task. It returns the result (JSON, may be
// nil) or an error: a plain error is a failed attempt (retried by policy),
// Permanent(err) dead-letters the task, RetryAfter(d, err) runs it again
// later without using an attempt. ctx is canceled when the lease is lost,
// the task is canceled, or the worker shuts down (context.Cause says which).
type Handler func(ctx context.Context, t *task.Task) (json.RawMessage, error)

// Config configures a Worker. Zero fields take the defaults.
type Config struct {
	// ID names the worker in claims and logs (default host-pid-random).
	ID string
	// Concurrency is how many handlers run at once (default 4).
	Concurrency int
	// Shards must match the queue's manifest; 0 accepts the queue's count.
	Shards int
	// OwnShards pins the worker to these shards: it polls them and takes no
	// part in the fleet (nil: share the shards with the fleet).
	OwnShards []int
	// Dedicated workers are always members of the fleet: they never stand
	// by, and never leave when idle. By default workers are elastic: an idle
	// fleet keeps one member, and standbys join when members ask for help.
	Dedicated bool
	// MemberTTL is how long a member's fleet entry lasts without renewal;
	// members renew every third of it (default 30s). It bounds failover:
	// a dead member's shards move on within MemberTTL + LeaseMargin + a
	// renewal interval.
	MemberTTL time.Duration
	// StandbyPoll is how often a standby reads the fleet object (default
	// 25s); five times less often while the fleet is asleep. A sleeping
	// member's entry lasts twice MemberTTL.
	StandbyPoll time.Duration
	// IdleLeave: a member other than the first leaves the fleet after this
	// long without finding work (default 60s).
	IdleLeave time.Duration
	// SleepAfter: the only member goes to sleep at the doorbell after this
	// long without finding work (default 30s); BellPoll is how often it then
	// reads the doorbell (default 2s), SleepScan how often it still scans
	// its shard (default 60s), AwakeGrace how long it keeps scanning after
	// marking itself asleep, covering producers' cached view (default 5s).
	SleepAfter, BellPoll, SleepScan, AwakeGrace time.Duration
	// DrainMax caps the back-off of sweeps of inactive shards (default 10m).
	DrainMax time.Duration
	// PollMin, PollMax and PollMultiplier shape adaptive polling: the
	// interval resets to PollMin when a poll finds work and grows by
	// PollMultiplier per empty poll up to PollMax (defaults 200ms, 5s, 2).
	PollMin, PollMax time.Duration
	PollMultiplier   float64
	// PollBatch shapes the interval after a poll that found work: the time
	// the recent arrival rate takes to bring this many tasks, within
	// [PollMin, PollMax] (default 3). Under heavy load that is PollMin; at a
	// task a second it is about three seconds, one LIST per three tasks. Larger
	// values trade pickup latency for fewer LISTs (the economy profile). A
	// listing asks for up to max(Concurrency, PollBatch) + 1 due tasks;
	// those beyond the free slots are held (for up to PollMax) and claimed
	// as slots free up.
	PollBatch float64
	// ScanLag is how late a task may land and still be found by the shard
	// scans: once per ScanLag a scan starts twice this far behind its
	// cursor, the others at it (default 5s).
	ScanLag time.Duration
	// ScanLookback is how far back a new worker's scans start (default 1h);
	// older pending tasks reach it through the ready index.
	ScanLookback time.Duration
	// LeaseMargin: the worker stops a handler this long before its lease
	// expires by S3 time if it could not renew (default 2s).
	LeaseMargin time.Duration
	// ShutdownGrace is how long Run waits for in-flight handlers after its
	// context ends before canceling them and handing their tasks back
	// (default 30s).
	ShutdownGrace time.Duration
	Logger        *slog.Logger
	// Clock, if set, is shared with other components of this process.
	Clock *clock.Authoritative
	// OnEvent, if set, is called for every task event (observability).
	OnEvent func(Event)
	// Rand is the source of every random draw: the default worker id,
	// claim ids, jitter (retry delays, standby reads). nil means
	// crypto/rand.Reader. A seeded source makes a run reproducible (the
	// simulator); it need not be safe for concurrent use.
	Rand io.Reader
}

// Event describes something that happened to a task in this worker.
type Event struct {
	// Kind: claimed, succeeded, failed, dead, snoozed, canceled, lease_lost,
	// rejected, released, corrupt (a corrupt object, or one whose reads
	// kept failing, was skipped).
	Kind    string
	TaskID  string
	Type    string
	Attempt int
	Err     error
}

// Stats counts what the worker did.
type Stats struct {
	Claimed, Succeeded, Failed, Dead, Snoozed, Canceled, LeaseLost, Rejected, Released, Corrupt, Panics int64
}

// Worker runs handlers for claimed tasks. Its Run ends like a shutdown, at
// once, and returns the error, when any request meets an error that will
// not heal (one wrapping s3store.ErrUnusable: the bucket or the local root
// gone, access denied).
type Worker struct {
	st       s3store.Store // guard
	guard    *guarded
	cfg      Config
	clock    *clock.Authoritative
	manifest shards.Manifest
	log      *slog.Logger
	rand     io.Reader // cfg.Rand behind a lock

	pollMu sync.Mutex // one discovery pass at a time (Run and Poll)

	fleetMu      sync.Mutex // guards fleet; taken before pollMu
	fleet        membership
	unhandled    map[string]string // task key -> type: pending tasks seen that no known member could run (under pollMu)
	view         atomic.Pointer[memberView]
	cursors      atomic.Pointer[map[int]time.Time] // the scans' cursors after the last poll
	pointerShard atomic.Int64                      // where retries are announced (-1: the task's own shard)

	mu       sync.Mutex
	handlers map[string]Handler
	scans    map[int]*shards.Scan
	held     map[int]held // under pollMu
	rotate   int

	slots    chan struct{}
	freed    chan struct{}
	inflight sync.WaitGroup
	running  sync.Map // claim id -> *run
	stopping atomic.Bool
	// stopped ends when Run has returned: no run renews or commits after
	// it (a handler that ignored its shutdown keeps running, and its lease
	// expires).
	stopped     context.Context
	markStopped context.CancelFunc

	stats struct {
		claimed, succeeded, failed, dead, snoozed, canceled, leaseLost, rejected, released, corrupt, panics atomic.Int64
	}
}

// New opens the queue in st for a worker.
func New(ctx context.Context, st s3store.Store, cfg Config) (*Worker, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	g := newGuarded(st)
	// The clock exists before the first request, so every response syncs it.
	c := cfg.Clock
	if c == nil {
		c = clock.New(g, clock.Config{})
	}
	m, err := shards.Open(ctx, g, cfg.Shards)
	if err != nil {
		return nil, err
	}
	for _, s := range cfg.OwnShards {
		if s < 0 || s >= m.Shards {
			return nil, fmt.Errorf("worker: shard %d out of range 0..%d", s, m.Shards-1)
		}
	}
	w := &Worker{
		st: g, guard: g, cfg: cfg, clock: c, manifest: m, rand: cfg.Rand,
		log:       cfg.Logger.WithGroup("worker").With("worker_id", cfg.ID),
		handlers:  make(map[string]Handler),
		scans:     make(map[int]*shards.Scan),
		held:      make(map[int]held),
		unhandled: make(map[string]string),
		slots:     make(chan struct{}, cfg.Concurrency),
		freed:     make(chan struct{}, 1),
	}
	w.pointerShard.Store(-1)
	w.view.Store(&memberView{})
	w.stopped, w.markStopped = context.WithCancel(context.Background())
	return w, nil
}

func (c *Config) fill() error {
	c.Rand = &lockedRand{r: randSource(c.Rand)}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randHex(c.Rand, 3))
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.PollMin == 0 {
		c.PollMin = 200 * time.Millisecond
	}
	if c.PollMax == 0 {
		c.PollMax = 5 * time.Second
	}
	if c.PollMultiplier == 0 {
		c.PollMultiplier = 2
	}
	if c.PollBatch == 0 {
		c.PollBatch = 3
	}
	if c.ScanLag == 0 {
		c.ScanLag = 5 * time.Second
	}
	if c.ScanLookback == 0 {
		c.ScanLookback = time.Hour
	}
	if c.LeaseMargin == 0 {
		c.LeaseMargin = 2 * time.Second
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&c.MemberTTL, 30 * time.Second}, {&c.StandbyPoll, 25 * time.Second}, {&c.IdleLeave, time.Minute},
		{&c.SleepAfter, 30 * time.Second}, {&c.BellPoll, 2 * time.Second}, {&c.SleepScan, time.Minute},
		{&c.AwakeGrace, 5 * time.Second}, {&c.DrainMax, 10 * time.Minute},
	}
	for _, d := range defaults {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.validate()
}

func (c *Config) validate() error {
	switch {
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return fmt.Errorf("worker: concurrency %d out of range 1..10000", c.Concurrency)
	case c.PollMin <= 0 || c.PollMax < c.PollMin:
		return fmt.Errorf("worker: poll interval min %v must be positive and at most max %v", c.PollMin, c.PollMax)
	case c.PollMultiplier < 1:
		return fmt.Errorf("worker: poll multiplier %v must be at least 1", c.PollMultiplier)
	case c.PollBatch <= 0:
		return fmt.Errorf("worker: poll batch %v must be positive", c.PollBatch)
	case c.ScanLag < 0 || c.ScanLookback < 0 || c.LeaseMargin < 0 || c.ShutdownGrace < 0 || c.StandbyPoll < 0 ||
		c.IdleLeave < 0 || c.SleepAfter < 0 || c.BellPoll < 0 || c.SleepScan < 0 || c.AwakeGrace < 0 || c.DrainMax < 0:
		return fmt.Errorf("worker: durations must not be negative")
	case c.MemberTTL < 3*c.LeaseMargin:
		return fmt.Errorf("worker: member ttl %v must be at least three lease margins (%v)", c.MemberTTL, 3*c.LeaseMargin)
	}
	return nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers h for tasks of type typ. Register handlers before Run.
func (w *Worker) Handle(typ string, h Handler) {
	w.mu.Lock()
	w.handlers[typ] = h
	w.mu.Unlock()
}

func (w *Worker) handler(typ string) Handler {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.handlers[typ]
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	s := &w.stats
	return Stats{s.claimed.Load(), s.succeeded.Load(), s.failed.Load(), s.dead.Load(), s.snoozed.Load(),
		s.canceled.Load(), s.leaseLost.Load(), s.rejected.Load(), s.released.Load(), s.corrupt.Load(), s.panics.Load()}
}

func (w *Worker) emit(e Event) {
	if w.cfg.OnEvent != nil {
		w.cfg.OnEvent(e)
	}
}

// Run polls and runs tasks until ctx ends, then leaves the fleet, stops
// claiming and drains: it waits up to ShutdownGrace for running handlers,
// then cancels the rest and hands their tasks back to the queue. A handler
// that ignores its cancellation is waited for a little longer (up to 10s),
// then left running: once Run has returned the worker sends no request for
// it, not even a lease renewal, so its lease expires and the monitor
// re-dispatches the task.
func (w *Worker) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()

	// An error that will not heal ends Run as the end of ctx does (drain
	// then returns the error).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.guard.gone:
			w.stopping.Store(true)
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-ctx.Done():
			w.leave()
			err := w.drain()
			w.markStopped()
			return err
		case <-timer.C:
		case <-w.freed:
			w.slotFreed()
		}
		// When the timer and a freed slot are both ready, select picks one
		// at random: take the freed slot either way, so that what happens
		// next does not depend on that pick (a seeded simulation replays).
		select {
		case <-w.freed:
			w.slotFreed()
		default:
		}
		timer.Reset(w.step(ctx))
	}
}

// slotFreed reacts to a handler that finished: claim a held candidate now
// (no LIST), or if the last poll stopped for lack of slots, poll again soon
// rather than after PollMax.
func (w *Worker) slotFreed() {
	w.fleetMu.Lock()
	defer w.fleetMu.Unlock()
	t := time.Now().Add(w.fleet.interval)
	own := w.fleet.assign.Own
	if w.static() {
		own = w.cfg.OwnShards
	}
	if w.holding(own) {
		t = time.Now()
	}
	if t.Before(w.fleet.nextOwnPoll) {
		w.fleet.nextOwnPoll = t
	}
	w.fleet.fullSince, w.fleet.backlog = time.Time{}, false // no longer full
}

// leave removes the worker from the fleet on shutdown, so its shards move
// on at once instead of after its entry expires. Unlike an idle member's
// leave it goes even as the last member: a worker started next (a restart)
// then joins at once rather than after the entry expires.
func (w *Worker) leave() {
	w.fleetMu.Lock()
	defer w.fleetMu.Unlock()
	if !w.fleet.member {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.fleet.leaving, w.fleet.shutdown = true, true
	if err := w.syncFleet(ctx, time.Now()); err != nil {
		w.log.Warn("leave the fleet; the entry will expire", "err", err)
	}
}

// step does whatever is due — a fleet renewal or standby read, a poll of the
// member's own shards, slow sweeps of its drain shards, the doorbell — and
// returns how long to wait before the next step.
func (w *Worker) step(ctx context.Context) time.Duration {
	w.fleetMu.Lock()
	defer w.fleetMu.Unlock()
	m := &w.fleet
	now := time.Now()
	if w.static() {
		if now.Before(m.nextOwnPoll) {
			return time.Until(m.nextOwnPoll) // woken by a freed slot early
		}
		d := w.adapt(w.pollShards(ctx, w.cfg.OwnShards, false))
		m.nextOwnPoll = now.Add(d)
		return d
	}
	due := (m.member && now.Sub(m.renewed) >= w.memberTTL()/3) || (!m.member && now.Sub(m.synced) >= m.standbyWait) ||
		(m.saturated() && w.free() == 0) || m.leaving
	switch {
	case !m.retry.ready(now):
		// The last fleet request failed: it backs off.
	case due:
		w.fleetOp(ctx, now, "fleet", func() error { return w.syncFleet(ctx, now) })
	case m.member && !m.asleep && now.Sub(m.synced) >= w.cfg.MemberTTL/6:
		w.fleetOp(ctx, now, "fleet", func() error { return w.refreshView(ctx, now) })
	}
	if !m.member {
		return max(m.standbyWait-time.Since(m.synced), m.retry.until(now), 10*time.Millisecond)
	}
	iv, err := w.clock.Now(ctx)
	if err != nil || !w.holds(iv) {
		// Our entry may have lapsed: poll nothing until a renewal lands.
		return max(w.cfg.PollMin, time.Second)
	}
	if w.free() < cap(w.slots) {
		m.lastWork = now // running handlers are work: a busy member is not idle
	}
	// Until the renewal is due, or, if it is overdue, until its retry.
	wait := max(w.memberTTL()/3-time.Since(m.renewed), m.retry.until(now))
	// Asleep, the member keeps scanning until a scan has started after
	// every producer's cached view of the fleet shows it asleep.
	graceDone := now.Sub(m.sleptAt) >= w.cfg.AwakeGrace && m.lastPoll.After(m.sleptAt.Add(shards.FleetCacheTTL))
	if m.asleep && graceDone {
		if now.Sub(m.synced) >= w.cfg.BellPoll && m.retry.ready(now) {
			w.fleetOp(ctx, now, "read the doorbell", func() error { return w.checkBell(ctx, now) })
		}
		if m.asleep {
			if now.Sub(m.sleptAt) >= w.cfg.SleepScan && !now.Before(m.nextOwnPoll) {
				// A slow safety scan: a producer that crashed between its
				// PUT and its ring is still served.
				p := w.pollShards(ctx, m.assign.Own, false)
				if p.err != nil && ctx.Err() == nil {
					w.log.Warn("safety scan while asleep", "err", p.err)
				}
				m.nextOwnPoll = now.Add(w.cfg.SleepScan)
				if p.claimed > 0 {
					w.wake(ctx, now)
				}
			}
			if m.asleep {
				return max(10*time.Millisecond, min(wait, w.cfg.BellPoll-time.Since(m.synced)), m.retry.until(now))
			}
		}
	}
	if !now.Before(m.nextOwnPoll) {
		// Full, it still peeks: a saturated member must see its backlog.
		p := w.pollShards(ctx, m.assign.Own, true)
		if p.claimed > 0 {
			m.lastWork = now
			if m.asleep {
				w.wake(ctx, now)
			}
		}
		// Saturated: every slot busy for a while, and the last listing left
		// due work behind. Then the member asks for more members.
		switch {
		case !p.full:
			m.fullSince, m.backlog = time.Time{}, false
		case m.fullSince.IsZero():
			m.fullSince, m.backlog = now, p.leftover
		default:
			m.backlog = m.backlog || p.leftover
		}
		m.nextOwnPoll = now.Add(w.adapt(p))
	}
	wait = min(wait, time.Until(m.nextOwnPoll))
	wait = min(wait, w.drainShards(ctx, now))

	live := m.fleet.Live(iv, w.cfg.LeaseMargin)
	// Idle means no work for a while and for two polls: a member paced to
	// list once a minute (poll_batch at a trickle) is not idle between
	// its listings.
	idle := now.Sub(m.lastWork) - 2*m.interval
	switch {
	case idle >= w.cfg.IdleLeave && w.nextToLeave(live):
		m.leaving = true
		return m.retry.until(now)
	case len(live) == 1 && !m.asleep && idle >= w.cfg.SleepAfter && m.retry.ready(now):
		w.fleetOp(ctx, now, "mark the fleet asleep", func() error { return w.sleep(ctx, now) })
	}
	return max(wait, 0)
}

// fleetOp runs op, a read or write of the fleet object, and backs off
// after a failure: the next fleet request waits PollMin, doubling per
// failure in a row up to MemberTTL/6 (still several tries before a
// member's entry lapses).
func (w *Worker) fleetOp(ctx context.Context, now time.Time, what string, op func() error) {
	m := &w.fleet
	err := op()
	switch {
	case err == nil:
		m.retry.ok()
	case ctx.Err() == nil:
		d := m.retry.failed(now, w.cfg.PollMin, max(w.cfg.PollMin, w.cfg.MemberTTL/6), w.randFloat)
		w.log.Warn(what, "err", err, "retry_in", d)
	}
}

// drainShards sweeps the member's inactive shards for leftovers, each on
// its own back-off, and returns how long until the next one is due.
func (w *Worker) drainShards(ctx context.Context, now time.Time) time.Duration {
	m := &w.fleet
	if m.drainNext == nil {
		m.drainNext, m.drainEvery = map[int]time.Time{}, map[int]time.Duration{}
	}
	wait := w.cfg.DrainMax
	for _, s := range m.assign.Drain {
		next, ok := m.drainNext[s]
		if ok && now.Before(next) {
			wait = min(wait, next.Sub(now))
			continue
		}
		p := w.pollShards(ctx, []int{s}, false)
		n, err := p.claimed, p.err
		if err != nil && ctx.Err() == nil {
			// Back off as if empty: the shard's leftovers wait for the
			// next sweep, or the monitor's repair.
			w.log.Warn("sweep an inactive shard", "shard", s, "err", err)
		}
		// Leftovers are there at the first sweep, or come from producers
		// whose 2-second view of the fleet is stale: the back-off is steep.
		every := m.drainEvery[s]
		if n > 0 || every == 0 {
			every = w.cfg.PollMin
		} else {
			every = min(max(4*every, 2*shards.FleetCacheTTL), w.cfg.DrainMax)
		}
		m.drainEvery[s], m.drainNext[s] = every, now.Add(every)
		wait = min(wait, every)
	}
	return wait
}

// adapt returns the next poll interval: paced to the arrival rate after
// finding work, growing by the multiplier while idle, PollMax while every
// slot is busy (a freed slot wakes Run anyway).
func (w *Worker) adapt(p pass) time.Duration {
	m := &w.fleet
	if m.interval == 0 {
		m.interval = w.cfg.PollMin
	}
	now := time.Now()
	since := now.Sub(m.lastPoll)
	if p.lists {
		m.lastPoll = now // the time of the last listing, which the pace is measured from
	}
	if p.lists && p.listed > 0 && since > 0 && since < time.Hour {
		// The pace the work arrives at, from what listings find.
		rate := float64(p.listed) / since.Seconds()
		if m.rate == 0 {
			m.rate = rate
		} else {
			m.rate = 0.5*m.rate + 0.5*rate
		}
	}
	paced := func() time.Duration {
		if m.rate <= 0 {
			return w.cfg.PollMin
		}
		return min(max(time.Duration(w.cfg.PollBatch/m.rate*float64(time.Second)), w.cfg.PollMin), w.cfg.PollMax)
	}
	if p.lists {
		m.capped = p.capped
	}
	switch {
	case p.full:
		// Busy: no poll until a slot frees (see Run). Held candidates
		// fill it at once; after them, list again soon if the last listing
		// was cut short (a backlog), else at the pace.
		m.interval = paced()
		if m.capped {
			m.interval = w.cfg.PollMin
		}
		return w.cfg.PollMax
	case p.err != nil:
		w.log.Warn("poll", "err", p.err)
		m.interval = w.grow(m.interval)
	case !p.lists:
		// Only held candidates, all claimed: list at the pace, or at once
		// after a listing that was cut short.
		if m.capped {
			m.interval = w.cfg.PollMin
		}
	case p.listed > 0:
		// Reset on work, to the pace the work arrives at: polling faster
		// than PollBatch tasks per poll only buys empty LISTs.
		m.interval = paced()
	default:
		m.interval = w.grow(m.interval)
	}
	return m.interval
}

func (w *Worker) grow(d time.Duration) time.Duration {
	d = time.Duration(float64(d) * w.cfg.PollMultiplier)
	if d > w.cfg.PollMax {
		d = w.cfg.PollMax
	}
	return d
}

// drain waits for in-flight handlers within the grace period, then cancels
// them with ErrShutdown; their tasks are handed back by their runners.
//
// On a store that will not heal (s3store.ErrUnusable) it cancels the
// handlers at once, since waiting cannot help, and returns that error.
func (w *Worker) drain() error {
	if err := w.guard.unusable(); err != nil {
		w.log.Error("the store is unusable; the worker stops", "err", err)
		w.drainWithin(0)
		return fmt.Errorf("worker: %w", err)
	}
	return w.drainWithin(w.cfg.ShutdownGrace)
}

// drainWithin is drain with another grace period.
func (w *Worker) drainWithin(graceFor time.Duration) error {
	w.stopping.Store(true)
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	grace := time.NewTimer(graceFor)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
	}
	// In claim id order, so a seeded run cancels (and so commits) alike.
	var ids []string
	w.running.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return true
	})
	slices.Sort(ids)
	for _, id := range ids {
		if v, ok := w.running.Load(id); ok {
			v.(*run).cancel(ErrShutdown)
		}
	}
	// Handlers that ignore their context are not waited for forever: once
	// Run returns their leases are no longer renewed, so they expire and
	// the monitor re-dispatches the tasks.
	select {
	case <-done:
	case <-time.After(min(10*time.Second, max(time.Second, w.cfg.ShutdownGrace))):
		w.log.Warn("handlers still running after shutdown; their leases are no longer renewed and will expire")
	}
	return nil
}

// Wait blocks until no handler is running.
func (w *Worker) Wait() { w.inflight.Wait() }

// Poll runs one discovery pass over every shard the worker may poll (its
// own, its drain shards, or its static list), after joining the fleet if
// the rules let it or re-reading it if already a member, and starts handlers for what it claims. It returns how
// many tasks it claimed. Tests drive it directly instead of Run.
func (w *Worker) Poll(ctx context.Context) (int, error) {
	if w.static() {
		p := w.pollShards(ctx, w.cfg.OwnShards, false)
		return p.claimed, p.err
	}
	w.fleetMu.Lock()
	var err error
	if !w.fleet.member {
		err = w.syncFleet(ctx, time.Now())
	} else {
		err = w.refreshView(ctx, time.Now())
	}
	a := w.fleet.assign
	w.fleetMu.Unlock()
	if err != nil {
		return 0, err
	}
	p := w.pollShards(ctx, append(append([]int(nil), a.Own...), a.Drain...), false)
	return p.claimed, p.err
}

// memberView is what Member reports, published by the Run goroutine.
type memberView struct {
	member bool
	assign shards.Assignment
	fleet  shards.Fleet
}

// Member reports whether the worker is a member of the fleet and which
// shards it polls.
func (w *Worker) Member() (bool, shards.Assignment) {
	v := w.view.Load()
	return v.member, v.assign
}

// ScanCursors reports, for each shard the worker has scanned, how far its
// scan has got: every key of an earlier time has been handled. A cursor
// that stops advancing while its shard receives work is a starved shard
// (the simulator checks that none does).
//
// It reads what the last poll published, without waiting for a poll in
// progress.
func (w *Worker) ScanCursors() map[int]time.Time {
	out := make(map[int]time.Time)
	if c := w.cursors.Load(); c != nil {
		for shard, at := range *c {
			out[shard] = at
		}
	}
	return out
}

// publishCursors publishes the scans' cursors (under pollMu).
func (w *Worker) publishCursors() {
	c := make(map[int]time.Time, len(w.scans))
	for shard, s := range w.scans {
		c[shard] = s.Cursor()
	}
	w.cursors.Store(&c)
}

// pass is what one poll of some shards did.
type pass struct {
	claimed  int  // tasks claimed
	listed   int  // due candidates its LISTs returned: the arrivals since the last
	lists    bool // it listed, rather than only claiming held candidates
	capped   bool // a listing returned as many as it asked for: more may be due
	full     bool // every slot was busy at the end
	leftover bool // due candidates were left behind for lack of slots
	err      error
}

// pollShards polls list once: for each shard, the candidates held from its
// last listing, or a new listing. With every slot busy it claims nothing;
// if peek, it then learns whether due work waits (see peek).
func (w *Worker) pollShards(ctx context.Context, list []int, peek bool) (p pass) {
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	defer w.publishCursors()
	if w.stopping.Load() || len(list) == 0 {
		return p
	}
	if w.free() == 0 && !peek {
		p.full = true
		return p
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		p.err = err
		return p
	}
	if w.free() == 0 {
		p.full = true
		p.err = w.peek(ctx, list, iv, &p)
		return p
	}
	// Rotate the starting shard so that no shard starves when slots run
	// out part way through a pass.
	w.rotate++
	for i := range list {
		if w.free() == 0 {
			p.full, p.leftover = true, true
			return p
		}
		shard := list[(w.rotate+i)%len(list)]
		if err := w.pollShard(ctx, shard, iv, &p); err != nil {
			p.err = errors.Join(p.err, err)
		}
	}
	p.full = w.free() == 0
	return p
}

func (w *Worker) free() int { return cap(w.slots) - len(w.slots) }

// peek learns, while every slot is busy, whether due work waits in list, so
// that a saturated member asks for help (a member that only listed when a
// slot was free would never see a backlog under long handlers). Candidates
// held from a listing less than PollMax old say so for free; otherwise one
// listing per shard refreshes them, and they are claimed as slots free up,
// without another LIST. The member's own-shard polls come every PollMax
// while it is full, so this costs at most one LIST per own shard per
// PollMax, as an idle member's polls do.
func (w *Worker) peek(ctx context.Context, list []int, iv clock.Interval, p *pass) error {
	for _, shard := range list {
		if h := w.held[shard]; h.fresh(w.cfg.PollMax) {
			p.leftover = true
			continue
		}
		cands, err := w.list(ctx, shard, iv, p)
		if err != nil {
			return err
		}
		w.held[shard] = held{at: time.Now(), cands: cands}
		p.leftover = p.leftover || len(cands) > 0
	}
	return nil
}

// list lists shard for up to a poll's worth of tasks (PollBatch), or a
// full set of slots under a backlog, so that slots freeing up one by one
// are refilled from what is held, not by a LIST each. One more than that
// tells whether work is left behind.
func (w *Worker) list(ctx context.Context, shard int, iv clock.Interval, p *pass) ([]shards.Candidate, error) {
	want := max(w.free(), cap(w.slots), int(math.Ceil(w.cfg.PollBatch))) + 1
	cands, err := w.scan(shard, iv).Next(ctx, w.st, iv.Latest, want)
	if err != nil {
		return nil, err
	}
	p.capped = p.capped || len(cands) >= want
	p.listed += len(cands)
	p.lists = true
	return cands, nil
}

func (w *Worker) scan(shard int, iv clock.Interval) *shards.Scan {
	s, ok := w.scans[shard]
	if !ok {
		s = shards.NewScan(shard, iv.Earliest.Add(-w.cfg.ScanLookback), w.cfg.ScanLag)
		w.scans[shard] = s
	}
	return s
}

// held is what one listing of a shard returned beyond the free slots, kept
// for the slots that free up next: a worker with few slots then pays one
// LIST per poll_batch tasks, not one per slot's worth.
type held struct {
	at    time.Time // local time of the listing
	cands []shards.Candidate
}

// holding reports whether candidates held for one of these shards are
// still fresh enough to claim.
func (w *Worker) holding(list []int) bool {
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	for _, s := range list {
		if w.held[s].fresh(w.cfg.PollMax) {
			return true
		}
	}
	return false
}

// fresh reports whether h holds candidates listed less than maxAge ago.
func (h held) fresh(maxAge time.Duration) bool {
	return len(h.cands) > 0 && time.Since(h.at) < maxAge
}

func (w *Worker) pollShard(ctx context.Context, shard int, iv clock.Interval, p *pass) error {
	s := w.scan(shard, iv)
	h := w.held[shard]
	cands := h.cands
	if !h.fresh(w.cfg.PollMax) {
		// Candidates held longer than PollMax are listed afresh (they stay
		// unsettled in the scan, so the listing returns them again).
		var err error
		if cands, err = w.list(ctx, shard, iv, p); err != nil {
			return err
		}
		h.at = time.Now()
	}
	i := 0
	for ; i < len(cands) && w.free() > 0; i++ {
		c := cands[i]
		key := c.Key
		if c.Pointer {
			key = task.Key(task.ShardFor(c.ID, w.manifest.Shards), c.ID)
		}
		v, err := taskio.Load(ctx, w.st, key)
		if err != nil {
			switch {
			case w.reportLoad(key, err):
				w.settle(ctx, s, c, c.ETag, true)
			case s.Failed(c, iv.Latest):
				// Unreadable again and again (a 403 on this one object):
				// skipped at its ETag rather than holding the shard.
				w.stats.corrupt.Add(1)
				w.log.Error("skipping an object whose reads keep failing", "key", c.Key, "failures", shards.MaxReadFailures, "err", err)
				w.emit(Event{Kind: "corrupt", TaskID: c.ID, Err: err})
			}
			continue
		}
		ok, settledAt := w.tryClaim(ctx, v, iv)
		if ok {
			p.claimed++
		}
		if settledAt == "" && !c.Pointer && v.Task.Status == task.Pending && !dueNow(v.Task, iv) {
			// A retried or snoozed task waits behind its own id: a pointer
			// at its due time brings it back, so its key needs no second
			// look (and must not hold the cursor until then).
			if idt, err := task.IDTime(v.Task.ID); err == nil && v.Task.AvailableAt.After(idt) {
				settledAt = v.ETag
			}
		}
		if settledAt != "" {
			// A pointer has done its job once its task is claimed or no
			// longer pending; one to a task we cannot run stays for a
			// worker that can.
			done := ok || v.Task.Status != task.Pending
			if c.Pointer && done && shards.MayLieBelowFloor(v.Task.ID, iv.Latest) {
				// A task whose id is older than FloorLag may lie below the
				// monitor's sweep floor: its pointer is how the monitor
				// learns of it (were this worker to die, the task would
				// otherwise wait for the full walk), and the monitor
				// deletes it after lowering its floor. A finished one may
				// be about to be requeued: requeues write the pointer
				// first. Settled at its ETag, this scan does not hand it
				// out again.
				done = false
			}
			if c.Pointer {
				settledAt = c.ETag
			} else {
				settledAt = shards.Settled
			}
			w.settle(ctx, s, c, settledAt, done)
		}
	}
	h.cands = append([]shards.Candidate(nil), cands[i:]...)
	w.held[shard] = h
	p.leftover = p.leftover || len(h.cands) > 0
	return nil
}

// settle marks a candidate handled, deleting a pointer that is done with.
func (w *Worker) settle(ctx context.Context, s *shards.Scan, c shards.Candidate, etag string, done bool) {
	s.Seen(c, etag)
	if c.Pointer && done {
		// Deleting is free, and the task object decides, not the pointer.
		if err := w.st.Delete(ctx, c.Key, s3store.DeleteOptions{}); err != nil {
			w.log.Warn("delete ready pointer", "key", c.Key, "err", err)
		}
	}
}

// reportLoad logs a failed load and reports whether the object is settled
// as unusable (corrupt, gone) rather than unreadable for now.
func (w *Worker) reportLoad(key string, err error) bool {
	switch {
	case errors.Is(err, s3store.ErrNotFound):
		return true
	case errors.Is(err, task.ErrCorrupt), errors.Is(err, task.ErrUnsupportedFormat):
		w.stats.corrupt.Add(1)
		w.log.Error("skipping corrupt task object", "key", key, "err", err)
		w.emit(Event{Kind: "corrupt", Err: err})
		return true
	}
	w.log.Warn("load task", "key", key, "err", err)
	return false
}

// forward sends a pending task this worker cannot run to a shard whose
// member can, by a ready pointer there. Producers route by type already;
// this heals the moments their view of the fleet was stale.
func (w *Worker) forward(ctx context.Context, t *task.Task, iv clock.Interval) bool {
	v := w.view.Load()
	targets := v.fleet.ShardsFor(t.Type, iv, w.cfg.LeaseMargin, w.manifest.Shards)
	if len(targets) == 0 {
		return false // nobody can run it yet: it waits, unclaimed
	}
	in := targets[int(t.Version)%len(targets)]
	if now, err := w.clock.Now(ctx); err == nil {
		iv = now // a pass can take a while: stamp the pointer with now
	}
	if err := shards.Announce(ctx, w.st, t, iv.Latest, in); err != nil {
		w.log.Warn("forward task", "task_id", t.ID, "err", err)
		return false
	}
	return true
}

// forwardWaiting retries forwarding the pending tasks no member could run,
// after the fleet changed.
func (w *Worker) forwardWaiting(ctx context.Context) {
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	if len(w.unhandled) == 0 {
		return
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return
	}
	f := w.view.Load().fleet
	// Sorted, so a seeded run forwards in the same order.
	for _, key := range slices.Sorted(maps.Keys(w.unhandled)) {
		typ := w.unhandled[key]
		if !f.Covers(typ, iv, w.cfg.LeaseMargin) {
			continue
		}
		v, err := taskio.Load(ctx, w.st, key)
		if err == nil && (v.Task.Status != task.Pending || w.forward(ctx, v.Task, iv)) {
			delete(w.unhandled, key)
		}
	}
}

// dueNow reports whether t may be claimed now. A task meant to run at once
// is claimed when it may already be due; a delayed one only once it
// certainly is, so delays are never cut short by clock uncertainty.
func dueNow(t *task.Task, iv clock.Interval) bool {
	if t.AvailableAt.After(t.CreatedAt) {
		return t.Due(iv.Earliest)
	}
	return t.Due(iv.Latest)
}

// tryClaim claims v if it is pending, due and of a handled type. settledAt
// is the ETag of the object's version that needs no second look (the one it
// wrote when it claimed), or "" when a later poll should look again.
func (w *Worker) tryClaim(ctx context.Context, v taskio.Versioned, iv clock.Interval) (claimed bool, settledAt string) {
	t := v.Task
	if t.Status != task.Pending {
		return false, v.ETag
	}
	h := w.handler(t.Type)
	if h == nil {
		if !w.forward(ctx, t, iv) && len(w.unhandled) < 1000 {
			w.unhandled[t.Key()] = t.Type
		}
		return false, v.ETag
	}
	if !dueNow(t, iv) || w.stopping.Load() {
		return false, ""
	}
	select {
	case w.slots <- struct{}{}:
	default:
		return false, ""
	}
	claimID := randHex(w.rand, 12)
	if err := t.ClaimBy(w.cfg.ID, claimID, iv.Latest); err != nil {
		<-w.slots
		return false, ""
	}
	// A claim that landed with its response lost (the store's retry then
	// met it as a 412, or any error after the write) is recognised by
	// taskio.Update, which reads the object back: it is ours to run.
	nv, err := taskio.Update(ctx, w.st, w.taskClock(), t, v.ETag)
	if err != nil {
		if !s3store.LostRace(err) {
			w.log.Warn("claim", "task_id", t.ID, "err", err)
		}
		<-w.slots
		return false, ""
	}
	w.stats.claimed.Add(1)
	w.emit(Event{Kind: "claimed", TaskID: t.ID, Type: t.Type, Attempt: t.Attempt})
	r := &run{w: w, v: nv, claimID: claimID, handler: h}
	w.inflight.Add(1)
	go r.execute()
	return true, nv.ETag
}
