package monitor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// succeed submits a task and records it succeeded at now, with result
// inline, or stored apart when apart is set (as a worker would write it).
func succeed(t *testing.T, st s3store.Store, p *producer.Producer, now time.Time, result string, apart bool) (id, objKey string) {
	t.Helper()
	ctx := context.Background()
	id, err := p.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := taskio.LoadID(ctx, st, id, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	now = v.Task.AvailableAt.Add(time.Second)
	if err := v.Task.ClaimBy("w", "claim-1", now); err != nil {
		t.Fatal(err)
	}
	if apart {
		objKey = task.ResultKey(0, id, "claim-1")
		if _, err := st.Put(ctx, objKey, []byte(result), s3store.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		err = v.Task.SucceedRef("claim-1", task.RefFor(objKey, []byte(result)), now)
	} else {
		err = v.Task.Succeed("claim-1", json.RawMessage(result), now)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	return id, objKey
}

// With result_ttl, a succeeded task's result is dropped once the task has
// been finished that long (the object of one stored apart deleted), the
// task kept; sweeps that settled past such tasks still see them. Retention
// later deletes the tasks.
func TestResultTTLDropsResultsAndKeepsTheTasks(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	inline, _ := succeed(t, st, p, *srv, `{"n":1}`, false)
	apart, key := succeed(t, st, p, *srv, `"a large result"`, true)
	none, _ := succeed(t, st, p, *srv, ``, false)
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, ResultTTL: time.Hour, Retention: 24 * time.Hour, RepairAfter: 100 * time.Hour, Clock: clk})
	for range 5 {
		*srv = srv.Add(time.Minute)
		m.Tick(ctx)
	}
	if got, err := p.Get(ctx, apart); err != nil || string(got.Result) != `"a large result"` {
		t.Fatalf("result dropped before its TTL: %+v %v", got, err)
	}
	*srv = srv.Add(time.Hour)
	for range 2 {
		m.Tick(ctx)
	}
	if n := m.Stats().ResultsExpired; n != 2 {
		t.Fatalf("results expired %d, want 2 (the task without one has none to drop)", n)
	}
	for _, id := range []string{inline, apart, none} {
		got, err := p.Get(ctx, id)
		if err != nil || got.Status != task.Succeeded || got.HoldsResult() {
			t.Fatalf("task %s after its result TTL: %+v %v", id, got, err)
		}
		if (id == none) != got.ResultExpiredAt.IsZero() {
			t.Fatalf("task %s: result expired at %v", id, got.ResultExpiredAt)
		}
	}
	if _, err := st.Get(ctx, key); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("expired result object: %v, want deleted", err)
	}
	// Expired results are not read again.
	loaded := m.Stats().Loaded
	for range 3 {
		*srv = srv.Add(time.Minute)
		m.Tick(ctx)
	}
	if l := m.Stats().Loaded; l != loaded {
		t.Fatalf("the monitor read %d tasks whose results expired already", l-loaded)
	}
	*srv = srv.Add(25 * time.Hour)
	m.Tick(ctx)
	m.Tick(ctx)
	for _, id := range []string{inline, apart, none} {
		if _, err := p.Get(ctx, id); !errors.Is(err, producer.ErrNotFound) {
			t.Fatalf("task %s outlived retention: %v", id, err)
		}
	}
}

// Retention deletes a task's result object with it, and nothing else
// under results/.
func TestRetentionDeletesTheResultObjectWithItsTask(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	id, key := succeed(t, st, p, *srv, `"stored apart"`, true)
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Retention: time.Hour, RepairAfter: 100 * time.Hour, Clock: clk})
	m.Tick(ctx)
	if _, err := st.Get(ctx, key); err != nil {
		t.Fatalf("result object before retention: %v", err)
	}
	*srv = srv.Add(2 * time.Hour)
	m.Tick(ctx)
	if _, err := p.Get(ctx, id); !errors.Is(err, producer.ErrNotFound) {
		t.Fatalf("task outlived retention: %v", err)
	}
	if _, err := st.Get(ctx, key); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("result object outlived its task: %v", err)
	}
}
