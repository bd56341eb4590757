package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
)

// membership is the worker's place in the fleet object: standing by,
// polling its share of the shards as a member, or asleep at the doorbell.
// When to poll is pacing's (pacing.go).
//
// Only the scheduler (Run's goroutine, or a test calling poll) touches it.
type membership struct {
	fleet   shards.Fleet
	etag    string
	synced  time.Time // local monotonic time of the last fleet read or write
	renewed time.Time // local monotonic time our entry was last written
	member  bool
	joined  time.Time // S3 time of joining, our place in the order
	expiry  time.Time // our entry's expiry, as last written
	assign  shards.Assignment

	lastWork    time.Time // local time a poll last found work
	behindSince time.Time // local time the member fell behind its shards (zero: it is not)
	backlog     bool      // the listing that filled the slots left due work behind
	backlogSeen int       // due tasks the last pass of the own shards left behind (a lower bound)
	refusedSeen int       // of those, the ones left waiting for a full pool (not prefetched)
	asked       time.Time // local time the member last asked for more members
	// use is the window over which the member measures how much of its
	// slots its handlers used (see underused): from local time useFrom,
	// with the handlers' total run time at useBase then.
	useFrom time.Time
	useBase time.Duration
	handed  time.Time // local time the member last looked to hand work off
	// handedTo: the S3 time of the last share handed to each member, by
	// id; a member is handed another only once it has renewed since.
	handedTo map[string]handedShare
	asleep   bool
	sleptAt  time.Time
	leaving  bool
	shutdown bool // leaving because Run ends: even the last member goes

	standbyWait time.Duration // a standby's wait before its next read
	started     time.Time     // local time the worker was opened: a new standby reads often (standby.go)
	slot        int64         // the watch's slot of the standby's next read (-1: a read of its own)
	turnAt      int64         // the S3 time of that turn, in nanoseconds since the epoch
	// waking: the standby joins to wake the sleeping fleet, whose safety
	// scan found due work nobody rang for.
	waking   bool
	learnt   int       // the fleet's shard count the manifest was last re-read for
	leaseKey string    // a leased member's lease object, as last written
	grew     time.Time // local time of the last automatic reshard tried

	// applied is the local time a standby last wrote its application
	// (zero: none stands); appliedExpiry the lease that write gives it.
	applied, appliedExpiry time.Time
	// apps are the applications the keeper has read, by worker id: read
	// again only when their object changes.
	apps map[string]shards.Application

	retry retryPace // of the fleet requests, after a failure
}

// saturated reports that, at local time now, the member has been behind
// its shards for a while (every poll leaving due work unclaimed, or every
// slot busy), with due work left behind, and has not asked for help in the
// last while.
func (m *membership) saturated(now time.Time, capacity int, run, pace time.Duration) bool {
	return now.Sub(m.asked) >= saturatedAfter && m.busy(now, capacity, run, pace)
}

// busy reports whether the member is behind its shards with a backlog its
// slots do not clear within saturatedAfter: what its entry says (busy
// members get no hand-off, producers write lane entries for them, and it
// lists its lanes), and, unless it asked within saturatedAfter, when it
// asks for more members.
func (m *membership) busy(now time.Time, capacity int, run, pace time.Duration) bool {
	if !m.backlog || m.behindSince.IsZero() {
		return false
	}
	if run <= 0 {
		// No handler has ended yet to say how long one runs: a backlog of
		// two sets of slots or more is no passing bunch.
		return now.Sub(m.behindSince) >= saturatedAfter || m.backlogSeen >= 2*max(1, capacity)
	}
	// How long the member's own slots take to clear what it left behind,
	// at the pace its handlers run: a clump of arrivals they clear within
	// saturatedAfter is no backlog, however many tasks (at 1.16 tasks/s,
	// a member with 4 slots of 100 ms handlers that asked at once for a
	// clump of nine got a second member, and the fleet's LISTs doubled);
	// one they take seconds to clear is, at once. Nor is what a listing at
	// the member's pace brings, if the slots clear it before the next
	// (at 11.6 tasks/s a listing every 3.8 s brings 44 tasks, which 4
	// slots of 100 ms clear in 1.1 s: the member keeps up).
	drain := time.Duration(m.backlogSeen) * max(run, minTaskTime) / time.Duration(max(1, capacity))
	if drain < max(saturatedAfter, pace) {
		return false
	}
	return now.Sub(m.behindSince) >= saturatedAfter || drain >= 2*saturatedAfter
}

// noteBehind records what a pass of the member's own shards, at local time
// now, says about saturation: whether it left due work unclaimed (behind:
// for lack of slots, or beyond a listing that returned all it asked for),
// and whether its slots were all busy at its end (full). Saturated is behind
// for a while, every pass since leaving due work unclaimed or ending with
// its slots all busy. Then the member asks for more members.
//
// Only a pass that is behind starts the while. A full pass that left
// nothing behind starts nothing: its slots free up in a few handler times,
// and at a light load the next pass comes seconds later (at the pace of the
// work); had that full pass started the clock, one pass behind by chance
// after it (a listing that returned all it asked for) counted as seconds
// behind, and an idle member asked for help. A pass that leaves nothing
// behind with a slot free ends it: not a single free slot, which with short
// tasks is there after almost every pass even under a backlog.
func (m *membership) noteBehind(now time.Time, behind, full bool) {
	switch {
	case !behind && !full:
		m.behindSince, m.backlog = time.Time{}, false
	case !behind:
		// Full with nothing left behind: no sign of a backlog yet.
	case m.behindSince.IsZero():
		m.behindSince, m.backlog = now, true
	default:
		m.backlog = true
	}
}

// stale reports that, at local time now, others have likely written the
// fleet object since the member's last read: more than half an interval
// between their writes ago (each root member, and the keeper's listing,
// writes once per renew).
func (m *membership) stale(now time.Time, iv clock.Interval, renew, margin time.Duration) bool {
	writers := m.fleet.RootLive(iv, margin)
	if m.fleet.HasLeased() {
		writers++ // the keeper's listing changes the entries of leased members
	}
	return writers > 2 && now.Sub(m.synced) > renew/time.Duration(2*(writers-1))
}

// minTaskTime is the least a task takes a slot however short its handler:
// its claim and its commit are requests (three round trips to S3).
const minTaskTime = 50 * time.Millisecond

// saturatedAfter is how long a member stays full with a backlog before it
// asks for more members.
const saturatedAfter = time.Second

// While a dedicated member sleeps at the doorbell its entry lasts
// asleepTTL times MemberTTL, and the standbys read the fleet object
// asleepStandby times less often than StandbyPoll (it reads the doorbell
// itself).
const (
	asleepStandby = 5
	asleepTTL     = 2
)

// memberTTL is how long our entry lasts per renewal: longer while asleep.
// (Renewing more often among other members, for a faster failover, was
// tried: two root members renewing every 5 s had half their writes refused
// by each other's, and took no more renewals a second than at 10 s.)
func (w *Worker) memberTTL() time.Duration {
	if w.fleet.asleep {
		return asleepTTL * w.cfg.MemberTTL
	}
	return w.cfg.MemberTTL
}

// static reports that the worker polls a fixed set of shards and takes no
// part in the fleet.
func (w *Worker) static() bool { return w.cfg.OwnShards != nil }

// syncFleet renews our entry (a member) or reads the fleet (a standby),
// joining or leaving as the rules say. It runs when the renewal or standby
// poll is due, and on demand.
func (w *Worker) syncFleet(ctx context.Context, now time.Time) error {
	m := &w.fleet
	margin := w.cfg.LeaseMargin
	if !m.member {
		f, etag, err := w.readFleet(ctx)
		if err != nil {
			// Try again a turn later, not at once.
			m.synced, m.standbyWait, m.slot = now, w.failedStandbyWait(), -1
			return err
		}
		w.setFleet(f, etag, now)
		w.learnShards(ctx, f)
	}
	n := m.fleet.ShardCount(w.manifest.Shards)
	// After a standby's read, whose response dates it: no request of its own.
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return err
	}
	if !m.member {
		f := m.fleet
		turn := m.slot // the turn this read was, before the next is planned
		m.standbyWait = w.standbyWait(f, iv, now)
		if w.log.Enabled(ctx, slog.LevelDebug) {
			rank, of := w.turn(f)
			w.log.Debug("standing by", "rank", rank, "of", of, "next_read_in", m.standbyWait, "asleep", f.Asleep,
				"serving", len(f.Serving(iv, margin)), "want", f.Want)
		}
		if me, ok := f.Member(w.cfg.ID); ok && me.Leased && !m.applied.IsZero() {
			return w.admitted(ctx, now, iv, f, me)
		}
		m.waking = false
		if !w.needed(f, iv, n) {
			w.withdraw(ctx)
			if !w.safetyScan(ctx, f, iv, turn) {
				if w.mustRegister(f, iv) || w.hasDead(f, iv) {
					return w.registerStandby(ctx, now, iv)
				}
				return nil
			}
			m.waking = true // due work in a sleeping fleet's shard 0: wake it
		}
		if f.RootLive(iv, margin) >= w.cfg.RootMembers {
			return w.apply(ctx, now, iv)
		}
		m.joined = iv.Latest
	}
	want := 0
	if m.saturated(w.now(), w.capacity(), w.runEstimate(), w.pace.paced) {
		want = w.want(n, len(m.fleet.Serving(iv, margin)))
		m.asked = now
	}
	leaving, shutdown := m.leaving, m.shutdown
	busy := m.busy(w.now(), w.capacity(), w.runEstimate(), w.pace.paced)
	joining := !m.member
	if !joining && w.leaseOnly(iv, want) {
		return w.renewLease(ctx, now, iv, busy)
	}
	// The keeper lists the leased members' leases for the write below.
	var leases map[string]shards.Lease
	var apps []shards.Application
	if !joining && !leaving && (m.fleet.HasLeased() || m.fleet.Leases || m.fleet.RootLive(iv, margin) >= w.cfg.RootMembers) && w.keeper(iv) {
		if leases, err = shards.ReadLeases(ctx, w.st); err != nil {
			return err
		}
		if m.apps == nil {
			m.apps = make(map[string]shards.Application)
		}
		apps = shards.ReadApplications(ctx, w.st, m.fleet, leases, iv, margin, m.apps)
	}
	ttl := w.memberTTL()
	rootExpiry := iv.Latest.Add(ttl)
	leaseExpiry := iv.Earliest.Add(ttl) // what a leased member counts on: its PUT lands after
	leasedExpiry := func(me shards.Member) time.Time {
		return shards.LeasedExpiry(me.LeaseLapse(shards.Lease{Renewed: iv.Earliest}, true), w.cfg.MemberTTL, margin)
	}
	if !joining && m.stale(now, iv, w.cfg.MemberTTL/3, margin) {
		// Others have most likely written since our read: a GET first is
		// cheaper than a PUT refused with 412.
		f, etag, err := w.readFleet(ctx)
		if err != nil {
			return err
		}
		w.setFleet(f, etag, now)
	}
	applyInstead := false
	waking := m.waking
	f, etag, err := w.updateFleet(ctx, func(f *shards.Fleet) bool {
		live := f.Live(iv, margin)
		if joining && !(waking && f.Asleep || w.needed(*f, iv, n)) {
			// Decided on the object as it is now: not needed after all.
			// It stands by, in the roster.
			return w.register(f, iv)
		}
		if joining {
			unregister(f, w.cfg.ID)
			if f.Asleep && len(f.Serving(iv, margin)) == 0 {
				// The first standby to read a ring (or the wake time,
				// or due work in its safety scan) answers it: the
				// fleet is awake again, with it as its member.
				f.Asleep, f.WakeAt, f.Waiting = false, time.Time{}, nil
			}
		}
		if leaving && !shutdown && !w.mayLeave(live) {
			leaving = false // the fleet changed: stay rather than empty it
			return false
		}
		// A place among the root members is free: the first leased member
		// takes it, and a newcomer gets it rather than a lease.
		rootFree := f.RootLive(iv, margin) < w.cfg.RootMembers
		applyInstead = false
		if _, listed := f.Member(w.cfg.ID); joining && !rootFree && !listed {
			// The root places filled since our read: apply rather than
			// race the other joiners for the object.
			applyInstead = true
			return false
		}
		kept := f.Members[:0]
		found, stayLeased := false, false
		for _, mem := range f.Members {
			switch {
			case mem.ID == w.cfg.ID:
				found = true
				if leaving {
					continue
				}
				if mem.Leased && rootFree && takesRoot(*f, mem, iv, margin) {
					mem.Leased, mem.TTL = false, 0
				}
				stayLeased = mem.Leased
				mem.Slots = w.capacity()
				if !mem.Leased {
					mem.ExpiresAt, mem.Renewed, mem.Busy = rootExpiry, iv.Latest, busy
				} else if e := leasedExpiry(mem); e.After(mem.ExpiresAt) {
					// As the keeper would set it after the PUT below.
					mem.ExpiresAt = e
				}
			case mem.Leased && leases != nil:
				// The keeper judges leased members by their leases (Keep).
			case lease.Expired(mem.ExpiresAt, iv, margin):
				continue // certainly dead: prune it
			}
			kept = append(kept, mem)
		}
		if !found && !leaving {
			m.joined = shards.Fleet{Members: kept}.JoinTime(iv)
			me := shards.Member{ID: w.cfg.ID, Joined: m.joined, ExpiresAt: rootExpiry, Renewed: iv.Latest, Types: w.types(),
				Dedicated: w.cfg.Dedicated, Busy: busy, Slots: w.capacity()}
			if !rootFree {
				// A leased member back after its entry was pruned: the PUT
				// of its lease follows this write.
				me.Leased, me.TTL, me.Busy, me.Renewed = true, ttl, false, time.Time{}
				me.ExpiresAt = leasedExpiry(me)
			}
			kept = append(kept, me)
		}
		if leaving && !shutdown && found {
			w.register(f, iv) // an idle member that leaves stands by, in the roster
		}
		if shutdown {
			unregister(f, w.cfg.ID)
		}
		if stayLeased && leases == nil && want <= max(len(live), f.Want) && !w.renewsAsk(*f, iv, want, f.ShardCount(w.manifest.Shards)) {
			return false // nothing to write: the lease object renews us
		}
		f.Members = kept
		if leases != nil {
			f.Keep(leases, iv, w.cfg.MemberTTL, margin)
			f.Admit(apps, iv, w.cfg.MemberTTL, margin)
			// Lapsed ones are deleted after this write: listed again at
			// the next renewal, until a listing finds none.
			f.Leases = len(leases) > 0
		}
		if f.HasLeased() {
			f.Leases = true
		}
		if leaving && len(f.Live(iv, margin)) == 0 {
			// The last member leaves on shutdown: the doorbell was its
			// own, and the next member starts awake.
			f.Asleep = false
		}
		n := f.ShardCount(w.manifest.Shards)
		switch {
		case want > f.Want:
			f.Want, f.WantUntil = want, iv.Latest.Add(w.askLasts(*f))
		case want > n:
			// An ask beyond the shard count renews the standing one, so
			// that it lasts without a break while members keep asking:
			// the automatic reshard waits for that (growShards).
			f.WantUntil = iv.Latest.Add(w.askLasts(*f))
		}
		if f.Want > 0 && (len(f.Live(iv, margin)) >= f.Want || iv.After(f.WantUntil)) {
			// Met, or nobody came in time: stop asking.
			f.Want, f.WantUntil = 0, time.Time{}
		}
		switch {
		case f.Want <= n:
			f.Crowded = time.Time{}
		case f.Crowded.IsZero():
			f.Crowded = iv.Latest
		}
		return true
	})
	if err != nil {
		return err
	}
	w.setFleet(f, etag, now)
	if leases != nil {
		w.sweepLeases(ctx, f, leases, iv)
	}
	if applyInstead {
		return w.apply(ctx, now, iv)
	}
	if joining && !f.Has(w.cfg.ID) {
		return nil // stayed a standby
	}
	if m.leaving && !leaving {
		m.leaving = false
		m.lastWork = now
		return nil
	}
	if leaving {
		w.dropLease(ctx)
		w.log.Info("left the fleet", "members", len(f.Members))
		m.member, m.leaving, m.asleep, m.shutdown = false, false, false, false
		m.standbyWait = w.standbyWait(f, iv, now)
		w.setAssign(shards.Assignment{})
		w.pointerShard.Store(-1)
		w.view.Store(&memberView{})
		return nil
	}
	if !m.member {
		w.log.Info("joined the fleet", "members", len(f.Members))
		m.member, m.useFrom = true, time.Time{}
		m.lastWork = now
		w.pace.reset(w.cfg.PollMin, now)
		w.sweep = sweeps{} // a new assignment: its drain shards are swept at once
		w.readPauseOnJoin(ctx)
	}
	me, _ := f.Member(w.cfg.ID)
	switch {
	case me.Leased && !joining:
		// The write was not the renewal: the lease object is.
		if err := w.renewLease(ctx, now, iv, busy); err != nil {
			return err
		}
	case me.Leased && !m.applied.IsZero():
		// Admitted by the keeper while we joined: the application is the lease.
		m.expiry, m.renewed, m.applied = m.appliedExpiry, m.applied, time.Time{}
	case me.Leased:
		m.expiry, m.renewed = leaseExpiry, now
	default:
		w.dropLease(ctx) // a root member now, if it was leased or applied
		m.applied = time.Time{}
		m.expiry, m.renewed = rootExpiry, now
	}
	return w.takePlace(ctx, now, iv, f, joining)
}

// takePlace publishes the member's place in fleet f after a write or an
// admission: its assignment, and the automatic reshard's check.
func (w *Worker) takePlace(ctx context.Context, now time.Time, iv clock.Interval, f shards.Fleet, joining bool) error {
	m := &w.fleet
	margin := w.cfg.LeaseMargin
	w.learnShards(ctx, f)
	n := f.ShardCount(w.manifest.Shards)
	a, _ := f.Assign(w.cfg.ID, iv, margin, n)
	if len(a.Own) == 0 && (joining || len(m.assign.Own) > 0) {
		// Only dedicated workers join a fleet with a member per shard.
		w.log.Warn("no shard left to poll: every shard has a member; this worker idles as a spare until one leaves or the queue gets more shards (s3queue reshard)",
			"shards", n, "members", len(f.Live(iv, margin)))
	}
	w.setAssign(a)
	prev := w.view.Load().fleet
	w.view.Store(&memberView{member: true, assign: a, fleet: f})
	if len(f.Members) != len(prev.Members) || f.Version != prev.Version {
		w.forwardWaiting(ctx)
	}
	if len(a.Own) > 0 {
		w.pointerShard.Store(int64(a.Own[0]))
	}
	w.growShards(ctx, now, f, a, iv)
	return nil
}

// setAssign makes a the member's assignment and publishes the changes to
// its own shards: shard_released for each it no longer owns, then
// shard_acquired for each new one.
func (w *Worker) setAssign(a shards.Assignment) {
	m := &w.fleet
	was, wasDrain := m.assign.Own, m.assign.Drain
	m.assign = a
	for _, s := range a.Drain {
		if !slices.Contains(wasDrain, s) {
			// A shard this member sweeps anew, often one that was active
			// until now, where producers whose view is a few seconds old
			// still put tasks: swept at once, its back-off starting over
			// (not at the back-off an older sweep of it left, up to
			// DrainMax).
			delete(w.sweep.next, s)
			delete(w.sweep.every, s)
		}
	}
	for _, s := range was {
		if !slices.Contains(a.Own, s) {
			w.emit(Event{Kind: events.ShardReleased, Shard: s})
		}
	}
	for _, s := range a.Own {
		if !slices.Contains(was, s) {
			w.emit(Event{Kind: events.ShardAcquired, Shard: s})
		}
	}
}

// updateFleet applies change to the fleet object from the member's view
// (shards.UpdateFleet). Every write also raises the fleet's shard count to
// the worker's manifest's: a reshard that stopped before raising it, or a
// fleet from before it was recorded; members assign by ours.
func (w *Worker) updateFleet(ctx context.Context, change func(*shards.Fleet) bool) (shards.Fleet, string, error) {
	return shards.UpdateFleet(ctx, w.st, w.fleetCAS(), w.fleet.fleet, w.fleet.etag, func(f *shards.Fleet) bool {
		if f.Shards < w.manifest.Shards {
			f.Shards = w.manifest.Shards
		}
		if !change(f) {
			return false
		}
		if iv, err := w.clock.Now(ctx); err == nil {
			pruneRoster(f, iv, w.cfg.LeaseMargin)
		}
		return true
	})
}

// want is how many members a saturated member asks for, with n shards and
// live members serving: as many more as its backlog needs, a set of slots
// like its own each (at least one more), and beyond the shard count only
// while the automatic reshard may grow it. The backlog it saw is a lower
// bound (a listing's worth); while it stays behind it asks again every
// second, from the fleet as it has grown.
func (w *Worker) want(n, live int) int {
	need := max(1, (w.fleet.backlogSeen+w.capacity()-1)/max(1, w.capacity()))
	// No more than the fleet's standbys can bring (a standby not yet in
	// the roster counts as one): a backlog of thousands must not ask for
	// thousands of members, and the automatic reshard must not grow the
	// shard count for members that do not exist.
	need = min(need, max(1, len(w.fleet.fleet.Standbys)))
	want := max(1, live) + need
	if !w.mayGrow(n) {
		return min(n, want)
	}
	return min(w.cfg.MaxShards, want)
}

// mayGrow reports whether the automatic reshard may grow n shards: when
// MaxShards is above n, and the worker was not configured with a shard
// count (processes started with that setting would refuse the grown queue
// with a layout mismatch).
func (w *Worker) mayGrow(n int) bool {
	return w.cfg.Shards == 0 && w.cfg.MaxShards > n
}

// askLasts is how long an ask for more members stands in fleet f unless
// renewed: long enough for every standby to read it at its turn (twice
// the turns' period) and past the next renewal, which renews it while the
// member stays saturated.
func (w *Worker) askLasts(f shards.Fleet) time.Duration {
	return max(2*time.Duration(len(f.Standbys)+1)*w.cfg.StandbyPoll, w.cfg.MemberTTL/3+w.cfg.LeaseMargin)
}

// mustAsk reports whether a saturated member writes the fleet object now
// to ask for more members, rather than in its next renewal (which carries
// the ask too): when it asks for more than the fleet has and wants, or
// when its ask stands beyond the shard count and would lapse before the
// next renewal (the automatic reshard waits for such an ask to last).
func (w *Worker) mustAsk(ctx context.Context, now time.Time) bool {
	m := &w.fleet
	if !m.member || !m.saturated(now, w.capacity(), w.runEstimate(), w.pace.paced) {
		return false
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return false
	}
	f := m.fleet
	live := len(f.Serving(iv, w.cfg.LeaseMargin))
	n := f.ShardCount(w.manifest.Shards)
	want := w.want(n, live)
	return want > max(live, f.Want) || w.renewsAsk(f, iv, want, n)
}

// renewsAsk reports whether the member writes the fleet object to keep a
// standing ask beyond the shard count from lapsing before its next
// renewal (the automatic reshard waits for the ask to last). Only the
// first root_members live members do, so that the writes stay bounded:
// they hold the active shards, and in a crowded fleet they are the ones
// behind.
func (w *Worker) renewsAsk(f shards.Fleet, iv clock.Interval, want, n int) bool {
	if want <= n || iv.Latest.Add(w.memberTTL()/3).Before(f.WantUntil) {
		return false
	}
	for i, m := range f.Live(iv, w.cfg.LeaseMargin) {
		if i >= w.cfg.RootMembers {
			break
		}
		if m.ID == w.cfg.ID {
			return true
		}
	}
	return false
}

// types lists the task types this worker has handlers for, sorted.
func (w *Worker) types() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.handlers))
	for t := range w.handlers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// covered reports whether live members already run every type this worker
// runs; a standby joins when one of its types has no member.
func (w *Worker) covered(f shards.Fleet, iv clock.Interval) bool {
	for _, t := range w.types() {
		if !f.Covers(t, iv, w.cfg.LeaseMargin) {
			return false
		}
	}
	return true
}

// refreshView re-reads the fleet object (one GET, no write) so a member
// learns of joins and departures between its renewals, and stops polling
// shards that moved to a newcomer within MemberTTL/6 rather than MemberTTL/3.
func (w *Worker) refreshView(ctx context.Context, now time.Time) error {
	m := &w.fleet
	f, etag, err := w.readFleet(ctx)
	if err != nil {
		return err
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return err
	}
	w.setFleet(f, etag, now)
	w.learnShards(ctx, f)
	a, ok := f.Assign(w.cfg.ID, iv, w.cfg.LeaseMargin, f.ShardCount(w.manifest.Shards))
	if !ok {
		// Our entry is gone (pruned as dead): the next renewal rejoins.
		m.renewed = time.Time{}
		return nil
	}
	w.setAssign(a)
	if len(a.Own) > 0 {
		w.pointerShard.Store(int64(a.Own[0]))
	}
	prev := w.view.Load().fleet
	w.view.Store(&memberView{member: true, assign: a, fleet: f})
	if len(f.Members) != len(prev.Members) {
		w.forwardWaiting(ctx)
	}
	w.growShards(ctx, now, f, a, iv)
	return nil
}

// growShards is the automatic reshard. When the members have asked for
// more members than the queue has shards (Fleet.Want above the count)
// without a break for ReshardAfter by S3 time, standbys cannot help:
// a shard has one member. Then the fleet's first member (the anchor, so
// that one process acts) grows the count to min(MaxShards, max(2 × count,
// Want)), and the standbys join for the new shards; not while some shard
// has no member (standbys would have joined for it). It reads nothing more
// than the fleet object the member has just read or written; a reshard
// costs a GET and a PUT of the manifest and of the fleet object, and is
// tried at most once per ReshardAfter.
func (w *Worker) growShards(ctx context.Context, now time.Time, f shards.Fleet, a shards.Assignment, iv clock.Interval) {
	n := f.ShardCount(w.manifest.Shards)
	// A fleet that has not filled its shards after asking this long has no
	// standby to fill new ones.
	if a.Index != 0 || !w.mayGrow(n) || f.Want <= n || f.Crowded.IsZero() || len(f.Live(iv, w.cfg.LeaseMargin)) < n ||
		iv.Earliest.Sub(f.Crowded) < w.cfg.ReshardAfter ||
		!w.fleet.grew.IsZero() && now.Sub(w.fleet.grew) < w.cfg.ReshardAfter {
		return
	}
	w.fleet.grew = now
	target := min(w.cfg.MaxShards, max(2*n, f.Want))
	mf, err := shards.Reshard(ctx, w.st, target)
	switch {
	case errors.Is(err, shards.ErrShrink):
		return // another process grew it further first
	case err != nil:
		w.log.Warn("automatic reshard", "shards", n, "to", target, "err", err)
		// The manifest's write may have landed with its response lost:
		// assign by it if so (one GET), or the fleet keeps the old count
		// until another process reads the manifest.
		if mf, err := shards.ReadManifest(ctx, w.st); err == nil && mf.Shards > w.manifest.Shards {
			w.manifest, w.fleet.learnt = mf, mf.Shards
		}
		return
	}
	w.log.Info("resharded: the members kept asking for more members than there were shards",
		"shards", mf.Shards, "was", n, "want", f.Want, "since", f.Crowded)
	if mf.Shards > w.manifest.Shards {
		w.manifest, w.fleet.learnt = mf, mf.Shards
	}
}

// learnShards re-reads the queue manifest when fleet f assigns by more
// shards than the worker's manifest has: the queue was resharded. One GET,
// once per count the fleet shows (a failed read is tried again at the next
// fleet read). Members assign by the fleet's count in any case, so they
// agree; the manifest's counts are what old ready pointers are resolved by.
func (w *Worker) learnShards(ctx context.Context, f shards.Fleet) {
	if f.Shards <= w.manifest.Shards || f.Shards == w.fleet.learnt {
		return
	}
	m, err := shards.ReadManifest(ctx, w.st)
	if err != nil {
		w.log.Warn("re-read the queue manifest after a reshard", "fleet_shards", f.Shards, "err", err)
		return
	}
	w.fleet.learnt = f.Shards
	if m.Shards > w.manifest.Shards {
		w.log.Info("the queue was resharded", "shards", m.Shards, "was", w.manifest.Shards)
		w.manifest = m
	}
}

// readFleet reads the fleet object. A corrupt one is logged and read as
// empty: the next write (ours, if we join or renew) replaces it.
func (w *Worker) readFleet(ctx context.Context) (shards.Fleet, string, error) {
	f, etag, err := shards.ReadFleet(ctx, w.st)
	if errors.Is(err, shards.ErrCorruptFleet) {
		w.log.Warn("fleet", "err", err)
		err = nil
	}
	return f, etag, err
}

// mayLeave reports whether leaving keeps the fleet whole: another live
// member stays, and runs every type this worker runs.
func (w *Worker) mayLeave(live []shards.Member) bool {
	others := shards.Fleet{}
	for _, m := range live {
		if m.ID != w.cfg.ID {
			others.Members = append(others.Members, m)
		}
	}
	if len(others.Members) == 0 {
		return false
	}
	for _, t := range w.types() {
		covered := false
		for _, m := range others.Members {
			covered = covered || m.Handles(t)
		}
		if !covered {
			return false
		}
	}
	return true
}

// targetUse is the share of its slots a member's handlers use, on
// average, that the fleet sizes itself to when it shrinks (underused).
const targetUse = 0.5

// underused reports whether the member leaves a fleet larger than its
// load needs, at local time now: over the last idle_leave its handlers
// used so little of its slots that the fleet's members (live, in join
// order), each as loaded as this one (producers spread new tasks evenly
// over the active shards), would use targetUse of the slots of fewer of
// them, and the member is past that many in the order. A fleet grown for a
// burst (the ask is sized to a backlog) then shrinks to its steady load
// within an idle_leave of the burst's end, every surplus member at once,
// where idle_leave alone keeps them all: under a steady trickle spread
// over all of them, no member is ever idle for a minute (1M tasks a day
// kept 29 members of 4 slots busy at 1 % each, each listing its shard:
// 0.97 LIST per task). Not while the member has handlers running, is
// behind its shards or holds rate-limited tasks, nor while any member is
// busy or the fleet asks for more; never the first member, nor a
// dedicated one. The window starts again at each look.
func (w *Worker) underused(now time.Time, live []shards.Member) bool {
	m := &w.fleet
	total := w.runTime.sum()
	if m.useFrom.IsZero() || now.Before(m.useFrom) {
		m.useFrom, m.useBase = now, total
		return false
	}
	window := now.Sub(m.useFrom)
	if window < w.cfg.IdleLeave {
		return false
	}
	used := float64(total-m.useBase) / (float64(window) * float64(max(1, w.capacity())))
	m.useFrom, m.useBase = now, total
	if w.cfg.Dedicated || m.backlog || w.busy() || w.holdingLimited() || !w.mayLeave(live) || m.fleet.Want > len(live) {
		return false
	}
	for _, mem := range live {
		if mem.Busy {
			// A backlog somewhere in the fleet: its member hands shares of
			// it to the others, whose own shards look quiet (8 workers on
			// a backlog on MinIO: members left while the first was still
			// behind, and the backlog took 23 s instead of 14).
			return false
		}
	}
	needed := max(1, int(math.Ceil(used*float64(len(live))/targetUse)))
	for i, mem := range live {
		if mem.ID == w.cfg.ID {
			return i >= needed
		}
	}
	return false
}

// nextToLeave reports whether this worker is the one member that may leave
// an idle fleet now: the newest elastic member, while another member stays.
// One at a time, so an idle fleet never empties itself.
func (w *Worker) nextToLeave(live []shards.Member) bool {
	if w.cfg.Dedicated || !w.mayLeave(live) {
		return false
	}
	for i := len(live) - 1; i >= 0; i-- {
		if !live[i].Dedicated {
			return live[i].ID == w.cfg.ID
		}
	}
	return false
}

// certainlyMember reports whether our fleet entry is certainly still ours,
// so we may poll: a member that cannot renew stops before anyone prunes it.
func (w *Worker) certainlyMember(iv clock.Interval) bool {
	return w.fleet.member && lease.Held(w.fleet.expiry, iv, w.cfg.LeaseMargin)
}

// sleep rings the doorbell's "asleep" side: the only member, idle, marks the
// fleet asleep and then relies on producers to ring it. The same write
// renews its entry for the longer asleep TTL.
func (w *Worker) sleep(ctx context.Context, now time.Time) error {
	m := &w.fleet
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return err
	}
	expiry := iv.Latest.Add(asleepTTL * w.cfg.MemberTTL)
	wakeAt := w.nextDue(iv)
	mine := false
	f, etag, err := w.updateFleet(ctx, func(f *shards.Fleet) bool {
		mine = false
		if f.Asleep {
			return false
		}
		for i := range f.Members {
			if f.Members[i].ID == w.cfg.ID {
				f.Members[i].ExpiresAt, f.Members[i].Renewed, mine = expiry, iv.Latest, true
			}
		}
		f.Asleep = mine
		if mine {
			// Any wake time in the object is of an earlier sleep: the
			// member's scans know what is due next now.
			f.WakeAt, f.Waiting = wakeAt, w.waitingTypes()
		}
		return mine
	})
	if err != nil {
		return err
	}
	w.setFleet(f, etag, now)
	if !mine {
		return nil // asleep already, or our entry is gone: the next renewal decides
	}
	m.expiry, m.renewed = expiry, now
	m.asleep, m.sleptAt = true, now
	w.emit(Event{Kind: events.FleetAsleep})
	// One more scan once producers' cached views have caught up.
	w.pace.next = now.Add(shards.FleetCacheTTL + 500*time.Millisecond)
	w.log.Debug("asleep: watching the doorbell")
	return nil
}

// doze ends an elastic member's going to sleep: once its awake grace has
// passed with no work found and no ring, it leaves the fleet for the
// roster, with the fleet still asleep, and from then on watches the
// doorbell by taking its turns with the other standbys (standby.go). A
// sleeping fleet then has no member: nobody renews an entry, and the
// standbys' turns, one read per BellPoll fleet-wide, are its doorbell; the
// first to read a ring answers it by joining. One CAS write; if a ring
// came first, the member wakes instead.
func (w *Worker) doze(ctx context.Context, now time.Time) error {
	m := &w.fleet
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return err
	}
	wakeAt := w.nextDue(iv)
	rang := false
	f, etag, err := w.updateFleet(ctx, func(f *shards.Fleet) bool {
		rang = !f.Asleep
		if rang {
			return false
		}
		f.Members = slices.DeleteFunc(slices.Clone(f.Members), func(mem shards.Member) bool { return mem.ID == w.cfg.ID })
		w.register(f, iv)
		f.WakeAt = earliest(f.WakeAt, wakeAt)
		for _, t := range w.waitingTypes() {
			if !slices.Contains(f.Waiting, t) {
				f.Waiting = append(f.Waiting, t)
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	w.setFleet(f, etag, now)
	if rang {
		w.log.Debug("the doorbell rang")
		m.asleep, m.lastWork = false, now
		w.emit(Event{Kind: events.FleetWoken})
		w.pace.reset(w.cfg.PollMin, now)
		return nil
	}
	m.member, m.asleep = false, false
	w.setAssign(shards.Assignment{})
	w.pointerShard.Store(-1)
	w.view.Store(&memberView{})
	m.standbyWait = w.standbyWait(f, iv, now)
	w.log.Debug("asleep: left the fleet to take turns at the doorbell", "wake_at", f.WakeAt)
	return nil
}

// nextDue is the earliest time, after iv, at which a key this worker's
// scans have seen comes due (a delayed task, a retry's pointer): when a
// fleet it puts to sleep must wake by itself. Zero if none.
func (w *Worker) nextDue(iv clock.Interval) time.Time {
	var at time.Time
	for _, s := range w.scans {
		if d := s.NextDue(); d.After(iv.Earliest) {
			at = earliest(at, d)
		}
		// A delayed task listed while it may have been due, but not
		// certainly (dueNow), is due soon.
		at = earliest(at, s.UnsettledAfter(iv.Earliest))
	}
	return at
}

// earliest is the earlier of a and b, a zero time counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// wake clears the doorbell after this member found work itself.
func (w *Worker) wake(ctx context.Context, now time.Time) {
	m := &w.fleet
	m.asleep = false
	m.lastWork = now // awake for sleep_after at least: what woke it may not be claimable yet
	w.emit(Event{Kind: events.FleetWoken})
	w.pace.reset(w.cfg.PollMin, now)
	if !m.fleet.Asleep {
		return
	}
	f, etag, err := w.updateFleet(ctx, func(f *shards.Fleet) bool {
		if !f.Asleep {
			return false
		}
		f.Asleep, f.WakeAt, f.Waiting = false, time.Time{}, nil
		return true
	})
	if err == nil {
		w.setFleet(f, etag, now)
	}
}

// checkBell reads the fleet object while asleep; a ring (Asleep cleared by
// a producer) wakes the member.
func (w *Worker) checkBell(ctx context.Context, now time.Time) error {
	m := &w.fleet
	f, etag, err := w.readFleet(ctx)
	if err != nil {
		return err
	}
	w.setFleet(f, etag, now)
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return err
	}
	if f.Asleep && !f.WakeAt.IsZero() && iv.After(f.WakeAt) {
		// Its wake time came: a delayed task or a retry is due.
		w.wake(ctx, now)
		return nil
	}
	if !f.Asleep {
		w.log.Debug("the doorbell rang")
		m.asleep, m.lastWork = false, now
		w.emit(Event{Kind: events.FleetWoken})
		w.pace.reset(w.cfg.PollMin, now)
	}
	return nil
}

// leave removes the worker from the fleet on shutdown, so its shards move
// on at once instead of after its entry expires. Unlike an idle member's
// leave it goes even as the last member: a worker started next (a restart)
// then joins at once rather than after the entry expires.
func (w *Worker) leave() {
	if !w.fleet.member {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if !w.fleet.applied.IsZero() {
			w.withdraw(ctx)
		}
		w.leaveRoster(ctx)
		return
	}
	// Leaving is bounded on host time: a context deadline cannot run on
	// Config.Local.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.fleet.leaving, w.fleet.shutdown = true, true
	if err := w.syncFleet(ctx, w.now()); err != nil {
		w.log.Warn("leave the fleet; the entry will expire", "err", err)
	}
}

// tendFleet sends the fleet request that is due, if any: a member's
// renewal, a standby's read, a leave or a call for help (syncFleet), or a
// member's re-read of the view between renewals (refreshView).
func (w *Worker) tendFleet(ctx context.Context, now time.Time) {
	m := &w.fleet
	due := (m.member && now.Sub(m.renewed) >= w.memberTTL()/3) || (!m.member && now.Sub(m.synced) >= m.standbyWait) ||
		w.mustAsk(ctx, now) || m.leaving
	switch {
	case !m.retry.ready(now):
		// The last fleet request failed: it backs off.
	case due:
		w.fleetOp(ctx, now, "fleet", func() error { return w.syncFleet(ctx, now) })
	case m.member && !m.asleep && now.Sub(m.synced) >= w.refreshEvery():
		w.fleetOp(ctx, now, "fleet", func() error { return w.refreshView(ctx, now) })
	}
}

// refreshEvery is how often a member re-reads the fleet object between its
// renewals (a GET): every sixth of MemberTTL alone, every twelfth among
// other members (it takes a dead member's shards within that of the
// member turning suspect), and every startupPoll while it is behind with
// its ask out, or holds tasks no member it knows of runs: it learns of the
// members that join for them within a second, and hands them work at once.
func (w *Worker) refreshEvery() time.Duration {
	m := &w.fleet
	if m.backlog && !m.behindSince.IsZero() && m.fleet.Want > 0 || len(w.unhandled) > 0 {
		return min(w.cfg.MemberTTL/12, startupPoll)
	}
	if len(m.fleet.Members) > 1 {
		// Among other members: a dead one's shards, free once its
		// renewal is overdue, are taken over within this.
		return w.cfg.MemberTTL / 12
	}
	return w.cfg.MemberTTL / 6
}

// handover is how long an elastic member that put the fleet to sleep
// watches the doorbell before it leaves it to the standbys' turns: its
// grace, and at least until every standby in the roster has had a turn
// since (a turn planned while the fleet was awake comes within one round
// of the standbys at standby_poll, one planned while it slept before
// within one at bell_poll; from that read on, each takes every one of its
// slots on the sleeping fleet's turns: nextTurn), at most maxStandbyWait.
// Its cost is the member's doorbell reads for that while, once per sleep.
func (w *Worker) handover() time.Duration {
	round := time.Duration(len(w.fleet.fleet.Standbys)) * max(w.cfg.BellPoll, w.cfg.StandbyPoll)
	return min(max(w.cfg.AwakeGrace, round), maxStandbyWait)
}

// atTheDoorbell runs the member's step while it sleeps: it reads the
// doorbell every BellPoll and scans its shards every SleepScan. asleep
// reports that it still sleeps, and then d is the wait before the next
// step. A member keeps scanning after marking itself asleep until a scan
// has started after every producer's cached view of the fleet shows it
// asleep.
func (w *Worker) atTheDoorbell(ctx context.Context, now time.Time, wait time.Duration) (d time.Duration, asleep bool) {
	m := &w.fleet
	if !m.asleep {
		return 0, false
	}
	// From the moment it marks the fleet asleep the member reads the
	// doorbell every BellPoll, its grace included: a producer that sees
	// the fleet asleep rings rather than counting on its scans.
	if now.Sub(m.synced) >= w.cfg.BellPoll && m.retry.ready(now) {
		w.fleetOp(ctx, now, "read the doorbell", func() error { return w.checkBell(ctx, now) })
		if !m.asleep {
			return 0, false
		}
	}
	bell := max(10*time.Millisecond, w.cfg.BellPoll-clock.Since(w.local, m.synced), m.retry.until(now))
	graceDone := now.Sub(m.sleptAt) >= w.cfg.AwakeGrace && w.pace.lastPoll.After(m.sleptAt.Add(shards.FleetCacheTTL))
	if !graceDone {
		// It keeps scanning for producers whose view did not show it
		// asleep yet, and the grace's last scan comes when the grace
		// ends, not a poll interval (up to PollMax) later.
		if end := m.sleptAt.Add(max(w.cfg.AwakeGrace, shards.FleetCacheTTL+time.Millisecond)); end.Before(w.pace.next) && w.pace.lastPoll.Before(end) {
			w.pace.next = end
		}
		return bell, false
	}
	if !w.cfg.Dedicated {
		if left := w.handover() - now.Sub(m.sleptAt); left > 0 {
			// The standbys' turns are spaced by standby_poll while the
			// fleet is awake and by bell_poll while it sleeps, and each
			// standby learns the fleet sleeps only at its next read: until
			// every one has read since, the turns planned before leave
			// gaps (a task submitted as the member left waited 5 s for a
			// read; 50 workers on MinIO, one pickup in three). The member
			// reads the doorbell itself until then.
			return max(min(bell, left), 10*time.Millisecond), true
		}
		// An elastic member leaves the sleeping fleet: the standbys'
		// turns watch the doorbell, itself among them.
		if m.retry.ready(now) {
			w.fleetOp(ctx, now, "leave the sleeping fleet", func() error { return w.doze(ctx, now) })
		}
		switch {
		case !m.member:
			return max(m.standbyWait, 10*time.Millisecond), true
		case !m.asleep:
			return 0, false
		}
		return max(m.retry.until(now), 10*time.Millisecond), true
	}
	if now.Sub(m.sleptAt) >= w.cfg.SleepScan && !now.Before(w.pace.next) {
		// A slow safety scan: a producer that crashed between its PUT and
		// its ring is still served.
		p := w.pollShards(ctx, m.assign.Own, false)
		if p.err != nil && ctx.Err() == nil {
			w.log.Warn("safety scan while asleep", "err", p.err)
		}
		w.pace.next = now.Add(w.cfg.SleepScan)
		if p.claimed > 0 {
			w.wake(ctx, now)
		}
	}
	if !m.asleep {
		return 0, false
	}
	return max(10*time.Millisecond, min(wait, w.cfg.BellPoll-clock.Since(w.local, m.synced)), m.retry.until(now)), true
}

// idle lets a member that has found no work for a while leave the fleet
// (the newest elastic member, one at a time) or, as its only member, put
// the fleet to sleep. It reports whether the member is now leaving.
func (w *Worker) idle(ctx context.Context, now time.Time, iv clock.Interval) (leaving bool) {
	m := &w.fleet
	if w.busy() || w.holdingLimited() {
		// Running handlers are work, and so are tasks waiting for a rate
		// limit's window: such a member is not idle. Asked here, after the
		// step's polls: a handler the step started (a sleeping member's
		// safety scan, a drain sweep) is work too, though the member's
		// last work before was long ago (sim seed 510535: the member slept
		// again 0.1 s after its safety scan's claim, and swept no drain
		// shard for the tasks it had refused for the pool that claim
		// filled).
		m.lastWork = now
	}
	live := m.fleet.Live(iv, w.cfg.LeaseMargin)
	// Idle means no work for a while and for two polls: a member paced to
	// list once a minute (poll_batch at a trickle) is not idle between
	// its listings.
	idle := now.Sub(m.lastWork) - 2*w.pace.interval
	switch {
	case idle >= w.cfg.IdleLeave && w.nextToLeave(live):
		m.leaving = true
		return true
	case w.underused(now, live):
		m.leaving = true
		return true
	case len(live) == 1 && !m.asleep && idle >= w.cfg.SleepAfter && m.retry.ready(now) && !w.leased():
		w.fleetOp(ctx, now, "mark the fleet asleep", func() error { return w.sleep(ctx, now) })
	}
	return false
}

// fleetOp runs op, a read or write of the fleet object, and backs off
// after a failure: the next fleet request waits PollMin, doubling per
// failure in a row up to MemberTTL/6 (still several tries before a
// member's entry lapses).
func (w *Worker) fleetOp(ctx context.Context, now time.Time, what string, op func() error) {
	m := &w.fleet
	err := op()
	switch {
	case err == nil:
		m.retry.ok()
	case ctx.Err() == nil:
		d := m.retry.failed(now, w.cfg.PollMin, max(w.cfg.PollMin, w.cfg.MemberTTL/6), w.rand.Float64)
		w.log.Warn(what, "err", err, "retry_in", d)
	}
}

// memberView is what Member reports, published by the scheduler.
type memberView struct {
	member bool
	assign shards.Assignment
	fleet  shards.Fleet
}

// Member reports whether the worker is a member of the fleet and which
// shards it polls.
func (w *Worker) Member() (bool, shards.Assignment) {
	v := w.view.Load()
	return v.member, v.assign
}

// leased reports whether the member renews by a lease object (it takes the
// root place at its next renewal when one is free; only then may it sleep).
func (w *Worker) leased() bool {
	me, _ := w.fleet.fleet.Member(w.cfg.ID)
	return me.Leased
}

// keeper reports whether this worker is the fleet's keeper, which keeps
// the leased members' entries (shards/leases.go): its first live root
// member, whose renewals write the fleet object anyway, or, with none, its
// first live member.
func (w *Worker) keeper(iv clock.Interval) bool {
	return w.fleet.fleet.Keeper(iv, w.cfg.LeaseMargin) == w.cfg.ID
}

// leaseOnly reports whether the member's renewal is a PUT of its lease
// object alone: it is a leased member, and has no reason to write the
// fleet object (to leave, to ask for more members than the fleet has and
// wants or keep such an ask standing, to take a free place among the root
// members, or as the keeper).
func (w *Worker) leaseOnly(iv clock.Interval, want int) bool {
	m := &w.fleet
	me, ok := m.fleet.Member(w.cfg.ID)
	if !ok || !me.Leased || m.leaving {
		return false
	}
	live := len(m.fleet.Live(iv, w.cfg.LeaseMargin))
	convert := m.fleet.RootLive(iv, w.cfg.LeaseMargin) < w.cfg.RootMembers && takesRoot(m.fleet, me, iv, w.cfg.LeaseMargin)
	n := m.fleet.ShardCount(w.manifest.Shards)
	return want <= max(live, m.fleet.Want) && !w.renewsAsk(m.fleet, iv, want, n) && !convert && !w.keeper(iv)
}

// firstLeased returns the id of f's first live leased member, the one that
// takes a free place among the root members ("" if none).
func firstLeased(f shards.Fleet, iv clock.Interval, margin time.Duration) string {
	for _, m := range f.Live(iv, margin) {
		if m.Leased {
			return m.ID
		}
	}
	return ""
}

// takesRoot reports whether leased member me takes a free place among f's
// root members: it is the first live leased member, or its own entry has
// lapsed in f. No keeper extended it then (the last one left or died,
// and the first live member after it is a dead leased one whose entry
// outlasts ours): not live, we would never be the first leased member nor
// the keeper, and would renew a lease object nobody reads while no
// producer routes to us (seed 190600).
func takesRoot(f shards.Fleet, me shards.Member, iv clock.Interval, margin time.Duration) bool {
	return firstLeased(f, iv, margin) == me.ID || lease.Expired(me.ExpiresAt, iv, margin)
}

// renewLease renews a leased member's entry: one PUT of its lease object,
// whose key carries its busy state (a flip also deletes the other key, a
// free request). The member counts on the lease from the earliest S3 time
// the PUT can have landed at.
func (w *Worker) renewLease(ctx context.Context, now time.Time, iv clock.Interval, busy bool) error {
	m := &w.fleet
	key := shards.LeaseKey(w.cfg.ID, busy)
	if _, err := w.st.Put(ctx, key, []byte{}, s3store.PutOptions{}); err != nil {
		return fmt.Errorf("renew the fleet lease: %w", err)
	}
	if m.leaseKey != "" && m.leaseKey != key {
		if err := w.st.Delete(ctx, m.leaseKey, s3store.DeleteOptions{}); err != nil {
			w.log.Debug("delete the previous lease object; the keeper's listing reads the newer", "key", m.leaseKey, "err", err)
		}
	}
	m.leaseKey = key
	m.expiry, m.renewed = iv.Earliest.Add(w.memberTTL()), now
	return nil
}

// apply is a standby's join beyond the root members: it writes its
// application in its lease object (one PUT, renewed every third of
// MemberTTL while it stands) for the keeper to admit, and reads the fleet
// object every sixth of MemberTTL to see whether it was.
func (w *Worker) apply(ctx context.Context, now time.Time, iv clock.Interval) error {
	m := &w.fleet
	m.standbyWait = w.cfg.MemberTTL / 6
	if !m.applied.IsZero() && now.Sub(m.applied) < w.cfg.MemberTTL/3 {
		return nil // the application stands
	}
	body, _ := json.Marshal(shards.Application{Types: w.types(), Dedicated: w.cfg.Dedicated, TTL: w.cfg.MemberTTL})
	key := shards.LeaseKey(w.cfg.ID, false)
	if _, err := w.st.Put(ctx, key, body, s3store.PutOptions{}); err != nil {
		return fmt.Errorf("apply to join the fleet: %w", err)
	}
	if m.applied.IsZero() {
		w.log.Debug("applied to join the fleet", "root_members", w.cfg.RootMembers)
	}
	m.applied, m.appliedExpiry, m.leaseKey = now, iv.Earliest.Add(w.cfg.MemberTTL), key
	return nil
}

// withdraw takes back a standing application: the fleet no longer needs
// this worker.
func (w *Worker) withdraw(ctx context.Context) {
	m := &w.fleet
	if m.applied.IsZero() {
		return
	}
	w.dropLease(ctx)
	m.applied = time.Time{}
}

// admitted makes a standby whose application the keeper admitted (its
// leased entry is in fleet f) a member. Its lease runs from the
// application's last write.
func (w *Worker) admitted(ctx context.Context, now time.Time, iv clock.Interval, f shards.Fleet, me shards.Member) error {
	m := &w.fleet
	m.joined = me.Joined
	m.expiry, m.renewed, m.applied = m.appliedExpiry, m.applied, time.Time{}
	w.log.Info("joined the fleet", "members", len(f.Members), "leased", true)
	m.member, m.useFrom = true, time.Time{}
	m.lastWork = now
	w.pace.reset(w.cfg.PollMin, now)
	w.sweep = sweeps{}
	w.readPauseOnJoin(ctx)
	return w.takePlace(ctx, now, iv, f, true)
}

// dropLease deletes the member's lease object, if it wrote one: it left the
// fleet, or renews in the fleet object now.
func (w *Worker) dropLease(ctx context.Context) {
	m := &w.fleet
	if m.leaseKey == "" {
		return
	}
	for _, busy := range []bool{false, true} {
		if err := w.st.Delete(ctx, shards.LeaseKey(w.cfg.ID, busy), s3store.DeleteOptions{}); err != nil {
			w.log.Debug("delete the lease object; the keeper deletes it later", "err", err)
			return
		}
	}
	m.leaseKey = ""
}

// sweepLeases is the keeper's clean-up after its write of fleet f: the
// lease objects of members no longer in f (pruned, or gone without
// deleting theirs) are deleted once they have certainly lapsed. Deletes are
// free requests; each is preceded by a HEAD (once per lapsed object).
func (w *Worker) sweepLeases(ctx context.Context, f shards.Fleet, leases map[string]shards.Lease, iv clock.Interval) {
	ids := make([]string, 0, len(leases))
	for id := range leases {
		ids = append(ids, id)
	}
	sort.Strings(ids) // one order of requests: the simulator replays it
	for _, id := range ids {
		l := leases[id]
		if _, ok := f.Member(id); ok {
			continue
		}
		gone := shards.Member{ID: id, TTL: w.cfg.MemberTTL}
		if !lease.Expired(gone.LeaseLapse(l, true), iv, w.cfg.LeaseMargin) {
			continue
		}
		for _, key := range l.Keys {
			// Only the object listed: one written since (the worker came
			// back and applied, at the same key) is not lapsed. A HEAD
			// first, and the DELETE on its ETag where that is honoured.
			o, err := w.st.Head(ctx, key)
			if err != nil || o.LastModified.After(l.Renewed) {
				continue
			}
			if err := w.st.Delete(ctx, key, s3store.DeleteOptions{IfMatch: o.ETag}); err != nil {
				w.log.Debug("delete a lapsed lease object", "key", key, "err", err)
			}
		}
	}
}
