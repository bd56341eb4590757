package monitor

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
)

// depRepair settles, every RepairAfter, the dependents of tasks whose end
// a crash kept from them (internal/deps.Repair), and checks that the slots'
// holders landed (deps.CheckHolders): one LIST of the ended markers, which
// backs off to SweepMax while it finds none.
type depRepair struct {
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
}

// step repairs if a repair is due. env gives the monitor's view of the
// dependency edges (a fresh one per use); asleep says the fleet sleeps
// with no member, when nothing ends and the back-off may grow further.
func (r *depRepair) step(ctx context.Context, env func() deps.Env, asleep bool, st *TickStats) error {
	now := r.local.Now()
	if r.next.IsZero() {
		// A crash's leftovers can wait a RepairAfter: the first tick
		// has the shards to sweep.
		r.next = now.Add(r.repairAfter)
	}
	if now.Before(r.next) {
		return nil
	}
	found, settled, err := env().Repair(ctx)
	if r.slotsSeen == nil {
		r.slotsSeen = make(map[string]string)
	}
	if serr := env().CheckHolders(ctx, r.slotsSeen); serr != nil {
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
