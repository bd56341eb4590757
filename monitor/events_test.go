package monitor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// The monitor publishes what it does to tasks: a re-dispatch, a task dead
// with its lease, a repair, a deletion by retention, a corrupt object.
func TestMonitorPublishesWhatItDoes(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	claim := func(id string) {
		t.Helper()
		v, err := taskio.LoadID(ctx, st, id, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Task.ClaimBy("w", "claim-"+id, srv.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second, MaxAttempts: 2})
	last, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second, MaxAttempts: 1})
	stuck, _ := p.Submit(ctx, "t", nil, producer.Options{})
	done, _ := p.Submit(ctx, "t", nil, producer.Options{})
	*srv = srv.Add(time.Second)
	claim(again)
	claim(last)
	if _, err := p.Cancel(ctx, done); err != nil {
		t.Fatal(err)
	}
	bad, _ := task.NewID(*srv, strings.NewReader(strings.Repeat("b", 16)))
	st.Put(ctx, task.Key(0, bad), []byte("{}\n\n"), s3store.PutOptions{}) // pending by size, not a task

	bus := events.NewBus()
	got := map[string]events.Event{}
	bus.Subscribe("test", 100, func(e events.Event) { got[string(e.Kind)+" "+e.TaskID] = e })
	m, err := monitor.New(ctx, st, monitor.Config{ID: "mon-1", Shards: 1, Retention: time.Hour, RepairAfter: time.Minute,
		Clock: clk, Events: bus, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.Tick(ctx)
	*srv = srv.Add(2 * time.Hour)
	m.Tick(ctx)
	bus.Close()

	for _, want := range []struct {
		kind    events.Kind
		id      string
		attempt int
		err     string
	}{
		{events.Redispatched, again, 1, "lease expired"},
		{events.Dead, last, 1, "lease expired"},
		{events.Repaired, stuck, 0, ""},
		{events.Deleted, done, 0, ""},
		{events.Corrupt, bad, 0, "corrupt"},
	} {
		e, ok := got[string(want.kind)+" "+want.id]
		if !ok {
			t.Errorf("no %s event for %s; got %v", want.kind, want.id, keys(got))
			continue
		}
		if e.Source != events.SourceMonitor || e.Origin != "mon-1" || e.Shard != 0 || e.Attempt != want.attempt || e.Time.IsZero() ||
			want.err != "" && (e.Err == nil || !strings.Contains(e.Err.Error(), want.err)) {
			t.Errorf("%s event %+v", want.kind, e)
		}
	}
	if e := got[string(events.Corrupt)+" "+bad]; e.Key != task.Key(0, bad) {
		t.Errorf("corrupt event names key %q, want %q", e.Key, task.Key(0, bad))
	}
}

func keys(m map[string]events.Event) string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	return fmt.Sprint(s)
}
