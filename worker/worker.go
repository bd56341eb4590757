// Package worker claims tasks by CAS and runs registered handlers with
// bounded concurrency. It renews each task's lease while its handler runs,
// commits outcomes fenced on its claim (invariant 3), retries by policy and
// dead-letters when attempts run out. It never claims a type it has no
// handler for.
//
// The worker must not decide anything by the local wall clock: lease and
// availability decisions use the authoritative S3 clock. Its local clock
// (Config.Local) only paces its work.
//
// The files follow the path of a task: config.go (Config), keys.go (its
// queue.toml keys and defaults), worker.go (the Worker and Run's scheduler loop), fleet.go
// (fleet membership, the doorbell), pacing.go (when to poll), discover.go
// (listing the shards and claiming), dispatch.go (handing claimed tasks to
// handler slots), forward.go (tasks of a type this worker cannot run),
// handoff.go (a busy member's backlog handed to members that are not busy),
// run.go (one handler run: renewals and the fenced commit) and shutdown.go.
// middleware.go wraps each handler call: the run's span, then
// Config.Middleware.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/internal/tracing"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Handler runs one attempt of a task. It returns the result (JSON, may be
// nil) or an error: a plain error is a failed attempt (retried by policy),
// Permanent(err) dead-letters the task, RetryAfter(d, err) runs it again
// after d without using an attempt, RetryLater(err) after the task's retry
// policy's backoff by its snoozes so far (Task.Snoozes counts them). ctx is
// canceled when the lease is lost, the task is canceled, or the worker
// shuts down (context.Cause says which);
// it ends with context.DeadlineExceeded at the attempt's start plus the
// task's timeout, or at the task's deadline when that comes first
// (ctx.Deadline says when). An error returned after the timeout fails the
// attempt as "timed out after D" (retried by policy); after the deadline it
// ends the task dead. The lease is renewed until the handler returns, even
// past its timeout (docs/lifecycle.md, Deadlines).
// It carries the attempt's span, s3queue.run, in the trace of the task's
// submit: spans started from it are its children (docs/tracing.md).
type Handler func(ctx context.Context, t *task.Task) (json.RawMessage, error)

// Worker runs handlers for claimed tasks. Its Run ends like a shutdown, at
// once, and returns the error, when any request meets an error that will
// not heal (one wrapping s3store.ErrUnusable: the bucket or the local root
// gone, access denied).
type Worker struct {
	st       s3store.Store // guard
	guard    *guarded
	cfg      Config
	clock    *clock.Authoritative
	local    clock.Local // cfg.Local
	manifest shards.Manifest
	log      *slog.Logger
	// rand (over cfg.Rand) is drawn from by the scheduler only: draws from
	// several goroutines would come in an order the Go scheduler picks, and
	// a seeded run would not replay. An attempt's jitter comes from
	// rnd.Keyed(its claim id) instead.
	rand *rnd.Source

	// The scheduler's state belongs to Run's goroutine (in tests, to the
	// goroutine driving poll instead of Run). No lock guards it, so none is
	// held across a request.
	fleet      membership
	pace       pacing
	sweep      sweeps
	scans      map[int]*shards.Scan
	prefetched map[int]prefetch
	rotate     int
	laneOdd    bool                // the odd free slot of the next busy poll goes to the lanes (lanes.go)
	unhandled  map[string]string   // task key -> type: pending tasks seen that no known member could run
	blocked    map[*pool]int       // tasks the current poll left for lack of room, by pool
	refused    refusals            // candidates refused for a full pool, not read again while unchanged (refusals.go)
	polls      uint64              // discovery passes so far (pollShards): a drop-oldest pool evicts no task claimed in the current one
	direct     *inbox              // direct dispatch's state (direct.go); nil in the shared mode
	pauses     *pause.Watch        // the queue's pause object, read every PauseCheckInterval (pause.go)
	held       map[string]heldTask // task key -> paused task seen, for its resume
	limits     map[string]*limiter // type -> its rate limit (ratelimit.go); nil without limits
	rateAt     clock.Interval      // S3 time of the last reservation's decision (ratelimit.go)
	unsure     map[string]unsure   // task id -> a claim whose outcome is unknown (claim.go)
	// resumePending: some held tasks of a resumed type are still to be
	// announced (an announcement failed, or a crashed task came in).
	resumePending bool

	// Published by the scheduler for other goroutines.
	pauseState   atomic.Pointer[pause.State] // the pause state last read (pause.go)
	pauseGaveUp  bool                        // pauseView logged that no read of the pause object answered
	view         atomic.Pointer[memberView]
	cursors      atomic.Pointer[map[int]time.Time] // the scans' cursors after the last poll
	pointerShard atomic.Int64                      // where retries are announced (-1: the task's own shard)
	known        atomic.Pointer[knownFleet]        // the fleet as the scheduler last read or wrote it (release.go)
	releasedOwn  atomic.Bool                       // a pass-on announced a task in pointerShard: poll it now

	mu       sync.Mutex
	handlers map[string]Handler
	// crashed: the tasks of a paused type whose handler crashed under
	// CrashRequeue, released to pending by their runs, for the scheduler
	// to hold (pause.go).
	crashed struct {
		mu    sync.Mutex
		tasks map[string]heldTask
	}

	pools    []*pool          // the default pool first
	poolOf   map[string]*pool // type -> its pool, for the types not in the default pool
	loops    sync.WaitGroup
	freed    chan struct{}
	inflight sync.WaitGroup
	running  sync.Map // claim id -> *run
	stopping atomic.Bool
	// stopped ends when Run has returned: no run renews or commits after
	// it (a handler that ignored its shutdown keeps running, and its lease
	// expires).
	stopped    context.Context
	stopCancel context.CancelFunc
	// stopMu and ending fence Run's return: a commit (and the passing on
	// of its task's end) enters before its first request, and Run, once
	// it has canceled stopped, waits for those that entered, so that no
	// request of theirs is sent after Run returned.
	stopMu sync.Mutex
	ending sync.WaitGroup

	// logEvent logs the worker's events (events.Log over log).
	logEvent func(Event)
	// trace makes the spans of claims, runs and commits.
	trace tracing.Tracing

	// runTime is how long handlers have been running, recently (the
	// hand-off's estimate of how much a member runs in a while).
	runTime runTimes

	stats struct {
		claimed, succeeded, failed, dead, snoozed, canceled, leaseLost, rejected, released, corrupt, panics,
		refused, dropped, requeued, renewed, renewFailed atomic.Int64
	}
}

// New opens the queue in st for a worker.
func New(ctx context.Context, st s3store.Store, cfg Config) (*Worker, error) {
	src := rnd.New(cfg.Rand)
	if err := cfg.fill(src); err != nil {
		return nil, err
	}
	g := newGuarded(st)
	// The clock exists before the first request, so every response syncs it.
	c := cfg.Clock
	if c == nil {
		c = clock.New(g, clock.Config{Local: cfg.Local})
	}
	m, err := shards.OpenMode(ctx, g, cfg.Shards, cfg.DispatchMode)
	if err != nil {
		return nil, err
	}
	for _, s := range cfg.OwnShards {
		if s < 0 || s >= m.Shards {
			return nil, fmt.Errorf("worker: shard %d out of range 0..%d", s, m.Shards-1)
		}
	}
	w := &Worker{
		st: g, guard: g, cfg: cfg, clock: c, local: cfg.Local, manifest: m, rand: src,
		log:        cfg.Logger.WithGroup("worker").With("worker_id", cfg.ID),
		handlers:   make(map[string]Handler),
		scans:      make(map[int]*shards.Scan),
		prefetched: make(map[int]prefetch),
		unhandled:  make(map[string]string),
		held:       make(map[string]heldTask),
		unsure:     make(map[string]unsure),
		blocked:    make(map[*pool]int),
		freed:      make(chan struct{}, 1),
		trace:      tracing.New(cfg.TracerProvider, nil),
	}
	// The pause object is read before the first poll (and then every
	// PauseCheckInterval): a worker started while its types are paused
	// claims none of them.
	w.pauses = &pause.Watch{St: g, Local: cfg.Local, Interval: cfg.PauseCheckInterval, Log: w.log}
	w.pauses.Refresh(ctx)
	s := w.pauseView()
	w.pauseState.Store(&s)
	w.newPools()
	w.newLimiters()
	w.pointerShard.Store(-1)
	w.view.Store(&memberView{})
	w.fleet.started, w.fleet.slot = cfg.Local.Now(), -1
	w.stopped, w.stopCancel = context.WithCancel(context.Background())
	w.logEvent = events.Log(w.log)
	if m.Direct() {
		if err := w.openInbox(ctx); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// ID returns the worker's id.
// MaxResultBytes is the largest result a handler of this worker may
// return (Config.MaxResultBytes, its default filled in).
func (w *Worker) MaxResultBytes() int { return w.cfg.MaxResultBytes }

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
		s.canceled.Load(), s.leaseLost.Load(), s.rejected.Load(), s.released.Load(), s.corrupt.Load(), s.panics.Load(),
		s.refused.Load(), s.dropped.Load(), s.requeued.Load(), s.renewed.Load(), s.renewFailed.Load()}
}

// emit publishes e: it stamps the time, source and origin, gives an event
// that names neither a task nor a shard the shard -1, logs it (each task
// outcome at info, the rest at debug), calls OnEvent and publishes it on
// Config.Events. A task event's Shard is its site's to set (taskEvent
// does): emit cannot tell shard 0 from none.
//
// The log is written here, not by a subscriber: as every other log line of
// the worker, synchronously, so it never drops an outcome and needs no
// goroutine of its own (a worker that is never Run, driven by tests or the
// simulator, would leave one behind).
func (w *Worker) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = w.now()
	}
	e.Source, e.Origin = events.SourceWorker, w.cfg.ID
	if e.Shard == 0 && e.TaskID == "" && e.Kind != events.ShardAcquired && e.Kind != events.ShardReleased {
		e.Shard = -1
	}
	w.logEvent(e)
	if w.cfg.OnEvent != nil {
		w.cfg.OnEvent(e)
	}
	w.cfg.Events.Publish(e)
}

// taskEvent is an event of kind about t, with its shard.
func taskEvent(kind Kind, t *task.Task, err error) Event {
	return Event{Kind: kind, TaskID: t.ID, Type: t.Type, Attempt: t.Attempt, Shard: t.Shard, Err: err}
}

// deps is the worker's view of the dependency edges. A task its pass-on
// makes pending (a released dependent, a slot's next task) is announced
// where a member polls, as a retry is, and wakes a sleeping fleet
// (announceReleased).
func (w *Worker) deps() deps.Env {
	return deps.Env{Jitter: rnd.Locked(rnd.Keyed(w.cfg.ID + "/deps")), Store: w.st, Local: w.local, Now: w.clock.Now, Counts: w.manifest.Counts(),
		Announce: w.announceReleased,
		Ended: func(t *task.Task) {
			w.emit(taskEvent(deps.EventOf(t), t, nil))
		}}
}

// passOn passes the end of t, just recorded, on to the tasks that depend
// on it and to the next task of its slot (internal/deps), before the run
// frees its handler. It stops when Run returns; the monitor's repair
// finishes what it leaves.
func (w *Worker) passOn(t *task.Task) {
	if err := w.deps().PassOn(w.stopped, t); err != nil {
		w.log.Warn("pass a task's end on to its dependents; the monitor will finish it", "task_id", t.ID, "err", err)
	}
}

// enterEnding reports whether Run has not stopped yet, and if so holds
// Run's return until exitEnding: a commit in flight then finishes (its
// requests canceled by stopped) before Run returns.
func (w *Worker) enterEnding() bool {
	w.stopMu.Lock()
	defer w.stopMu.Unlock()
	if w.stopped.Err() != nil {
		return false
	}
	w.ending.Add(1)
	return true
}

func (w *Worker) exitEnding() { w.ending.Done() }

// markStopped ends stopped and waits for the commits that entered before:
// their requests fail at once on the canceled context. A commit stuck
// anyway (a store that ignores its context) is waited for at most 10s
// of local time.
func (w *Worker) markStopped() {
	w.stopMu.Lock()
	w.stopCancel()
	w.stopMu.Unlock()
	done := make(chan struct{})
	go func() {
		w.ending.Wait()
		close(done)
	}()
	t := w.local.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
		w.log.Warn("a commit did not end within 10s of the worker stopping")
	}
}

// now reads the local clock: it paces work and never decides what is due.
func (w *Worker) now() time.Time { return w.local.Now() }

// Run polls and runs tasks until ctx ends, then leaves the fleet, stops
// claiming and finishes its handlers: it waits up to ShutdownGrace for
// running handlers, then cancels the rest and hands their tasks back to the
// queue. A handler that ignores its cancellation is waited for a little
// longer (up to 10s), then left running: once Run has returned the worker
// sends no request for it, not even a lease renewal, so its lease expires
// and the monitor re-dispatches the task.
func (w *Worker) Run(ctx context.Context) error {
	w.warnUnhandledLimits()
	timer := w.local.NewTimer(0)
	defer timer.Stop()

	// An error that will not heal ends Run as the end of ctx does
	// (finishHandlers then returns the error).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.guard.gone:
			w.stopping.Store(true)
			cancel()
		case <-w.leaseLost():
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		// A step that ends because ctx ended (its request failed with
		// it) may return no wait: the timer and ctx.Done are then both
		// ready, and select would pick one at random. The end of ctx
		// wins, so what happens next does not depend on that pick (a
		// seeded simulation replays).
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-timer.C():
			case <-w.freed:
				w.slotFreed()
			}
		}
		if ctx.Err() != nil {
			w.leave()
			if w.direct != nil {
				select {
				case <-w.direct.lost:
					// Another process may hold the name: stop at once.
					w.finishHandlersWithin(0)
					w.markStopped()
					return fmt.Errorf("worker: %w", w.direct.cause)
				default:
				}
			}
			err := w.finishHandlers()
			if w.direct != nil {
				w.closeInbox()
			}
			w.markStopped()
			return err
		}
		// When the timer and a freed slot are both ready, select picks one
		// at random: take the freed slot either way, so that what happens
		// next does not depend on that pick (a seeded simulation replays).
		select {
		case <-w.freed:
			w.slotFreed()
		default:
		}
		d := w.step(ctx)
		timer.Reset(min(d, w.tendPending(ctx)))
	}
}

// step does whatever is due — a fleet renewal or standby read, a poll of the
// member's own shards, slow sweeps of its drain shards, the doorbell; under
// direct dispatch the worker's lease, its inbox and the overflow — and
// returns how long to wait before the next step.
func (w *Worker) step(ctx context.Context) time.Duration {
	d := w.checkPauseIfClaiming(ctx)
	late, ended := w.endLateHeld(ctx)
	held, claimed := w.claimHeld(ctx)
	if claimed > 0 || ended > 0 {
		w.fleet.lastWork = w.now()
	}
	d = min(d, held, late)
	if w.direct == nil {
		return min(d, w.stepShards(ctx))
	}
	d = min(d, w.stepInbox(ctx))
	if w.stopping.Load() {
		return d
	}
	// The inbox's step (its listing, the overflow's scavenge) may have
	// taken long under slow requests: the pause object is read again, if
	// its interval has passed meanwhile, before the shards are polled
	// (sim seed 97: a step of five held requests, 107 s, then claims of a
	// type paused 100 s earlier).
	d = min(d, w.checkPauseIfClaiming(ctx))
	return min(d, w.stepShards(ctx))
}

// stepShards is step's share of the fleet and the shards.
func (w *Worker) stepShards(ctx context.Context) time.Duration {
	now := w.now()
	if w.releasedOwn.Swap(false) && w.pace.next.After(now) {
		w.pace.next = now // a task this worker's pass-on made pending waits in its own shard
	}
	if w.static() {
		if now.Before(w.pace.next) {
			return clock.Until(w.local, w.pace.next) // woken by a freed slot early
		}
		d := w.adapt(w.pollShards(ctx, w.cfg.OwnShards, false))
		w.pace.next = now.Add(d)
		return d
	}
	m := &w.fleet
	w.tendFleet(ctx, now)
	if !m.member {
		return max(m.standbyWait-clock.Since(w.local, m.synced), m.retry.until(now), 10*time.Millisecond)
	}
	iv, err := w.clock.Now(ctx)
	if err != nil || !w.certainlyMember(iv) {
		// Our entry may have lapsed: poll nothing until a renewal lands.
		return max(w.cfg.PollMin, time.Second)
	}
	// Until the renewal is due, or, if it is overdue, until its retry.
	wait := max(w.memberTTL()/3-clock.Since(w.local, m.renewed), m.retry.until(now))
	if d, asleep := w.atTheDoorbell(ctx, now, wait); asleep {
		return d
	} else if d > 0 {
		wait = min(wait, d) // its grace: the doorbell is read meanwhile
	}
	if !now.Before(w.pace.next) {
		// The fleet's step before may have taken minutes under an outage
		// (its renewal retried): the pause object is read again, if its
		// interval has passed meanwhile, before the member claims (sim
		// seed 593: a renewal cut off for 3m24s, then claims of a type
		// paused 2m23s earlier).
		w.checkPauseIfClaiming(ctx)
		w.pollOwn(ctx, now)
	}
	// Behind its shards, the member looks once a handOffEvery whatever
	// its polls' pace (with long handlers a full member polls once per
	// PollMax or per handler's end): it sizes its ask and hands shares
	// of its backlog to the members that are not busy.
	wait = min(wait, w.handOffOwn(ctx, now))
	wait = min(wait, clock.Until(w.local, w.pace.next))
	wait = min(wait, w.sweepDrainShards(ctx, now))
	if w.idle(ctx, now, iv) {
		return m.retry.until(now) // leaving: at once, or when the fleet's back-off ends
	}
	return max(wait, 0)
}

// pollOwn polls the member's own shards and notes whether it is saturated.
// Full, it still peeks: a saturated member must see its backlog.
func (w *Worker) pollOwn(ctx context.Context, now time.Time) {
	m := &w.fleet
	p := w.pollShards(ctx, m.assign.Own, true)
	if p.claimed > 0 {
		m.lastWork = now
		if m.asleep {
			w.wake(ctx, now)
		}
	}
	m.noteBehind(now, p.leftover || p.lists && p.capped, p.full)
	// Tasks refused for a full pool (its handlers busy while another
	// pool's are free) are no prefetch, but a backlog all the same.
	m.refusedSeen = p.refused
	m.backlogSeen = p.refused
	for _, s := range m.assign.Own {
		m.backlogSeen += len(w.prefetched[s].cands)
	}
	w.pace.next = now.Add(w.adapt(p))
}

// poll runs one discovery pass over every shard the worker may poll (its
// own, its drain shards, or its static list), after joining the fleet if
// the rules let it or re-reading it if already a member, and starts
// handlers for what it claims. It returns how many tasks it claimed. Run
// paces its passes itself (step); tests drive poll directly instead of Run.
func (w *Worker) poll(ctx context.Context) (int, error) {
	w.checkPause(ctx)
	w.endLateHeld(ctx)
	_, held := w.claimHeld(ctx)
	if w.static() {
		p := w.pollShards(ctx, w.cfg.OwnShards, false)
		return held + p.claimed, p.err
	}
	var err error
	if !w.fleet.member {
		err = w.syncFleet(ctx, w.now())
	} else {
		err = w.refreshView(ctx, w.now())
	}
	if err != nil {
		return 0, err
	}
	a := w.fleet.assign
	p := w.pollShards(ctx, append(append([]int(nil), a.Own...), a.Drain...), false)
	p.claimed += held
	if d := w.direct; d != nil {
		if !slices.Equal(d.rec.Types, w.types()) && !w.renewOwnLease(ctx) {
			return p.claimed, d.cause
		}
		n, _, err := w.claimFrom(ctx, d.scan, &d.held, &d.heldAt, &d.capped)
		p.claimed += n
		p.err = errors.Join(p.err, err)
	}
	return p.claimed, p.err
}
