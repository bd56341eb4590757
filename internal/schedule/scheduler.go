package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
)

// Submission is the task of one tick, for a SubmitFunc.
type Submission struct {
	Schedule string
	Tick     time.Time
	Type     string
	// Input is JSON, or nil.
	Input       json.RawMessage
	MaxAttempts int
	Timeout     time.Duration
	// IdempotencyKey is IdempotencyKey(Schedule, Tick): the submit must
	// use it, so that a tick submitted twice is one task.
	IdempotencyKey string
}

// SubmitFunc submits a tick's task and returns its id: the task the
// idempotency key names if it exists already.
type SubmitFunc func(ctx context.Context, s Submission) (string, error)

// SubmitVia returns the SubmitFunc of q, an *s3queue.Queue: the one its
// NewMonitor gives its monitors, for a monitor made with monitor.New
// (cmd/s3queue). Package s3queue sets it, so that the Queue's method
// that takes a Submission stays out of its public API.
var SubmitVia func(q any) SubmitFunc

// Fired is told of each tick a scheduler handled: the task submitted (id,
// or "" when catch_up skipped the ticks), and the ticks skipped.
type Fired func(name string, tick time.Time, id string, skipped int64)

// DefaultRefresh is how often a scheduler looks for changed schedules by
// default.
const DefaultRefresh = time.Minute

// ListEvery is how often a scheduler lists schedules/ whatever the change
// marker says: a change whose marker write failed (or made by a binary
// from before the marker) is seen within it.
const ListEvery = time.Hour

// Scheduler submits the tasks of the queue's schedules, one per tick. One
// goroutine owns it: call Step, then wait what it says (on the local
// clock), and again.
//
// Every Refresh it reads the schedules' change marker (ChangedKey, one
// GET), and when it changed, or at least every ListEvery, lists schedules/
// (one LIST) and reads the objects whose ETag changed (one GET each). At each tick due by S3 time it reads the
// schedule again (one GET), submits the tick's task with the tick's
// idempotency key, and records the tick by CAS (one PUT): a lost CAS means
// another scheduler recorded it. A crash between the submit and the CAS
// leaves the tick to the next Step (here or in another scheduler), whose
// submit finds the task the key's record names.
type Scheduler struct {
	Store   s3store.Store
	Clock   *clock.Authoritative
	Local   clock.Local
	Submit  SubmitFunc
	Refresh time.Duration
	Log     *slog.Logger
	// Fired, if set, is told of each tick handled.
	Fired Fired

	known    map[string]*entry
	listNext time.Time // local time of the next look for changes
	listed   bool
	mark     string    // the change marker's ETag at the last listing ("": none)
	listedAt time.Time // local time of the last listing
}

type entry struct {
	s    Schedule
	spec Spec
	etag string
	bad  bool // malformed at etag (logged once)
}

// ErrorRetry is how soon Step is due again after a request failed.
const ErrorRetry = 5 * time.Second

// Step lists schedules/ if Refresh has passed, handles every tick due by
// S3 time, and returns how long (local time) until it is due again: the
// next tick of any schedule, or the next listing, whichever comes first.
func (s *Scheduler) Step(ctx context.Context) (time.Duration, error) {
	if s.known == nil {
		s.known = make(map[string]*entry)
	}
	refresh := s.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	var errs error
	if now := s.Local.Now(); !s.listed || !now.Before(s.listNext) {
		if err := s.refresh(ctx); err != nil {
			errs = err
			s.listNext = now.Add(min(refresh, ErrorRetry))
		} else {
			s.listed, s.listNext = true, now.Add(refresh)
		}
	}
	names := make([]string, 0, len(s.known))
	for n := range s.known {
		names = append(names, n)
	}
	sort.Strings(names)
	wait := max(s.listNext.Sub(s.Local.Now()), 0)
	for _, name := range names {
		e := s.known[name]
		if e.bad || e.s.Paused {
			continue
		}
		now, err := s.now(ctx)
		if err != nil {
			return min(wait, ErrorRetry), errors.Join(errs, err)
		}
		next := e.spec.Next(e.s.Cursor)
		if next.IsZero() {
			continue
		}
		if next.After(now) {
			wait = min(wait, next.Sub(now))
			continue
		}
		if err := s.fire(ctx, name); err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			errs = errors.Join(errs, err)
			wait = min(wait, ErrorRetry)
			continue
		}
		if e, ok := s.known[name]; ok && !e.bad && !e.s.Paused {
			if n := e.spec.Next(e.s.Cursor); !n.IsZero() {
				if now, err := s.now(ctx); err == nil {
					wait = min(wait, max(n.Sub(now), 0))
				}
			}
		}
	}
	return wait, errs
}

// now is the S3 time certainly reached: the earliest bound of the S3
// clock's interval. Ticks are decided by it alone, never by the local
// clock, which only paces the waits (a wall clock minutes off must not
// move a tick).
func (s *Scheduler) now(ctx context.Context) (time.Time, error) {
	iv, err := s.Clock.Now(ctx)
	return iv.Earliest, err
}

// refresh lists schedules/ and reads the objects new or changed since,
// when the change marker moved since the last listing or ListEvery has
// passed: otherwise it costs one GET.
func (s *Scheduler) refresh(ctx context.Context) error {
	mark := ""
	switch obj, err := s.Store.Get(ctx, ChangedKey); {
	case err == nil:
		mark = obj.ETag
	case !errors.Is(err, s3store.ErrNotFound):
		return fmt.Errorf("read the schedules' change marker: %w", err)
	}
	now := s.Local.Now()
	if s.listed && mark == s.mark && now.Sub(s.listedAt) < ListEvery {
		return nil
	}
	listed, err := List(ctx, s.Store)
	if err != nil {
		return err
	}
	s.mark, s.listedAt = mark, now
	seen := make(map[string]bool, len(listed))
	var errs error
	for _, l := range listed {
		seen[l.Name] = true
		if e, ok := s.known[l.Name]; ok && e.etag == l.ETag {
			continue
		}
		if err := s.read(ctx, l.Name); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	for name := range s.known {
		if !seen[name] {
			delete(s.known, name)
		}
	}
	return errs
}

// read reads schedule name into the cache; a removed one leaves it.
func (s *Scheduler) read(ctx context.Context, name string) error {
	sc, spec, etag, err := Read(ctx, s.Store, name)
	switch {
	case errors.Is(err, ErrNotFound):
		delete(s.known, name)
		return nil
	case errors.Is(err, ErrMalformed):
		if e, ok := s.known[name]; !ok || !e.bad || e.etag != etag {
			s.Log.Error("malformed schedule object; skipped until it is rewritten", "schedule", name, "err", err)
		}
		s.known[name] = &entry{etag: etag, bad: true}
		return nil
	case err != nil:
		return err
	}
	s.known[name] = &entry{s: sc, spec: spec, etag: etag}
	return nil
}

// fire handles the ticks of schedule name due now: it reads the schedule
// afresh, submits the task Plan says (if any), and records the cursor by
// CAS.
func (s *Scheduler) fire(ctx context.Context, name string) error {
	if err := s.read(ctx, name); err != nil {
		return err
	}
	e, ok := s.known[name]
	if !ok || e.bad {
		return nil
	}
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	step := e.s.Plan(e.spec, now)
	if step.Cursor.IsZero() {
		return nil // paused, done by another scheduler, or not due
	}
	id := ""
	if step.Submit {
		d := e.s.Definition
		id, err = s.Submit(ctx, Submission{Schedule: name, Tick: step.Tick, Type: d.Type, Input: d.Input,
			MaxAttempts: d.MaxAttempts, Timeout: d.Timeout.D(), IdempotencyKey: IdempotencyKey(name, step.Tick)})
		if err != nil {
			return fmt.Errorf("schedule %q: submit the task of tick %s: %w", name, step.Tick.Format(time.RFC3339), err)
		}
	}
	recorded := false
	// The CAS starts from the read above: no second GET unless it loses.
	read := e.s
	sc, etag, err := changeFrom(ctx, s.Store, name, &read, e.etag, func(sc *Schedule, exists bool) (bool, error) {
		recorded = false // a round lost to another writer recorded nothing
		if !exists || !sc.Cursor.Before(step.Cursor) {
			return false, nil // removed, or recorded by another scheduler
		}
		sc.Cursor = step.Cursor
		sc.Skipped += step.Skipped
		if step.Submit {
			sc.LastTick, sc.LastTask = step.Tick, id
		}
		recorded = true
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("schedule %q: record tick %s: %w", name, step.Cursor.Format(time.RFC3339), err)
	}
	if spec, cerr := sc.Compile(); cerr == nil && etag != "" {
		s.known[name] = &entry{s: sc, spec: spec, etag: etag}
	} else {
		delete(s.known, name) // removed meanwhile; the next listing says
	}
	if recorded {
		s.Log.Info("scheduled", "schedule", name, "tick", step.Tick, "task_id", id, "skipped", step.Skipped)
		if s.Fired != nil {
			tick := step.Cursor
			if step.Submit {
				tick = step.Tick
			}
			s.Fired(name, tick, id, step.Skipped)
		}
	}
	return nil
}

// Known returns the schedules the scheduler knows, by name (for tests and
// state pages).
func (s *Scheduler) Known() []Schedule {
	var out []Schedule
	for _, e := range s.known {
		if !e.bad {
			out = append(out, e.s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
