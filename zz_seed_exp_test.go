package s3queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
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

func TestZZSeedExperiment(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		base := mem.New()
		lc := &listCounter{Store: base, by: map[string]int{}}
		workers, mon, prod := s3store.NewCounter(lc), s3store.NewCounter(base), s3store.NewCounter(base)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		lg := quiet
		if os.Getenv("ZZLOG") != "" {
			lg = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		p, err := producer.New(ctx, prod, producer.Config{Shards: 16, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		n := 50
		if os.Getenv("ZZN") != "" {
			fmt.Sscan(os.Getenv("ZZN"), &n)
		}
		var runs sync.WaitGroup
		defer runs.Wait()
		defer cancel()
		var mu sync.Mutex
		ws := []*worker.Worker{}
		var claims int
		for i := range n {
			id := fmt.Sprintf("w%02d", i)
			l := quiet
			if true {
				l = lg.With("w", id)
			}
			w, err := worker.New(ctx, workers, worker.Config{ID: id, Logger: l, OnEvent: func(e worker.Event) {
				if e.Kind == "claimed" {
					mu.Lock()
					claims++
					mu.Unlock()
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { time.Sleep(100 * time.Millisecond); return nil, nil })
			ws = append(ws, w)
			runs.Go(func() { w.Run(ctx) })
		}
		m, err := monitor.New(ctx, mon, monitor.Config{ID: "m", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		runs.Go(func() { m.Run(ctx) })
		rng := rand.New(rand.NewPCG(1, 2))
		submitted := 0
		rate := 1.157
		if os.Getenv("ZZRATE") != "" {
			fmt.Sscan(os.Getenv("ZZRATE"), &rate)
		}
		runs.Go(func() {
			for ctx.Err() == nil {
				time.Sleep(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
				if _, err := p.Submit(ctx, "job", nil, producer.Options{}); err == nil {
					submitted++
				}
			}
		})
		time.Sleep(2 * time.Minute)
		lc.mu.Lock()
		lc.by = map[string]int{}
		lc.mu.Unlock()
		w0, m0, p0 := workers.Counts(), mon.Counts(), prod.Counts()
		s0 := submitted
		members := map[int]int{}
		for range 180 {
			time.Sleep(time.Second)
			k := 0
			for _, w := range ws {
				if ok, _ := w.Member(); ok {
					k++
				}
			}
			members[k]++
		}
		ts := float64(submitted - s0)
		wk := cost.FromCounts(workers.Counts().Sub(w0)).Scale(1 / ts)
		mo := cost.FromCounts(mon.Counts().Sub(m0)).Scale(1 / ts)
		pr := cost.FromCounts(prod.Counts().Sub(p0)).Scale(1 / ts)
		fl, _, _ := shards.ReadFleet(ctx, base)
		t.Logf("tasks %v; per task: workers %s; monitor %s; producer %s; members seconds %v; fleet members now %d asleep %v", ts, wk, mo, pr, members, len(fl.Members), fl.Asleep)
		all := wk.Add(mo).Add(pr).Scale(3e6)
		t.Logf("$/month at 100K/day from per-task: $%.2f", all.Dollars(cost.S3Standard))
		t.Logf("worker LISTs by prefix: %v", lc.by)
	})
}

type listCounter struct {
	s3store.Store
	mu sync.Mutex
	by map[string]int
}

func (c *listCounter) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	c.mu.Lock()
	c.by[prefix]++
	c.mu.Unlock()
	return c.Store.List(ctx, prefix, opts)
}
