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
	if !m.handed.IsZero() && now.Sub(m.handed) < w.cfg.PollMax || w.pausedAll() {
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
	keep := w.capacity()
	for _, shard := range m.assign.Own {
		if pf := w.prefetched[shard]; len(pf.cands) < keep*(1+len(targets)) {
			var p pass
			cands, err := w.list(ctx, shard, iv, &p, keep*len(targets))
			if err != nil {
				w.log.Warn("list a shard to hand work off", "shard", shard, "err", err)
				continue
			}
			w.prefetched[shard] = w.relisted(w.prefetched[shard], cands)
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
// worth to the members polling targets, keep (a set of slots) to each. As
// claims do (claim.go), it loads and announces up to maxClaimBatch tasks at
// once, and decides and settles them on the scheduler in candidate order:
// handed off one by one, the look kept a busy member from claiming for
// seconds (a GET and a PUT each, for up to keep tasks per idle member).
func (w *Worker) handOff(ctx context.Context, shard int, iv clock.Interval, targets []int) {
	pf := w.prefetched[shard]
	keep := w.capacity()
	if len(targets) == 0 || len(pf.cands) <= keep {
		return
	}
	s := w.scan(shard, iv)
	tail := pf.cands[keep:]
	gone := make([]bool, len(tail)) // handed off
	// planned counts the tasks sent (targets[planned/keep] gets the next),
	// handed those that got there.
	quota, planned, handed := keep*len(targets), 0, 0
	for i := 0; i < len(tail) && handed < quota; {
		var batch []int // indexes in tail of the tasks (not pointers) to look at
		for ; i < len(tail) && len(batch) < min(maxClaimBatch, quota-handed); i++ {
			if !tail[i].Pointer {
				batch = append(batch, i)
			}
		}
		vs := make([]taskio.Versioned, len(batch))
		errs := make([]error, len(batch))
		concurrently(len(batch), func(j int) { vs[j], errs[j] = taskio.Load(ctx, w.st, tail[batch[j]].Key) })
		var send []int // indexes in batch of the tasks to hand off
		for j := range batch {
			// One that is not pending and due is left to pollShard, which
			// decides.
			// A paused one is held there (pause.go), not handed off.
			if errs[j] == nil && vs[j].Task.Status == task.Pending && dueNow(vs[j].Task, iv) && !w.pausedType(vs[j].Task.Type) {
				send = append(send, j)
			}
		}
		clear(errs)
		concurrently(len(send), func(k int) {
			j := send[k]
			errs[j] = shards.Announce(ctx, w.st, vs[j].Task, iv.Latest, targets[min((planned+k)/keep, len(targets)-1)])
		})
		for _, j := range send {
			c := tail[batch[j]]
			if errs[j] != nil {
				w.log.Warn("hand a task off", "task_id", c.ID, "err", errs[j])
				continue
			}
			s.Seen(c, vs[j].ETag)
			gone[batch[j]] = true
			handed++
		}
		planned += len(send)
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
		w.log.Debug("handed tasks off to idle members", "shard", shard, "tasks", handed, "members", min((planned-1)/keep+1, len(targets)))
	}
}
