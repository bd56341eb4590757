package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
)

// BenchmarkMemberThroughput measures how many short tasks one member
// claims and runs a second, against the server's raw task-shaped rate
// (rawTaskRate, 8 clients) measured in the same run, 10 s before and 10 s
// after the member's phases (MinIO's rate drifts; the ratio uses their
// mean). One dedicated member with S3QUEUE_BENCH_MEMBER_SLOTS slots
// (default 64) runs a handler of S3QUEUE_BENCH_MEMBER_WORK (default 10ms),
// with no monitor, in two phases of S3QUEUE_BENCH_MEMBER_TASKS tasks each
// (default 3000):
//
//   - backlog: the tasks are submitted before the member starts; its
//     throughput runs from the first handler start to the last success.
//     The tasks' create PUTs are made before that window, so the member
//     needs 3 of the raw sequence's 4 requests per task there: the
//     backlog's ratio can pass 100 %;
//   - burst: the tasks are submitted by 8 goroutines while the member
//     runs; throughput from the first submit to the last success, every
//     request of a task inside the window, as in BenchmarkHeavyLoad.
//
// S3QUEUE_BENCH_MEMBER_LATENCY (default 0) adds that much latency to each
// of the member's requests (s3store.Faults), as S3's tens of milliseconds
// would: on a local MinIO a request takes a few, and the server's CPU, not
// the member's claims in flight, sets the pace. With added latency the
// ratio to the raw rate (measured without it) means nothing; the tasks/s
// show what the member's claim pipeline keeps up.
//
// The load average of the machine is printed before the first
// measurement: the figures are only comparable on a quiet machine.
func BenchmarkMemberThroughput(b *testing.B) {
	const parallel = 8
	slots := envInt("S3QUEUE_BENCH_MEMBER_SLOTS", 64)
	n := envInt("S3QUEUE_BENCH_MEMBER_TASKS", 3000)
	work := envDuration("S3QUEUE_BENCH_MEMBER_WORK", 10*time.Millisecond)
	latency := envDuration("S3QUEUE_BENCH_MEMBER_LATENCY", 0)
	fmt.Printf("\nload average before: %s\n", loadAverage())
	// A MinIO just started serves its first seconds of load markedly
	// slower: warm it up first (see BenchmarkHeavyLoad).
	fmt.Print("warm-up:")
	measureRawPut(b, 8, 15*time.Second)
	mixBefore := measureRawTask(b, 8, 10*time.Second)

	r := newRig(b, "member")
	conf := settings(b, nil)
	r.startProducer(conf.Producer())
	submitAll := func(seqs []int) {
		var next atomic.Int64
		var wg sync.WaitGroup
		var subErr atomic.Value
		for range parallel {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(seqs) {
						return
					}
					if _, err := r.submit(benchInput{Seq: seqs[i]}, producer.Options{}); err != nil {
						subErr.Store(err)
					}
				}
			})
		}
		wg.Wait()
		if err := subErr.Load(); err != nil {
			b.Fatalf("submit: %v", err)
		}
	}
	seqs := func() []int {
		s := make([]int, n)
		for i := range s {
			s[i] = r.nextSeq()
		}
		return s
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Minute)
	defer cancel()

	// Backlog: every task waits in the bucket when the member starts.
	backlog := seqs()
	subStart := time.Now()
	submitAll(backlog)
	subTook := time.Since(subStart)
	before := r.m.read()
	wc := conf.Worker()
	wc.Concurrency, wc.Dedicated = slots, true
	startedAt := time.Now()
	bw := r.startWorker(wc, work, latency > 0, nil)
	if latency > 0 {
		for _, op := range s3store.Ops() {
			bw.faults.Inject(s3store.Fault{Op: op, Latency: latency})
		}
	}
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= n }) {
		b.Fatalf("backlog: only %d of %d tasks succeeded", r.tr.doneCount(), n)
	}
	after := r.m.read()
	first := r.tr.firstStart(backlog)
	_, last := r.tr.span()
	drain := last.Sub(first)
	backlogRate := float64(n) / drain.Seconds()
	win := after.since(before)

	// Burst: submitted while the member runs.
	time.Sleep(2 * time.Second)
	burst := seqs()
	bBefore := r.m.read()
	burstStart := time.Now()
	submitAll(burst)
	burstSubmitted := time.Since(burstStart)
	if !r.tr.waitFor(ctx, func() bool { return r.tr.doneCount() >= 2*n }) {
		b.Fatalf("burst: only %d of %d tasks succeeded", r.tr.doneCount()-n, n)
	}
	bAfter := r.m.read()
	_, last = r.tr.span()
	burstTook := last.Sub(burstStart)
	burstRate := float64(n) / burstTook.Seconds()
	bWin := bAfter.since(bBefore)
	dups := r.tr.duplicates()
	r.stop()

	mixAfter := measureRawTask(b, 8, 10*time.Second)
	mix := (mixBefore + mixAfter) / 2
	fmt.Printf("load average after: %s\n", loadAverage())
	per := func(c cost.Requests, op s3store.Op) float64 { return c.Of(op) / float64(n) }
	wk, bwk := win.bySource(srcWorkers), bWin.bySource(srcWorkers)
	title := fmt.Sprintf("BenchmarkMemberThroughput: 1 dedicated member x %d slots, %v handler, no monitor, defaults", slots, work)
	if latency > 0 {
		title += fmt.Sprintf(", %v added to each of the member's requests", latency)
	}
	printRows(os.Stdout, title, []resultRow{
		{"tasks per phase", strconv.Itoa(n), "", ""},
		{"raw task-shaped rate (before / after / mean)", fmt.Sprintf("%.0f / %.0f / %.0f tasks/s", mixBefore, mixAfter, mix), "", ""},
		{"backlog: submitted before the member started", fmt.Sprintf("in %v", fmtDur(subTook)), "", ""},
		{"backlog: member start -> first handler start", fmtDur(first.Sub(startedAt)), "", ""},
		{"backlog: throughput (first start -> last success)", fmt.Sprintf("%.0f tasks/s over %v", backlogRate, fmtDur(drain)), "", ""},
		{"backlog: throughput / raw task-shaped rate", fmt.Sprintf("%.0f%%", 100*backlogRate/mix), ">= 90%", verdict(latency > 0 || backlogRate >= 0.9*mix)},
		{"backlog: member's requests per task", fmt.Sprintf("PUT %.3f, GET %.3f, LIST %.3f, HEAD %.3f", per(wk, s3store.OpPut), per(wk, s3store.OpGet), per(wk, s3store.OpList), per(wk, s3store.OpHead)), "", ""},
		{"burst: submit phase", fmt.Sprintf("%v (%.0f submits/s)", fmtDur(burstSubmitted), float64(n)/burstSubmitted.Seconds()), "", ""},
		{"burst: throughput (first submit -> last success)", fmt.Sprintf("%.0f tasks/s over %v", burstRate, fmtDur(burstTook)), "", ""},
		{"burst: throughput / raw task-shaped rate", fmt.Sprintf("%.0f%%", 100*burstRate/mix), "", ""},
		{"burst: member's requests per task", fmt.Sprintf("PUT %.3f, GET %.3f, LIST %.3f, HEAD %.3f", per(bwk, s3store.OpPut), per(bwk, s3store.OpGet), per(bwk, s3store.OpList), per(bwk, s3store.OpHead)), "", ""},
		{"duplicate executions", strconv.Itoa(dups), "0", verdict(dups == 0)},
	})
	fmt.Println("backlog:")
	printBreakdown(os.Stdout, win, after.at.Sub(before.at), n)
	fmt.Println("burst:")
	printBreakdown(os.Stdout, bWin, bAfter.at.Sub(bBefore.at), n)
	fmt.Printf("logs: %s\n", r.log.summary())

	b.ReportMetric(backlogRate, "backlog-tasks/s")
	b.ReportMetric(burstRate, "burst-tasks/s")
	b.ReportMetric(mix, "raw-task-mix/s")
	b.ReportMetric(100*backlogRate/mix, "%-backlog-of-raw")
	b.ReportMetric(100*burstRate/mix, "%-burst-of-raw")
	b.ReportMetric(0, "ns/op")
}

// firstStart returns when a handler first started one of the tasks in
// seqs.
func (tr *tracker) firstStart(seqs []int) time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var first time.Time
	for _, s := range seqs {
		if at, ok := tr.started[s]; ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// loadAverage is the machine's load average (1, 5 and 15 minutes), or
// "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
