package monitor

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// depRepair settles, every RepairAfter, the dependents of tasks whose end
// a crash kept from them (internal/deps.Repair), and checks that the slots'
// holders landed (deps.CheckHolders): one LIST of the ended markers, which
// backs off to SweepMax while it finds none.
type depRepair struct {
	st    s3store.Store
	local clock.Local
	log   *slog.Logger
	// repairAfter is the pace while there is work, sweepMax the ceiling of
	// the back-off.
	repairAfter, sweepMax time.Duration

	// next is when (local time) the repair lists the ended markers again,
	// every its back-off.
	next  time.Time
	every time.Duration
	// slotsSeen: the ETag at which each slot object's holder was last
	// found landed (deps.CheckHolders).
	slotsSeen map[string]string
	// known is the monitor's cache of what task objects said (shared with
	// the sweeps).
	known map[string]known
	// deps gives the monitor's view of the dependency edges (a fresh one
	// per use); publish publishes the monitor's events.
	deps    func() deps.Env
	publish func(events.Kind, *task.Task, error)
}

// step repairs if a repair is due. asleep says the fleet sleeps
// with no member, when nothing ends and the back-off may grow further.
func (r *depRepair) step(ctx context.Context, asleep bool, st *TickStats) error {
	now := r.local.Now()
	if r.next.IsZero() {
		// A crash's leftovers can wait a RepairAfter: the first tick
		// has the shards to sweep.
		r.next = now.Add(r.repairAfter)
	}
	if now.Before(r.next) {
		return nil
	}
	found, settled, err := r.deps().Repair(ctx)
	if r.slotsSeen == nil {
		r.slotsSeen = make(map[string]string)
	}
	if serr := r.deps().CheckHolders(ctx, r.slotsSeen); serr != nil {
		err = errors.Join(err, serr)
	}
	st.Settled += settled
	if settled > 0 {
		r.log.Info("settled the dependents of tasks whose end a crash kept from them", "tasks", settled)
	}
	switch {
	case found > 0 || err != nil:
		r.every = r.repairAfter
	case r.every == 0:
		r.every = r.repairAfter
	default:
		ceiling := max(r.sweepMax, r.repairAfter)
		if asleep {
			ceiling = max(ceiling, asleepSweepMax) // nothing ends while the fleet sleeps
		}
		r.every = min(2*r.every, ceiling)
	}
	r.next = now.Add(r.every)
	return err
}

// slotDue reports whether a task known by k has been blocked for its slot
// for a while without its slot found to know it.
func (r *depRepair) slotDue(k known, iv clock.Interval) bool {
	return k.slot && !k.slotChecked && iv.Earliest.After(k.updated.Add(deps.Grace))
}

// checkSlot makes sure the slot of the task at key, known by k and blocked
// for it a while, knows it (deps.CheckWaiting: a submit may have died
// between the slot and the task), and cancels it if a replace took it out.
func (r *depRepair) checkSlot(ctx context.Context, key string, k known, st *TickStats) error {
	v, err := taskio.Load(ctx, r.st, key)
	st.Loaded++
	if err != nil {
		return err
	}
	if v.ETag != k.etag {
		r.known[key] = remember(v)
		return nil
	}
	replaced, err := r.deps().CheckWaiting(ctx, v.Task)
	if err != nil {
		return err
	}
	if replaced {
		return r.cancelReplaced(ctx, v)
	}
	k.slotChecked = true
	r.known[key] = k
	return nil
}

// cancelReplaced cancels a task that a replace took out of its slot, whose
// own cancel was lost with its producer.
func (r *depRepair) cancelReplaced(ctx context.Context, v taskio.Versioned) error {
	t := v.Task
	if err := r.deps().CancelReplaced(ctx, deps.Member{ID: t.ID, Shard: t.Shard, Turn: t.SlotTurn}, "a later submit"); err != nil {
		return err
	}
	delete(r.known, t.Key())
	r.publish(events.SlotReplaced, t, nil)
	return nil
}
