package s3queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/monitor"
)

// ScheduleDefinition is what a schedule is: its name, when it ticks (Cron
// in Timezone, or Every), and the task each tick submits (Type, Input,
// MaxAttempts, Timeout), and CatchUp, what a tick missed while no
// scheduler ran does (docs/scheduling.md). It is a [[schedule]] table in
// queue.toml.
type ScheduleDefinition = schedule.Definition

// Schedule is a schedule as the bucket holds it (schedules/{name}.json):
// its definition, whether it is paused, and the last tick handled.
type Schedule = schedule.Schedule

// The values of ScheduleDefinition.CatchUp.
const (
	// CatchUpOne (the default): after missed ticks, one task for the
	// latest of them.
	CatchUpOne = schedule.CatchUpOne
	// CatchUpNone: missed ticks are skipped.
	CatchUpNone = schedule.CatchUpNone
)

// ErrNoSchedule: no schedule of that name.
var ErrNoSchedule = schedule.ErrNotFound

// AddSchedule adds schedule d, or changes the definition of the schedule
// of its name (its state stays: the last tick, the paused flag). A new
// schedule's first tick is the first one after now (S3 time). The
// monitors' schedulers learn of it within monitor.schedule_refresh. It
// costs a GET and a PUT (a CAS). An invalid definition is an error naming
// the schedule, and nothing is written.
func (q *Queue) AddSchedule(ctx context.Context, d ScheduleDefinition) (Schedule, error) {
	s, _, err := q.putSchedule(ctx, d)
	return s, err
}

func (q *Queue) putSchedule(ctx context.Context, d ScheduleDefinition) (Schedule, bool, error) {
	if err := d.Validate(); err != nil {
		return Schedule{}, false, fmt.Errorf("s3queue: %w", err)
	}
	iv, err := q.clock.Now(ctx)
	if err != nil {
		return Schedule{}, false, fmt.Errorf("s3queue: add schedule %q: %w", d.Name, err)
	}
	s, wrote, err := schedule.Put(ctx, q.store, d, iv.Latest, operator())
	if err != nil {
		return Schedule{}, false, fmt.Errorf("s3queue: add schedule %q: %w", d.Name, err)
	}
	return s, wrote, nil
}

// ApplySchedules writes each definition whose schedule is missing from
// the bucket or differs from it (AddSchedule), and returns the names of
// those it wrote. Schedules in the bucket that defs does not name are
// left alone. The monitor command applies queue.toml's [[schedule]]
// tables this way when it starts.
func (q *Queue) ApplySchedules(ctx context.Context, defs []ScheduleDefinition) ([]string, error) {
	var names, wrote []string
	for _, d := range defs {
		if slices.Contains(names, d.Name) {
			return nil, fmt.Errorf("s3queue: schedule %q is defined twice", d.Name)
		}
		names = append(names, d.Name)
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("s3queue: %w", err)
		}
	}
	for _, d := range defs {
		_, w, err := q.putSchedule(ctx, d)
		if err != nil {
			return wrote, err
		}
		if w {
			wrote = append(wrote, d.Name)
		}
	}
	return wrote, nil
}

// GetSchedule reads schedule name (one GET); a missing one is an error
// wrapping ErrNoSchedule.
func (q *Queue) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	if err := schedule.CheckName(name); err != nil {
		return Schedule{}, fmt.Errorf("s3queue: %w", err)
	}
	s, _, _, err := schedule.Read(ctx, q.store, name)
	if err != nil {
		return Schedule{}, fmt.Errorf("s3queue: %w", err)
	}
	return s, nil
}

// Schedules reads every schedule, by name: one LIST and a GET each. A
// malformed schedule object is reported through Config.OnSkip (or logged)
// and left out.
func (q *Queue) Schedules(ctx context.Context) ([]Schedule, error) {
	listed, err := schedule.List(ctx, q.store)
	if err != nil {
		return nil, fmt.Errorf("s3queue: %w", err)
	}
	var out []Schedule
	for _, l := range listed {
		s, _, _, err := schedule.Read(ctx, q.store, l.Name)
		switch {
		case errors.Is(err, schedule.ErrNotFound):
		case errors.Is(err, schedule.ErrMalformed):
			if q.cfg.OnSkip != nil {
				q.cfg.OnSkip(schedule.Key(l.Name), err)
			} else {
				q.log.Warn("malformed schedule object skipped", "key", schedule.Key(l.Name), "err", err)
			}
		case err != nil:
			return nil, fmt.Errorf("s3queue: %w", err)
		default:
			out = append(out, s)
		}
	}
	return out, nil
}

// RemoveSchedule deletes schedule name: no tick after it is submitted.
// Tasks it submitted stay. A missing one is an error wrapping
// ErrNoSchedule.
func (q *Queue) RemoveSchedule(ctx context.Context, name string) error {
	if err := schedule.CheckName(name); err != nil {
		return fmt.Errorf("s3queue: %w", err)
	}
	iv, err := q.clock.Now(ctx)
	if err != nil {
		return fmt.Errorf("s3queue: remove schedule %q: %w", name, err)
	}
	if err := schedule.Remove(ctx, q.store, name, iv.Latest, operator()); err != nil {
		return fmt.Errorf("s3queue: %w", err)
	}
	return nil
}

// PauseSchedule pauses schedule name: no task is submitted for its ticks
// until ResumeSchedule (a CAS; schedulers see it at their next tick of
// it).
func (q *Queue) PauseSchedule(ctx context.Context, name string) (Schedule, error) {
	return q.setSchedulePaused(ctx, name, true)
}

// ResumeSchedule resumes schedule name: its next task is the first tick
// after now; the ticks it missed while paused are not submitted.
func (q *Queue) ResumeSchedule(ctx context.Context, name string) (Schedule, error) {
	return q.setSchedulePaused(ctx, name, false)
}

func (q *Queue) setSchedulePaused(ctx context.Context, name string, paused bool) (Schedule, error) {
	if err := schedule.CheckName(name); err != nil {
		return Schedule{}, fmt.Errorf("s3queue: %w", err)
	}
	iv, err := q.clock.Now(ctx)
	if err != nil {
		return Schedule{}, fmt.Errorf("s3queue: schedule %q: %w", name, err)
	}
	s, err := schedule.SetPaused(ctx, q.store, name, paused, iv.Latest, operator())
	if err != nil {
		return Schedule{}, fmt.Errorf("s3queue: %w", err)
	}
	return s, nil
}

// NextTick returns schedule s's next tick after now, in its time zone
// (zero while it is paused, or if it has none).
func NextTick(s Schedule, now time.Time) time.Time {
	spec, err := s.Compile()
	if err != nil || s.Paused {
		return time.Time{}
	}
	after := s.Cursor
	if first, _, n := spec.Due(s.Cursor, now); n > 0 {
		// Due now: the scheduler submits it at once.
		return first.In(spec.Location())
	}
	return spec.Next(after).In(spec.Location())
}

func init() {
	schedule.SubmitVia = func(q any) schedule.SubmitFunc {
		qq := q.(*Queue)
		return func(ctx context.Context, s schedule.Submission) (string, error) {
			return qq.submitTick(ctx, monitor.Submission(s))
		}
	}
}

// submitTick is the schedule.SubmitFunc NewMonitor gives its monitors
// (for a monitor made with monitor.New, schedule.SubmitVia(q) gives it, to
// set as its Config.Submit): the queue's producer's Submit with the tick's idempotency key. The key already taken by another type
// or input (the definition changed between two submits of one tick) is
// the task it names.
func (q *Queue) submitTick(ctx context.Context, s monitor.Submission) (string, error) {
	var input any
	if len(s.Input) > 0 {
		input = json.RawMessage(s.Input)
	}
	opts := q.withDefaults(SubmitOptions{MaxAttempts: s.MaxAttempts, Timeout: s.Timeout, IdempotencyKey: s.IdempotencyKey})
	id, err := q.producer.Submit(ctx, s.Type, input, opts)
	if errors.Is(err, ErrIdempotencyConflict) && id != "" {
		return id, nil
	}
	return id, err
}

// Now returns the S3 server's time as the queue's clock knows it (the
// latest bound of its estimate; a request only if it has none yet).
func (q *Queue) Now(ctx context.Context) (time.Time, error) {
	iv, err := q.clock.Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("s3queue: %w", err)
	}
	return iv.Latest, nil
}
