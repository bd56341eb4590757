package worker

import (
	"context"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Hand-off: a shard has one member, so a backlog waits for the member whose
// shard it landed in (all of it in shard 0 when it was submitted before any
// worker joined), however many members join or shards are added later. A
// busy member (every slot taken, due work left behind) therefore hands the
// due tasks it cannot start to members that are not busy: a ready pointer
// to each in the other member's shard, which that member's next listing
// finds. It keeps a set of slots' worth for itself, and hands each other
// member at most as many as it has slots per look, a look at most every
// PollMax while it is full. A look lists the shard again (one LIST) when
// what it has prefetched is not enough for the others too. Each task
// handed off costs a GET (is it still pending and due?) and a PUT (the
// pointer); with no idle member, or no backlog, it costs nothing.

// handOffOwn is the busy member's look: after a poll of its own shards
// that left every slot busy and due work behind, it hands some of that
// work to the members that are not busy.
func (w *Worker) handOffOwn(ctx context.Context, now time.Time) {
	m := &w.fleet
	if !m.handed.IsZero() && now.Sub(m.handed) < w.cfg.PollMax {
		return
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return
	}
	targets := w.handOffTargets(iv)
	if len(targets) == 0 {
		return
	}
	m.handed = now
	keep := cap(w.slots)
	for _, shard := range m.assign.Own {
		if pf := w.prefetched[shard]; len(pf.cands) < keep*(1+len(targets)) {
			var p pass
			cands, err := w.list(ctx, shard, iv, &p, keep*len(targets))
			if err != nil {
				w.log.Warn("list a shard to hand work off", "shard", shard, "err", err)
				continue
			}
			w.prefetched[shard] = prefetch{at: w.now(), cands: cands}
		}
		w.handOff(ctx, shard, iv, targets)
	}
}

// handOffTargets returns the active shards of the live members, other than
// this worker, that were not busy at their last write and run every type
// this worker runs, in the member's view of the fleet.
func (w *Worker) handOffTargets(iv clock.Interval) []int {
	v := w.view.Load()
	if !v.member {
		return nil
	}
	live := v.fleet.Live(iv, w.cfg.LeaseMargin)
	k := shards.Active(len(live), v.fleet.ShardCount(w.manifest.Shards))
	types := w.types()
	var out []int
	for i, m := range live[:min(k, len(live))] {
		if m.ID == w.cfg.ID || m.Busy || slices.ContainsFunc(types, func(t string) bool { return !m.Handles(t) }) {
			continue
		}
		out = append(out, i)
	}
	return out
}

// handOff hands the candidates prefetched from shard beyond a set of slots'
// worth to the members polling targets.
func (w *Worker) handOff(ctx context.Context, shard int, iv clock.Interval, targets []int) {
	pf := w.prefetched[shard]
	keep := cap(w.slots)
	if len(targets) == 0 || len(pf.cands) <= keep {
		return
	}
	s := w.scan(shard, iv)
	rest := slices.Clone(pf.cands[:keep])
	handed, t := 0, 0
	for _, c := range pf.cands[keep:] {
		if t == len(targets) || c.Pointer {
			rest = append(rest, c)
			continue
		}
		v, err := taskio.Load(ctx, w.st, c.Key)
		if err != nil || v.Task.Status != task.Pending || !dueNow(v.Task, iv) {
			rest = append(rest, c) // left to pollShard, which decides
			continue
		}
		if err := shards.Announce(ctx, w.st, v.Task, iv.Latest, targets[t]); err != nil {
			w.log.Warn("hand a task off", "task_id", c.ID, "err", err)
			rest = append(rest, c)
			continue
		}
		s.Seen(c, v.ETag)
		handed++
		if handed%keep == 0 {
			t++
		}
	}
	pf.cands = rest
	w.prefetched[shard] = pf
	if handed > 0 {
		w.log.Debug("handed tasks off to idle members", "shard", shard, "tasks", handed, "members", min(t+1, len(targets)))
	}
}
