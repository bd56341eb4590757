package s3queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// The idle fleet's bill, guarded: elastic workers and a monitor at the
// default settings, idle for two hours of virtual time once the fleet has
// gone to sleep, every request counted. A sleeping fleet has no member;
// its standbys take turns at the doorbell, one read per bell_poll
// fleet-wide, whatever their number; each renews its roster entry every 3
// hours; one turn in sleep_scan / bell_poll lists shard 0. So a fleet of
// 50 costs what one of 10 does but for the roster's PUTs, and the test
// prices a fleet of 50 from the 10 it runs: the goal is $1 a month or
// less, monitor included. (The same workers at 5e44086 cost $7.19 a month
// on MinIO: standbys and the sleeping member read the pause object every
// 10 s, standbys read fleet.json every 2 minutes, the member renewed
// every 20 s and listed its shard every minute.)
func TestAnIdleFleetCostsADollarAMonth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		base := mem.New()
		workers, mon := s3store.NewCounter(base), s3store.NewCounter(base)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		p, err := producer.New(ctx, base, producer.Config{Shards: 16, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Submit(ctx, "job", nil, producer.Options{}); err != nil {
			t.Fatal(err)
		}
		const n = 10
		var runs sync.WaitGroup
		defer runs.Wait()
		defer cancel()
		for i := range n {
			w, err := worker.New(ctx, workers, worker.Config{ID: fmt.Sprintf("w%02d", i), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
			runs.Go(func() { w.Run(ctx) })
		}
		m, err := monitor.New(ctx, mon, monitor.Config{ID: "m", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		runs.Go(func() { m.Run(ctx) })

		// Settled: asleep, with no member, the monitor's back-offs at
		// their ceilings.
		deadline := time.Now().Add(10 * time.Minute)
		for {
			fl, _, err := shards.ReadFleet(ctx, base)
			if err == nil && fl.Asleep && len(fl.Members) == 0 && len(fl.Standbys) == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the idle fleet did not fall asleep with %d standbys in 10 minutes: %+v (%v)", n, fl, err)
			}
			time.Sleep(time.Second)
		}
		time.Sleep(time.Hour)
		w0, m0 := workers.Counts(), mon.Counts()
		const hours = 2
		time.Sleep(hours * time.Hour)
		wk := cost.FromCounts(workers.Counts().Sub(w0)).Scale(1.0 / hours)
		mo := cost.FromCounts(mon.Counts().Sub(m0)).Scale(1.0 / hours)
		t.Logf("per hour, %d workers: %s; the monitor: %s", n, wk, mo)

		// A fleet of 50: the turns and the safety scan are fleet-wide;
		// the roster's renewals are per standby.
		fifty := wk
		fifty.PUT *= 5
		month := fifty.Add(mo).Scale(24 * 30)
		d := month.Dollars(cost.S3Standard)
		t.Logf("an idle fleet of 50 and its monitor: %s a month, $%.2f", month, d)
		if d > 1 {
			t.Errorf("an idle fleet of 50 and its monitor cost $%.2f a month, want $1 or less", d)
		}
		// The doorbell is one GET per bell_poll (1.5 s) fleet-wide: 2,400
		// an hour.
		if g := wk.GET + wk.HEAD; g > 2400*1.1 {
			t.Errorf("the sleeping fleet's workers read %v times an hour, want about 2,400 (one turn per 1.5 s)", g)
		}
	})
}
