package worker

import (
	"context"
	"time"

	"github.com/s3queue/s3queue/shards"
)

// pacing decides when the own shards are polled next: adaptively, at the
// pace work arrives, growing while they are empty. It is the scheduler's,
// like membership.
type pacing struct {
	next     time.Time     // local time of the next poll of the own shards
	interval time.Duration // the current poll interval
	lastPoll time.Time     // local time of the last listing of the own shards
	rate     float64       // recent arrival rate, tasks/s, from polls that found work
	capped   bool          // the last listing returned all it asked for: a backlog
	paced    time.Duration // the interval the arrival rate sets (PollPace, or longer under load)
}

// reset polls at once, then every interval (PollMin: work may be flowing).
func (p *pacing) reset(interval time.Duration, now time.Time) {
	p.interval = interval
	p.next = now
}

// rateMemory is how much past a member's estimate of the arrival rate
// weighs: the tasks it found over the last rateMemory or so.
const rateMemory = 10 * time.Second

// sweeps paces the slow sweeps of a member's drain shards (its inactive
// ones), each on its own back-off.
type sweeps struct {
	next  map[int]time.Time     // local time of each shard's next sweep
	every map[int]time.Duration // each shard's current back-off
}

// slotFreed reacts to a handler that finished: claim a prefetched candidate
// now (no LIST), or list again now while the shards have a backlog, or else
// poll again after the current interval rather than after PollMax.
func (w *Worker) slotFreed() {
	if w.direct != nil {
		w.inboxSlotFreed()
	}
	now := w.now()
	t := now.Add(w.pace.interval)
	own := w.fleet.assign.Own
	if w.static() {
		own = w.cfg.OwnShards
	}
	w.sweepRefusedNow(now)
	if w.hasPrefetched(now, own) || w.pace.capped || w.roomForRefused() {
		// A prefetched candidate costs no LIST; after a listing that
		// returned all it asked for, one LIST now brings a slot's worth
		// and more of the backlog: waiting PollMin would idle the slot.
		t = now
	}
	if t.Before(w.pace.next) {
		w.pace.next = t
	}
	// Still behind, as far as saturation goes: only a poll that leaves
	// nothing behind with a slot free says it is not (pollOwn). Were it
	// reset here, a member whose handlers finish more often than
	// saturatedAfter would never ask for help.
}

// roomForRefused reports whether a pool that tasks were refused for (they
// wait in the bucket, see refusals.go) has room now: the poll that finds
// them is due at once, however far the interval has grown while it was
// full.
func (w *Worker) roomForRefused() bool {
	for _, p := range w.pools {
		if w.refused.waitingFor(p) && p.room() > 0 {
			return true
		}
	}
	return false
}

// sweepRefusedNow makes the sweep of each drain shard that holds tasks
// refused for a pool that has room now due at once, however far its
// back-off has grown: its sweep found them due, but claimed none (so it
// backed off as from an empty shard), and nothing else lists them before
// the back-off, up to DrainMax, ends (sim seed 510535: two chain heads in
// a drain shard waited 7 minutes after the one handler of their pool
// freed up).
func (w *Worker) sweepRefusedNow(now time.Time) {
	sw := &w.sweep
	if len(sw.next) == 0 || !w.roomForRefused() {
		return
	}
	for s := range w.refused.shardsWithRoom() {
		if next, ok := sw.next[s]; ok && next.After(now) {
			sw.next[s] = now
		}
	}
}

// sweepDrainShards sweeps the member's inactive shards for leftovers, each on
// its own back-off, and returns how long until the next one is due.
func (w *Worker) sweepDrainShards(ctx context.Context, now time.Time) time.Duration {
	sw := &w.sweep
	if sw.next == nil {
		sw.next, sw.every = map[int]time.Time{}, map[int]time.Duration{}
	}
	wait := w.cfg.DrainMax
	for _, s := range w.fleet.assign.Drain {
		next, ok := sw.next[s]
		if ok && now.Before(next) {
			wait = min(wait, next.Sub(now))
			continue
		}
		p := w.pollShards(ctx, []int{s}, false)
		n, err := p.claimed, p.err
		if p.full && !p.lists && n == 0 {
			// Not swept: every slot was busy. That is no sign the shard
			// is empty, so its back-off does not grow; it is swept at a
			// step once a slot frees (a task that landed there just
			// before it stopped being active waited 25 s otherwise,
			// behind the member's own backlog).
			sw.next[s] = now.Add(w.cfg.PollMin)
			wait = min(wait, w.cfg.PollMin)
			continue
		}
		if err != nil && ctx.Err() == nil {
			// Back off as if empty: the shard's leftovers wait for the
			// next sweep, or the monitor's repair.
			w.log.Warn("sweep an inactive shard", "shard", s, "err", err)
		}
		// Leftovers are there at the first sweep, or come from producers
		// whose 2-second view of the fleet is stale: the back-off is steep.
		every := sw.every[s]
		if n > 0 || every == 0 {
			every = w.cfg.PollMin
		} else {
			every = min(max(4*every, 2*shards.FleetCacheTTL), w.cfg.DrainMax)
		}
		sw.every[s], sw.next[s] = every, now.Add(every)
		wait = min(wait, every)
	}
	return wait
}

// adapt returns the next poll interval: paced to the arrival rate after
// finding work, growing by the multiplier while idle, PollMax while every
// slot is busy (a freed slot wakes Run anyway).
func (w *Worker) adapt(p pass) time.Duration {
	m := &w.pace
	if m.interval == 0 {
		m.interval = w.cfg.PollMin
	}
	now := w.now()
	since := now.Sub(m.lastPoll)
	if p.lists {
		m.lastPoll = now // the time of the last listing, which the pace is measured from
	}
	// Tasks refused for a full pool are not arrivals: the same ones are
	// listed again by every poll until their pool has room.
	arrived := p.listed - p.refused
	if p.lists && since > 0 && since < time.Hour && (arrived > 0 || m.rate > 0) {
		// The pace the work arrives at, from what listings find: tasks
		// over time, the past weighing as rateMemory of listings would.
		// (A mean of each listing's own rate swung with each listing's
		// length: a listing 100 ms after another that finds one task
		// said 10 a second, and the member listed every 300 ms at 1.2
		// tasks/s, 0.7 LIST per task.)
		if m.rate == 0 {
			m.rate = float64(arrived) / since.Seconds()
		} else {
			m.rate = (float64(arrived) + m.rate*rateMemory.Seconds()) / (since + rateMemory).Seconds()
		}
	}
	paced := func() time.Duration {
		if m.rate <= 0 {
			return w.cfg.PollMin
		}
		// PollPace while a listing brings PollBatch tasks or fewer, longer
		// in proportion beyond: a LIST costs the same whatever it brings,
		// and at a light load it is the pickup latency that matters (half
		// of PollPace), at a heavy one the LISTs (at 11.6 tasks/s one
		// member listing every 1.8 s still cost $7 a month in LISTs, the
		// pace of PollBatch / rate that came before $50).
		d := w.cfg.PollPace
		if per := m.rate * w.cfg.PollPace.Seconds(); per > w.cfg.PollBatch {
			d = time.Duration(float64(d) * per / w.cfg.PollBatch)
		}
		return min(max(d, w.cfg.PollMin), w.cfg.PollMax)
	}
	defer func() { m.paced = paced() }()
	if p.lists {
		m.capped = p.capped
	}
	switch {
	case p.full:
		// Busy: no poll until a slot frees (see Run). Prefetched candidates
		// fill it at once; after them, list again soon if the last listing
		// was cut short (a backlog), else at the pace.
		m.interval = paced()
		if m.capped {
			m.interval = w.cfg.PollMin
		}
		return w.cfg.PollMax
	case p.err != nil:
		w.log.Warn("poll", "err", p.err)
		m.interval = w.grow(m.interval)
	case !p.lists:
		// Only prefetched candidates, all claimed: list at the pace, or at
		// once after a listing that was cut short.
		if m.capped {
			m.interval = w.cfg.PollMin
		}
	case p.claimed == 0 && p.listed > 0 && p.refused >= p.listed:
		// Nothing claimed, every task listed refused for a full pool
		// while another has room: an empty poll as far as pacing goes (a
		// slot freeing in that pool wakes Run, see slotFreed). Polling at
		// the pace would list, and read, the same waiting tasks again and
		// again.
		m.interval = w.grow(m.interval)
	case p.listed > 0:
		// Reset on work, to the pace the work arrives at: polling faster
		// than PollBatch tasks per poll only buys empty LISTs.
		m.interval = paced()
	default:
		// An empty poll waits longer, and never less than the pace: after
		// a listing that returned all it asked for, the member lists again
		// at once (a backlog?), and when that finds nothing it goes back
		// to the pace, not to PollMin doubling (at 1.16 tasks/s, a member
		// with 4 slots took every clump of five arrivals for a backlog and
		// then listed at 0.2, 0.4 and 0.8 s for nothing: 0.68 LIST per
		// task against 0.38 from its pace).
		m.interval = max(w.grow(m.interval), min(paced(), w.cfg.PollMax))
	}
	return m.interval
}

func (w *Worker) grow(d time.Duration) time.Duration {
	d = time.Duration(float64(d) * w.cfg.PollMultiplier)
	if d > w.cfg.PollMax {
		d = w.cfg.PollMax
	}
	return d
}
