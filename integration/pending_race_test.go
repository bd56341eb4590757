package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// TestPendingRunsTendedWithoutRace reproduces a data race in the worker's
// dispatch queue, found by TestRejectLeavesTasksForOthers under -race (as
// scripts/test.sh runs every test). Run it with -race; without the race
// detector it passes.
//
// Worker.tendPending (dispatch.go) copies a pool's pending runs under the
// pool's lock, releases it, and then reads each run's v (the task) and
// renewed without the lock. A loop of the pool may meanwhile take that run
// from pending and start it; its handler's commit writes r.v
// (run.update, run.go) on the loop's goroutine. Nothing orders the
// scheduler's read after its unlock with the loop's write.
//
// The repro needs only claimed-ahead tasks that start soon after being
// claimed: one handler, a deep queue under reject, fast handlers, quick
// polls, on the in-memory store (no server).
func TestPendingRunsTendedWithoutRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := mem.New()
	prod, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	ids := make([]string, 0, n)
	for i := range n {
		id, err := prod.Submit(ctx, "job", map[string]int{"i": i}, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	w, err := worker.New(ctx, st, worker.Config{
		ID: "w", OwnShards: []int{0}, MaxInFlight: 1, MaxQueueDepth: 50, QueuePolicy: worker.Reject,
		PollMin: time.Millisecond, PollMax: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
	stop := runWorker(ctx, w)
	defer stop()
	waitSucceeded(t, ctx, prod, ids, "every task to succeed")
}
