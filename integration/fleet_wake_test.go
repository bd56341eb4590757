package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFleetWakesForWorkMinIO (issue 24) starts eight `s3queue worker
// --concurrency 1` processes together on 160 waiting tasks of 0.3 s: every
// worker runs tasks, each starts its first within seconds of its own
// start; the backlog's makespan against twice the ideal and a few seconds
// is logged as a figure, not asserted (every bound is derived in a comment
// where it is set). The fleet is then left idle until fleet.json says it
// is asleep with no member, and a burst of 160 tasks of 0.5 s is
// submitted: the standbys answer the ring and join at their turns, every
// worker runs some of the burst; its makespan against a bound derived from
// the turns' pace is a figure too.
//
// The burst is long enough (10 s ideal) for the last standby's turn to
// come while it lasts: eight standbys take up to 8 × bell_poll = 12 s to
// have all read the ring and the ask, and a burst of 80 tasks of 0.5 s
// (5 s ideal), shared from each join, would be done about then, leaving
// the last ones nothing to run.
//
// Beside that fleet it runs the first-pickup test (startFirstPickups) on
// three fleets of its own: their waits overlap this one's.
//
// Members leave after idle_leave and the last one sleeps after sleep_after
// (both 5 s here instead of 1 min and 30 s, so that the fleet is asleep
// within a minute); every setting the bounds derive from (standby_poll,
// bell_poll, the startup window, the look) is at its default.
func TestFleetWakesForWorkMinIO(t *testing.T) {
	t.Parallel()
	const (
		workers    = 8
		backlog    = 160
		backlogRun = 300 * time.Millisecond
		burst      = 160
		burstRun   = 500 * time.Millisecond
	)
	bin := buildCLI(t)
	pickups := startFirstPickups(t, bin)
	f := newFleetRunOf(t, bin, 4*time.Minute, "S3QUEUE_WORKER_IDLE_LEAVE=5s", "S3QUEUE_WORKER_SLEEP_AFTER=5s")
	ids := f.submitBatch(t, backlog, "job")
	ws := f.start(t, 1, workers, nil, "--concurrency", "1",
		"--exec", fmt.Sprintf("job=sleep %g", backlogRun.Seconds()), "--exec", fmt.Sprintf("burst=sleep %g", burstRun.Seconds()))
	start := ws[0].started

	t.Run("eight started together on a backlog", func(t *testing.T) {
		ideal := backlog * backlogRun / workers // 6 s
		// firstStartBound: how soon after its own start each worker starts
		// its first task.
		//   1 s  the first worker to read fleet.json (a new worker reads it
		//        at once and then every second) finds no member and joins;
		//        its first listing (a few tasks) leaves two sets of its
		//        slots or more behind, so it asks at once for a member or two;
		//   1 s  its first look (once a second: a LIST of up to 1,000 due
		//        tasks) sizes the ask to the backlog;
		//   1 s  the other workers, new, read the ask within a second and
		//        join (a CAS write each; a 412 among seven joiners is retried
		//        after a re-read);
		//   1 s  the first member's next look hands each joiner not busy a
		//        share: ready pointers in the joiner's shard;
		//   1 s  the joiner's next listing of its shard (its polls back off
		//        from 200 ms since it joined) finds them and it claims;
		//   2 s  for the process's start, opening the store, and MinIO's
		//        requests, with the other tests' processes on two cores.
		const firstStartBound = 2*fleetStartupPoll + 2*fleetLook + time.Second + 2*time.Second // 7 s
		// makespanBound (the issue asks for twice the ideal and a few
		// seconds): every worker runs by firstStartBound; from then the
		// hand-off gives members shares in proportion to their slots, each
		// no more than it runs before its next renewal, and the next one
		// when it renews not busy or is about to run dry, so shares may be
		// uneven at the tail but no member should be left with twice its
		// part. (The ideal counts the handlers' time only; each task also
		// costs a claim, a commit and a process start, about 0.1 s on
		// MinIO here.)
		makespanBound := 2*ideal + firstStartBound

		r := f.waitTasks(t, ws, "succeeded", ids, 2*time.Minute)
		makespan := r.last.Sub(start)
		starts := tallyEvents(t, ws, "started", nil)
		var lines []string
		for _, w := range ws {
			lines = append(lines, fmt.Sprintf("%s: %3d tasks, first started %v after its start",
				w.id, r.byWorker[w.id], starts.firstAt[w.id].Sub(w.started).Round(10*time.Millisecond)))
		}
		t.Logf("%d workers started together on %d waiting tasks of %v: the last ended %v after the start (ideal %v, bound %v)\n%s",
			workers, backlog, backlogRun, makespan.Round(10*time.Millisecond), ideal, makespanBound, strings.Join(lines, "\n"))
		for id, n := range r.times {
			if n > 1 {
				t.Errorf("task %s succeeded %d times (no worker was killed)", id, n)
			}
		}
		for _, w := range ws {
			if r.byWorker[w.id] == 0 {
				t.Errorf("%s ran no task of the backlog", w.id)
				continue
			}
			if d := starts.firstAt[w.id].Sub(w.started); d > firstStartBound {
				t.Errorf("%s started its first task %v after its start, want within %v", w.id, d.Round(10*time.Millisecond), firstStartBound)
			}
		}
		// The makespan is a figure (docs/performance.md), not an assertion:
		// under make test this package shares 2 cores with the simulator's
		// race-detector runs and the chaos suite, and took 23-26 s where
		// it takes 11.6-22.5 s alone (median 14.0 s).
		if makespan > makespanBound {
			t.Logf("FIGURE the backlog took %v, beyond %v (2 × the ideal %v + %v)", makespan.Round(10*time.Millisecond), makespanBound, ideal, firstStartBound)
		}
	})

	t.Run("eight asleep, a burst", func(t *testing.T) {
		asleep := f.waitAsleep(t, 2*time.Minute)
		t.Logf("fleet.json asleep with no member %v after the workers started", asleep.Sub(start).Round(100*time.Millisecond))
		// Past the startup window every standby reads at its turn only: the
		// doorbell's pace, which the bound below is derived from.
		f.waitStartupOver(t)
		ideal := burst * burstRun / workers // 10 s
		// makespanBound: all eight workers are standbys in the roster, and
		// they take turns reading fleet.json, one per bell_poll fleet-wide.
		// The first turn after the submit's ring (within bell_poll) answers
		// it: that worker joins, lists shard 0 (a sleeping fleet's tasks
		// land there) and asks for members sized to the burst; each later
		// turn is a standby that reads the ask and joins. So worker k (k = 0
		// .. 7, in turn order) joins within (k+1) × bell_poll and runs from
		// the next look (once a second) that hands it a share. With perfect
		// shares the burst's work (160 × 0.5 s = 80 worker-seconds) is done
		// at the ideal + the mean of those delays, 4.5 × bell_poll + look =
		// 7.75 s; shares may be uneven at the tail, as in the backlog: twice
		// the ideal. And a second for the submit's process and MinIO.
		makespanBound := 2*ideal + 9*fleetBellPoll/2 + fleetLook + time.Second // 28.75 s

		submitted := time.Now()
		ids := f.submitBatch(t, burst, "burst")
		r := f.waitTasks(t, ws, "succeeded", ids, 2*time.Minute)
		makespan := r.last.Sub(submitted)
		want := map[string]bool{}
		for _, id := range ids {
			want[id] = true
		}
		starts := tallyEvents(t, ws, "started", want)
		var lines []string
		order := slices.Clone(ws)
		slices.SortFunc(order, func(a, b *fleetWorker) int { return starts.firstAt[a.id].Compare(starts.firstAt[b.id]) })
		for _, w := range order {
			if n := r.byWorker[w.id]; n > 0 {
				lines = append(lines, fmt.Sprintf("%s: %2d tasks of the burst, the first started %v after the submit",
					w.id, n, starts.firstAt[w.id].Sub(submitted).Round(10*time.Millisecond)))
			} else {
				lines = append(lines, fmt.Sprintf("%s: no task of the burst", w.id))
			}
		}
		t.Logf("a burst of %d tasks of %v to the fleet asleep: the last ended %v after the submit (ideal %v, bound %v)\n%s",
			burst, burstRun, makespan.Round(10*time.Millisecond), ideal, makespanBound, strings.Join(lines, "\n"))
		for id, n := range r.times {
			if n > 1 {
				t.Errorf("task %s succeeded %d times (no worker was killed)", id, n)
			}
		}
		// Every worker runs some: the last standby's turn comes within 8 ×
		// bell_poll of the submit, 7 turns after the first, and it has a
		// share within a look and a listing more (about 11.5 s after the
		// first turn), while the burst, even shared perfectly from each
		// join, lasts at least the ideal + the mean delay after the first
		// turn (10 + 5.25 + 1 s).
		for _, w := range ws {
			if r.byWorker[w.id] == 0 {
				t.Errorf("%s ran no task of the burst", w.id)
			}
		}
		if makespan > makespanBound { // a figure, as the backlog's above
			t.Logf("FIGURE the burst took %v, beyond %v (2 × the ideal %v + 4.5 turns of bell_poll + a look + 1 s)",
				makespan.Round(10*time.Millisecond), makespanBound, ideal)
		}
	})

	t.Run("three asleep, submit --wait", pickups)
}
