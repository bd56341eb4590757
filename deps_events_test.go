package s3queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/task"
)

// recorder keeps every event a bus delivers, for tests that wait for one.
type recorder struct {
	mu      sync.Mutex
	got     []s3queue.Event
	changed chan struct{} // closed and replaced at each event
}

func record(bus *s3queue.Bus) *recorder {
	r := &recorder{changed: make(chan struct{})}
	bus.Subscribe("test", 4096, func(e s3queue.Event) {
		r.mu.Lock()
		r.got = append(r.got, e)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	})
	return r
}

// wait returns the first event of kind about task id (any, if id is
// ""), waiting for it until the test's deadline.
func (r *recorder) wait(t *testing.T, kind s3queue.EventKind, id string) s3queue.Event {
	t.Helper()
	timeout := time.After(deadline)
	for {
		r.mu.Lock()
		for _, e := range r.got {
			if e.Kind == kind && (id == "" || e.TaskID == id) {
				r.mu.Unlock()
				return e
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no %s event for task %s within %v", kind, id, deadline)
		}
	}
}

// kinds returns the kinds of the events about task id so far, in order.
func (r *recorder) kinds(id string) []s3queue.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []s3queue.EventKind
	for _, e := range r.got {
		if e.TaskID == id {
			out = append(out, e.Kind)
		}
	}
	return out
}

// checkTaskEvent checks that e is about task id as docs/events.md says a
// task event is: its type and shard, from source.
func checkTaskEvent(t *testing.T, f *fixture, e s3queue.Event, source, id string) {
	t.Helper()
	tk := f.get(t, id)
	if e.Source != source || e.TaskID != id || e.Type != tk.Type || e.Shard != tk.Shard || e.Time.IsZero() {
		t.Errorf("%s event %+v, want source %s, task %s, type %s, shard %d", e.Kind, e, source, id, tk.Type, tk.Shard)
	}
	if (source == "producer") != (e.Origin == "") {
		t.Errorf("%s event from %s with origin %q", e.Kind, source, e.Origin)
	}
}

// Each dependency event is published, with its fields, where
// docs/events.md says: blocked at submit, unblocked and dependency_failed
// by whoever records a parent's end (a worker, a producer's Cancel), and
// dependency_failed at submit for a child created canceled or dead.
func TestDependencyEvents(t *testing.T) {
	bus := s3queue.NewBus()
	r := record(bus)
	f := setup(t, s3queue.Config{Events: bus})
	ctx := context.Background()

	ok := f.submit(t, "ok", nil, s3queue.SubmitOptions{})
	boom := f.submit(t, "boom", nil, s3queue.SubmitOptions{MaxAttempts: 1})
	released := f.submit(t, "child", nil, s3queue.SubmitOptions{DependsOn: []string{ok}})
	failed := f.submit(t, "child", nil, s3queue.SubmitOptions{DependsOn: []string{ok, boom}, OnDepFailure: task.DepFail})
	for _, id := range []string{released, failed} {
		checkTaskEvent(t, f, r.wait(t, s3queue.EventBlocked, id), "producer", id)
	}

	// A producer's Cancel of a parent passes its end on.
	held := f.submit(t, "held", nil, s3queue.SubmitOptions{})
	waiting := f.submit(t, "child", nil, s3queue.SubmitOptions{DependsOn: []string{held}})
	if _, err := f.q.Cancel(ctx, held); err != nil {
		t.Fatal(err)
	}
	e := r.wait(t, s3queue.EventDependencyFailed, waiting)
	checkTaskEvent(t, f, e, "producer", waiting)
	if got := f.get(t, waiting).Status; got != s3queue.Canceled {
		t.Errorf("dependent of a canceled parent is %s", got)
	}

	// A child whose parent already ended canceled is created canceled:
	// submitted, then dependency_failed; never blocked.
	late := f.submit(t, "child", nil, s3queue.SubmitOptions{DependsOn: []string{held}})
	checkTaskEvent(t, f, r.wait(t, s3queue.EventDependencyFailed, late), "producer", late)
	if got := r.kinds(late); len(got) != 2 || got[0] != s3queue.EventSubmitted || got[1] != s3queue.EventDependencyFailed {
		t.Errorf("events of a child created canceled: %v, want [submitted dependency_failed]", got)
	}

	// The worker that records a parent's end passes it on.
	stop := f.runWorker(t, map[string]s3queue.Handler{
		"ok": func(context.Context, *s3queue.Task) (json.RawMessage, error) { return nil, nil },
		"boom": func(context.Context, *s3queue.Task) (json.RawMessage, error) {
			return nil, s3queue.Permanent(errors.New("no"))
		},
	})
	checkTaskEvent(t, f, r.wait(t, s3queue.EventUnblocked, released), "worker", released)
	checkTaskEvent(t, f, r.wait(t, s3queue.EventDependencyFailed, failed), "worker", failed)
	stop()
	if got := f.get(t, failed); got.Status != s3queue.Dead {
		t.Errorf("dependent (on failure: fail) of a dead parent is %s", got.Status)
	}
	for _, id := range []string{released, failed, waiting, late} {
		if n := count(r.kinds(id), s3queue.EventUnblocked) + count(r.kinds(id), s3queue.EventDependencyFailed); n != 1 {
			t.Errorf("task %s: events %v, want one unblocked or dependency_failed", id, r.kinds(id))
		}
	}
}

func count(kinds []s3queue.EventKind, k s3queue.EventKind) int {
	n := 0
	for _, x := range kinds {
		if x == k {
			n++
		}
	}
	return n
}

// Each slot event is published, with its fields, where docs/events.md
// says: slot_acquired, slot_queued, slot_replaced and slot_refused at
// submit; slot_granted and slot_freed by whoever records the holder's end
// (a producer's Cancel, a worker).
func TestSlotEvents(t *testing.T) {
	bus := s3queue.NewBus()
	r := record(bus)
	f := setup(t, s3queue.Config{Events: bus})
	ctx := context.Background()
	slot := func(admission s3queue.Admission) s3queue.SubmitOptions {
		return s3queue.SubmitOptions{Slot: "customer-42", Admission: admission}
	}

	holder := f.submit(t, "sync", nil, slot(""))
	checkTaskEvent(t, f, r.wait(t, s3queue.EventSlotAcquired, holder), "producer", holder)
	queued := f.submit(t, "sync", nil, slot("queue"))
	checkTaskEvent(t, f, r.wait(t, s3queue.EventSlotQueued, queued), "producer", queued)

	// replace: the waiting task is replaced and canceled; the holder,
	// pending, is canceled at once, and its slot granted to the new task.
	latest := f.submit(t, "sync", nil, slot("replace"))
	checkTaskEvent(t, f, r.wait(t, s3queue.EventSlotReplaced, queued), "producer", queued)
	if got := f.get(t, queued).Status; got != s3queue.Canceled {
		t.Errorf("the replaced task is %s, want canceled", got)
	}
	checkTaskEvent(t, f, r.wait(t, s3queue.EventSlotGranted, latest), "producer", latest)
	if got := r.kinds(latest); len(got) < 3 || got[1] != s3queue.EventSlotQueued {
		t.Errorf("events of the replacing task: %v, want submitted, slot_queued, then slot_granted", got)
	}

	// drop-if-running on the busy slot: refused, nothing created.
	_, err := f.q.Submit(ctx, "sync", nil, slot("drop-if-running"))
	if !errors.Is(err, s3queue.ErrSlotBusy) {
		t.Fatalf("drop-if-running on a busy slot: %v", err)
	}
	refused := r.wait(t, s3queue.EventSlotRefused, "")
	if refused.TaskID == "" || refused.Type != "sync" || refused.Shard != -1 || refused.Source != "producer" {
		t.Errorf("slot_refused event %+v, want the id it would have had, type sync, no shard", refused)
	} else if _, err := f.q.Lookup(ctx, refused.TaskID); !errors.Is(err, s3queue.ErrNotFound) {
		t.Errorf("the refused submit's id names a task: %v", err)
	}

	// A worker records the holder's success: the slot passes to the next,
	// then, with none waiting, is free.
	next := f.submit(t, "sync", nil, slot("queue"))
	r.wait(t, s3queue.EventSlotQueued, next)
	stop := f.runWorker(t, map[string]s3queue.Handler{
		"sync": func(context.Context, *s3queue.Task) (json.RawMessage, error) { return nil, nil },
	})
	checkTaskEvent(t, f, r.wait(t, s3queue.EventSlotGranted, next), "worker", next)
	checkTaskEvent(t, f, r.wait(t, s3queue.EventSlotFreed, next), "worker", next)
	stop()
	for _, id := range []string{holder, queued, latest} {
		if n := count(r.kinds(id), s3queue.EventSlotFreed); n != 0 {
			t.Errorf("task %s, whose end left a task waiting, has events %v", id, r.kinds(id))
		}
	}

	// A producer's Cancel of a holder with none waiting frees the slot.
	alone := f.submit(t, "sync", nil, s3queue.SubmitOptions{Slot: "nightly"})
	if _, err := f.q.Cancel(ctx, alone); err != nil {
		t.Fatal(err)
	}
	checkTaskEvent(t, f, r.wait(t, s3queue.EventSlotFreed, alone), "producer", alone)
	if n := count(r.kinds(alone), s3queue.EventSlotFreed); n != 1 {
		t.Errorf("events of the canceled holder: %v, want one slot_freed", r.kinds(alone))
	}
}
