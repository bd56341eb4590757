package worker

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Hand-off: a shard has one member, so a backlog waits for the member whose
// shard it landed in (all of it in shard 0 when it was submitted while the
// fleet slept or had no member), however many members join or shards are
// added later. A member behind a backlog therefore looks at it, at most
// every handOffEvery: one listing of its shard of up to maxBacklogProbe due
// tasks (probeBacklog), which sizes what it asks the fleet for (fleet.go,
// want), and splits that backlog with the members that are not busy, each
// getting a share in proportion to its slots (the member keeps its own): a
// ready pointer per task in that member's shard, which its next listing
// finds. A task handed off costs one PUT (its pointer; the listed size
// says it is pending and its key that it is due, so it is not read) and
// its pointer's DELETE (free) when the taker claims it; a task that was
// claimed meanwhile costs the taker a GET. With no member that is not busy,
// or no backlog, the hand-off costs nothing but the look's LIST, once a
// second while the member is behind.

// handOffEvery paces the looks: a second, so that members that join a
// busy fleet get work within a second or two of joining.
const handOffEvery = time.Second

// maxBacklogProbe bounds a look's listing: one page of a LIST, which costs
// the same whatever it returns.
const maxBacklogProbe = 1000

// probeBacklog is the look of a member behind its shards, at most every
// handOffEvery: one listing of each own shard for up to maxBacklogProbe
// due tasks, kept as its prefetch (claimed as its slots free up, or handed
// off), whose size sizes its ask for more members. It reports whether it
// looked.
func (w *Worker) probeBacklog(ctx context.Context, now time.Time, iv clock.Interval) bool {
	m := &w.fleet
	if !m.handed.IsZero() && now.Sub(m.handed) < handOffEvery || w.pausedAll() {
		return false
	}
	m.handed = now
	m.backlogSeen = m.refusedSeen
	for _, shard := range m.assign.Own {
		pf := w.prefetched[shard]
		if len(pf.cands) < maxBacklogProbe/2 {
			var p pass
			cands, err := w.list(ctx, shard, iv, &p, max(0, maxBacklogProbe-w.capacity()-1))
			if err != nil {
				w.log.Warn("list a shard to size its backlog", "shard", shard, "err", err)
				continue
			}
			pf = w.relisted(pf, cands)
			w.prefetched[shard] = pf
		}
		m.backlogSeen += len(pf.cands)
	}
	return true
}

// handOffOwn is the look of a member behind its shards, at most every
// handOffEvery: it sizes its backlog and hands a share of it to each
// member that is not busy. It returns how long until the next look is
// due (a long wait when the member is not behind).
func (w *Worker) handOffOwn(ctx context.Context, now time.Time) time.Duration {
	m := &w.fleet
	if !m.backlog || m.behindSince.IsZero() {
		return time.Hour
	}
	if !m.busy(now, w.capacity(), w.runEstimate(), w.pace.paced) && !w.pace.capped {
		// Behind by a listing's worth its slots clear before the next
		// (a member at a steady load): no look, unless its last listing
		// returned all it asked for and more may wait (the look sizes
		// it).
		return handOffEvery
	}
	if !m.handed.IsZero() && now.Sub(m.handed) < handOffEvery {
		return handOffEvery - now.Sub(m.handed)
	}
	iv, err := w.clock.Now(ctx)
	if err != nil || !w.probeBacklog(ctx, now, iv) {
		return handOffEvery
	}
	targets, expected := w.handOffTargets(iv)
	if len(targets) > 0 {
		for _, shard := range w.fleet.assign.Own {
			w.handOff(ctx, shard, iv, targets, expected)
		}
	}
	return handOffEvery
}

// handOffTarget is a member that may take a share of a backlog: the shard
// it polls and its slots.
type handOffTarget struct {
	id           string
	shard, slots int
}

// handedShare is the last share handed to a member: at the S3 time at,
// n tasks for its slots, at local time local.
type handedShare struct {
	at       time.Time
	local    time.Time
	n, slots int
}

// drainsSoon reports whether the member handed share h has likely run all
// but its last round of it, at the pace this member's handlers have been
// running: it is handed the next share before it idles, whatever its
// renewals say yet.
func (w *Worker) drainsSoon(h handedShare) bool {
	d := w.runTime.get()
	if d <= 0 {
		return false
	}
	rounds := (h.n + h.slots - 1) / max(1, h.slots)
	return clock.Since(w.local, h.local) >= time.Duration(rounds-1)*d
}

// runTimes keeps a moving average of how long handlers ran. Safe for
// concurrent use: runs note theirs, the scheduler reads.
type runTimes struct {
	mu    sync.Mutex
	mean  time.Duration
	total time.Duration // of every run that ended
}

func (r *runTimes) note(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += d
	if r.mean == 0 {
		r.mean = d
	} else {
		r.mean = (7*r.mean + d) / 8
	}
}

// sum is the total time of the runs that ended.
func (r *runTimes) sum() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

func (r *runTimes) get() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mean
}

// runEstimate is how long a handler of this member takes, for judging
// whether its backlog is one (busy): the mean of the runs that ended, or,
// while every handler of a pool runs, the time the latest of them has
// been running if longer. Handlers held by tasks far longer than the mean
// (a burst of long tasks after short ones) free no slot at its pace: by
// the mean alone the few tasks left behind them looked cleared within a
// second, and waited minutes with other members idle.
func (w *Worker) runEstimate() time.Duration {
	mean := w.runTime.get()
	type held struct {
		n     int
		least time.Duration
	}
	pools := make(map[*pool]held, len(w.pools))
	now := w.now()
	w.running.Range(func(_, v any) bool {
		r := v.(*run)
		began := r.began.Load()
		if began == 0 {
			return true // waiting in its pool: it holds no handler
		}
		h, e := pools[r.pool], now.Sub(time.Unix(0, began))
		if h.n == 0 || e < h.least {
			h.least = e
		}
		h.n++
		pools[r.pool] = h
		return true
	})
	est := mean
	for p, h := range pools {
		if h.n >= bounded(p.maxInFlight, 0) && h.least > est && (mean > 0 || h.least >= saturatedAfter) {
			est = h.least
		}
	}
	return est
}

// rounds is how many rounds of its slots a member is handed at most at a
// time: as many as it runs between two of its renewals (which say whether
// it is still busy), at the pace this member's handlers have been
// running, within [1, maxHandOffRounds].
func (w *Worker) rounds() int {
	d := w.runTime.get()
	if d <= 0 {
		return 1
	}
	// One round more than fit between two renewals: a member that runs
	// its share at the pace of ours is still busy when it next renews,
	// and is handed the next share before it idles.
	return min(maxHandOffRounds, 1+int(math.Ceil(float64(w.cfg.MemberTTL/3)/float64(d))))
}

// maxHandOffRounds bounds rounds: with handlers of a few milliseconds a
// member's renewal interval is thousands of rounds.
const maxHandOffRounds = 64

// handOffTargets returns the active shards of the serving members, other
// than this worker, that were not busy at their last write and run every
// type this worker runs, in the member's view of the fleet; and the slots
// of the members the fleet still expects (it asks for more than serve),
// counted as a set of this member's slots each.
func (w *Worker) handOffTargets(iv clock.Interval) (targets []handOffTarget, expected int) {
	v := w.view.Load()
	if !v.member || v.fleet.Asleep {
		return nil, 0
	}
	live := v.fleet.Serving(iv, w.cfg.LeaseMargin)
	if v.fleet.Want > len(live) {
		expected = (v.fleet.Want - len(live)) * w.capacity()
	}
	k := shards.Active(len(live), v.fleet.ShardCount(w.manifest.Shards))
	types := w.types()
	for i, m := range live[:min(k, len(live))] {
		if m.ID == w.cfg.ID || m.Busy || slices.ContainsFunc(types, func(t string) bool { return !m.Handles(t) }) {
			continue
		}
		if h, ok := w.fleet.handedTo[m.ID]; ok && !w.drainsSoon(h) && (m.Leased || !m.Renewed.After(h.at)) {
			// Handed a share since its last renewal (whether it is busy
			// with it is not known before the next), which it is not
			// about to run out of.
			continue
		}
		targets = append(targets, handOffTarget{id: m.ID, shard: i, slots: max(1, m.Slots)})
	}
	return targets, expected
}

// handOff splits what the member has prefetched from shard beyond a set
// of its own slots with targets: each gets a share in proportion to its
// slots, of the slots of the member, the targets and the members the
// fleet still expects (expected slots), so that what later joiners need
// stays with the member until they come; and no more rounds of its slots
// than it runs between two of its renewals (rounds), after which its entry
// says whether it is busy: a target is handed a share once per renewal of
// its (a pointer is not handed on: a member handed too much becomes the
// backlog). Only task objects whose listed size says
// pending are handed (a pointer, or an object of another state, stays
// with the member, which reads it). The pointers are written up to
// maxClaimBatch at a time; a task whose pointer was written is settled in
// the member's scan.
func (w *Worker) handOff(ctx context.Context, shard int, iv clock.Interval, targets []handOffTarget, expected int) {
	pf := w.prefetched[shard]
	keep := w.capacity()
	if len(targets) == 0 || len(pf.cands) <= keep {
		return
	}
	s := w.scan(shard, iv)
	tail := pf.cands[keep:]
	var movable []int // indexes in tail, of each task's first candidate
	// A task is handed once: its other pointers in tail (the monitor's
	// repairs may have written several) go with its first candidate,
	// deleted once its new pointer is written. Handed one by one, each
	// wrote the same pointer at once, two identical PUTs whose order,
	// and so which one's pointer was deleted when the other failed, was
	// the goroutines' (sim seed 7 did not replay).
	also := make(map[int][]int) // index of a task's first candidate -> its other pointers' indexes
	first := make(map[string]int, len(tail))
	for i, c := range tail {
		// A task object whose listed size says pending, or a ready
		// pointer that names its task's shard: a pointer handed here by
		// a member that took this one for idle (entries say busy only
		// from their writer's next renewal) is handed on rather than
		// becoming this member's backlog (sim seed 30: three members
		// handed each other their backlogs at a burst, and the member
		// that joined after got none of it).
		if c.Pending && !c.Pointer || c.Pointer && c.Shard >= 0 && !c.Inbox {
			if j, ok := first[c.ID]; ok {
				also[j] = append(also[j], i)
				continue
			}
			first[c.ID] = i
			movable = append(movable, i)
		}
	}
	slots := keep + expected
	for _, t := range targets {
		slots += t.slots
	}
	type send struct {
		i  int
		to handOffTarget
	}
	var sends []send
	next := 0
	for _, t := range targets {
		n := (len(movable)*t.slots + slots - 1) / slots // its fair share, rounded up
		if expected > 0 {
			// Members the fleet asked for are still to come: no more
			// than it runs before its next renewal, the rest kept for
			// them.
			n = min(n, w.rounds()*t.slots)
		}
		for ; n > 0 && next < len(movable); n-- {
			sends = append(sends, send{i: movable[next], to: t})
			next++
		}
	}
	gone := make([]bool, len(tail))
	handed := 0
	for start := 0; start < len(sends); start += maxClaimBatch {
		batch := sends[start:min(len(sends), start+maxClaimBatch)]
		errs := make([]error, len(batch))
		concurrently(len(batch), func(j int) {
			c := tail[batch[j].i]
			// Due at once: the key says the task is due, and the taker
			// reads it before it claims.
			own := shard
			if c.Pointer {
				own = c.Shard
			}
			t := &task.Task{ID: c.ID, Shard: own, AvailableAt: c.Avail}
			if errs[j] = shards.Announce(ctx, w.st, t, iv.Latest, batch[j].to.shard); errs[j] != nil {
				return
			}
			// The pointers handed on are deleted (free): the new one
			// stands for them, for the taker and for the monitor.
			for _, i := range append([]int{batch[j].i}, also[batch[j].i]...) {
				if p := tail[i]; p.Pointer {
					if err := w.st.Delete(ctx, p.Key, s3store.DeleteOptions{}); err != nil {
						w.log.Debug("delete a pointer handed on; its taker deletes it", "key", p.Key, "err", err)
					}
				}
			}
		})
		for j, b := range batch {
			c := tail[b.i]
			if errs[j] != nil {
				w.log.Warn("hand a task off", "task_id", c.ID, "err", errs[j])
				continue
			}
			for _, i := range append([]int{b.i}, also[b.i]...) {
				s.Seen(tail[i], tail[i].ETag)
				gone[i] = true
			}
			handed++
			if w.fleet.handedTo == nil {
				w.fleet.handedTo = make(map[string]handedShare)
			}
			h := w.fleet.handedTo[b.to.id]
			if !h.at.Equal(iv.Latest) {
				h = handedShare{at: iv.Latest, local: w.now(), slots: b.to.slots}
			}
			h.n++
			w.fleet.handedTo[b.to.id] = h
		}
	}
	rest := slices.Clone(pf.cands[:keep])
	for i, c := range tail {
		if !gone[i] {
			rest = append(rest, c)
		}
	}
	pf.cands = rest
	w.prefetched[shard] = pf
	if handed > 0 {
		w.log.Debug("handed tasks off to members that are not busy", "shard", shard, "tasks", handed, "members", len(targets))
	}
}
