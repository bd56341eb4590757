package sim

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/ratelimit"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// planRateLimit gives a quarter of the seeds a rate limit on the task type,
// set on every worker: a small N per a short interval of virtual time, so
// that it binds whenever several tasks are due at once. It draws from a
// source of its own (the other seeds' plans stay as they were). The
// slowest limit drawn, 1 per 5 s, still starts every task of a run (at most
// 80, a few attempts each) well within the quiet tail. A snooze's claim is
// a start too, so under a limit the handler snoozes a task only
// limitedSnoozes times, not up to task.MaxSnoozes (51 starts a task).
func planRateLimit(plan *Plan) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x7a7e1))
	if rng.IntN(4) != 0 {
		return
	}
	intervals := []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second}
	plan.RateLimit = &worker.RateLimit{N: 1 + rng.IntN(3), Interval: intervals[rng.IntN(len(intervals))]}
}

// checkRateLimit proves that no window of the limit has more claims of the
// type than the limit allows. A start is a claim: a write that makes the
// task running under a claim id it did not have before. It counts in the
// window, by S3 time, in which its request was sent (Entry.Sent: the
// server's time when its caller sent it; a request the network holds
// lands later, but the worker decided on it while the window was open,
// which is all a worker can decide on). Zombies count too.
func (w *world) checkRateLimit(log []Entry, add func(inv, id, format string, args ...any)) {
	l := *w.plan.RateLimit
	type claim struct {
		id, proc string
		at       time.Time
	}
	windows := make(map[time.Time][]claim)
	for _, e := range log {
		if !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) || e.New == nil {
			continue
		}
		next, err := task.Decode(e.New)
		if err != nil || next.Status != task.Running || next.Claim == nil || next.Type != taskType {
			continue
		}
		if prev, err := task.Decode(e.Old); err == nil && prev.Claim != nil && prev.Claim.ID == next.Claim.ID {
			continue // a renewal, not a claim
		}
		start, _ := ratelimit.Window(e.Sent, l.Interval)
		windows[start] = append(windows[start], claim{next.ID, e.Proc, e.Sent})
	}
	for _, start := range slices.SortedFunc(maps.Keys(windows), time.Time.Compare) {
		cs := windows[start]
		if len(cs) <= l.N {
			continue
		}
		var who []string
		for _, c := range cs {
			who = append(who, c.proc+" "+c.id+" at "+c.at.Format("15:04:05.000"))
		}
		add(InvRateLimit, cs[0].id, "%d claims of %s in the window starting %s, over the limit %s: %s",
			len(cs), taskType, start.Format("15:04:05"), l, strings.Join(who, "; "))
	}
}
