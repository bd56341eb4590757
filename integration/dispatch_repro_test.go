package integration

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// Reproductions of faults in the worker's dispatch queue found by the
// integration tests of the shedding policies (dispatch_test.go,
// shed_test.go). They run on the in-memory store, in well under a second
// each, and fail until the worker is fixed.

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

// TestDropOldestDoesNotSwapForOlderWork reproduces a drop-oldest pool that
// swaps its pending tasks forever. Worker A has one handler, stuck, and
// two tasks claimed ahead under drop-oldest; five tasks T1..T5 are
// submitted. A runs T1, holds T2 and T3, and once they have waited
// poll_max releases them for T4 and T5, which are newer: right. But the
// released T2 and T3 are pending again and due at once, so once T4 and T5
// have waited poll_max A claims T2 and T3 again and releases T4 and T5, and
// so on, every poll_max, for as long as the handler is stuck: no task is
// newer than what A holds, yet A keeps releasing. On MinIO with poll_max
// 1s the swap cost 2 releases and 2 claims a second (measured over 10s: 41
// conditional PUTs, 20 pointer PUTs, 20 GETs, 20 DELETEs, beside 10 LISTs),
// attempts are never used up (a release gives its attempt back), and each
// swap adds two transitions to a task's history, which drops its oldest
// past task.MaxHistory.
//
// Expected: with no newer work found, a full drop-oldest pool releases
// nothing (a task it released itself, or any task older than its oldest
// pending one, is not newer work).
func TestDropOldestDoesNotSwapForOlderWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := mem.New()
	prod, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var evs []worker.Event
	pollMax := 200 * time.Millisecond
	a, err := worker.New(ctx, st, worker.Config{
		ID: "A", OwnShards: []int{0}, MaxInFlight: 1, MaxQueueDepth: 2, QueuePolicy: worker.DropOldest,
		PollMin: 10 * time.Millisecond, PollMax: pollMax, ShutdownGrace: time.Second,
		OnEvent: func(e worker.Event) {
			mu.Lock()
			evs = append(evs, e)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("job", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	var ids []string
	for i := range 5 {
		id, err := prod.Submit(ctx, "job", map[string]int{"i": i}, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	stop := runWorker(ctx, a)
	defer stop()
	released := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, e := range evs {
			if e.Kind == "released" {
				out = append(out, e.TaskID)
			}
		}
		return out
	}
	waitUntil(t, ctx, "A to release its two oldest pending tasks for the two newest", 10*time.Second, func() bool {
		return len(released()) >= 2
	})
	// Nothing newer comes: watch A for ten poll_max.
	time.Sleep(10 * pollMax)
	if got := released(); len(got) > 2 {
		t.Errorf("A released %d times, %d of them with no newer work than it held (tasks %v; submitted %v): want 2, the oldest two pending for the two newest",
			len(got), len(got)-2, distinct(got), ids)
	}
}
