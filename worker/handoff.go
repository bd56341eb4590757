package worker

import (
	"context"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
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
	m.backlogSeen = 0
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

// handOffOwn is the busy member's look: after a poll of its own shards
// that left every slot busy and due work behind, it sizes its backlog and
// hands a share of it to each member that is not busy.
func (w *Worker) handOffOwn(ctx context.Context, now time.Time) {
	iv, err := w.clock.Now(ctx)
	if err != nil || !w.probeBacklog(ctx, now, iv) {
		return
	}
	targets := w.handOffTargets(iv)
	if len(targets) == 0 {
		return
	}
	for _, shard := range w.fleet.assign.Own {
		w.handOff(ctx, shard, iv, targets)
	}
}

// handOffTarget is a member that may take a share of a backlog: the shard
// it polls and its slots.
type handOffTarget struct {
	shard, slots int
}

// handOffTargets returns the active shards of the serving members, other
// than this worker, that were not busy at their last write and run every
// type this worker runs, in the member's view of the fleet.
func (w *Worker) handOffTargets(iv clock.Interval) []handOffTarget {
	v := w.view.Load()
	if !v.member || v.fleet.Asleep {
		return nil
	}
	live := v.fleet.Serving(iv, w.cfg.LeaseMargin)
	k := shards.Active(len(live), v.fleet.ShardCount(w.manifest.Shards))
	types := w.types()
	var out []handOffTarget
	for i, m := range live[:min(k, len(live))] {
		if m.ID == w.cfg.ID || m.Busy || slices.ContainsFunc(types, func(t string) bool { return !m.Handles(t) }) {
			continue
		}
		out = append(out, handOffTarget{shard: i, slots: max(1, m.Slots)})
	}
	return out
}

// handOff splits what the member has prefetched from shard beyond a set
// of its own slots with targets: each gets a share of the backlog in
// proportion to its slots, the member keeping its own. Only task objects
// whose listed size says pending are handed (a pointer, or an object of
// another state, stays with the member, which reads it). The pointers are
// written up to maxClaimBatch at a time; a task whose pointer was written
// is settled in the member's scan.
func (w *Worker) handOff(ctx context.Context, shard int, iv clock.Interval, targets []handOffTarget) {
	pf := w.prefetched[shard]
	keep := w.capacity()
	if len(targets) == 0 || len(pf.cands) <= keep {
		return
	}
	s := w.scan(shard, iv)
	tail := pf.cands[keep:]
	var movable []int // indexes in tail
	for i, c := range tail {
		if !c.Pointer && c.Pending {
			movable = append(movable, i)
		}
	}
	slots := keep
	for _, t := range targets {
		slots += t.slots
	}
	type send struct {
		i, to int
	}
	var sends []send
	next := 0
	for _, t := range targets {
		for n := len(movable) * t.slots / slots; n > 0 && next < len(movable); n-- {
			sends = append(sends, send{i: movable[next], to: t.shard})
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
			t := &task.Task{ID: c.ID, Shard: shard, AvailableAt: c.Avail}
			errs[j] = shards.Announce(ctx, w.st, t, iv.Latest, batch[j].to)
		})
		for j, b := range batch {
			c := tail[b.i]
			if errs[j] != nil {
				w.log.Warn("hand a task off", "task_id", c.ID, "err", errs[j])
				continue
			}
			s.Seen(c, c.ETag)
			gone[b.i] = true
			handed++
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
