package s3queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

func TestSchedulesFromGo(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	q, err := s3queue.OpenStore(ctx, st, s3queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddSchedule(ctx, s3queue.ScheduleDefinition{Name: "bad", Cron: "99 * * * *", Type: "t"}); err == nil ||
		!strings.Contains(err.Error(), `schedule "bad": bad cron`) {
		t.Errorf("bad cron: %v", err)
	}
	d := s3queue.ScheduleDefinition{Name: "report", Cron: "0 9 * * *", Timezone: "Europe/Paris", Type: "report", Input: json.RawMessage(`{"a":1}`)}
	s, err := q.AddSchedule(ctx, d)
	if err != nil || s.Cursor.IsZero() || s.Version != 1 {
		t.Fatalf("add: %+v %v", s, err)
	}
	if next := s3queue.NextTick(s, s.Cursor); next.Hour() != 9 || next.Location().String() != "Europe/Paris" {
		t.Errorf("next tick %v, want 09:00 in Europe/Paris", next)
	}
	if s, err = q.PauseSchedule(ctx, "report"); err != nil || !s.Paused {
		t.Errorf("pause: %+v %v", s, err)
	}
	if s, err = q.ResumeSchedule(ctx, "report"); err != nil || s.Paused {
		t.Errorf("resume: %+v %v", s, err)
	}
	// Applying the same definition writes nothing; a changed one keeps
	// the state.
	wrote, err := q.ApplySchedules(ctx, []s3queue.ScheduleDefinition{d, {Name: "beat", Every: task.Duration(time.Minute), Type: "t"}})
	if err != nil || !slices.Equal(wrote, []string{"beat"}) {
		t.Errorf("apply: wrote %v, %v", wrote, err)
	}
	d.Cron = "0 10 * * *"
	if wrote, err = q.ApplySchedules(ctx, []s3queue.ScheduleDefinition{d}); err != nil || !slices.Equal(wrote, []string{"report"}) {
		t.Errorf("apply a change: wrote %v, %v", wrote, err)
	}
	if got, err := q.GetSchedule(ctx, "report"); err != nil || got.Cron != "0 10 * * *" || !got.Cursor.Equal(s.Cursor) {
		t.Errorf("after the change: %+v %v (cursor was %v)", got, err, s.Cursor)
	}
	all, err := q.Schedules(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "beat" || all[1].Name != "report" {
		t.Errorf("schedules: %+v %v", all, err)
	}
	if err := q.RemoveSchedule(ctx, "beat"); err != nil {
		t.Fatal(err)
	}
	if err := q.RemoveSchedule(ctx, "beat"); !errors.Is(err, s3queue.ErrNoSchedule) {
		t.Errorf("second remove: %v", err)
	}
	// A tick submitted twice is one task; another input for the same key
	// (the definition changed between the two) is still that task.
	sub := schedule.Submission{Schedule: "report", Tick: time.Unix(3600, 0), Type: "report", Input: json.RawMessage(`{"a":1}`),
		IdempotencyKey: schedule.IdempotencyKey("report", time.Unix(3600, 0))}
	id1, err := schedule.SubmitVia(q)(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	sub.Input = json.RawMessage(`{"a":2}`)
	if id2, err := schedule.SubmitVia(q)(ctx, sub); err != nil || id2 != id1 {
		t.Errorf("second submit of one tick: %s %v, want %s", id2, err, id1)
	}
}

// NewMonitor writes Config.Schedules; an invalid one is an error.
func TestNewMonitorAppliesTheConfiguredSchedules(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	q, err := s3queue.OpenStore(ctx, st, s3queue.Config{Schedules: []s3queue.ScheduleDefinition{{Name: "beat", Every: task.Duration(time.Minute), Type: "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.NewMonitor(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := q.GetSchedule(ctx, "beat"); err != nil || s.Every.D() != time.Minute {
		t.Errorf("beat: %+v %v", s, err)
	}
	q2, _ := s3queue.OpenStore(ctx, st, s3queue.Config{Schedules: []s3queue.ScheduleDefinition{{Name: "beat", Type: "t"}}})
	if _, err := q2.NewMonitor(ctx); err == nil || !strings.Contains(err.Error(), `schedule "beat": neither cron nor every`) {
		t.Errorf("invalid schedule: %v", err)
	}
}
