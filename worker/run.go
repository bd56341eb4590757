package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/backoff"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/internal/tracing"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// run is one claimed attempt: the handler, its lease renewals and the
// fenced commit of its outcome.
type run struct {
	w       *Worker
	v       taskio.Versioned // the task as last written by us, with its ETag
	claimID string
	handler Handler
	// ctx is the handler's context, made with the run; cancel ends it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	pool   *pool
	// found is the local time discovery found the task (listed it), claimed
	// when it was claimed, renewed when a pending run's lease was last
	// renewed.
	found, claimed, renewed time.Time
	// id and every (a third of the task's timeout: how often a pending
	// run's lease is renewed) do not change, so the scheduler reads them
	// while a loop may run it.
	id    string
	every time.Duration
	// looked: when (local time) a full drop-oldest pool last looked for
	// newer work to replace this pending run (see pool.roomLocked).
	looked time.Time
	// poll is the discovery pass (Worker.polls) that claimed the task: a
	// drop-oldest pool evicts it only in a later one (see pool.admit).
	poll uint64
	// release, when set, makes commit hand the task back (Release) with
	// this reason instead of recording an outcome.
	release string
	// phase is where the task was when it was handed back.
	phase Phase
	// target, when set (not -1), is the shard whose member is to find the
	// task handed back: an idle member's (see drop).
	target int
	// ran is how long the handler ran (by the local clock), set when it
	// returned: the Duration of the outcome's event.
	ran time.Duration
	// began is the local time the run was given a handler (startLocked),
	// in Unix nanoseconds, zero while it waits in its pool. Runs are in
	// Worker.running from dispatch on; runEstimate reads began from there,
	// concurrently.
	began atomic.Int64
	// parent is the span context the run and commit spans are children
	// of: the submit's, carried by the task, or the claim's (see claim).
	parent trace.SpanContext
	// missed: the task's deadline passed while it waited in its pool;
	// commit ends it dead unstarted (task.MissDeadline) as it hands it
	// back.
	missed bool
	// stoppedBy is what ended the handler's context, if its time did:
	// stoppedByTimeout or stoppedByDeadline (see execute).
	stoppedBy string
}

// What ended a handler's context, when its time did.
const (
	stoppedByTimeout  = "timeout"
	stoppedByDeadline = "deadline"
)

// announceShard is the shard of the pointer that announces the task back
// to pending.
func (r *run) announceShard() int {
	if r.target >= 0 {
		return r.target
	}
	return int(r.w.pointerShard.Load())
}

// start runs the task on the calling loop: its dispatch (the wait
// histogram, the hook, the started event), then execute.
func (r *run) start() {
	w, p := r.w, r.pool
	t := r.v.Task
	if r.lostBeforeStart() {
		return
	}
	if r.pastDeadline() {
		// Claimed in time, but its deadline passed while it waited in
		// the pool: it is not started. One write ends it dead.
		r.missed = true
		r.giveBack(w.stopped, PhasePending, "not started before its deadline")
		return
	}
	wait := w.now().Sub(r.found)
	p.mu.Lock()
	p.wait.observe(wait)
	p.mu.Unlock()
	if h := w.cfg.Hooks.OnDispatch; h != nil {
		h(Queued{Pool: p.name, TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Phase: PhasePending, Wait: wait})
	}
	w.emit(Event{Kind: "started", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Pool: p.name})
	r.execute()
}

// lostBeforeStart reports whether the run's lease is no longer certainly
// the worker's before its handler starts, and then forgets the run (an
// event lease_lost, phase pending). It waited in pending past the last
// moment its lease was certainly ours (a renewal that did not get
// through), or its claim was stamped late: another worker may run it now,
// so this one does not start it.
func (r *run) lostBeforeStart() bool {
	if r.untilLeaseLost() > 0 {
		return false
	}
	w, t := r.w, r.v.Task
	w.stats.leaseLost.Add(1)
	w.emit(Event{Kind: "lease_lost", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt, Pool: r.pool.name, Phase: string(PhasePending), Err: ErrLeaseLost})
	w.running.Delete(r.claimID)
	w.inflight.Done()
	return true
}

// giveBack hands a claimed task that never started back to the bucket:
// released (pending again, due at once, its attempt not used), or
// canceled if a cancel was requested meanwhile. One conditional PUT, and
// a ready pointer to bring it back before the scans.
func (r *run) giveBack(ctx context.Context, phase Phase, reason string) {
	defer func() {
		r.w.running.Delete(r.claimID)
		r.w.inflight.Done()
	}()
	r.release, r.phase = reason, phase
	r.commit(outcome{}, nil)
}

// pastDeadline reports whether the task's deadline has certainly passed
// by S3 time (the clock's earliest reading is after it). Only a task with
// a deadline reads the clock, which makes a request only when it has had
// no sample for a while.
func (r *run) pastDeadline() bool {
	t := r.v.Task
	if t.Deadline.IsZero() {
		return false
	}
	iv, err := r.w.clock.Now(r.w.stopped)
	return err == nil && t.DeadlinePassed(iv.Earliest)
}

// handlerDeadline is how long, by the local clock, the handler may run
// before its context ends: the task's timeout, or less if the task's
// deadline comes sooner (taken at the clock's latest reading, so that the
// context never outlives the deadline). by says which: stoppedByTimeout
// or stoppedByDeadline.
func (r *run) handlerDeadline() (d time.Duration, by string) {
	t := r.v.Task
	d, by = t.Timeout.D(), stoppedByTimeout
	if t.Deadline.IsZero() {
		return d, by
	}
	if iv, err := r.w.clock.Now(r.w.stopped); err == nil {
		if left := max(t.Deadline.Sub(iv.Latest), 0); left < d {
			d, by = left, stoppedByDeadline
		}
	}
	return d, by
}

// deadlineContext is a handler's context: it ends at the run's deadline
// (handlerDeadline), which the run's local clock times, so that a fake
// clock drives it in tests and the simulator; Deadline and Err say so as
// context.WithDeadline's would.
type deadlineContext struct {
	context.Context // canceled with cause context.DeadlineExceeded at the deadline
	at              time.Time
	// done is closed once the embedded context is. A channel of its own
	// hides the embedded cancelCtx from contexts derived from this one:
	// they then learn its end through Err, DeadlineExceeded at the
	// deadline, rather than the bare Canceled of the cancelCtx.
	done chan struct{}
}

func newDeadlineContext(ctx context.Context, at time.Time) *deadlineContext {
	c := &deadlineContext{Context: ctx, at: at, done: make(chan struct{})}
	context.AfterFunc(ctx, func() { close(c.done) })
	return c
}

// Deadline is the earlier of the run's deadline and the parent's.
func (c *deadlineContext) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.at) {
		return d, true
	}
	return c.at, true
}

func (c *deadlineContext) Done() <-chan struct{} { return c.done }

// Err is context.DeadlineExceeded once the deadline ended the context.
func (c *deadlineContext) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	if err := c.Context.Err(); err == nil || context.Cause(c.Context) != context.DeadlineExceeded {
		return err
	}
	return context.DeadlineExceeded
}

type outcome struct {
	result json.RawMessage
	err    error
}

func (r *run) execute() {
	w := r.w
	requeued := false
	defer func() {
		w.running.Delete(r.claimID)
		if !requeued {
			w.inflight.Done()
		}
	}()
	// Handlers outlive the poll that claimed them; their context ends by
	// lease loss, cancellation or shutdown, or at the attempt's timeout or
	// the task's deadline (below).
	hctx, cancel := r.ctx, r.cancel
	defer cancel(nil)
	w.running.Store(r.claimID, r)

	done := make(chan outcome, 1)
	crashed := false
	own := r.v.Task.Clone()
	began := w.now()
	// The handler's context ends at the task's timeout or deadline,
	// whichever comes first (the command handler is killed then too); the
	// lease is renewed all the same until the handler returns, so that a
	// handler that ignores its context is not run twice.
	dctx, dcancel := context.WithCancelCause(hctx)
	defer dcancel(nil)
	until, by := r.handlerDeadline()
	hdl := newDeadlineContext(dctx, began.Add(until))
	timesUp := w.local.NewTimer(until)
	defer timesUp.Stop()
	// returned takes the handler's outcome and notes how long it ran.
	returned := func(o outcome) outcome {
		r.ran = clock.Since(w.local, began)
		w.runTime.note(r.ran)
		return o
	}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				w.stats.panics.Add(1)
				// The stack goes to the log; the task records the panic
				// alone: goroutine ids and addresses would make its last
				// error differ from run to run, and a stack is kilobytes.
				w.log.Error("handler panicked", "task_id", r.v.Task.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				crashed = true
				done <- outcome{err: fmt.Errorf("handler panicked: %v", p)}
			}
		}()
		// The handler's context carries the run's span (traceRun): the
		// spans its code starts are the span's children.
		res, err := w.invoke(r.spanParent(hdl), own, r.handler)
		done <- outcome{res, err}
	}()

	renew := w.local.NewTimer(r.nextRenewal())
	defer renew.Stop()
	deadline := w.local.NewTimer(r.untilLeaseLost())
	defer deadline.Stop()
	timeUp := func() {
		if hctx.Err() == nil {
			r.stoppedBy = by
		}
		dcancel(context.DeadlineExceeded)
	}
	for {
		// A renewal that blocked lets the timers fire meanwhile: the
		// handler's time and the lease's deadline may both be ready when
		// it returns, and select picks among ready cases at random. The
		// handler's time goes first, so that the attempt's outcome (timed
		// out, not canceled by the lost lease) is the same at every run of
		// a seed (seed 12 after the fix of seed 390163).
		select {
		case <-timesUp.C():
			timeUp()
		default:
		}
		select {
		case <-w.stopped.Done():
			// Run has returned and this handler ignored its shutdown: it
			// runs on, but the worker sends nothing more for it. Its lease
			// expires and the monitor re-dispatches the task.
			renew.Stop()
			deadline.Stop()
			<-done
			return
		case o := <-done:
			o = returned(o)
			if (crashed || IsCrashed(o.err)) && w.cfg.CrashPolicy == CrashRequeue && context.Cause(hctx) == nil {
				switch r.requeueCrashed(o) {
				case crashRequeued:
					requeued = true // the inflight count passed to the next run
					return
				case crashReleased:
					return
				}
			}
			r.commit(o, context.Cause(hctx))
			return
		case <-renew.C():
			err := r.renew()
			if w.stopped.Err() != nil {
				// Run returned during the renewal (its requests failed on
				// the canceled context, or it paused between them): as
				// above, the worker sends nothing more for this handler.
				// Timing the next renewal reads the S3 clock, which may
				// ask the server (sim seed 520235: a clock request after
				// Run returned).
				renew.Stop()
				deadline.Stop()
				<-done
				return
			}
			switch {
			case errors.Is(err, ErrLeaseLost):
				r.lost(cancel)
				// The slot stays busy until the handler returns; its
				// outcome is still offered, and the fence rejects it if the
				// task moved on.
				r.commit(returned(<-done), ErrLeaseLost)
				return
			case errors.Is(err, ErrCanceled):
				cancel(ErrCanceled)
			case err != nil:
				w.log.Warn("renew lease", "task_id", r.v.Task.ID, "err", err)
			default:
				deadline.Reset(r.untilLeaseLost())
			}
			renew.Reset(r.nextRenewal())
		case <-timesUp.C():
			timeUp()
		case <-deadline.C():
			// No renewal got through in time: by S3 time another worker may
			// take the task over soon, so this one stops first.
			r.lost(cancel)
			r.commit(returned(<-done), ErrLeaseLost)
			return
		}
	}
}

// spanParent returns ctx with the span context of the run's spans, if any.
func (r *run) spanParent(ctx context.Context) context.Context {
	if !r.parent.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, r.parent)
}

// endRun ends a run's span with the handler's error: a snooze is not one.
func endRun(span trace.Span, err error) {
	var ra retryAfterError
	if errors.As(err, &ra) {
		span.SetAttributes(tracing.Outcome.String("snoozed"))
		span.AddEvent("retry after", trace.WithAttributes(attribute.String("s3queue.retry_after", ra.delay.String())))
		err = nil
	}
	tracing.End(span, err)
}

// untilLeaseLost is how long, by the local monotonic clock, the lease is
// certainly still ours: until its expiry less the margin, judged by the
// latest the S3 clock can be.
func (r *run) untilLeaseLost() time.Duration {
	iv, err := r.w.clock.Now(context.Background())
	if err != nil {
		// The server cannot be asked (a partition, an outage): the
		// samples the clock holds still bound its time, wider by the
		// drift since. Without any, the lease is not certainly ours. (A
		// third of the timeout, assumed here before, started a handler
		// 29 s after its lease had expired: sim seed 280.)
		var ok bool
		if iv, ok = r.w.clock.Held(); !ok {
			return 0
		}
	}
	d := r.v.Task.Claim.ExpiresAt.Add(-r.w.cfg.LeaseMargin).Sub(iv.Latest)
	if d < 0 {
		d = 0
	}
	return d
}

// nextRenewal is when to renew: every third of the lease, and in any case
// halfway to the moment the worker would give the lease up, so that short
// leases with wide margins are renewed in time.
func (r *run) nextRenewal() time.Duration {
	d := r.v.Task.Timeout.D() / 3
	if half := r.untilLeaseLost() / 2; half < d {
		d = half
	}
	return max(d, 50*time.Millisecond)
}

func (r *run) lost(cancel context.CancelCauseFunc) {
	w := r.w
	cancel(ErrLeaseLost)
	w.stats.leaseLost.Add(1)
	w.emit(Event{Kind: "lease_lost", TaskID: r.v.Task.ID, Shard: r.v.Task.Shard, Type: r.v.Task.Type, Attempt: r.v.Task.Attempt, Err: ErrLeaseLost})
}

// renew extends the lease. It returns ErrLeaseLost when the task is no longer
// running under this claim and ErrCanceled when cancellation was requested
// (the lease is still extended while the handler winds down).
func (r *run) renew() error {
	// A renewal in flight when Run returns is abandoned with it. The
	// timeout bounds a request on host time, as every context deadline
	// does; the lease itself is judged on S3 time.
	ctx, cancel := context.WithTimeout(r.w.stopped, r.v.Task.Timeout.D()/3)
	defer cancel()
	canceled := false
	err := r.update(ctx, func(t *task.Task, now time.Time) error {
		canceled = t.CancelRequested
		return t.Renew(r.claimID, now)
	})
	switch {
	case err == nil:
		r.w.stats.renewed.Add(1)
	case !errors.Is(err, ErrLeaseLost):
		r.w.stats.renewFailed.Add(1)
	}
	if err == nil && canceled {
		return ErrCanceled
	}
	return err
}

// update applies change to the task under this claim with If-Match,
// re-reading after a lost race (see s3store.CAS, with jitter from the
// claim's own source). A task no longer running under this claim is
// ErrLeaseLost: the change is dropped (invariant 3).
func (r *run) update(ctx context.Context, change func(*task.Task, time.Time) error) error {
	w := r.w
	cur := r.v
	var failed *task.Task // the last write, if it failed
	cas := s3store.CAS{Jitter: rnd.Keyed(r.claimID), Sleep: w.pause}
	// again decides on a request that failed (not a lost race): the store
	// already retried; one more round after a pause rides out a short
	// outage, and the re-read of the next round decides whether a write
	// landed after all.
	again := func(attempt int, id string, err error) (bool, error) {
		if attempt >= 3 || ctx.Err() != nil || errors.Is(err, s3store.ErrUnusable) {
			return false, err
		}
		w.log.Warn("update task; will retry", "task_id", id, "err", err)
		if w.pause(ctx, updatePause.Delay(attempt+1, nil)) != nil {
			return false, err
		}
		return true, err
	}
	err := cas.Retry(ctx, func(attempt int) (bool, error) {
		if failed != nil {
			// Someone else wrote the task (a cancel request, the monitor),
			// or our write failed: read it and decide again on what is
			// there now.
			v, err := taskio.Load(ctx, w.st, r.v.Task.Key())
			if errors.Is(err, s3store.ErrNotFound) {
				return false, ErrLeaseLost
			}
			if err != nil {
				// The re-read failed too: it is tried again like a
				// failed write. Giving up at once left an outcome that
				// was one GET away from landing to the lease's expiry
				// and the monitor (sim seed 510504: the commit's PUT
				// failed, its read-back said it had not landed, the
				// re-read half a second later failed, and the task
				// stayed running).
				return again(attempt, failed.ID, err)
			}
			if sameWrite(v.Task, failed) {
				// Our write landed; only its response was lost.
				r.v = v
				return false, nil
			}
			cur = v
		}
		iv, err := w.clock.Now(ctx)
		if err != nil {
			return false, err
		}
		t := cur.Task.Clone()
		// Decide by the latest the S3 clock can be: a lease then runs
		// its full length by everyone's reckoning, however uncertain the
		// clock (see untilLeaseLost and the monitor's takeover rule). The
		// history records the best estimate, as other writers do.
		t.Stamp(iv.Mid())
		if err := change(t, iv.Latest); err != nil {
			if errors.Is(err, task.ErrClaimMismatch) || errors.Is(err, task.ErrNotRunning) {
				return false, ErrLeaseLost
			}
			if errors.Is(err, errWriteAhead) {
				// A write that goes before the task's failed: nothing
				// of the task changed, and the lease is still ours, so
				// it is tried again like a failed write of the task.
				return again(attempt, t.ID, err)
			}
			return false, err
		}
		nv, err := taskio.Update(ctx, w.st, w.local, t, cur.ETag)
		if err == nil {
			r.v = nv
			return false, nil
		}
		failed = t
		if s3store.LostRace(err) || errors.Is(err, s3store.ErrNotFound) {
			return true, err
		}
		return again(attempt, t.ID, err)
	})
	if errors.Is(err, s3store.ErrContended) {
		return fmt.Errorf("update task %s: %w", r.v.Task.ID, err)
	}
	return err
}

// updatePause is update's pause after a failed request (not a lost race):
// 500ms, 1s, 2s, without jitter. (At most three: again gives up after the
// third attempt.)
var updatePause = backoff.Policy{Initial: 500 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}

// sameWrite reports whether got, read back, is the write want whose
// response was lost. Version and UpdatedAt alone do not tell: another
// writer's change of the same version may record the same time (two
// writers whose clocks agree, or whose estimates both fall before the
// task's last change: task.Stamp), so what the write changed is compared
// too.
func sameWrite(got, want *task.Task) bool {
	if got.Version != want.Version || !got.UpdatedAt.Equal(want.UpdatedAt) || got.Status != want.Status ||
		got.Attempt != want.Attempt || got.Snoozes != want.Snoozes || got.CancelRequested != want.CancelRequested ||
		!got.AvailableAt.Equal(want.AvailableAt) || got.LastError != want.LastError || len(got.History) != len(want.History) ||
		(got.Claim == nil) != (want.Claim == nil) {
		return false
	}
	if got.Claim != nil && (got.Claim.ID != want.Claim.ID || !got.Claim.ExpiresAt.Equal(want.Claim.ExpiresAt)) {
		return false
	}
	if n := len(got.History); n > 0 {
		a, b := got.History[n-1], want.History[n-1]
		return a.At.Equal(b.At) && a.From == b.From && a.To == b.To && a.Worker == b.Worker && a.Reason == b.Reason && a.Attempt == b.Attempt
	}
	return true
}

// commit records the handler's outcome, fenced on the claim.
func (r *run) commit(o outcome, cause error) {
	w := r.w
	t0 := r.v.Task
	if !w.enterEnding() {
		// Run has returned: the worker sends nothing more; the lease
		// expires and the monitor re-dispatches the task.
		w.log.Warn("handler returned after the worker stopped; its outcome is dropped", "task_id", t0.ID)
		return
	}
	defer w.exitEnding()
	// A commit still in flight when Run returns is abandoned with it:
	// nothing of the worker outlives Run, and the lease expires. (The
	// deadline bounds the requests on host time.)
	ctx, cancel := context.WithTimeout(w.stopped, time.Minute)
	defer cancel()
	var kind string
	ctx, span := w.trace.Tracer.Start(r.spanParent(ctx), tracing.SpanCommit, trace.WithSpanKind(trace.SpanKindConsumer))
	var spanErr error
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(append(taskAttrs(t0, w.cfg.ID), tracing.Operation.String("commit"), tracing.OperationType.String("settle"),
				tracing.Outcome.String(kind), tracing.Status.String(string(r.v.Task.Status)))...)
		}
		tracing.End(span, spanErr)
	}()
	var announced time.Time // local time of the write-ahead pointer, if any
	// A result larger than the inline limit is stored apart first, at a
	// key of this claim's own; the commit references it.
	var res json.RawMessage
	var resErr error
	var ref *task.ResultRef
	if r.release == "" && o.err == nil {
		res, resErr = task.NormaliseResult(o.result, w.cfg.MaxResultBytes)
		if resErr == nil && len(res) > w.cfg.ResultInlineMax {
			ref, resErr = r.storeResult(ctx, res)
		}
	}
	// The decision is task.Settle's, taken again on each re-read after a
	// lost race (with a source that draws the same); commit does the
	// requests around it and reports.
	out, ra := r.outcome(o, cause, res, ref, resErr)
	var snoozed error   // a snooze backed off: its error, naming the delay
	marked := int64(-1) // the version whose ended marker is written
	err := r.update(ctx, func(t *task.Task, now time.Time) error {
		s, err := t.Settle(out, now, rnd.Keyed(r.claimID))
		if err != nil {
			return err
		}
		kind = s.Kind
		if s.Backoff {
			ra.delay = s.Delay
			snoozed = ra
		}
		if deps.NeedsPassOn(t) && marked != t.Version {
			// Its dependents, or its slot's next task, are to learn its
			// end: the marker goes first, so that a crash after the
			// write leaves the monitor a trail (internal/deps). A write
			// tried again after a lost race carries another version,
			// and needs a marker of its own: the repair passes on only
			// the end its marker names.
			if err := w.deps().Ending(ctx, t); err != nil {
				return fmt.Errorf("%w: %w", errWriteAhead, err)
			}
			marked = t.Version
		}
		if t.Status != task.Pending || !shards.MayLieBelowFloor(t.ID, now) ||
			!announced.IsZero() && clock.Since(w.local, announced) < shards.PointerGrace/2 {
			return nil
		}
		// Back to pending with an id that may lie below the monitor's
		// floor: the pointer goes first (see shards.MayLieBelowFloor). If
		// it cannot be written, nothing changes and the lease expires.
		if err := shards.Announce(ctx, w.st, t, now, r.announceShard()); err != nil {
			return fmt.Errorf("%w: %w", errWriteAhead, err)
		}
		announced = w.now()
		return nil
	})
	if err != nil {
		kind, spanErr = "error", err
	}
	if ref != nil && (err != nil || r.v.Task.ResultRef == nil || r.v.Task.ResultRef.Key != ref.Key) {
		r.dropResult(ctx, ref, err)
	}
	if errors.Is(err, ErrLeaseLost) {
		// The fence refused the outcome: the task moved on after a lease
		// loss.
		kind, spanErr = "rejected", fmt.Errorf("outcome rejected: %w", err)
		w.stats.rejected.Add(1)
		w.emit(Event{Kind: "outcome_rejected", TaskID: t0.ID, Shard: t0.Shard, Type: t0.Type, Attempt: t0.Attempt, Err: ErrLeaseLost, Duration: r.ran})
		return
	}
	if err != nil {
		// The lease will expire and the monitor re-dispatches the task.
		w.log.Error("commit outcome", "task_id", t0.ID, "err", err)
		return
	}
	if h := w.cfg.Hooks.OnCancel; h != nil && kind == "canceled" {
		// A pending task handed back (a renewal found the request, a drop,
		// the shutdown) is canceled instead when a cancel was requested.
		q := Queued{Pool: r.pool.name, TaskID: t0.ID, Shard: t0.Shard, Type: t0.Type, Attempt: t0.Attempt, Phase: PhaseInFlight, Reason: "canceled while its handler ran"}
		if r.phase != "" {
			q.Phase, q.Reason = r.phase, "canceled before its handler started"
		}
		h(q)
	}
	w.countEnding(kind)
	phase := r.phase
	if kind == "canceled" && phase == "" {
		phase = PhaseInFlight // not handed back: its handler ran
	}
	outErr := o.err
	if snoozed != nil {
		outErr = snoozed
	}
	w.emit(Event{Kind: Kind(kind), TaskID: t0.ID, Shard: t0.Shard, Type: t0.Type, Attempt: t0.Attempt, Err: outErr, Pool: r.pool.name, Phase: string(phase), Duration: r.ran})
	if t := r.v.Task; deps.NeedsPassOn(t) {
		w.passOn(t)
	}
	if kind == "failed" {
		// The attempt failed and the task will run again.
		w.emit(Event{Kind: "retried", TaskID: t0.ID, Shard: t0.Shard, Type: t0.Type, Attempt: t0.Attempt, Err: o.err})
	}
	if r.v.Task.Status == task.Pending && (announced.IsZero() || clock.Since(w.local, announced) > shards.PointerGrace/2) {
		// Back behind the scan cursors: announce it.
		iv, _ := w.clock.Now(ctx)
		if err := shards.Announce(ctx, w.st, r.v.Task, iv.Latest, r.announceShard()); err != nil {
			w.log.Warn("announce retry", "task_id", t0.ID, "err", err)
		}
	}
}

// outcome is the handler's outcome o (its context ended by cause) as Settle
// takes it, with the result normalised (res, or ref when stored apart; resErr
// if either failed); ra is the handler's snooze request, if it made one.
func (r *run) outcome(o outcome, cause error, res json.RawMessage, ref *task.ResultRef, resErr error) (task.Outcome, retryAfterError) {
	out := task.Outcome{ClaimID: r.claimID, Attempt: r.v.Task.Attempt, Release: r.release, MissedDeadline: r.missed,
		ShutDown: errors.Is(cause, ErrShutdown), Err: o.err, Permanent: IsPermanent(o.err),
		TimedOut: r.stoppedBy == stoppedByTimeout, PastDeadline: r.stoppedBy == stoppedByDeadline,
		Result: res, ResultRef: ref}
	if errors.Is(resErr, errStoreResult) {
		out.StoreErr = resErr
	} else {
		out.ResultErr = resErr
	}
	var ra retryAfterError
	if errors.As(o.err, &ra) {
		out.Snooze = &task.Snooze{Delay: ra.delay, Backoff: ra.backoff}
		if ra.backoff {
			// What the history and the event say names the delay drawn.
			out.Snooze.Reason = func(d time.Duration) string { ra := ra; ra.delay = d; return ra.Error() }
		}
	}
	return out, ra
}

// countEnding counts a commit's outcome by its kind (task.Settlement).
func (w *Worker) countEnding(kind string) {
	switch kind {
	case "succeeded":
		w.stats.succeeded.Add(1)
	case "failed":
		w.stats.failed.Add(1)
	case "dead":
		w.stats.dead.Add(1)
	case "snoozed":
		w.stats.snoozed.Add(1)
	case "canceled":
		w.stats.canceled.Add(1)
	case "released":
		w.stats.released.Add(1)
	}
}

// errWriteAhead marks a failed request of a commit that must land before
// the task's write (the end's marker, a retry's pointer). The commit gave
// up at the first one, though the store's retries give up after a second
// or two of an outage and a failed write of the task itself is tried
// again: the task then waited for its lease to expire and ran a second
// time with no lease lost (the chaos suite's MinIO restart). Now update
// tries it again as it does a failed write.
var errWriteAhead = errors.New("write ahead of the task")

// errStoreResult: a result to be stored apart could not be written.
var errStoreResult = errors.New("store the result")

// storeResult writes res, a result over the inline limit, to this claim's
// result object (If-None-Match) and returns its reference. One PUT. A 412
// says the object exists: our own write, whose response was lost (no other
// attempt writes at this claim's key), which a GET confirms; a 409 (a
// concurrent write, not applied) is tried again, up to three times.
func (r *run) storeResult(ctx context.Context, res json.RawMessage) (*task.ResultRef, error) {
	t := r.v.Task
	key := task.ResultKey(t.Shard, t.ID, r.claimID)
	ref := task.RefFor(key, res)
	var err error
	for range 3 {
		_, err = r.w.st.Put(ctx, key, res, s3store.PutOptions{IfNoneMatch: true})
		if errors.Is(err, s3store.ErrPreconditionFailed) {
			var obj s3store.Object
			if obj, err = r.w.st.Get(ctx, key); err == nil {
				err = ref.Check(obj.Body)
			}
		}
		if !errors.Is(err, s3store.ErrConflict) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w of %d bytes at %s: %w", errStoreResult, len(res), key, err)
	}
	return &ref, nil
}

// dropResult deletes this claim's result object when the commit did not
// reference it: refused by the fence (the task moved on), or ended
// otherwise. Only the commit under this claim could reference it, so a
// refused one leaves it to nobody. A commit whose end is unknown (a
// request error: it may have landed) keeps it: the monitor's orphan rule
// decides later.
func (r *run) dropResult(ctx context.Context, ref *task.ResultRef, err error) {
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		return
	}
	if derr := r.w.st.Delete(ctx, ref.Key, s3store.DeleteOptions{}); derr != nil && !errors.Is(derr, s3store.ErrNotFound) {
		r.w.log.Warn("delete the result object of a refused commit", "task_id", r.v.Task.ID, "key", ref.Key, "err", derr)
	}
}

// crashOutcome is what requeueCrashed did with a crashed handler's task.
type crashOutcome int

const (
	// crashCommit: nothing; commit records the outcome.
	crashCommit crashOutcome = iota
	// crashRequeued: claimed again, and a run of its next attempt waits at
	// the front of its pool (the run's inflight count passed to it).
	crashRequeued
	// crashReleased: its type was paused; pending again, held for its
	// resume.
	crashReleased
)

// requeueCrashed handles a handler that panicked under CrashRequeue: in one
// conditional PUT the failed attempt is recorded and the task claimed again
// by this worker under a new claim (its attempt counted, no retry delay),
// and it goes back to the front of its pool's pending tasks, bypassing
// admission. A task whose attempts are used up, or that was canceled,
// takes its ordinary outcome instead (crashCommit, and commit records it).
//
// A task whose type is paused (docs/pause.md) is not claimed again: the
// same write records the failed attempt and leaves it pending, due at
// once, and the worker holds it for the resume as it holds a paused task
// its scan found (crashReleased). Otherwise a crashing task of a paused
// type would keep running, and burn its attempts, through the pause.
func (r *run) requeueCrashed(o outcome) crashOutcome {
	w := r.w
	if w.stopping.Load() || !w.enterEnding() {
		return crashCommit
	}
	defer w.exitEnding()
	ctx, cancel := context.WithTimeout(w.stopped, time.Minute)
	defer cancel()
	claimID := nextClaimID(r.claimID, r.v.Task.Attempt+1)
	t0 := r.v.Task
	// A rate-limited type is released as a paused one is: its next start
	// must take a token, which the scheduler's discovery reserves (the
	// held task is announced at the next read of the pause object, then
	// claimed under the limit).
	paused := w.pausedType(t0.Type) || w.rateLimited(t0.Type)
	var announced time.Time // local time of the write-ahead pointer, if any
	// The write commits the crashed attempt (and claims the next).
	ctx, span := w.trace.Tracer.Start(r.spanParent(ctx), tracing.SpanCommit, trace.WithSpanKind(trace.SpanKindConsumer))
	err := r.update(ctx, func(t *task.Task, now time.Time) error {
		if err := t.Fail(r.claimID, o.err.Error(), false, now, nil); err != nil {
			return err
		}
		if t.Status != task.Pending {
			return errNotRequeued
		}
		t.AvailableAt = t.UpdatedAt // due at once: when the failure was recorded
		if !paused {
			return t.ClaimBy(w.cfg.ID, claimID, now)
		}
		if !shards.MayLieBelowFloor(t.ID, now) ||
			!announced.IsZero() && clock.Since(w.local, announced) < shards.PointerGrace/2 {
			return nil
		}
		// Pending again with an id that may lie below the monitor's
		// floor: the pointer goes first, as in commit. (A pointer to a
		// paused task stays in place; the worker whose scan reads it
		// holds the task too.)
		if err := shards.Announce(ctx, w.st, t, now, r.announceShard()); err != nil {
			return fmt.Errorf("%w: %w", errWriteAhead, err)
		}
		announced = w.now()
		return nil
	})
	if span.IsRecording() {
		outcome := "requeued"
		switch {
		case err != nil:
			// commit records the outcome, in a span of its own.
			outcome = "not_requeued"
		case paused:
			outcome = "held"
		}
		span.SetAttributes(append(taskAttrs(t0, w.cfg.ID), tracing.Operation.String("commit"), tracing.OperationType.String("settle"),
			tracing.Outcome.String(outcome), tracing.Status.String(string(r.v.Task.Status)))...)
	}
	span.End()
	if err != nil {
		if !errors.Is(err, errNotRequeued) && !errors.Is(err, ErrLeaseLost) {
			w.log.Warn("requeue a crashed handler's task", "task_id", t0.ID, "err", err)
		}
		return crashCommit
	}
	w.stats.failed.Add(1)
	w.emit(Event{Kind: "failed", TaskID: t0.ID, Shard: t0.Shard, Type: t0.Type, Attempt: t0.Attempt, Err: o.err, Duration: r.ran})
	if paused {
		// The attempt failed and the task will run again, after the resume.
		w.emit(Event{Kind: "retried", TaskID: t0.ID, Shard: t0.Shard, Type: t0.Type, Attempt: t0.Attempt, Err: o.err})
		w.holdCrashed(r.v.Task)
		return crashReleased
	}
	w.stats.requeued.Add(1)
	w.emit(Event{Kind: "requeued", TaskID: t0.ID, Shard: t0.Shard, Type: t0.Type, Attempt: r.v.Task.Attempt, Phase: string(PhasePending)})
	next := w.newRun(r.v, claimID, r.handler, w.now())
	next.pool, next.parent = r.pool, r.parent
	w.running.Store(claimID, next)
	// The run's inflight count passes to next.
	if !r.pool.requeue(next) {
		// The worker began to shut down during the write: next goes back
		// to the bucket as the pending tasks did.
		next.giveBack(ctx, PhasePending, "worker shut down before it started")
	}
	return crashRequeued
}

// errNotRequeued: the crashed task's failure ended it (dead, canceled).
var errNotRequeued = errors.New("not requeued")

// nextClaimID derives the claim id of a crashed task's next attempt from
// its first: deterministic (no draw from the scheduler's source), unique
// per attempt.
func nextClaimID(claimID string, attempt int) string {
	base, _, _ := strings.Cut(claimID, ".")
	return fmt.Sprintf("%s.%d", base, attempt)
}
