package retention

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// newTask writes a task created at now; finish, if set, ends it (a
// cancel) at now too.
func newTask(t *testing.T, st s3store.Store, now time.Time, key string, finish bool) *task.Task {
	t.Helper()
	id, err := task.NewID(now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := task.New(id, 0, task.Spec{Type: "x", IdempotencyKey: key}, now)
	if err != nil {
		t.Fatal(err)
	}
	if finish {
		if _, err := tk.Cancel(now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := taskio.Create(context.Background(), st, clock.System(), tk); err != nil {
		t.Fatal(err)
	}
	if key != "" {
		rec := task.IdempotencyRecord{ID: tk.ID, Spec: task.SpecHash("x", nil)}
		if _, err := st.Put(context.Background(), task.IdempotencyRecordKey(key), rec.Encode(), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return tk
}

func exists(t *testing.T, st s3store.Store, key string) bool {
	t.Helper()
	_, err := st.Head(context.Background(), key)
	if err != nil && !errors.Is(err, s3store.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func deleter(st s3store.Store, honoured bool) *Deleter {
	return &Deleter{Store: st, Clock: clock.New(st, clock.Config{}), Local: clock.System(), DeleteHonoured: honoured, Log: slog.Default()}
}

// Expire deletes a task finished long enough ago, with its record, and
// leaves alone a live task, a task finished too recently, and a keyed
// task finished less than task.MinKeyedRetention ago; on both kinds of
// provider.
func TestExpireDeletesOnlyWhatFinishedLongEnoughAgo(t *testing.T) {
	for _, honoured := range []bool{true, false} {
		st := mem.New()
		d := deleter(st, honoured)
		ctx := context.Background()
		past := time.Now().Add(-2 * time.Hour)
		now := clock.Interval{Earliest: time.Now(), Latest: time.Now()}
		old := newTask(t, st, past, "", true)
		oldKeyed := newTask(t, st, past, "k-old", true)
		live := newTask(t, st, past, "", false)
		young := newTask(t, st, time.Now().Add(-time.Minute), "", true)
		youngKeyed := newTask(t, st, time.Now().Add(-5*time.Minute), "k-young", true)

		for tk, want := range map[*task.Task]Result{old: Deleted, oldKeyed: Deleted, live: Kept, young: Kept} {
			out, err := d.Expire(ctx, tk.Key(), time.Hour, now)
			if err != nil || out.Result != want {
				t.Errorf("honoured %v: Expire of %s: %v %v, want %v", honoured, tk.Status, out.Result, err, want)
			}
			if exists(t, st, tk.Key()) != (want != Deleted) {
				t.Errorf("honoured %v: task %s (%s) exists = %v after %v", honoured, tk.ID, tk.Status, !(want != Deleted), out.Result)
			}
		}
		if exists(t, st, task.IdempotencyRecordKey("k-old")) {
			t.Errorf("honoured %v: the deleted task's idempotency record is left", honoured)
		}
		// With no hold, a keyed task still waits task.MinKeyedRetention.
		if out, err := d.Expire(ctx, youngKeyed.Key(), 0, now); err != nil || out.Result != Kept || !exists(t, st, task.IdempotencyRecordKey("k-young")) {
			t.Errorf("honoured %v: a keyed task finished 5 minutes ago: %v %v", honoured, out.Result, err)
		}
		if out, err := d.Expire(ctx, old.Key(), 0, now); err != nil || out.Result != Gone {
			t.Errorf("honoured %v: Expire of a deleted task: %v %v", honoured, out.Result, err)
		}
		if _, err := st.Put(ctx, "tasks/000/01M8D1PPTCXGT22RP9WEQ1B19A.json", []byte("{garbage"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if out, err := d.Expire(ctx, "tasks/000/01M8D1PPTCXGT22RP9WEQ1B19A.json", 0, now); err != nil || out.Result != Corrupt || out.Err == nil {
			t.Errorf("honoured %v: Expire of a corrupt object: %v %v", honoured, out.Result, err)
		}
	}
}

// requeueFirst is a store that requeues the task at key just before the
// first conditional write or DELETE of it: the requeue lands between
// Expire's read and its deletion.
type requeueFirst struct {
	s3store.Store
	t    *testing.T
	key  string
	once sync.Once
}

func (s *requeueFirst) requeue(ctx context.Context, key string) {
	if key != s.key {
		return
	}
	s.once.Do(func() {
		v, err := taskio.Load(ctx, s.Store, key)
		if err != nil {
			s.t.Error(err)
			return
		}
		if err := v.Task.Requeue(time.Now()); err != nil {
			s.t.Error(err)
			return
		}
		if _, err := taskio.Update(ctx, s.Store, clock.System(), v.Task, v.ETag); err != nil {
			s.t.Error(err)
		}
	})
}

func (s *requeueFirst) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if opts.IfMatch != "" {
		s.requeue(ctx, key)
	}
	return s.Store.Put(ctx, key, body, opts)
}

func (s *requeueFirst) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	s.requeue(ctx, key)
	return s.Store.Delete(ctx, key, opts)
}

// A task requeued between Expire's read and its deletion lives on: the
// conditional DELETE fails where it is honoured, the tombstone's CAS
// elsewhere.
func TestExpireNeverDeletesATaskRequeuedMeanwhile(t *testing.T) {
	for _, honoured := range []bool{true, false} {
		inner := mem.New()
		old := newTask(t, inner, time.Now().Add(-2*time.Hour), "", true)
		st := &requeueFirst{Store: inner, t: t, key: old.Key()}
		d := deleter(st, honoured)
		now := clock.Interval{Earliest: time.Now(), Latest: time.Now()}
		out, err := d.Expire(context.Background(), old.Key(), time.Hour, now)
		if err != nil || out.Result != Changed {
			t.Errorf("honoured %v: %v %v, want Changed", honoured, out.Result, err)
		}
		v, err := taskio.Load(context.Background(), inner, old.Key())
		if err != nil || v.Task.Status != task.Pending || v.Task.Retired {
			t.Errorf("honoured %v: the requeued task after Expire: %+v %v", honoured, v.Task, err)
		}
	}
}

// Deleter.Only is asked about the task Expire reads: a finished task it
// refuses is Kept, untouched (not tombstoned either), one it accepts goes.
func TestExpireDeletesOnlyWhatOnlyAccepts(t *testing.T) {
	for _, honoured := range []bool{true, false} {
		st := mem.New()
		d := deleter(st, honoured)
		d.Only = func(tk *task.Task) bool { return tk.Status == task.Succeeded }
		ctx := context.Background()
		canceled := newTask(t, st, time.Now().Add(-2*time.Hour), "", true)
		now := clock.Interval{Earliest: time.Now(), Latest: time.Now()}
		out, err := d.Expire(ctx, canceled.Key(), time.Hour, now)
		if err != nil || out.Result != Kept {
			t.Errorf("honoured %v: Expire of a canceled task Only refuses: %v %v, want Kept", honoured, out.Result, err)
		}
		v, err := taskio.Load(ctx, st, canceled.Key())
		if err != nil || v.Task.Status != task.Canceled || v.Task.Retired {
			t.Errorf("honoured %v: the refused task after Expire: %+v %v", honoured, v.Task, err)
		}
		d.Only = func(tk *task.Task) bool { return tk.Status == task.Canceled }
		if out, err := d.Expire(ctx, canceled.Key(), time.Hour, now); err != nil || out.Result != Deleted {
			t.Errorf("honoured %v: Expire of a canceled task Only accepts: %v %v, want Deleted", honoured, out.Result, err)
		}
	}
}

// A key's record replaced after its window (it names a newer task) is left
// alone when the older task is deleted; a record whose window is still
// open is kept, and its task waits; an expired window's record goes with
// its task. On both kinds of provider.
func TestExpireRespectsUniquenessWindows(t *testing.T) {
	for _, honoured := range []bool{true, false} {
		ctx := context.Background()
		st := mem.New()
		d := deleter(st, honoured)
		past := time.Now().Add(-2 * time.Hour)
		now := clock.Interval{Earliest: time.Now(), Latest: time.Now()}

		// Replaced: the record names a newer task.
		older := newTask(t, st, past, "k", true)
		newer := newTask(t, st, past.Add(time.Minute), "k", false)
		if out, err := d.Expire(ctx, older.Key(), time.Hour, now); err != nil || out.Result != Deleted {
			t.Fatalf("honoured=%v: expire the older task: %+v %v", honoured, out, err)
		}
		if !exists(t, st, task.IdempotencyRecordKey("k")) || !exists(t, st, newer.Key()) {
			t.Fatalf("honoured=%v: the record of the newer task was deleted with the older one", honoured)
		}

		// A window still open: the record stays, the task waits.
		open := newTask(t, st, past, "w", true)
		rec := task.IdempotencyRecord{ID: open.ID, Spec: task.SpecHash("x", nil), UniqueFor: task.Duration(24 * time.Hour)}
		st.Put(ctx, task.IdempotencyRecordKey("w"), rec.Encode(), s3store.PutOptions{})
		if out, err := d.Expire(ctx, open.Key(), time.Hour, now); err != nil || out.Result != Waiting {
			t.Fatalf("honoured=%v: expire a task whose window is open: %+v %v, want Waiting", honoured, out, err)
		}
		if !exists(t, st, task.IdempotencyRecordKey("w")) {
			t.Fatalf("honoured=%v: a record was deleted within its window", honoured)
		}

		// A window that passed: both go.
		rec.UniqueFor = task.Duration(time.Second)
		st.SetNow(func() time.Time { return past })
		st.Put(ctx, task.IdempotencyRecordKey("w"), rec.Encode(), s3store.PutOptions{})
		st.SetNow(time.Now)
		if out, err := d.Expire(ctx, open.Key(), time.Hour, now); err != nil || out.Result != Deleted {
			t.Fatalf("honoured=%v: expire a task whose window passed: %+v %v", honoured, out, err)
		}
		if exists(t, st, task.IdempotencyRecordKey("w")) || exists(t, st, open.Key()) {
			t.Fatalf("honoured=%v: the record or task of a passed window was kept", honoured)
		}
	}
}

// A task with a uniqueness window is kept at least its window and a
// minute after it finished.
func TestATaskIsKeptThroughItsWindow(t *testing.T) {
	tk := &task.Task{IdempotencyKey: "k", UniqueFor: task.Duration(time.Hour)}
	if got := tk.MinRetention(); got != time.Hour+time.Minute {
		t.Fatalf("MinRetention = %v", got)
	}
	tk.UniqueFor = task.Duration(time.Second)
	if got := tk.MinRetention(); got != task.MinKeyedRetention {
		t.Fatalf("MinRetention of a short window = %v", got)
	}
}

// A finished task whose end is still being passed on (the ended marker of
// its version is there: its ender failed or died before its dependents
// learned it) is Kept, untouched: a tombstone would move it past the
// marker, which the repair would then drop, and a DELETE would make the
// repair cancel the dependents of a success. Once the marker is gone it is
// deleted. On both kinds of provider.
func TestExpireKeepsATaskWhoseEndIsBeingPassedOn(t *testing.T) {
	for _, honoured := range []bool{true, false} {
		ctx := context.Background()
		st := mem.New()
		d := deleter(st, honoured)
		now := clock.Interval{Earliest: time.Now(), Latest: time.Now()}
		for _, slot := range []bool{false, true} {
			id, err := task.NewID(time.Now().Add(-2*time.Hour), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			spec := task.Spec{Type: "x"}
			if slot {
				spec.Slot = "s"
			}
			tk, err := task.New(id, 0, spec, time.Now().Add(-2*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			tk.Dependents = !slot
			if _, err := tk.Cancel(time.Now().Add(-2 * time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, err := taskio.Create(ctx, st, clock.System(), tk); err != nil {
				t.Fatal(err)
			}
			v, err := taskio.Load(ctx, st, tk.Key())
			if err != nil {
				t.Fatal(err)
			}
			marker := deps.EndedKey(tk.ID, tk.Shard, v.Task.Version)
			if _, err := st.Put(ctx, marker, nil, s3store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			out, err := d.Expire(ctx, tk.Key(), time.Hour, now)
			if err != nil || out.Result != Kept {
				t.Errorf("honoured %v, slot %v: Expire with the marker there: %v %v, want Kept", honoured, slot, out.Result, err)
			}
			if after, err := taskio.Load(ctx, st, tk.Key()); err != nil || after.ETag != v.ETag {
				t.Errorf("honoured %v, slot %v: the task was written or deleted while its end is passed on: %v", honoured, slot, err)
			}
			if err := st.Delete(ctx, marker, s3store.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if out, err := d.Expire(ctx, tk.Key(), time.Hour, now); err != nil || out.Result != Deleted {
				t.Errorf("honoured %v, slot %v: Expire once the marker is gone: %v %v, want Deleted", honoured, slot, out.Result, err)
			}
		}
	}
}
