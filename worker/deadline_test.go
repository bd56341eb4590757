package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// A task found pending after its deadline is never started: the write its
// claim would have made ends it dead, with the reason, and a dead event.
func TestATaskPastItsDeadlineIsNeverStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := s3store.NewCounter(mem.New())
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.Submit(ctx, "job", nil, producer.Options{DeadlineIn: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		bus := events.NewBus()
		defer bus.Close()
		got := collect(bus)
		w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, Events: bus, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { ran.Add(1); return nil, nil })
		time.Sleep(5 * time.Second) // the bubble's clock: the deadline passes, and S3's 1 s Date with it
		puts := st.Counts().Of(s3store.OpPut)
		if n, err := w.Poll(ctx); n != 0 || err != nil {
			t.Fatalf("poll claimed %d (%v), want none", n, err)
		}
		w.Wait()
		if n := st.Counts().Of(s3store.OpPut) - puts; n != 1 {
			t.Fatalf("%d PUTs, want the one the claim would have made", n)
		}
		tk, err := p.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status != task.Dead || tk.Attempt != 0 || ran.Load() != 0 ||
			!strings.HasPrefix(tk.LastError, "deadline passed at ") || !strings.HasSuffix(tk.LastError, ", not started") {
			t.Fatalf("task %s attempt %d last error %q after %d runs, want dead, never started, with the deadline", tk.Status, tk.Attempt, tk.LastError, ran.Load())
		}
		got.wait(t, events.Dead, id)
	})
}

// A Go handler's context carries its deadline: the attempt's start plus
// the task's timeout, or the task's deadline when that comes sooner. A
// handler that runs into its timeout and returns the context's error
// fails the attempt as timed out (retried); one that runs into the task's
// deadline ends the task dead, not retried.
func TestAHandlerSeesItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := mem.New()
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		byTimeout, err := p.Submit(ctx, "job", nil, producer.Options{Timeout: 10 * time.Second, DeadlineIn: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		byDeadline, err := p.Submit(ctx, "job", nil, producer.Options{Timeout: time.Minute, DeadlineIn: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		none, err := p.Submit(ctx, "job", nil, producer.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		left := map[string]time.Duration{}
		errs := map[string]error{}
		done := make(chan struct{}, 3)
		w.Handle("job", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			defer func() { done <- struct{}{} }()
			d, ok := ctx.Deadline()
			if !ok {
				t.Errorf("task %s: the handler's context has no deadline", tk.ID)
			}
			mu.Lock()
			left[tk.ID] = time.Until(d)
			mu.Unlock()
			// A context the handler derives ends with the same error.
			inner, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			<-inner.Done() // runs until its context ends
			mu.Lock()
			errs[tk.ID] = ctx.Err()
			if inner.Err() != ctx.Err() {
				t.Errorf("task %s: a derived context ended with %v, its handler's with %v", tk.ID, inner.Err(), ctx.Err())
			}
			mu.Unlock()
			return nil, ctx.Err()
		})
		if n, err := w.Poll(ctx); n != 3 || err != nil {
			t.Fatalf("poll claimed %d (%v), want 3", n, err)
		}
		for range 3 {
			<-done
		}
		w.Wait()
		for _, id := range []string{byTimeout, none} {
			if d := left[id]; d != 10*time.Second {
				t.Errorf("a 10s timeout: the context ends in %s, want 10s", d)
			}
		}
		if d := left[byDeadline]; d <= 0 || d > 5*time.Second {
			t.Errorf("a deadline 5s away with a 1m timeout: the context ends in %s, want at most 5s", d)
		}
		for id, err := range errs {
			if err != context.DeadlineExceeded {
				t.Errorf("task %s: ctx.Err() = %v, want context.DeadlineExceeded", id, err)
			}
		}
		if tk, _ := p.Get(ctx, byDeadline); tk.Status != task.Dead || tk.Attempt != 1 ||
			!strings.HasPrefix(tk.LastError, "deadline passed at ") || !strings.HasSuffix(tk.LastError, " while running") {
			t.Errorf("the task that ran into its deadline: %s attempt %d, last error %q, want dead past its deadline", tk.Status, tk.Attempt, tk.LastError)
		}
		for _, id := range []string{byTimeout, none} {
			if tk, _ := p.Get(ctx, id); tk.Status != task.Pending || tk.Attempt != 1 || tk.LastError != "timed out after 10s" {
				t.Errorf("a task that ran into its timeout: %s attempt %d last error %q, want pending for a retry, \"timed out after 10s\"",
					tk.Status, tk.Attempt, tk.LastError)
			}
		}
	})
}

// A handler that ignores its context past its timeout keeps its lease: the
// worker renews it until the handler returns, nobody else runs the task,
// and the handler's success is recorded. One that returns its own error
// after the timeout fails the attempt as timed out, its error kept.
func TestAHandlerPastItsTimeoutKeepsItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := s3store.NewCounter(mem.New())
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := p.Submit(ctx, "ok", nil, producer.Options{Timeout: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		fails, err := p.Submit(ctx, "fails", nil, producer.Options{Timeout: 6 * time.Second, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("ok", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			time.Sleep(30 * time.Second) // five timeouts, its context ignored
			if ctx.Err() != context.DeadlineExceeded {
				t.Errorf("after its timeout: ctx.Err() = %v, want context.DeadlineExceeded", ctx.Err())
			}
			return json.RawMessage(`"late"`), nil
		})
		w.Handle("fails", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, errors.New("upload: connection reset")
		})
		if n, err := w.Poll(ctx); n != 2 || err != nil {
			t.Fatalf("poll claimed %d (%v), want 2", n, err)
		}
		w.Wait()
		tk, _ := p.Get(ctx, ok)
		if tk.Status != task.Succeeded || tk.Attempt != 1 || string(tk.Result) != `"late"` {
			t.Errorf("the handler that ignored its timeout: %s attempt %d result %s, want succeeded once", tk.Status, tk.Attempt, tk.Result)
		}
		// A renewal every third of the 6s lease, for 30s: about 15.
		if st := w.Stats(); st.LeaseLost != 0 || st.Renewed < 10 {
			t.Errorf("%d leases lost, %d renewals: the lease must be renewed past the timeout", st.LeaseLost, st.Renewed)
		}
		if tk, _ := p.Get(ctx, fails); tk.Status != task.Dead || tk.LastError != "timed out after 6s: upload: connection reset" {
			t.Errorf("the handler that failed after its timeout: %s last error %q", tk.Status, tk.LastError)
		}
	})
}
