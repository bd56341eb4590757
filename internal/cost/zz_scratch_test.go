package cost

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"
	"log/slog"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

func TestScratchFreedSlot(t *testing.T) {
	for _, static := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		st := mem.New()
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil { t.Fatal(err) }
		cfg := worker.Config{Concurrency: 2, Dedicated: true, Logger: slog.New(slog.DiscardHandler)}
		if static { cfg.OwnShards = []int{0} }
		w, err := worker.New(ctx, st, cfg)
		if err != nil { t.Fatal(err) }
		var done atomic.Int64
		w.Handle("x", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			time.Sleep(500 * time.Millisecond); done.Add(1); return nil, nil
		})
		go w.Run(ctx)
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		for i := 0; i < 10; i++ { p.Submit(ctx, "x", nil, producer.Options{}) }
		for done.Load() < 10 && time.Since(start) < 60*time.Second { time.Sleep(10 * time.Millisecond) }
		t.Logf("static=%v: 10 tasks of 500ms with 2 slots took %v (ideal ~2.5s)", static, time.Since(start))
		cancel()
	}
}
