package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/internal/ratelimit"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// A task held by a worker — waiting for a rate limit's window, or of a
// paused type — whose deadline passes is ended dead at its deadline ("not
// started"), not when the window opens or the type is resumed, and
// reserves no token of the limit.
func TestHeldTaskEndsDeadAtItsDeadline(t *testing.T) {
	for _, held := range []string{"rate limited", "paused"} {
		t.Run(held, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := mem.New()
				f := newFleet(t, st, 1)
				cfg := f.fast("a")
				cfg.Concurrency = 4
				cfg.Dedicated = true
				// Polls far apart: the worker must wake at the deadline.
				cfg.PollMin, cfg.PollMax = 20*time.Second, 20*time.Second
				limit := worker.RateLimit{N: 1, Interval: time.Hour}
				cfg.RateLimits = map[string]worker.RateLimit{"api": limit}
				if held == "paused" {
					if _, err := pause.Change(f.ctx, st, time.Now(), "test", "", pause.Pausing("api")); err != nil {
						t.Fatal(err)
					}
				}
				w, err := worker.New(f.ctx, st, cfg)
				if err != nil {
					t.Fatal(err)
				}
				w.Handle("api", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
				p := f.producer(st)
				var ids []string
				for range 3 {
					id, err := p.Submit(f.ctx, "api", nil, producer.Options{DeadlineIn: 15 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
				submitted := time.Now()
				// Started after the submits: its first poll finds them.
				ctx, cancel := context.WithCancel(f.ctx)
				done := make(chan struct{})
				go func() { w.Run(ctx); close(done) }()
				t.Cleanup(func() { cancel(); <-done })
				time.Sleep(10 * time.Second) // found and held, before the deadline
				ran, pending := 0, 0
				for _, id := range ids {
					tk, err := p.Get(f.ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					switch tk.Status {
					case task.Succeeded:
						ran++
					case task.Pending:
						pending++
					}
				}
				if want := map[string]int{"rate limited": 1, "paused": 0}[held]; ran != want || pending != 3-want {
					t.Fatalf("before the deadline: %d ran, %d pending; want %d ran, the others held", ran, pending, want)
				}
				time.Sleep(submitted.Add(15*time.Second + 3*time.Second).Sub(time.Now()))
				for _, id := range ids {
					tk, err := p.Get(f.ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if tk.Status == task.Succeeded {
						continue
					}
					if tk.Status != task.Dead || tk.Attempt != 0 || !strings.Contains(tk.LastError, "not started") {
						t.Errorf("held task %s 3 s past its deadline: %s, attempt %d, %q; want dead, not started", id, tk.Status, tk.Attempt, tk.LastError)
					}
				}
				if held == "rate limited" {
					c, _, err := ratelimit.Read(f.ctx, st, "api")
					if err != nil || c.Used != 1 {
						t.Errorf("counter %+v (%v): want the one start, no token for the tasks ended dead", c, err)
					}
				}
			})
		})
	}
}

// A rate limit for a type the worker has no handler for is logged as a
// warning naming the type when Run starts (a typo in --rate-limit would
// otherwise go unnoticed); a limit of a handled type is not.
func TestRateLimitOfAnUnhandledTypeIsWarned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs syncLog
		st := mem.New()
		f := newFleet(t, st, 1)
		cfg := f.fast("a")
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		cfg.RateLimits = map[string]worker.RateLimit{"api": {N: 1, Interval: time.Second}, "typo": {N: 5, Interval: time.Second}}
		w, err := worker.New(f.ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("api", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		ctx, cancel := context.WithCancel(f.ctx)
		cancel()
		w.Run(ctx)
		out := logs.String()
		if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "does not run") || !strings.Contains(out, "type=typo") {
			t.Errorf("log\n%s\nwant a warning naming type typo", out)
		}
		if strings.Contains(out, "type=api") {
			t.Errorf("log\n%s\nwarns about api, which the worker runs", out)
		}
	})
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
