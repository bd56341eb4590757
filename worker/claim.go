package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/internal/tracing"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// maxClaimBatch caps how many candidates a batch claims at once
// (claimBatch): the lanes, held tasks and a worker with rate limits claim
// in batches (a batch's tokens are reserved together, with one write of
// the limit's counter). A claim is two requests in a row (the task's GET,
// then its conditional PUT: about 65 ms on S3); a batch of k costs about
// the time of one.
const maxClaimBatch = 8

// maxClaimsInFlight caps the claims the pipeline (claimPipelined) has
// under way at once, each one request at a time: with S3's tens of
// milliseconds per request, 64 keep a member's slots full at several
// hundred short tasks a second, while the free slots bound them below
// that (a member with 4 slots has at most 4 under way).
const maxClaimsInFlight = 64

// pipelineFor bounds how long the pipeline of one poll of a shard keeps
// listing ahead under a backlog: the scheduler's other duties (the fleet
// renewal every member_ttl/3, the pause object, pending tasks' leases)
// wait until the poll ends (never longer than poll_max either).
const pipelineFor = time.Second

// A claim of a batch of candidates runs in three steps (claimBatch): the
// loads, concurrently; then, in candidate order on the scheduler, the
// decisions (tryClaim: settle what needs no claim, forward what this
// worker cannot run, reserve a slot and draw a claim id for the rest);
// then the claims' conditional PUTs, concurrently; then, in candidate
// order again, their outcomes (applyClaim: dispatch, settle, prefetch
// bookkeeping). Only the store requests run concurrently: whatever draws
// from w.rand, reserves a slot or touches the scans runs on the
// scheduler, in candidate order, so a seeded run replays exactly. A batch
// of one is the sequential claim.
//
// The pipeline (claimPipelined) runs the same steps without the batches'
// barriers: a candidate's load starts as soon as a slot is free for it,
// and its claim's PUT as soon as its decision is made, so a slow request
// holds up only its own candidate's steps, not a batch's. The decisions
// and outcomes are still applied on the scheduler, each in candidate
// order, and in the order their requests were sent (a decision waits for
// its load, an outcome for its PUT): a fixed order, whatever order the
// responses come back in.

// attempt is one candidate's way through a claim.
type attempt struct {
	c       shards.Candidate
	key     string // the task's key (the pointer's, for a pointer without one)
	named   bool   // the candidate names its task's key (see Candidate.TaskKey)
	v       taskio.Versioned
	loadErr error

	// Set by tryClaim for a task it reserved a slot for and marked claimed
	// by this worker; the claim's PUT is still to be made.
	claiming bool
	// missed: the task's deadline has passed; tryClaim wrote it dead
	// instead (task.MissDeadline), and the claim's PUT writes that.
	missed bool
	// adopted: the task runs under a claim this worker wrote earlier
	// whose outcome it did not know (see unsure); the claim is dispatched
	// without a PUT.
	adopted   bool
	h         Handler
	claimID   string
	pool      *pool
	adm       admission
	evicted   *run      // a pending run evicted for this one (DropOldest), to release
	limiter   *limiter  // the rate limit whose token the claim uses, if any
	unclaimed task.Task // the task as read, for a claim undone before its PUT (inWindow)
	// settledAt is tryClaim's verdict for a task it does not claim (see
	// applyClaim), or the claim's new ETag.
	settledAt string

	nv       taskio.Versioned // the claim's write
	claimErr error
	// parent is the span context the run's spans descend from (see
	// claim).
	parent trace.SpanContext

	// drop: the candidate is a ready pointer that is done with, to be
	// deleted (deleting is free, and the task object decides, not the
	// pointer).
	drop    bool
	dropErr error

	// The pipeline's (claimPipelined): found is when discovery first
	// listed the candidate; loaded is closed once the load has ended,
	// claimed (nil when no claim is sent) once the claim's PUT has.
	found   time.Time
	loaded  chan struct{}
	claimed chan struct{}
}

// settler is what a claim reports each candidate to: the shard scan that
// listed it, or the inbox or overflow scan (internal/direct).
type settler interface {
	Seen(c shards.Candidate, etag string)
	Failed(c shards.Candidate, now time.Time) bool
}

// settle marks the candidate handled at etag, and a pointer that is done
// with to be dropped.
func (a *attempt) settle(s settler, etag string, done bool) {
	s.Seen(a.c, etag)
	a.drop = a.c.Pointer && done
}

// nextBatch returns how many of cands, up to k, go in one batch: it stops
// before a candidate whose task is already in the batch (a task's key and
// a ready pointer to it may come in one listing), which must see the
// outcome of the first claim, as a sequential claim would.
func nextBatch(cands []shards.Candidate, k int) int {
	n := 0
	for n < len(cands) && n < k {
		for _, c := range cands[:n] {
			if c.ID == cands[n].ID {
				return n
			}
		}
		n++
	}
	return n
}

// concurrently runs fn(0), …, fn(n-1) concurrently and waits for them; a
// single call runs on the caller's goroutine.
func concurrently(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

// load reads the task a candidate stands for, trying each of the shard
// counts counts for a pointer that does not name its task's key. It only
// reads the store, so loads run concurrently.
func (w *Worker) load(ctx context.Context, a *attempt, counts []int) {
	if a.named {
		a.v, a.loadErr = taskio.Load(ctx, w.st, a.key)
		return
	}
	a.v, a.loadErr = taskio.LoadID(ctx, w.st, a.c.ID, counts)
}

// claimBatch claims the candidates of batch, which are no more than the
// free slots, and reports how many it claimed.
func (w *Worker) claimBatch(ctx context.Context, s settler, batch []shards.Candidate, iv clock.Interval, seen map[string]time.Time) (claimed int) {
	if !w.ownLeaseHeld(ctx) {
		// Under direct dispatch, a worker without its own lease claims
		// nothing (the candidates stay unsettled, for the next listing).
		return 0
	}
	if batch = w.skipRefused(batch, iv); len(batch) == 0 {
		return 0
	}
	as := make([]attempt, len(batch))
	var counts []int
	for i, c := range batch {
		a := &as[i]
		a.c = c
		if a.key, a.named = c.TaskKey(); !a.named {
			// A pointer from before pointers named their task's shard.
			a.key = c.Key
			counts = w.manifest.Counts()
		}
	}
	concurrently(len(as), func(i int) { w.load(ctx, &as[i], counts) })
	w.reserveFor(ctx, as, iv)
	var claiming []*attempt
	for i := range as {
		if w.tryClaim(ctx, s, &as[i], iv) {
			claiming = append(claiming, &as[i])
		}
	}
	if len(claiming) > 0 {
		// A claim that landed with its response lost (the store's retry
		// then met it as a 412, or any error after the write) is
		// recognised by taskio.Update, which reads the object back: it is
		// ours to run. A pending task evicted for a claim (DropOldest) is
		// released first, in candidate order.
		for _, a := range claiming {
			if a.evicted != nil {
				w.drop(ctx, a.evicted)
			}
		}
		claiming = w.inWindow(ctx, s, claiming)
		concurrently(len(claiming), func(i int) {
			a := claiming[i]
			a.nv, a.claimErr = w.claim(ctx, a)
		})
	}
	var drops []*attempt
	var lanes []string
	for i := range as {
		a := &as[i]
		if w.applyClaim(ctx, s, a, iv, seen[a.c.ID]) {
			claimed++
			if t := a.v.Task; t.Priority == task.PriorityHigh && t.Attempt == 1 && !a.c.Pointer && w.direct == nil {
				// Its first claim, found in a window: the lane entry its
				// producer may have written (lanes.go) has done its job.
				lanes = append(lanes, shards.LaneKey(t.Shard, t.ID))
			}
		}
		if a.drop {
			drops = append(drops, a)
		}
	}
	concurrently(len(drops)+len(lanes), func(i int) {
		if i >= len(drops) {
			// Deleting is free, and a missing entry is no error; one left
			// by a failure is deleted by the next busy listing of the lane.
			_ = w.st.Delete(ctx, lanes[i-len(drops)], s3store.DeleteOptions{})
			return
		}
		a := drops[i]
		a.dropErr = w.st.Delete(ctx, a.c.Key, s3store.DeleteOptions{})
	})
	for _, a := range drops {
		if a.dropErr != nil {
			// A ready pointer stays for the monitor; an inbox or overflow
			// entry is listed again (its scan remembers no handled entry)
			// and deleted then.
			w.log.Warn("delete a pointer that has done its job", "key", a.c.Key, "err", a.dropErr)
		}
	}
	return claimed
}

// claimRun is what claimPipelined claims.
type claimRun struct {
	s     settler
	iv    clock.Interval
	shard int                // the scan's shard, for Hooks.OnAttempt; -1 for none
	cands []shards.Candidate // in the order to attempt them
	// found, if set, is when discovery first listed a task, by id.
	found func(id string) time.Time
	// send and take, if set, list ahead under a backlog (see
	// claimPipelined). send sends the next listing's first LIST (nil: it
	// could not). take, once that LIST has answered, returns the
	// listing's candidates less those in busy (the keys under way), the
	// clock's reading it was sent at (the decisions from then on use it),
	// and whether it too was cut short (more may be due); the listing
	// asks for held more than a listing's worth: the keys under way and
	// the candidates not attempted yet, which it returns again.
	send func() *shards.Ahead
	take func(a *shards.Ahead, busy map[string]bool, held int) ([]shards.Candidate, clock.Interval, bool)
}

// claimPipelined claims the candidates of r in order, with up to
// min(free slots, maxClaimsInFlight) of them under way at once (see the
// pipeline above). It returns how many it claimed and the candidates it
// did not attempt, for lack of room. Not for a worker with rate limits
// (claimBatch reserves their tokens).
//
// Under a backlog (r.send), for at most pipelineFor, it lists ahead: once
// no more candidates are left than half the claims under way, the next
// listing's LIST is sent, and taken, in its turn among the steps, when it
// has answered; its candidates, less those under way, replace what is
// left (the listing returns those too, as their keys are not settled
// yet). The claims go on meanwhile, and each listing still brings a full
// set of slots' worth: as many LISTs per task as a listing made after
// the last claim.
func (w *Worker) claimPipelined(ctx context.Context, r claimRun) (claimed int, rest []shards.Candidate) {
	if !w.ownLeaseHeld(ctx) {
		// Under direct dispatch, a worker without its own lease claims
		// nothing (the candidates stay unsettled, for the next listing).
		return 0, r.cands
	}
	// step is one of an attempt's steps on the scheduler: its decision,
	// once its load has ended, or its outcome, once its claim's has; or
	// the listing ahead, once its LIST has answered.
	type step struct {
		a       *attempt
		outcome bool
		list    *shards.Ahead
	}
	var (
		steps     []step              // in the order their requests were sent
		busy      = map[string]bool{} // the keys under way
		ids       = map[string]int{}  // their tasks' ids
		undecided int                 // loads whose decision is still to come: each may take a slot
		deletes   sync.WaitGroup
		drops     []*attempt
		counts    []int
		began     = w.now()
		// launched: a candidate of the last listing (or of r.cands) is
		// under way. A listing whose candidates all wait for a full pool
		// (or are under way already) is not followed by another.
		launched bool
		listing  bool // a listing ahead is under way
	)
	cands := r.cands
	send := r.send
	// freed: the pipeline took a wake-up of Run's (a slot freed), which
	// Run gets back when the pipeline ends.
	freed := false
	open := func() bool {
		return len(busy) < maxClaimsInFlight && w.free() > undecided && !w.owesOverflow() && !w.stopping.Load() && ctx.Err() == nil
	}
	// launch starts the loads of the next candidates while slots are free
	// for them.
	launch := func() {
		for len(cands) > 0 && open() {
			c := cands[0]
			if ids[c.ID] > 0 {
				// A task's key and a ready pointer to it: the second waits
				// for the outcome of the first's claim, as a sequential
				// claim would (one claim PUT, not a second that loses).
				return
			}
			cands = cands[1:]
			if w.waitsRefused(c, r.iv) {
				continue
			}
			if h := w.cfg.Hooks.OnAttempt; h != nil && r.shard >= 0 {
				h(r.shard, c)
			}
			a := &attempt{c: c, loaded: make(chan struct{})}
			if r.found != nil {
				a.found = r.found(c.ID)
			}
			if a.key, a.named = c.TaskKey(); !a.named {
				// A pointer from before pointers named their task's shard.
				a.key = c.Key
				if counts == nil {
					counts = w.manifest.Counts()
				}
			}
			go func(counts []int) {
				defer close(a.loaded)
				w.load(ctx, a, counts)
			}(counts)
			busy[c.Key] = true
			launched = true
			ids[c.ID]++
			undecided++
			steps = append(steps, step{a: a})
		}
	}
	// await waits for a step's request, starting the next candidates'
	// loads when a slot frees meanwhile. The request's end is looked at
	// first: a slot freed at the same time must not decide which comes
	// first (select picks among ready cases at random).
	await := func(done <-chan struct{}) {
		for {
			select {
			case <-done:
				return
			default:
			}
			select {
			case <-done:
				return
			case <-w.freed:
				freed = true
				launch()
			}
		}
	}
	for {
		launch()
		if send != nil && !listing && launched && len(cands) <= len(busy)/2 && (len(cands) > 0 || open()) &&
			!w.stopping.Load() && ctx.Err() == nil && w.now().Sub(began) < min(pipelineFor, w.cfg.PollMax) {
			// With no candidate left, only for a free slot: a listing
			// made while every slot is busy would be held until one
			// frees, and a task of higher priority submitted meanwhile
			// would wait behind it.
			if a := send(); a != nil {
				listing, launched = true, false
				steps = append(steps, step{list: a})
			} else {
				send = nil
			}
		}
		if len(steps) == 0 {
			break
		}
		st := steps[0]
		steps = steps[1:]
		if st.list != nil {
			await(st.list.Done())
			listing = false
			next, iv, capped := r.take(st.list, busy, len(busy)+len(cands))
			if !capped {
				send = nil
			}
			if next != nil {
				cands, r.iv = next, iv
			}
			continue
		}
		a := st.a
		if !st.outcome {
			await(a.loaded)
			undecided--
			if w.tryClaim(ctx, r.s, a, r.iv) {
				if a.evicted != nil {
					// A pending task evicted for this claim (DropOldest)
					// is released first.
					w.drop(ctx, a.evicted)
				}
				// A claim that landed with its response lost is
				// recognised by taskio.Update, which reads the object
				// back: it is ours to run.
				a.claimed = make(chan struct{})
				go func() {
					defer close(a.claimed)
					a.nv, a.claimErr = w.claim(ctx, a)
				}()
			}
			steps = append(steps, step{a: a, outcome: true})
			continue
		}
		if a.claimed != nil {
			await(a.claimed)
		}
		delete(busy, a.c.Key)
		ids[a.c.ID]--
		if w.applyClaim(ctx, r.s, a, r.iv, a.found) {
			claimed++
			if t := a.v.Task; t.Priority == task.PriorityHigh && t.Attempt == 1 && !a.c.Pointer && w.direct == nil {
				// Its first claim, found in a window: the lane entry its
				// producer may have written (lanes.go) has done its job.
				// Deleting is free, and a missing entry is no error; one
				// left by a failure is deleted by the next busy listing
				// of the lane.
				lane := shards.LaneKey(t.Shard, t.ID)
				deletes.Go(func() { _ = w.st.Delete(ctx, lane, s3store.DeleteOptions{}) })
			}
		}
		if a.drop {
			drops = append(drops, a)
			deletes.Go(func() { a.dropErr = w.st.Delete(ctx, a.c.Key, s3store.DeleteOptions{}) })
		}
	}
	deletes.Wait()
	for _, a := range drops {
		if a.dropErr != nil {
			// A ready pointer stays for the monitor; an inbox or overflow
			// entry is listed again and deleted then.
			w.log.Warn("delete a pointer that has done its job", "key", a.c.Key, "err", a.dropErr)
		}
	}
	if freed {
		w.roomFreed()
	}
	return claimed, cands
}

// tryClaim decides what to do with a loaded candidate: it settles one that
// could not be read for good, and it gets a claim ready for a task that is
// pending, due and of a handled type: a slot reserved, a claim id drawn,
// the task marked claimed. It reports whether the claim's PUT is to be
// made. Runs on the scheduler, in candidate order.
func (w *Worker) tryClaim(ctx context.Context, s settler, a *attempt, iv clock.Interval) bool {
	c, v := a.c, a.v
	if a.loadErr != nil {
		switch {
		case w.reportLoad(a.key, a.loadErr):
			// A pointer to a task that may lie below the monitor's floor
			// may be a write-ahead: its task's PUT may still land (a
			// delayed request). It stays for the monitor, which decides
			// after PointerGrace (shards.MayLieBelowFloor).
			gone := c.Inbox || !(c.Pointer && errors.Is(a.loadErr, s3store.ErrNotFound) && shards.MayLieBelowFloor(c.ID, iv.Latest))
			a.settle(s, c.ETag, gone)
		case s.Failed(c, iv.Latest):
			// Unreadable again and again (a 403 on this one object):
			// skipped at its ETag rather than pinning the shard.
			w.stats.corrupt.Add(1)
			w.log.Error("skipping an object whose reads keep failing", "key", c.Key, "failures", shards.MaxReadFailures, "err", a.loadErr)
			w.emit(Event{Kind: "corrupt", TaskID: c.ID, Shard: -1, Key: c.Key, Err: a.loadErr})
		}
		return false
	}
	t := v.Task
	if u, ok := w.unsure[t.ID]; ok {
		// The task read since a claim of ours whose outcome was unknown:
		// what it holds now says how that went.
		delete(w.unsure, t.ID)
		if t.Status == task.Running && t.Claim != nil && t.Claim.ID == u.claimID && t.Claim.Worker == w.cfg.ID {
			return w.adopt(ctx, a, iv)
		}
	}
	if t.Status != task.Pending {
		a.settledAt = v.ETag
		return false
	}
	if t.DeadlinePassed(iv.Earliest) && !w.stopping.Load() {
		// Never started after its deadline: written dead by the PUT its
		// claim would have made, whatever its type, due time or pause.
		return w.missDeadline(ctx, a, iv)
	}
	h := w.handler(t.Type)
	if h == nil {
		w.forwardOrKeep(ctx, t, iv)
		a.settledAt = v.ETag
		return false
	}
	if !dueNow(t, iv) || w.stopping.Load() {
		return false
	}
	if w.pausedType(t.Type) {
		// Not claimed: settled and held for its resume (pause.go).
		if w.hold(ctx, c, t, iv) {
			a.settledAt = v.ETag
		}
		return false
	}
	l := w.limits[t.Type]
	if l != nil && l.tokens == 0 {
		// Over its rate limit: settled and held for the next window
		// (ratelimit.go).
		if w.holdLimited(ctx, c, t, iv, l) {
			a.settledAt = v.ETag
		}
		return false
	}
	p := w.poolFor(t.Type)
	_, before := w.refused.get(c.Key, c.ETag)
	adm, evicted := p.admit(t.ID, !before)
	if adm == refused {
		w.refuse(p, c, t)
		return false
	}
	claimID := w.rand.Hex(12)
	if l != nil {
		a.unclaimed = *t
	}
	at, stamp := iv.Latest, iv.Mid()
	if l != nil {
		// The time the reservation was made at, in the tokens' window:
		// the task's history dates the start in the window it counts in.
		at, stamp = w.rateAt.Latest, w.rateAt.Mid()
	}
	// The lease's expiry counts from the latest the S3 clock can be; the
	// history records the best estimate (task.Stamp).
	t.Stamp(stamp)
	if err := t.ClaimBy(w.cfg.ID, claimID, at); err != nil {
		t.Stamp(time.Time{})
		if evicted != nil {
			p.requeue(evicted) // back where it was
		}
		p.unadmit(adm)
		return false
	}
	a.claiming, a.h, a.claimID, a.pool, a.adm, a.evicted = true, h, claimID, p, adm, evicted
	if l != nil {
		l.takeToken()
		a.limiter = l
	}
	return true
}

// unsure is a claim whose PUT failed in a way that may have come after it
// landed, and whose read-backs failed too (taskio.ErrUnknownOutcome): the
// worker may hold the task. It gives its slot back and leaves the
// candidate unsettled; the next read of the task (the candidate is listed
// again) finds it running under this claim, and adopt takes it up. Had
// the worker taken the claim as failed, that read would have settled the
// task as another's, and its lease would have expired unrun: with
// max_attempts = 1, dead with "lease expired".
type unsure struct {
	claimID   string
	expiresAt time.Time // the claim's lease, S3 time
}

// rememberUnsure notes a's claim, whose outcome is unknown, and forgets
// those whose lease has certainly expired by iv unseen (their tasks went
// another way: the monitor expires such a lease).
func (w *Worker) rememberUnsure(a *attempt, iv clock.Interval) {
	for id, u := range w.unsure {
		if lease.Expired(u.expiresAt, iv, w.cfg.LeaseMargin) {
			delete(w.unsure, id)
		}
	}
	t := a.v.Task
	w.unsure[t.ID] = unsure{claimID: a.claimID, expiresAt: t.Claim.ExpiresAt}
}

// adopt takes up a's task, found running under a claim of this worker's
// whose outcome was unknown: the claim landed. While its lease is
// certainly held and its pool has room, the claim is dispatched as if its
// PUT had just answered (no request: claim makes none for it). Otherwise
// the task is handed back, released (its attempt unused, one PUT): the
// next listing finds it pending, for this worker or another. Runs on the
// scheduler.
func (w *Worker) adopt(ctx context.Context, a *attempt, iv clock.Interval) bool {
	t := a.v.Task
	h := w.handler(t.Type)
	p := w.poolFor(t.Type)
	if h != nil && !w.stopping.Load() && lease.Held(t.Claim.ExpiresAt, iv, w.cfg.LeaseMargin) {
		if adm, _ := p.admit(t.ID, false); adm != refused {
			a.claiming, a.adopted, a.h, a.claimID, a.pool, a.adm = true, true, h, t.Claim.ID, p, adm
			return true
		}
	}
	w.log.Info("hand back a task claimed while its claim's outcome was unknown", "task_id", t.ID)
	r := w.newRun(a.v, t.Claim.ID, h, w.now())
	r.pool = p
	w.inflight.Add(1)
	w.running.Store(r.claimID, r)
	r.giveBack(ctx, PhasePending, "claimed with its response lost, and not run")
	return false
}

// missDeadline gets the write ready that ends a's task dead, its deadline
// passed (task.MissDeadline), in place of a claim. A task with dependents
// or a slot writes its ended marker first, as any end does (one more PUT,
// for those alone).
func (w *Worker) missDeadline(ctx context.Context, a *attempt, iv clock.Interval) bool {
	t := a.v.Task
	t.Stamp(iv.Mid())
	if err := t.MissDeadline(iv.Latest); err != nil {
		return false
	}
	if deps.NeedsPassOn(t) {
		if err := w.deps().Ending(ctx, t); err != nil {
			w.log.Warn("end a task past its deadline", "task_id", t.ID, "err", err)
			return false
		}
	}
	a.claiming, a.missed = true, true
	return true
}

// claim writes a's claim, a conditional PUT, in a span s3queue.claim: a
// child of the trace context the task carries from its submit, which is
// then the parent of the attempt's run and commit spans too; a task that
// carries none starts a trace here, and the claim's span is their parent.
func (w *Worker) claim(ctx context.Context, a *attempt) (taskio.Versioned, error) {
	t := a.v.Task
	pctx := w.trace.Extract(ctx, t.Trace)
	if a.adopted {
		// Claimed already: the write whose outcome was unknown landed.
		a.parent = trace.SpanContextFromContext(pctx)
		return a.v, nil
	}
	sctx, span := w.trace.Tracer.Start(pctx, tracing.SpanClaim, trace.WithSpanKind(trace.SpanKindConsumer))
	nv, err := taskio.Update(sctx, w.st, w.local, t, a.v.ETag)
	a.parent = trace.SpanContextFromContext(pctx)
	if !a.parent.IsValid() {
		a.parent = span.SpanContext()
	}
	if !span.IsRecording() {
		span.End()
		return nv, err
	}
	span.SetAttributes(append(taskAttrs(t, w.cfg.ID), tracing.Operation.String("claim"), tracing.OperationType.String("receive"))...)
	switch {
	case err == nil:
		span.SetAttributes(tracing.Outcome.String("claimed"))
	case s3store.LostRace(err):
		// Another worker (or a producer's cancel) wrote the task first:
		// an ordinary race, not an error.
		span.SetAttributes(tracing.Outcome.String("lost_race"))
		err = nil
	default:
		span.SetAttributes(tracing.Outcome.String("error"))
	}
	tracing.End(span, err)
	return nv, err
}

// taskAttrs are the attributes of t's spans in worker id.
func taskAttrs(t *task.Task, id string) []attribute.KeyValue {
	return []attribute.KeyValue{tracing.System, tracing.TaskID.String(t.ID), tracing.MessageID.String(t.ID),
		tracing.TaskType.String(t.Type), tracing.Destination.String(t.Type), tracing.Shard.Int(t.Shard),
		tracing.Attempt.Int(t.Attempt), tracing.WorkerID.String(id)}
}

// refuse leaves a task due for the full pool p in the bucket, for this
// worker's next poll or any other worker: counted as waiting (Block, and
// DropOldest, which refuses only a task older than every pending task it
// may evict: it was never claimed, so nothing was dropped), or refused
// (Reject) or dropped (DropLatest) with a hook and an event. The candidate
// c is remembered at its ETag (refusals.go): it is not read again while
// unchanged and p is full, and a refusal of the same version again is not
// reported again (logged at debug level).
func (w *Worker) refuse(p *pool, c shards.Candidate, t *task.Task) {
	w.blocked[p]++
	_, again := w.refused.get(c.Key, c.ETag)
	w.refused.put(c.Key, refusal{etag: c.ETag, pool: p, typ: t.Type, deadline: t.Deadline, shard: listedShard(c.Key)})
	if p.policy == Block || p.policy == DropOldest {
		return
	}
	if again {
		w.log.Debug("refused again for a full pool", "task_id", t.ID, "pool", p.name, "policy", string(p.policy))
		return
	}
	q := Queued{Pool: p.name, TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Phase: PhaseWaiting, Reason: "the pool's queue is full"}
	switch p.policy {
	case Reject:
		w.stats.refused.Add(1)
		if h := w.cfg.Hooks.OnReject; h != nil {
			h(q)
		}
		w.emit(Event{Kind: "rejected", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Pool: p.name, Phase: string(PhaseWaiting)})
	case DropLatest:
		w.stats.dropped.Add(1)
		if h := w.cfg.Hooks.OnDrop; h != nil {
			h(q)
		}
		w.emit(Event{Kind: "dropped", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Pool: p.name, Phase: string(PhaseWaiting)})
	}
}

// drop releases a pending run evicted by a newer task (DropOldest): its
// claim undone by CAS, the task due again at once, its attempt not used.
func (w *Worker) drop(ctx context.Context, r *run) {
	t := r.v.Task
	w.stats.dropped.Add(1)
	if h := w.cfg.Hooks.OnDrop; h != nil {
		h(Queued{Pool: r.pool.name, TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Phase: PhasePending, Reason: "evicted by a newer task"})
	}
	w.emit(Event{Kind: "dropped", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Pool: r.pool.name, Phase: string(PhasePending)})
	// Announced to a member that is not busy, if the fleet has one: it
	// finds the task at its next poll.
	if iv, err := w.clock.Now(ctx); err == nil {
		if targets, _ := w.handOffTargets(iv); len(targets) > 0 {
			r.target = targets[0].shard
		}
	}
	r.giveBack(ctx, PhasePending, "dropped from a full queue for a newer task")
}

// applyClaim acts on an attempt's outcome: a claimed task goes to dispatch,
// a failed claim gives its slot back, and the candidate is settled when it
// needs no second look. It reports whether the task was claimed. Runs on
// the scheduler, in candidate order.
func (w *Worker) applyClaim(ctx context.Context, s settler, a *attempt, iv clock.Interval, found time.Time) (ok bool) {
	if a.loadErr != nil {
		return false // tryClaim has dealt with it
	}
	c, v := a.c, a.v
	// settledAt is the ETag of the object's version that needs no second
	// look (the one the claim wrote, or one that is not pending or that
	// this worker cannot run), or "" when a later poll should look again.
	settledAt := a.settledAt
	if a.missed {
		if a.claimErr == nil {
			t := a.nv.Task
			w.stats.dead.Add(1)
			w.emit(Event{Kind: "dead", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Err: errors.New(t.LastError)})
			if deps.NeedsPassOn(t) {
				w.passOn(t)
			}
			settledAt = a.nv.ETag
		} else if !s3store.LostRace(a.claimErr) {
			w.log.Warn("end a task past its deadline", "task_id", v.Task.ID, "err", a.claimErr)
		}
	} else if a.claiming {
		if a.claimErr != nil {
			switch {
			case errors.Is(a.claimErr, taskio.ErrUnknownOutcome):
				// It may be ours: the candidate stays unsettled, and the
				// next read of the task tells (see unsure).
				w.log.Warn("claim; its outcome is unknown, the task is read again", "task_id", v.Task.ID, "err", a.claimErr)
				w.rememberUnsure(a, iv)
			case !s3store.LostRace(a.claimErr):
				w.log.Warn("claim", "task_id", v.Task.ID, "err", a.claimErr)
			}
			a.pool.unadmit(a.adm)
		} else {
			t := v.Task
			w.stats.claimed.Add(1)
			w.emit(Event{Kind: "claimed", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Pool: a.pool.name})
			w.dispatch(a.pool, a.adm, a.nv, a.claimID, a.h, found, a.parent)
			ok, settledAt = true, a.nv.ETag
		}
	}
	if settledAt == "" && !c.Pointer && v.Task.Status == task.Pending && !dueNow(v.Task, iv) {
		// A retried or snoozed task waits behind its own id: a pointer
		// at its due time brings it back, so its key needs no second
		// look (and must not hold the cursor until then).
		if idt, err := task.IDTime(v.Task.ID); err == nil && v.Task.AvailableAt.After(idt) {
			settledAt = v.ETag
		}
	}
	if ok || settledAt != "" || v.Task.Status != task.Pending {
		w.refused.forget(c.Key)
	}
	if settledAt != "" {
		// A pointer has done its job once its task is claimed or no
		// longer pending; one to a task we cannot run stays for a
		// worker that can.
		done := ok || v.Task.Status != task.Pending
		if c.Inbox {
			// An inbox or overflow entry has done its job once its task
			// is claimed, not pending, forwarded to a worker that runs
			// its type, or waiting for a ready pointer at its due time.
			done = true
		} else if c.Pointer && done && shards.MayLieBelowFloor(v.Task.ID, iv.Latest) {
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
		a.settle(s, settledAt, done)
	}
	return ok
}
