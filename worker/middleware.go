package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/internal/tracing"
	"github.com/s3queue/s3queue/task"
)

// TaskInfo is what handler middleware (and the s3queue package's typed
// handlers) see of the attempt they run: the task's identity and counts,
// and, for what they do not cover, the task as claimed.
type TaskInfo struct {
	// ID and Type are the task's.
	ID, Type string
	// Attempt is the attempt this run is: 1 for the first. A snooze
	// (RetryAfter, RetryLater) or a release at shutdown gives its attempt
	// back, so the next run is the same attempt.
	Attempt int
	// MaxAttempts is the task's budget of attempts: the run of attempt
	// MaxAttempts is its last, unless it snoozes.
	MaxAttempts int
	// Snoozes counts the snoozes of the task's handler so far.
	Snoozes int
	// Task is the task as its claim wrote it (input, options, history),
	// the run's own copy: changing it changes nothing in the queue.
	Task *task.Task
}

// Info returns what a handler's middleware sees of t.
func Info(t *task.Task) *TaskInfo {
	return &TaskInfo{ID: t.ID, Type: t.Type, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, Snoozes: t.Snoozes, Task: t}
}

// Middleware wraps every handler invocation of a worker
// (Config.Middleware): it runs the attempt by calling next, with ctx or a
// context derived from it, and returns what next returned or an outcome
// of its own (an error fails the attempt as a handler's would; Permanent,
// RetryAfter and RetryLater work here too). It may act before and after,
// or return without calling next. A panic in next reaches it as a panic:
// recover it to report it, and panic again to keep the worker's crash
// handling (Config.CrashPolicy).
//
// ctx is the handler's: it carries the run's span (s3queue.run) and ends
// as the handler's does.
type Middleware func(ctx context.Context, t *TaskInfo, next func(context.Context) (json.RawMessage, error)) (json.RawMessage, error)

// invoke runs h on t through the worker's middleware: the run's span
// outermost, then Config.Middleware in order, the first outermost.
func (w *Worker) invoke(ctx context.Context, t *task.Task, h Handler) (json.RawMessage, error) {
	info := Info(t)
	call := func(ctx context.Context) (json.RawMessage, error) { return h(ctx, t) }
	mws := w.cfg.Middleware
	for i := len(mws) - 1; i >= -1; i-- {
		mw := w.traceRun
		if i >= 0 {
			mw = mws[i]
		}
		next := call
		call = func(ctx context.Context) (json.RawMessage, error) { return mw(ctx, info, next) }
	}
	return call(ctx)
}

// traceRun is the middleware of the run's span, s3queue.run: a child of
// ctx's span context (the submit's, carried by the task, or the claim's),
// and the parent of the spans the handler starts.
func (w *Worker) traceRun(ctx context.Context, t *TaskInfo, next func(context.Context) (json.RawMessage, error)) (res json.RawMessage, err error) {
	ctx, span := w.trace.Tracer.Start(ctx, tracing.SpanRun, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(append(taskAttrs(t.Task, w.cfg.ID), tracing.Operation.String("run"), tracing.OperationType.String("process"))...)
	}
	defer func() {
		if p := recover(); p != nil {
			endRun(span, fmt.Errorf("handler panicked: %v", p))
			panic(p) // the worker's crash handling (execute)
		}
	}()
	res, err = next(ctx)
	endRun(span, err)
	return res, err
}
