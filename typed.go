package s3queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// Args is the input of a typed task: a JSON-encodable value (a struct, as
// a rule) whose Kind is its task type. Kind must return a constant: Handle
// calls it on the zero value, so give it a value receiver.
//
//	type Resize struct{ Image string `json:"image"` }
//
//	func (Resize) Kind() string { return "resize" }
type Args interface {
	Kind() string
}

// TaskInfo is what a typed handler and handler middleware see of the
// attempt they run: the task's ID, Type, Attempt (1 for the first),
// MaxAttempts and Snoozes, and the stored task itself (Task) for the rest.
type TaskInfo = worker.TaskInfo

// Job is one attempt of a task as a typed handler sees it: the TaskInfo
// fields, and the task's input decoded as Args.
type Job[A any] struct {
	TaskInfo
	// Args is the task's input, decoded from its JSON (the zero value for
	// a task without input).
	Args A
}

// Handle registers fn as w's handler of the tasks of type A.Kind(). It
// decodes each task's input into a Job's Args, and stores what fn returns
// as the task's result, encoded as JSON (a nil pointer, map, slice or
// interface stores none). fn's errors mean what a Handler's do (Permanent,
// RetryAfter, RetryLater).
//
// An input that does not decode as A ends the task dead at once, its last
// error naming the task type, A and the decode error: running it again
// cannot help. A result that does not encode does the same.
//
// It panics if A's Kind is not a valid task type.
func Handle[A Args, R any](w *Worker, fn func(ctx context.Context, j *Job[A]) (R, error)) {
	var zero A
	HandleType(w, zero.Kind(), fn)
}

// HandleType is Handle for the tasks of type typ, whatever A is: for
// inputs without a Kind method (a map, a string), or for tasks of several
// types with one input type.
func HandleType[A, R any](w *Worker, typ string, fn func(ctx context.Context, j *Job[A]) (R, error)) {
	if err := task.ValidType(typ); err != nil {
		panic(fmt.Sprintf("s3queue: handle %T: %v", *new(A), err))
	}
	w.Handle(typ, func(ctx context.Context, t *Task) (json.RawMessage, error) {
		j := &Job[A]{TaskInfo: *worker.Info(t)}
		if len(t.Input) > 0 {
			if err := json.Unmarshal(t.Input, &j.Args); err != nil {
				return nil, Permanent(fmt.Errorf("task type %q: decode input as %T: %w", typ, j.Args, err))
			}
		}
		r, err := fn(ctx, j)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, Permanent(fmt.Errorf("task type %q: encode result %T: %w", typ, r, err))
		}
		if bytes.Equal(b, []byte("null")) {
			return nil, nil
		}
		return b, nil
	})
}

// SubmitArgs submits a task of type args.Kind() with args as its input,
// as Submit does, with the options given (at most one; none takes
// Config.Submit's defaults).
func (q *Queue) SubmitArgs(ctx context.Context, args Args, opts ...SubmitOptions) (string, error) {
	if args == nil {
		return "", errors.New("s3queue: submit: nil args")
	}
	var o SubmitOptions
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return "", fmt.Errorf("s3queue: task type %q: submit: %d SubmitOptions given, at most one allowed", args.Kind(), len(opts))
	}
	return q.Submit(ctx, args.Kind(), args, o)
}

// ErrNotSucceeded: ResultOf of a task that has not succeeded (yet).
var ErrNotSucceeded = errors.New("task has not succeeded")

// ResultOf returns the result of task id decoded as R, as Get reads it
// (one GET; two for a result stored apart). A task that has not
// succeeded is an error wrapping ErrNotSucceeded that says its status
// (and the last error of a dead one); a succeeded task without a result
// gives R's zero value. A result the monitor's result TTL dropped, or one
// stored apart that cannot be read, is an error wrapping
// ErrResultUnavailable; one that does not decode as R, the decode error.
func ResultOf[R any](ctx context.Context, q *Queue, id string) (R, error) {
	var r R
	t, err := q.Get(ctx, id)
	if err != nil {
		return r, err
	}
	switch {
	case t.Status == Dead && t.LastError != "":
		return r, fmt.Errorf("s3queue: result of task %s: %w: it is dead: %s", id, ErrNotSucceeded, t.LastError)
	case t.Status != Succeeded:
		return r, fmt.Errorf("s3queue: result of task %s: %w: it is %s", id, ErrNotSucceeded, t.Status)
	case len(t.Result) == 0 && !t.ResultExpiredAt.IsZero():
		return r, fmt.Errorf("s3queue: result of task %s: %w: it expired at %s", id, producer.ErrResultUnavailable, t.ResultExpiredAt.Format("2006-01-02T15:04:05Z07:00"))
	case len(t.Result) == 0:
		return r, nil
	}
	if err := json.Unmarshal(t.Result, &r); err != nil {
		return r, fmt.Errorf("s3queue: result of task %s: decode as %T: %w", id, r, err)
	}
	return r, nil
}

// Middleware of the queue's services.
type (
	// HandlerMiddleware wraps every handler invocation of a worker
	// (WorkerConfig.Middleware, the first outermost): it gets the
	// handler's context, the attempt's TaskInfo, and next, which runs the
	// rest of the chain and the handler. It returns next's outcome or an
	// outcome of its own, and may act before and after. A handler's panic
	// reaches it as a panic: recover it to report it, and panic again to
	// keep the worker's crash handling (WorkerConfig.CrashPolicy). The
	// worker's s3queue.run span is the outermost layer: ctx carries it.
	HandlerMiddleware = worker.Middleware
	// SubmitMiddleware wraps every submit of the queue (Submit,
	// SubmitArgs, SubmitBatch, SubmitEach, a Submitter's, a schedule's
	// ticks; ProducerConfig.Middleware, the first outermost): it gets the
	// Request, with Config.Submit's defaults applied, and submits it by
	// calling next, changed or not; an error returned without calling next
	// refuses it, and nothing is created. The s3queue.submit span is
	// next's: a span the middleware starts around next is its parent, and
	// the trace the task carries to its workers.
	SubmitMiddleware = producer.Middleware
)
