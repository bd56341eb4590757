package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
)

// BenchmarkHeavyLoad measures the queue's throughput against the server's
// ceiling, driving MinIO as fast as it goes: dedicated workers
// (S3QUEUE_BENCH_HEAVY_WORKERS, default 4) with S3QUEUE_BENCH_HEAVY_SLOTS
// slots each (default 32) and a no-op handler, and the monitor with its
// defaults. It has two phases:
//
//   - burst: a producer submits S3QUEUE_BENCH_HEAVY_TASKS tasks (default
//     3000) from 8 goroutines (SubmitBatch's parallelism; each Submit is
//     timed on its own): throughput from the first submit to the last
//     success, and requests per task;
//   - paced: Poisson arrivals at half the burst's throughput for 20 s: the
//     pickup latency of a busy queue that is not behind (in the burst, the
//     backlog's queueing time dominates every pickup).
//
// After a 15 s warm-up of the server, the raw conditional-PUT rate and the
// raw task-shaped rate (rawTaskRate) are measured in the same run, 10 s each
// before and after (MinIO's rate drifts); the ceilings use their means.
// It runs with default settings, and under direct dispatch.
func BenchmarkHeavyLoad(b *testing.B) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"default", nil},
		{"direct", directEnv(nil)},
	} {
		b.Run(c.name, func(b *testing.B) { runHeavyLoad(b, c.env) })
	}
}

func runHeavyLoad(b *testing.B, env map[string]string) {
	const parallel = 8
	workers := envInt("S3QUEUE_BENCH_HEAVY_WORKERS", 4)
	slots := envInt("S3QUEUE_BENCH_HEAVY_SLOTS", 32)
	n := envInt("S3QUEUE_BENCH_HEAVY_TASKS", 3000)
	// A MinIO just started serves its first seconds of load markedly
	// slower (measured: 309 then 653 PUTs/s a minute apart): warm it up
	// first, so that neither ceiling nor burst runs on a cold server.
	fmt.Print("\nwarm-up:")
	measureRawPut(b, 8, 15*time.Second)
	rawBefore := measureRawPut(b, 8, 10*time.Second)
	mixBefore := measureRawTask(b, 8, 10*time.Second)

	r := newRig(b, "heavy")
	conf := settings(b, env)
	r.startProducer(conf.Producer())
	r.startMonitor(conf.Monitor())
	for range workers {
		wc := conf.Worker()
		wc.Concurrency, wc.Dedicated = slots, true
		r.startWorker(wc, 0, false, nil)
	}
	if !r.waitUntil(time.Minute, 100*time.Millisecond, func() bool { return r.members() == workers && r.agreed(min(workers, 16)) }) {
		b.Fatalf("%d workers did not all join the fleet: %d members", workers, r.members())
	}
	time.Sleep(2 * time.Second) // the producer's fleet cache sees every member

	// Burst.
	before := r.m.read()
	monBefore := r.mon.Stats()
	var next atomic.Int64
	var wg sync.WaitGroup
	var subErr atomic.Value
	burst := make([]int, n)
	for i := range burst {
		burst[i] = r.nextSeq()
	}
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, err := r.submit(benchInput{Seq: burst[i]}, producer.Options{}); err != nil {
					subErr.Store(err)
				}
			}
		})
	}
	wg.Wait()
	submitted := time.Now()
	if err := subErr.Load(); err != nil {
		b.Fatalf("submit: %v", err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Minute)
	defer cancel()
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= n }) {
		b.Fatalf("only %d of %d tasks succeeded within 5 minutes", r.tr.doneCount(), n)
	}
	after := r.m.read()
	monListed := r.mon.Stats().Listed - monBefore.Listed
	win := after.since(before)
	tot := win.total()
	first, last := r.tr.span()
	elapsed := last.Sub(first)
	tput := float64(n) / elapsed.Seconds()
	burstDs, _ := r.tr.pickups(burst)
	ids := make([]string, 0, len(r.workers))
	for _, bw := range r.workers {
		ids = append(ids, bw.id)
	}
	spLo, _, spHi, _ := r.tr.spread(burst, ids)
	per := func(c cost.Requests, tasks int, op s3store.Op) float64 { return c.Of(op) / float64(tasks) }

	// Paced, at half the burst throughput.
	time.Sleep(2 * time.Second)
	pacedRate := tput / 2
	const pacedFor = 20 * time.Second
	pBefore := r.m.read()
	rng := rand.New(rand.NewPCG(2, 2))
	var paced []int
	var pwg sync.WaitGroup
	start := time.Now()
	for at := start; ; {
		at = at.Add(time.Duration(rng.ExpFloat64() / pacedRate * float64(time.Second)))
		if at.Sub(start) > pacedFor {
			break
		}
		time.Sleep(time.Until(at))
		seq := r.nextSeq()
		paced = append(paced, seq)
		pwg.Go(func() {
			if _, err := r.submit(benchInput{Seq: seq}, producer.Options{}); err != nil {
				subErr.Store(err)
			}
		})
	}
	pwg.Wait()
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= n+len(paced) }) {
		b.Fatalf("paced phase: only %d of %d tasks succeeded", r.tr.doneCount()-n, len(paced))
	}
	pAfter := r.m.read()
	pWin := pAfter.since(pBefore)
	pTot := pWin.total()
	ds, early := r.tr.pickups(paced)
	r.stop()

	rawAfter := measureRawPut(b, 8, 10*time.Second)
	raw := (rawBefore + rawAfter) / 2
	mixAfter := measureRawTask(b, 8, 10*time.Second)
	mix := (mixBefore + mixAfter) / 2
	putClass := per(tot, n, s3store.OpPut) + per(tot, n, s3store.OpList)
	ceiling := raw / per(tot, n, s3store.OpPut)
	ratio := tput / ceiling
	pPutClass := per(pTot, len(paced), s3store.OpPut) + per(pTot, len(paced), s3store.OpList)

	printRows(os.Stdout, fmt.Sprintf("BenchmarkHeavyLoad: %d dedicated workers x %d slots, no-op handler, settings: %s", workers, slots, describeSettings(env)), []resultRow{
		{"burst: tasks", strconv.Itoa(n), "", ""},
		{"burst: submit phase", fmt.Sprintf("%v (%.0f submits/s)", fmtDur(submitted.Sub(first)), float64(n)/submitted.Sub(first).Seconds()), "", ""},
		{"burst: throughput (first submit -> last success)", fmt.Sprintf("%.0f tasks/s over %v", tput, fmtDur(elapsed)), "", ""},
		{"raw conditional PUT rate (before / after / mean)", fmt.Sprintf("%.0f / %.0f / %.0f PUTs/s", rawBefore, rawAfter, raw), "", ""},
		{"ceiling = raw / PUTs per task", fmt.Sprintf("%.0f tasks/s", ceiling), "", ""},
		{"burst: throughput / ceiling", fmt.Sprintf("%.0f%%", 100*ratio), ">= 70%", verdict(ratio >= 0.7)},
		{"raw task-shaped rate (3 PUT + 1 GET, no coordination; before / after / mean)", fmt.Sprintf("%.0f / %.0f / %.0f tasks/s", mixBefore, mixAfter, mix), "", ""},
		{"burst: throughput / raw task-shaped rate", fmt.Sprintf("%.0f%%", 100*tput/mix), "", ""},
		{"burst: PUT-class per task (PUT + LIST)", fmt.Sprintf("%.2f (PUT %.3f, LIST %.3f)", putClass, per(tot, n, s3store.OpPut), per(tot, n, s3store.OpList)), "<= 3.2", verdict(putClass <= 3.2)},
		{"burst: GET per task", fmt.Sprintf("%.3f (HEAD %.3f)", per(tot, n, s3store.OpGet), per(tot, n, s3store.OpHead)), "<= 2", verdict(per(tot, n, s3store.OpGet) <= 2)},
		{"burst: 412s per task (task objects / every class)", fmt.Sprintf("%s / %s", fmtRate(float64(win.refused[classTask])/float64(n)), fmtRate(float64(win.refusedTotal())/float64(n))), "", ""},
		{"burst: tasks started per worker (least / most)", fmt.Sprintf("%d / %d", spLo, spHi), "", ""},
		{"burst: keys the monitor's sweeps listed per task", fmt.Sprintf("%.1f", float64(monListed)/float64(n)), "", ""},
		{"burst: pickup p50 / p99 (backlog queueing)", fmtDur(pct(burstDs, 50)) + " / " + fmtDur(pct(burstDs, 99)), "", ""},
		{"paced: tasks, rate", fmt.Sprintf("%d at %.0f tasks/s (Poisson)", len(paced), pacedRate), "", ""},
		{"paced: pickup p50", fmtDur(pct(ds, 50)), "<= 250ms", verdict(pct(ds, 50) <= 250*time.Millisecond)},
		{"paced: pickup p99", fmtDur(pct(ds, 99)), "", ""},
		{"paced: pickups before Submit returned", strconv.Itoa(early), "", ""},
		{"paced: PUT-class per task", fmt.Sprintf("%.2f (PUT %.3f, LIST %.3f)", pPutClass, per(pTot, len(paced), s3store.OpPut), per(pTot, len(paced), s3store.OpList)), "", ""}, // 3 + 1/poll_batch below poll_batch/poll_min tasks/s per member: see docs/performance.md
		{"paced: GET per task", fmt.Sprintf("%.3f (HEAD %.3f)", per(pTot, len(paced), s3store.OpGet), per(pTot, len(paced), s3store.OpHead)), "<= 2", verdict(per(pTot, len(paced), s3store.OpGet) <= 2)},
		{"duplicate executions", strconv.Itoa(r.tr.duplicates()), "0", verdict(r.tr.duplicates() == 0)},
	})
	fmt.Println("burst:")
	printBreakdown(os.Stdout, win, after.at.Sub(before.at), n)
	fmt.Println("paced:")
	printBreakdown(os.Stdout, pWin, pAfter.at.Sub(pBefore.at), len(paced))
	fmt.Printf("logs: %s\n", r.log.summary())

	b.ReportMetric(tput, "tasks/s")
	b.ReportMetric(raw, "raw-puts/s")
	b.ReportMetric(100*ratio, "%-of-ceiling")
	b.ReportMetric(mix, "raw-task-mix/s")
	b.ReportMetric(ms(pct(ds, 50)), "p50-ms")
	b.ReportMetric(ms(pct(ds, 99)), "p99-ms")
	b.ReportMetric(float64(win.refusedTotal())/float64(n), "412/task")
	for _, op := range s3store.Ops() {
		b.ReportMetric(per(tot, n, op), op.String()+"/task")
	}
	b.ReportMetric(0, "ns/op")
}
