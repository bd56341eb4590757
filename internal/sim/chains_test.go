package sim

import (
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// TestPromptReleaseCountsFromTheLastTaskAhead: under a rate limit the
// wait of a released dependent counts from its claimant's last start or
// end of an attempt of a task of an older id (seed 540314); without one,
// or when another worker did that work, or for newer tasks, it counts from
// the release.
func TestPromptReleaseCountsFromTheLastTaskAhead(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 20, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	run := func(limit *worker.RateLimit, aheadBy, claimant string, claimAt int) []string {
		w := &world{plan: Plan{RateLimit: limit}, chainsAt: t0}
		var res Result
		var got []string
		add := func(inv, id, format string, args ...any) { got = append(got, inv+" "+id) }
		waiting := make(map[string]*taskState)
		tasks := map[string]*taskState{}
		// write applies a worker's write of id's new status, as Check does.
		write := func(id string, status task.Status, proc string, s int) {
			st := tasks[id]
			if st == nil {
				st = &taskState{t: &task.Task{ID: id, Status: task.Pending}, dueAt: t0}
				tasks[id] = st
			}
			nt := *st.t
			nt.Status = status
			e := Entry{At: at(s), Proc: proc}
			if status == task.Pending {
				st.dueAt = e.At
			}
			w.promptAhead(waiting, st.t, &nt, e, true)
			w.promptRelease(waiting, st, &nt, e, true, &res, add)
			st.t = &nt
		}
		tasks["00B"] = &taskState{t: &task.Task{ID: "00B", Status: task.Blocked, Deps: []task.Dep{{ID: "00P"}}}}
		write("00B", task.Pending, "w1", 1)     // released
		write("00A", task.Running, aheadBy, 30) // an older task starts
		write("00A", task.Succeeded, aheadBy, 60)
		write("00C", task.Running, claimant, 70) // a newer one: no new start of the clock
		write("00C", task.Succeeded, claimant, 72)
		write("00B", task.Running, claimant, claimAt)
		return got
	}
	limit := &worker.RateLimit{N: 1, Interval: 2 * time.Second} // bound 20 + (3+2)×2 = 30 s
	for _, c := range []struct {
		name              string
		limit             *worker.RateLimit
		aheadBy, claimant string
		claimAt           int
		violations        int
	}{
		{"limited, 25 s after the older task ended", limit, "w1", "w1", 85, 0},
		{"limited, 33 s after the older task ended", limit, "w1", "w1", 93, 1},
		{"limited, the older task worked by another worker", limit, "w2", "w1", 85, 1},
		{"unlimited, 25 s after the older task ended", nil, "w1", "w1", 85, 1},
	} {
		if got := run(c.limit, c.aheadBy, c.claimant, c.claimAt); len(got) != c.violations {
			t.Errorf("%s: violations %v, want %d", c.name, got, c.violations)
		}
	}
}
