// Package schedule owns periodic tasks: the schedule objects,
// schedules/{name}.json, each holding one schedule's definition (a cron
// expression in a time zone, or a fixed interval; the task it submits) and
// its state (the last tick handled), changed only by compare-and-swap; the
// computation of ticks; and the Scheduler that submits one task per tick.
//
// The Scheduler submits through a SubmitFunc its owner gives it (the
// monitor, wired to a producer by the root package), so this package never
// imports the producer. Ticks are decided on S3 time (clock.Authoritative)
// from the tick recorded in the bucket, never from the local clock; the
// local clock only paces the wake-ups. Exactly one task per tick, whoever
// schedules: each tick's task is submitted with the idempotency key
// IdempotencyKey(name, tick), so two schedulers that race, or one that
// crashed between the submit and the write of its state, get the one task
// the key's record names (docs/scheduling.md).
package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/s3queue/s3queue/task"
)

// Prefix holds the schedule objects, one per schedule.
const Prefix = "schedules/"

// Key is the key of schedule name's object under the queue's prefix.
func Key(name string) string { return Prefix + name + ".json" }

// NameFromKey returns the schedule name of a key under Prefix, or "" if key
// is not a schedule object's.
func NameFromKey(key string) string {
	name, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return ""
	}
	name, ok = strings.CutSuffix(name, ".json")
	if !ok || CheckName(name) != nil {
		return ""
	}
	return name
}

// The values of Definition.CatchUp.
const (
	// CatchUpOne: after ticks were missed (no scheduler ran), one task is
	// submitted for the latest of them.
	CatchUpOne = "one"
	// CatchUpNone: missed ticks are skipped; the next task is the next
	// tick's.
	CatchUpNone = "none"
)

// MaxNameLen bounds a schedule's name.
const MaxNameLen = 64

var nameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)

// CheckName checks a schedule's name: 1..64 characters of a-z, 0-9, _ and
// -, so that it is safe in a key and in an idempotency key.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen || !nameRE.MatchString(name) {
		return fmt.Errorf("invalid schedule name %q: want 1 to %d characters of a-z, 0-9, _ and -", name, MaxNameLen)
	}
	return nil
}

// MinEvery is the shortest fixed interval.
const MinEvery = time.Second

// CheckEvery checks an every interval that was given (the --every flag,
// the every key of a [[schedule]] table): a zero one, which Validate
// cannot tell from one left out, is refused as what it is.
func CheckEvery(every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("every %v: must be positive, at least %v", every, MinEvery)
	}
	return nil
}

// Definition is what a user says a schedule is: when it ticks and the task
// each tick submits. Its JSON form is the schedule object's (and the
// fields of a [[schedule]] table in queue.toml).
type Definition struct {
	// Name names the schedule (CheckName).
	Name string `json:"name"`
	// Cron is a standard 5-field cron expression ("*/5 * * * *": minute,
	// hour, day of month, month, day of week) or a descriptor (@yearly,
	// @monthly, @weekly, @daily, @midnight, @hourly), read in Timezone.
	// Exactly one of Cron and Every is set.
	Cron string `json:"cron,omitempty"`
	// Every is a fixed interval (at least a second): the ticks are the
	// multiples of Every since the Unix epoch, so every scheduler computes
	// the same ones.
	Every task.Duration `json:"every,omitempty"`
	// Timezone is the IANA time zone Cron is read in ("Europe/Paris");
	// "" is UTC. Only with Cron.
	Timezone string `json:"timezone,omitempty"`
	// Type and Input are the submitted task's; Input is JSON (none: null).
	Type  string          `json:"type"`
	Input json.RawMessage `json:"input,omitempty"`
	// MaxAttempts and Timeout are the submitted task's (0: the producer's
	// defaults).
	MaxAttempts int           `json:"max_attempts,omitempty"`
	Timeout     task.Duration `json:"timeout,omitempty"`
	// CatchUp is what a scheduler does after ticks were missed: CatchUpOne
	// (the default, "") or CatchUpNone.
	CatchUp string `json:"catch_up,omitempty"`
}

// CatchUpMode returns CatchUp, with its default.
func (d Definition) CatchUpMode() string {
	if d.CatchUp == "" {
		return CatchUpOne
	}
	return d.CatchUp
}

// Same reports whether d and o define the same schedule.
func (d Definition) Same(o Definition) bool {
	a, _ := json.Marshal(d.normal())
	b, _ := json.Marshal(o.normal())
	return string(a) == string(b)
}

func (d Definition) normal() Definition {
	d.CatchUp = d.CatchUpMode()
	if d.Timezone == "UTC" {
		d.Timezone = ""
	}
	if len(d.Input) > 0 {
		var v any
		if json.Unmarshal(d.Input, &v) == nil {
			d.Input, _ = json.Marshal(v)
		}
		if string(d.Input) == "null" {
			d.Input = nil
		}
	}
	return d
}

// Validate checks the definition and returns one error naming the
// schedule: its name, exactly one of cron and every, the cron expression,
// the time zone, the type, the input (JSON), catch_up.
func (d Definition) Validate() error {
	_, err := d.Compile()
	return err
}

// Compile validates the definition and returns its ticks.
func (d Definition) Compile() (Spec, error) {
	if err := CheckName(d.Name); err != nil {
		return Spec{}, err
	}
	fail := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("schedule %q: %s", d.Name, fmt.Sprintf(format, args...))
	}
	if strings.TrimSpace(d.Type) == "" {
		return fail("no task type")
	}
	// What task.New would refuse at every tick is refused here, once: a
	// definition the producer cannot submit would fail each tick forever.
	if err := task.ValidType(d.Type); err != nil {
		return fail("%v", err)
	}
	if len(d.Input) > 0 && !json.Valid(d.Input) {
		return fail("input is not valid JSON: %.40q", d.Input)
	}
	if d.MaxAttempts < 0 {
		return fail("max_attempts %d is negative", d.MaxAttempts)
	}
	if d.MaxAttempts > task.MaxAttemptsLimit {
		return fail("max_attempts %d is above %d", d.MaxAttempts, task.MaxAttemptsLimit)
	}
	if d.Timeout < 0 {
		return fail("timeout %v is negative", d.Timeout)
	}
	if d.Timeout != 0 && (d.Timeout.D() < task.MinTimeout || d.Timeout.D() > task.MaxTimeout) {
		return fail("timeout %v outside %v..%v", d.Timeout, task.MinTimeout, task.MaxTimeout)
	}
	if c := d.CatchUpMode(); c != CatchUpOne && c != CatchUpNone {
		return fail("invalid catch_up %q (want %q or %q)", d.CatchUp, CatchUpOne, CatchUpNone)
	}
	switch {
	case d.Cron != "" && d.Every != 0:
		return fail("both cron and every are set; give one")
	case d.Cron == "" && d.Every == 0:
		return fail("neither cron nor every is set; give one")
	case d.Every != 0:
		if d.Every < task.Duration(MinEvery) {
			return fail("every %v is shorter than %v", d.Every, MinEvery)
		}
		if d.Every.D()%time.Second != 0 {
			return fail("every %v is not a whole number of seconds", d.Every)
		}
		if d.Timezone != "" && d.Timezone != "UTC" {
			return fail("timezone %q applies to cron only: an every interval ticks at the multiples of its length since the Unix epoch", d.Timezone)
		}
		return Spec{every: d.Every.D()}, nil
	}
	loc, err := time.LoadLocation(d.Timezone)
	if err != nil || d.Timezone == "Local" {
		return fail("unknown time zone %q (want an IANA name such as \"Europe/Paris\", or \"UTC\")", d.Timezone)
	}
	expr := strings.TrimSpace(d.Cron)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return fail("cron %q: give the time zone in timezone, not in the expression", d.Cron)
	}
	if strings.HasPrefix(expr, "@every") {
		return fail("cron %q: use every = \"DURATION\" for a fixed interval", d.Cron)
	}
	sched, err := cron.ParseStandard(expr)
	if err != nil {
		return fail("bad cron %q: %v", d.Cron, err)
	}
	return Spec{cron: sched, loc: loc}, nil
}

// Spec is a compiled schedule: its ticks.
type Spec struct {
	cron  cron.Schedule
	loc   *time.Location
	every time.Duration
}

// Next returns the first tick strictly after t (zero if there is none
// within five years, which a valid cron expression such as "0 0 30 2 *"
// can mean).
func (s Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		e := int64(s.every)
		n := t.UnixNano()
		k := n / e
		if n < 0 && n%e != 0 {
			k--
		}
		return time.Unix(0, (k+1)*e).UTC()
	}
	n := s.cron.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Location is where the ticks are read (UTC for an every interval).
func (s Spec) Location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// windows are how far back Latest looks for a tick, widening: the first
// that holds one bounds the ticks it walks through.
var windows = []time.Duration{2 * time.Minute, 2 * time.Hour, 2 * 24 * time.Hour, 8 * 24 * time.Hour,
	32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 367 * 24 * time.Hour}

// Due returns the ticks after cursor that are at or before now: the first
// and the last of them, and how many there are, counted up to 2 (2 means
// two or more). With none due, first is the next tick (zero if none).
func (s Spec) Due(cursor, now time.Time) (first, last time.Time, n int) {
	first = s.Next(cursor)
	if first.IsZero() || first.After(now) {
		return first, time.Time{}, 0
	}
	if s.every > 0 {
		last = s.Next(now.Add(-s.every))
		if last.After(now) { // now on no multiple: the one before
			last = last.Add(-s.every)
		}
	} else {
		last = first
		for _, w := range windows {
			from := now.Add(-w)
			if !from.After(first) {
				break // the walk from first is bounded by this window
			}
			if t := s.Next(from); !t.IsZero() && !t.After(now) {
				last = t
				break
			}
		}
		for {
			t := s.Next(last)
			if t.IsZero() || t.After(now) {
				break
			}
			last = t
		}
	}
	if last.Equal(first) {
		return first, last, 1
	}
	return first, last, 2
}

// Schedule is a schedule object: the definition, and the state schedulers
// keep in it.
type Schedule struct {
	Definition
	// Paused: no tick is submitted; Resume moves the cursor to the time of
	// the resume, so the ticks missed meanwhile are not caught up.
	Paused bool `json:"paused"`
	// Version grows by one at every write, so every write changes the
	// bytes (invariant 2).
	Version int64 `json:"version"`
	// Cursor: every tick at or before it is handled (submitted, or skipped
	// by catch_up). A new schedule's cursor is the S3 time it was added
	// at: its first tick is the next one after that.
	Cursor time.Time `json:"cursor"`
	// LastTick and LastTask are the last tick submitted and its task.
	LastTick time.Time `json:"last_tick,omitzero"`
	LastTask string    `json:"last_task,omitempty"`
	// Skipped counts the ticks a catch_up skipped without a task (an
	// interval's exactly; a cron's at least one per catch-up).
	Skipped int64 `json:"skipped,omitempty"`
	// CreatedAt, UpdatedAt: S3 times; UpdatedBy: who last changed the
	// definition or the paused flag (a scheduler's writes leave it).
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

// ErrMalformed: a schedule object that cannot be decoded, or whose
// definition is invalid.
var ErrMalformed = errors.New("malformed schedule object")

// Decode parses a schedule object's body and validates its definition.
func Decode(body []byte) (Schedule, Spec, error) {
	var s Schedule
	if err := json.Unmarshal(body, &s); err != nil {
		return Schedule{}, Spec{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	spec, err := s.Compile()
	if err != nil {
		return Schedule{}, Spec{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return s, spec, nil
}

// Encode returns the object's bytes.
func (s Schedule) Encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("schedule: encode: %v", err)) // only plain fields and valid JSON input
	}
	return append(b, '\n')
}

// IdempotencyKey is the key the task of tick is submitted with: the
// producer's idempotency record makes it one task per tick, whoever
// submits it and however often.
func IdempotencyKey(name string, tick time.Time) string {
	return "schedule:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// ParseIdempotencyKey returns the schedule and tick of a key made by
// IdempotencyKey; ok is false for any other key.
func ParseIdempotencyKey(key string) (name string, tick time.Time, ok bool) {
	rest, found := strings.CutPrefix(key, "schedule:")
	if !found {
		return "", time.Time{}, false
	}
	name, at, found := strings.Cut(rest, ":")
	if !found || CheckName(name) != nil {
		return "", time.Time{}, false
	}
	tick, err := time.Parse(time.RFC3339, at)
	return name, tick, err == nil
}

// Step is what a scheduler does for a schedule at one moment.
type Step struct {
	// Submit: submit the task of Tick.
	Submit bool
	Tick   time.Time
	// Cursor is the cursor to record; zero when nothing is due.
	Cursor time.Time
	// Skipped counts the ticks skipped (catch_up).
	Skipped int64
	// Next is the next tick after the cursor (recorded or not): when to
	// look again.
	Next time.Time
}

// Plan decides what is due at S3 time now (a time certainly reached: the
// earliest bound of the S3 clock's interval). One tick due: its task. Two
// or more (no scheduler ran at the earlier ones): with catch_up "one",
// the latest's task; with "none", no task, and the cursor moves to the
// latest. Paused: nothing.
func (s Schedule) Plan(spec Spec, now time.Time) Step {
	first, last, n := spec.Due(s.Cursor, now)
	if s.Paused || n == 0 {
		return Step{Next: first}
	}
	st := Step{Cursor: last, Next: spec.Next(last)}
	switch {
	case n == 1:
		st.Submit, st.Tick = true, first
	case s.CatchUpMode() == CatchUpOne:
		st.Submit, st.Tick = true, last
		st.Skipped = skipped(spec, first, last) - 1
	default:
		st.Skipped = skipped(spec, first, last)
	}
	return st
}

// skipped counts the ticks from first to last: exactly for an interval, 2
// (at least) for a cron expression.
func skipped(spec Spec, first, last time.Time) int64 {
	if spec.every > 0 {
		return int64(last.Sub(first)/spec.every) + 1
	}
	return 2
}
