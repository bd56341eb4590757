// Package events is the queue's event bus: the producer, workers and
// monitors publish typed events (a task submitted, claimed, succeeded; a
// shard acquired; the fleet asleep) and subscribers registered in Go read
// them, each on its own goroutine through a bounded buffer.
//
// It owns the Event type, the Bus and the two built-in subscribers (Log,
// JSONLines). It must not block a publisher: a slow subscriber loses events
// (counted, and warned about), never the queue's time. It knows nothing of
// the store and imports no other package of the queue.
package events

import (
	"encoding/json"
	"errors"
	"math"
	"time"
)

// Kind names what happened. Its values are the constants below; docs/events.md
// lists who publishes each and which fields it carries.
type Kind string

// Task kinds. "Outcomes" (IsOutcome) are logged at info by Log.
const (
	// Submitted: the producer created a task (not on an idempotent repeat).
	Submitted Kind = "submitted"
	// Claimed: a worker claimed a task (its attempt has begun).
	Claimed Kind = "claimed"
	// Started: a worker's handler began to run a claimed task.
	Started Kind = "started"
	// Succeeded: the handler succeeded and the result was committed.
	Succeeded Kind = "succeeded"
	// Failed: an attempt failed. A Retried or Dead event tells what
	// became of the task, when its publisher says so.
	Failed Kind = "failed"
	// Retried: the task went back to pending to run again.
	Retried Kind = "retried"
	// Dead: the task is dead (attempts used up, a permanent error, or, from
	// the monitor, a lease that expired with no attempts left).
	Dead Kind = "dead"
	// Snoozed: the handler asked to run again later (RetryAfter) without
	// using an attempt.
	Snoozed Kind = "snoozed"
	// Canceled: the task is canceled (Phase says where it was when the
	// worker saw the cancellation).
	Canceled Kind = "canceled"
	// CancelRequested: the producer asked a running task to stop; its
	// worker publishes Canceled when it does.
	CancelRequested Kind = "cancel_requested"
	// LeaseLost: the worker lost a running task's lease and canceled its
	// handler; another worker may run the task now.
	LeaseLost Kind = "lease_lost"
	// Released: a worker gave a claimed task back (its claim undone, the
	// attempt not used), so another worker can take it at once.
	Released Kind = "released"
	// Rejected: admission refused a task (the dispatch queue was full).
	Rejected Kind = "rejected"
	// Dropped: the dispatch queue dropped a task it held.
	Dropped Kind = "dropped"
	// OutcomeRejected: the fence refused an attempt's outcome because the
	// task was re-dispatched while the attempt ran (its lease was lost).
	OutcomeRejected Kind = "outcome_rejected"
	// Corrupt: a corrupt object (or one whose reads kept failing) was
	// skipped.
	Corrupt Kind = "corrupt"
	// Requeued: a dead or canceled task was given a fresh start.
	Requeued Kind = "requeued"
	// Redispatched: the monitor gave back a running task whose lease had
	// expired (its worker died or stalled).
	Redispatched Kind = "redispatched"
	// Repaired: the monitor announced a pending task that stayed unclaimed
	// past repair_after.
	Repaired Kind = "repaired"
	// Deleted: the monitor deleted a finished task after its retention.
	Deleted Kind = "deleted"
)

// Dependency kinds, published by whoever passes a task's end on to the
// tasks that depend on it (a worker, a producer's Cancel, a monitor).
const (
	// Blocked: a task was submitted with dependencies that have not ended.
	Blocked Kind = "blocked"
	// Unblocked: a blocked task's dependencies all succeeded: it is
	// pending.
	Unblocked Kind = "unblocked"
	// DependencyFailed: a blocked task's dependency ended dead or canceled:
	// the task is canceled (or dead), its own dependents in turn.
	DependencyFailed Kind = "dependency_failed"
)

// Slot kinds: a task's way through its slot (docs/slots.md).
const (
	// SlotAcquired: a submitted task took its free slot (it is pending).
	SlotAcquired Kind = "slot_acquired"
	// SlotQueued: a submitted task waits behind its slot's holder
	// (blocked).
	SlotQueued Kind = "slot_queued"
	// SlotReplaced: a waiting task was replaced by a later submit
	// (admission replace): it is canceled.
	SlotReplaced Kind = "slot_replaced"
	// SlotRefused: a drop-if-running submit found its slot busy; nothing
	// was created.
	SlotRefused Kind = "slot_refused"
	// SlotGranted: the slot passed to a waiting task (it is pending).
	SlotGranted Kind = "slot_granted"
	// SlotFreed: the slot's holder ended (the task of the event) with no
	// task waiting: the slot is free (seed 004's Running → Idle), and the
	// key's next submit takes it at once.
	SlotFreed Kind = "slot_freed"
)

// RateLimited: a worker found a task of a rate-limited type due while the
// type's window had no start left for it (docs/scheduling.md#rate-limits):
// the task stays pending, held by the worker until a window opens.
// Published once per task held, not at each window it waits.
const RateLimited Kind = "rate_limited"

// Fleet kinds, published by workers that share their shards in the fleet.
const (
	// ShardAcquired: the shard in Shard became one of the member's own.
	ShardAcquired Kind = "shard_acquired"
	// ShardReleased: the shard in Shard is no longer the member's own.
	ShardReleased Kind = "shard_released"
	// FleetAsleep: the fleet's only member went to sleep at the doorbell.
	FleetAsleep Kind = "fleet_asleep"
	// FleetWoken: the sleeping member woke: the doorbell rang, or it found
	// work itself.
	FleetWoken Kind = "fleet_woken"
)

// Direct dispatch kinds (docs/direct-dispatch.md).
const (
	// WorkerLeaseLost: the worker's own lease was taken over, deleted or
	// not renewed in time; the worker stops at once and cancels its
	// handlers.
	WorkerLeaseLost Kind = "worker_lease_lost"
	// InboxAsleep: the worker marked itself asleep in its lease and reads
	// its own doorbell (Key) instead of listing its inbox.
	InboxAsleep Kind = "inbox_asleep"
	// InboxWoken: the sleeping worker woke: a producer rang its doorbell,
	// or a listing of its inbox found work.
	InboxWoken Kind = "inbox_woken"
	// InboxRecovered: the entries of a dead worker's inbox (Key: the
	// inbox's prefix) were moved to the overflow.
	InboxRecovered Kind = "inbox_recovered"
)

// Schedule kinds (docs/scheduling.md).
const (
	// Scheduled: a monitor's scheduler handled a tick of the schedule in
	// Key: TaskID is the tick's task (the one its idempotency key names),
	// or empty when catch_up = "none" skipped missed ticks.
	Scheduled Kind = "scheduled"
)

// kinds is every Kind above, in the order docs/events.md lists them. A
// test holds it to the constants of this file, so a kind added there and
// not here fails it.
var kinds = []Kind{
	Submitted, Claimed, Started, Succeeded, Failed, Retried, Dead, Snoozed, Canceled, CancelRequested,
	LeaseLost, Released, Rejected, Dropped, OutcomeRejected, Corrupt, Requeued,
	Blocked, Unblocked, DependencyFailed,
	Redispatched, Repaired, Deleted, Scheduled,
	SlotAcquired, SlotQueued, SlotReplaced, SlotRefused, SlotGranted, SlotFreed,
	RateLimited,
	ShardAcquired, ShardReleased, FleetAsleep, FleetWoken,
	WorkerLeaseLost, InboxAsleep, InboxWoken, InboxRecovered,
}

// Kinds returns every kind the queue publishes: the one list readers of
// kinds (tail --kind, metrics) take them from.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// Known reports whether k is one of Kinds.
func (k Kind) Known() bool {
	for _, known := range kinds {
		if k == known {
			return true
		}
	}
	return false
}

// IsOutcome reports whether k ends an attempt or a task's stay with a
// worker in a way an operator reads: succeeded, failed, dead, canceled,
// released, rejected, dropped, lease_lost and outcome_rejected. Log logs
// these at info, the rest at debug.
func (k Kind) IsOutcome() bool {
	switch k {
	case Succeeded, Failed, Dead, Canceled, Released, Rejected, Dropped, LeaseLost, OutcomeRejected:
		return true
	}
	return false
}

// Sources of events: the Source field.
const (
	SourceProducer = "producer"
	SourceWorker   = "worker"
	SourceMonitor  = "monitor"
)

// Phases of a task in a worker's dispatch queue: the Phase field of
// canceled, dropped, rejected and released events.
const (
	PhaseWaiting  = "waiting"
	PhasePending  = "pending"
	PhaseInFlight = "in-flight"
)

// Event is one thing that happened. Fields a kind does not use are zero,
// but Shard, which is -1 when the event concerns no shard (or its
// publisher does not know it).
type Event struct {
	// Time is when the publisher saw it happen, by its local clock.
	Time time.Time
	// Source is SourceProducer, SourceWorker or SourceMonitor.
	Source string
	// Origin is the publishing worker's or monitor's id ("" for a
	// producer).
	Origin string
	Kind   Kind
	TaskID string
	// Type is the task's type.
	Type string
	// Attempt is the task's attempt number, when it matters (0: unknown).
	Attempt int
	// Shard is the task's shard, or the shard of a shard event; -1: none.
	Shard int
	// Pool is the worker pool that ran or held the task, if any.
	Pool string
	// Phase is where in the worker's dispatch queue a canceled, dropped,
	// rejected or released task was: PhaseWaiting, PhasePending or
	// PhaseInFlight.
	Phase string
	// Key is the object a corrupt event is about, relative to the queue's
	// prefix.
	Key string
	// Err is the error that came with it: a failed attempt's, a corrupt
	// object's.
	Err error
	// Duration is how long the attempt's handler ran, on the event a
	// worker publishes at the attempt's outcome (succeeded, failed, dead,
	// snoozed, canceled, released, outcome_rejected) when its handler ran;
	// 0 otherwise (a task handed back before it started).
	Duration time.Duration
}

// wire is Event's JSON form: snake_case, empty fields left out, the error
// as its message.
type wire struct {
	Time    *time.Time `json:"time,omitempty"`
	Source  string     `json:"source,omitempty"`
	Origin  string     `json:"origin,omitempty"`
	Kind    Kind       `json:"kind"`
	TaskID  string     `json:"task_id,omitempty"`
	Type    string     `json:"type,omitempty"`
	Attempt int        `json:"attempt,omitempty"`
	Shard   *int       `json:"shard,omitempty"`
	Pool    string     `json:"pool,omitempty"`
	Phase   string     `json:"phase,omitempty"`
	Key     string     `json:"key,omitempty"`
	Err     string     `json:"err,omitempty"`
	// DurationMs is Duration in milliseconds, to the microsecond.
	DurationMs float64 `json:"duration_ms,omitempty"`
}

// MarshalJSON encodes e as one JSON object with snake_case keys, leaving
// out empty fields (shard 0 is kept; shard -1 is left out), giving the
// error as its message and the duration as duration_ms (milliseconds, to
// the microsecond).
func (e Event) MarshalJSON() ([]byte, error) {
	w := wire{Source: e.Source, Origin: e.Origin, Kind: e.Kind, TaskID: e.TaskID, Type: e.Type,
		Attempt: e.Attempt, Pool: e.Pool, Phase: e.Phase, Key: e.Key}
	if !e.Time.IsZero() {
		t := e.Time.Round(0) // no monotonic reading
		w.Time = &t
	}
	if e.Shard >= 0 {
		s := e.Shard
		w.Shard = &s
	}
	if e.Err != nil {
		w.Err = e.Err.Error()
	}
	if e.Duration > 0 {
		w.DurationMs = float64(e.Duration.Microseconds()) / 1000
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON encodes; a missing shard is -1 and
// an error comes back as an error with the same message.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Event{Source: w.Source, Origin: w.Origin, Kind: w.Kind, TaskID: w.TaskID, Type: w.Type,
		Attempt: w.Attempt, Shard: -1, Pool: w.Pool, Phase: w.Phase, Key: w.Key}
	if w.Time != nil {
		e.Time = *w.Time
	}
	if w.Shard != nil {
		e.Shard = *w.Shard
	}
	if w.Err != "" {
		e.Err = errors.New(w.Err)
	}
	if w.DurationMs > 0 {
		e.Duration = time.Duration(math.Round(w.DurationMs*1000)) * time.Microsecond
	}
	return nil
}
