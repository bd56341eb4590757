package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// Policy is what a Submitter does with a new submission when its buffer
// already holds MaxQueueDepth submissions that have not started.
type Policy string

// The policies of a Submitter. Whatever a policy refuses or drops is
// reported, never lost silently: a refusal by Add's error, a drop of an
// accepted submission by its Outcome.
const (
	// Block makes Add wait until there is room, in FIFO order with the
	// other Adds waiting, or until its ctx ends (the default).
	Block Policy = "block"
	// Reject makes Add fail at once with an error wrapping ErrQueueFull.
	Reject Policy = "reject"
	// DropLatest drops the new submission: Add fails at once with an error
	// wrapping ErrDropped and ErrQueueFull.
	DropLatest Policy = "drop-latest"
	// DropOldest drops the oldest submission in the buffer, whose Outcome
	// reports an error wrapping ErrDropped, and accepts the new one.
	DropOldest Policy = "drop-oldest"
)

// String returns the policy's name in queue.toml.
func (p Policy) String() string { return string(p) }

// ParsePolicy returns the policy named s: block, reject, drop-latest or
// drop-oldest.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case Block, Reject, DropLatest, DropOldest:
		return p, nil
	}
	return "", fmt.Errorf("invalid queue policy %q (want block, reject, drop-latest or drop-oldest)", s)
}

func (p Policy) check() error {
	_, err := ParsePolicy(string(p))
	return err
}

// Limits of a Submitter's settings.
const (
	// Unbounded as MaxQueueDepth lets the buffer grow without bound: no
	// policy ever applies, and memory grows with the backlog.
	Unbounded = -1
	// MaxQueueDepthLimit is the largest bounded MaxQueueDepth.
	MaxQueueDepthLimit = 1_000_000
	// MaxParallelism is the largest BatchParallelism and Parallel.
	MaxParallelism = 10_000
)

// Errors of a Submitter, tested with errors.Is.
var (
	// ErrQueueFull: the buffer was full and the policy (Reject, DropLatest)
	// refused the submission; Add returns it and nothing was submitted.
	ErrQueueFull = errors.New("submitter queue full")
	// ErrDropped: a drop policy shed the submission; nothing was
	// submitted. DropLatest returns it from Add, DropOldest reports it in
	// the Outcome of the submission it evicted.
	ErrDropped = errors.New("submission dropped")
	// ErrClosed: the submitter was closed. Add returns it after Close (and
	// to the Adds still waiting when Close is called); the Outcome of an
	// accepted submission carries it when Close's ctx ended before the
	// submission started.
	ErrClosed = errors.New("submitter closed")
)

// SubmitterConfig configures a Submitter. Zero fields take the producer's
// defaults (Config.BatchParallelism, MaxQueueDepth, QueuePolicy).
type SubmitterConfig struct {
	// Parallel is how many goroutines submit at once (1..MaxParallelism;
	// default Config.BatchParallelism).
	Parallel int
	// MaxQueueDepth bounds the submissions accepted and not yet started
	// (default Config.MaxQueueDepth, or twice Parallel when that is 0;
	// Unbounded for no bound). A submitter holds at most Parallel +
	// MaxQueueDepth requests, plus one per Add waiting under Block.
	MaxQueueDepth int
	// Policy applies when the buffer is full (default Config.QueuePolicy,
	// Block).
	Policy Policy
	// OnResult is told the outcome of each accepted submission, exactly
	// once: its task's id, the error of its submit, or its drop. It is
	// called from the submitter's goroutines (and from the Add whose
	// submission evicted another, under DropOldest), never under a lock,
	// so it must be safe for concurrent use; a slow OnResult slows the
	// submitter down, as a slow submit does. Nil logs errors and drops at
	// warn level.
	OnResult func(Outcome)
}

// Outcome is what became of a submission a Submitter accepted.
type Outcome struct {
	// Tag is what Add was given with the request, for the caller to tell
	// submissions apart (a line number, a record key); the submitter never
	// reads it.
	Tag any
	// Request is the request as Add accepted it.
	Request Request
	// Result holds the task's id, or the error: Submit's, one wrapping
	// ErrDropped, or one wrapping ErrClosed.
	Result
}

// Dropped reports whether a drop policy shed the submission.
func (o Outcome) Dropped() bool { return errors.Is(o.Err, ErrDropped) }

// SubmitterState is a snapshot of a Submitter: its settings, where its
// submissions are, and its totals. Every accepted submission is pending,
// in flight or finished: Accepted = Pending + InFlight + Submitted +
// Failed + Dropped.
type SubmitterState struct {
	// Waiting counts the Adds waiting for room (Block): their submissions
	// are not accepted yet.
	Waiting int
	// Pending counts the submissions accepted and not yet started.
	Pending int
	// InFlight counts the submissions being submitted.
	InFlight int

	Parallel      int
	MaxQueueDepth int // Unbounded for none
	Policy        Policy
	// Closed: Close was called; Add refuses new submissions.
	Closed bool

	// Accepted counts the Adds that returned nil.
	Accepted int64
	// Submitted and Failed count the outcomes with an id and with an
	// error other than a drop.
	Submitted, Failed int64
	// Dropped counts the accepted submissions that DropOldest evicted.
	Dropped int64
	// Refused counts the Adds that returned an error: rejected or dropped
	// at once, canceled while waiting, or after Close.
	Refused int64
}

// Submitter submits requests from a bounded FIFO buffer with a fixed set
// of goroutines, for a producer that receives work faster than the store
// accepts it. Add puts a request in the buffer; when the buffer is full
// the policy decides (see Policy). Each accepted request ends in exactly
// one Outcome; Close stops accepting and drains the buffer.
//
// Each submission is one Submit, with its requests: a Submitter adds none.
// It is safe for concurrent use.
type Submitter struct {
	p        *Producer
	cfg      SubmitterConfig
	onResult func(Outcome)
	// ctx is the submissions' context: Close cancels it when its own ends
	// before the buffer is drained.
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when every goroutine has returned

	mu      sync.Mutex
	work    *sync.Cond // one Signal per submission pushed; Broadcast at Close
	pending fifo
	waiters []*waiter // FIFO: the Adds waiting for room
	state   SubmitterState
}

// entry is a submission in the buffer.
type entry struct {
	req Request
	tag any
	// parent is the span context of Add's ctx: the submission's
	// s3queue.submit span is its child, though it runs under the
	// submitter's own context.
	parent trace.SpanContext
}

// waiter is an Add waiting for room. Whoever decides its fate (a goroutine
// freeing room, Close) sets err under the lock and closes decided.
type waiter struct {
	e       entry
	decided chan struct{}
	err     error // nil: accepted
}

// NewSubmitter starts a Submitter: its Parallel goroutines wait for work
// until Close.
func (p *Producer) NewSubmitter(cfg SubmitterConfig) (*Submitter, error) {
	if cfg.Parallel == 0 {
		cfg.Parallel = p.cfg.BatchParallelism
	}
	if cfg.MaxQueueDepth == 0 {
		cfg.MaxQueueDepth = p.cfg.MaxQueueDepth
	}
	if cfg.MaxQueueDepth == 0 {
		cfg.MaxQueueDepth = 2 * cfg.Parallel
	}
	if cfg.Policy == "" {
		cfg.Policy = p.cfg.QueuePolicy
	}
	switch {
	case cfg.Parallel < 1 || cfg.Parallel > MaxParallelism:
		return nil, fmt.Errorf("submitter: parallel %d out of range 1..%d", cfg.Parallel, MaxParallelism)
	case cfg.MaxQueueDepth < Unbounded || cfg.MaxQueueDepth > MaxQueueDepthLimit:
		return nil, fmt.Errorf("submitter: max queue depth %d out of range 1..%d (or %d: unbounded)", cfg.MaxQueueDepth, MaxQueueDepthLimit, Unbounded)
	}
	if err := cfg.Policy.check(); err != nil {
		return nil, fmt.Errorf("submitter: %w", err)
	}
	s := &Submitter{p: p, cfg: cfg, onResult: cfg.OnResult, done: make(chan struct{})}
	if s.onResult == nil {
		s.onResult = s.logOutcome
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.work = sync.NewCond(&s.mu)
	s.state.Parallel, s.state.MaxQueueDepth, s.state.Policy = cfg.Parallel, cfg.MaxQueueDepth, cfg.Policy
	var wg sync.WaitGroup
	for range cfg.Parallel {
		wg.Go(s.loop)
	}
	go func() {
		wg.Wait()
		s.cancel(nil)
		close(s.done)
	}()
	return s, nil
}

// Add hands req to the submitter; tag comes back in its Outcome. It
// returns nil once the submission is accepted: its Outcome follows,
// exactly once, through OnResult (possibly before Add returns). An error
// means it was not accepted and no Outcome follows: ErrQueueFull (Reject),
// ErrDropped (DropLatest), ErrClosed, or ctx's error when ctx ended while
// Add waited for room (Block; also when ctx had ended before the call).
//
// ctx bounds only the wait: the submission itself runs under the
// submitter's own context, which Close ends. Its span, s3queue.submit, is
// a child of ctx's, though (docs/tracing.md).
func (s *Submitter) Add(ctx context.Context, req Request, tag any) error {
	e := entry{req: req, tag: tag, parent: trace.SpanContextFromContext(ctx)}
	s.mu.Lock()
	if err := s.refuse(ctx); err != nil {
		s.state.Refused++
		s.mu.Unlock()
		return err
	}
	if s.hasRoom() {
		s.accept(e)
		s.mu.Unlock()
		return nil
	}
	switch s.cfg.Policy {
	case Reject:
		s.state.Refused++
		s.mu.Unlock()
		return fmt.Errorf("%w: %d submissions wait to start", ErrQueueFull, s.cfg.MaxQueueDepth)
	case DropLatest:
		s.state.Refused++
		s.mu.Unlock()
		return fmt.Errorf("%w (drop-latest): %w: %d submissions wait to start", ErrDropped, ErrQueueFull, s.cfg.MaxQueueDepth)
	case DropOldest:
		old := s.pending.pop()
		s.state.Dropped++
		s.accept(e)
		s.mu.Unlock()
		s.onResult(Outcome{Tag: old.tag, Request: old.req,
			Result: Result{Err: fmt.Errorf("%w (drop-oldest): a newer submission took its place", ErrDropped)}})
		return nil
	}
	w := &waiter{e: e, decided: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.state.Waiting = len(s.waiters)
	s.mu.Unlock()
	select {
	case <-w.decided:
		return w.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.decided:
		// Decided while ctx ended: accepted (its Outcome follows) or closed.
		return w.err
	default:
	}
	for i, x := range s.waiters {
		if x == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			break
		}
	}
	s.state.Waiting = len(s.waiters)
	s.state.Refused++
	return fmt.Errorf("submitter: wait for room: %w", ctx.Err())
}

// refuse returns why Add must refuse at once, if it must. Under s.mu.
func (s *Submitter) refuse(ctx context.Context) error {
	if s.state.Closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("submitter: %w", err)
	}
	return nil
}

// hasRoom reports whether a new submission may enter the buffer now: there
// is room, and no earlier Add is waiting for it (FIFO). Under s.mu.
func (s *Submitter) hasRoom() bool {
	return len(s.waiters) == 0 && (s.cfg.MaxQueueDepth == Unbounded || s.pending.len() < s.cfg.MaxQueueDepth)
}

// accept puts e in the buffer and wakes one goroutine. Under s.mu.
func (s *Submitter) accept(e entry) {
	s.pending.push(e)
	s.state.Accepted++
	s.state.Pending = s.pending.len()
	s.work.Signal()
}

// admitWaiters moves waiting Adds into the room the buffer has, oldest
// first. Under s.mu.
func (s *Submitter) admitWaiters() {
	for len(s.waiters) > 0 && (s.cfg.MaxQueueDepth == Unbounded || s.pending.len() < s.cfg.MaxQueueDepth) {
		w := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		s.accept(w.e)
		close(w.decided)
	}
	s.state.Waiting = len(s.waiters)
}

// loop is one of the submitter's goroutines: it submits from the buffer
// until Close and the buffer is empty.
func (s *Submitter) loop() {
	for {
		s.mu.Lock()
		for s.pending.len() == 0 && !s.state.Closed {
			s.work.Wait()
		}
		if s.pending.len() == 0 {
			s.mu.Unlock()
			return
		}
		e := s.pending.pop()
		s.state.InFlight++
		s.admitWaiters()
		s.state.Pending = s.pending.len()
		s.mu.Unlock()

		res := s.submit(e)
		s.mu.Lock()
		s.state.InFlight--
		if res.Err != nil {
			s.state.Failed++
		} else {
			s.state.Submitted++
		}
		s.mu.Unlock()
		s.onResult(Outcome{Tag: e.tag, Request: e.req, Result: res})
	}
}

func (s *Submitter) submit(e entry) Result {
	if err := s.ctx.Err(); err != nil {
		return Result{Err: fmt.Errorf("%w before the submission started: %w", ErrClosed, context.Cause(s.ctx))}
	}
	ctx := s.ctx
	if e.parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, e.parent)
	}
	id, err := s.p.Submit(ctx, e.req.Type, e.req.Input, e.req.Options)
	return Result{ID: id, Err: err}
}

func (s *Submitter) logOutcome(o Outcome) {
	if o.Err != nil {
		s.p.log.Warn("submission not submitted", "task_type", o.Request.Type, "tag", o.Tag, "err", o.Err)
	}
}

// Close stops accepting submissions (Adds still waiting get ErrClosed),
// submits what was accepted, and returns once every goroutine has
// returned and every Outcome has been reported. If ctx ends first, the
// submissions in flight are canceled and those not started are reported
// with an error wrapping ErrClosed; Close still waits for the goroutines,
// then returns ctx's error. A canceled submission may still have created
// its task (its PUT may have landed): resubmit with an idempotency key to
// be sure. Close may be called more than once.
func (s *Submitter) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.state.Closed {
		s.state.Closed = true
		for _, w := range s.waiters {
			w.err = fmt.Errorf("%w while Add waited for room", ErrClosed)
			close(w.decided)
			s.state.Refused++
		}
		s.waiters = nil
		s.state.Waiting = 0
		s.work.Broadcast()
	}
	s.mu.Unlock()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-s.done:
		return nil // drained as ctx ended: nothing was cut short
	default:
	}
	s.cancel(fmt.Errorf("close: %w", ctx.Err()))
	<-s.done
	return fmt.Errorf("submitter: close: %w", ctx.Err())
}

// State returns a snapshot of the submitter.
func (s *Submitter) State() SubmitterState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// fifo is a queue of entries: push at the back, pop at the front.
type fifo struct {
	items []entry
	head  int
}

func (f *fifo) len() int { return len(f.items) - f.head }

func (f *fifo) push(e entry) { f.items = append(f.items, e) }

func (f *fifo) pop() entry {
	e := f.items[f.head]
	f.items[f.head] = entry{} // release the request
	f.head++
	switch {
	case f.head == len(f.items):
		f.items, f.head = f.items[:0], 0
	case f.head >= 64 && 2*f.head >= len(f.items):
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	return e
}
