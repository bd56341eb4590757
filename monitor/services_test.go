package monitor

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// The services below are stepped directly, without a Monitor: a local
// clock the test moves, and a store that counts LISTs.

func serviceSetup(t *testing.T) (*s3store.Counter, *clock.Authoritative, clock.Local, *time.Time) {
	t.Helper()
	st := s3store.NewCounter(mem.New())
	now := time.Now()
	local := clock.LocalFunc(func() time.Time { return now })
	return st, clock.New(st, clock.Config{Local: local}), local, &now
}

// lists steps the service at local time and reports whether it listed.
func lists(t *testing.T, st *s3store.Counter, step func() error) bool {
	t.Helper()
	before := st.Counts()
	if err := step(); err != nil {
		t.Fatal(err)
	}
	return st.Counts().Sub(before).Of(s3store.OpList) > 0
}

func TestDepRepairBacksOffWhileItFindsNothing(t *testing.T) {
	ctx := context.Background()
	st, c, local, now := serviceSetup(t)
	r := depRepair{st: st, local: local, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		repairAfter: time.Minute, sweepMax: 4 * time.Minute,
		deps: func() deps.Env { return deps.Env{Store: st, Local: local, Now: c.Now, Counts: []int{1}} }}
	step := func(asleep bool) func() error {
		return func() error { var ts TickStats; return r.step(ctx, asleep, &ts) }
	}
	if lists(t, st, step(false)) {
		t.Fatal("the first tick repaired; a crash's leftovers wait a RepairAfter")
	}
	// Due after RepairAfter, then after 2, 4, 4 minutes (the ceiling).
	for i, wait := range []time.Duration{time.Minute, time.Minute, 2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		*now = now.Add(wait - time.Second)
		if lists(t, st, step(false)) {
			t.Fatalf("repair %d ran a second before its back-off of %v ended", i, wait)
		}
		*now = now.Add(time.Second)
		if !lists(t, st, step(false)) {
			t.Fatalf("repair %d did not run after its back-off of %v", i, wait)
		}
	}
	// While the fleet sleeps the back-off grows past SweepMax.
	*now = now.Add(4 * time.Minute)
	lists(t, st, step(true))
	if r.every != 8*time.Minute {
		t.Fatalf("asleep, the back-off is %v, want 8m", r.every)
	}
}

func TestInboxRecoveryRunsEveryRepairAfter(t *testing.T) {
	ctx := context.Background()
	st, c, local, now := serviceSetup(t)
	r := inboxRecovery{st: st, clock: c, local: local, log: slog.New(slog.NewTextHandler(io.Discard, nil)), every: time.Minute}
	step := func() error { var ts TickStats; return r.step(ctx, true, &ts) }
	if !lists(t, st, step) {
		t.Fatal("the first step did not list the workers")
	}
	*now = now.Add(time.Minute - time.Second)
	if lists(t, st, step) {
		t.Fatal("listed again before RepairAfter")
	}
	*now = now.Add(time.Second)
	if !lists(t, st, step) {
		t.Fatal("did not list again after RepairAfter")
	}
}

func TestRedispatcherRequeuesAnExpiredLeaseAndAnnouncesIt(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	server := time.Now()
	st.SetNow(func() time.Time { return server })
	local := clock.LocalFunc(func() time.Time { return server })
	c := clock.New(st, clock.Config{Local: local})
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "t", nil, producer.Options{Timeout: 10 * time.Second, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	v, err := taskio.LoadID(ctx, st, id, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	server = server.Add(2 * time.Second) // past its availability, which the producer stamps from S3 time
	if err := v.Task.ClaimBy("w", "claim-1", server); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, local, v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	var announced []string
	r := redispatcher{st: st, clock: c, local: local, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		rand: rnd.New(nil), margin: 2 * time.Second, known: make(map[string]known),
		deps: func() deps.Env { return deps.Env{Store: st, Local: local, Now: c.Now, Counts: []int{1}} },
		announce: func(_ context.Context, t *task.Task) (time.Time, error) {
			announced = append(announced, t.ID)
			return server, nil
		},
		publish: func(events.Kind, *task.Task, error) {}}
	key := v.Task.Key()
	for _, step := range []struct {
		after time.Duration // past the claim's expiry
		want  task.Status
	}{{time.Second, task.Running}, {3 * time.Second, task.Pending}} {
		server = v.Task.Claim.ExpiresAt.Add(step.after)
		iv, err := c.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ts TickStats
		if err := r.redispatch(ctx, key, iv, &ts); err != nil {
			t.Fatal(err)
		}
		got, err := taskio.Load(ctx, st, key)
		if err != nil {
			t.Fatal(err)
		}
		if got.Task.Status != step.want {
			t.Fatalf("%v past the expiry: %s, want %s", step.after, got.Task.Status, step.want)
		}
		if want := step.want == task.Pending; (len(announced) == 1) != want || ts.Redispatched == 1 != want {
			t.Fatalf("%v past the expiry: announced %v, %d redispatched", step.after, announced, ts.Redispatched)
		}
		if k := r.known[key]; k.etag != got.ETag {
			t.Fatalf("the cache holds ETag %q, the task is at %q", k.etag, got.ETag)
		}
	}
}

func TestPointerRepairDeletesAStalePointerToARunningTaskAndCoversIt(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	server := time.Now()
	st.SetNow(func() time.Time { return server })
	local := clock.LocalFunc(func() time.Time { return server })
	c := clock.New(st, clock.Config{Local: local})
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A pointer stamped at the submit, as a scan that read the task before
	// it was claimed would leave it.
	submitted := server
	ptr := s3store.ObjectInfo{Key: shards.PointerKey(0, 0, id, submitted)}
	if _, err := st.Put(ctx, ptr.Key, nil, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := taskio.LoadID(ctx, st, id, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	server = server.Add(2 * time.Second)
	if err := v.Task.ClaimBy("w", "claim-1", server); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, local, v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	var covered []string
	r := pointerRepair{st: st, log: slog.New(slog.NewTextHandler(io.Discard, nil)), repairAfter: time.Minute,
		known: make(map[string]known), counts: func() []int { return []int{1} },
		pauses: &pause.Watch{St: st, Local: local, Interval: pause.DefaultInterval, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		announce: func(context.Context, *task.Task) (time.Time, error) {
			t.Fatal("announced a running task")
			return time.Time{}, nil
		},
		cover:   func(_ int, key string, _ clock.Interval) { covered = append(covered, key) },
		publish: func(events.Kind, *task.Task, error) {}, publishCorrupt: func(string, error) {}}
	exists := func() bool {
		_, err := st.Head(ctx, ptr.Key)
		return err == nil
	}
	for _, step := range []struct {
		after time.Duration
		kept  bool
	}{{30 * time.Second, true}, {max(time.Minute, shards.PointerGrace) + time.Second, false}} {
		server = submitted.Add(step.after)
		iv, err := c.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ts TickStats
		if err := r.inspect(ctx, ptr, iv, &ts); err != nil {
			t.Fatal(err)
		}
		if exists() != step.kept {
			t.Fatalf("%v after the submit: pointer kept %v, want %v", step.after, exists(), step.kept)
		}
	}
	if len(covered) != 1 || covered[0] != v.Task.Key() {
		t.Fatalf("covered %v, want the running task's key %s once", covered, v.Task.Key())
	}
}
