package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// setupWindow is a producer on a store whose S3 time the test moves.
func setupWindow(t *testing.T) (*producer.Producer, *s3store.Counter, *mem.Store, *time.Time) {
	t.Helper()
	mst, srv, clk := fakeTime(t)
	st := s3store.NewCounter(mst)
	p, err := producer.New(context.Background(), st, producer.Config{Shards: 4, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return p, st, mst, srv
}

func readRecord(t *testing.T, st s3store.Store, key string) task.IdempotencyRecord {
	t.Helper()
	obj, err := st.Get(context.Background(), task.IdempotencyRecordKey(key))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := task.ParseIdempotencyRecord(obj.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func countTasks(t *testing.T, st s3store.Store) int {
	t.Helper()
	n := 0
	for s := range 4 {
		page, err := st.List(context.Background(), shards.TasksPrefix(s), s3store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Objects)
	}
	return n
}

// Within its window a key returns its task; once the window has passed
// (by S3 time) the next submit replaces the record by CAS and creates a
// new task, at a failed PUT, a GET, the record's CAS and the task's PUT.
func TestAKeyIsFreeOnceItsWindowPassed(t *testing.T) {
	ctx := context.Background()
	p, st, mst, srv := setupWindow(t)
	opts := producer.Options{IdempotencyKey: "k", UniqueFor: 5 * time.Second}
	x, err := p.Submit(ctx, "t", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rec := readRecord(t, mst, "k"); rec.ID != x || rec.UniqueFor.D() != 5*time.Second || rec.Window != 0 {
		t.Fatalf("record %+v, want task %s with a 5s window", rec, x)
	}
	*srv = srv.Add(4 * time.Second)
	if id, err := p.Submit(ctx, "t", nil, opts); err != nil || id != x {
		t.Fatalf("submit within the window = %s %v, want %s", id, err, x)
	}
	// The window, and a second for LastModified's resolution.
	*srv = srv.Add(2*time.Second + time.Millisecond)
	before := st.Counts()
	y, err := p.Submit(ctx, "t", nil, opts)
	if err != nil || y == x {
		t.Fatalf("submit after the window = %s %v, want a new task", y, err)
	}
	d := st.Counts().Sub(before)
	if d.Of(s3store.OpPut) != 3 || d.Of(s3store.OpGet) != 1 {
		t.Fatalf("a submit that replaced an expired record made %s, want 3 PUT (failed create, CAS, task) and 1 GET", d)
	}
	if rec := readRecord(t, mst, "k"); rec.ID != y || rec.Window != 1 {
		t.Fatalf("record %+v, want task %s in window 1", rec, y)
	}
	for _, id := range []string{x, y} {
		if _, err := p.Get(ctx, id); err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
	}
	if id, err := p.Submit(ctx, "t", nil, opts); err != nil || id != y {
		t.Fatalf("submit within the new window = %s %v, want %s", id, err, y)
	}
	// Another type or input is a conflict within the window, and free
	// after it.
	if _, err := p.Submit(ctx, "u", nil, opts); !errors.Is(err, producer.ErrIdempotencyConflict) {
		t.Fatalf("another type within the window: %v, want ErrIdempotencyConflict", err)
	}
	*srv = srv.Add(time.Minute)
	if z, err := p.Submit(ctx, "u", nil, opts); err != nil || z == y {
		t.Fatalf("another type after the window = %s %v, want a new task", z, err)
	}
}

// readTogether holds the first n reads of key until all n have arrived,
// so that n submits all read the same version of a record before any of
// them writes.
type readTogether struct {
	s3store.Store
	key     string
	mu      sync.Mutex
	n       int
	arrived chan struct{}
}

func (r *readTogether) Get(ctx context.Context, key string) (s3store.Object, error) {
	if key == r.key {
		r.mu.Lock()
		wait := r.n > 0
		if wait {
			r.n--
			if r.n == 0 {
				close(r.arrived)
			}
		}
		r.mu.Unlock()
		if wait {
			select {
			case <-r.arrived:
			case <-time.After(10 * time.Second):
			}
		}
	}
	return r.Store.Get(ctx, key)
}

// Submits racing on a key whose window passed, all having read the
// expired record, create one task between them, and all return it: only
// one replaces the record (its CAS), the others follow the new record.
func TestRacingSubmitsAfterTheWindowCreateOneTask(t *testing.T) {
	ctx := context.Background()
	mst, srv, clk := fakeTime(t)
	const n = 8
	st := &readTogether{Store: mst, key: task.IdempotencyRecordKey("race"), arrived: make(chan struct{})}
	p, err := producer.New(ctx, st, producer.Config{Shards: 4, Clock: clk, BatchParallelism: n})
	if err != nil {
		t.Fatal(err)
	}
	opts := producer.Options{IdempotencyKey: "race", UniqueFor: time.Second}
	x, err := p.Submit(ctx, "t", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	*srv = srv.Add(3 * time.Second)
	st.mu.Lock()
	st.n = n
	st.mu.Unlock()
	reqs := make([]producer.Request, n)
	for i := range reqs {
		reqs[i] = producer.Request{Type: "t", Options: opts}
	}
	res := p.SubmitBatch(ctx, reqs)
	for _, r := range res {
		if r.Err != nil || r.ID != res[0].ID || r.ID == x {
			t.Fatalf("results %+v: want one new id for all", res)
		}
	}
	if n := countTasks(t, mst); n != 2 {
		t.Fatalf("%d tasks, want 2 (one per window)", n)
	}
}

// A submit that replaced the record and crashed before writing its task:
// the next submit within the new window creates the task the record names.
func TestAReplacedRecordWithoutItsTaskIsCompleted(t *testing.T) {
	ctx := context.Background()
	p, _, mst, srv := setupWindow(t)
	opts := producer.Options{IdempotencyKey: "k", UniqueFor: 10 * time.Second}
	x, err := p.Submit(ctx, "t", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	*srv = srv.Add(20 * time.Second)
	y, err := p.Submit(ctx, "t", nil, opts)
	if err != nil || y == x {
		t.Fatal(y, err)
	}
	mst.Delete(ctx, task.Key(task.ShardFor(y, 4), y), s3store.DeleteOptions{}) // as if never written
	for _, age := range []time.Duration{time.Second, 2 * time.Second} {        // young, then (after the first) existing
		*srv = srv.Add(age)
		if id, err := p.Submit(ctx, "t", nil, opts); err != nil || id != y {
			t.Fatalf("submit = %s %v, want the record's task %s", id, err, y)
		}
		if _, err := p.Get(ctx, y); err != nil {
			t.Fatalf("the record's task was not created: %v", err)
		}
	}
}

// A retired record never expires: retention is deleting it and its task,
// and a replacement could be deleted by the retirer's DELETE. The submit
// returns the task being deleted, as for a key without a window.
func TestARetiredRecordIsNotReplaced(t *testing.T) {
	ctx := context.Background()
	p, _, mst, srv := setupWindow(t)
	opts := producer.Options{IdempotencyKey: "k", UniqueFor: time.Second}
	x, err := p.Submit(ctx, "t", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := readRecord(t, mst, "k")
	rec.Retired, rec.Retires = true, 1
	mst.Put(ctx, task.IdempotencyRecordKey("k"), rec.Encode(), s3store.PutOptions{})
	*srv = srv.Add(time.Hour)
	if id, err := p.Submit(ctx, "t", nil, opts); err != nil || id != x {
		t.Fatalf("submit = %s %v, want the retired record's task %s", id, err, x)
	}
	if got := readRecord(t, mst, "k"); !got.Retired || got.ID != x {
		t.Fatalf("the retired record was written: %+v", got)
	}
}

// Unique derives the key from the type and the input as stored; windows
// apply to it as to any key.
func TestUniqueDerivesTheKeyFromTypeAndInput(t *testing.T) {
	ctx := context.Background()
	p, _, _, srv := setupWindow(t)
	x, err := p.Submit(ctx, "t", json.RawMessage(`{"a": 1}`), producer.Options{Unique: true, UniqueFor: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Get(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := task.UniqueKey("t", json.RawMessage(`{"a":1}`)); got.IdempotencyKey != want || got.UniqueFor.D() != 3*time.Second {
		t.Fatalf("task key %q window %v, want %q 3s", got.IdempotencyKey, got.UniqueFor, want)
	}
	if id, err := p.Submit(ctx, "t", json.RawMessage(`{ "a":1 }`), producer.Options{Unique: true, UniqueFor: 3 * time.Second}); err != nil || id != x {
		t.Fatalf("the same type and input = %s %v, want %s", id, err, x)
	}
	for _, other := range []struct {
		typ   string
		input string
	}{{"t", `{"a":2}`}, {"u", `{"a":1}`}} {
		if id, err := p.Submit(ctx, other.typ, json.RawMessage(other.input), producer.Options{Unique: true}); err != nil || id == x {
			t.Fatalf("%s %s = %s %v, want a new task", other.typ, other.input, id, err)
		}
	}
	*srv = srv.Add(5 * time.Second)
	if id, err := p.Submit(ctx, "t", json.RawMessage(`{"a":1}`), producer.Options{Unique: true, UniqueFor: 3 * time.Second}); err != nil || id == x {
		t.Fatalf("after the window = %s %v, want a new task", id, err)
	}
}

func TestBadUniquenessIsRefusedAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts producer.Options
		want string
	}{
		{"unique with an idempotency key", producer.Options{Unique: true, IdempotencyKey: "k"}, "cannot be combined"},
		{"a key in unique's namespace", producer.Options{IdempotencyKey: task.UniqueKeyPrefix + "x"}, "reserved"},
		{"a window without a key", producer.Options{UniqueFor: time.Minute}, "needs an idempotency key"},
		{"a window under a second", producer.Options{IdempotencyKey: "k", UniqueFor: 500 * time.Millisecond}, "outside"},
		{"a window over 30 days", producer.Options{Unique: true, UniqueFor: 31 * 24 * time.Hour}, "outside"},
		{"a negative window", producer.Options{IdempotencyKey: "k", UniqueFor: -time.Second}, "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, st := setup(t)
			before := st.Counts().Of(s3store.OpPut)
			_, err := p.Submit(ctx, "t", nil, tc.opts)
			if !errors.Is(err, task.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("submit: %v, want ErrInvalid mentioning %q", err, tc.want)
			}
			if puts := st.Counts().Of(s3store.OpPut) - before; puts != 0 {
				t.Fatalf("a refused submit wrote %d objects", puts)
			}
		})
	}
}
