package monitor

import (
	"context"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// redispatcher moves running tasks whose lease expired by S3 time back to
// pending (or dead, with no attempts left) and announces them, object by
// object as the sweeps list them.
type redispatcher struct {
	st    s3store.Store
	clock *clock.Authoritative
	local clock.Local
	log   *slog.Logger
	// rand is the monitor's source (drawn from under its mu).
	rand *rnd.Source
	// margin: a lease is taken over only once S3 time is certainly past
	// its expiry plus this.
	margin time.Duration
	// known is the monitor's cache of what task objects said (shared with
	// the sweeps).
	known map[string]known
	// deps, announce and publish are the monitor's.
	deps     func() deps.Env
	announce func(context.Context, *task.Task) (time.Time, error)
	publish  func(events.Kind, *task.Task, error)
}

// due reports whether a task known running, by k, holds a lease expired
// at iv.
func (r *redispatcher) due(k known, iv clock.Interval) bool {
	return k.status == task.Running && lease.Expired(k.expires, iv, r.margin)
}

// redispatch re-reads the task and, if its lease is still expired, moves it
// back to pending (or dead) by CAS and announces it. The decision is made on
// the object, never on a cached or index view.
func (r *redispatcher) redispatch(ctx context.Context, key string, iv clock.Interval, st *TickStats) error {
	v, err := taskio.Load(ctx, r.st, key)
	st.Loaded++
	if err != nil {
		return err
	}
	t := v.Task
	if t.Status != task.Running || t.Claim == nil || !lease.Expired(t.Claim.ExpiresAt, iv, r.margin) {
		r.known[key] = remember(v)
		return nil
	}
	worker := t.Claim.Worker
	// Stamp with the time now, not the page's: inspecting a page can take a
	// while, and a pointer stamped in the past would land behind the scans.
	if iv, err = r.clock.Now(ctx); err != nil {
		return err
	}
	if err := t.Expire(iv.Mid(), r.rand.Float64); err != nil {
		return err
	}
	if deps.NeedsPassOn(t) {
		// Its dependents or its slot are to learn its end: the marker
		// first.
		if err := r.deps().Ending(ctx, t); err != nil {
			return err
		}
	}
	nv, err := taskio.Update(ctx, r.st, r.local, t, v.ETag)
	if s3store.LostRace(err) {
		// Renewed, finished or handled by another monitor meanwhile.
		delete(r.known, key)
		return nil
	}
	if err != nil {
		return err
	}
	r.known[key] = remember(nv)
	if t.Status == task.Dead {
		st.DeadLettered++
		r.log.Info("lease expired with no attempts left; dead-lettered", "task_id", t.ID, "worker", worker)
		r.publish(events.Dead, t, errLeaseExpired)
		if deps.NeedsPassOn(t) {
			if err := r.deps().PassOn(ctx, t); err != nil {
				r.log.Warn("pass a dead task's end on to its dependents; the next repair will finish it", "task_id", t.ID, "err", err)
			}
		}
		return nil
	}
	st.Redispatched++
	r.log.Info("lease expired; re-dispatched", "task_id", t.ID, "worker", worker, "attempt", t.Attempt)
	r.publish(events.Redispatched, t, errLeaseExpired)
	at, err := r.announce(ctx, t)
	if err != nil {
		return err
	}
	k := r.known[key]
	k.announced = at
	r.known[key] = k
	return nil
}
