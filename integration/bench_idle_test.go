package integration

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
)

// BenchmarkIdleFleet measures what an idle fleet costs a month and how
// fast it picks up a task after sleeping: 50 elastic workers with default
// settings and a monitor, idle. After the fleet settled (asleep, with no
// member: the standbys take turns at the doorbell) and a warm-up of S3QUEUE_BENCH_IDLE_WARMUP (default 10m: the
// monitor's back-off on the quiet shards reaches sweep_max), it counts
// every request for S3QUEUE_BENCH_WINDOW, at least 10m (one cycle of the
// monitor's quiet sweeps), then submits one task at a time (three times,
// each after the fleet fell asleep again) and measures its pickup. It runs
// with default settings, and under direct dispatch, where each worker also
// holds a lease of its own and sleeps at a doorbell of its own: there a
// task is submitted once every worker's lease says asleep and the
// producers' views of the leases are past the mark (worker_discovery_cache_ttl_secs
// + awake_grace), so the worker it is routed to reads only its doorbell.
func BenchmarkIdleFleet(b *testing.B) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"default", nil},
		{"direct", directEnv(nil)},
	} {
		b.Run(c.name, func(b *testing.B) { runIdleFleet(b, c.env) })
	}
}

func runIdleFleet(b *testing.B, env map[string]string) {
	const workers = 50
	window := max(benchWindow(), 10*time.Minute)
	warmup := envDuration("S3QUEUE_BENCH_IDLE_WARMUP", 10*time.Minute)
	r := newRig(b, "q")
	conf := settings(b, env)
	isDirect := conf.QueueSection.Mode() == shards.DispatchDirect
	r.startProducer(conf.Producer())
	r.startMonitor(conf.Monitor())
	for range workers {
		r.startWorker(conf.Worker(), 0, false, nil)
	}
	settle := r.settle(12 * time.Minute) // the member watches the doorbell for a round of the standbys at bell_poll (docs/shards.md)
	time.Sleep(warmup)                   // a stretch of idle time under measurement, not a wait for work

	before := r.m.read()
	segs := []reading{before}
	if segEvery := envDuration("S3QUEUE_BENCH_SEGMENT", 0); segEvery > 0 {
		for end := before.at.Add(window); time.Until(end) > segEvery; {
			time.Sleep(segEvery)
			segs = append(segs, r.m.read())
		}
	}
	time.Sleep(time.Until(before.at.Add(window)))
	after := r.m.read()
	segs = append(segs, after)
	win := after.since(before)
	hours := win.at.Sub(before.at).Hours()
	elapsed := after.at.Sub(before.at)

	// Per-worker rates: the median worker is a standby; the fleet's fixed
	// part is everything beyond workers x the median.
	var perWorker []cost.Requests
	for _, bw := range r.workers {
		perWorker = append(perWorker, win.comp[bw.id])
	}
	slices.SortFunc(perWorker, func(a, b cost.Requests) int { return cmp.Compare(a.Total(), b.Total()) })
	median := perWorker[len(perWorker)/2]
	all := win.total().Scale(1 / hours)
	perWorkerHr := median.Scale(1 / hours)
	perFleetHr := clampZero(all.Sub(perWorkerHr.Scale(workers)))
	bill := cost.Monthly(cost.Workload{Workers: workers, Rates: cost.Rates{PerWorkerHour: perWorkerHr, PerFleetHour: perFleetHr}})
	monthly := all.Scale(cost.HoursPerMonth).Dollars(cost.S3Standard)
	anchor := perWorker[len(perWorker)-1]

	// Pickups from the sleeping fleet.
	var pickups []time.Duration
	for i := range 3 {
		if i > 0 && !r.waitUntil(8*time.Minute, 500*time.Millisecond, r.asleepWithNoMember) {
			b.Fatalf("the fleet did not fall asleep again")
		}
		if isDirect {
			if !r.waitUntil(3*time.Minute, time.Second, r.inboxesAsleep) {
				b.Fatalf("the workers' leases did not all say asleep")
			}
			// Past the producers' view of the leases: the workers read only their doorbells.
			time.Sleep(conf.DirectSection.DiscoveryTTL + conf.WorkerSection.AwakeGrace + time.Second)
		}
		seq := r.nextSeq()
		if _, err := r.submit(benchInput{Seq: seq}, producer.Options{}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		ok := r.tr.waitFor(ctx, func() bool { _, _, ok := r.tr.startedAt(seq); return ok })
		cancel()
		if !ok {
			b.Fatalf("the task submitted to the idle fleet was not picked up within a minute")
		}
		ds, _ := r.tr.pickups([]int{seq})
		pickups = append(pickups, ds[0])
	}
	worst := slices.Max(pickups)

	printRows(os.Stdout, fmt.Sprintf("BenchmarkIdleFleet: %d elastic workers + monitor, idle, settings: %s", workers, describeSettings(env)), []resultRow{
		{"settle (start -> asleep, no member)", fmtDur(settle), "", ""},
		{"warm-up before the window", fmtDur(warmup), "", ""},
		{"window", fmtDur(elapsed), "", ""},
		{"requests per hour, whole fleet + monitor", all.String(), "", ""},
		{"per idle worker-hour (median worker: a standby)", perWorkerHr.String(), "", ""},
		{"per fleet-hour beyond that (the monitor, the turns' unevenness)", perFleetHr.String(), "", ""},
		{"busiest worker per hour", anchor.Scale(1 / hours).String(), "", ""},
		{"$/month idle (measured rate x 720 h)", fmt.Sprintf("$%.2f", monthly), "<= $1", verdict(monthly <= 1)},
		{"pickup of a task submitted to the sleeping fleet", fmt.Sprintf("%v (max of %d)", fmtDur(worst), len(pickups)), "about 1s (<= 1.5s)", verdict(worst <= 1500*time.Millisecond)},
		{"pickups", fmt.Sprint(pickups), "", ""},
	})
	printBreakdown(os.Stdout, win, elapsed, 0)
	if len(segs) > 2 {
		fmt.Println("segments:")
		for i := 1; i < len(segs); i++ {
			d := segs[i].since(segs[i-1])
			h := segs[i].at.Sub(segs[i-1].at).Hours()
			perH := d.total().Scale(1 / h)
			fmt.Printf("  %v-%v: per hour %s: $%.2f/month\n", segs[i-1].at.Sub(before.at).Round(time.Second),
				segs[i].at.Sub(before.at).Round(time.Second), perH, perH.Scale(cost.HoursPerMonth).Dollars(cost.S3Standard))
		}
	}
	fmt.Println()
	bill.Print(os.Stdout)
	fmt.Printf("logs: %s\n", r.log.summary())

	b.ReportMetric(monthly, "$/month")
	b.ReportMetric(ms(worst), "pickup-ms")
	for _, op := range s3store.Ops() {
		b.ReportMetric(perWorkerHr.Of(op), op.String()+"/worker-h")
	}
	b.ReportMetric(0, "ns/op")
}
