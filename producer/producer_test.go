package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

func setup(t *testing.T) (*producer.Producer, *s3store.Counter) {
	t.Helper()
	st := s3store.NewCounter(mem.New())
	p, err := producer.New(context.Background(), st, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	return p, st
}

func TestBadInputWritesNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		typ   string
		input any
		opts  producer.Options
		want  string
	}{
		{"input that is not JSON", "t", []byte("{nope"), producer.Options{}, "not valid JSON"},
		{"input over the size limit", "t", []byte(`"` + strings.Repeat("x", task.MaxInputBytes) + `"`), producer.Options{}, "over the limit"},
		{"an empty type", "", nil, producer.Options{}, "type"},
		{"a timeout under a second", "t", nil, producer.Options{Timeout: time.Millisecond}, "timeout"},
		{"zero attempts allowed", "t", nil, producer.Options{MaxAttempts: -1}, "attempts"},
		{"a timeout equal to the lease margin", "t", nil, producer.Options{Timeout: 2 * time.Second}, "must exceed 4s, twice the workers' lease margin"},
		{"a timeout of twice the lease margin", "t", nil, producer.Options{Timeout: 4 * time.Second}, "must exceed 4s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, st := setup(t)
			before := st.Counts().Of(s3store.OpPut)
			_, err := p.Submit(ctx, tc.typ, tc.input, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("submit: %v, want an error mentioning %q", err, tc.want)
			}
			if puts := st.Counts().Of(s3store.OpPut) - before; puts != 0 {
				t.Fatalf("a refused submit wrote %d objects", puts)
			}
		})
	}
}

func TestSubmitCostsOnePutAndACachedFleetRead(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	before := st.Counts()
	for i := 0; i < 20; i++ {
		if _, err := p.Submit(ctx, "t", map[string]int{"a": i}, producer.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	d := st.Counts().Sub(before)
	if d.Of(s3store.OpPut) != 20 || d.Of(s3store.OpGet) > 2 || d.Total() > 22 {
		t.Fatalf("20 submits made %s, want 20 PUTs and at most a fleet read per %v", d, shards.FleetCacheTTL)
	}
}

func TestShardKeyPlacesTasksTogether(t *testing.T) {
	ctx := context.Background()
	p, _ := setup(t)
	want := task.ShardFor("customer-7", 4)
	for i := 0; i < 10; i++ {
		id, err := p.Submit(ctx, "t", nil, producer.Options{ShardKey: "customer-7"})
		if err != nil {
			t.Fatal(err)
		}
		if got := task.ShardFor(id, 4); got != want {
			t.Fatalf("task %s in shard %d, want %d", id, got, want)
		}
		tk, err := p.Get(ctx, id)
		if err != nil || tk.Shard != want {
			t.Fatalf("get: %+v %v", tk, err)
		}
	}
}

func TestDelayAndRunAt(t *testing.T) {
	ctx := context.Background()
	p, _ := setup(t)
	id, _ := p.Submit(ctx, "t", nil, producer.Options{Delay: time.Hour})
	tk, _ := p.Get(ctx, id)
	if d := tk.AvailableAt.Sub(tk.CreatedAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Fatalf("delay 1h gave available_at - created_at = %v", d)
	}
	if idTime, _ := task.IDTime(id); !idTime.Equal(tk.AvailableAt) {
		t.Fatalf("id time %v differs from available_at %v: scans would misjudge it", idTime, tk.AvailableAt)
	}
	at := time.Now().Add(48 * time.Hour).Truncate(time.Second).UTC()
	id, _ = p.Submit(ctx, "t", nil, producer.Options{RunAt: at, Delay: time.Minute})
	if tk, _ := p.Get(ctx, id); !tk.AvailableAt.Equal(at) {
		t.Fatalf("run-at gave %v, want %v", tk.AvailableAt, at)
	}
}

func TestUnknownIDIsNotFound(t *testing.T) {
	ctx := context.Background()
	p, _ := setup(t)
	for _, id := range []string{"01JDXYZ0000000000000000000", "not-an-id"} {
		if _, err := p.Get(ctx, id); !errors.Is(err, producer.ErrNotFound) {
			t.Fatalf("get %q: %v, want ErrNotFound", id, err)
		}
		if _, err := p.Cancel(ctx, id); !errors.Is(err, producer.ErrNotFound) {
			t.Fatalf("cancel %q: %v, want ErrNotFound", id, err)
		}
	}
}

// slowStore delays PUTs and records how many ran at once.
type slowStore struct {
	s3store.Store
	mu        sync.Mutex
	cur, peak int
}

func (s *slowStore) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	s.mu.Lock()
	s.cur++
	s.peak = max(s.peak, s.cur)
	s.mu.Unlock()
	time.Sleep(10 * time.Millisecond) // a slow request, not a wait for background work
	defer func() { s.mu.Lock(); s.cur--; s.mu.Unlock() }()
	return s.Store.Put(ctx, key, body, opts)
}

func TestSubmitBatchBoundsParallelism(t *testing.T) {
	ctx := context.Background()
	st := &slowStore{Store: mem.New()}
	p, err := producer.New(ctx, st, producer.Config{Shards: 4, BatchParallelism: 3})
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]producer.Request, 12)
	for i := range reqs {
		reqs[i] = producer.Request{Type: "t", Input: map[string]int{"i": i}}
	}
	res := p.SubmitBatch(ctx, reqs)
	seen := map[string]bool{}
	for i, r := range res {
		if r.Err != nil || r.ID == "" || seen[r.ID] {
			t.Fatalf("request %d: %+v", i, r)
		}
		seen[r.ID] = true
	}
	if st.peak != 3 {
		t.Fatalf("peak parallel PUTs %d, want 3", st.peak)
	}
}

// fakeTime makes a store whose server time the test moves, and a clock
// whose local time moves with it.
func fakeTime(t *testing.T) (*mem.Store, *time.Time, *clock.Authoritative) {
	t.Helper()
	st := mem.New()
	start := time.Now()
	server := start
	st.SetNow(func() time.Time { return server })
	local := time.Now()
	c := clock.New(st, clock.Config{Local: clock.LocalFunc(func() time.Time { return local.Add(server.Sub(start)) })})
	return st, &server, c
}

// What a submit does with an idempotency key whose record another submit
// wrote, for each state the record and its task can be in.
func TestIdempotentSubmitFollowsTheRecord(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		age       time.Duration // of the record when the submit reads it
		retired   bool
		taskThere bool
		want      string // "existing", "created"
	}{
		{"a young record whose producer has not written its task yet", 10 * time.Second, false, false, "created"},
		{"an old record whose producer crashed before writing its task", time.Hour, false, false, "created"},
		{"an old record whose task exists", time.Hour, false, true, "existing"},
		{"a retired record: retention is deleting its task", time.Hour, true, true, "existing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mst, srv, clk := fakeTime(t)
			st := s3store.NewCounter(mst)
			p, err := producer.New(ctx, st, producer.Config{Shards: 4, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			// The other producer: its record, and perhaps its task.
			x, err := p.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.taskThere {
				mst.Delete(ctx, task.Key(task.ShardFor(x, 4), x), s3store.DeleteOptions{})
			}
			if tc.retired {
				body, _ := json.Marshal(map[string]any{"id": x, "retired": true})
				mst.Put(ctx, task.IdempotencyRecordKey("k"), body, s3store.PutOptions{})
			}
			*srv = srv.Add(tc.age)
			before := st.Counts()
			got, err := p.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: "k"})
			if err != nil || got != x {
				t.Fatalf("submit = %s %v, want the record's task %s", got, err, x)
			}
			if _, err := p.Get(ctx, x); err != nil && tc.want == "created" {
				t.Fatalf("the record's task was not created: %v", err)
			}
			d := st.Counts().Sub(before)
			if tc.want == "existing" && d.Of(s3store.OpPut) != 1 {
				t.Fatalf("a submit that found the key taken made %s, want one (failed) PUT", d)
			}
		})
	}
}

// Producers racing on one key all return one id, and one task exists.
func TestRacingIdempotentSubmitsCreateOneTask(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p, err := producer.New(ctx, st, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]producer.Request, 16)
	for i := range reqs {
		reqs[i] = producer.Request{Type: "t", Options: producer.Options{IdempotencyKey: "race"}}
	}
	res := p.SubmitBatch(ctx, reqs)
	for _, r := range res {
		if r.Err != nil || r.ID != res[0].ID {
			t.Fatalf("results %+v: want one id for all", res)
		}
	}
	n := 0
	for s := range 4 {
		page, _ := st.List(ctx, shards.TasksPrefix(s), s3store.ListOptions{})
		n += len(page.Objects)
	}
	if n != 1 {
		t.Fatalf("%d objects under tasks/, want 1", n)
	}
}

// The same idempotency key with another type or input is a conflict, not
// the first task.
func TestIdempotencyKeyWithAnotherTypeOrInputIsAConflict(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	first, err := p.Submit(ctx, "t", json.RawMessage(`{"a": 1}`), producer.Options{IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		typ   string
		input json.RawMessage
	}{{"another input", "t", json.RawMessage(`{"a":2}`)}, {"another type", "u", json.RawMessage(`{"a":1}`)}} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := p.Submit(ctx, tc.typ, tc.input, producer.Options{IdempotencyKey: "k"})
			if !errors.Is(err, producer.ErrIdempotencyConflict) || !strings.Contains(err.Error(), first) || id != first {
				t.Fatalf("submit = %q, %v; want ErrIdempotencyConflict naming %s", id, err, first)
			}
		})
	}
	t.Run("the same input spelled differently is the same task", func(t *testing.T) {
		if id, err := p.Submit(ctx, "t", json.RawMessage(`{ "a":1 }`), producer.Options{IdempotencyKey: "k"}); err != nil || id != first {
			t.Fatalf("submit = %q, %v; want %s", id, err, first)
		}
	})
	t.Run("a record written before the check is not checked", func(t *testing.T) {
		body, _ := json.Marshal(map[string]string{"id": first})
		st.Put(ctx, task.IdempotencyRecordKey("old"), body, s3store.PutOptions{})
		if id, err := p.Submit(ctx, "u", nil, producer.Options{IdempotencyKey: "old"}); err != nil || id != first {
			t.Fatalf("submit = %q, %v; want %s", id, err, first)
		}
	})
}

// A task that becomes live far behind the shard scans (and perhaps below
// the monitor's sweep floor) is announced by a ready pointer, through which
// workers find it and the monitor learns to sweep it.
func TestATaskLandingBehindTheScansIsAnnounced(t *testing.T) {
	ctx := context.Background()
	pointers := func(st s3store.Store) map[string]bool {
		out := map[string]bool{}
		for s := range 4 {
			page, _ := st.List(ctx, shards.TasksPrefix(s), s3store.ListOptions{})
			for _, o := range page.Objects {
				if p, err := shards.ParsePointerKey(o.Key); err == nil {
					out[p.ID] = true
				}
			}
		}
		return out
	}
	t.Run("a PUT that lands minutes late", func(t *testing.T) {
		mst, srv, clk := fakeTime(t)
		st := s3store.NewFaults(mst)
		p, _ := producer.New(ctx, st, producer.Config{Shards: 4, Clock: clk})
		st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Times: 1, Hook: func(string) { *srv = srv.Add(2 * time.Minute) }})
		id, err := p.Submit(ctx, "t", nil, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !pointers(mst)[id] {
			t.Fatal("a task whose PUT landed 2 minutes after its id's time was not announced")
		}
	})
	t.Run("a task completed from an old idempotency record", func(t *testing.T) {
		mst, srv, clk := fakeTime(t)
		p, _ := producer.New(ctx, mst, producer.Config{Shards: 4, Clock: clk})
		x, _ := p.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: "k"})
		for k := range pointers(mst) {
			t.Fatalf("pointer to %s before the test", k)
		}
		mst.Delete(ctx, task.Key(task.ShardFor(x, 4), x), s3store.DeleteOptions{}) // its producer crashed before writing it
		*srv = srv.Add(time.Hour)
		if id, err := p.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: "k"}); err != nil || id != x {
			t.Fatalf("submit = %s %v, want %s", id, err, x)
		}
		if !pointers(mst)[x] {
			t.Fatal("a task created from an hour-old idempotency record was not announced")
		}
	})
}

// lostResponse is a task write that lands but whose response is lost: the
// store's retry then meets its own write (412).
var lostResponse = s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: ".json", Err: s3store.ErrPreconditionFailed, AfterWrite: true, Times: 1}

func setupFaults(t *testing.T) (*producer.Producer, *s3store.Faults, *mem.Store) {
	t.Helper()
	mst := mem.New()
	st := s3store.NewFaults(mst)
	p, err := producer.New(context.Background(), st, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	return p, st, mst
}

// A submit (without an idempotency key) whose PUT landed with its response
// lost returns the task's id: an error would invite a duplicate.
func TestASubmitWhoseResponseWasLostReturnsItsID(t *testing.T) {
	ctx := context.Background()
	p, st, mst := setupFaults(t)
	st.Inject(lostResponse)
	id, err := p.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatalf("submit whose PUT landed: %v", err)
	}
	if _, err := p.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	n := 0
	for s := range 4 {
		page, _ := mst.List(ctx, shards.TasksPrefix(s), s3store.ListOptions{})
		n += len(page.Objects)
	}
	if n != 1 {
		t.Fatalf("%d objects under tasks/, want the one task", n)
	}
}

// A requeue or cancel whose write landed with its response lost reports
// success, and the requeue announces its task.
func TestARequeueOrCancelWhoseResponseWasLostSucceeds(t *testing.T) {
	ctx := context.Background()
	t.Run("requeue", func(t *testing.T) {
		p, st, mst := setupFaults(t)
		id, _ := p.Submit(ctx, "t", nil, producer.Options{})
		if _, err := p.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		st.Inject(lostResponse)
		if err := p.Requeue(ctx, id); err != nil {
			t.Fatalf("requeue whose write landed: %v", err)
		}
		if got, _ := p.Get(ctx, id); got.Status != task.Pending {
			t.Fatalf("status %s, want pending", got.Status)
		}
		announced := false
		for s := range 4 {
			page, _ := mst.List(ctx, shards.TasksPrefix(s), s3store.ListOptions{})
			for _, o := range page.Objects {
				if ptr, err := shards.ParsePointerKey(o.Key); err == nil && ptr.ID == id {
					announced = true
				}
			}
		}
		if !announced {
			t.Fatal("the requeued task was not announced")
		}
	})
	t.Run("cancel", func(t *testing.T) {
		p, st, _ := setupFaults(t)
		id, _ := p.Submit(ctx, "t", nil, producer.Options{})
		st.Inject(lostResponse)
		if requested, err := p.Cancel(ctx, id); err != nil || requested {
			t.Fatalf("cancel whose write landed: requested %v, %v", requested, err)
		}
		if got, _ := p.Get(ctx, id); got.Status != task.Canceled {
			t.Fatalf("status %s, want canceled", got.Status)
		}
	})
}

// A timeout above twice the lease margin is accepted, and the rule follows
// the configured margin.
func TestTimeoutAboveTwiceTheLeaseMarginIsAccepted(t *testing.T) {
	ctx := context.Background()
	p, _ := setup(t) // margin 2s
	if _, err := p.Submit(ctx, "t", nil, producer.Options{Timeout: 4*time.Second + time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	q, err := producer.New(ctx, mem.New(), producer.Config{LeaseMargin: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Submit(ctx, "t", nil, producer.Options{Timeout: time.Second}); err != nil {
		t.Fatalf("a 1s timeout with a 300ms margin: %v", err)
	}
}

// A requeue of a task old enough to lie below the monitor's sweep floor
// writes its ready pointer first: when the pointer cannot be written the
// requeue fails and changes nothing, instead of leaving a pending task that
// only the monitor's full walk (hours) would find.
func TestARequeueBelowTheFloorIsAnnouncedBeforeItIsWritten(t *testing.T) {
	ctx := context.Background()
	mst, server, c := fakeTime(t)
	st := s3store.NewFaults(mst)
	p, err := producer.New(ctx, st, producer.Config{Shards: 4, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	*server = server.Add(shards.FloorLag + time.Minute)
	c.Sync(ctx)

	st.Inject(s3store.Fault{Op: s3store.OpPut, KeySuffix: ".ready", Err: s3store.ErrInjected503})
	if err := p.Requeue(ctx, id); err == nil {
		t.Fatal("a requeue whose announcement could not be written reported success")
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Canceled {
		t.Fatalf("after the failed requeue the task is %s, want it still canceled", got.Status)
	}

	st.Clear()
	if err := p.Requeue(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Pending {
		t.Fatalf("status %s, want pending", got.Status)
	}
	pointers := 0
	for s := range 4 {
		page, _ := mst.List(ctx, shards.TasksPrefix(s), s3store.ListOptions{})
		for _, o := range page.Objects {
			if ptr, err := shards.ParsePointerKey(o.Key); err == nil && ptr.ID == id {
				pointers++
			}
		}
	}
	if pointers != 1 {
		t.Fatalf("%d pointers to the requeued task, want 1", pointers)
	}
}

// A requeue of an old task that must wait for its slot's holder (blocked)
// writes its ready pointer first too: a blocked task below the floor is
// live, and the pointer is how the monitor's sweeps learn to watch it, so
// that the monitor finds it pending should its grant's announcement be
// lost (seed 170259).
func TestARequeueBelowTheFloorIntoABusySlotIsAnnouncedBeforeItIsWritten(t *testing.T) {
	ctx := context.Background()
	mst, server, c := fakeTime(t)
	st := s3store.NewFaults(mst)
	p, err := producer.New(ctx, st, producer.Config{Shards: 1, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "t", nil, producer.Options{Slot: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	*server = server.Add(shards.FloorLag + time.Minute)
	c.Sync(ctx)
	if _, err := p.Submit(ctx, "t", nil, producer.Options{Slot: "k"}); err != nil { // the slot's holder
		t.Fatal(err)
	}

	st.Inject(s3store.Fault{Op: s3store.OpPut, KeySuffix: ".ready", Err: s3store.ErrInjected503})
	if err := p.Requeue(ctx, id); err == nil {
		t.Fatal("a requeue whose announcement could not be written reported success")
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Canceled {
		t.Fatalf("after the failed requeue the task is %s, want it still canceled", got.Status)
	}

	st.Clear()
	if err := p.Requeue(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Blocked {
		t.Fatalf("status %s, want blocked behind the slot's holder", got.Status)
	}
	pointers := 0
	page, _ := mst.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{})
	for _, o := range page.Objects {
		if ptr, err := shards.ParsePointerKey(o.Key); err == nil && ptr.ID == id {
			pointers++
		}
	}
	if pointers != 1 {
		t.Fatalf("%d pointers to the requeued task, want 1", pointers)
	}
}

// CancelIf and RequeueIf decide on the status of the task their own GET
// reads: a task in none of the statuses asked for is left alone, with
// ErrStatusChanged and no write, for the cost of that one GET.
func TestCancelIfAndRequeueIfCheckTheStatusTheyRead(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	id, err := p.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := st.Counts()
	if _, err := p.CancelIf(ctx, id, task.Running, task.Blocked); !errors.Is(err, producer.ErrStatusChanged) || !strings.Contains(err.Error(), "it is pending, not running or blocked") {
		t.Errorf("CancelIf running,blocked of a pending task: %v, want ErrStatusChanged", err)
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Pending {
		t.Errorf("after a refused CancelIf: %s", got.Status)
	}
	after := st.Counts()
	if puts, gets := after.Of(s3store.OpPut)-before.Of(s3store.OpPut), after.Of(s3store.OpGet)-before.Of(s3store.OpGet); puts != 0 || gets != 2 {
		t.Errorf("a refused CancelIf (and a Get): %d PUTs, %d GETs, want 0 and 2", puts, gets)
	}
	if requested, err := p.CancelIf(ctx, id, task.Pending); err != nil || requested {
		t.Fatalf("CancelIf pending of a pending task: requested %v, %v", requested, err)
	}
	if err := p.RequeueIf(ctx, id, task.Dead); !errors.Is(err, producer.ErrStatusChanged) {
		t.Errorf("RequeueIf dead of a canceled task: %v, want ErrStatusChanged", err)
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Canceled {
		t.Errorf("after a refused RequeueIf: %s", got.Status)
	}
	if err := p.RequeueIf(ctx, id, task.Dead, task.Canceled); err != nil {
		t.Fatalf("RequeueIf dead,canceled of a canceled task: %v", err)
	}
	if got, _ := p.Get(ctx, id); got.Status != task.Pending {
		t.Errorf("after RequeueIf: %s", got.Status)
	}
}

// A deadline is stored as given, or this long after the submit's S3 time;
// one not after the submit is refused and writes nothing.
func TestDeadline(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	at := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	id, err := p.Submit(ctx, "t", nil, producer.Options{Deadline: at, DeadlineIn: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if tk, _ := p.Get(ctx, id); !tk.Deadline.Equal(at) {
		t.Fatalf("deadline %v, want %v", tk.Deadline, at)
	}
	id, err = p.Submit(ctx, "t", nil, producer.Options{DeadlineIn: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tk, _ := p.Get(ctx, id)
	if d := tk.Deadline.Sub(tk.CreatedAt); d < 10*time.Minute-time.Second || d > 10*time.Minute+time.Second {
		t.Fatalf("deadline in 10m gave deadline - created_at = %v", d)
	}
	puts := st.Counts().Of(s3store.OpPut)
	for _, o := range []producer.Options{{Deadline: time.Now().Add(-time.Hour)}, {DeadlineIn: -time.Second},
		{Delay: time.Hour, DeadlineIn: time.Minute}} {
		if _, err := p.Submit(ctx, "t", nil, o); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("submit with %+v = %v, want ErrInvalid", o, err)
		}
	}
	if n := st.Counts().Of(s3store.OpPut); n != puts {
		t.Fatalf("refused deadlines wrote %d objects", n-puts)
	}
}

// countTaskObjects counts the task objects (not ready pointers) in a
// queue of n shards.
func countTaskObjects(t *testing.T, st s3store.Store, n int) int {
	t.Helper()
	c := 0
	for s := range n {
		page, err := st.List(context.Background(), shards.TasksPrefix(s), s3store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			if strings.HasSuffix(o.Key, ".json") {
				c++
			}
		}
	}
	return c
}

// A submit whose PUT landed with its response lost, and whose reads back
// failed too (the outage that lost the response went on: 4 GETs over 2.1
// s), is not reported failed: a caller told "failed" submits again, and
// makes a second task. Submit tries the same create again (the same id,
// If-None-Match) until it learns the outcome: here its second PUT meets
// the first (412), and the task is its own.
func TestASubmitWhoseOutcomeIsUnknownIsTriedAgainUnderItsID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p, st, mst := setupFaults(t)
		st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: ".json", Err: s3store.ErrInjected500, AfterWrite: true, Times: 1,
			Hook: func(string) {
				st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Err: s3store.ErrInjected503, Times: 4})
			}})
		id, err := p.Submit(ctx, "t", nil, producer.Options{})
		if err != nil {
			// What a caller told "failed" does.
			if _, err := p.Submit(ctx, "t", nil, producer.Options{}); err != nil {
				t.Fatal(err)
			}
			t.Errorf("a submit whose task exists was reported failed: %v", err)
		}
		if n := countTaskObjects(t, mst, 4); n != 1 {
			t.Fatalf("%d tasks, want 1", n)
		}
		if _, err := p.Get(ctx, id); err != nil {
			t.Fatalf("submit returned %s: %v", id, err)
		}
	})
}

// An outage longer than Submit's minute of trying leaves the outcome
// unknown: Submit returns the task's id with ErrOutcomeUnknown, not a
// failure, and a second Submit under that id (Options.ID) is safe to
// make whatever became of the first: it creates the task once.
func TestASubmitRetriedUnderItsIDMakesOneTask(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(map[bool]string{true: "the first create landed", false: "it did not"}[landed], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				p, st, mst := setupFaults(t)
				down := func(string) {
					// Every task request fails for five minutes.
					st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Err: s3store.ErrInjected503})
					st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Err: s3store.ErrInjected503})
					go func() {
						time.Sleep(5 * time.Minute)
						st.Clear()
					}()
				}
				st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: ".json", Err: s3store.ErrInjected500, AfterWrite: landed, Times: 1, Hook: down})
				opts := producer.Options{Delay: time.Hour, MaxAttempts: 2}
				id, err := p.Submit(ctx, "t", json.RawMessage(`{"n":1}`), opts)
				if !errors.Is(err, producer.ErrOutcomeUnknown) || id == "" {
					t.Fatalf("submit through a five-minute outage: %q, %v; want its id and ErrOutcomeUnknown", id, err)
				}
				time.Sleep(5 * time.Minute)
				opts.ID = id
				again, err := p.Submit(ctx, "t", json.RawMessage(`{"n":1}`), opts)
				if err != nil || again != id {
					t.Fatalf("submit again under %s: %q, %v", id, again, err)
				}
				if n := countTaskObjects(t, mst, 4); n != 1 {
					t.Fatalf("%d tasks, want 1", n)
				}
				got, err := p.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if at, _ := task.IDTime(id); !got.AvailableAt.Equal(at) || got.MaxAttempts != 2 {
					t.Fatalf("the task is available at %v with %d attempts, want its id's time %v and 2", got.AvailableAt, got.MaxAttempts, at)
				}
				// Another task under a taken id is refused.
				if _, err := p.Submit(ctx, "other", nil, producer.Options{ID: id}); !errors.Is(err, producer.ErrIdempotencyConflict) {
					t.Fatalf("a submit of another task under %s: %v, want ErrIdempotencyConflict", id, err)
				}
			})
		})
	}
}
