package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// wakeupOptions are the report's settings for a fleet of workers: one
// shard per worker (16 for 10), the bucket pre-partitioned as the scale
// grid's (reportOptions), seed 1.
func wakeupOptions(workers int, variant string) WakeupOptions {
	shards := max(16, workers)
	return WakeupOptions{Variant: variant, Workers: workers, Shards: shards, Seed: 1,
		Model: reportOptions(workers, shards).Model}
}

// runWakeup runs one wake-up run in a synctest bubble of its own.
func runWakeup(t *testing.T, opts WakeupOptions) WakeupResult {
	t.Helper()
	var res WakeupResult
	synctest.Test(t, func(t *testing.T) {
		var err error
		if res, err = Wakeup(opts); err != nil {
			t.Fatal(err)
		}
	})
	return res
}

const wakeupHeader = "WAKEUP | workers | variant | at backlog: members/standbys/asleep | tasks | submitted in | first claim | 50% joined | 90% joined | 100% joined | 50% busy | 90% busy | 100% busy | busy | makespan | ideal | PUT | GET | HEAD | LIST | DELETE | fleet share | $ | 503s | submit errors | idle req/h (fleet) | wall"

func wakeupRow(r WakeupResult, wall time.Duration) string {
	s := func(d time.Duration) string {
		if d < 0 {
			return "never"
		}
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	q := r.Requests
	share := 0.0
	if q.Total() > 0 {
		share = r.Fleet.Total() / q.Total()
	}
	return strings.Join([]string{"WAKEUP", fmt.Sprint(r.Options.Workers), r.Options.Variant,
		fmt.Sprintf("%d/%d/%v", r.Members, r.Standbys, r.Asleep), fmt.Sprint(r.Tasks), s(r.Submitted),
		s(r.FirstClaim), s(r.Joined50), s(r.Joined90), s(r.Joined100), s(r.Busy50), s(r.Busy90), s(r.Busy100), fmt.Sprintf("%d/%d", r.Busy, r.Options.Workers),
		s(r.Makespan), s(r.Ideal),
		fmt.Sprintf("%.0f", q.PUT), fmt.Sprintf("%.0f", q.GET), fmt.Sprintf("%.0f", q.HEAD), fmt.Sprintf("%.0f", q.LIST), fmt.Sprintf("%.0f", q.DELETE),
		fmt.Sprintf("%.0f%%", 100*share), fmt.Sprintf("$%.4f", r.Dollars), fmt.Sprint(r.SlowDowns), fmt.Sprint(r.SubmitErrors),
		fmt.Sprintf("%.0f (%.0f)", r.IdlePerHour.Total(), r.IdleFleetPerHour.Total()), fmt.Sprintf("%.0fs", wall.Seconds())}, " | ")
}

// Ten elastic workers are at work soon after a backlog appears (issue
// 24), asleep or started on it. The bounds follow from the design, and
// the fleet before the standbys' roster (5e44086), whose standbys each
// read the fleet object every 25 s, misses every one of them by a
// minute or more (docs/scale.md, "Waking a fleet on a backlog").
func TestWakeupSmallFleetIsBusySoon(t *testing.T) {
	t.Run("asleep", func(t *testing.T) {
		// The first standby to read the ring joins within bell_poll
		// (1.5 s) of it and claims at its first listing: 3 s. That
		// listing sees many sets of slots, and the member asks at once
		// for members sized to it; the standbys, taking turns, read the
		// ask one at a time, each turn at most bell_poll after the last
		// (they planned it while the fleet slept): nine more joins within
		// 13.5 s of the first, 17 s with their requests. A member joining
		// gets a share at the busy member's next look, once a second,
		// and starts it at its next poll: every worker busy within 20 s.
		res := runWakeup(t, wakeupOptions(10, WakeAsleep))
		t.Log(wakeupRow(res, 0))
		t.Logf("members by second: %v", res.MembersBySecond)
		if !res.Asleep || res.Members > 1 {
			t.Errorf("the fleet met the backlog with %d members, asleep %v: want it asleep", res.Members, res.Asleep)
		}
		if res.FirstClaim < 0 || res.FirstClaim > 3*time.Second {
			t.Errorf("first claim %v after the first submit, want within 3 s", res.FirstClaim)
		}
		if res.Joined100 < 0 || res.Joined100 > 17*time.Second {
			t.Errorf("every worker a member after %v: want within 17 s", res.Joined100)
		}
		// Every worker busy. (Before the hand-off kept shares for the
		// members still to come, it gave the whole backlog to those not
		// busy at its first look, 38 tasks each for 4 slots with seed 1,
		// and one of the ten never ran a task.)
		if res.Busy100 < 0 || res.Busy100 > 20*time.Second {
			t.Errorf("every worker busy after %v (%d of %d ever): want within 20 s", res.Busy100, res.Busy, res.Options.Workers)
		}
		if res.Makespan < 0 {
			t.Errorf("%d of %d tasks done within %v", res.Done, res.Tasks, res.Options.Limit)
		}
	})
	t.Run("started on it", func(t *testing.T) {
		// Workers started within a second read the fleet object every
		// second for their first 30 s: the first joins and asks at its
		// first listing, the others join at their next read, all within
		// about 3 s. The first member's slots are full for a handler time
		// (5 s), after which its look hands the backlog on: every worker
		// busy within 12 s.
		res := runWakeup(t, wakeupOptions(10, WakeCold))
		t.Log(wakeupRow(res, 0))
		if res.Joined100 < 0 || res.Joined100 > 5*time.Second {
			t.Errorf("every worker a member after %v: want within 5 s", res.Joined100)
		}
		if res.Busy100 < 0 || res.Busy100 > 12*time.Second {
			t.Errorf("every worker busy after %v (%d of %d ever): want within 12 s", res.Busy100, res.Busy, res.Options.Workers)
		}
		if res.Makespan < 0 {
			t.Errorf("%d of %d tasks done within %v", res.Done, res.Tasks, res.Options.Limit)
		}
	})
}

// TestWakeupReport measures how soon an elastic fleet is at work on a
// backlog (docs/scale.md, "Waking a fleet on a backlog"): fleets of 10,
// 100 and 1,000 workers, asleep, awake and started on the backlog.
//
//	S3QUEUE_SCALE=1 go test ./internal/sim -run TestWakeupReport -timeout 300m -v | grep ^WAKEUP
//	S3QUEUE_SCALE=1 S3QUEUE_WAKE_SIZES=1000 S3QUEUE_WAKE_VARIANTS=asleep go test ./internal/sim -run TestWakeupReport -timeout 60m -v
//
// S3QUEUE_WAKE_LIMIT (a duration) bounds each episode (default 15m),
// S3QUEUE_WAKE_SETTLE the wait for the fleet's state before it (default 20m).
func TestWakeupReport(t *testing.T) {
	if os.Getenv("S3QUEUE_SCALE") == "" {
		t.Skip("set S3QUEUE_SCALE=1 to run the wake-up report (tens of minutes on 2 cores)")
	}
	defer scaleRuntime()()
	sizes := []int{10, 100, 1000}
	if s := os.Getenv("S3QUEUE_WAKE_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("S3QUEUE_WAKE_SIZES=%q: %v", s, err)
			}
			sizes = append(sizes, n)
		}
	}
	variants := []string{WakeAsleep, WakeAwake, WakeCold}
	if s := os.Getenv("S3QUEUE_WAKE_VARIANTS"); s != "" {
		variants = strings.Split(s, ",")
	}
	fmt.Println(wakeupHeader)
	for _, n := range sizes {
		for _, v := range variants {
			began := time.Now()
			opts := wakeupOptions(n, v)
			opts.Progress = os.Stderr
			if s := os.Getenv("S3QUEUE_WAKE_LIMIT"); s != "" {
				d, err := time.ParseDuration(s)
				if err != nil {
					t.Fatalf("S3QUEUE_WAKE_LIMIT=%q: %v", s, err)
				}
				opts.Limit = d
			}
			if s := os.Getenv("S3QUEUE_WAKE_SETTLE"); s != "" {
				d, err := time.ParseDuration(s)
				if err != nil {
					t.Fatalf("S3QUEUE_WAKE_SETTLE=%q: %v", s, err)
				}
				opts.Settle = d
			}
			res := runWakeup(t, opts)
			fmt.Println(wakeupRow(res, time.Since(began)))
			fmt.Printf("WAKEDETAIL workers=%d variant=%s at=%v members-by-second=%v requests=%v fleet=%v submit-errors=%d done=%d %s\n",
				n, v, res.At, res.MembersBySecond, res.Requests, res.Fleet, res.SubmitErrors, res.Done, res.Left)
		}
	}
}

// TestWakeupTrace writes one wake-up run's trace (the workers' events and
// debug logs) to S3QUEUE_WAKE_TRACE: S3QUEUE_WAKE_RUN=10/asleep (workers/variant)
// and S3QUEUE_WAKE_SEED pick the run.
func TestWakeupTrace(t *testing.T) {
	name := os.Getenv("S3QUEUE_WAKE_TRACE")
	if name == "" {
		t.Skip("set S3QUEUE_WAKE_TRACE=FILE to trace a wake-up run")
	}
	n, v := 10, WakeAsleep
	if s := os.Getenv("S3QUEUE_WAKE_SEEDS"); s != "" {
		// A sweep of seeds 1..N, no trace.
		seeds, _ := strconv.Atoi(s)
		for seed := 1; seed <= seeds; seed++ {
			for _, v := range []string{WakeAsleep, WakeAwake, WakeCold} {
				o := wakeupOptions(n, v)
				o.Seed = uint64(seed)
				fmt.Printf("seed %d %s\n", seed, wakeupRow(runWakeup(t, o), 0))
			}
		}
		return
	}
	if s := os.Getenv("S3QUEUE_WAKE_RUN"); s != "" {
		if _, err := fmt.Sscanf(strings.Replace(s, "/", " ", 1), "%d %s", &n, &v); err != nil {
			t.Fatalf("S3QUEUE_WAKE_RUN=%q: %v", s, err)
		}
	}
	opts := wakeupOptions(n, v)
	if seed, ok := envInt(t, "S3QUEUE_WAKE_SEED"); ok {
		opts.Seed = uint64(seed)
	}
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts.Trace = f
	res := runWakeup(t, opts)
	fmt.Println(wakeupRow(res, 0))
}
