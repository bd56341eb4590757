package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// BenchmarkFailover measures how fast the queue recovers from a dead
// worker. It kills a member while it runs a task: from that moment every
// request it makes fails (a 503 from a fault injector around its store) and
// its context is canceled, which is all a kill -9 looks like from the
// bucket. It measures, from the kill, when another worker claims a new
// task routed to the dead member's shard, and when the dead member's
// running task is re-dispatched by the monitor and finished by another
// worker. Default settings throughout (member_ttl 30s, lease 30s, monitor
// interval 5s, stale_after 10s).
//
// dedicated: four dedicated workers; the victim owns one of four active
// shards. elastic: four elastic workers settled to one member; the victim is
// that member, so the standbys must notice it is gone.
func BenchmarkFailover(b *testing.B) {
	b.Run("dedicated", func(b *testing.B) { runFailover(b, true) })
	b.Run("elastic", func(b *testing.B) { runFailover(b, false) })
}

// runFailover runs BenchmarkFailover with dedicated or elastic workers.
func runFailover(b *testing.B, dedicated bool) {
	const workers = 4
	r := newRig(b, "q")
	conf := settings(b, nil)
	r.startProducer(conf.Producer())
	r.startMonitor(conf.Monitor())
	var victim atomic.Pointer[benchWorker]
	doomed := func(id string) bool { v := victim.Load(); return v != nil && v.id == id }
	for range workers {
		// Every worker can be killed; the victim is chosen once the fleet
		// has formed. A dead process hands nothing back: no grace.
		wc := conf.Worker()
		wc.Dedicated, wc.ShutdownGrace = dedicated, time.Millisecond
		r.startWorker(wc, 10*time.Millisecond, true, doomed)
	}
	var v *benchWorker
	if dedicated {
		if !r.waitUntil(time.Minute, 100*time.Millisecond, func() bool { return r.members() == workers && r.agreed(workers) }) {
			b.Fatalf("the fleet did not form: %d members", r.members())
		}
		v = r.workers[workers-1]
	} else {
		if !r.waitUntil(3*time.Minute, 500*time.Millisecond, func() bool { return r.members() == 1 && r.agreed(1) }) {
			b.Fatalf("the elastic fleet did not settle to one member: %d", r.members())
		}
		for _, bw := range r.workers {
			if ok, _ := bw.w.Member(); ok {
				v = bw
			}
		}
	}
	time.Sleep(3 * time.Second) // the producer's cached fleet is current
	victim.Store(v)
	_, a := v.w.Member()
	if len(a.Own) == 0 {
		b.Fatalf("the victim polls no shard: %+v", a)
	}
	shard := a.Own[0]
	n := r.prod.Manifest().Shards
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); task.ShardFor(k, n) == shard {
			key = k
		}
	}

	// The victim's task: the victim blocks on it until it dies.
	blockSeq := r.nextSeq()
	if _, err := r.submit(benchInput{Seq: blockSeq, Block: true}, producer.Options{ShardKey: key}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if !r.tr.waitFor(ctx, func() bool { _, by, ok := r.tr.startedAt(blockSeq); return ok && by == v.id }) {
		_, by, ok := r.tr.startedAt(blockSeq)
		var as []string
		for _, bw := range r.workers {
			m, a := bw.w.Member()
			as = append(as, fmt.Sprintf("%s member=%v own=%v drain=%v", bw.id, m, a.Own, a.Drain))
		}
		b.Fatalf("the victim %s (shard %d) did not start its task (started=%v by %q); fleet: %s", v.id, shard, ok, by, strings.Join(as, "; "))
	}
	time.Sleep(500 * time.Millisecond)
	for _, op := range s3store.Ops() {
		v.faults.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
	}
	v.kill()
	killed := time.Now()

	// A new task for the dead member's shard, submitted right away: the
	// producer's view still lists the victim as live.
	probeSeq := r.nextSeq()
	if _, err := r.submit(benchInput{Seq: probeSeq}, producer.Options{ShardKey: key}); err != nil {
		b.Fatal(err)
	}

	var reassigned, redispatched, probeAt, blockStart, blockDone time.Time
	ctx2, cancel2 := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel2()
	for ctx2.Err() == nil && (reassigned.IsZero() || redispatched.IsZero() || probeAt.IsZero() || blockDone.IsZero()) {
		now := time.Now()
		if reassigned.IsZero() {
			for _, bw := range r.workers {
				if bw == v {
					continue
				}
				if ok, as := bw.w.Member(); ok && (slices.Contains(as.Own, shard) || slices.Contains(as.Drain, shard)) {
					reassigned = now
				}
			}
		}
		if redispatched.IsZero() && r.mon.Stats().Redispatched > 0 {
			redispatched = now
		}
		if t, by, ok := r.tr.startedAt(probeSeq); probeAt.IsZero() && ok && by != v.id {
			probeAt = t
		}
		if t, by, ok := r.tr.startedAt(blockSeq); blockStart.IsZero() && ok && by != v.id {
			blockStart = t
		}
		if t, ok := r.tr.succeededAt(blockSeq); blockDone.IsZero() && ok {
			blockDone = t
		}
		time.Sleep(20 * time.Millisecond)
	}
	since := func(t time.Time) (string, time.Duration) {
		if t.IsZero() {
			return "not within 3m", 3 * time.Minute
		}
		return fmtDur(t.Sub(killed)), t.Sub(killed)
	}
	reS, reD := since(reassigned)
	prS, prD := since(probeAt)
	rdS, _ := since(redispatched)
	bsS, _ := since(blockStart)
	bdS, bdD := since(blockDone)
	mode := "elastic (the sole member killed; 3 standbys)"
	if dedicated {
		mode = "dedicated (1 of 4 members killed)"
	}
	printRows(os.Stdout, "BenchmarkFailover: "+mode+", default settings, times from the kill", []resultRow{
		{"dead member's shard polled by another worker (own or drain)", reS, "", ""},
		{"new task for that shard claimed", prS, "<= 60s", verdict(!probeAt.IsZero() && prD <= time.Minute)},
		{"running task re-dispatched by the monitor", rdS, "", ""},
		{"running task started again elsewhere", bsS, "", ""},
		{"running task finished", bdS, "<= 60s", verdict(!blockDone.IsZero() && bdD <= time.Minute)},
	})
	fmt.Printf("logs: %s\n", r.log.summary())
	b.ReportMetric(reD.Seconds(), "reassign-s")
	b.ReportMetric(prD.Seconds(), "shard-served-s")
	b.ReportMetric(bdD.Seconds(), "task-finished-s")
	b.ReportMetric(0, "ns/op")
	if probeAt.IsZero() || blockDone.IsZero() {
		b.Errorf("failover incomplete after 3 minutes")
	}
}
