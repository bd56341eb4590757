package s3queue

import (
	"context"
	"fmt"
	"iter"

	"github.com/s3queue/s3queue/producer"
)

// SubmitPolicy is what a Submitter does with a new submission when its
// buffer is full; see docs/flow-control.md.
type SubmitPolicy = producer.Policy

// The policies of a Submitter (queue.toml's producer.queue_policy).
const (
	// SubmitBlock: Add waits for room, in FIFO order, or until its ctx
	// ends (the default).
	SubmitBlock = producer.Block
	// SubmitReject: Add fails at once with ErrQueueFull.
	SubmitReject = producer.Reject
	// SubmitDropLatest: the new submission is dropped; Add fails at once
	// with ErrDropped (and ErrQueueFull).
	SubmitDropLatest = producer.DropLatest
	// SubmitDropOldest: the oldest submission waiting to start is dropped
	// (its Outcome has ErrDropped) and the new one accepted.
	SubmitDropOldest = producer.DropOldest
)

// Unbounded as SubmitterConfig.MaxQueueDepth lets a Submitter's buffer grow
// without bound; as a worker pool's MaxInFlight or MaxQueueDepth it sets no
// bound (the producer's and the worker's are both -1).
const Unbounded = producer.Unbounded

// SubmitterConfig configures a Submitter: how many goroutines submit, how
// many submissions may wait to start, the policy when that many wait, and
// the callback told each accepted submission's outcome. Zero fields take
// Config.Producer's BatchParallelism, MaxQueueDepth and QueuePolicy.
type SubmitterConfig = producer.SubmitterConfig

// SubmitOutcome is what became of a submission a Submitter accepted: its
// task's id, or its error (a drop wraps ErrDropped).
type SubmitOutcome = producer.Outcome

// SubmitterState is a snapshot of a Submitter: Adds waiting, submissions
// pending and in flight, and its totals.
type SubmitterState = producer.SubmitterState

// Errors of a Submitter, tested with errors.Is.
var (
	// ErrQueueFull: Add refused a submission because the buffer was full
	// (SubmitReject, SubmitDropLatest).
	ErrQueueFull = producer.ErrQueueFull
	// ErrDropped: a drop policy shed the submission; nothing was submitted.
	ErrDropped = producer.ErrDropped
	// ErrClosed: the Submitter was closed.
	ErrClosed = producer.ErrClosed
)

// Submitter submits tasks from a bounded buffer with a fixed set of
// goroutines, for producers that receive work faster than the store
// accepts it: Add hands it a request, the policy decides when the buffer
// is full, each accepted request ends in exactly one SubmitOutcome, and
// Close drains it. Requests take Config.Submit's defaults, as Submit's do.
// Each submission costs what one Submit costs. It is safe for concurrent
// use.
type Submitter struct {
	q *Queue
	s *producer.Submitter
}

// NewSubmitter starts a Submitter on the queue. Close it to drain it and
// stop its goroutines.
func (q *Queue) NewSubmitter(cfg SubmitterConfig) (*Submitter, error) {
	if on := cfg.OnResult; on != nil {
		cfg.OnResult = func(o SubmitOutcome) {
			o.Err = q.submitError(o.Request.Type, o.Err)
			on(o)
		}
	}
	s, err := q.producer.NewSubmitter(cfg)
	if err != nil {
		return nil, fmt.Errorf("s3queue: %w", err)
	}
	return &Submitter{q: q, s: s}, nil
}

// Add hands req to the submitter; tag comes back in its outcome. nil means
// accepted: its outcome follows through OnResult, exactly once. An error
// means not accepted, and no outcome follows: ErrQueueFull, ErrDropped,
// ErrClosed, or ctx's error when ctx ended while Add waited for room. ctx
// bounds only the wait, not the submission.
func (s *Submitter) Add(ctx context.Context, req Request, tag any) error {
	req.Options = s.q.withDefaults(req.Options)
	if err := s.s.Add(ctx, req, tag); err != nil {
		return fmt.Errorf("s3queue: %w", err)
	}
	return nil
}

// Close stops accepting, submits what was accepted, and returns once every
// outcome has been reported. If ctx ends first, what is in flight is
// canceled and what never started is reported with ErrClosed; Close then
// returns ctx's error.
func (s *Submitter) Close(ctx context.Context) error {
	if err := s.s.Close(ctx); err != nil {
		return fmt.Errorf("s3queue: %w", err)
	}
	return nil
}

// State returns a snapshot of the submitter.
func (s *Submitter) State() SubmitterState { return s.s.State() }

// SubmitEach submits a task for each item of items, at most n at once
// (n <= 0: Config.Producer.BatchParallelism), and yields each item with its
// Result as its submission finishes (not in the order of items). It takes
// the next item, and calls build for it, only once a slot is free: build
// the task's input there, so a batch of any length holds at most n
// inputs. A build error is the item's Result.Err. Breaking out of the loop
// cancels the submissions under way; when ctx ends, no more items are
// taken. See producer.SubmitEach.
func SubmitEach[T any](ctx context.Context, q *Queue, n int, items iter.Seq[T], build func(context.Context, T) (Request, error)) iter.Seq2[T, Result] {
	withDefaults := func(ctx context.Context, item T) (Request, error) {
		r, err := build(ctx, item)
		r.Options = q.withDefaults(r.Options)
		return r, err
	}
	return func(yield func(T, Result) bool) {
		for item, res := range producer.SubmitEach(ctx, q.producer, n, items, withDefaults) {
			if res.Err != nil {
				res.Err = fmt.Errorf("s3queue: %w", res.Err)
			}
			if !yield(item, res) {
				return
			}
		}
	}
}

// submitError wraps err, the error of a submission of type typ, as Submit
// does.
func (q *Queue) submitError(typ string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("s3queue: task type %q: %w", typ, err)
}
