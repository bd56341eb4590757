package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/shards"
)

// The watch: how standbys read the fleet object.
//
// A standby claims nothing; it reads fleet.json to learn whether the fleet
// needs it (no member serves, the members ask for more, a type of its own
// has no member, a sleeping fleet's doorbell rang or its wake time came).
// What a fleet pays for that, and how soon it learns, is the pace of the
// reads of all its standbys together, not of one: so the standbys take
// turns. Each is listed in the fleet's roster (Fleet.Standbys); with N of
// them and a spacing s, the one of rank r reads at the S3 times t with
// t mod (N × s) = r × s, so the fleet reads once per s whatever its size,
// and the first read after any change comes within s (s/2 on average).
// A burst that needs k more members has them within about k × s.
//
// s is StandbyPoll while the fleet is awake and BellPoll while it sleeps
// with no member: the standbys' turns are then the doorbell, and the
// first one to read a ring answers it by joining. A worker not yet in
// the roster takes the turn after the last; one just started reads every
// startupPoll for startupWindow (its start is when a user watches it
// join), and a standby in the roster reads at least every maxStandbyWait.

// rosterTTL is how long a standby's roster entry lasts; it renews it when
// less than half is left, at one of its reads (a PUT per standby every
// three hours). An entry left by a worker killed while it stood by leaves
// a gap in the turns until it lapses.
const rosterTTL = 6 * time.Hour

// startupWindow and startupPoll: a worker just started reads the fleet
// object every startupPoll for its first startupWindow while it stands
// by, so that workers started together on a backlog all join within
// seconds of the first member's ask, whatever the roster's pace.
const (
	startupWindow = 30 * time.Second
	startupPoll   = time.Second
)

// maxStandbyWait bounds any standby's wait between two reads, so that a
// standby whose view of the roster is stale (a large fleet it does not
// know has shrunk) still reads now and then.
const maxStandbyWait = 30 * time.Minute

// rosterEntry returns this worker's entry in f's roster.
func (w *Worker) rosterEntry(f shards.Fleet) (shards.Standby, bool) {
	for _, s := range f.Standbys {
		if s.ID == w.cfg.ID {
			return s, true
		}
	}
	return shards.Standby{}, false
}

// mustRegister reports whether this standby writes its roster entry at
// iv: it has none, or less than half of rosterTTL is left.
func (w *Worker) mustRegister(f shards.Fleet, iv clock.Interval) bool {
	s, ok := w.rosterEntry(f)
	return !ok || !iv.Before(s.Until.Add(-rosterTTL/2))
}

// register adds (or renews) this worker's roster entry in f. It reports
// whether f changed.
func (w *Worker) register(f *shards.Fleet, iv clock.Interval) bool {
	if !w.mustRegister(*f, iv) {
		return false
	}
	unregister(f, w.cfg.ID)
	f.Standbys = append(f.Standbys, shards.Standby{ID: w.cfg.ID, Until: iv.Latest.Add(rosterTTL)})
	slices.SortFunc(f.Standbys, func(a, b shards.Standby) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return true
}

// unregister removes id's roster entry from f, reporting whether it had
// one: a standby that joins, or leaves on shutdown.
func unregister(f *shards.Fleet, id string) bool {
	n := len(f.Standbys)
	f.Standbys = slices.DeleteFunc(slices.Clone(f.Standbys), func(s shards.Standby) bool { return s.ID == id })
	return len(f.Standbys) != n
}

// pruneRoster drops the roster entries that have certainly lapsed, and
// those of workers that are members: every fleet write does.
func pruneRoster(f *shards.Fleet, iv clock.Interval, margin time.Duration) {
	if len(f.Standbys) == 0 {
		return
	}
	f.Standbys = slices.DeleteFunc(slices.Clone(f.Standbys), func(s shards.Standby) bool {
		return lease.Expired(s.Until, iv, margin) || f.Has(s.ID)
	})
}

// watchSpacing is the fleet-wide interval between two standbys' reads of
// fleet f: StandbyPoll while it is awake, StandbyPoll × asleepStandby while
// a dedicated member sleeps at the doorbell itself, else BellPoll (the
// turns are its doorbell).
func (w *Worker) watchSpacing(f shards.Fleet, iv clock.Interval) time.Duration {
	if !f.Asleep {
		return w.cfg.StandbyPoll
	}
	for _, m := range f.Serving(iv, w.cfg.LeaseMargin) {
		if m.Dedicated {
			return w.cfg.StandbyPoll * asleepStandby
		}
	}
	// No member, or an elastic one about to leave the sleeping fleet to
	// the turns (its grace): the turns are the doorbell.
	return w.cfg.BellPoll
}

// turn returns this standby's place in f's turns: its rank among n
// places. A worker not (yet) in the roster takes a place after the last.
func (w *Worker) turn(f shards.Fleet) (rank, n int) {
	n = len(f.Standbys)
	for i, s := range f.Standbys {
		if s.ID == w.cfg.ID {
			return i, n
		}
	}
	return n, n + 1
}

// nextTurn returns how long after iv (its midpoint, the best estimate of
// S3 time now) this standby's next turn to read fleet f comes, the S3 time
// of that turn (nanoseconds since the epoch), and the number of that
// turn's slot (the fleet-wide count of spacings since the epoch, which the
// safety scan is paced by). A turn comes after the last turn taken
// (lastTurn, 0 if none), not at it: a clock whose estimate of S3 time
// moved back since it planned the turn would otherwise take the same turn
// again (measured on MinIO: a third more reads than turns). On the same
// turns (spacing and roster unchanged) the same turn is the very S3 time
// of the last, whatever the estimate.
//
// Only the same turn is skipped, not every slot within half a round of
// it, as before: when the spacing or the roster changes (the fleet falls
// asleep or wakes, a member joins the roster), a standby's first slot on
// the new turns may come soon after its last read on the old ones, and a
// standby that skipped it left that slot unread for a round. Standbys that
// learnt of a sleep at their awake turns (spaced by standby_poll) less
// than half a bell round before their bell slots left those slots empty
// a whole round: a run of slots unread after the last member handed the
// doorbell over (handover), and a ring there waited up to 3.5 s instead
// of bell_poll (50 workers: 24 pickups in 120 sleeps over 2 s, none now).
// Taking them costs at most one read per standby per change of the turns
// (about half of them come that soon; 50 workers: some 40 GETs per sleep
// and wake), none at a steady spacing (one read per bell_poll asleep).
func (w *Worker) nextTurn(f shards.Fleet, iv clock.Interval, lastTurn int64) (time.Duration, int64, int64) {
	s := int64(w.watchSpacing(f, iv))
	rank, n := w.turn(f)
	period := int64(n) * s
	now := iv.Mid().UnixNano()
	// The slot of this rank in the current period, or the next period's
	// if it has passed (or is too close to call, or is the last turn).
	closeCall := int64(10 * time.Millisecond)
	start := now - now%period
	at := start + int64(rank)*s
	for at <= now+closeCall || lastTurn > 0 && at <= lastTurn+closeCall {
		at += period
	}
	return time.Duration(at - now), at, at / s
}

// standbyWait is how long a standby waits, from a read of fleet f at iv
// and local time now, before it reads again: until its next turn, or
// startupPoll while it is new, and never more than maxStandbyWait.
func (w *Worker) standbyWait(f shards.Fleet, iv clock.Interval, now time.Time) time.Duration {
	last := w.fleet.turnAt
	if w.fleet.slot < 0 {
		last = 0 // this read was not a turn
	}
	d, at, slot := w.nextTurn(f, iv, last)
	w.fleet.slot, w.fleet.turnAt = slot, at
	if now.Sub(w.fleet.started) < startupWindow {
		d = min(d, startupPoll)
		w.fleet.slot = -1 // a read of its own, not a turn
	}
	return min(d, maxStandbyWait)
}

// failedStandbyWait is a standby's wait after a failed read: a turn's
// worth (its own spacing), with jitter, so that a store that fails every
// request is not asked again at once; the fleet's back-off (fleetOp)
// bounds it from below.
func (w *Worker) failedStandbyWait() time.Duration {
	d := w.cfg.StandbyPoll
	return time.Duration(float64(d) * (0.9 + 0.2*w.rand.Float64()))
}

// safetyScanTurn reports whether the turn of slot is also the sleeping
// fleet's safety scan: one turn in SleepScan / BellPoll, fleet-wide, lists
// shard 0, where a sleeping fleet's new tasks go, for work whose
// announcement was lost (a producer that crashed between its task's PUT
// and its ring).
func (w *Worker) safetyScanTurn(slot int64) bool {
	if slot < 0 {
		return false
	}
	every := int64(max(1, w.cfg.SleepScan/w.cfg.BellPoll))
	return slot%every == 0
}

// needed reports whether this standby joins fleet f, with n shards, at
// iv: it is dedicated; or the fleet is awake and no member serves, the
// members ask for more, or one of this worker's types has no member
// (never beyond a member per shard); or the fleet sleeps with no member
// and its wake time has come (the earliest delayed task, retry or
// pointer it knows of).
func (w *Worker) needed(f shards.Fleet, iv clock.Interval, n int) bool {
	if w.cfg.Dedicated {
		return true
	}
	serving := len(f.Serving(iv, w.cfg.LeaseMargin))
	switch {
	case f.Asleep:
		// The wake time by the earliest the clock can be: a delayed task
		// is claimed only once it is certainly due (dueNow).
		return serving == 0 && (!f.WakeAt.IsZero() && iv.After(f.WakeAt) || w.runsAny(f.Waiting))
	case serving >= n:
		return false
	}
	return serving == 0 || f.Want > serving || !w.covered(f, iv)
}

// safetyScan is the sleeping fleet's safety scan, made by the standby
// whose turn it is (safetyScanTurn): one listing of shard 0, where a
// sleeping fleet's tasks go. It reports whether due work waits there
// (which a ring should have announced): the standby then wakes the fleet.
// A LIST per SleepScan, fleet-wide.
func (w *Worker) safetyScan(ctx context.Context, f shards.Fleet, iv clock.Interval, turn int64) bool {
	if !f.Asleep || len(f.Serving(iv, w.cfg.LeaseMargin)) > 0 || !w.safetyScanTurn(turn) {
		return false
	}
	key, err := shards.FirstDue(ctx, w.st, 0, iv.Earliest.Add(-w.cfg.SleepScan-w.cfg.ScanLag), iv.Latest)
	if err != nil {
		w.log.Warn("the sleeping fleet's safety scan", "err", err)
		return false
	}
	if key != "" {
		w.log.Info("the sleeping fleet's safety scan found due work nobody rang for: waking it", "key", key)
	}
	return key != ""
}

// hasDead reports whether fleet f lists a member whose entry has
// certainly expired at iv. Members prune such entries at their renewals;
// a fleet asleep has no member to renew, so the standby whose turn sees
// one prunes it (registerStandby).
func (w *Worker) hasDead(f shards.Fleet, iv clock.Interval) bool {
	for _, m := range f.Members {
		if lease.Expired(m.ExpiresAt, iv, w.cfg.LeaseMargin) {
			return true
		}
	}
	return false
}

// registerStandby writes this standby's roster entry (one CAS write of the
// fleet object): at its first read, and when less than half of rosterTTL
// is left. The same write prunes the entries of dead members.
func (w *Worker) registerStandby(ctx context.Context, now time.Time, iv clock.Interval) error {
	f, etag, err := w.updateFleet(ctx, func(f *shards.Fleet) bool {
		if f.Has(w.cfg.ID) {
			return false // a member (admitted, or a member of old): not a standby
		}
		pruned := false
		f.Members = slices.DeleteFunc(slices.Clone(f.Members), func(m shards.Member) bool {
			dead := lease.Expired(m.ExpiresAt, iv, w.cfg.LeaseMargin)
			pruned = pruned || dead
			return dead
		})
		return w.register(f, iv) || pruned
	})
	if err != nil {
		return fmt.Errorf("register as a standby: %w", err)
	}
	w.setFleet(f, etag, now)
	return nil
}

// runsAny reports whether this worker runs one of types.
func (w *Worker) runsAny(types []string) bool {
	for _, t := range types {
		if w.handler(t) != nil {
			return true
		}
	}
	return false
}

// waitingTypes lists, sorted, the types of the pending tasks this member
// has seen and could not hand to any member (forward.go): what a fleet it
// puts to sleep still waits for.
func (w *Worker) waitingTypes() []string {
	var out []string
	for _, t := range w.unhandled {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// leaveRoster removes a standby that stops from the roster (one CAS write,
// if its last view lists it), so that its turns are not a gap in the
// watch until its entry lapses.
func (w *Worker) leaveRoster(ctx context.Context) {
	if _, ok := w.rosterEntry(w.fleet.fleet); !ok {
		return
	}
	if _, _, err := w.updateFleet(ctx, func(f *shards.Fleet) bool { return unregister(f, w.cfg.ID) }); err != nil {
		w.log.Warn("leave the standbys' roster; the entry will lapse", "err", err)
	}
}
