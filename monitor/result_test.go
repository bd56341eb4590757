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

// Result objects no task references are deleted once they are OrphanAge
// old: a stale attempt's, and one whose task is gone; the object a task
// references, and one whose claim still runs (its commit may land), stay.
func TestOrphanedResultsAreCollected(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	id, referenced := succeed(t, st, p, *srv, `"kept"`, true)
	put := func(key string) {
		if _, err := st.Put(ctx, key, []byte(`"x"`), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stale := task.ResultKey(0, id, "claim-0")
	put(stale)
	runID, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 24 * time.Hour})
	v, _ := taskio.LoadID(ctx, st, runID, []int{1})
	if err := v.Task.ClaimBy("w", "claim-r", v.Task.AvailableAt.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	inFlight := task.ResultKey(0, runID, "claim-r")
	put(inFlight)
	gone := task.ResultKey(0, "01M8DDBJ86RKCMK08WDWGSA796", "claim-g")
	put(gone)

	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, OrphanCheck: 10 * time.Minute, OrphanAge: time.Hour, RepairAfter: 100 * time.Hour, Retention: 100 * time.Hour, Clock: clk,
		Local: clock.LocalFunc(func() time.Time { return *srv })})
	m.Tick(ctx)
	*srv = srv.Add(30 * time.Minute)
	m.Tick(ctx)
	if n := m.Stats().OrphansDeleted; n != 0 {
		t.Fatalf("deleted %d orphans younger than OrphanAge", n)
	}
	*srv = srv.Add(time.Hour)
	m.Tick(ctx)
	late := task.ResultKey(0, id, "claim-late") // written after the check: examined at the next
	put(late)
	for key, want := range map[string]bool{referenced: true, inFlight: true, stale: false, gone: false, late: true} {
		_, err := st.Get(ctx, key)
		if got := err == nil; got != want {
			t.Errorf("result object %s exists %v, want %v (%v)", key, got, want, err)
		}
	}
	*srv = srv.Add(2 * time.Hour)
	m.Tick(ctx)
	if _, err := st.Get(ctx, late); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("a later orphan: %v, want deleted", err)
	}
	if n := m.Stats().OrphansDeleted; n != 3 {
		t.Fatalf("orphans deleted %d, want 3", n)
	}
}

// An orphaned result object whose task could not be read at one check
// (a 503), or whose task still ran under the claim that wrote it, is
// examined again at the next check, not passed for good by the checks'
// watermark: once its task is readable and no longer runs under that
// claim, it is deleted.
func TestAnOrphanLeftUndecidedIsExaminedAgain(t *testing.T) {
	ctx := context.Background()
	mst, srv, clk := fakeTime()
	st := s3store.NewFaults(mst)
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	id, _ := succeed(t, st, p, *srv, `"kept"`, true)
	unread := task.ResultKey(0, id, "claim-0") // a stale attempt's
	if _, err := st.Put(ctx, unread, []byte(`"x"`), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	runID, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 2 * time.Hour})
	v, _ := taskio.LoadID(ctx, st, runID, []int{1})
	if err := v.Task.ClaimBy("w", "claim-r", v.Task.AvailableAt.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	running := task.ResultKey(0, runID, "claim-r") // its worker died before the commit
	if _, err := st.Put(ctx, running, []byte(`"y"`), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, OrphanCheck: 10 * time.Minute, OrphanAge: time.Hour, RepairAfter: 100 * time.Hour, Retention: 100 * time.Hour, Clock: clk,
		Local: clock.LocalFunc(func() time.Time { return *srv })})
	m.Tick(ctx)
	*srv = srv.Add(90 * time.Minute)
	st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: task.Key(0, id), Err: s3store.ErrInjected503, Times: 1})
	m.Tick(ctx) // the check: one task unreadable, the other still running under its claim
	for _, key := range []string{unread, running} {
		if _, err := st.Get(ctx, key); err != nil {
			t.Fatalf("%s after the first check: %v, want it left", key, err)
		}
	}
	// The running task's lease expires; the monitor re-dispatches it.
	for range 30 {
		*srv = srv.Add(10 * time.Minute)
		m.Tick(ctx)
	}
	for _, key := range []string{unread, running} {
		if _, err := st.Get(ctx, key); !errors.Is(err, s3store.ErrNotFound) {
			t.Errorf("orphaned result %s five hours on: %v, want deleted", key, err)
		}
	}
}
