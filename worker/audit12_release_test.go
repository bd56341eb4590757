package worker_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// Audit of issue 12: a child released by the worker that records its
// parent's success is "announced to the workers like a retry"
// (docs/dependencies.md): it should run within a poll or two. The
// worker's deps.Env has no Announce, so the pointer is written in the
// child's own shard, which a fleet member drains only now and then (back-off
// to drain_max) and not at all once asleep at the doorbell; no doorbell is
// rung. A chain of 6 tasks in different shards (as `s3queue submit --after
// ID --key K` makes), one worker with the default config, no monitor.
func TestAudit12ChildReleasedByAWorkerIsClaimedPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()
		st := mem.New()
		f := newFleet(t, st, 16)
		f.ctx = ctx
		p := f.producer(st)
		f.start(worker.Config{ID: "a", Shards: 16, Logger: quiet}, nil, nil)
		var chain []string
		for i := range 6 {
			o := producer.Options{ShardKey: fmt.Sprintf("k%d", i)}
			if i == 0 {
				o.Delay = 3 * time.Second
			} else {
				o.DependsOn = []string{chain[i-1]}
			}
			id, err := p.Submit(ctx, "job", nil, o)
			if err != nil {
				t.Fatal(err)
			}
			chain = append(chain, id)
		}
		ended := make([]time.Time, len(chain))
		start := time.Now()
		for i, id := range chain {
			for {
				tk, err := p.Get(ctx, id)
				if err == nil && tk.Status == task.Succeeded {
					ended[i] = time.Now()
					break
				}
				if time.Since(start) > time.Hour {
					t.Fatalf("task %d of the chain (shard %d) not done after an hour: %v %v", i, task.ShardFor(fmt.Sprintf("k%d", i), 16), tk.Status, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if i > 0 {
				hop := ended[i].Sub(ended[i-1])
				t.Logf("hop %d: %v", i, hop)
				if hop > 10*time.Second {
					t.Errorf("hop %d: a child released by the worker ran %v after its parent (a retry is announced in a polled shard at once)", i, hop)
				}
			}
		}
	})
}
