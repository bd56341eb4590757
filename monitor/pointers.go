package monitor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// pointerRepair keeps pending tasks reachable by workers: it announces a
// pending task again when it stays unclaimed RepairAfter past its
// availability (and each RepairAfter after), and deletes the ready pointers
// whose task is no longer pending, object by object as the sweeps list them.
type pointerRepair struct {
	st  s3store.Store
	log *slog.Logger
	// repairAfter is Config.RepairAfter.
	repairAfter time.Duration
	// known is the monitor's cache of what task objects said (shared with
	// the sweeps).
	known map[string]known
	// counts gives the manifest's shard counts, as the monitor knows them
	// now.
	counts func() []int
	// pauses is the queue's pause object, read at most every
	// pause.DefaultInterval and only when a repair is due: the repair
	// skips paused types (pausedType).
	pauseMu sync.Mutex
	pauses  *pause.Watch
	// announce, cover and the publishers are the monitor's: cover makes
	// the sweeps of a shard watch a live task's key.
	announce       func(context.Context, *task.Task) (time.Time, error)
	cover          func(shard int, key string, iv clock.Interval)
	publish        func(events.Kind, *task.Task, error)
	publishCorrupt func(key string, err error)
}

// pendingDue reports whether a task known by k is pending and due for a
// repair: due for a while, and not announced within RepairAfter.
func (r *pointerRepair) pendingDue(k known, iv clock.Interval) bool {
	return k.status == task.Pending && iv.After(k.available.Add(r.repairAfter)) &&
		(k.announced.IsZero() || iv.After(k.announced.Add(r.repairAfter)))
}

// repairPending announces the pending task at key, known by k, again.
func (r *pointerRepair) repairPending(ctx context.Context, key string, k known, iv clock.Interval, st *TickStats) error {
	// Due for a while and still pending: perhaps its producer crashed
	// before announcing it, or every scan passed it by. Announce it, and
	// again each RepairAfter while it stays pending. A paused type's
	// tasks are pending on purpose: they are not announced (nor read
	// again, once their type is known) until their type is resumed,
	// and then this repair finds what no worker announced itself.
	if k.typ != "" && r.pausedType(ctx, k.typ) {
		return nil
	}
	v, err := taskio.Load(ctx, r.st, key)
	st.Loaded++
	if err != nil {
		return err
	}
	if v.ETag != k.etag || v.Task.Status != task.Pending || r.pausedType(ctx, v.Task.Type) {
		r.known[key] = remember(v)
		return nil
	}
	at, err := r.announce(ctx, v.Task)
	if err != nil {
		return err
	}
	k.announced = at
	r.known[key] = k
	st.Repaired++
	r.publish(events.Repaired, v.Task, nil)
	return nil
}

// inspect deletes a ready pointer whose task is no longer pending
// (workers delete the ones they use; this catches the rest). A pointer to a
// live task is also how the monitor learns of a task that became live
// below its shard's floor (a requeue, a late PUT, a task completed from an
// old idempotency record): workers keep such pointers when they claim the
// task, and the floor is lowered under it before the pointer goes.
//
// A pointer to a pending task of a paused type (or of a paused queue) is
// left where it is until the resume, like the repair of pending tasks
// writes none for them: replacing it every RepairAfter cost a PUT and a
// DELETE each time, and put a new key ahead of every scan and sweep (seed
// 390163). Left in place, it still leads to the task after the resume,
// whatever the workers remembered; deleting it would leave that to the
// workers' memory and the repair. Once the task's type is known paused,
// the pointer is passed over without a read.
func (r *pointerRepair) inspect(ctx context.Context, o s3store.ObjectInfo, iv clock.Interval, st *TickStats) error {
	p, err := shards.ParsePointerKey(o.Key)
	if err != nil {
		st.Corrupt++
		r.log.Error("malformed ready pointer; skipped", "key", o.Key, "err", err)
		r.publishCorrupt(o.Key, err)
		return nil
	}
	if !iv.After(p.At.Add(max(r.repairAfter, shards.PointerGrace))) {
		return nil // workers have not had their chance yet
	}
	if p.Shard >= 0 {
		// Last read pending, of a paused type: nothing to do until the
		// resume. (A task that has changed since is read again once its
		// shard's sweep lists the change; the cover keeps it listed.)
		key := task.Key(p.Shard, p.ID)
		if k, ok := r.known[key]; ok && k.loaded && k.status == task.Pending && k.typ != "" && r.pausedType(ctx, k.typ) {
			r.cover(p.Shard, key, iv)
			return nil
		}
	}
	// Decide on the task object itself: a cached view may be from before
	// the task went back to pending.
	var v taskio.Versioned
	if p.Shard >= 0 {
		v, err = taskio.Load(ctx, r.st, task.Key(p.Shard, p.ID))
	} else {
		// A pointer from before pointers named their task's shard.
		v, err = taskio.LoadID(ctx, r.st, p.ID, r.counts())
	}
	st.Loaded++
	switch {
	case errors.Is(err, s3store.ErrNotFound), errors.Is(err, task.ErrCorrupt):
	case err != nil:
		return err
	case v.Task.Status == task.Pending:
		// Still pending this long after its pointer's time: the pointer
		// was passed over (a scan read the task before the requeue that
		// wrote the pointer first had landed, and settled it). Announce
		// the task afresh; this pointer has done its part.
		r.cover(v.Task.Shard, v.Task.Key(), iv)
		if r.pausedType(ctx, v.Task.Type) {
			// Paused: left for the resume (see above), and its type
			// remembered so that the next look costs no read.
			if k, ok := r.known[v.Task.Key()]; !ok {
				r.known[v.Task.Key()] = remember(v)
			} else if k.etag == v.ETag && !k.loaded {
				r.known[v.Task.Key()] = remember(v)
			}
			return nil
		}
		if !v.Task.Due(iv.Earliest) {
			return nil
		}
		// One announcement per repair_after, whichever repair makes it:
		// the task's own (inspect) or one of its stale pointers'. A
		// pointer whose task was announced afresh within it is one too
		// many and goes. Without this a task that stays pending gained a
		// pointer each repair_after (the task's repair added one, and each
		// stale pointer was replaced by a fresh one): seed 127's backlog
		// of 18 held 150, and two tasks went unclaimed for 20 minutes.
		key := v.Task.Key()
		k, ok := r.known[key]
		if ok && k.etag == v.ETag && !k.announced.IsZero() && !iv.After(k.announced.Add(r.repairAfter)) {
			break
		}
		at, err := r.announce(ctx, v.Task)
		if err != nil {
			return err
		}
		if !ok || k.etag != v.ETag || !k.loaded {
			k = remember(v)
		}
		k.announced = at
		r.known[key] = k
		st.Repaired++
		r.publish(events.Repaired, v.Task, nil)
	case v.Task.Status == task.Running, v.Task.Status == task.Blocked:
		// Blocked: requeued to wait for its slot. Its grant's own
		// announcement may be lost; the sweeps then find it pending.
		r.cover(v.Task.Shard, v.Task.Key(), iv)
	}
	return r.st.Delete(ctx, o.Key, s3store.DeleteOptions{})
}

// pausedType reports whether the queue's pause object, read at most every
// pause.DefaultInterval, pauses typ.
func (r *pointerRepair) pausedType(ctx context.Context, typ string) bool {
	r.pauseMu.Lock()
	defer r.pauseMu.Unlock()
	r.pauses.Refresh(ctx)
	return r.pauses.State().Paused(typ)
}
