package sim

import (
	"math/rand/v2"
	"sort"
	"time"

	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Long timers. A run is about 26 minutes of virtual time, and whatever a
// process does on an hour's timer or more never happens in it: the
// monitor's full walk of each shard's retained history (full_sweep, 6 h
// by default), which is where retention deletes the finished tasks below a
// shard's floor and where a requeue whose announcement was lost is found.
// A third of the seeds compress it through its config key to
// 2-4 minutes (Plan.FullSweep), from a source of their own, so that walks
// run several times a run, and InvRetained proves they do their work.
//
// The other long timers are constants of production code with no key
// (docs/reliability.md, "The fault model", lists them).

// monitorInterval is the monitors' interval (their default): a sweep's and
// a full walk's page per shard per tick.
const monitorInterval = 5 * time.Second

// planTimers draws the seed's compressed timers.
func planTimers(plan *Plan) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0xf0115e))
	if rng.IntN(3) == 0 {
		plan.FullSweep = time.Duration(2+rng.IntN(3)) * time.Minute
	}
}

// retainedBound is how long after a finished task's retention came due
// (or the quiet tail began, when every monitor is alive and nothing fails,
// if later) it may still be in the bucket under a full walk every
// fullSweep, in a shard of keys keys listed maxPage at a time: the walk
// that was under way may have passed it, the next starts fullSweep after
// that one ended, and a walk lists a page per shard per tick, so it takes
// up to (keys / maxPage + 1) ticks; where a conditional DELETE is ignored
// the task is tombstoned in one walk and deleted in the next: two walks,
// and a tick of room.
func retainedBound(fullSweep time.Duration, keys, maxPage int) time.Duration {
	walk := time.Duration(keys/maxPage+2) * monitorInterval
	return 2*(fullSweep+walk) + monitorInterval
}

// checkRetained proves InvRetained on a seed whose full walks run within
// the run: at the end, no finished task whose retention came due before
// the quiet tail is left more than retainedBound after the quiet tail
// began (its monitors, restored then, sweep from each shard's first key,
// and every sweep after moves the floor past a run of finished tasks,
// leaving them to the full walks). tasks is the checker's state of every
// task.
func (w *world) checkRetained(tasks map[string]*taskState, end time.Time, add func(inv, id, format string, args ...any)) {
	if w.plan.FullSweep == 0 {
		return
	}
	keys := make(map[int]int) // shard -> keys in it at the end
	for k := range w.srv.Objects("tasks/") {
		if s, _, err := task.ParseKey(k); err == nil {
			keys[s]++
		} else if p, err := shards.ParsePointerKey(k); err == nil {
			keys[p.In]++
		}
	}
	ids := make([]string, 0, len(tasks))
	for id := range tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		st := tasks[id]
		if st.t == nil || !st.t.Status.Terminal() {
			continue
		}
		due := st.changed.Add(max(w.opts.Retention, st.t.MinRetention()))
		if !due.Before(w.quietAt) {
			// Finished in the quiet tail, it may lie above its shard's
			// floor in a shard the sweeps have backed off from: there the
			// next sweep comes within sweep_max (10 min), or, while the
			// fleet sleeps, an hour (seed 800112), not a full walk.
			continue
		}
		from := w.quietAt
		bound := retainedBound(w.plan.FullSweep, keys[st.t.Shard], w.plan.MaxPage)
		if end.Sub(from) > bound {
			add(InvRetained, id, "%s since %s, its retention due at %s, still there at the end, %v later (full walks every %v, bound %v)",
				st.t.Status, st.changed.Format("15:04:05"), due.Format("15:04:05"), end.Sub(due).Round(time.Second), w.plan.FullSweep, bound)
		}
	}
}
