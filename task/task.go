package task

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"time"
	"unicode/utf8"
)

const (
	// FormatVersion is the newest task object format this package reads
	// and writes: 3 for a task whose result is stored apart (ResultRef), 2
	// for a task with dependencies or a slot (see Marshal), 1 for the
	// others.
	FormatVersion = 3
	// MaxInputBytes limits a task's input (compacted JSON), keeping every
	// task object small enough for one cheap GET.
	MaxInputBytes = 256 << 10
	// MaxResultBytes limits the result a handler may store on the task
	// itself (inline); a larger one is stored apart (ResultRef), up to
	// MaxExternalResultBytes.
	MaxResultBytes = 256 << 10
	// MaxHistory bounds Task.History.
	MaxHistory = 32
	// MaxErrorBytes bounds Task.LastError.
	MaxErrorBytes = 4 << 10
	// MaxReasonBytes bounds Transition.Reason, so a full history stays small.
	MaxReasonBytes = 256
	// MaxTypeLen bounds Spec.Type.
	MaxTypeLen = 128
	// MaxKeyBytes bounds Spec.IdempotencyKey and Spec.ShardKey.
	MaxKeyBytes = 1024
	// MaxAttemptsLimit is the largest accepted Spec.MaxAttempts.
	MaxAttemptsLimit = 1000
	// MaxDeps bounds Spec.DependsOn: a task waits on at most this many
	// parents (each is an entry of its object, and a write when it ends).
	MaxDeps = 100
	// MaxTraceBytes bounds Spec.Trace (its keys and values together): a
	// W3C traceparent is 55 bytes, and a tracestate at most 512 by its
	// specification.
	MaxTraceBytes = 1024
	// MaxSnoozes bounds the snoozes that give their attempt back: from the
	// next one on, a snooze counts as a failed attempt, so a handler that
	// always asks to retry later ends up dead instead of looping forever.
	MaxSnoozes = 50

	// DefaultMaxAttempts applies when Spec.MaxAttempts is 0.
	DefaultMaxAttempts = 3
	// DefaultTimeout applies when Spec.Timeout is 0.
	DefaultTimeout = 30 * time.Second
	// MinTimeout and MaxTimeout bound Spec.Timeout. A lease shorter than a
	// second cannot be told apart by S3's 1-second Date header.
	MinTimeout = time.Second
	MaxTimeout = 24 * time.Hour
	// MinUniqueFor and MaxUniqueFor bound Spec.UniqueFor. A window shorter
	// than a second cannot be told apart by S3's 1-second Date header.
	MinUniqueFor = time.Second
	MaxUniqueFor = 30 * 24 * time.Hour
)

// Claim is a worker's hold on a running task.
type Claim struct {
	Worker string `json:"worker"`
	// ID is unique per claim; it fences outcomes (invariant 3).
	ID string `json:"id"`
	// ExpiresAt is the lease expiry in S3 time.
	ExpiresAt time.Time `json:"expires_at"`
}

// Transition is one entry of a task's history.
type Transition struct {
	At      time.Time `json:"at"`
	From    Status    `json:"from,omitempty"`
	To      Status    `json:"to"`
	Worker  string    `json:"worker,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
}

// Task is the canonical task object stored at Key(Shard, ID). Change it only
// through its transition methods, which keep Version, UpdatedAt and History
// consistent.
type Task struct {
	Format int             `json:"format"`
	ID     string          `json:"id"`
	Type   string          `json:"type"`
	Input  json.RawMessage `json:"input,omitempty"`
	Shard  int             `json:"shard"`
	Status Status          `json:"status"`
	// Attempt counts attempts started (claims made) so far; a snooze (up
	// to MaxSnoozes) and a release at shutdown give their attempt back,
	// so the next run is the same attempt. A task canceled after a
	// snooze, before it runs again (or instead of the snooze), keeps the
	// snoozed attempt: its handler ran.
	Attempt int `json:"attempt"`
	// Snoozes counts the handler's requests to retry later (Snooze) since
	// submit or the last requeue.
	Snoozes     int         `json:"snoozes,omitempty"`
	MaxAttempts int         `json:"max_attempts"`
	Retry       RetryPolicy `json:"retry"`
	// Timeout is the lease duration of one attempt, and how long its
	// handler may run: the worker ends a Go handler's context after it.
	Timeout        Duration `json:"timeout"`
	IdempotencyKey string   `json:"idempotency_key,omitempty"`
	// UniqueFor is the uniqueness window its idempotency key was claimed
	// with (Spec.UniqueFor): 0 for a key held until retention deletes the
	// task. Retention keeps the task until the window has passed
	// (Task.MinRetention).
	UniqueFor Duration `json:"unique_for,omitempty"`
	ShardKey  string   `json:"shard_key,omitempty"`
	// Priority orders the task among the due tasks of its shard (see
	// Priority); absent for the default priority. The size of a pending
	// task object says it too (PriorityBySize).
	Priority Priority `json:"priority,omitempty"`
	// Trace is the trace context of the submit that created the task
	// (W3C traceparent and tracestate, as an OpenTelemetry propagator
	// writes them), so that the spans of the workers that run it continue
	// the producer's trace, attempt after attempt (docs/tracing.md). It is
	// absent when the producer traces nothing, and leaves the format as it
	// is: it only informs, so a binary that does not know it loses nothing
	// but the trace when it rewrites the task without it.
	Trace       map[string]string `json:"trace,omitempty"`
	AvailableAt time.Time         `json:"available_at"`
	// Deadline, when set, is the S3 time after which the task is not
	// started: a worker that finds it pending past its deadline ends it
	// dead instead of claiming it (MissDeadline), a retry due after it
	// ends dead instead, and a running Go handler's context ends at it
	// (docs/lifecycle.md, Deadlines). Omitted when zero; it leaves the
	// format as it is (a binary that does not know it runs the task as if
	// it had none).
	Deadline  time.Time `json:"deadline,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Claim is set exactly while the task is running.
	Claim           *Claim          `json:"claim,omitempty"`
	CancelRequested bool            `json:"cancel_requested,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
	// ResultRef references the result stored apart (a result larger than
	// the worker's inline limit; see ResultRef), instead of Result.
	ResultRef *ResultRef `json:"result_ref,omitempty"`
	// ResultExpiredAt is when (S3 time) the monitor dropped the result,
	// its result TTL having passed (ExpireResult).
	ResultExpiredAt time.Time `json:"result_expired_at,omitzero"`
	LastError       string    `json:"last_error,omitempty"`
	// Deps are the tasks this one depends on, each with what became of
	// it; the task is blocked until every one has succeeded.
	Deps []Dep `json:"deps,omitempty"`
	// OnDepFailure is what a dependency that ends dead or canceled does to
	// this task: DepCancel (also "") or DepFail.
	OnDepFailure DepFailure `json:"on_dep_failure,omitempty"`
	// Dependents: other tasks depend on this one (their edges are under
	// deps/): whoever records its end passes the outcome on.
	Dependents bool `json:"dependents,omitempty"`
	// Slot is the task's slot key: at most one task of a key runs at a
	// time, fleet-wide (docs/slots.md). A task waiting for its slot is
	// blocked; whoever records the end of the slot's holder passes the
	// slot on.
	Slot string `json:"slot,omitempty"`
	// SlotTurn is the task's turn in its slot (the slot's version that
	// admitted it); a requeue takes a new one.
	SlotTurn int64 `json:"slot_turn,omitempty"`
	// Retired marks a finished task that retention is deleting (a
	// tombstone): nothing writes it again, and anyone may delete it.
	Retired bool `json:"retired,omitempty"`
	// Version grows by one on every write, so every write changes the
	// bytes and the ETag (invariant 2).
	Version int64        `json:"version"`
	History []Transition `json:"history"`
	// HistoryDropped counts transitions dropped to keep History within
	// MaxHistory. The first (submit) entry is always kept.
	HistoryDropped int `json:"history_dropped,omitempty"`

	// stamp, when set (Stamp), is the time the transitions record instead
	// of the time they decide by. Not stored.
	stamp time.Time
}

// Dep is one dependency of a task: a parent task, and its end once known.
type Dep struct {
	ID    string `json:"id"`
	Shard int    `json:"shard"`
	// Ended is the parent's terminal status once the task learned it; ""
	// while the parent has not finished.
	Ended Status `json:"ended,omitempty"`
}

// DepFailure is what a dependency that ends dead or canceled does to its
// dependents (Spec.OnDepFailure): DepCancel ("" too) or DepFail, the strings
// "cancel" and "fail" in a task object's on_dep_failure.
type DepFailure string

// What a dependency that ends dead or canceled does to its dependents.
const (
	// DepCancel: the dependent is canceled (the default): it never ran.
	DepCancel DepFailure = "cancel"
	// DepFail: the dependent is dead, as if it had failed for good.
	DepFail DepFailure = "fail"
)

// Validate reports an error unless d is DepCancel, DepFail or "".
func (d DepFailure) Validate() error {
	switch d {
	case "", DepCancel, DepFail:
		return nil
	}
	return fmt.Errorf("on dependency failure %q: want cancel or fail", string(d))
}

// Spec is what a producer asks for.
type Spec struct {
	// Type selects the handler: 1..128 characters of [A-Za-z0-9._:-].
	Type string
	// Input is the handler's input, any JSON value up to MaxInputBytes.
	// Empty means no input.
	Input json.RawMessage
	// MaxAttempts is 1..1000; 0 means DefaultMaxAttempts.
	MaxAttempts int
	// Retry nil means DefaultRetryPolicy. Zero InitialDelay, MaxDelay and
	// Multiplier take their defaults; Jitter is used as given.
	Retry *RetryPolicy
	// Timeout is the lease of one attempt, 1s..24h; 0 means DefaultTimeout.
	Timeout time.Duration
	// AvailableAt delays the first attempt; zero means now.
	AvailableAt time.Time
	// Deadline is the S3 time after which the task is not started (see
	// Task.Deadline); zero means none. It must lie after the submit's S3
	// time and after AvailableAt.
	Deadline       time.Time
	IdempotencyKey string
	// UniqueFor, with an idempotency key, is how long the key stays taken
	// by this task, from the S3 time its record was written:
	// MinUniqueFor..MaxUniqueFor, or 0 for "until retention deletes the
	// task" (see IdempotencyRecord).
	UniqueFor time.Duration
	ShardKey  string
	// Priority is PriorityHigh, PriorityDefault ("") or PriorityLow.
	Priority Priority
	// Trace is the trace context the task carries to its workers (see
	// Task.Trace), at most MaxTraceBytes of valid UTF-8; empty means none.
	Trace map[string]string
	// Deps are the task's dependencies; the Ended of each is what is known
	// of its parent at submit. A task with one not yet ended is created
	// blocked; one whose parent already failed is created canceled or dead.
	Deps []Dep
	// OnDepFailure: DepCancel ("" too) or DepFail.
	OnDepFailure DepFailure
	// Slot is the task's slot key; SlotWait creates it blocked, waiting
	// for its slot (its admission put it behind the slot's holder).
	Slot     string
	SlotWait bool
	SlotTurn int64
}

// New validates spec and returns a pending task with Version 1 and a single
// "submitted" history entry. id must be a valid task id (see NewID), shard
// >= 0, and now is S3 time.
func New(id string, shard int, spec Spec, now time.Time) (*Task, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("new task: %w: id %q is not a task id", ErrInvalid, id)
	}
	if shard < 0 {
		return nil, fmt.Errorf("new task %s: %w: negative shard %d", id, ErrInvalid, shard)
	}
	if err := ValidType(spec.Type); err != nil {
		return nil, fmt.Errorf("new task %s: %w", id, err)
	}
	input, err := normaliseJSON(spec.Input, MaxInputBytes)
	if err != nil {
		return nil, fmt.Errorf("new task %s: %w: input %v", id, ErrInvalid, err)
	}
	maxAttempts := spec.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = DefaultMaxAttempts
	}
	if maxAttempts < 1 || maxAttempts > MaxAttemptsLimit {
		return nil, fmt.Errorf("new task %s: %w: max attempts %d outside 1..%d", id, ErrInvalid, spec.MaxAttempts, MaxAttemptsLimit)
	}
	retry := DefaultRetryPolicy()
	if spec.Retry != nil {
		retry = spec.Retry.withDefaults()
	}
	if err := retry.Validate(); err != nil {
		return nil, fmt.Errorf("new task %s: %w: %w", id, ErrInvalid, err)
	}
	timeout := spec.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < MinTimeout || timeout > MaxTimeout {
		return nil, fmt.Errorf("new task %s: %w: timeout %s outside %s..%s", id, ErrInvalid, spec.Timeout, MinTimeout, MaxTimeout)
	}
	for _, k := range []struct{ name, v string }{{"idempotency key", spec.IdempotencyKey}, {"shard key", spec.ShardKey}} {
		if len(k.v) > MaxKeyBytes || !utf8.ValidString(k.v) {
			return nil, fmt.Errorf("new task %s: %w: %s must be valid UTF-8 of at most %d bytes", id, ErrInvalid, k.name, MaxKeyBytes)
		}
	}
	if spec.UniqueFor != 0 && spec.IdempotencyKey == "" {
		return nil, fmt.Errorf("new task %s: %w: a uniqueness window needs an idempotency key (or unique)", id, ErrInvalid)
	}
	if spec.UniqueFor != 0 && (spec.UniqueFor < MinUniqueFor || spec.UniqueFor > MaxUniqueFor) {
		return nil, fmt.Errorf("new task %s: %w: unique_for %s outside %s..%s", id, ErrInvalid, spec.UniqueFor, MinUniqueFor, MaxUniqueFor)
	}
	if err := checkTrace(spec.Trace); err != nil {
		return nil, fmt.Errorf("new task %s: %w", id, err)
	}
	if !spec.Priority.Valid() {
		return nil, fmt.Errorf("new task %s: %w: priority %q: want high, default or low", id, ErrInvalid, spec.Priority)
	}
	if err := checkDeps(id, spec.Deps, spec.OnDepFailure); err != nil {
		return nil, err
	}
	if spec.Slot != "" && len(spec.Deps) > 0 {
		return nil, fmt.Errorf("new task %s: %w: a task may have dependencies or a slot, not both", id, ErrInvalid)
	}
	if len(spec.Slot) > MaxKeyBytes || !utf8.ValidString(spec.Slot) {
		return nil, fmt.Errorf("new task %s: %w: slot key must be valid UTF-8 of at most %d bytes", id, ErrInvalid, MaxKeyBytes)
	}
	now = now.UTC()
	avail := now
	if !spec.AvailableAt.IsZero() {
		avail = spec.AvailableAt.UTC()
	}
	var deadline time.Time
	if !spec.Deadline.IsZero() {
		deadline = spec.Deadline.UTC()
		if !deadline.After(avail) || !deadline.After(now) {
			return nil, fmt.Errorf("new task %s: %w: deadline %s is not after the submit (%s) and the task's availability (%s)", id, ErrInvalid,
				deadline.Format(time.RFC3339), now.Format(time.RFC3339), avail.Format(time.RFC3339))
		}
	}
	t := &Task{
		Format:         1,
		ID:             id,
		Type:           spec.Type,
		Input:          input,
		Shard:          shard,
		Status:         Pending,
		MaxAttempts:    maxAttempts,
		Retry:          retry,
		Timeout:        Duration(timeout),
		IdempotencyKey: spec.IdempotencyKey,
		UniqueFor:      Duration(spec.UniqueFor),
		ShardKey:       spec.ShardKey,
		Priority:       spec.Priority,
		Trace:          cloneTrace(spec.Trace),
		AvailableAt:    avail,
		Deadline:       deadline,
		CreatedAt:      now,
		UpdatedAt:      now,
		Version:        1,
		History:        []Transition{{At: now, To: Pending, Reason: "submitted"}},
	}
	t.Slot, t.SlotTurn = spec.Slot, spec.SlotTurn
	if spec.SlotWait {
		if spec.Slot == "" {
			return nil, fmt.Errorf("new task %s: %w: waiting for a slot without a slot key", id, ErrInvalid)
		}
		t.Status = Blocked
		t.History[0].To = Blocked
	}
	if len(spec.Deps) > 0 {
		t.Deps = append([]Dep(nil), spec.Deps...)
		t.OnDepFailure = spec.OnDepFailure
		t.History[0].To = Blocked
		t.Status = Blocked
		t.History = t.History[:1]
		t.Version = 0
		t.settleDeps(now, "", "")
		if t.Status == Blocked {
			t.Version = 1
		}
	}
	return t, nil
}

// checkTrace checks a task's trace context at submit.
func checkTrace(trace map[string]string) error {
	n := 0
	for k, v := range trace {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: trace context entry %q: want a name and valid UTF-8", ErrInvalid, k)
		}
		n += len(k) + len(v)
	}
	if n > MaxTraceBytes {
		return fmt.Errorf("%w: trace context is %d bytes, over %d", ErrInvalid, n, MaxTraceBytes)
	}
	return nil
}

// cloneTrace copies a trace context; an empty one is nil, so that a task
// without tracing encodes as it did before the field existed.
func cloneTrace(trace map[string]string) map[string]string {
	if len(trace) == 0 {
		return nil
	}
	return maps.Clone(trace)
}

// checkDeps checks a task's dependencies at submit.
func checkDeps(id string, deps []Dep, onFailure DepFailure) error {
	if len(deps) > MaxDeps {
		return fmt.Errorf("new task %s: %w: %d dependencies, over %d", id, ErrInvalid, len(deps), MaxDeps)
	}
	if err := onFailure.Validate(); err != nil {
		return fmt.Errorf("new task %s: %w: %w", id, ErrInvalid, err)
	}
	seen := make(map[string]bool, len(deps))
	for _, d := range deps {
		switch {
		case !ValidID(d.ID):
			return fmt.Errorf("new task %s: %w: dependency %q is not a task id", id, ErrInvalid, d.ID)
		case d.ID == id:
			return fmt.Errorf("new task %s: %w: a task cannot depend on itself", id, ErrInvalid)
		case seen[d.ID]:
			return fmt.Errorf("new task %s: %w: dependency %s listed twice", id, ErrInvalid, d.ID)
		case d.Ended != "" && !d.Ended.Terminal():
			return fmt.Errorf("new task %s: %w: dependency %s ended %q", id, ErrInvalid, d.ID, d.Ended)
		}
		seen[d.ID] = true
	}
	return nil
}

// ValidType checks a task type name.
func ValidType(typ string) error {
	if typ == "" || len(typ) > MaxTypeLen {
		return fmt.Errorf("%w: type must be 1..%d characters, got %d", ErrInvalid, MaxTypeLen, len(typ))
	}
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: type %q may only contain A-Z a-z 0-9 . _ : -", ErrInvalid, typ)
		}
	}
	return nil
}

// normaliseJSON validates raw, compacts it into a fresh buffer (so the task
// never aliases the caller's slice) and enforces limit. Empty or blank
// input means absent.
func normaliseJSON(raw json.RawMessage, limit int) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("is not valid JSON: %v", err)
	}
	if buf.Len() > limit {
		return nil, fmt.Errorf("is %d bytes, over the %d byte limit", buf.Len(), limit)
	}
	return json.RawMessage(buf.Bytes()), nil
}

// Key returns the task's canonical object key, derived from its shard and id.
func (t *Task) Key() string { return Key(t.Shard, t.ID) }

// Clone returns a deep copy of t.
func (t *Task) Clone() *Task {
	c := *t
	c.Input = cloneBytes(t.Input)
	c.Result = cloneBytes(t.Result)
	if t.ResultRef != nil {
		r := *t.ResultRef
		c.ResultRef = &r
	}
	if t.Claim != nil {
		cl := *t.Claim
		c.Claim = &cl
	}
	if t.History != nil {
		c.History = append([]Transition(nil), t.History...)
	}
	if t.Deps != nil {
		c.Deps = append([]Dep(nil), t.Deps...)
	}
	if t.Trace != nil {
		c.Trace = maps.Clone(t.Trace)
	}
	return &c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
