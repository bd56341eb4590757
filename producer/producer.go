// Package producer is the Go API for submitting and managing tasks: Submit,
// SubmitBatch, Get, History, Cancel and Requeue, and flow control for
// producers: a bounded Submitter and SubmitEach (reserve, then build).
// Every call is a few requests against the bucket; the producer holds no
// state beyond the queue manifest and its clock (a Submitter holds only its
// bounded buffer).
package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/internal/tracing"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// ErrNotFound reports an unknown task id.
var ErrNotFound = errors.New("task not found")

// ErrIdempotencyConflict reports a Submit whose idempotency key is already
// taken by a task of another type or input. Submit returns that task's id
// with it. A Submit under Options.ID that finds a task of another type or
// input under that id fails with it too.
var ErrIdempotencyConflict = errors.New("idempotency key already used by a task of another type or input")

// ErrOutcomeUnknown reports a Submit whose task may or may not exist: its
// create failed in a way that may have come after it landed (a lost
// response), and every try since to learn which failed too, for
// outcomeWait (or until ctx ended). Submit returns the task's id with it.
// It is not a failure: a Submit told "failed" created nothing, and may be
// made again; one told ErrOutcomeUnknown is made again safely only under
// that id (Options.ID), which creates the task once whatever became of the
// first. (An idempotency key dedupes by itself: submitting again with the
// key is safe too.)
var ErrOutcomeUnknown = errors.New("the outcome is unknown: the task may exist")

// outcomeWait is how long Submit keeps trying to learn the outcome of a
// create whose response was lost and whose reads back failed: it makes the
// same create again (the same id, If-None-Match) until it lands or meets
// the first one, pausing from half a second to 8 s between tries.
const outcomeWait = time.Minute

// Selection is how a producer under direct dispatch picks among the live
// workers that run a task's type (Config.Selection): "round_robin" (each
// in turn, the default, "" too), "hash" (by the task id: a task's worker is
// stable) or "random", the values of queue.toml's worker_selection.
type Selection string

// Config configures a Producer.
type Config struct {
	// Shards must match the queue's manifest; 0 accepts the queue's count.
	Shards int
	// DispatchMode must match the queue's manifest ([queue]
	// dispatch_mode): shards.DispatchShared ("" too) or
	// shards.DispatchDirect. Under direct dispatch Submit routes each new
	// task to the inbox of a live worker that runs its type, chosen by
	// Selection (round_robin by default) from a view of the worker leases
	// read at most every DiscoveryTTL (default 30s), and rings that
	// worker's doorbell if it sleeps; with none live it announces the task
	// on the shared path (docs/direct-dispatch.md).
	DispatchMode shards.DispatchMode
	DiscoveryTTL time.Duration
	Selection    Selection
	// LateAfter: a task whose PUT completes this long after its id's time
	// is also announced in the ready index, since shard scans may have
	// passed it (default 2s, half the workers' default scan lag).
	LateAfter time.Duration
	// BatchParallelism bounds SubmitBatch, is SubmitEach's bound when it
	// is given none, and is the default Parallel of a Submitter (default 8,
	// at most MaxParallelism; queue.toml's producer.batch_parallelism).
	BatchParallelism int
	// MaxQueueDepth is the default SubmitterConfig.MaxQueueDepth: 0 is
	// twice the submitter's parallelism, Unbounded none
	// (producer.max_queue_depth).
	MaxQueueDepth int
	// QueuePolicy is the default SubmitterConfig.Policy (default Block;
	// producer.queue_policy).
	QueuePolicy Policy
	Logger      *slog.Logger
	// Clock, if set, is shared with other components of this process.
	Clock *clock.Authoritative
	// Local is this machine's monotonic clock: it paces retries and ages
	// the cached fleet view, and times Clock when the producer makes its
	// own (default clock.System()).
	Local clock.Local
	// LeaseMargin must match the workers' (default 2s): it decides which
	// fleet members the producer counts as live.
	LeaseMargin time.Duration
	// Events, if set, is the bus the producer publishes on: submitted for
	// each task it creates (not for a Submit that an idempotency key
	// answers with an existing task), canceled or cancel_requested from
	// Cancel, requeued from Requeue (docs/events.md).
	Events *events.Bus
	// Rand is the source of every random draw: task ids, jitter,
	// shard choice; nil means crypto/rand.Reader. Reads are serialised, so
	// it need not be safe for concurrent use. A read that fails panics,
	// except for a task id's, which Submit returns as an error.
	Rand io.Reader
	// TracerProvider makes the producer's spans (s3queue.submit,
	// s3queue.submit_batch; docs/tracing.md); nil is
	// otel.GetTracerProvider(), a no-op unless the program installs one.
	TracerProvider trace.TracerProvider
	// Middleware wraps every submit (Submit, and so SubmitBatch, SubmitEach
	// and the Submitter), the first outermost (see Middleware).
	Middleware []Middleware
}

// Middleware wraps every submit of a producer (Config.Middleware): it
// submits req by calling next, with ctx or a context derived from it,
// and returns what next returned. It may change req first (its type,
// input or options), refuse it by returning an error without calling
// next (nothing is created, and Submit returns the error), or act after.
// The s3queue.submit span is next's: a span the middleware starts around
// next is its parent, and the trace the task carries.
type Middleware func(ctx context.Context, req Request, next func(context.Context, Request) (string, error)) (string, error)

// Producer submits and manages tasks.
type Producer struct {
	st    s3store.Store
	cfg   Config
	clock *clock.Authoritative
	fleet *shards.FleetCache
	// mu guards the manifest, which a reshard replaces (see layout).
	mu       sync.Mutex
	manifest shards.Manifest
	reread   time.Time // local time of the last re-read of the manifest
	log      *slog.Logger
	rand     *rnd.Source // cfg.Rand, shared with fleet
	local    clock.Local
	cas      s3store.CAS
	dir      *direct.Directory // direct dispatch's view of the workers; nil in the shared mode
	trace    tracing.Tracing
}

// New opens the queue in st (creating its manifest if the queue is new).
func New(ctx context.Context, st s3store.Store, cfg Config) (*Producer, error) {
	if cfg.LateAfter <= 0 {
		cfg.LateAfter = 2 * time.Second
	}
	configKeys.Fill(&cfg)
	if err := configKeys.Validate(&cfg); err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaseMargin <= 0 {
		cfg.LeaseMargin = 2 * time.Second
	}
	local := cfg.Local
	if local == nil {
		local = clock.System()
	}
	// The clock exists before the first request, so every response syncs it.
	c := cfg.Clock
	if c == nil {
		c = clock.New(st, clock.Config{Local: local})
	}
	if cfg.DiscoveryTTL <= 0 {
		cfg.DiscoveryTTL = 30 * time.Second
	}
	if cfg.Selection == "" {
		cfg.Selection = Selection(direct.RoundRobin)
	}
	if _, err := direct.ParseSelection(string(cfg.Selection)); err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	m, err := shards.OpenMode(ctx, st, cfg.Shards, cfg.DispatchMode)
	if err != nil {
		return nil, err
	}
	src := rnd.New(cfg.Rand)
	p := &Producer{st: st, cfg: cfg, clock: c, manifest: m, fleet: shards.NewFleetCache(st, cfg.LeaseMargin, local, src),
		log: cfg.Logger.WithGroup("producer"), rand: src, local: local, trace: tracing.New(cfg.TracerProvider, cfg.Logger.WithGroup("producer"))}
	p.cas = s3store.CAS{Jitter: src.Float64, Sleep: p.sleep}
	if m.Direct() {
		p.dir = &direct.Directory{St: st, Local: local, TTL: cfg.DiscoveryTTL, Margin: cfg.LeaseMargin,
			Selection: direct.Selection(cfg.Selection), IntN: src.IntN}
	}
	return p, nil
}

// Manifest returns the queue's layout, as the producer last read it: the
// producer re-reads it when the fleet shows that the queue was resharded.
func (p *Producer) Manifest() shards.Manifest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.manifest
}

// layout returns the manifest and the shard count to route new tasks by:
// the fleet's (the count members assign shards by), never more than the
// manifest's, since ids are placed with the manifest's count. It looks at
// the fleet as last read (routing reads it when the view is stale), so it
// makes no fleet request of its own. A fleet that shows more shards than
// the manifest means the queue was resharded: the manifest is read again
// first (one GET, at most once per FleetCacheTTL until it shows them).
func (p *Producer) layout(ctx context.Context) (shards.Manifest, int) {
	f := p.fleet.Cached()
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.Shards > p.manifest.Shards {
		p.learn(ctx)
	}
	return p.manifest, min(f.ShardCount(p.manifest.Shards), p.manifest.Shards)
}

// learn re-reads the manifest, under p.mu, unless it did less than
// FleetCacheTTL ago, and reports whether it found more shards.
func (p *Producer) learn(ctx context.Context) bool {
	if !p.reread.IsZero() && clock.Since(p.local, p.reread) < shards.FleetCacheTTL {
		return false
	}
	p.reread = p.local.Now()
	m, err := shards.ReadManifest(ctx, p.st)
	if err != nil {
		p.log.Warn("re-read the queue manifest", "err", err)
		return false
	}
	if m.Shards <= p.manifest.Shards {
		return false
	}
	p.log.Info("the queue was resharded", "shards", m.Shards, "was", p.manifest.Shards)
	p.manifest = m
	return true
}

// Admission is how a task takes its place in its slot (Options.Admission):
// AdmitQueue ("" too), AdmitReplace or AdmitDropIfRunning, the strings
// "queue", "replace" and "drop-if-running" of the CLI and batch lines.
// ParseAdmission checks one.
type Admission string

// The admissions of a submit (docs/slots.md).
const (
	// AdmitQueue: the task waits its turn behind the slot's holder.
	AdmitQueue = Admission(deps.AdmitQueue)
	// AdmitReplace: latest wins: the task replaces the one waiting next
	// (canceled), and the holder is asked to stop.
	AdmitReplace = Admission(deps.AdmitReplace)
	// AdmitDropIfRunning: refused with ErrSlotBusy while the slot has a
	// holder or a task waiting; nothing is created.
	AdmitDropIfRunning = Admission(deps.AdmitDropIfRunning)
)

// ParseAdmission parses an admission's name ("" is AdmitQueue).
func ParseAdmission(s string) (Admission, error) {
	a, err := deps.ParseAdmission(s)
	return Admission(a), err
}

// Options are the per-task settings of Submit.
type Options struct {
	// Delay makes the task available this long after submit.
	Delay time.Duration
	// RunAt makes the task available at this time (S3 time); it wins over
	// Delay when both are set.
	RunAt time.Time
	// Deadline is the S3 time after which the task is not started: a
	// worker that finds it pending later ends it dead ("deadline passed
	// at ..., not started"), a retry due after it ends dead, and a Go
	// handler's context ends at it. It must lie after the submit and after
	// the task's availability. Zero means none. See docs/lifecycle.md.
	Deadline time.Time
	// DeadlineIn sets the deadline this long after the submit's S3 time;
	// Deadline wins when both are set.
	DeadlineIn time.Duration
	// MaxAttempts before the task is dead (default
	// [task.DefaultMaxAttempts]).
	MaxAttempts int
	// Retry is the backoff between attempts (default
	// [task.DefaultRetryPolicy]).
	Retry *task.RetryPolicy
	// Timeout is the lease of one attempt (default [task.DefaultTimeout]);
	// workers renew it while the handler runs, and a Go handler's context
	// ends this long after the attempt started. It must exceed twice
	// Config.LeaseMargin (4s at the default margin), so a handler always
	// gets time to run.
	Timeout time.Duration
	// IdempotencyKey: a second Submit with the same key returns the first
	// task's id instead of creating another, even when the two race. A
	// second Submit with the same key but another type or input fails with
	// ErrIdempotencyConflict (and the first task's id).
	IdempotencyKey string
	// Unique derives the idempotency key from the task's type and input
	// (task.UniqueKey: "unique:" and their hash), as Asynq's Unique does:
	// a second Submit of the same type and input returns the first task.
	// It excludes IdempotencyKey; a key of one's own may not begin with
	// "unique:".
	Unique bool
	// UniqueFor, with IdempotencyKey or Unique, is how long the key stays
	// taken by the task it creates, from the S3 time its record is
	// written (task.MinUniqueFor..task.MaxUniqueFor, 1s..720h). Once it
	// has passed, the next Submit with the key creates a new task (it
	// replaces the key's record by CAS, so of racing submits one creates
	// the task and the others return it). 0: the key stays taken until
	// retention deletes the task. A finished task does not free its key
	// early. See docs/scheduling.md.
	UniqueFor time.Duration
	// ShardKey places tasks with the same key in the same shard.
	ShardKey string
	// Priority orders the task among the due tasks of its shard:
	// task.PriorityHigh, task.PriorityDefault ("", the default) or
	// task.PriorityLow (docs/scheduling.md#priorities).
	Priority task.Priority
	// DependsOn are tasks of this queue that must succeed before this one
	// runs (at most task.MaxDeps): until then it is blocked. A parent that
	// already ended is settled at once; an unknown id is an error wrapping
	// ErrUnknownDependency. See docs/dependencies.md.
	DependsOn []string
	// OnDepFailure is what a dependency that ends dead or canceled does to
	// this task: task.DepCancel (the default) or task.DepFail.
	OnDepFailure task.DepFailure
	// Slot is the task's slot key: at most one task of a key runs at a
	// time, fleet-wide; Admission (AdmitQueue, the default, AdmitReplace or
	// AdmitDropIfRunning) is how it takes its place. A drop-if-running
	// submit that finds the slot busy fails with ErrSlotBusy and creates
	// nothing. A task may have a slot or dependencies, not both. See
	// docs/slots.md.
	Slot      string
	Admission Admission
	// ID, if set, is the id to create the task under: one a Submit
	// returned with ErrOutcomeUnknown, to submit the same task again. A
	// task of that id that exists already (the first create landed) is
	// returned and nothing is created (ErrIdempotencyConflict if it is of
	// another type or input); otherwise the task is created under it, as
	// the first Submit would have. The id carries the time the task
	// becomes available: Delay and RunAt are not used. It excludes
	// IdempotencyKey and Unique (the key decides the id). It costs one
	// GET more (one per earlier shard count of a resharded queue).
	ID string
}

// ErrSlotBusy: a drop-if-running submit found its slot held or waited for.
var ErrSlotBusy = deps.ErrSlotBusy

// ErrUnknownDependency: a DependsOn id names no task of this queue.
var ErrUnknownDependency = deps.ErrUnknownParent

// Submit creates a task of type typ with input (any JSON-encodable value;
// json.RawMessage and []byte are taken as JSON text) and returns its id.
//
// Requests: one PUT; with an idempotency key one more PUT (see submitOnce
// for a key already taken).
//
// The submit is a span, s3queue.submit, a child of ctx's span, whose trace
// context the task carries to the workers that run it (docs/tracing.md).
func (p *Producer) Submit(ctx context.Context, typ string, input any, opts Options) (string, error) {
	if len(p.cfg.Middleware) == 0 {
		return p.submitTraced(ctx, typ, input, opts)
	}
	call := func(ctx context.Context, r Request) (string, error) {
		return p.submitTraced(ctx, r.Type, r.Input, r.Options)
	}
	for i := len(p.cfg.Middleware) - 1; i >= 0; i-- {
		mw, next := p.cfg.Middleware[i], call
		call = func(ctx context.Context, r Request) (string, error) { return mw(ctx, r, next) }
	}
	return call(ctx, Request{Type: typ, Input: input, Options: opts})
}

// submitTraced is Submit within its span, past the middleware.
func (p *Producer) submitTraced(ctx context.Context, typ string, input any, opts Options) (string, error) {
	ctx, span := p.trace.Tracer.Start(ctx, tracing.SpanSubmit, trace.WithSpanKind(trace.SpanKindProducer))
	id, t, err := p.submit(ctx, typ, input, opts)
	if span.IsRecording() {
		span.SetAttributes(tracing.System, tracing.Operation.String("submit"), tracing.OperationType.String("send"),
			tracing.TaskType.String(typ), tracing.Destination.String(typ))
		if id != "" {
			span.SetAttributes(tracing.TaskID.String(id), tracing.MessageID.String(id))
		}
		if t != nil && id == t.ID {
			span.SetAttributes(tracing.Shard.Int(t.Shard))
		}
		if (opts.IdempotencyKey != "" || opts.Unique) && id != "" {
			// Answered with the task its key already names (not created
			// here): its trace is the first submit's.
			span.SetAttributes(tracing.Repeat.Bool(t == nil || id != t.ID))
		}
	}
	tracing.End(span, err)
	return id, err
}

// submit is Submit: it returns the id Submit returns, and the task it drew
// (nil if it failed before): an idempotency key already taken answers with
// another id.
func (p *Producer) submit(ctx context.Context, typ string, input any, opts Options) (string, *task.Task, error) {
	raw, err := encodeInput(input)
	if err != nil {
		return "", nil, err
	}
	if err := p.checkTimeout(opts.Timeout); err != nil {
		return "", nil, err
	}
	if opts.IdempotencyKey, err = uniqueKey(typ, raw, opts); err != nil {
		return "", nil, fmt.Errorf("submit: %w", err)
	}
	if opts.ID != "" {
		switch {
		case !task.ValidID(opts.ID):
			return "", nil, fmt.Errorf("submit: %w: %q is not a task id", task.ErrInvalid, opts.ID)
		case opts.IdempotencyKey != "":
			return "", nil, fmt.Errorf("submit: %w: an id cannot be combined with an idempotency key (the key decides the id)", task.ErrInvalid)
		}
	}
	// The create's outcome is tried for until then (see outcomeWait); for
	// a task with dependencies or a slot only for half their grace from
	// now: a child or a slot's task that lands later than its grace after
	// its edges or its admission may be passed over, or run beside the
	// next (deps.Grace).
	until := p.local.Now().Add(outcomeWait)
	if len(opts.DependsOn) > 0 || opts.Slot != "" {
		until = p.local.Now().Add(deps.Grace / 2)
	}
	now, err := p.clock.Now(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("submit: %w", err)
	}
	at := now.Mid()
	switch {
	case opts.ID != "":
		// The id carries the time (the first Submit's).
		at, _ = task.IDTime(opts.ID)
	case !opts.RunAt.IsZero():
		if opts.RunAt.After(at) {
			at = opts.RunAt
		}
	case opts.Delay > 0:
		at = at.Add(opts.Delay)
	}
	// The id carries the availability time at millisecond resolution and
	// shard scans trust it, so the task must say exactly the same.
	at = at.Truncate(time.Millisecond)
	spec := task.Spec{Type: typ, Input: raw, MaxAttempts: opts.MaxAttempts, Retry: opts.Retry, Timeout: opts.Timeout,
		AvailableAt: at, IdempotencyKey: opts.IdempotencyKey, UniqueFor: opts.UniqueFor, ShardKey: opts.ShardKey, Priority: opts.Priority, Trace: p.trace.Inject(ctx)}
	switch {
	case !opts.Deadline.IsZero():
		spec.Deadline = opts.Deadline
	case opts.DeadlineIn < 0:
		return "", nil, fmt.Errorf("submit: %w: negative deadline %s", task.ErrInvalid, opts.DeadlineIn)
	case opts.DeadlineIn > 0:
		// Milliseconds, as the task's other times.
		spec.Deadline = now.Mid().Add(opts.DeadlineIn).Truncate(time.Millisecond)
	}
	// New work goes to the shards fleet members poll; a shard key pins its
	// shard instead, and the task is announced if that shard is inactive.
	var targets []int
	m := p.Manifest()
	if opts.ShardKey != "" {
		targets = []int{task.ShardFor(opts.ShardKey, m.Shards)}
	} else {
		var n int
		m, n = p.layout(ctx)
		targets = p.fleet.ShardsFor(ctx, typ, now, n)
	}
	id := opts.ID
	if id != "" {
		// A Submit again under the id of one whose outcome was unknown:
		// if its task landed, it is the answer.
		switch v, err := taskio.LoadID(ctx, p.st, id, m.Counts()); {
		case err == nil && v.Task.Type == typ && task.SpecHash(v.Task.Type, v.Task.Input) == task.SpecHash(typ, raw):
			return id, v.Task, nil
		case err == nil:
			return id, nil, fmt.Errorf("submit: %w: task %s exists, of type %q with another input or type", ErrIdempotencyConflict, id, v.Task.Type)
		case !errors.Is(err, s3store.ErrNotFound):
			return "", nil, fmt.Errorf("submit: look for task %s: %w", id, err)
		}
	} else if id, err = p.newID(at, targets, m.Shards); err != nil {
		return "", nil, fmt.Errorf("submit: %w", err)
	}
	shard := task.ShardFor(id, m.Shards)
	if opts.IdempotencyKey != "" && (len(opts.DependsOn) > 0 || opts.Slot != "") {
		// The edges and the slot name the task by the id drawn here; a
		// key already taken names another.
		return "", nil, fmt.Errorf("submit: %w: an idempotency key cannot be combined with dependencies or a slot", task.ErrInvalid)
	}
	if len(opts.DependsOn) > 0 {
		// Checked before any edge is written, then the edges. The slot is
		// part of the check (a task may not have both), though it is taken
		// only below.
		spec.OnDepFailure, spec.Slot = opts.OnDepFailure, opts.Slot
		for _, d := range opts.DependsOn {
			spec.Deps = append(spec.Deps, task.Dep{ID: d})
		}
		if _, err := task.New(id, shard, spec, now.Mid()); err != nil {
			return "", nil, fmt.Errorf("submit: %w", err)
		}
		if spec.Deps, err = p.prepare(ctx, id, shard, opts.DependsOn); err != nil {
			return "", nil, fmt.Errorf("submit: %w", err)
		}
	}
	var adm deps.Admitted
	var admitted time.Time // local time the slot admitted the task
	if opts.Slot != "" {
		a, err := deps.ParseAdmission(string(opts.Admission))
		if err != nil {
			return "", nil, fmt.Errorf("submit: %w", err)
		}
		spec.Slot = opts.Slot
		if _, err := task.New(id, shard, spec, now.Mid()); err != nil {
			return "", nil, fmt.Errorf("submit: %w", err)
		}
		// The slot first: a task whose slot write failed does not exist.
		if adm, err = p.deps().Admit(ctx, opts.Slot, deps.Member{ID: id, Shard: shard}, a); err != nil {
			if errors.Is(err, deps.ErrSlotBusy) && p.cfg.Events != nil {
				p.cfg.Events.Publish(events.Event{Time: p.local.Now(), Source: events.SourceProducer, Kind: events.SlotRefused,
					TaskID: id, Type: typ, Shard: -1})
			}
			return "", nil, fmt.Errorf("submit: %w", err)
		}
		spec.SlotWait, spec.SlotTurn = adm.Wait, adm.Turn
		admitted = p.local.Now()
	}
	t, err := task.New(id, shard, spec, now.Mid())
	if err != nil {
		return "", nil, fmt.Errorf("submit: %w", err)
	}
	if !admitted.IsZero() && clock.Since(p.local, admitted) >= deps.Grace/2 {
		// The slot passes over a member whose task has not landed within
		// Grace of its admission: a task written this late could run
		// beside the next one. Nothing is written; the place is passed
		// over.
		return "", nil, fmt.Errorf("submit: slot %q: the task could not be written within %v of its admission; submit it again", opts.Slot, deps.Grace/2)
	}
	if opts.IdempotencyKey != "" {
		got, err := p.submitOnce(ctx, t, spec, now.Mid(), m.Shards, until)
		if err == nil && got == t.ID && opts.Slot != "" {
			p.afterAdmit(ctx, t, adm)
		}
		return got, t, err
	}
	if _, err := p.create(ctx, t, until); errors.Is(err, ErrOutcomeUnknown) {
		return t.ID, t, fmt.Errorf("submit: task %s: %w", t.ID, err)
	} else if err != nil {
		return "", nil, fmt.Errorf("submit: %w", err)
	}
	p.publish(events.Submitted, t)
	if t.Status == task.Blocked && len(t.Deps) > 0 {
		p.publish(events.Blocked, t)
	} else if t.Status.Terminal() && len(t.Deps) > 0 {
		// Created canceled (or dead): a dependency had already ended dead
		// or canceled.
		p.publish(events.DependencyFailed, t)
	}
	if opts.Slot != "" {
		p.afterAdmit(ctx, t, adm)
	}
	p.afterCreate(ctx, t)
	return t.ID, t, nil
}

// uniqueKey returns the idempotency key of a submit: the one opts give,
// or with opts.Unique the one derived from the type and input.
func uniqueKey(typ string, input json.RawMessage, opts Options) (string, error) {
	switch {
	case opts.Unique && opts.IdempotencyKey != "":
		return "", fmt.Errorf("%w: unique derives the idempotency key from the type and input; it cannot be combined with an idempotency key", task.ErrInvalid)
	case opts.Unique:
		return task.UniqueKey(typ, input)
	case strings.HasPrefix(opts.IdempotencyKey, task.UniqueKeyPrefix):
		return "", fmt.Errorf("%w: idempotency key %q: keys beginning with %q are reserved for unique", task.ErrInvalid, truncate(opts.IdempotencyKey, 80), task.UniqueKeyPrefix)
	}
	return opts.IdempotencyKey, nil
}

// truncate returns s, cut to at most n bytes with an ellipsis.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// prepareRounds bounds how often prepare writes the edges of one submit.
const prepareRounds = 3

// prepare writes the edges of child id, in shard, to parents
// (deps.Prepare) and returns its Deps. A parent's end deletes an edge whose
// child it does not find deps.Grace after the edge's write, so the child's
// PUT must follow its first edge well within Grace: if writing them took
// half of it or more (many parents, a slow store, a paused process), the
// edges to the parents that have not ended are written again, and those
// parents read again. After prepareRounds slow rounds the submit fails,
// and creates nothing (the parents' ends delete the edges it leaves).
func (p *Producer) prepare(ctx context.Context, id string, shard int, parents []string) ([]task.Dep, error) {
	got := make(map[string]task.Dep, len(parents))
	todo := parents
	for range prepareRounds {
		start := p.local.Now()
		ds, err := p.deps().Prepare(ctx, id, shard, todo)
		if err != nil {
			return nil, err
		}
		todo = nil
		for _, d := range ds {
			got[d.ID] = d
			if d.Ended == "" {
				todo = append(todo, d.ID)
			}
		}
		if len(todo) == 0 || clock.Since(p.local, start) < deps.Grace/2 {
			out := make([]task.Dep, len(parents))
			for i, d := range parents {
				out[i] = got[d]
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("writing the edges of %d dependencies took longer than %v each time; try again", len(parents), deps.Grace/2)
}

// ErrDependencyNotMet: Requeue of a task whose dependencies have not all
// succeeded (it was canceled or made dead by one that failed): requeue the
// dependency, and this task once it has succeeded.
var ErrDependencyNotMet = errors.New("a dependency has not succeeded")

// depsMet checks, for a requeue, that every dependency of t has succeeded
// by now (one GET each), and records it: a dependent never runs before its
// dependencies succeeded, whoever asks. Its errors do not name t: modify
// wraps them with the task's id.
func (p *Producer) depsMet(ctx context.Context, t *task.Task) error {
	for i, d := range t.Deps {
		if d.Ended == task.Succeeded {
			continue
		}
		v, err := taskio.Load(ctx, p.st, task.Key(d.Shard, d.ID))
		switch {
		case errors.Is(err, s3store.ErrNotFound):
			return fmt.Errorf("%w: dependency %s no longer exists", ErrDependencyNotMet, d.ID)
		case err != nil:
			return fmt.Errorf("read dependency %s: %w", d.ID, err)
		case v.Task.Status != task.Succeeded:
			return fmt.Errorf("%w: dependency %s is %s", ErrDependencyNotMet, d.ID, v.Task.Status)
		}
		t.Deps = slices.Clone(t.Deps)
		t.Deps[i].Ended = task.Succeeded
	}
	return nil
}

// afterAdmit finishes a slot admission once its task is written: the
// event, and under AdmitReplace the replaced task canceled and the holder
// asked to stop (a crash before either leaves the monitor's repair to
// cancel the replaced one; the holder then simply runs to its end).
func (p *Producer) afterAdmit(ctx context.Context, t *task.Task, adm deps.Admitted) {
	kind := events.SlotAcquired
	if adm.Wait {
		kind = events.SlotQueued
	}
	p.publish(kind, t)
	if r := adm.Replaced; r != nil {
		// A crash before this cancel is repaired by the monitor, which
		// finds the task in the slot's list of replaced ones.
		if err := p.deps().CancelReplaced(ctx, *r, t.ID); err != nil {
			p.log.Warn("cancel the task a slot submit replaced; the monitor will", "task_id", r.ID, "err", err)
		} else if p.cfg.Events != nil {
			p.cfg.Events.Publish(events.Event{Time: p.local.Now(), Source: events.SourceProducer, Kind: events.SlotReplaced,
				TaskID: r.ID, Type: t.Type, Shard: r.Shard})
		}
	}
	if h := adm.Holder; h != nil {
		if _, err := p.Cancel(ctx, h.ID); err != nil && !errors.Is(err, task.ErrTerminal) {
			p.log.Warn("ask a slot's holder to stop for its replacement", "task_id", h.ID, "err", err)
		}
	}
}

// deps is the producer's view of the dependency edges.
func (p *Producer) deps() deps.Env {
	return deps.Env{Jitter: rnd.Locked(rnd.Keyed("producer/deps")),
		Announce: func(ctx context.Context, t *task.Task) error {
			err := p.announce(ctx, t)
			p.ring(ctx, t.ID, t.AvailableAt)
			return err
		},
		Store: p.st, Local: p.local, Now: p.clock.Now, Counts: p.Manifest().Counts(),
		Ended: func(t *task.Task) { p.publish(deps.EventOf(t), t) }}
}

// checkTimeout refuses a timeout that leaves a handler no real time. A
// worker stops its handler lease_margin before the lease expires unless a
// renewal got through, and renews halfway to that moment: with a timeout
// of twice the margin or less, a handler would run at most the margin
// before its first renewal had to land, and with one of the margin or
// less its deadline would be past at claim. Above twice the margin it
// always has more than the margin to run, renewed from then on.
func (p *Producer) checkTimeout(timeout time.Duration) error {
	if timeout == 0 {
		timeout = task.DefaultTimeout
	}
	if least := 2 * p.cfg.LeaseMargin; timeout > 0 && timeout <= least {
		return fmt.Errorf("submit: timeout %v is too short: it must exceed %v, twice the workers' lease margin (%v), or the handler gets no time to run", timeout, least, p.cfg.LeaseMargin)
	}
	return nil
}

// submitOnce claims the idempotency key and then creates the task its
// record names. Records are created with If-None-Match, and replaced only
// by CAS once their uniqueness window has passed, so the producer whose
// write of the record lands decides the task id; every other producer
// creates that same id with create-if-absent, or finds it. What a producer
// that finds the record does:
//
//   - record whose uniqueness window has passed (task.IdempotencyRecord
//     Expired, by S3 time): replace it by CAS (If-Match on the ETag read)
//     with a record naming t, then create t as after a first write. A
//     lost CAS (another submit replaced it first, or retention retired or
//     deleted it) starts again: of racing submits one replaces it, and the
//     others follow its new record;
//   - retired record (retention is deleting it), or the task exists: the
//     key is taken by that task; return its id;
//   - record younger than task.IdempotencyRecordYoung: its producer may still be
//     between its two writes (or crashed there): create the task,
//     If-None-Match (a 412 means it exists);
//   - older record and no task: read the record again. Gone: retention
//     deleted it (it deletes the record before the task), so claim the key
//     again. Still there: retention cannot have deleted the task (the
//     record would be gone first), so its producer crashed long ago
//     between its two writes: create the task.
//
// Requests: two PUTs for a new key; for a taken one a failed PUT, a GET and
// either a HEAD (old record) or a failed PUT and its read-back GET (young
// record); for a key whose window has passed a failed PUT, a GET, the
// record's CAS PUT and the task's PUT. placed is the shard count t was
// placed with.
func (p *Producer) submitOnce(ctx context.Context, t *task.Task, spec task.Spec, now time.Time, placed int, until time.Time) (string, error) {
	recKey := task.IdempotencyRecordKey(spec.IdempotencyKey)
	own := task.IdempotencyRecord{ID: t.ID, Spec: task.SpecHash(t.Type, t.Input), Shards: placed, UniqueFor: task.Duration(spec.UniqueFor)}
	var id string
	err := p.cas.Retry(ctx, func(int) (bool, error) {
		_, err := p.st.Put(ctx, recKey, own.Encode(), s3store.PutOptions{IfNoneMatch: true})
		switch {
		case err == nil:
			id, err = p.createOnce(ctx, t, until)
			return false, err
		case !s3store.LostRace(err):
			return false, fmt.Errorf("submit: write idempotency record: %w", err)
		}
		id, err = p.followRecord(ctx, recKey, t, spec, now, own, until)
		if err != nil || id != "" {
			return false, err
		}
		// The record was deleted meanwhile (retention), or replaced after
		// its window: claim the key again, or follow the new record.
		return true, fmt.Errorf("submit: idempotency record %s keeps changing; try again", recKey)
	})
	return id, err
}

// followRecord reads the record at recKey, which another submit wrote, and
// returns the task id it gives the key (creating that task if its producer
// did not), or "" when the record is gone and the key is free again, or
// changed under a replacement. A record whose window has passed is
// replaced by own (naming t), and t created.
func (p *Producer) followRecord(ctx context.Context, recKey string, t *task.Task, spec task.Spec, now time.Time, own task.IdempotencyRecord, until time.Time) (string, error) {
	rec, obj, err := p.readRecord(ctx, recKey)
	if err != nil || obj == nil {
		return "", err
	}
	iv, err := p.clock.Now(ctx)
	if err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	if rec.Expired(obj.LastModified, iv.Earliest) {
		// The key is free again, whatever task took it before: the
		// record is replaced, never deleted, so no DELETE of it can be
		// in flight, and no second record can appear beside it.
		return p.replaceRecord(ctx, recKey, rec, obj.ETag, own, t, until)
	}
	switch {
	case rec.Spec != "" && rec.Spec != task.SpecHash(t.Type, t.Input):
		return rec.ID, fmt.Errorf("submit: %w: the key is task %s", ErrIdempotencyConflict, rec.ID)
	case rec.Retired:
		return rec.ID, nil
	}
	x := t
	m := p.Manifest()
	if rec.ID != t.ID {
		spec.AvailableAt, _ = task.IDTime(rec.ID)
		n := rec.Shards
		if n == 0 {
			n = m.Shards // a record from before placements were recorded
		}
		if x, err = task.New(rec.ID, task.ShardFor(rec.ID, n), spec, now); err != nil {
			return "", fmt.Errorf("submit: %w", err)
		}
	}
	if iv.Earliest.Sub(obj.LastModified) < task.IdempotencyRecordYoung {
		return p.createOnce(ctx, x, until)
	}
	keys := []string{x.Key()}
	if rec.Shards == 0 {
		// Placed with an unknown count: look under each the queue had.
		for _, n := range m.Counts() {
			if k := task.Key(task.ShardFor(x.ID, n), x.ID); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		switch _, err := p.st.Head(ctx, k); {
		case err == nil:
			return x.ID, nil
		case !errors.Is(err, s3store.ErrNotFound):
			return "", fmt.Errorf("submit: look for task %s: %w", x.ID, err)
		}
	}
	again, obj, err := p.readRecord(ctx, recKey)
	switch {
	case err != nil, obj == nil:
		return "", err
	case again.Retired:
		return again.ID, nil
	case again.ID != rec.ID:
		return "", nil // a new record: follow it from the start
	}
	return p.createOnce(ctx, x, until)
}

// replaceRecord replaces old, the record at recKey read with etag, whose
// uniqueness window has passed, by own (naming t) with a CAS, and creates
// t. The CAS is what makes racing submits agree: only one replaces a given
// version. A lost race (412 or 409: another submit replaced it, or
// retention retired it; 404: retention deleted it) returns "": the caller
// starts again and follows what is there now. A crash between the two
// writes leaves a record naming a task not yet written, which the next
// submit completes (followRecord), as after a first write.
func (p *Producer) replaceRecord(ctx context.Context, recKey string, old task.IdempotencyRecord, etag string, own task.IdempotencyRecord, t *task.Task, until time.Time) (string, error) {
	own.Window = old.Window + 1
	_, err := p.st.Put(ctx, recKey, own.Encode(), s3store.PutOptions{IfMatch: etag})
	switch {
	case err == nil:
		return p.createOnce(ctx, t, until)
	case s3store.LostRace(err), errors.Is(err, s3store.ErrNotFound):
		return "", nil
	}
	return "", fmt.Errorf("submit: replace idempotency record: %w", err)
}

// readRecord reads an idempotency record; a missing one is (zero, nil, nil).
func (p *Producer) readRecord(ctx context.Context, recKey string) (task.IdempotencyRecord, *s3store.Object, error) {
	obj, err := p.st.Get(ctx, recKey)
	if errors.Is(err, s3store.ErrNotFound) {
		return task.IdempotencyRecord{}, nil, nil
	}
	if err != nil {
		return task.IdempotencyRecord{}, nil, fmt.Errorf("submit: read idempotency record: %w", err)
	}
	rec, err := task.ParseIdempotencyRecord(obj.Body)
	if err != nil {
		return rec, nil, fmt.Errorf("submit: %s: %w", recKey, err)
	}
	return rec, &obj, nil
}

// createOnce creates t if it does not exist yet and returns its id. A
// create whose outcome is unknown until is t's id with ErrOutcomeUnknown
// (see create): the key's record names it, so a Submit again with the key
// is safe.
//
// A task completed from an old record may lie below the monitor's sweep
// floor: it is announced first and written after (see
// shards.MayLieBelowFloor).
func (p *Producer) createOnce(ctx context.Context, t *task.Task, until time.Time) (string, error) {
	now, err := p.clock.Now(ctx)
	if err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	var announced time.Time
	if shards.MayLieBelowFloor(t.ID, now.Latest) {
		if err := p.announce(ctx, t); err != nil {
			return "", fmt.Errorf("submit: %w", err)
		}
		announced = p.local.Now()
	}
	for range 3 {
		var exists bool
		exists, err = p.create(ctx, t, until)
		switch {
		case err == nil && !exists:
			p.publish(events.Submitted, t)
			if announced.IsZero() || clock.Since(p.local, announced) > shards.PointerGrace/2 {
				p.afterCreate(ctx, t)
			} else {
				p.ring(ctx, t.ID, t.AvailableAt)
			}
			return t.ID, nil
		case err == nil:
			// It exists: the record's own producer wrote it, the same id
			// and the same intent (or an earlier try of this create).
			return t.ID, nil
		case errors.Is(err, ErrOutcomeUnknown):
			return t.ID, fmt.Errorf("submit: task %s: %w", t.ID, err)
		case errors.Is(err, s3store.ErrConflict):
			// A concurrent conditional write: it may or may not land, so
			// look before saying the task exists.
			_, herr := p.st.Head(ctx, t.Key())
			if herr == nil {
				return t.ID, nil
			}
			if !errors.Is(herr, s3store.ErrNotFound) {
				return "", fmt.Errorf("submit: look for task %s: %w", t.ID, herr)
			}
		default:
			return "", fmt.Errorf("submit: %w", err)
		}
	}
	return "", fmt.Errorf("submit: %w", err)
}

// create writes t, a new task, under its id, and tries until it knows
// the outcome: a create whose request failed after it may have landed and
// that could not be read back (taskio.ErrUnknownOutcome: 4 reads over
// 2.1 s failed) is made again, the same bytes under the same id
// (If-None-Match), after a pause, until it lands, or meets a task already
// there (a 412, exists: the id is this Submit's own, drawn from 80 random
// bits, or the key's, so the task is an earlier try of this create, or
// what the record's producer wrote), or until is past or ctx ends:
// ErrOutcomeUnknown. Any other failure is returned as it is: nothing was
// created. Requests: one PUT; on the failure path the read-backs and a PUT
// per try.
func (p *Producer) create(ctx context.Context, t *task.Task, until time.Time) (exists bool, err error) {
	pause := 500 * time.Millisecond
	for {
		_, err := taskio.Create(ctx, p.st, p.local, t)
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, s3store.ErrPreconditionFailed):
			return true, nil
		case !errors.Is(err, taskio.ErrUnknownOutcome):
			return false, err
		}
		if ctx.Err() != nil || !p.local.Now().Add(pause).Before(until) {
			return false, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		p.log.Warn("submit: the create's outcome is unknown; trying it again under its id", "task_id", t.ID, "err", err)
		if p.sleep(ctx, pause) != nil {
			return false, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		pause = min(2*pause, 8*time.Second)
	}
}

// afterCreate makes sure a member will find t: it rings the doorbell if
// the fleet is asleep, and announces t in an active shard if t's own shard
// is not polled at full speed or its PUT landed so late that scans may have
// passed it. Nothing here is needed for safety: the monitor's repair finds
// any pending task that is not picked up. A task created blocked (behind
// its dependencies or its slot) or ended (a dependency had failed) is left
// alone: no worker may claim it, and whoever makes it pending announces it.
func (p *Producer) afterCreate(ctx context.Context, t *task.Task) {
	if t.Status != task.Pending {
		return
	}
	if p.dir != nil && t.Status == task.Pending && p.deliver(ctx, t) {
		return
	}
	defer p.ring(ctx, t.ID, t.AvailableAt) // after any pointer write, so a woken member sees both
	now, err := p.clock.Now(ctx)
	if err != nil {
		return
	}
	// Under direct dispatch the shards hand out ready pointers only: a
	// task no worker's inbox took is announced.
	late := p.dir != nil || now.Earliest.Sub(t.AvailableAt) >= p.cfg.LateAfter
	_, n := p.layout(ctx)
	if p.dir == nil {
		p.lane(ctx, t, now, n)
	}
	if !late && p.fleet.Serves(ctx, t.Type, now, t.Shard, n) {
		return
	}
	if !late && t.AvailableAt.After(now.Latest.Add(time.Minute)) {
		// A task due later is announced by the repair if its shard is
		// still inactive then; most shards become active again by then.
		return
	}
	in := p.fleet.ShardFor(ctx, t.Type, now, n)
	if err := p.keepAnnouncing(ctx, t, shards.Announce(ctx, p.st, t, now.Latest, in)); err != nil {
		// The monitor's repair will announce it; nothing is lost.
		p.log.Warn("announce task", "task_id", t.ID, "err", err)
	}
}

// lane writes t's lane entry (shards.LaneKey) when t is a high-priority
// task due now and the cached fleet view (no request within its TTL) shows
// the member of its shard busy: that member claims lane tasks before its
// backlog (docs/scheduling.md#priorities). One PUT; the member deletes the
// entry (a DELETE). A failed write loses nothing: the task is found in time
// order, behind the backlog.
func (p *Producer) lane(ctx context.Context, t *task.Task, now clock.Interval, n int) {
	if t.Priority != task.PriorityHigh || t.Status != task.Pending || t.AvailableAt.After(now.Latest) || !p.fleet.Busy(ctx, now, t.Shard, n) {
		return
	}
	if _, err := p.st.Put(ctx, shards.LaneKey(t.Shard, t.ID), nil, s3store.PutOptions{}); err != nil {
		p.log.Warn("write the lane entry of a high-priority task", "task_id", t.ID, "err", err)
	}
}

// deliver routes t to a live worker's inbox (direct dispatch), ringing
// the worker's doorbell if it sleeps, and reports false when no live
// worker runs t's type or the entry could not be written: t then takes
// the shared path. A crash before the entry lands leaves a pending task
// that the monitor's repair announces; nothing is lost.
func (p *Producer) deliver(ctx context.Context, t *task.Task) bool {
	now, err := p.clock.Now(ctx)
	if err != nil {
		return false
	}
	w, ok, err := p.dir.Pick(ctx, now, t.Type, t.ID)
	if err != nil {
		p.log.Warn("read the worker leases", "err", err)
	}
	if !ok {
		return false
	}
	ringErr, err := direct.Route(ctx, p.st, w, t.AvailableAt, t.ID, t.Shard, func() string { return p.rand.Hex(4) })
	if err != nil {
		p.log.Warn("write the inbox entry; announcing the task instead", "task_id", t.ID, "worker_id", w.Worker, "err", err)
		return false
	}
	if ringErr != nil {
		p.log.Warn("ring the worker's doorbell", "worker_id", w.Worker, "task_id", t.ID, "err", ringErr)
	}
	return true
}

// ring rings the doorbell if the fleet is asleep, for task id due at due:
// at once if it is due, else by setting the sleeping fleet's wake time.
func (p *Producer) ring(ctx context.Context, id string, due time.Time) {
	now, err := p.clock.Now(ctx)
	if err != nil {
		p.log.Warn("ring the doorbell", "task_id", id, "err", err)
		return
	}
	if _, err := p.fleet.RingIfAsleep(ctx, now, due); err != nil {
		p.log.Warn("ring the doorbell", "task_id", id, "err", err)
	}
}

// newID returns an id of time at that belongs to one of the target shards
// in a queue of n shards. Ids map to shards by hash, so a shard key (one
// target) or the routing (the active shards whose member runs the type) is
// honoured by drawing ids until one lands in a target; every id then names
// its shard (under the count it was placed with) and Get needs no lookup.
func (p *Producer) newID(at time.Time, targets []int, n int) (string, error) {
	in := make([]bool, n)
	for _, s := range targets {
		if s >= 0 && s < n {
			in[s] = true
		}
	}
	// An id lands in one of k target shards every n/k draws on average:
	// once when every shard is a target, n times for one shard of n.
	for i := 0; i < 100*n+100; i++ {
		id, err := task.NewID(at, p.rand)
		if err != nil {
			return "", err
		}
		if in[task.ShardFor(id, n)] {
			return id, nil
		}
	}
	return "", fmt.Errorf("no id found for shards %v of %d", targets, n)
}

func encodeInput(input any) (json.RawMessage, error) {
	var raw []byte
	switch v := input.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("submit: encode input: %w", err)
		}
		raw = b
	}
	if len(raw) > task.MaxInputBytes {
		return nil, fmt.Errorf("submit: input is %d bytes, over the limit of %d", len(raw), task.MaxInputBytes)
	}
	if len(raw) > 0 && !json.Valid(raw) {
		return nil, fmt.Errorf("submit: input is not valid JSON")
	}
	return raw, nil
}

// Request is one task of a SubmitBatch.
type Request struct {
	Type    string
	Input   any
	Options Options
}

// Result is the outcome of one Request.
type Result struct {
	ID  string
	Err error
}

// SubmitBatch submits reqs with at most Config.BatchParallelism requests in
// flight and returns one Result per request, in order. The batch is a span,
// s3queue.submit_batch, the parent of each task's s3queue.submit.
func (p *Producer) SubmitBatch(ctx context.Context, reqs []Request) []Result {
	ctx, span := p.trace.Tracer.Start(ctx, tracing.SpanSubmitBatch, trace.WithSpanKind(trace.SpanKindProducer))
	out := p.submitBatch(ctx, reqs)
	if span.IsRecording() {
		failed := 0
		for _, r := range out {
			if r.Err != nil {
				failed++
			}
		}
		span.SetAttributes(tracing.System, tracing.Operation.String("submit"), tracing.OperationType.String("send"),
			tracing.BatchCount.Int(len(reqs)), tracing.BatchFailed.Int(failed))
		if failed > 0 {
			span.SetStatus(codes.Error, fmt.Sprintf("%d of %d submissions failed", failed, len(reqs)))
		}
	}
	span.End()
	return out
}

func (p *Producer) submitBatch(ctx context.Context, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	sem := make(chan struct{}, p.cfg.BatchParallelism)
	var wg sync.WaitGroup
	for i, r := range reqs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			out[i].Err = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i].ID, out[i].Err = p.Submit(ctx, r.Type, r.Input, r.Options)
		}()
	}
	wg.Wait()
	return out
}

// Get returns the task with id, or an error wrapping ErrNotFound. One GET;
// a task placed before a reshard costs one more per later shard count it
// was not placed with (taskio.LoadID), and an id not found makes the
// producer re-read the manifest (at most once per shards.FleetCacheTTL), in
// case the queue was resharded since it last looked.
//
// A result stored apart (Task.ResultRef) is read too, one GET more, and
// returned in Task.Result, its size and SHA-256 checked against the
// reference. An object that is missing or does not match returns the task
// (Result empty) with an error wrapping ErrResultUnavailable that names the
// task and the object.
func (p *Producer) Get(ctx context.Context, id string) (*task.Task, error) {
	t, err := p.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.ResultRef == nil {
		return t, nil
	}
	res, err := ReadResult(ctx, p.st, t)
	if err != nil {
		return t, err
	}
	t.Result = res
	return t, nil
}

// Lookup returns task id as its object holds it, with one GET (as Get
// does, learning of a reshard on a miss): a result stored apart is not
// read, Task.ResultRef names it. For callers that need the task's state
// or history and not its result.
func (p *Producer) Lookup(ctx context.Context, id string) (*task.Task, error) {
	v, err := p.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return v.Task, nil
}

// ErrResultUnavailable reports a result stored apart that cannot be read
// back as the task references it: its object is missing (deleted by hand,
// or by retention just before its task) or does not match the reference.
var ErrResultUnavailable = errors.New("result unavailable")

// ReadResult reads the result t references (one GET) and checks it against
// the reference. Errors that are not the store's wrap
// ErrResultUnavailable and name the task.
func ReadResult(ctx context.Context, st s3store.Store, t *task.Task) (json.RawMessage, error) {
	ref := t.ResultRef
	obj, err := st.Get(ctx, ref.Key)
	if errors.Is(err, s3store.ErrNotFound) {
		return nil, fmt.Errorf("task %s: %w: its result object %s is missing", t.ID, ErrResultUnavailable, ref.Key)
	}
	if err != nil {
		return nil, fmt.Errorf("task %s: read its result object %s: %w", t.ID, ref.Key, err)
	}
	if err := ref.Check(obj.Body); err != nil {
		return nil, fmt.Errorf("task %s: %w: %v", t.ID, ErrResultUnavailable, err)
	}
	return json.RawMessage(obj.Body), nil
}

// History returns the task's transitions, oldest first (one GET; a result
// stored apart is not read).
func (p *Producer) History(ctx context.Context, id string) ([]task.Transition, error) {
	v, err := p.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return v.Task.History, nil
}

func (p *Producer) load(ctx context.Context, id string) (taskio.Versioned, error) {
	v, err := taskio.LoadID(ctx, p.st, id, p.Manifest().Counts())
	if errors.Is(err, s3store.ErrNotFound) && p.learnOnMiss(ctx) {
		// Placed under a count this producer had not seen yet.
		v, err = taskio.LoadID(ctx, p.st, id, p.Manifest().Counts())
	}
	if errors.Is(err, s3store.ErrNotFound) || errors.Is(err, taskio.ErrBadID) {
		return v, fmt.Errorf("task %s: %w", id, ErrNotFound)
	}
	return v, err
}

// learnOnMiss re-reads the manifest after a task was not found, in case
// the queue was resharded since (at most once per FleetCacheTTL: an unknown
// id costs one GET more only then), and reports whether it has more shards.
func (p *Producer) learnOnMiss(ctx context.Context) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.learn(ctx)
}

// Cancel cancels task id. A pending task is canceled at once; a running one
// is asked to stop, and its handler's context is canceled no later than the
// worker's next lease renewal. It reports whether the task was running.
func (p *Producer) Cancel(ctx context.Context, id string) (requested bool, err error) {
	return p.CancelIf(ctx, id)
}

// ErrStatusChanged reports a CancelIf or RequeueIf that found the task in
// none of the statuses its caller allowed (it changed since the caller
// looked): nothing was written.
var ErrStatusChanged = errors.New("task is not in the status asked for")

// allowed checks, for CancelIf and RequeueIf, that t is in one of only (any
// status if none).
func allowed(t *task.Task, only []task.Status) error {
	if len(only) == 0 || slices.Contains(only, t.Status) {
		return nil
	}
	names := make([]string, len(only))
	for i, s := range only {
		names[i] = string(s)
	}
	return fmt.Errorf("%w: it is %s, not %s", ErrStatusChanged, t.Status, strings.Join(names, " or "))
}

// CancelIf is Cancel of a task that is in one of the statuses only (any if
// none) when the cancel reads it: the status is checked on the version its
// CAS replaces, so a task that moved on since the caller looked (a pending
// task claimed meanwhile) is left alone, with an error wrapping
// ErrStatusChanged. Requests as Cancel: a GET and a PUT.
func (p *Producer) CancelIf(ctx context.Context, id string, only ...task.Status) (requested bool, err error) {
	var t *task.Task
	err = p.modify(ctx, id, func(cur *task.Task, now clock.Interval) error {
		if err := allowed(cur, only); err != nil {
			return err
		}
		requested, err = cur.Cancel(now.Mid())
		t = cur
		if err == nil && deps.NeedsPassOn(cur) {
			// Its dependents or its slot are to learn of it: the
			// marker first.
			return p.deps().Ending(ctx, cur)
		}
		return err
	})
	if errors.Is(err, task.ErrCancelAlreadyRequested) {
		return true, nil
	}
	if err == nil {
		if requested {
			p.publish(events.CancelRequested, t)
		} else {
			p.publish(events.Canceled, t)
			if deps.NeedsPassOn(t) {
				if err := p.deps().PassOn(ctx, t); err != nil {
					p.log.Warn("pass a cancel on to its dependents or slot; the monitor will finish it", "task_id", t.ID, "err", err)
				}
			}
		}
	}
	return requested, err
}

// Requeue takes a dead (or canceled) task back to pending with a fresh
// budget of attempts, and announces it in the ready index. A task that
// retention has begun to delete (task.ErrRetired) is refused: it is gone.
// Requests: a GET, a PUT, the announcement's PUT (and a doorbell ring if
// the fleet sleeps).
//
// A task whose id may lie below the monitor's sweep floor (older than
// shards.FloorLag) is announced first and written after, so that a
// requeue whose announcement cannot be written fails without changing
// anything, rather than leave a live task (pending, or blocked for its
// slot) only the monitor's full walk would find (see
// shards.MayLieBelowFloor).
func (p *Producer) Requeue(ctx context.Context, id string) error {
	return p.RequeueIf(ctx, id)
}

// RequeueIf is Requeue of a task that is in one of the statuses only (any
// if none) when the requeue reads it: the status is checked on the version
// its CAS replaces, before anything else is written, so a task that moved
// on since the caller looked (a canceled task requeued, then dead) is left
// alone, with an error wrapping ErrStatusChanged. Requests as Requeue.
func (p *Producer) RequeueIf(ctx context.Context, id string, only ...task.Status) error {
	var t *task.Task
	var announced time.Time // local time of the write-ahead pointer, if any
	var turn int64          // the slot turn an earlier attempt of this requeue got
	err := p.modify(ctx, id, func(cur *task.Task, now clock.Interval) error {
		if err := allowed(cur, only); err != nil {
			return err
		}
		// A task of a slot takes its place in the slot again first,
		// decided on the version this write replaces: behind the holder
		// if the slot is busy. (A place given back by a requeue that then
		// fails is passed over by the monitor's repair; Admit is
		// idempotent for a task already in its slot.)
		wait := false
		if cur.Slot != "" && (cur.Status == task.Dead || cur.Status == task.Canceled) {
			adm, err := p.deps().Admit(ctx, cur.Slot, deps.Member{ID: cur.ID, Shard: cur.Shard, Turn: turn}, deps.AdmitRequeue)
			if err != nil {
				return err
			}
			wait, turn = adm.Wait, adm.Turn
			cur.SlotTurn = adm.Turn
		}
		if err := p.depsMet(ctx, cur); err != nil {
			return err
		}
		requeue := cur.Requeue
		if wait {
			requeue = cur.RequeueWaiting
		}
		if err := requeue(now.Mid()); err != nil {
			return err
		}
		t = cur
		// By the latest the clock can be: a task that may lie below the
		// floor is announced first, however uncertain the clock, one
		// that waits for its slot (blocked) too: its pointer is how the
		// monitor's sweeps learn to watch it, and find it pending if its
		// grant's own announcement is lost.
		if !shards.MayLieBelowFloor(cur.ID, now.Latest) || !announced.IsZero() && clock.Since(p.local, announced) < shards.PointerGrace/2 {
			return nil
		}
		if err := p.announce(ctx, cur); err != nil {
			return err
		}
		announced = p.local.Now()
		return nil
	})
	if err != nil {
		return err
	}
	p.publish(events.Requeued, t)
	if t.Status == task.Blocked {
		// Waits for its slot: its grant announces it to the members. A
		// write that landed late writes the pointer below the floor
		// again.
		if !announced.IsZero() && clock.Since(p.local, announced) > shards.PointerGrace/2 {
			if err := p.announceLanded(ctx, t); err != nil {
				p.log.Warn("announce requeued task", "task_id", id, "err", err)
			}
		}
		return nil
	}
	if announced.IsZero() || clock.Since(p.local, announced) > shards.PointerGrace/2 {
		if err := p.announceLanded(ctx, t); err != nil {
			// A young task: the monitor's repair announces it.
			p.log.Warn("announce requeued task", "task_id", id, "err", err)
		}
	}
	p.ring(ctx, id, t.AvailableAt)
	return nil
}

// announceLanded announces t after its write (keepAnnouncing).
func (p *Producer) announceLanded(ctx context.Context, t *task.Task) error {
	return p.keepAnnouncing(ctx, t, p.announce(ctx, t))
}

// keepAnnouncing follows up err, the outcome of announcing t after its
// write. A write decided while t was young may land once it is older than
// shards.FloorLag (a slow or delayed request), below the monitor's floor,
// where only a pointer lets anyone find it: then a failed announcement is
// tried again, under the CAS policy's pauses, until one lands or ctx ends.
// A young task's is left to the monitor's repair.
func (p *Producer) keepAnnouncing(ctx context.Context, t *task.Task, err error) error {
	if err == nil {
		return nil
	}
	now, cerr := p.clock.Now(ctx)
	if cerr != nil || !shards.MayLieBelowFloor(t.ID, now.Latest) {
		return err
	}
	return p.cas.Retry(ctx, func(attempt int) (bool, error) {
		err := p.announce(ctx, t)
		return err != nil && !errors.Is(err, s3store.ErrUnusable), err
	})
}

// announce writes a ready pointer to t in a shard whose member runs its
// type, stamped with the time now.
func (p *Producer) announce(ctx context.Context, t *task.Task) error {
	now, err := p.clock.Now(ctx)
	if err != nil {
		return fmt.Errorf("announce task %s: %w", t.ID, err)
	}
	_, n := p.layout(ctx)
	return shards.Announce(ctx, p.st, t, now.Latest, p.fleet.ShardFor(ctx, t.Type, now, n))
}

// modify applies change to task id by read-modify-write, re-reading on a
// lost race (see s3store.CAS).
func (p *Producer) modify(ctx context.Context, id string, change func(*task.Task, clock.Interval) error) error {
	return p.cas.Retry(ctx, func(int) (bool, error) {
		v, err := p.load(ctx, id)
		if err != nil {
			return false, err
		}
		now, err := p.clock.Now(ctx)
		if err != nil {
			return false, err
		}
		if err := change(v.Task, now); err != nil {
			return false, fmt.Errorf("task %s: %w", id, err)
		}
		_, err = taskio.Update(ctx, p.st, p.local, v.Task, v.ETag)
		return s3store.LostRace(err), err
	})
}

// publish publishes an event of kind about t on Config.Events.
func (p *Producer) publish(kind events.Kind, t *task.Task) {
	if p.cfg.Events == nil {
		return
	}
	p.cfg.Events.Publish(events.Event{Time: p.local.Now(), Source: events.SourceProducer, Kind: kind,
		TaskID: t.ID, Type: t.Type, Attempt: t.Attempt, Shard: t.Shard})
}

// sleep waits for d on the producer's local clock, or until ctx ends.
func (p *Producer) sleep(ctx context.Context, d time.Duration) error {
	if !clock.Sleep(p.local, d, ctx.Done()) {
		return ctx.Err()
	}
	return nil
}
