package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// TestRequestsPerTask is a regression guard on what a task costs under
// load: submit, claim and commit are the only PUTs, the claim's GET the only
// read of the task, and listings are shared by many tasks. It counts on the
// in-memory store and drives polls directly, so it is exact, not a timing.
func TestRequestsPerTask(t *testing.T) {
	c, n, _ := runTasksCounted(t, shards.DispatchShared)
	per := func(op s3store.Op) float64 { return float64(c.Of(op)) / float64(n) }
	t.Logf("per task: PUT %.2f GET %.2f LIST %.3f HEAD %.3f DELETE %.2f (%s)", per(s3store.OpPut), per(s3store.OpGet), per(s3store.OpList), per(s3store.OpHead), per(s3store.OpDelete), c)
	if got := per(s3store.OpPut) + per(s3store.OpList); got > 3.2 {
		t.Errorf("PUT-class requests per task = %.2f, want at most 3.2", got)
	}
	if got := per(s3store.OpPut); got > 3.01 {
		t.Errorf("PUTs per task = %.2f: submit, claim and commit should be the only writes", got)
	}
	if got := per(s3store.OpGet) + per(s3store.OpHead); got > 1.25 {
		t.Errorf("GET-class requests per task = %.2f, want about one (the claim's read, plus fleet reads)", got)
	}
}

// runTasksCounted submits 400 tasks to a queue in dispatch mode and runs
// them on 2 workers driven poll by poll, and returns the requests that
// took, the task count, and how many tasks each worker ran.
func runTasksCounted(t *testing.T, mode shards.DispatchMode) (s3store.Counts, int, []int64) {
	t.Helper()
	return runTasksCountedWith(t, mode, nil)
}

// A result stored apart costs one PUT more, at the commit, and nothing
// else on the worker's side (docs/scheduling.md).
func TestRequestsPerTaskWithResultsStoredApart(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("r", 2000) + `"`)
	c, n, _ := runTasksCountedWith(t, shards.DispatchShared, &big)
	per := func(op s3store.Op) float64 { return float64(c.Of(op)) / float64(n) }
	t.Logf("per task: PUT %.2f GET %.2f LIST %.3f HEAD %.3f DELETE %.2f (%s)", per(s3store.OpPut), per(s3store.OpGet), per(s3store.OpList), per(s3store.OpHead), per(s3store.OpDelete), c)
	if got := per(s3store.OpPut); got < 3.99 || got > 4.01 {
		t.Errorf("PUTs per task = %.2f, want 4: submit, claim, the result, commit", got)
	}
	if got := per(s3store.OpGet) + per(s3store.OpHead); got > 1.25 {
		t.Errorf("GET-class requests per task = %.2f, want about one", got)
	}
}

// runTasksCountedWith is runTasksCounted with handlers that return result
// (nil: none) and workers that store results over 1 KiB apart.
func runTasksCountedWith(t *testing.T, mode shards.DispatchMode, result *json.RawMessage) (s3store.Counts, int, []int64) {
	t.Helper()
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	const n = 400
	p, err := producer.New(ctx, st, producer.Config{Shards: 4, DispatchMode: mode})
	if err != nil {
		t.Fatal(err)
	}
	var ws []*worker.Worker
	for _, id := range []string{"a", "b"} {
		cfg := worker.Config{ID: id, Shards: 4, Concurrency: 32, Dedicated: true, Logger: quiet, DispatchMode: mode}
		var res json.RawMessage
		if result != nil {
			cfg.ResultInlineMax, res = 1024, *result
		}
		w, err := worker.New(ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return res, nil })
		ws = append(ws, w)
	}
	// Join the fleet, so producers route to both shards; under direct
	// dispatch, name the types in the leases.
	for _, w := range ws {
		if _, err := w.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := st.Counts()
	reqs := make([]producer.Request, n)
	for i := range reqs {
		reqs[i] = producer.Request{Type: "job", Input: map[string]int{"i": i}}
	}
	for _, r := range p.SubmitBatch(ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for done := 0; done < n; {
		for _, w := range ws {
			if _, err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			w.Wait()
		}
		done = 0
		for _, w := range ws {
			done += int(w.Stats().Succeeded)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d tasks done", done, n)
		}
	}
	var ran []int64
	for _, w := range ws {
		ran = append(ran, w.Stats().Succeeded)
	}
	return st.Counts().Sub(before), n, ran
}

// A worker with fewer slots than poll_batch holds what a listing returned
// beyond its free slots, and claims from it as slots free up: one LIST per
// poll_batch tasks, not one per slot's worth.
func TestFewSlotsShareOneListingPerBatch(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	const n = 100
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, st, worker.Config{ID: "a", Shards: 1, Concurrency: 2, PollBatch: 20, Dedicated: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
	if _, err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := make([]producer.Request, n)
	for i := range reqs {
		reqs[i] = producer.Request{Type: "job", Input: map[string]int{"i": i}}
	}
	for _, r := range p.SubmitBatch(ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	before := st.Counts()
	for polls := 0; w.Stats().Succeeded < n; polls++ {
		if polls > 10*n {
			t.Fatalf("only %d of %d tasks done after %d polls", w.Stats().Succeeded, n, polls)
		}
		if _, err := w.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		w.Wait()
	}
	c := st.Counts().Sub(before)
	if lists := c.Of(s3store.OpList); lists > n/20+2 {
		t.Fatalf("%d LISTs for %d tasks with poll_batch 20 and 2 slots, want at most %d (%s)", lists, n, n/20+2, c)
	}
}

// TestRequestsPerTaskDirect is TestRequestsPerTask under direct dispatch:
// the producer's inbox entry is the one more PUT per task (its DELETE is
// free), and the listings are of the workers' own inboxes. The shard scans
// still run: they carry the ready pointers.
func TestRequestsPerTaskDirect(t *testing.T) {
	c, n, ran := runTasksCounted(t, shards.DispatchDirect)
	per := func(op s3store.Op) float64 { return float64(c.Of(op)) / float64(n) }
	t.Logf("per task: PUT %.2f GET %.2f LIST %.3f HEAD %.3f DELETE %.2f (%s)", per(s3store.OpPut), per(s3store.OpGet), per(s3store.OpList), per(s3store.OpHead), per(s3store.OpDelete), c)
	for i, got := range ran {
		if got != int64(n/2) {
			t.Errorf("worker %d ran %d tasks, want %d (round robin)", i, got, n/2)
		}
	}
	if got := per(s3store.OpPut); got > 4.01 {
		t.Errorf("PUTs per task = %.2f: submit, inbox entry, claim and commit should be the only writes", got)
	}
	if got := per(s3store.OpDelete); got < 0.99 || got > 1.01 {
		t.Errorf("DELETEs per task = %.2f, want one (the inbox entry)", got)
	}
	if got := per(s3store.OpGet) + per(s3store.OpHead); got > 1.25 {
		t.Errorf("GET-class requests per task = %.2f, want about one (the claim's read, plus lease reads)", got)
	}
}
