package monitor

import (
	"context"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/s3store"
)

// inboxRecovery moves, under direct dispatch, the inbox entries of workers
// whose lease expired to the overflow (internal/direct.Recover), every
// RepairAfter.
type inboxRecovery struct {
	st     s3store.Store
	clock  *clock.Authoritative
	local  clock.Local
	log    *slog.Logger
	events *events.Bus
	origin string
	// every is RepairAfter; margin the lease margin; workerLease the
	// workers' lease duration (0 reads every lease).
	every, margin, workerLease time.Duration

	// next is when (local time) the next recovery is due.
	next time.Time
}

// step recovers the inboxes if a recovery is due: a LIST of workers/, and a
// GET of each lease not rewritten for WorkerLease. deleteHonoured is the
// manifest's.
func (r *inboxRecovery) step(ctx context.Context, deleteHonoured bool, st *TickStats) error {
	now := r.local.Now()
	if now.Before(r.next) {
		return nil
	}
	r.next = now.Add(r.every)
	iv, err := r.clock.Now(ctx)
	if err != nil {
		return err
	}
	rec, err := direct.Recover(ctx, r.st, iv, r.margin, r.workerLease, deleteHonoured)
	st.Recovered += rec.Moved
	if rec.Moved > 0 {
		r.log.Info("moved dead workers' inboxes to the overflow", "workers", rec.Dead, "entries", rec.Moved)
		for _, id := range rec.Dead {
			if r.events != nil {
				r.events.Publish(events.Event{Time: r.local.Now(), Source: events.SourceMonitor, Origin: r.origin,
					Kind: events.InboxRecovered, Shard: -1, Key: direct.Inbox(id)})
			}
		}
	}
	return err
}
