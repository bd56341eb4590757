package monitor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// fakeTime makes a store whose server time the test moves, and a clock for
// the monitor whose local time moves with it, as it would in real life.
func fakeTime() (*mem.Store, *time.Time, *clock.Authoritative) {
	st := mem.New()
	start := time.Now()
	server := start
	st.SetNow(func() time.Time { return server })
	local := time.Now()
	c := clock.New(st, clock.Config{Local: clock.LocalFunc(func() time.Time { return local.Add(server.Sub(start)) })})
	return st, &server, c
}

func TestSweepIsPagedAndReachesTheEnd(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	p, err := producer.New(ctx, st, producer.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 35; i++ {
		if _, err := p.Submit(ctx, "t", nil, producer.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := monitor.New(ctx, st, monitor.Config{Shards: 2, PageSize: 10, ShardsPerTick: 2})
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for tick := 1; tick <= 4; tick++ {
		before := st.Counts()
		s, err := m.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := st.Counts().Sub(before)
		if d.Of(s3store.OpList) > 2 {
			t.Fatalf("tick %d made %d LISTs, want at most one page per shard (2)", tick, d.Of(s3store.OpList))
		}
		listed += s.Listed
		if s.Listed > 10 {
			t.Fatalf("tick %d looked at %d keys of one shard, more than a page", tick, s.Listed)
		}
	}
	if listed != 35 {
		t.Fatalf("4 ticks listed %d keys, want all 35", listed)
	}
	if got := m.Stats().SweepsCompleted; got < 2 {
		t.Fatalf("sweeps completed = %d; the cursor must reach the end of both shards", got)
	}
	// A second pass reads nothing it has already seen.
	before := st.Counts()
	for i := 0; i < 4; i++ {
		m.Tick(ctx)
	}
	if gets := st.Counts().Sub(before).Of(s3store.OpGet); gets != 0 {
		t.Fatalf("second sweep made %d GETs of unchanged objects", gets)
	}
}

func TestRepairAnnouncesAPendingTaskThatLostItsWay(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	id, _ := p.Submit(ctx, "t", nil, producer.Options{})
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, RepairAfter: time.Minute, Clock: clk})
	m.Tick(ctx)
	if s := m.Stats(); s.Repaired != 0 {
		t.Fatalf("repaired a task due for less than repair_after")
	}
	*srv = srv.Add(2 * time.Minute)
	server := *srv
	m.Tick(ctx)
	m.Tick(ctx)
	if s := m.Stats(); s.Repaired != 1 {
		t.Fatalf("repaired %d, want 1 (and once only)", s.Repaired)
	}
	page, err := st.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{})
	var pointers []string
	for _, o := range page.Objects {
		if shards.IsPointer(o.Key) {
			pointers = append(pointers, o.Key)
		}
	}
	if err != nil || len(pointers) != 1 {
		t.Fatalf("ready pointers = %v %v, want one to the stuck task", pointers, err)
	}
	if p, err := shards.ParsePointerKey(pointers[0]); err != nil || p.ID != id || p.At.Before(server.Add(-time.Second)) {
		t.Fatalf("pointer %+v %v: want task %s, due no earlier than the repair", p, err, id)
	}
}

func TestRetentionDeletesFinishedTasksAndTheirIdempotencyRecords(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	done, _ := p.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: "k1"})
	live, _ := p.Submit(ctx, "t", nil, producer.Options{})
	if _, err := p.Cancel(ctx, done); err != nil {
		t.Fatal(err)
	}
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Retention: time.Hour, RepairAfter: 100 * time.Hour, Clock: clk})
	m.Tick(ctx)
	*srv = srv.Add(2 * time.Hour)
	m.Tick(ctx)
	if _, err := p.Get(ctx, done); err == nil {
		t.Fatal("finished task outlived its retention")
	}
	if _, err := st.Get(ctx, task.IdempotencyRecordKey("k1")); err == nil {
		t.Fatal("idempotency record outlived its task")
	}
	if _, err := p.Get(ctx, live); err != nil {
		t.Fatalf("retention deleted a pending task: %v", err)
	}
}

func TestExpiredLeaseIsRedispatchedOnlyAfterTheMargin(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	server := *srv
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	id, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second})
	v, _ := taskio.LoadID(ctx, st, id, []int{1})
	server = server.Add(2 * time.Second)
	*srv = server
	if err := v.Task.ClaimBy("w", "claim-1", server); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, LeaseMargin: 2 * time.Second, Clock: clk})
	for _, step := range []struct {
		at   time.Duration
		want task.Status
	}{{0, task.Running}, {5 * time.Second, task.Running}, {11 * time.Second, task.Running}, {17 * time.Second, task.Pending}} {
		*srv = v.Task.Claim.ExpiresAt.Add(step.at - 10*time.Second)
		m.Tick(ctx)
		got, _ := p.Get(ctx, id)
		if got.Status != step.want {
			t.Fatalf("%v after claim: %s, want %s", step.at, got.Status, step.want)
		}
	}
}

// A running task a sweep lists for the first time long after its last
// write has been unchanged that long: it is read at once, and its expired
// lease re-dispatched by that sweep, not by the next one to list it (seed
// 510504: sweeps of a long shard took minutes each, and the second sighting
// never came before the end).
func TestARunningTaskFirstListedLongAfterItsLastWriteIsReadAtOnce(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
	id, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second})
	v, _ := taskio.LoadID(ctx, st, id, []int{1})
	*srv = srv.Add(2 * time.Second)
	if err := v.Task.ClaimBy("w", "claim-1", *srv); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	// Its worker dies; the sweep reaches its key 7 minutes later.
	*srv = srv.Add(7 * time.Minute)
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 5 * time.Second, StaleAfter: 10 * time.Second,
		RepairAfter: time.Minute, LeaseMargin: 2 * time.Second, Clock: clk})
	s, err := m.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := p.Get(ctx, id)
	if got.Status != task.Pending || s.Redispatched != 1 {
		t.Fatalf("after the first sweep to list it: %s, %d re-dispatched; want pending, 1", got.Status, s.Redispatched)
	}
}

func TestWithALeaderLeaseOnlyOneMonitorSweeps(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	counter := s3store.NewCounter(st)
	p, _ := producer.New(ctx, counter, producer.Config{Shards: 2})
	p.Submit(ctx, "t", nil, producer.Options{})
	a, _ := monitor.New(ctx, counter, monitor.Config{Shards: 2, Leader: true, ID: "a", Clock: clk})
	b, _ := monitor.New(ctx, counter, monitor.Config{Shards: 2, Leader: true, ID: "b", Clock: clk})
	a.Tick(ctx)
	b.Tick(ctx)
	if !a.Leading(ctx) || b.Leading(ctx) {
		t.Fatalf("leading: a=%v b=%v, want only a", a.Leading(ctx), b.Leading(ctx))
	}
	if a.Stats().Listed == 0 || b.Stats().Listed != 0 {
		t.Fatalf("listed: a=%d b=%d; only the leader may sweep", a.Stats().Listed, b.Stats().Listed)
	}
	// a stops (crashes); after its lease expires by S3 time, b takes over.
	*srv = srv.Add(5 * time.Second)
	b.Tick(ctx)
	if b.Leading(ctx) {
		t.Fatal("b took over before a's lease expired")
	}
	*srv = srv.Add(time.Minute)
	b.Tick(ctx)
	if !b.Leading(ctx) || b.Stats().Listed == 0 {
		t.Fatalf("b did not take over an expired lease (leading %v, listed %d)", b.Leading(ctx), b.Stats().Listed)
	}
}

// A shard's retained history of finished tasks is listed by the hourly full
// walk only: sweeps start at the floor past it, so a sweep is one page and
// an expired lease behind days of history is seen within a tick or two.
func TestSweepsStartPastTheFinishedHistory(t *testing.T) {
	ctx := context.Background()
	mst, srv, clk := fakeTime()
	st := s3store.NewCounter(mst)
	// The producer's clock follows the test's server time, so the task
	// submitted after the history sorts after it.
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	var history []string
	for i := 0; i < 45; i++ {
		id, err := p.Submit(ctx, "t", nil, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		history = append(history, id)
	}
	*srv = srv.Add(10 * time.Minute)
	id, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second})
	v, _ := taskio.LoadID(ctx, st, id, []int{1})
	claimAt, _ := clk.Now(ctx)
	if err := v.Task.ClaimBy("w", "claim-1", claimAt.Latest); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, PageSize: 10, Interval: 5 * time.Second, RepairAfter: time.Minute, Clock: clk})
	tick := func() s3store.Counts {
		before := st.Counts()
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		return st.Counts().Sub(before)
	}
	for i := 0; i < 10 && m.Stats().SweepsCompleted == 0; i++ {
		tick() // the first sweep walks everything, a page per tick
	}
	if m.Stats().SweepsCompleted == 0 {
		t.Fatal("the first sweep did not finish in 10 ticks")
	}
	// From now on a sweep is a page: the floor is past the 45 finished tasks.
	for i := 0; i < 4; i++ {
		if d := tick(); d.Of(s3store.OpList) != 1 {
			t.Fatalf("a sweep after the first made %d LISTs, want 1", d.Of(s3store.OpList))
		}
	}
	*srv = srv.Add(10 * time.Second) // the lease is certainly expired
	tick()
	if got, _ := p.Get(ctx, id); got.Status != task.Pending {
		t.Fatalf("expired task behind the history: %s, want pending again", got.Status)
	}
	if _, err := p.Cancel(ctx, id); err != nil { // out of the way of the repair count below
		t.Fatal(err)
	}

	// A requeue whose announcement was lost leaves a pending task below the
	// floor: the next full walk finds it, and the repair announces it.
	old := history[3]
	ov, _ := taskio.LoadID(ctx, st, old, []int{1})
	if err := ov.Task.Requeue(*srv); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), ov.Task, ov.ETag); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		tick()
	}
	if n := m.Stats().Repaired; n != 0 {
		t.Fatalf("repaired %d before the full walk: the sweeps saw below the floor (%+v)", n, m.Stats())
	}
	*srv = srv.Add(6 * time.Hour)
	base := m.Stats().Repaired
	for i := 0; i < 40 && m.Stats().Repaired == base; i++ {
		tick()
	}
	if m.Stats().Repaired == base {
		t.Fatal("the full walk did not find the requeued task below the floor")
	}
	if page, _ := st.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{}); !hasPointerTo(page.Objects, old) {
		t.Fatal("the repair did not announce the requeued task")
	}
}

func hasPointerTo(objs []s3store.ObjectInfo, id string) bool {
	for _, o := range objs {
		if p, err := shards.ParsePointerKey(o.Key); err == nil && p.ID == id {
			return true
		}
	}
	return false
}

// After a quiet spell the monitor's sweeps of a shard back off towards
// sweep_max; while the fleet is awake, the shards that receive new tasks are
// swept every 3 intervals all the same, so a dead worker's lease is seen in
// time.
func TestAnAwakeFleetsShardsAreSweptDespiteTheBackOff(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	f := shards.Fleet{Members: []shards.Member{{ID: "w", Joined: *srv, ExpiresAt: srv.Add(time.Hour), Types: []string{"t"}}}}
	if _, _, err := shards.UpdateFleet(ctx, st, s3store.CAS{}, shards.Fleet{}, "", func(x *shards.Fleet) bool { *x = f; return true }); err != nil {
		t.Fatal(err)
	}
	p, _ := producer.New(ctx, st, producer.Config{Shards: 4, Clock: clk})
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 4, Interval: 5 * time.Second, SweepMax: 10 * time.Minute, Clock: clk})
	tick := func() {
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 130; i++ { // a quiet spell of 11 minutes: shard 0 backs off to 10 minutes
		tick()
	}
	id, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second}) // to shard 0, the member's
	v, _ := taskio.LoadID(ctx, st, id, []int{4})
	at, _ := clk.Now(ctx)
	if err := v.Task.ClaimBy("w", "claim-1", at.Latest); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	// The worker dies: its lease (10s) expires, plus the margin; the
	// monitor must see it unchanged for stale_after (10s) first.
	for i := 0; i < 12; i++ { // one minute
		tick()
		if got, _ := p.Get(ctx, id); got.Status == task.Pending {
			return
		}
	}
	t.Fatal("a running task of an awake fleet's shard was not re-dispatched within a minute of its lease expiring after a quiet spell")
}

// A backlog waiting longer than stale_after costs the monitor no GETs: a
// pending task (known by its size) cannot be due for repair before
// repair_after past its id's time, so it is read only then.
func TestAPendingBacklogIsNotReadBeforeRepairIsDue(t *testing.T) {
	ctx := context.Background()
	mst, srv, clk := fakeTime()
	st := &taskGets{Counter: s3store.NewCounter(mst)}
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	var ids []string
	for range 5 {
		id, err := p.Submit(ctx, "t", nil, producer.Options{Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// One of them is claimed and its worker dies: that one is read.
	v, _ := taskio.LoadID(ctx, st, ids[0], []int{1})
	*srv = srv.Add(2 * time.Second)
	if err := v.Task.ClaimBy("w", "claim-1", *srv); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 5 * time.Second, StaleAfter: 10 * time.Second, RepairAfter: time.Minute, Clock: clk})
	start := *srv
	gets := func(from time.Duration, to time.Duration) int64 {
		before := st.n
		for at := from; at <= to; at += 5 * time.Second {
			*srv = start.Add(at)
			if _, err := m.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return st.n - before
	}
	if n := gets(0, 50*time.Second); n != 1 {
		t.Fatalf("%d GETs in the first 50 s, want 1: the running task once it is stale, no pending one", n)
	}
	if n := gets(65*time.Second, 65*time.Second); n < 4 || m.Stats().Repaired != 4 {
		t.Fatalf("%d GETs, %d repaired once repair was due: want the 4 pending tasks read and announced", n, m.Stats().Repaired)
	}
}

// taskGets counts the GETs of task objects (not of fleet.json).
type taskGets struct {
	*s3store.Counter
	n int64
}

func (s *taskGets) Get(ctx context.Context, key string) (s3store.Object, error) {
	if strings.HasPrefix(key, "tasks/") {
		s.n++
	}
	return s.Counter.Get(ctx, key)
}

// A task submitted to run in an hour, canceled, then requeued is due at
// once, though its id (and so its key) lies an hour ahead: if the
// requeue's announcement is lost, the monitor's repair still finds it
// within repair_after, not an hour later.
func TestARequeuedDelayedTaskIsRepairedWhenDue(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	id, err := p.Submit(ctx, "t", nil, producer.Options{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := p.Requeue(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The announcement is lost.
	page, _ := st.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{})
	for _, o := range page.Objects {
		if shards.IsPointer(o.Key) {
			st.Delete(ctx, o.Key, s3store.DeleteOptions{})
		}
	}
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 5 * time.Second, StaleAfter: 10 * time.Second, RepairAfter: time.Minute, Clock: clk})
	start := *srv
	for at := time.Duration(0); at <= 2*time.Minute; at += 5 * time.Second {
		*srv = start.Add(at)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if m.Stats().Repaired > 0 {
			return
		}
	}
	t.Fatal("a requeued task due now, with its id an hour ahead, was not repaired within 2 minutes")
}

// deleteIgnoring ignores If-Match on DELETE, as MinIO does.
type deleteIgnoring struct{ s3store.Store }

func (s deleteIgnoring) Delete(ctx context.Context, key string, _ s3store.DeleteOptions) error {
	return s.Store.Delete(ctx, key, s3store.DeleteOptions{})
}

// Retention races a requeue at every point between its read of the finished
// task and its delete. Whatever the provider does with a conditional
// DELETE, the requeue either wins (the task stays, pending) or is refused
// (the task was already on its way out); a requeued task is never deleted.
func TestRetentionNeverDeletesARequeuedTask(t *testing.T) {
	for _, provider := range []string{s3store.DeleteIgnored, s3store.DeleteHonoured} {
		for _, race := range []string{"before retention's first write", "just before its delete"} {
			t.Run(provider+"/"+race, func(t *testing.T) {
				ctx := context.Background()
				mst, srv, clk := fakeTime()
				var base s3store.Store = mst
				if provider == s3store.DeleteIgnored {
					base = deleteIgnoring{mst}
				}
				p, err := producer.New(ctx, base, producer.Config{Shards: 1, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				if got := p.Manifest().ConditionalDelete; got != provider {
					t.Fatalf("manifest records conditional delete %q, want %q", got, provider)
				}
				id, _ := p.Submit(ctx, "t", nil, producer.Options{})
				if _, err := p.Cancel(ctx, id); err != nil {
					t.Fatal(err)
				}
				faulty := s3store.NewFaults(base)
				m, _ := monitor.New(ctx, faulty, monitor.Config{Shards: 1, Retention: time.Hour, RepairAfter: 100 * time.Hour, Clock: clk})
				m.Tick(ctx)
				*srv = srv.Add(2 * time.Hour)

				fired := false
				var requeueErr error
				requeue := func(string) {
					if !fired {
						fired = true
						requeueErr = p.Requeue(ctx, id)
					}
				}
				ops := []s3store.Op{s3store.OpPut, s3store.OpDelete}
				if race == "just before its delete" {
					ops = ops[1:]
				}
				for _, op := range ops {
					faulty.Inject(s3store.Fault{Op: op, KeyPrefix: "tasks/", KeySuffix: ".json", Times: 1, Hook: requeue})
				}
				m.Tick(ctx)
				if !fired {
					t.Fatal("retention made no write to the task: the race was not exercised")
				}
				got, err := p.Get(ctx, id)
				switch {
				case requeueErr == nil && err != nil:
					t.Fatalf("the requeue succeeded and then retention deleted the task: %v", err)
				case requeueErr == nil && got.Status != task.Pending:
					t.Fatalf("requeued task is %s, want pending", got.Status)
				case requeueErr != nil && !errors.Is(requeueErr, task.ErrRetired):
					t.Fatalf("requeue failed with %v, want a task.ErrRetired refusal", requeueErr)
				case requeueErr != nil:
					t.Logf("requeue refused: %v", requeueErr)
				}
			})
		}
	}
}

// Retention lists a task finished long ago; before it reads the task, the
// task is requeued and completes again. The task it reads finished just
// now, so it must be kept for another retention.
func TestRetentionDecidesOnTheTaskItReads(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	id, _ := p.Submit(ctx, "t", nil, producer.Options{})
	if _, err := p.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	faulty := s3store.NewFaults(st)
	m, _ := monitor.New(ctx, faulty, monitor.Config{Shards: 1, Retention: time.Hour, RepairAfter: 100 * time.Hour, Clock: clk})
	m.Tick(ctx)
	*srv = srv.Add(2 * time.Hour)
	rerun := func(string) {
		if err := p.Requeue(ctx, id); err != nil {
			t.Error(err)
			return
		}
		v, _ := taskio.LoadID(ctx, st, id, []int{1})
		if err := v.Task.ClaimBy("w", "c2", srv.Add(time.Second)); err != nil {
			t.Error(err)
			return
		}
		if err := v.Task.Succeed("c2", []byte(`"fresh"`), srv.Add(time.Second)); err != nil {
			t.Error(err)
			return
		}
		if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
			t.Error(err)
		}
	}
	faulty.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", KeySuffix: ".json", Times: 1, Hook: rerun})
	m.Tick(ctx)
	got, err := p.Get(ctx, id)
	if err != nil {
		t.Fatalf("retention deleted a result written a moment ago: %v", err)
	}
	if got.Status != task.Succeeded || string(got.Result) != `"fresh"` {
		t.Fatalf("task %s %s, want the fresh result", got.Status, got.Result)
	}
	// A retention later, it goes (found by the full walk: the sweeps'
	// floor has passed it).
	*srv = srv.Add(7 * time.Hour)
	m.Tick(ctx)
	m.Tick(ctx)
	if _, err := p.Get(ctx, id); err == nil {
		t.Fatal("the task outlived its retention after its second completion")
	}
}

// Retention of a task with an idempotency key races submits with the same
// key at every step. However they interleave, the key never ends up with
// two live tasks, and submits after retention agree on one id.
//
// Retention's writes: the task's tombstone, the record's DELETE If-Match
// and the task's DELETE where conditional DELETE is honoured (3); the
// tombstone, the record's retirement and DELETE and the task's DELETE
// where it is ignored (4). (A fourth step on honouring servers, which
// always skipped, raced nothing.)
func TestRetentionAndSubmitLeaveOneTaskPerIdempotencyKey(t *testing.T) {
	writes := map[string]int{s3store.DeleteIgnored: 4, s3store.DeleteHonoured: 3}
	for _, provider := range []string{s3store.DeleteIgnored, s3store.DeleteHonoured} {
		for step := 1; step <= writes[provider]; step++ {
			t.Run(fmt.Sprintf("%s/submit before retention's write %d", provider, step), func(t *testing.T) {
				ctx := context.Background()
				p, faulty, m, old, opts := keyedTaskDueForRetention(t, provider)
				var err error

				n, fired := 0, false
				var during string
				hook := func(string) {
					if n++; n == step {
						fired = true
						if during, err = p.Submit(ctx, "t", nil, opts); err != nil {
							t.Errorf("submit during retention: %v", err)
						}
					}
				}
				faulty.Inject(s3store.Fault{Op: s3store.OpPut, Hook: hook})
				faulty.Inject(s3store.Fault{Op: s3store.OpDelete, Hook: hook})
				for range 2 {
					m.Tick(ctx)
				}
				if !fired {
					t.Fatalf("retention made %d writes, want at least %d", n, step)
				}
				faulty.Clear()
				after, err := p.Submit(ctx, "t", nil, opts)
				if err != nil {
					t.Fatal(err)
				}
				again, _ := p.Submit(ctx, "t", nil, opts)
				if again != after {
					t.Fatalf("two submits after retention returned %s and %s", after, again)
				}
				if _, err := p.Get(ctx, after); err != nil {
					t.Fatalf("submit returned %s, which does not exist: %v", after, err)
				}
				var live []string
				for _, id := range []string{old, during, after} {
					if tk, err := p.Get(ctx, id); err == nil && !tk.Status.Terminal() && !slices.Contains(live, id) {
						live = append(live, id)
					}
				}
				if len(live) > 1 {
					t.Fatalf("live tasks for one idempotency key: %v (old %s, submitted during retention %s, after %s)", live, old, during, after)
				}
			})
		}
	}
}

// A task requeued below its shard's floor is claimed through its pointer
// (workers keep a pointer to an old task when they claim it), and its
// worker dies. The monitor's pointer check lowers the floor under it, so
// the lease's expiry is seen within minutes, not at the next full walk.
func TestALiveTaskBelowTheFloorIsSweptAgain(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	var ids []string
	for range 3 {
		id, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second})
		if _, err := p.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	x := ids[0]
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 5 * time.Second, StaleAfter: 10 * time.Second,
		RepairAfter: time.Minute, SweepMax: time.Minute, FullSweep: 6 * time.Hour, Clock: clk})
	tick := func() {
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 40 { // the floor passes the finished tasks
		tick()
	}
	if err := p.Requeue(ctx, x); err != nil {
		t.Fatal(err)
	}
	v, _ := taskio.LoadID(ctx, st, x, []int{1})
	if err := v.Task.ClaimBy("w", "c1", srv.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	// The worker dies at once, keeping the pointer as workers now do. The
	// bound: the pointer is checked repair_after after it was written, at
	// the shard's next sweep (sweep_max at most), then the task is swept
	// and read once it has stayed unchanged for stale_after.
	for i := range 36 { // 3 minutes; the full walk is 6 hours away
		tick()
		if got, _ := p.Get(ctx, x); got.Status == task.Pending {
			t.Logf("re-dispatched after %d ticks", i+1)
			return
		}
	}
	t.Fatal("a task requeued below the floor, claimed and abandoned, was not re-dispatched within 3 minutes")
}

// A task of a slot requeued below its shard's floor waits for the slot's
// holder (blocked). When the holder ends, the slot is granted to it, and
// the grant's announcement is lost. The requeue's pointer made the sweeps
// watch the blocked task, so the monitor's repair finds it pending and
// announces it within minutes, not at the next full walk (seed 170259: a
// pending task nobody could find for 15 minutes).
func TestARequeueWaitingForItsSlotBelowTheFloorIsWatched(t *testing.T) {
	ctx := context.Background()
	mst, srv, clk := fakeTime()
	st := s3store.NewFaults(mst)
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	x, err := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second, Slot: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{x, mustSubmit(t, p), mustSubmit(t, p)} {
		if _, err := p.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := monitor.New(ctx, mst, monitor.Config{Shards: 1, Interval: 5 * time.Second, StaleAfter: 10 * time.Second,
		RepairAfter: time.Minute, SweepMax: time.Minute, FullSweep: 6 * time.Hour, Clock: clk})
	tick := func() {
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 40 { // the floor passes the finished tasks
		tick()
	}
	holder, err := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second, Slot: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Requeue(ctx, x); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Get(ctx, x); got.Status != task.Blocked {
		t.Fatalf("requeued behind the slot's holder, the task is %s, want blocked", got.Status)
	}
	for range 36 { // the monitor checks the requeue's pointer, and deletes it
		tick()
	}
	if n := pointersTo(ctx, mst, x); n != 0 {
		t.Fatalf("%d pointers to the blocked task are left after 3 minutes, want the monitor to have checked them", n)
	}
	st.Inject(s3store.Fault{Op: s3store.OpPut, KeySuffix: ".ready", Err: s3store.ErrInjected503})
	if _, err := p.Cancel(ctx, holder); err != nil { // the slot goes to x, unannounced
		t.Fatal(err)
	}
	st.Clear()
	if got, _ := p.Get(ctx, x); got.Status != task.Pending {
		t.Fatalf("after its slot's holder was canceled the task is %s, want pending", got.Status)
	}
	for i := range 36 { // 3 minutes; the full walk is 6 hours away
		tick()
		if pointersTo(ctx, mst, x) > 0 {
			t.Logf("announced after %d ticks", i+1)
			return
		}
	}
	t.Fatal("a task granted its slot below the floor, whose announcement was lost, was not announced within 3 minutes")
}

func mustSubmit(t *testing.T, p *producer.Producer) string {
	t.Helper()
	id, err := p.Submit(context.Background(), "t", nil, producer.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// pointersTo counts the ready pointers to task id in shard 0.
func pointersTo(ctx context.Context, st s3store.Store, id string) int {
	n := 0
	page, _ := st.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{})
	for _, o := range page.Objects {
		if ptr, err := shards.ParsePointerKey(o.Key); err == nil && ptr.ID == id {
			n++
		}
	}
	return n
}

// A store that will not heal (bucket gone, access denied) ends Run with one
// error; an error that may heal keeps the usual tick pace.
func TestRunEndsOnAnUnusableStore(t *testing.T) {
	ctx := context.Background()
	gone := fmt.Errorf("%w: the bucket does not exist", s3store.ErrUnusable)
	t.Run("listing fails", func(t *testing.T) {
		st := s3store.NewFaults(mem.New())
		m, err := monitor.New(ctx, st, monitor.Config{Shards: 2, Interval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		st.Inject(s3store.Fault{Op: s3store.OpList, Err: gone})
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, s3store.ErrUnusable) {
				t.Fatalf("run ended with %v, want ErrUnusable", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("run did not end on an unusable store")
		}
	})
	t.Run("a write to a task fails", func(t *testing.T) {
		mst, srv, clk := fakeTime()
		st := s3store.NewFaults(mst)
		p, _ := producer.New(ctx, mst, producer.Config{Shards: 1, Clock: clk})
		id, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second})
		v, _ := taskio.LoadID(ctx, mst, id, []int{1})
		if err := v.Task.ClaimBy("w", "c1", srv.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		taskio.Update(ctx, mst, clock.System(), v.Task, v.ETag)
		m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Clock: clk})
		st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Err: gone})
		for range 20 {
			*srv = srv.Add(5 * time.Second)
			if _, err := m.Tick(ctx); err != nil {
				if !errors.Is(err, s3store.ErrUnusable) {
					t.Fatalf("tick: %v, want ErrUnusable", err)
				}
				return
			}
		}
		t.Fatal("ticks did not report that the re-dispatch's write is refused for good")
	})
	t.Run("an error that may heal keeps the pace", func(t *testing.T) {
		faulty := s3store.NewFaults(mem.New())
		st := s3store.NewCounter(faulty)
		m, err := monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		faulty.Inject(s3store.Fault{Op: s3store.OpList, Err: s3store.ErrInjected503})
		before := st.Counts().Of(s3store.OpList)
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := m.Run(rctx); err != nil {
			t.Fatalf("run: %v, want nil when its context ends", err)
		}
		if n := st.Counts().Of(s3store.OpList) - before; n < 2 || n > 14 {
			t.Fatalf("%d LISTs in 200ms at a 20ms interval: want one per tick", n)
		}
	})
}

// A requeue that lands while retention deletes a keyed task (before its
// first write: the record, or the tombstone) leaves one live task for the
// key, on every provider: a keyed task is tombstoned first everywhere, so
// its record is never deleted while the task can still come back.
func TestRetentionAndRequeueLeaveOneTaskPerIdempotencyKey(t *testing.T) {
	for _, provider := range []string{s3store.DeleteIgnored, s3store.DeleteHonoured} {
		t.Run(provider, func(t *testing.T) {
			ctx := context.Background()
			p, faulty, m, old, opts := keyedTaskDueForRetention(t, provider)

			fired := false
			hook := func(string) {
				if !fired {
					fired = true
					if err := p.Requeue(ctx, old); err != nil {
						t.Errorf("requeue during retention: %v", err)
					}
				}
			}
			faulty.Inject(s3store.Fault{Op: s3store.OpPut, Hook: hook})
			faulty.Inject(s3store.Fault{Op: s3store.OpDelete, Hook: hook})
			for range 2 {
				m.Tick(ctx)
			}
			if !fired {
				t.Fatal("retention made no write")
			}
			faulty.Clear()
			after, err := p.Submit(ctx, "t", nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			var live []string
			for _, id := range []string{old, after} {
				if tk, err := p.Get(ctx, id); err == nil && !tk.Status.Terminal() && !slices.Contains(live, id) {
					live = append(live, id)
				}
			}
			if len(live) > 1 {
				t.Fatalf("live tasks for one key: %v", live)
			}
		})
	}
}

// Two monitors retire one keyed task on a server that ignores a
// conditional DELETE (seed 160275 of the simulator). The second has listed
// the task when the first retires it and its record; the first's DELETE of
// the record is held on the way while the second reads the retired task
// and record, and a submit with the key comes; then it lands. The second
// monitor must leave the record to that DELETE: had it deleted the record
// too, the submit would have made a new record and task, the late DELETE
// would have deleted that record, and the next submit would have made a
// second live task for the key.
func TestALateRecordDeleteLeavesOneTaskPerIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	p, faulty, m1, old, opts, srv, clk := keyedTaskDueForRetentionAt(t, s3store.DeleteIgnored)
	f2 := s3store.NewFaults(faulty)
	m2, err := monitor.New(ctx, f2, monitor.Config{Shards: 2, Retention: time.Hour, RepairAfter: 100 * time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	held, release, m1done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	faulty.Inject(s3store.Fault{Op: s3store.OpDelete, KeyPrefix: "idempotency/", Times: 1, Hook: func(string) {
		close(held)
		<-release
	}})
	read := false
	f2.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", KeySuffix: ".json", Times: 1, Hook: func(string) {
		read = true
		go func() {
			defer close(m1done)
			m1.Tick(ctx)
		}()
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Error("the first monitor did not delete the record")
		}
	}})
	for i := 0; i < 4 && !read; i++ {
		m2.Tick(ctx)
	}
	if !read {
		t.Fatal("the second monitor did not read the task")
	}
	during, err := p.Submit(ctx, "t", nil, opts)
	if err != nil {
		t.Errorf("submit while the record's DELETE is on the way: %v", err)
	}
	close(release)
	<-m1done
	first, err := p.Submit(ctx, "t", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Submit(ctx, "t", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, id := range []string{old, during, first, second} {
		if tk, err := p.Get(ctx, id); err == nil && !tk.Status.Terminal() && !slices.Contains(live, id) {
			live = append(live, id)
		}
	}
	if len(live) != 1 || first != second {
		t.Fatalf("live tasks for one key: %v (old %s, submitted while the DELETE was held %s, after %s and %s)", live, old, during, first, second)
	}

	// A retired record whose DELETE failed is deleted by a later sweep (it
	// has been retired for task.RetiredRecordGrace by then), and its task
	// with it.
	if _, err := p.Cancel(ctx, first); err != nil {
		t.Fatal(err)
	}
	*srv = srv.Add(2 * time.Hour)
	faulty.Inject(s3store.Fault{Op: s3store.OpDelete, KeyPrefix: "idempotency/", Times: 1, Err: s3store.ErrInjected503})
	for range 2 {
		m2.Tick(ctx)
		m1.Tick(ctx)
	}
	if _, err := p.Get(ctx, first); err != nil {
		t.Fatalf("the task went while its retired record stayed (its DELETE failed): %v", err)
	}
	*srv = srv.Add(2 * time.Hour) // past the full walk, which finds the task again
	for range 2 {
		m1.Tick(ctx)
	}
	if _, err := faulty.Get(ctx, task.IdempotencyRecordKey("k")); err == nil {
		t.Fatal("the retired record outlived its grace")
	}
	if _, err := p.Get(ctx, first); err == nil {
		t.Fatal("the task outlived its retired record")
	}
}

// keyedTaskDueForRetention sets up, on a store that honours or ignores a
// conditional DELETE (provider), a canceled task with idempotency key "k"
// whose retention is due, and a monitor (through faulty, with no rules yet)
// that has swept once before the clock moved past the retention.
func keyedTaskDueForRetention(t *testing.T, provider string) (*producer.Producer, *s3store.Faults, *monitor.Monitor, string, producer.Options) {
	t.Helper()
	p, faulty, m, old, opts, _, _ := keyedTaskDueForRetentionAt(t, provider)
	return p, faulty, m, old, opts
}

// keyedTaskDueForRetentionAt is keyedTaskDueForRetention, and also returns
// the server time the test moves and the monitor's clock.
func keyedTaskDueForRetentionAt(t *testing.T, provider string) (*producer.Producer, *s3store.Faults, *monitor.Monitor, string, producer.Options, *time.Time, *clock.Authoritative) {
	t.Helper()
	ctx := context.Background()
	mst, srv, clk := fakeTime()
	var base s3store.Store = mst
	if provider == s3store.DeleteIgnored {
		base = deleteIgnoring{mst}
	}
	p, err := producer.New(ctx, base, producer.Config{Shards: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	opts := producer.Options{IdempotencyKey: "k"}
	old, _ := p.Submit(ctx, "t", nil, opts)
	if _, err := p.Cancel(ctx, old); err != nil {
		t.Fatal(err)
	}
	faulty := s3store.NewFaults(base)
	m, _ := monitor.New(ctx, faulty, monitor.Config{Shards: 2, Retention: time.Hour, RepairAfter: 100 * time.Hour, Clock: clk})
	m.Tick(ctx)
	*srv = srv.Add(2 * time.Hour)
	return p, faulty, m, old, opts, srv, clk
}

// Under direct dispatch the monitor moves the inbox of a worker whose
// lease expired to the overflow, once the expiry is past the margin by S3
// time, and publishes inbox_recovered; a live worker's inbox stays.
func TestMonitorRecoversADeadWorkersInbox(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, err := producer.New(ctx, st, producer.Config{Shards: 1, DispatchMode: shards.DispatchDirect, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	l := lease.New(st, clk, direct.LeaseKey("w1"), "w1#x", lease.Config{TTL: 10 * time.Second, Margin: 2 * time.Second})
	rec, _ := json.Marshal(direct.Record{Worker: "w1", Types: []string{"job"}})
	l.SetData(rec)
	if err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		id, err := p.Submit(ctx, "job", nil, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	keys := func(prefix string) int {
		page, _ := st.List(ctx, prefix, s3store.ListOptions{})
		return len(page.Objects)
	}
	if n := keys(direct.Inbox("w1")); n != 3 {
		t.Fatalf("%d entries in w1's inbox, want 3", n)
	}
	bus := events.NewBus()
	var mu sync.Mutex
	var got []events.Event
	bus.Subscribe("test", 16, func(e events.Event) { mu.Lock(); got = append(got, e); mu.Unlock() })
	m, err := monitor.New(ctx, st, monitor.Config{Shards: 1, DispatchMode: shards.DispatchDirect, LeaseMargin: 2 * time.Second,
		RepairAfter: time.Nanosecond, Clock: clk, Events: bus, // every tick: the test's ticks are a moment apart on the local clock
		StaleAfter: time.Hour}) // the tasks are not read (their repair would announce them): this test is about the inbox
	if err != nil {
		t.Fatal(err)
	}
	// Within the lease, and within the margin after it: nothing moves.
	for _, at := range []time.Duration{5 * time.Second, 11 * time.Second} {
		*srv = l.ExpiresAt().Add(at - 10*time.Second)
		s, err := m.Tick(ctx)
		if err != nil || s.Recovered != 0 {
			t.Fatalf("at %v: recovered %d, %v; want nothing", at, s.Recovered, err)
		}
	}
	*srv = l.ExpiresAt().Add(5 * time.Second)
	s, err := m.Tick(ctx)
	if err != nil || s.Recovered != 3 {
		t.Fatalf("past the margin: recovered %d, %v; want 3", s.Recovered, err)
	}
	if n, o := keys(direct.Inbox("w1")), keys(direct.OverflowPrefix); n != 0 || o != 3 {
		t.Fatalf("inbox %d, overflow %d after recovery; want 0 and 3", n, o)
	}
	bus.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Kind != events.InboxRecovered || got[0].Key != direct.Inbox("w1") {
		t.Errorf("events %+v, want one inbox_recovered for w1's inbox", got)
	}
}

// Keys written ahead of a sweep faster than it lists them (here new tasks;
// in seed 390163 the pointers the monitor's own repairs renewed for a
// backlog a pause left) must not keep it from ever listing again the keys
// behind its cursor: a dead worker's task there is re-dispatched.
func TestASweepChasedByNewKeysStillRedispatchesTheTasksBehindIt(t *testing.T) {
	ctx := context.Background()
	st, srv, clk := fakeTime()
	p, _ := producer.New(ctx, st, producer.Config{Shards: 1, Clock: clk})
	x, _ := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second})
	v, _ := taskio.LoadID(ctx, st, x, []int{1})
	if err := v.Task.ClaimBy("w", "c1", srv.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	// The worker dies at once.
	const page = 5
	m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, PageSize: page, Interval: 5 * time.Second, StaleAfter: 10 * time.Second,
		RepairAfter: time.Minute, SweepMax: time.Minute, FullSweep: 6 * time.Hour, Clock: clk})
	for i := range 60 { // 5 minutes
		for range page + 1 { // more new keys a tick than a sweep lists
			mustSubmit(t, p)
		}
		*srv = srv.Add(5 * time.Second)
		if _, err := m.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if got, _ := p.Get(ctx, x); got.Status != task.Running {
			t.Logf("re-dispatched after %d ticks", i+1)
			return
		}
	}
	t.Fatal("a dead worker's task behind the cursor of a sweep that new keys kept ahead of was not re-dispatched within 5 minutes")
}

// A pending task nobody claims keeps one ready pointer, however long it
// waits: the repair of the task and the repair of its stale pointers are
// one announcement each repair_after, not one each. Seed 127: each of a
// backlog's tasks gained a pointer a minute (the task's repair wrote one,
// and each stale pointer was replaced by a fresh one), 150 pointers for
// 18 tasks, and two of them went unclaimed for 20 minutes. Extra pointers
// (an inbox entry handed back, a resume's announcement) die out too.
func TestAPendingTaskKeepsOneReadyPointer(t *testing.T) {
	for _, extra := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d extra pointers", extra), func(t *testing.T) {
			ctx := context.Background()
			st, srv, clk := fakeTime()
			// S3 time moves between requests, as it does: two
			// announcements in one tick are two pointers.
			st.SetNow(func() time.Time {
				*srv = srv.Add(10 * time.Millisecond)
				return *srv
			})
			local := clock.NewManual(time.Now())
			p, _ := producer.New(ctx, st, producer.Config{Shards: 1})
			id, _ := p.Submit(ctx, "t", nil, producer.Options{})
			v, err := taskio.Load(ctx, st, task.Key(0, id))
			if err != nil {
				t.Fatal(err)
			}
			for i := range extra {
				if err := shards.Announce(ctx, st, v.Task, srv.Add(time.Duration(i+1)*time.Second), -1); err != nil {
					t.Fatal(err)
				}
			}
			m, _ := monitor.New(ctx, st, monitor.Config{Shards: 1, Interval: 5 * time.Second, RepairAfter: time.Minute, Clock: clk, Local: local})
			most := 0
			for i := range 10 * time.Minute / (5 * time.Second) {
				*srv = srv.Add(5 * time.Second)
				local.Advance(5 * time.Second)
				if _, err := m.Tick(ctx); err != nil {
					t.Fatal(err)
				}
				n := pointersTo(ctx, st, id)
				if i >= 36 { // 3 minutes: every pointer there was at the start is a repair_after old
					most = max(most, n)
				}
			}
			if r := m.Stats().Repaired; most != 1 || r == 0 || r > 10 {
				t.Fatalf("up to %d pointers to the task after 3 of 10 minutes pending, %d repairs: want one pointer, announced at most once a repair_after",
					most, r)
			}
		})
	}
}
