package monitor

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/s3store"
)

// scheduler submits the ticks of the queue's schedules (schedules/,
// internal/schedule) and publishes a scheduled event for each. Run's
// goroutine alone steps it, between the sweeps' ticks.
type scheduler struct {
	sched  *schedule.Scheduler
	local  clock.Local
	log    *slog.Logger
	events *events.Bus
	origin string
}

func newScheduler(st s3store.Store, c *clock.Authoritative, local clock.Local, log *slog.Logger, cfg Config) *scheduler {
	s := &scheduler{local: local, log: log, events: cfg.Events, origin: cfg.ID}
	s.sched = &schedule.Scheduler{Store: st, Clock: c, Local: local, Submit: cfg.Submit.internal(), Refresh: cfg.ScheduleRefresh,
		Log: log.WithGroup("scheduler"), Fired: s.fired}
	return s
}

// step runs the scheduler's due work and returns how long until it is due
// again.
func (s *scheduler) step(ctx context.Context) (time.Duration, error) {
	wait, err := s.sched.Step(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("scheduler", "err", err)
	}
	return wait, err
}

// fired publishes a scheduled event.
func (s *scheduler) fired(name string, tick time.Time, id string, skipped int64) {
	if s.events == nil {
		return
	}
	s.events.Publish(events.Event{Time: s.local.Now(), Source: events.SourceMonitor, Origin: s.origin,
		Kind: events.Scheduled, TaskID: id, Shard: -1, Key: schedule.Key(name)})
}

// Submission is the task of one schedule tick, for a SubmitFunc.
type Submission struct {
	Schedule string
	Tick     time.Time
	Type     string
	// Input is JSON, or nil.
	Input       json.RawMessage
	MaxAttempts int
	Timeout     time.Duration
	// IdempotencyKey is the tick's key (the schedule's name and the
	// tick): the submit must use it, so that a tick submitted twice is
	// one task.
	IdempotencyKey string
}

// SubmitFunc submits a tick's task and returns its id: the task the
// idempotency key names if it exists already (Config.Submit).
type SubmitFunc func(ctx context.Context, s Submission) (string, error)

// internal returns f as the scheduler's SubmitFunc; nil stays nil.
func (f SubmitFunc) internal() schedule.SubmitFunc {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, s schedule.Submission) (string, error) { return f(ctx, Submission(s)) }
}
