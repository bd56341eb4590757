package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// The run span is the outermost handler middleware: the config's
// middleware runs inside it, sees the TaskInfo of the attempt and a
// handler's panic as a panic, and a panic it passes on ends the run span
// as an error and the attempt as a crash, as without middleware.
func TestMiddlewareRunsInsideTheRunSpanAndSeesPanics(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	tp, rec := recorded(t)
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "job", "boom", producer.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 4)
	mw := func(ctx context.Context, ti *worker.TaskInfo, next func(context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
		defer func() {
			if r := recover(); r != nil {
				seen <- fmt.Sprintf("panic %v", r)
				panic(r)
			}
		}()
		seen <- fmt.Sprintf("%s %s %d/%d in span %v", ti.ID, ti.Type, ti.Attempt, ti.MaxAttempts, trace.SpanFromContext(ctx).SpanContext().IsValid())
		return next(ctx)
	}
	w, err := worker.New(ctx, st, worker.Config{ID: "w-mw", Shards: 1, OwnShards: []int{0}, TracerProvider: tp,
		PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond, Middleware: []worker.Middleware{mw}})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { panic("boom") })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	waitStatus(t, p, id, task.Dead)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := <-seen, id+" job 1/1 in span true"; got != want {
		t.Errorf("middleware saw %q, want %q", got, want)
	}
	if got := <-seen; got != "panic boom" {
		t.Errorf("middleware saw %q, want the panic", got)
	}
	runs := spans(rec, "s3queue.run", id)
	if len(runs) != 1 || runs[0].Status().Code != codes.Error || runs[0].Status().Description != "handler panicked: boom" {
		t.Fatalf("run spans %v: want one, an error saying the handler panicked", runs)
	}
	tk, err := p.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.LastError != "handler panicked: boom" || w.Stats().Panics != 1 {
		t.Errorf("last error %q, panics %d: the crash was not recorded as without middleware", tk.LastError, w.Stats().Panics)
	}
}
