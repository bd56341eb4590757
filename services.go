package s3queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// ProducerConfig tunes the queue's producer (see producer.Config). Its
// Shards, DispatchMode and Clock are the queue's (Config.Shards,
// Config.DispatchMode): leave them zero.
type ProducerConfig = producer.Config

// WorkerConfig configures a worker: concurrency, polling, fleet membership,
// shutdown grace, events (see worker.Config). Zero fields take the defaults.
// Its Shards, DispatchMode and Clock are the queue's: leave them zero.
type WorkerConfig = worker.Config

// RateLimit is at most N starts of a task type per Interval of S3 time,
// fleet-wide (WorkerConfig.RateLimits; docs/scheduling.md#rate-limits).
type RateLimit = worker.RateLimit

// ParseRateLimit reads a rate limit written "N/INTERVAL": "100/1m",
// "5/s", "3/2s".
func ParseRateLimit(s string) (RateLimit, error) { return worker.ParseRateLimit(s) }

// MonitorConfig configures a monitor: sweep interval, retention, leader
// election (see monitor.Config). Zero fields take the defaults. Its Shards,
// DispatchMode and Clock are the queue's: leave them zero.
type MonitorConfig = monitor.Config

// Worker claims tasks and runs the handlers registered with Handle, with
// bounded concurrency, until the context given to Run ends. Run then stops
// claiming, waits up to ShutdownGrace for running handlers, cancels the rest
// (context.Cause is ErrShutdown) and hands their tasks back to the queue
// without using up an attempt.
type Worker = worker.Worker

// Handler runs one attempt of a task, given the task as stored, for
// Worker.Handle (Handle registers a typed handler instead, which gets a
// Job and returns a Go value). It returns the result (JSON, may be
// nil) or an error: a plain error is a failed attempt, retried by the task's
// policy; Permanent(err) makes the task dead at once; RetryAfter(d, err)
// runs it again after d without using an attempt, and RetryLater(err)
// after its retry policy's backoff by its snoozes so far (a snooze; the
// task's Snoozes counts them). ctx is canceled when the
// lease is lost, the task is canceled or the worker shuts down
// (context.Cause is ErrLeaseLost, ErrCanceled or ErrShutdown).
type Handler = worker.Handler

// Event is something that happened in the queue, published on the Bus of
// Config.Events by the producer (Source "producer"), the workers ("worker")
// and the monitors ("monitor"), and given to WorkerConfig.OnEvent for a
// worker's own. Origin is the worker's or monitor's id; Kind says what
// happened (the Event* constants); TaskID, Type, Attempt and Shard (-1:
// none) say to what; Err is the error that came with it. Its JSON form
// (MarshalJSON) has snake_case keys and leaves out empty fields. The kinds,
// who publishes each and with which fields: docs/events.md.
type Event = events.Event

// EventKind is an Event's kind: one of the Event* constants.
type EventKind = events.Kind

// Bus carries events from the queue's services to subscribers registered
// with Subscribe; make one with NewBus and give it to Config.Events. Each
// subscriber runs on its own goroutine behind a bounded buffer: Publish
// never waits for one, and an event that finds a subscriber's buffer full
// is dropped for that subscriber alone, counted (Subscription.Dropped,
// Bus.Stats) and warned about once per episode of drops. Close flushes
// the buffers and waits for the subscribers. A nil *Bus publishes nothing.
type Bus = events.Bus

// Subscription is one subscriber of a Bus: Close unsubscribes it after its
// buffered events are handled; Dropped counts the events it lost.
type Subscription = events.Subscription

// NewBus returns an event bus with no subscribers. It warns of a
// subscriber that starts dropping events through slog.Default, or through
// the logger given with WithBusLogger.
func NewBus(opts ...BusOption) *Bus { return events.NewBus(opts...) }

// BusOption configures NewBus.
type BusOption = events.Option

// WithBusLogger makes a bus warn through l when a subscriber starts
// dropping events (and when one panics).
func WithBusLogger(l *slog.Logger) BusOption { return events.WithLogger(l) }

// EventLog returns a subscriber that logs each event through logger: task
// outcomes (succeeded, failed, dead, canceled, released, rejected,
// dropped, lease_lost, outcome_rejected) at info, the rest at debug, with
// snake_case keys. Workers already log their own events this way.
//
//	bus.Subscribe("log", 0, s3queue.EventLog(logger))
func EventLog(logger *slog.Logger) func(Event) { return events.Log(logger) }

// EventJSONLines returns a subscriber that writes each event to w as one
// JSON object per line, one Write per line (what `s3queue worker --events`
// writes).
//
//	bus.Subscribe("json", 0, s3queue.EventJSONLines(f))
func EventJSONLines(w io.Writer) func(Event) { return events.JSONLines(w) }

// Event kinds (docs/events.md says who publishes each, and its fields).
const (
	EventSubmitted        = events.Submitted        // producer: a task was created
	EventClaimed          = events.Claimed          // worker: a task was claimed
	EventStarted          = events.Started          // worker: its handler began
	EventSucceeded        = events.Succeeded        // worker: the handler succeeded
	EventFailed           = events.Failed           // worker: an attempt failed
	EventRetried          = events.Retried          // worker: the task went back to pending to run again
	EventDead             = events.Dead             // worker or monitor: the task is dead
	EventSnoozed          = events.Snoozed          // worker: RetryAfter, no attempt used
	EventCanceled         = events.Canceled         // producer or worker: the task is canceled
	EventCancelRequested  = events.CancelRequested  // producer: a running task was asked to stop
	EventLeaseLost        = events.LeaseLost        // worker: the lease was lost; the handler was canceled
	EventReleased         = events.Released         // worker: a claimed task was given back, its attempt unused
	EventRejected         = events.Rejected         // worker: admission refused a task
	EventDropped          = events.Dropped          // worker: the dispatch queue dropped a task
	EventOutcomeRejected  = events.OutcomeRejected  // worker: the fence refused an outcome after a lease loss
	EventCorrupt          = events.Corrupt          // worker or monitor: a corrupt object was skipped
	EventRequeued         = events.Requeued         // producer: a dead or canceled task was requeued
	EventRedispatched     = events.Redispatched     // monitor: an expired lease was taken back
	EventRepaired         = events.Repaired         // monitor: a pending task was announced again
	EventDeleted          = events.Deleted          // monitor: retention deleted a finished task
	EventBlocked          = events.Blocked          // producer: a task was submitted waiting for its dependencies
	EventUnblocked        = events.Unblocked        // worker, producer or monitor: its dependencies all succeeded
	EventDependencyFailed = events.DependencyFailed // worker, producer or monitor: a dependency ended dead or canceled
	EventSlotAcquired     = events.SlotAcquired     // producer: a submitted task took its free slot
	EventSlotQueued       = events.SlotQueued       // producer: a submitted task waits behind its slot's holder
	EventSlotReplaced     = events.SlotReplaced     // producer or monitor: a waiting task was replaced and canceled
	EventSlotRefused      = events.SlotRefused      // producer: a drop-if-running submit found its slot busy
	EventSlotGranted      = events.SlotGranted      // worker, producer or monitor: the slot passed to a waiting task
	EventSlotFreed        = events.SlotFreed        // worker, producer or monitor: the holder ended with none waiting
	EventShardAcquired    = events.ShardAcquired    // worker: a shard became the member's own
	EventShardReleased    = events.ShardReleased    // worker: a shard is no longer the member's own
	EventFleetAsleep      = events.FleetAsleep      // worker: the fleet's only member went to sleep
	EventFleetWoken       = events.FleetWoken       // worker: the sleeping member woke
)

// WorkerPool is a set of task types a worker runs with handlers and limits
// of their own (WorkerConfig.Pools; see docs/flow-control.md).
type WorkerPool = worker.Pool

// QueuePolicy says what a worker's full pool does with a task it finds.
type QueuePolicy = worker.QueuePolicy

// The queue policies of a worker's pools.
const (
	// QueueBlock (default): claim only for a free handler; leave the rest
	// in the bucket.
	QueueBlock = worker.Block
	// QueueReject: claim ahead up to MaxQueueDepth; refuse (leave) the
	// rest, reported.
	QueueReject = worker.Reject
	// QueueDropLatest: as QueueReject, reported as drops.
	QueueDropLatest = worker.DropLatest
	// QueueDropOldest: claim ahead; release the oldest pending task for a
	// newer one.
	QueueDropOldest = worker.DropOldest
)

// CrashPolicy is what a crashed handler does to its task
// (WorkerConfig.CrashPolicy, [worker] crash_policy).
type CrashPolicy = worker.CrashPolicy

// The crash policies of a worker.
const (
	// CrashFail (default): a failed attempt, retried after the task's
	// retry delay, by any worker.
	CrashFail = worker.CrashFail
	// CrashRequeue: a failed attempt, run again at once by this worker,
	// ahead of its pool's pending tasks.
	CrashRequeue = worker.CrashRequeue
)

// QueueState is a worker pool's gauges (Worker.QueueStates).
type QueueState = worker.QueueState

// WorkerHooks observe a worker's dispatch queues (WorkerConfig.Hooks).
type WorkerHooks = worker.Hooks

// Monitor keeps the queue healthy until the context given to Run ends: it
// re-dispatches tasks whose worker died, repairs pending tasks that lost
// their way to a worker, and deletes finished tasks after their retention.
// Several may run at once.
type Monitor = monitor.Monitor

// MonitorState is what a monitor knows of the queue (Monitor.State): counts
// by status and shard, oldest pending age, the fleet, tasks ended per minute
// over the last hour, the newest dead tasks (with MonitorConfig.DeadList)
// and its own request counts. Taking it costs no request; the dashboard of
// `s3queue monitor --http` serves it (docs/dashboard.md).
type MonitorState = monitor.State

// Causes of a handler's context cancellation, read with context.Cause.
var (
	// ErrCanceled: the task was canceled while it ran.
	ErrCanceled = worker.ErrCanceled
	// ErrLeaseLost: the worker lost the task's lease; another worker may
	// run it now.
	ErrLeaseLost = worker.ErrLeaseLost
	// ErrShutdown: the worker stopped before the handler did; the task goes
	// back to the queue without using up an attempt.
	ErrShutdown = worker.ErrShutdown
)

// DispatchMode is how new tasks reach workers (Config.DispatchMode, [queue]
// dispatch_mode, docs/direct-dispatch.md): DispatchShared or DispatchDirect, the strings "shared"
// and "direct" in queue.toml and the manifest.
type DispatchMode = shards.DispatchMode

const (
	// DispatchShared and DispatchDirect are the values of
	// Config.DispatchMode.
	DispatchShared = shards.DispatchShared
	DispatchDirect = shards.DispatchDirect
)

var (
	// ErrWorkerLeaseLost ends a direct-dispatch worker's Run when its own
	// lease was taken over or could not be renewed: it stopped at once and
	// canceled its handlers.
	ErrWorkerLeaseLost = worker.ErrWorkerLeaseLost
	// ErrWorkerIDInUse: NewWorker under direct dispatch with the id of a
	// live worker.
	ErrWorkerIDInUse = worker.ErrWorkerIDInUse
)

// Permanent marks a handler's err as not worth retrying: the task is dead
// at once.
func Permanent(err error) error { return worker.Permanent(err) }

// RetryAfter asks for the task to run again after delay without using up
// an attempt (a snooze: Task.Snoozes counts it; from the 51st on, a snooze
// uses up an attempt).
func RetryAfter(delay time.Duration, err error) error { return worker.RetryAfter(delay, err) }

// RetryLater is RetryAfter with the delay the task's retry policy gives its
// next snooze: the policy's backoff by the snooze's number (1s, 2s, 4s ...
// up to max_delay, 5m by default, jittered), as the CLI's exit code 75.
func RetryLater(err error) error { return worker.RetryLater(err) }

// NewWorker returns a worker on the queue configured by Config.Worker.
// Register its handlers with Handle, then call Run; a worker never claims a
// task of a type it has no handler for. A process may run several; each
// needs its own id, so a Config.Worker.ID set by hand serves one worker of
// the Queue only (leave it empty and each gets a unique one).
func (q *Queue) NewWorker(ctx context.Context) (*Worker, error) {
	c := q.cfg.Worker
	if err := q.applyShared(shared{service: "Worker", shards: &c.Shards, dispatchMode: &c.DispatchMode,
		clock: &c.Clock, logger: &c.Logger, local: &c.Local, events: &c.Events, tracer: &c.TracerProvider, rand: &c.Rand}); err != nil {
		return nil, fmt.Errorf("s3queue: new worker on %s: %w", q.where, err)
	}
	if c.DiscoveryTTL == 0 {
		c.DiscoveryTTL = q.cfg.Producer.DiscoveryTTL
	}
	if c.ID != "" {
		q.mu.Lock()
		taken := q.workerIDs[c.ID]
		q.workerIDs[c.ID] = true
		q.mu.Unlock()
		if taken {
			return nil, fmt.Errorf("s3queue: new worker on %s: worker id %q is already in use by another worker of this queue; leave Config.Worker.ID empty to give each worker its own", q.where, c.ID)
		}
	}
	w, err := worker.New(ctx, q.store, c)
	if err != nil {
		return nil, fmt.Errorf("s3queue: new worker on %s: %w", q.where, err)
	}
	if q.cfg.Metrics != nil {
		q.cfg.Metrics.watchWorker(w)
	}
	return w, nil
}

// NewMonitor returns a monitor on the queue configured by Config.Monitor.
// Call Run to sweep until its context ends. Its scheduler (on unless
// Config.Monitor.NoScheduler) submits the schedules' ticks through the
// queue's producer; Config.Schedules are written to the bucket first
// where they are missing or differ (ApplySchedules).
func (q *Queue) NewMonitor(ctx context.Context) (*Monitor, error) {
	c := q.cfg.Monitor
	if err := q.applyShared(shared{service: "Monitor", shards: &c.Shards, dispatchMode: &c.DispatchMode,
		clock: &c.Clock, logger: &c.Logger, local: &c.Local, events: &c.Events, rand: &c.Rand}); err != nil {
		return nil, fmt.Errorf("s3queue: new monitor on %s: %w", q.where, err)
	}
	if c.WorkerLease == 0 {
		c.WorkerLease = q.cfg.Worker.LeaseDuration
	}
	if c.Submit == nil {
		c.Submit = q.submitTick
	}
	m, err := monitor.New(ctx, q.store, c)
	if err != nil {
		return nil, fmt.Errorf("s3queue: new monitor on %s: %w", q.where, err)
	}
	if len(q.cfg.Schedules) > 0 {
		wrote, err := q.ApplySchedules(ctx, q.cfg.Schedules)
		if err != nil {
			return nil, fmt.Errorf("s3queue: new monitor on %s: apply the configured schedules: %w", q.where, err)
		}
		if len(wrote) > 0 {
			q.log.Info("wrote the configured schedules that were missing or differed", "schedules", wrote)
		}
	}
	if q.cfg.Metrics != nil {
		q.cfg.Metrics.watchMonitor(m)
	}
	return m, nil
}
