package integration

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
)

// BenchmarkSeedWorkload measures what a queue costs a month and how fast
// it picks tasks up under a steady load (runWorkload), for the seed
// workload: 50 elastic workers, 100K tasks/day (1.16 tasks/s), a 100 ms
// handler, over S3QUEUE_BENCH_WINDOW (default 3 minutes) after the fleet
// settled and a warm-up under load; with default settings, and with
// profile = "economy" (the keys' declared Economy values).
func BenchmarkSeedWorkload(b *testing.B) {
	for _, c := range []struct {
		name   string
		env    map[string]string
		target float64
		p50    time.Duration
	}{
		{"default", nil, 65, 2 * time.Second},
		{"economy", map[string]string{"S3QUEUE_PROFILE": "economy"}, 50, time.Minute},
		// Direct dispatch (docs/direct-dispatch.md), default settings
		// otherwise: held to the shared mode's targets.
		{"direct", directEnv(nil), 65, 2 * time.Second},
	} {
		b.Run(c.name, func(b *testing.B) {
			runWorkload(b, workload{name: "BenchmarkSeedWorkload/" + c.name, workers: 50, tasksPerDay: seedTasksPerDay,
				work: 100 * time.Millisecond, window: benchWindow(), env: c.env, costTarget: c.target, p50Target: c.p50})
		})
	}
}

// BenchmarkMillionPerDay measures the same as BenchmarkSeedWorkload for
// 200 elastic workers, 1M tasks/day (11.6 tasks/s), a 100 ms handler, over
// S3QUEUE_BENCH_WINDOW; with default settings, and tuned for fewer requests per task: poll_batch 30 (after
// finding work, list when ~30 tasks have arrived: 2.6 s at 11.6/s), 16
// slots (a batch never keeps a member full for long, so it does not ask for
// help), standbys reading the fleet object every 2 minutes (with 199 of
// them at random phases one still reads every 0.6 s), and the monitor's
// walk of the retained history once a day (7M keys at this volume; the
// walk does not fall in the window, docs/performance.md adds it).
func BenchmarkMillionPerDay(b *testing.B) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"default", nil},
		{"tuned", map[string]string{"S3QUEUE_WORKER_CONCURRENCY": "16", "S3QUEUE_WORKER_POLL_BATCH": "30", "S3QUEUE_WORKER_STANDBY_POLL": "2m", "S3QUEUE_MONITOR_FULL_SWEEP": "24h"}},
		{"direct", directEnv(nil)},
	} {
		b.Run(c.name, func(b *testing.B) {
			runWorkload(b, workload{name: "BenchmarkMillionPerDay/" + c.name, workers: 200, tasksPerDay: 1_000_000,
				work: 100 * time.Millisecond, window: benchWindow(), env: c.env, costTarget: 480, p50Target: 2 * time.Second})
		})
	}
}

// workload is a steady load on an elastic fleet and the targets it is held
// against.
type workload struct {
	name        string
	workers     int
	tasksPerDay float64
	work        time.Duration // handler time per task
	window      time.Duration
	env         map[string]string // settings: environment overrides of queue.toml
	// targets
	costTarget float64
	p50Target  time.Duration
}

// workloadResult is what runWorkload measured.
type workloadResult struct {
	tasks        int // submitted in the window
	claimed      int // first started in the window
	elapsed      time.Duration
	settle       time.Duration
	win          reading
	perTask      cost.Requests // every request in the window that is not liveness, per task
	perWorkerHr  cost.Requests // a standby's requests per hour
	perFleetHr   cost.Requests // the rest of liveness per hour
	bill         cost.Bill
	measuredBill float64 // the window's requests / its length x a month, at the measured rate
	p50, p99     time.Duration
	refused      int64 // 412s in the window, every class
	membersMax   int
	membersMean  float64
}

// runWorkload starts the fleet, lets it settle to idle (one member asleep
// at the doorbell: an elastic fleet's state after a quiet spell), then
// submits tasks at the workload's rate (Poisson arrivals, fixed seed) for
// the warm-up and the window, and counts every request in the window (or,
// without a warm-up, until the window's last task finished).
func runWorkload(b *testing.B, wl workload) workloadResult {
	r := newRig(b, "q")
	conf := settings(b, wl.env)
	r.startProducer(conf.Producer())
	r.startMonitor(conf.Monitor())
	for range wl.workers {
		r.startWorker(conf.Worker(), wl.work, false, nil)
	}
	// The window spans at least one standby poll, so every standby's reads
	// are in it.
	wl.window = max(wl.window, conf.WorkerSection.StandbyPoll+time.Minute)
	var res workloadResult
	res.settle = r.settle(12 * time.Minute) // the member watches the doorbell for a round of the standbys at bell_poll (docs/shards.md)

	// Sample membership once a second while the load runs.
	var memMu sync.Mutex
	var memSum, memN int
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				n := r.members()
				memMu.Lock()
				memSum, memN = memSum+n, memN+1
				res.membersMax = max(res.membersMax, n)
				memMu.Unlock()
			}
		}
	}()
	// Which workers are members at any moment of the window: the others
	// were standbys throughout, and their requests are pure liveness.
	everMember := map[string]bool{}
	var emMu sync.Mutex
	markMembers := func() {
		emMu.Lock()
		defer emMu.Unlock()
		for _, bw := range r.workers {
			if ok, _ := bw.w.Member(); ok {
				everMember[bw.id] = true
			}
		}
	}
	markMembers()
	stopMark := make(chan struct{})
	marked := make(chan struct{})
	go func() {
		defer close(marked)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopMark:
				return
			case <-t.C:
				markMembers()
			}
		}
	}()

	rate := wl.tasksPerDay / 86400
	rng := rand.New(rand.NewPCG(1, uint64(wl.workers)))
	// The load runs for S3QUEUE_BENCH_WARMUP before the window opens, so
	// that the back-offs of quiet sweeps (drain shards, the monitor's quiet
	// shards) are past their first steps, as they are on a queue that has
	// run for a while.
	warmup := envDuration("S3QUEUE_BENCH_WARMUP", 2*time.Minute)
	measuring := warmup <= 0
	before := r.m.read()
	start := time.Now()
	at := start
	var subWG sync.WaitGroup
	var seqs, warm []int
	var subErrs atomic.Int64
	// Optional segments: a reading every S3QUEUE_BENCH_SEGMENT, to show how
	// the rates settle as back-offs (drain sweeps, monitor sweeps) reach
	// their caps over a long window.
	segEvery := envDuration("S3QUEUE_BENCH_SEGMENT", 0)
	segs := []reading{before}
	segTasks := []int{0}
	for {
		at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if at.Sub(start) > max(warmup, 0)+wl.window {
			break
		}
		time.Sleep(time.Until(at))
		if !measuring && at.Sub(start) >= warmup {
			measuring = true
			before = r.m.read()
			segs, segTasks = []reading{before}, []int{0}
			memMu.Lock()
			memSum, memN, res.membersMax = 0, 0, 0
			memMu.Unlock()
			emMu.Lock()
			clear(everMember)
			emMu.Unlock()
			markMembers()
		}
		if measuring && segEvery > 0 && time.Since(segs[len(segs)-1].at) >= segEvery {
			segs, segTasks = append(segs, r.m.read()), append(segTasks, len(seqs))
		}
		seq := r.nextSeq()
		if measuring {
			seqs = append(seqs, seq)
		} else {
			warm = append(warm, seq)
		}
		// Submits run on their own so a slow one does not delay the next
		// arrival.
		subWG.Go(func() {
			if _, err := r.submit(benchInput{Seq: seq}, producer.Options{}); err != nil {
				subErrs.Add(1)
				b.Logf("submit: %v", err)
			}
		})
	}
	subWG.Wait()
	// After a warm-up the queue is in a steady state, so the window is
	// the submit window itself: work carried into it from the warm-up
	// balances work carried out of it. From a standing start the window
	// runs until its last task finished instead.
	var after reading
	if warmup > 0 {
		after = r.m.read()
	}
	ctx, cancel := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel()
	unfinished := 0
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= len(warm)+len(seqs)-int(subErrs.Load()) }) {
		// Reported, not fatal: the table still says what happened.
		unfinished = len(warm) + len(seqs) - r.tr.doneCount()
		b.Errorf("%s: %d of %d tasks unfinished 3 minutes after the last submit", wl.name, unfinished, len(seqs))
	}
	if warmup <= 0 {
		after = r.m.read()
	}
	close(stopSampling)
	close(stopMark)
	<-sampled
	<-marked

	res.tasks = len(seqs)
	res.elapsed = after.at.Sub(before.at)
	res.win = after.since(before)
	if memN > 0 {
		res.membersMean = float64(memSum) / float64(memN)
	}
	ds, _ := r.tr.pickups(seqs)
	res.p50, res.p99 = pct(ds, 50), pct(ds, 99)
	ids := make([]string, 0, len(r.workers))
	for _, bw := range r.workers {
		ids = append(ids, bw.id)
	}
	spLo, spMed, spHi, spIdle := r.tr.spread(seqs, ids)
	res.refused = res.win.refusedTotal()

	hours := res.elapsed.Hours()
	live := res.win.liveness()
	// Work carried across the window's edges need not balance: a member
	// that claims a listing's worth of tasks at a time (economy: about 20
	// every 17 s) may claim 20 more or fewer than were submitted in the
	// window, ±0.2 PUT per task. So the workers' requests on task objects
	// (claim, commit) count per task claimed in the window, and the rest
	// per task submitted.
	res.claimed = r.tr.startedBetween(before.at, after.at)
	mine := res.win.class[srcWorkers][classTask]
	res.perTask = res.win.total().Sub(live).Sub(mine).Scale(1 / float64(res.tasks))
	claimed := res.claimed
	if claimed == 0 {
		claimed = res.tasks // nothing claimed: no better measure than submits
	}
	res.perTask = res.perTask.Add(mine.Scale(1 / float64(claimed)))
	// A standby's liveness requests (under direct dispatch a standby also
	// claims from its inbox: those count per task).
	var standby cost.Requests
	nStandby := 0
	for _, bw := range r.workers {
		if !everMember[bw.id] {
			standby = standby.Add(res.win.live[bw.id])
			nStandby++
		}
	}
	if nStandby > 0 {
		res.perWorkerHr = standby.Scale(1 / float64(nStandby) / hours)
	}
	res.perFleetHr = clampZero(live.Scale(1 / hours).Sub(res.perWorkerHr.Scale(float64(wl.workers))))
	res.bill = cost.Monthly(cost.Workload{TasksPerDay: wl.tasksPerDay, Workers: wl.workers,
		Rates: cost.Rates{PerTask: res.perTask, PerWorkerHour: res.perWorkerHr, PerFleetHour: res.perFleetHr}})
	res.measuredBill = res.win.total().Scale(cost.HoursPerMonth / hours).Dollars(cost.S3Standard)

	rows := []resultRow{
		{"settle (start -> 1 member asleep)", fmtDur(res.settle), "", ""},
		{"load before the window (warm-up)", fmtDur(max(warmup, 0)), "", ""},
		{"tasks submitted in the window", fmt.Sprintf("%d in %v (%.0f/day at this rate)", res.tasks, fmtDur(res.elapsed), float64(res.tasks)/res.elapsed.Seconds()*86400), "", ""},
		{"members during the load (max / mean)", fmt.Sprintf("%d / %.1f", res.membersMax, res.membersMean), "", ""},
		{"tasks unfinished 3 min after the last submit", strconv.Itoa(unfinished), "0", verdict(unfinished == 0)},
		{"pickup p50", fmtDur(res.p50), "<= " + wl.p50Target.String(), verdict(res.p50 <= wl.p50Target)},
		{"pickup p99", fmtDur(res.p99), "", ""},
		{"tasks claimed in the window (first handler start)", strconv.Itoa(res.claimed), "", ""},
		{"window's tasks started per worker (min / median / max; workers with none)", fmt.Sprintf("%d / %d / %d; %d", spLo, spMed, spHi, spIdle), "", ""},
		{"412s per task (lost CAS; by class below)", fmtRate(float64(res.refused) / float64(res.tasks)), "", ""},
		{"requests per task (all-in, window total / tasks)", res.win.total().Scale(1 / float64(res.tasks)).String(), "", ""},
		{"per task, excluding liveness (workers' task-object requests per task claimed)", res.perTask.String(), "", ""},
		{"liveness per standby worker-hour", res.perWorkerHr.String(), "", ""},
		{"liveness per fleet-hour (members' fleet/clock requests beyond a standby's, monitor)", res.perFleetHr.String(), "", ""},
		{fmt.Sprintf("$/month at %s tasks/day, %d workers", strconv.FormatFloat(wl.tasksPerDay, 'f', 0, 64), wl.workers),
			fmt.Sprintf("$%.2f (tasks $%.2f + liveness $%.2f)", res.bill.Total, res.bill.Source(cost.SourceTasks), res.bill.Source(cost.SourceLiveness)),
			fmt.Sprintf("<= $%.0f", wl.costTarget), verdict(res.bill.Total <= wl.costTarget)},
		{"$/month of the window as measured (its own arrival rate)", fmt.Sprintf("$%.2f", res.measuredBill), "", ""},
		{"duplicate executions", strconv.Itoa(r.tr.duplicates()), "0", verdict(r.tr.duplicates() == 0)},
	}
	printRows(os.Stdout, fmt.Sprintf("%s: %d elastic workers, %s tasks/day, handler %v, settings: %s", wl.name, wl.workers,
		strconv.FormatFloat(wl.tasksPerDay, 'f', 0, 64), wl.work, describeSettings(wl.env)), rows)
	printBreakdown(os.Stdout, res.win, res.elapsed, res.tasks)
	if len(segs) > 1 {
		printSegments(os.Stdout, wl, append(segs, after), append(segTasks, len(seqs)))
	}
	fmt.Println()
	res.bill.Print(os.Stdout)
	fmt.Printf("logs: %s\n", r.log.summary())

	b.ReportMetric(ms(res.p50), "p50-ms")
	b.ReportMetric(ms(res.p99), "p99-ms")
	b.ReportMetric(res.bill.Total, "$/month")
	tot := res.win.total()
	for _, op := range s3store.Ops() {
		b.ReportMetric(tot.Of(op)/float64(res.tasks), op.String()+"/task")
	}
	b.ReportMetric(0, "ns/op")
	return res
}

// printSegments prints the bill each segment of the window extrapolates to,
// with the same split as the whole window (liveness per hour, the rest per
// task), so the settling of the back-offs shows.
func printSegments(w io.Writer, wl workload, segs []reading, tasks []int) {
	fmt.Fprintf(w, "segments (each extrapolated to %s tasks/day):\n", strconv.FormatFloat(wl.tasksPerDay, 'f', 0, 64))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  from\tto\ttasks\tLIST/task (excl. liveness)\tliveness/h\t$/month\t\n")
	for i := 1; i < len(segs); i++ {
		d := segs[i].since(segs[i-1])
		n := tasks[i] - tasks[i-1]
		h := segs[i].at.Sub(segs[i-1].at).Hours()
		if n == 0 || h == 0 {
			continue
		}
		live := d.liveness()
		perTask := d.total().Sub(live).Scale(1 / float64(n))
		bill := cost.Monthly(cost.Workload{TasksPerDay: wl.tasksPerDay, Workers: wl.workers,
			Rates: cost.Rates{PerTask: perTask, PerFleetHour: live.Scale(1 / h)}})
		fmt.Fprintf(tw, "  %v\t%v\t%d\t%.3f\t%s\t%.2f\t\n", segs[i-1].at.Sub(segs[0].at).Round(time.Second),
			segs[i].at.Sub(segs[0].at).Round(time.Second), n, perTask.LIST, live.Scale(1/h), bill.Total)
	}
	tw.Flush()
}

// clampZero returns r with its negative counts raised to zero.
func clampZero(r cost.Requests) cost.Requests {
	for _, p := range []*float64{&r.PUT, &r.GET, &r.HEAD, &r.LIST, &r.DELETE} {
		*p = max(*p, 0)
	}
	return r
}
