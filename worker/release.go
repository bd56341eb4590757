package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// knownFleet is the fleet object as the scheduler last read or wrote it,
// published for the runs' goroutines (announceReleased).
type knownFleet struct {
	fleet shards.Fleet
	etag  string
}

// setFleet records f, read or written at local time now with etag, as the
// member's view of the fleet, and publishes it.
func (w *Worker) setFleet(f shards.Fleet, etag string, now time.Time) {
	m := &w.fleet
	m.fleet, m.etag, m.synced = f, etag, now
	w.known.Store(&knownFleet{fleet: f, etag: etag})
}

// announceReleased writes the ready pointer of t, which this worker's
// pass-on of an end made pending (a dependent whose last parent succeeded,
// the next task of a slot), where a member polls, as a retry's: in the
// shard this worker announces its retries in if it runs t's type, else in
// a shard whose live member does, else in an active shard. It then rings
// the doorbell if the fleet sleeps (another member asleep while this one
// ran, or this one). The task's own shard may be a drain shard, swept only
// now and then, and not at all once the fleet sleeps. Requests: the
// pointer's PUT, and while the fleet sleeps the ring's conditional PUT.
func (w *Worker) announceReleased(ctx context.Context, t *task.Task) error {
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return err
	}
	if w.direct != nil && w.deliverReleased(ctx, t, iv) {
		return nil
	}
	k := w.known.Load()
	in := w.releaseShard(t, iv, k)
	if err := shards.Announce(ctx, w.st, t, iv.Latest, in); err != nil {
		return err
	}
	if in >= 0 && in == int(w.pointerShard.Load()) {
		// In a shard of ours: the next step polls it at once rather than
		// after the poll interval, which may have backed off to PollMax.
		w.releasedOwn.Store(true)
	}
	if k != nil && k.fleet.Asleep {
		w.ring(ctx, k, t.ID)
	}
	return nil
}

// deliverReleased routes t, released by this worker's pass-on under direct
// dispatch, to a live worker's inbox as a producer routes a new task
// (ringing that worker's doorbell if it sleeps), and reports false when no
// live worker runs t's type or the entry could not be written: t then
// takes the shared path, a ready pointer. The shards hand out pointers
// only, but a member lists them behind whatever its shard holds: pointers
// the monitor keeps until it lowers its floor, tasks refused and
// re-announced, hundreds after a pause is lifted (the simulator's seed
// 20660: a released child waited four minutes behind them). An inbox
// holds only what is routed to its worker, deleted once handled.
// Requests: the entry's PUT, and the doorbell's if its worker sleeps; the
// leases are read at most once per DiscoveryTTL (a LIST and a GET per
// lease), in a view of the releases' own.
func (w *Worker) deliverReleased(ctx context.Context, t *task.Task, iv clock.Interval) bool {
	d := w.direct
	select {
	case d.relTurn <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-d.relTurn }()
	to, ok, err := d.relDir.Pick(ctx, iv, t.Type, t.ID)
	if err != nil {
		w.log.Warn("read the worker leases", "err", err)
	}
	if !ok {
		return false
	}
	// The entry's bucket must not lie behind the worker's inbox cursor,
	// which trails now by ScanLag and a minute: a dependent submitted
	// long ago was due since.
	at := t.AvailableAt
	if at.Before(iv.Earliest) {
		at = iv.Earliest
	}
	ringErr, err := direct.Route(ctx, w.st, to, at, t.ID, t.Shard, func() string {
		return fmt.Sprintf("%08x", uint32(d.ringRand()*(1<<32)))
	})
	if err != nil {
		w.log.Warn("write the inbox entry of a released task; announcing it instead", "task_id", t.ID, "worker_id", to.Worker, "err", err)
		return false
	}
	if ringErr != nil {
		w.log.Warn("ring a worker's doorbell", "worker_id", to.Worker, "task_id", t.ID, "err", ringErr)
	}
	return true
}

// releaseShard is the shard announceReleased writes t's pointer in (-1:
// t's own shard, for a worker pinned to shards or one that has not read
// the fleet yet).
func (w *Worker) releaseShard(t *task.Task, iv clock.Interval, k *knownFleet) int {
	own := int(w.pointerShard.Load())
	if own >= 0 && w.handler(t.Type) != nil || k == nil || w.static() {
		return own
	}
	f := k.fleet
	n := f.ShardCount(w.manifest.Shards)
	if targets := f.ShardsFor(t.Type, iv, w.cfg.LeaseMargin, n); len(targets) > 0 {
		return targets[int(t.Version)%len(targets)]
	}
	if own >= 0 {
		return own // no live member runs its type: it waits, in a polled shard
	}
	return int(t.Version) % shards.Active(len(f.Live(iv, w.cfg.LeaseMargin)), n)
}

// ring clears the sleeping fleet's Asleep by CAS, as a producer's ring
// does: the sleeping member's next read of the doorbell wakes it (this
// worker's own scheduler too, if it is the one asleep).
func (w *Worker) ring(ctx context.Context, k *knownFleet, id string) {
	cas := w.fleetCAS()
	cas.Jitter = rnd.Locked(rnd.Keyed(w.cfg.ID + "/ring")) // not the scheduler's source
	f, etag, err := shards.UpdateFleet(ctx, w.st, cas, k.fleet, k.etag, func(f *shards.Fleet) bool {
		if !f.Asleep {
			return false // someone rang first, or the member woke
		}
		f.Asleep, f.Ring = false, f.Ring+1
		return true
	})
	if err != nil {
		w.log.Warn("ring the doorbell for a released task", "task_id", id, "err", err)
		return
	}
	// Later releases need not ring again; the scheduler's next read
	// publishes its own view.
	w.known.CompareAndSwap(k, &knownFleet{fleet: f, etag: etag})
}
