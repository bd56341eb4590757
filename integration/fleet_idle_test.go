package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// startFirstPickups starts issue 24's first-pickup test, which
// TestFleetWakesForWorkMinIO runs beside its own fleet: with a fleet asleep
// (no member; its standbys' turns are the doorbell), `s3queue submit
// --wait` of a 0.5 s task answers within a bell_poll, the task, a wait
// poll and a margin. It is tried three times, on three fleets of three
// workers each (each in a bucket of its own), so that the tries need not
// wait, one after the other, for a fleet to fall asleep again; and beside
// another test's fleet, as their waits for sleep and for the startup
// window overlap. The returned function waits for the tries and checks
// them.
//
// The last member sleeps after sleep_after (5 s here instead of 30 s, so
// that the fleet is asleep within seconds); bell_poll and the startup
// window, which the bound derives from, are at their defaults.
func startFirstPickups(t *testing.T, bin string) func(t *testing.T) {
	const (
		tries   = 3
		workers = 3
		run     = 500 * time.Millisecond
		stagger = 2 * time.Second
	)
	// pickupBound: from the start of `s3queue submit --wait` to its exit.
	//   0.5 s  the submit's process start, opening the store, the task's
	//          PUT and the ring (a CAS write on fleet.json);
	//   1.5 s  the next standby's turn, once per bell_poll fleet-wide,
	//          reads the ring and answers it: it joins, lists shard 0 and
	//          claims the task (a PUT, a LIST, a GET and a PUT, tens of ms
	//          on MinIO);
	//   0.5 s  the task;
	//   1 s    the wait's next poll of the task (at most a second apart);
	//   0.5 s  for MinIO and the processes on two busy cores.
	const pickupBound = 500*time.Millisecond + fleetBellPoll + run + fleetWaitPollMax + 500*time.Millisecond // 4 s

	fleets := make([]*fleetRun, tries)
	for i := range fleets {
		fleets[i] = newFleetRunOf(t, bin, 3*time.Minute, "S3QUEUE_WORKER_SLEEP_AFTER=5s")
		fleets[i].start(t, 1, workers, nil, "--exec", fmt.Sprintf("job=sleep %g", run.Seconds()))
	}

	type result struct {
		id           string
		start        time.Time
		took, pickup time.Duration
		asleepAfter  time.Duration
		err          error
	}
	results := make([]result, tries)
	var wg sync.WaitGroup
	// The tries end with the test even if it fails before it checks them.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, f := range fleets {
		wg.Go(func() {
			res := &results[i]
			asleep, err := f.asleepWithin(ctx, 2*time.Minute)
			if err != nil {
				res.err = err
				return
			}
			res.asleepAfter = asleep.Sub(f.workers[0].started)
			// Past the startup window the standbys read at their turns
			// only (bell_poll fleet-wide), not every second each; and the
			// tries are staggered, so that their processes do not start
			// at the same moment.
			until := f.workers[len(f.workers)-1].started.Add(fleetStartupWindow + time.Second + time.Duration(i)*stagger)
			select {
			case <-time.After(time.Until(until)):
			case <-ctx.Done():
				res.err = ctx.Err()
				return
			}
			if _, err := f.asleepWithin(ctx, 0); err != nil {
				res.err = fmt.Errorf("the fleet woke before the try: %w", err)
				return
			}
			res.start = time.Now()
			out, err := f.cli("", "submit", "--type", "job", "--input", "{}", "--wait", "--wait-timeout", "1m")
			res.took = time.Since(res.start)
			if err != nil {
				res.err = err
				return
			}
			res.id = strings.Fields(out)[0]
		})
	}
	return func(t *testing.T) {
		wg.Wait()
		for i, r := range results {
			if r.err != nil {
				t.Errorf("try %d: %v", i+1, r.err)
				continue
			}
			for _, w := range fleets[i].workers {
				for _, e := range w.readEvents(t) {
					if e.Kind == "claimed" && e.TaskID == r.id {
						r.pickup = e.Time.Sub(r.start)
					}
				}
			}
			t.Logf("try %d: the fleet asleep with no member %v after its start; submit --wait of a %v task answered in %v (claimed %v after the submit started; bound %v)",
				i+1, r.asleepAfter.Round(100*time.Millisecond), run, r.took.Round(10*time.Millisecond), r.pickup.Round(10*time.Millisecond), pickupBound)
			if r.took > pickupBound {
				t.Errorf("try %d: submit --wait answered in %v, want within %v", i+1, r.took.Round(10*time.Millisecond), pickupBound)
			}
		}
	}
}
