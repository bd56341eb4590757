package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
)

// Direct dispatch (docs/direct-dispatch.md): the worker holds a lease of
// its own, producers route new tasks to its inbox, and it lists the inbox
// from a cursor, adaptively, sleeping at a doorbell of its own when idle.
// Everything else goes through the shared path as in the shared mode: the
// fleet's members list their shards, which under direct dispatch hand out
// ready pointers only (retries, releases, repairs, submits that found no
// live worker). Every few minutes it moves dead workers' inboxes to the
// overflow and claims from it. Claims are the same CAS on the task object
// in both modes (claim.go). Only the scheduler touches this state.

// ErrWorkerLeaseLost: the worker's own lease (direct dispatch) was taken over,
// deleted, or could not be renewed before it expired. Run stops at once,
// cancels its handlers, and returns an error wrapping it.
var ErrWorkerLeaseLost = errors.New("worker lease lost")

// ErrWorkerIDInUse: New was asked for a direct-dispatch worker whose id a
// live worker holds (its lease has not expired).
var ErrWorkerIDInUse = errors.New("is in use by a live worker")

// asleepStretch: while a direct-dispatch worker sleeps at its doorbell,
// its lease lasts, and is renewed, asleepStretch times less often, and so
// is its scavenge. Renewals are most of an idle direct fleet's bill; the
// price is a slower recovery when a sleeping worker dies (its inbox, empty
// when it fell asleep, holds only what producers routed to it since).
const asleepStretch = 3

// leaseEvery is how often the worker renews its lease, and leaseFor how
// long each renewal makes it last: longer while it sleeps.
func (w *Worker) leaseEvery() time.Duration { return w.stretch(w.cfg.LeaseRenewalInterval) }
func (w *Worker) leaseFor() time.Duration   { return w.stretch(w.cfg.LeaseDuration) }

func (w *Worker) stretch(d time.Duration) time.Duration {
	if w.direct.rec.Asleep {
		return asleepStretch * d
	}
	return d
}

// inbox is a direct-dispatch worker's state.
type inbox struct {
	lease *lease.Lease
	rec   direct.Record
	scan  *direct.Scan
	over  *direct.Scan
	lost  chan struct{} // closed when the lease is lost
	cause error

	renewed  time.Time     // local time of the last write of the lease
	retry    time.Time     // local time before which a failed renewal is not retried
	next     time.Time     // local time of the next inbox listing
	interval time.Duration // the current interval between listings
	capped   bool          // the last listing returned all it asked for
	held     []shards.Candidate
	heldAt   time.Time
	lastWork time.Time // local time the inbox last had work, or a handler ran

	scavenge time.Time // local time of the next overflow scavenge
	// owed: the last scavenge found no free slot, or the whole queue
	// paused, and listed no overflow; the first step with a slot free
	// (and the queue not paused) lists it, before the shards take the
	// slot (scavengeOverflow).
	owed bool

	// The hand-on of a full worker's backlog (handOnInbox): the workers'
	// leases as this one last read them, when it looks next, and the
	// entries its last look found waiting.
	dir     *direct.Directory
	look    time.Time
	waiting map[string]bool
	// The routing of released tasks (deliverReleased), from the runs'
	// goroutines: a view of the leases of its own (a Directory holds its
	// lock across its reads, and the scheduler must not wait for a run's,
	// nor a run on a mutex: the simulator's bubble could not tell it
	// blocked), taken in turn by relTurn (a channel: a durable wait), and
	// draws of its own (not the scheduler's source).
	relDir   *direct.Directory
	relTurn  chan struct{}
	ringRand func() float64

	// The doorbell: asleepAt is when the mark landed (local time), zero
	// while awake; bell is the doorbell's ETag then ("" for none).
	asleepAt, nextBell, nextSleepScan time.Time
	bell                              string
}

// openInbox acquires the worker's lease under direct dispatch: a live
// lease of the same id is refused, an expired one taken over (its inbox
// cursor resumed).
func (w *Worker) openInbox(ctx context.Context) error {
	host, _ := os.Hostname()
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return err
	}
	d := &inbox{lost: make(chan struct{})}
	d.rec = direct.Record{Worker: w.cfg.ID, Host: host, CreatedAt: iv.Latest.UTC(), Types: []string{}}
	// Each process holds the name under a holder of its own, so a second
	// process started with a live id is refused.
	d.lease = lease.New(w.st, w.clock, direct.LeaseKey(w.cfg.ID), w.cfg.ID+"#"+w.rand.Hex(6),
		lease.Config{TTL: w.cfg.LeaseDuration, Margin: w.cfg.LeaseMargin})
	d.lease.SetData(d.data())
	if err := d.lease.Acquire(ctx); err != nil {
		if errors.Is(err, lease.ErrHeld) {
			return fmt.Errorf("worker: worker id %q %w until %s (S3 time, its lease %s); pick another id, or wait for that worker to stop",
				w.cfg.ID, ErrWorkerIDInUse, d.lease.ExpiresAt().UTC().Format(time.RFC3339), direct.LeaseKey(w.cfg.ID))
		}
		return fmt.Errorf("worker: acquire the worker lease: %w", err)
	}
	cursor := ""
	if prev := d.lease.Previous(); prev != nil {
		if r, err := direct.DecodeRecord(prev); err == nil {
			cursor = r.Cursor
		}
	}
	var capped bool
	d.scan, capped = direct.NewScan(direct.Inbox(w.cfg.ID), cursor, iv.Latest, w.cfg.ScanLag+time.Minute, false)
	if capped {
		w.log.Warn("the inbox cursor is older than 24h: scanning from 24h ago; older entries are left to the monitor's repair", "cursor", cursor, "from", d.scan.Cursor())
	}
	d.over, _ = direct.NewScan(direct.OverflowPrefix, "", iv.Latest, 0, true)
	d.dir = &direct.Directory{St: w.st, Local: w.local, TTL: w.cfg.DiscoveryTTL, Margin: w.cfg.LeaseMargin,
		Selection: direct.RoundRobin, IntN: w.rand.IntN}
	relRand := rnd.Locked(rnd.Keyed(w.cfg.ID + "/release"))
	d.relDir = &direct.Directory{St: w.st, Local: w.local, TTL: w.cfg.DiscoveryTTL, Margin: w.cfg.LeaseMargin,
		Selection: direct.RoundRobin, IntN: func(n int) int { return int(relRand() * float64(n)) }}
	d.relTurn, d.ringRand = make(chan struct{}, 1), relRand
	now := w.now()
	d.renewed, d.lastWork, d.interval = now, now, w.cfg.PollMin
	d.scavenge = now.Add(w.cfg.OverflowScavengeInterval)
	w.direct = d
	return nil
}

// data is the lease's record as JSON.
func (d *inbox) data() json.RawMessage {
	b, _ := json.Marshal(d.rec)
	return b
}

// leaseLost is closed when the worker's own lease (direct dispatch) is
// lost; nil in the shared mode.
func (w *Worker) leaseLost() <-chan struct{} {
	if w.direct == nil {
		return nil
	}
	return w.direct.lost
}

// renewOwnLease writes the lease with the current record, and reports false
// once it is lost (closing lost).
func (w *Worker) renewOwnLease(ctx context.Context) bool {
	d := w.direct
	d.rec.Types = w.types()
	d.rec.Cursor = d.scan.Cursor()
	d.rec.Busy = w.free() == 0
	d.lease.SetData(d.data())
	err := d.lease.RenewFor(ctx, w.leaseFor())
	switch {
	case err == nil:
		d.renewed = w.now()
		return true
	case errors.Is(err, lease.ErrLost):
		// A 412 after a renewal whose response was lost: that write may
		// be the lease object still (Reclaim reads it).
		if rerr := d.lease.Reclaim(ctx); rerr == nil {
			d.renewed = w.now()
			return true
		}
	case d.lease.Valid(ctx):
		w.log.Warn("renew the worker lease", "err", err)
		d.retry = w.now().Add(time.Second)
		return true
	}
	w.loseLease(fmt.Errorf("%w: %v", ErrWorkerLeaseLost, err))
	return false
}

// ownLeaseHeld reports whether the worker may claim now: always in the
// shared mode; under direct dispatch only while its own lease is
// certainly held by S3 time (lease.Held, with lease_margin). A scheduler
// held up by slow requests (a scavenge whose listing and lease reads each
// took half a minute) can find its lease past that point with its next
// renewal not yet due in its step: it renews first (a takeover or a
// failed renewal loses the lease, and the worker stops), and claims only
// if the lease is held again. Requests while the lease is held: none (the
// clock's reading rides on the last response).
func (w *Worker) ownLeaseHeld(ctx context.Context) bool {
	d := w.direct
	if d == nil {
		return true
	}
	select {
	case <-d.lost:
		return false
	default:
	}
	if d.lease.Valid(ctx) {
		return true
	}
	return w.renewOwnLease(ctx) && d.lease.Valid(ctx)
}

// loseLease stops the worker at once: its handlers are canceled, and Run
// returns cause.
func (w *Worker) loseLease(cause error) {
	d := w.direct
	select {
	case <-d.lost:
		return
	default:
	}
	d.cause = cause
	w.log.Error("the worker lost its lease; it stops at once and cancels its handlers", "err", cause)
	w.emit(Event{Kind: events.WorkerLeaseLost, Shard: -1, Err: cause})
	w.stopping.Store(true)
	close(d.lost)
}

// stepInbox does whatever direct dispatch has due (a lease renewal, an
// inbox listing, a doorbell read, a scavenge) and returns how long until
// the next.
func (w *Worker) stepInbox(ctx context.Context) time.Duration {
	d := w.direct
	now := w.now()
	if !now.Before(d.renewed.Add(w.leaseEvery())) && !now.Before(d.retry) {
		if !w.renewOwnLease(ctx) {
			return time.Hour
		}
	}
	if w.stopping.Load() {
		return time.Second
	}
	if w.busy() {
		d.lastWork = now
	}
	if !slices.Equal(d.rec.Types, w.types()) && !now.Before(d.retry) {
		// Handlers registered since the last write: producers route by
		// the types the lease names.
		if !w.renewOwnLease(ctx) {
			return time.Hour
		}
	}
	if d.owed && now.Before(d.scavenge) {
		// A scavenge found no slot: the first one free lists the
		// overflow, ahead of the inbox and the shards.
		w.scavengeOverflow(ctx, now)
	}
	bell := !d.asleepAt.IsZero() && clock.Since(w.local, d.asleepAt) >= w.cfg.DiscoveryTTL+w.cfg.AwakeGrace
	switch {
	case bell:
		w.atInboxBell(ctx, now)
	case !now.Before(d.next):
		w.pollInbox(ctx, now)
	}
	if !now.Before(d.scavenge) {
		w.scavenge(ctx, now)
	}
	if w.free() == 0 && d.asleepAt.IsZero() {
		w.handOnInbox(ctx, now)
	} else {
		d.waiting = nil
	}
	// A failed renewal is retried at d.retry, not before: an overdue
	// renewal must not make the scheduler spin until then.
	renew := d.renewed.Add(w.leaseEvery())
	if renew.Before(d.retry) {
		renew = d.retry
	}
	wait := min(renew.Sub(now), d.scavenge.Sub(now))
	if d.waiting != nil {
		wait = min(wait, d.look.Sub(now))
	}
	if bell && !d.asleepAt.IsZero() {
		wait = min(wait, d.nextBell.Sub(now), d.nextSleepScan.Sub(now))
	} else {
		wait = min(wait, d.next.Sub(now))
	}
	return max(wait, 0)
}

// pollInbox lists the inbox (or claims what its last listing held) and
// paces the next listing: at once after a listing cut short, poll_min
// after one that found work, growing to poll_max while empty.
func (w *Worker) pollInbox(ctx context.Context, now time.Time) {
	d := w.direct
	claimed, listed, err := w.claimFrom(ctx, d.scan, &d.held, &d.heldAt, &d.capped)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			w.log.Warn("list the inbox", "err", err)
		}
		d.interval = w.grow(max(d.interval, w.cfg.PollMin))
	case claimed > 0 || listed > 0 && w.free() == 0:
		// Work, claimed or left for lack of a free slot. Entries listed
		// and not claimed with slots free are tasks not due yet (their
		// minute has begun), or taken by others: no reason to hurry.
		d.lastWork = now
		d.interval = w.cfg.PollMin
		if claimed > 0 && (d.capped || len(d.held) > 0) {
			d.interval = 0 // more is waiting: claim it as slots free
		}
		if !d.asleepAt.IsZero() {
			w.wakeInbox(ctx)
		}
	default:
		// From at least poll_min: after a poll that claimed with more held
		// (interval 0), the held candidates may all be unclaimable (taken
		// by others, or of a paused type), and growing 0 would list again
		// at once, for ever.
		d.interval = w.grow(max(d.interval, w.cfg.PollMin))
	}
	d.next = now.Add(d.interval)
	if w.free() == 0 {
		d.next = now.Add(w.cfg.PollMax) // a freed slot polls again (inboxSlotFreed)
	}
	if d.asleepAt.IsZero() && !w.busy() && now.Sub(d.lastWork) >= w.cfg.SleepAfter && err == nil && listed == 0 {
		w.sleepInbox(ctx, now)
	}
}

// inboxSlotFreed reacts to a handler that finished: claim what the last
// listing held, or list again now after a listing cut short, or else at
// the current pace.
func (w *Worker) inboxSlotFreed() {
	d := w.direct
	now := w.now()
	t := now.Add(d.interval)
	if d.capped || len(d.held) > 0 && now.Sub(d.heldAt) < w.cfg.PollMax {
		t = now
	}
	if d.asleepAt.IsZero() && t.Before(d.next) {
		d.next = t
	}
}

// claimFrom claims from an inbox or overflow scan: the candidates held
// from its last listing while fresh, else a new listing, as many as there
// are free slots; the rest are held. It reports how many it claimed and
// listed.
func (w *Worker) claimFrom(ctx context.Context, s *direct.Scan, held *[]shards.Candidate, heldAt *time.Time, capped *bool) (claimed, listed int, err error) {
	w.blocked = make(map[*pool]int)
	defer w.publishWaiting()
	if w.free() == 0 || w.pausedAll() {
		return 0, 0, nil
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return 0, 0, err
	}
	cands := *held
	if len(cands) == 0 || w.now().Sub(*heldAt) >= w.cfg.PollMax {
		want := max(w.free(), w.capacity(), int(w.cfg.PollBatch)) + 1
		if cands, err = s.Next(ctx, w.st, iv.Latest, want); err != nil {
			return 0, 0, err
		}
		*capped = len(cands) >= want
		*heldAt = w.now()
		listed = len(cands)
	}
	i := 0
	for i < len(cands) && w.free() > 0 {
		n := nextBatch(cands[i:], min(w.free(), maxClaimBatch))
		claimed += w.claimBatch(ctx, s, cands[i:i+n], iv, nil)
		i += n
	}
	*held = append((*held)[:0:0], cands[i:]...)
	return claimed, listed, nil
}

// handOnInbox: a worker whose every slot is taken does not list its inbox
// for work, so what producers routed to it waits until a slot frees, and
// behind a long task that can be long. Once every PollMax while it stays
// full, it lists its inbox; an entry that its previous look found waiting
// too is handed on to a live worker that is not busy and runs every type
// this one runs: a new entry in that worker's inbox (its doorbell rung if
// it sleeps), then this one's deleted. With no such worker, or while the
// backlog is short-lived, it costs a LIST per PollMax, and the monitor's
// repair announces a task that waits past repair_after. Producers route
// to workers that are not busy while there are any (the lease's record
// says which), so this is for work that arrived before the slots filled.
func (w *Worker) handOnInbox(ctx context.Context, now time.Time) {
	d := w.direct
	if w.pausedAll() {
		d.waiting = nil // nothing is handed on; stepInbox must not wait for a look
		return
	}
	if now.Before(d.look) {
		return
	}
	d.look = now.Add(w.cfg.PollMax)
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return
	}
	cands, err := d.scan.Next(ctx, w.st, iv.Latest, w.capacity()+maxClaimBatch)
	if err != nil {
		w.log.Warn("list the inbox to hand work on", "err", err)
		return
	}
	waiting := make(map[string]bool, len(cands))
	handed := 0
	for _, c := range cands {
		waiting[c.Key] = true
		if !d.waiting[c.Key] || handed >= maxClaimBatch {
			continue
		}
		to, ok, err := d.dir.Other(ctx, iv, w.cfg.ID, w.types())
		if err != nil {
			w.log.Warn("read the worker leases", "err", err)
		}
		if !ok {
			break
		}
		ringErr, err := direct.Route(ctx, w.st, to, c.Avail, c.ID, c.Shard, func() string { return w.rand.Hex(4) })
		if err != nil {
			w.log.Warn("hand an inbox entry on", "task_id", c.ID, "to", to.Worker, "err", err)
			break
		}
		if ringErr != nil {
			w.log.Warn("ring a worker's doorbell", "worker_id", to.Worker, "err", ringErr)
		}
		if err := w.st.Delete(ctx, c.Key, s3store.DeleteOptions{}); err != nil {
			// Both entries stand: the task's CAS decides who runs it.
			w.log.Warn("delete an inbox entry handed on", "key", c.Key, "err", err)
			continue
		}
		d.scan.Seen(c, c.ETag)
		delete(waiting, c.Key)
		handed++
	}
	d.waiting = waiting
	if handed > 0 {
		d.held = nil // what the last listing held may be gone
		w.log.Debug("handed inbox entries on", "tasks", handed)
	}
}

// sleepInbox marks the worker asleep in its lease, after reading its
// doorbell: producers that read the mark ring the bell after routing a
// task here. It keeps listing the inbox until every producer's view of
// the leases is newer than the mark (DiscoveryTTL, and AwakeGrace more),
// then reads the bell every BellPoll and lists the inbox every SleepScan.
func (w *Worker) sleepInbox(ctx context.Context, now time.Time) {
	d := w.direct
	bell, err := w.readBell(ctx)
	if err != nil {
		return
	}
	d.rec.Asleep = true
	if !w.renewOwnLease(ctx) {
		return
	}
	d.bell, d.asleepAt = bell, now
	d.nextBell, d.nextSleepScan = now, now.Add(w.cfg.SleepScan)
	d.interval = w.cfg.PollMax
	w.emit(Event{Kind: events.InboxAsleep, Shard: -1, Key: direct.BellKey(w.cfg.ID)})
}

// atInboxBell reads the doorbell every BellPoll, and lists the inbox every
// SleepScan; a ring, or work, wakes the worker.
func (w *Worker) atInboxBell(ctx context.Context, now time.Time) {
	d := w.direct
	if !now.Before(d.nextSleepScan) {
		d.nextSleepScan = now.Add(w.cfg.SleepScan)
		w.pollInbox(ctx, now) // wakes on work
		return
	}
	if now.Before(d.nextBell) {
		return
	}
	d.nextBell = now.Add(w.cfg.BellPoll)
	bell, err := w.readBell(ctx)
	if err != nil || bell == d.bell {
		return
	}
	w.wakeInbox(ctx)
	w.pollInbox(ctx, now)
}

// wakeInbox clears the asleep mark: listings go back to the adaptive pace.
func (w *Worker) wakeInbox(ctx context.Context) {
	d := w.direct
	d.asleepAt, d.rec.Asleep = time.Time{}, false
	d.lastWork, d.interval, d.next = w.now(), w.cfg.PollMin, w.now()
	w.renewOwnLease(ctx)
	w.emit(Event{Kind: events.InboxWoken, Shard: -1, Key: direct.BellKey(w.cfg.ID)})
}

// readBell returns the doorbell's ETag, "" when it has never been rung.
func (w *Worker) readBell(ctx context.Context) (string, error) {
	info, err := w.st.Head(ctx, direct.BellKey(w.cfg.ID))
	switch {
	case errors.Is(err, s3store.ErrNotFound):
		return "", nil
	case err != nil:
		w.log.Warn("read the doorbell", "err", err)
		return "", err
	}
	return info.ETag, nil
}

// scavenge moves the inboxes of dead workers to the overflow, then claims
// from the overflow what the free slots take. Scavengers race for the
// same entries; the task's CAS decides, and the losers' 412s cost nothing
// else.
func (w *Worker) scavenge(ctx context.Context, now time.Time) {
	d := w.direct
	d.scavenge = now.Add(w.stretch(w.cfg.OverflowScavengeInterval))
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return
	}
	rec, err := direct.Recover(ctx, w.st, iv, w.cfg.LeaseMargin, w.cfg.LeaseDuration, w.manifest.DeleteHonoured())
	if err != nil && ctx.Err() == nil {
		w.log.Warn("move dead workers' inboxes to the overflow", "err", err)
	}
	if rec.Moved > 0 {
		w.log.Info("moved dead workers' inboxes to the overflow", "workers", rec.Dead, "entries", rec.Moved)
		for _, id := range rec.Dead {
			w.emit(Event{Kind: events.InboxRecovered, Shard: -1, Key: direct.Inbox(id)})
		}
	}
	w.scavengeOverflow(ctx, now)
}

// owesOverflow reports whether a scavenge owes its overflow listing to
// the first slot that frees (scavengeOverflow): the shards' polls leave
// free slots to it until then. A slot can free between stepInbox and the
// shards' poll, or while the poll's claims are under way (a handler that
// ends at the very instant a poll starts: TestAFullWorkerStillScavengesTheOverflow
// failed so, about 1 run in 200); without this the shards took it, and
// the overflow waited for the next scavenge.
func (w *Worker) owesOverflow() bool {
	d := w.direct
	return d != nil && d.owed && w.now().Before(d.scavenge)
}

// scavengeOverflow claims from the overflow what the free slots take, or,
// with none free or the whole queue paused, owes the listing to the first
// step that has a slot (stepInbox does that before it lists the inbox, and
// before the shards are polled, so a freed slot goes to the overflow first). Without that, a worker kept full by
// its shards at every scavenge, as one is by the monitor's repair of the
// very tasks whose entries a pause left in the overflow, would never list
// it again: the entries of tasks run since stay for ever, and those still
// pending wait for the monitor's repair. It lists the overflow at most once
// per scavenge, as before: a LIST skipped is only delayed.
func (w *Worker) scavengeOverflow(ctx context.Context, now time.Time) {
	d := w.direct
	if w.free() == 0 || w.pausedAll() {
		d.owed = true
		return
	}
	d.owed = false
	var held []shards.Candidate
	var at time.Time
	var capped bool
	claimed, _, err := w.claimFrom(ctx, d.over, &held, &at, &capped)
	if err != nil && ctx.Err() == nil {
		w.log.Warn("scavenge the overflow", "err", err)
	}
	if claimed > 0 && capped {
		d.scavenge = now.Add(w.cfg.PollMin) // more is waiting
	}
	if claimed > 0 {
		d.lastWork = now
	}
}

// closeInbox ends direct dispatch at shutdown: the lease is released (a
// reader sees the worker gone at once) and the inbox moved to the
// overflow, for the other workers.
func (w *Worker) closeInbox() {
	d := w.direct
	select {
	case <-d.lost:
		return // the name is someone else's now, and so is the inbox
	default:
	}
	ctx, cancel := context.WithTimeout(w.stopped, 30*time.Second)
	defer cancel()
	if err := d.lease.Release(ctx); err != nil {
		w.log.Warn("release the worker lease", "err", err)
	}
	if n, err := direct.MoveInbox(ctx, w.st, w.cfg.ID); err != nil {
		w.log.Warn("move the inbox to the overflow; the next scavenge moves the rest", "moved", n, "err", err)
	} else if n > 0 {
		w.log.Info("moved the inbox to the overflow", "entries", n)
	}
}
