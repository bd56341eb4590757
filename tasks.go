package s3queue

import (
	"context"
	"fmt"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/task"
)

// Task is a task as stored in the bucket: its spec, status, attempts,
// result, last error and history.
type Task = task.Task

// Status is where a task is in its life.
type Status = task.Status

// The statuses of a task. Succeeded, Dead and Canceled are final, until a
// Requeue of a dead or canceled task. Blocked: the task waits for its
// dependencies (SubmitOptions.DependsOn; docs/dependencies.md).
const (
	Pending   = task.Pending
	Blocked   = task.Blocked
	Running   = task.Running
	Succeeded = task.Succeeded
	Dead      = task.Dead
	Canceled  = task.Canceled
)

// Transition is one entry of a task's history.
type Transition = task.Transition

// RetryPolicy is the backoff between a task's attempts.
type RetryPolicy = task.RetryPolicy

// SubmitOptions are the per-task settings of Submit: delay or run time,
// attempts, retry policy, timeout, idempotency key, shard key. Zero
// MaxAttempts, Timeout and Retry take Config.Submit.
type SubmitOptions = producer.Options

// DepFailure is what a dependency that ends dead or canceled does to its
// dependents (SubmitOptions.OnDepFailure; docs/dependencies.md).
type DepFailure = task.DepFailure

const (
	// DepCancel (default): the dependent is canceled; it never ran.
	DepCancel = task.DepCancel
	// DepFail: the dependent is dead, as if it had failed for good.
	DepFail = task.DepFail
)

// Admission is how a task takes its place in its slot
// (SubmitOptions.Admission; docs/slots.md).
type Admission = producer.Admission

const (
	// AdmitQueue (default): the task waits its turn.
	AdmitQueue = producer.AdmitQueue
	// AdmitReplace: latest wins: the task replaces the one waiting next,
	// and the holder is asked to stop.
	AdmitReplace = producer.AdmitReplace
	// AdmitDropIfRunning: refused with ErrSlotBusy while the slot is
	// busy; nothing is created.
	AdmitDropIfRunning = producer.AdmitDropIfRunning
)

// Request is one task of a SubmitBatch.
type Request = producer.Request

// Result is the outcome of one Request: the task's id, or why it was not
// submitted.
type Result = producer.Result

// Errors of Submit, Get, Cancel and Requeue, tested with errors.Is.
var (
	// ErrNotFound: no task has this id (or retention deleted it).
	ErrNotFound = producer.ErrNotFound
	// ErrIdempotencyConflict: the idempotency key is taken by a task of
	// another type or input; Submit returns that task's id with it.
	ErrIdempotencyConflict = producer.ErrIdempotencyConflict
	// ErrTerminal: Cancel of a task that already finished.
	ErrTerminal = task.ErrTerminal
	// ErrNotRequeueable: Requeue of a task that is not dead or canceled.
	ErrNotRequeueable = task.ErrNotRequeueable
	// ErrUnknownDependency: a DependsOn id names no task of this queue.
	ErrUnknownDependency = producer.ErrUnknownDependency
	// ErrDependencyNotMet: Requeue of a task whose dependencies have not
	// all succeeded.
	ErrDependencyNotMet = producer.ErrDependencyNotMet
	// ErrOutcomeUnknown: Submit could not learn whether its task was
	// created (the store failed after the create may have landed, for a
	// minute or until ctx ended); it returns the task's id with it, and a
	// Submit again with SubmitOptions.ID set to that id creates the task
	// once, whatever became of the first.
	ErrOutcomeUnknown = producer.ErrOutcomeUnknown
	// ErrSlotBusy: a drop-if-running submit found its slot busy; nothing
	// was created.
	ErrSlotBusy = producer.ErrSlotBusy
	// ErrRetired: the task expired by retention and is being deleted.
	ErrRetired = task.ErrRetired
	// ErrResultUnavailable: a result stored apart cannot be read back as
	// its task references it (Get).
	ErrResultUnavailable = producer.ErrResultUnavailable
	// ErrStatusChanged: CancelIf or RequeueIf of a task in none of the
	// statuses asked for (it changed since the caller looked).
	ErrStatusChanged = producer.ErrStatusChanged
)

// Submit creates a task of type typ with input (any JSON-encodable value;
// json.RawMessage and []byte are taken as JSON text) and returns its id.
// It costs one PUT, two with an idempotency key (or Unique); a key whose
// uniqueness window (UniqueFor) has passed costs a failed PUT, a GET and
// two PUTs (docs/scheduling.md). With
// ErrIdempotencyConflict it also returns the id of the task that holds the
// key; with ErrOutcomeUnknown, the id of the task that may exist, to
// submit again under (SubmitOptions.ID). Any other error created nothing.
func (q *Queue) Submit(ctx context.Context, typ string, input any, opts SubmitOptions) (string, error) {
	id, err := q.producer.Submit(ctx, typ, input, q.withDefaults(opts))
	if err != nil {
		return id, fmt.Errorf("s3queue: task type %q: %w", typ, err)
	}
	return id, nil
}

// SubmitBatch submits reqs with a bounded number of requests in flight
// (Config.Producer.BatchParallelism) and returns one Result per request, in
// order. A request that fails does not stop the others. For batches too
// large to hold in memory, see SubmitEach; for work that keeps arriving,
// NewSubmitter.
func (q *Queue) SubmitBatch(ctx context.Context, reqs []Request) []Result {
	withDefaults := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Options = q.withDefaults(r.Options)
		withDefaults[i] = r
	}
	out := q.producer.SubmitBatch(ctx, withDefaults)
	for i := range out {
		out[i].Err = q.submitError(reqs[i].Type, out[i].Err)
	}
	return out
}

func (q *Queue) withDefaults(o SubmitOptions) SubmitOptions {
	d := q.cfg.Submit
	if o.MaxAttempts == 0 {
		o.MaxAttempts = d.MaxAttempts
	}
	if o.Timeout == 0 {
		o.Timeout = d.Timeout
	}
	if o.Retry == nil {
		o.Retry = d.Retry
	}
	return o
}

// Get returns the task with id (one GET), or an error wrapping ErrNotFound.
// A result stored apart (larger than the workers' result_inline_max) is
// read too, one GET more, and returned in Task.Result, checked against the
// task's reference (Task.ResultRef: size and SHA-256). If it cannot be
// (its object is missing or does not match), Get returns the task, Result
// empty, with an error wrapping ErrResultUnavailable that names the task.
// A result dropped by the monitor's result TTL is gone: Result is empty and
// Task.ResultExpiredAt says when.
func (q *Queue) Get(ctx context.Context, id string) (*Task, error) {
	t, err := q.producer.Get(ctx, id)
	if err != nil {
		if t != nil {
			return t, fmt.Errorf("s3queue: get: %w", err)
		}
		return nil, fmt.Errorf("s3queue: get: %w", err)
	}
	return t, nil
}

// Lookup returns task id as its object holds it, with one GET: unlike
// Get, a result stored apart is not read (Task.ResultRef names it). Use it
// for a task's state or history.
func (q *Queue) Lookup(ctx context.Context, id string) (*Task, error) {
	t, err := q.producer.Lookup(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("s3queue: get: %w", err)
	}
	return t, nil
}

// History returns the task's transitions, oldest first (one GET). It keeps
// the first transition and the last 31; Task.HistoryDropped counts the
// others.
func (q *Queue) History(ctx context.Context, id string) ([]Transition, error) {
	h, err := q.producer.History(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("s3queue: history: %w", err)
	}
	return h, nil
}

// Cancel cancels task id. A pending task is canceled at once; a running one
// is asked to stop, and its handler's context is canceled no later than the
// worker's next lease renewal (context.Cause is ErrCanceled). It reports
// whether the task was running. A finished task is ErrTerminal.
func (q *Queue) Cancel(ctx context.Context, id string) (requested bool, err error) {
	requested, err = q.producer.Cancel(ctx, id)
	if err != nil {
		return false, fmt.Errorf("s3queue: cancel: %w", err)
	}
	return requested, nil
}

// CancelIf is Cancel of a task that is in one of the statuses only (any if
// none) as the cancel reads it: the status is checked on the version the
// cancel's write replaces, so a task that moved on since the caller looked
// (a pending task claimed meanwhile) is left alone: ErrStatusChanged. It
// costs what Cancel costs.
func (q *Queue) CancelIf(ctx context.Context, id string, only ...Status) (requested bool, err error) {
	requested, err = q.producer.CancelIf(ctx, id, only...)
	if err != nil {
		return false, fmt.Errorf("s3queue: cancel: %w", err)
	}
	return requested, nil
}

// Requeue takes a dead or canceled task back to pending with a fresh budget
// of attempts (its last error is kept), and announces it to the workers.
// Any other status is ErrNotRequeueable; a task that retention has begun to
// delete is ErrRetired.
func (q *Queue) Requeue(ctx context.Context, id string) error {
	if err := q.producer.Requeue(ctx, id); err != nil {
		return fmt.Errorf("s3queue: requeue: %w", err)
	}
	return nil
}

// RequeueIf is Requeue of a task that is in one of the statuses only (any
// if none) as the requeue reads it: the status is checked on the version
// the requeue's write replaces, so a task that moved on since the caller
// looked (a canceled task requeued and now dead) is left alone:
// ErrStatusChanged. It costs what Requeue costs.
func (q *Queue) RequeueIf(ctx context.Context, id string, only ...Status) error {
	if err := q.producer.RequeueIf(ctx, id, only...); err != nil {
		return fmt.Errorf("s3queue: requeue: %w", err)
	}
	return nil
}
