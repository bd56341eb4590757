package monitor_test

import (
	"context"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
)

// The repair does not announce (nor keep reading) the pending tasks of a
// paused type: they are pending on purpose. Once the type is resumed, the
// next repair announces them like any task that lost its way.
func TestRepairSkipsPausedTypesUntilTheResume(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	local := clock.NewManual(time.Now())
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	if _, err := pause.Change(ctx, st, *srv, "test", "", pause.Pausing("mail")); err != nil {
		t.Fatal(err)
	}
	p.Submit(ctx, "mail", nil, producer.Options{})
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, RepairAfter: time.Minute, Clock: clk, Local: local})
	m.Tick(ctx)
	for range 3 {
		*srv = srv.Add(2 * time.Minute)
		local.Advance(2 * time.Minute)
		m.Tick(ctx)
	}
	if s := m.Stats(); s.Repaired != 0 || s.Loaded > 1 {
		t.Fatalf("while paused the repair announced %d and read %d tasks, want none announced and one read (to learn the type)", s.Repaired, s.Loaded)
	}
	if _, err := pause.Change(ctx, st, *srv, "test", "", pause.Resuming("mail")); err != nil {
		t.Fatal(err)
	}
	*srv = srv.Add(2 * time.Minute)
	local.Advance(2 * time.Minute)
	m.Tick(ctx)
	if s := m.Stats(); s.Repaired != 1 {
		t.Fatalf("after the resume the repair announced %d tasks, want 1", s.Repaired)
	}
}
