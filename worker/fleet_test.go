package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fleet runs workers on one store until the test ends. Fleet tests run in
// a synctest bubble: time is virtual, and waiting for it costs nothing.
type fleet struct {
	t      *testing.T
	ctx    context.Context
	st     s3store.Store
	shards int
	mu     sync.Mutex
	stops  map[string]func()
}

func newFleet(t *testing.T, st s3store.Store, n int) *fleet {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fleet{t: t, ctx: ctx, st: st, shards: n, stops: map[string]func(){}}
}

// fast is a worker config with leases short enough for tests.
func (f *fleet) fast(id string) worker.Config {
	return worker.Config{ID: id, Shards: f.shards, Concurrency: 2, PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
		LeaseMargin: 100 * time.Millisecond, MemberTTL: 600 * time.Millisecond, StandbyPoll: 100 * time.Millisecond,
		ShutdownGrace: time.Second, Logger: quiet}
}

func (f *fleet) start(cfg worker.Config, st s3store.Store, h worker.Handler) *worker.Worker {
	f.t.Helper()
	if st == nil {
		st = f.st
	}
	w, err := worker.New(f.ctx, st, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if h == nil {
		h = func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil }
	}
	w.Handle("job", h)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	f.mu.Lock()
	f.stops[cfg.ID] = stop
	f.mu.Unlock()
	f.t.Cleanup(stop)
	return w
}

// producer opens a producer on st with the fleet's shard count and lease
// margin.
func (f *fleet) producer(st s3store.Store) *producer.Producer {
	f.t.Helper()
	p, err := producer.New(f.ctx, st, producer.Config{Shards: f.shards, LeaseMargin: 100 * time.Millisecond})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// submit submits one task of type "job" and returns its id.
func (f *fleet) submit(p *producer.Producer) string {
	f.t.Helper()
	id, err := p.Submit(f.ctx, "job", nil, producer.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// expectRun waits for a handler to report task id on ran; after within it
// fails with what, as the caller describes the failure.
func expectRun(t *testing.T, ran <-chan string, id string, within time.Duration, what func() string) {
	t.Helper()
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("ran %s, want %s", got, id)
		}
	case <-time.After(within):
		t.Fatal(what())
	}
}

func (f *fleet) stop(id string) {
	f.mu.Lock()
	stop := f.stops[id]
	f.mu.Unlock()
	stop()
}

// waitFor advances the bubble's virtual time in steps of 10ms until cond
// holds, or fails the test after within.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blockUntilCleanup returns a handler that runs until the test ends (or its
// context does): it holds its slot.
func blockUntilCleanup(t *testing.T) worker.Handler {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}
}

// shares returns each worker's active and drain shards, and whether every
// shard is polled by exactly one member.
func shares(ws []*worker.Worker, n int) (own, drain map[int][]int, exact bool) {
	own, drain = map[int][]int{}, map[int][]int{}
	count := make([]int, n)
	for i, w := range ws {
		member, a := w.Member()
		if !member {
			continue
		}
		own[i], drain[i] = a.Own, a.Drain
		for _, s := range append(append([]int(nil), a.Own...), a.Drain...) {
			count[s]++
		}
	}
	for _, c := range count {
		if c != 1 {
			return own, drain, false
		}
	}
	return own, drain, true
}

func TestShardsSpreadEvenlyAndRebalanceAsWorkersJoinAndLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, mem.New(), 8)
		var ws []*worker.Worker
		fair := func(members int) func() bool {
			return func() bool {
				own, drain, exact := shares(ws, 8)
				if !exact || len(own) != members {
					return false
				}
				for i := range own {
					// One active shard each; the inactive ones shared out
					// within one of each other.
					if len(own[i]) != 1 || len(drain[i]) > (8-members+members-1)/members {
						return false
					}
				}
				return true
			}
		}
		for i := 0; i < 4; i++ {
			cfg := f.fast(fmt.Sprintf("w%d", i))
			cfg.Dedicated = true
			ws = append(ws, f.start(cfg, nil, nil))
			waitFor(t, fmt.Sprintf("a fair share among %d workers", i+1), 20*time.Second, fair(i+1))
		}
		f.stop("w1")
		ws = append(ws[:1], ws[2:]...)
		waitFor(t, "the leaver's shards to move on", 20*time.Second, fair(3))
		for i := 4; i < 12; i++ {
			cfg := f.fast(fmt.Sprintf("w%d", i))
			cfg.Dedicated = true
			ws = append(ws, f.start(cfg, nil, nil))
		}
		// 11 workers, 8 shards: 8 members own one shard each, the rest own none.
		waitFor(t, "8 shards over 11 workers", 20*time.Second, func() bool {
			_, _, exact := shares(ws, 8)
			busy := 0
			for _, w := range ws {
				if _, a := w.Member(); len(a.Own) > 0 {
					busy++
				}
			}
			return exact && busy == 8
		})
	})
}

// A member that stops renewing (killed, or cut off from the bucket) loses
// its shards once its renewal is overdue by more than the lease margin,
// not only once its entry expires: the others re-read the fleet and take
// them over, and producers stop routing to it. Not before: a member is
// given its whole renewal interval and the margin.
func TestADeadMembersShardsMoveOnOnceItsRenewalIsOverdue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		a := f.fast("a")
		a.Dedicated, a.MemberTTL = true, 3*time.Second
		faulty := s3store.NewFaults(st)
		wa := f.start(a, faulty, nil)
		waitFor(t, "a to join", 10*time.Second, func() bool { m, _ := wa.Member(); return m })
		b := f.fast("b")
		b.Dedicated, b.MemberTTL = true, 3*time.Second
		wb := f.start(b, nil, nil)
		waitFor(t, "b to join", 10*time.Second, func() bool { _, as := wb.Member(); return len(as.Own) == 1 && as.Active == 2 })

		// a is cut off from the bucket: it can no longer renew. Its entry,
		// as it last wrote it, says when its next renewal was due.
		for _, op := range s3store.Ops() {
			faulty.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
		}
		fl, _, _ := shards.ReadFleet(f.ctx, st)
		me, _ := fl.Member("a")
		due := me.Renewed.Add(me.ExpiresAt.Sub(me.Renewed) / 3)
		waitFor(t, "b to take every shard", 20*time.Second, func() bool {
			_, as := wb.Member()
			return as.Active == 1 && len(as.Own)+len(as.Drain) == 4
		})
		now, _ := st.Now(f.ctx)
		if !now.After(due.Add(a.LeaseMargin)) {
			t.Fatalf("b took a's shards at %v, before a's renewal due at %v was overdue by the margin", now, due)
		}
		if !now.Before(me.ExpiresAt) {
			t.Fatalf("b took a's shards at %v, only after a's entry expired at %v: want them once its renewal is overdue", now, me.ExpiresAt)
		}
	})
}

// A member whose renewal is late but lands (a slow request) takes its
// shards back: being suspect costs a shard for a while, never the entry.
func TestASlowMemberTakesItsShardsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		a := f.fast("a")
		a.Dedicated, a.MemberTTL = true, 3*time.Second
		faulty := s3store.NewFaults(st)
		wa := f.start(a, faulty, nil)
		waitFor(t, "a to join", 10*time.Second, func() bool { m, _ := wa.Member(); return m })
		b := f.fast("b")
		b.Dedicated, b.MemberTTL = true, 3*time.Second
		wb := f.start(b, nil, nil)
		waitFor(t, "b to join", 10*time.Second, func() bool { _, as := wb.Member(); return len(as.Own) == 1 && as.Active == 2 })
		for _, op := range s3store.Ops() {
			faulty.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
		}
		waitFor(t, "b to take every shard", 20*time.Second, func() bool { _, as := wb.Member(); return as.Active == 1 })
		faulty.Clear()
		waitFor(t, "a to take its shard back", 20*time.Second, func() bool {
			_, aa := wa.Member()
			_, ab := wb.Member()
			return aa.Active == 2 && ab.Active == 2 && len(aa.Own) == 1 && len(ab.Own) == 1
		})
	})
}

func TestNoShardStarvesWhenSlotsRunOut(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p, err := producer.New(ctx, st, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < 4; s++ {
		for i := 0; i < 20; i++ {
			if _, err := p.Submit(ctx, "job", nil, producer.Options{ShardKey: fmt.Sprintf("key-%d", s)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var perShard [4]atomic.Int64
	release := make(chan struct{})
	w, err := worker.New(ctx, st, worker.Config{Shards: 4, Concurrency: 1, OwnShards: []int{0, 1, 2, 3}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
		perShard[tk.Shard].Add(1)
		<-release
		return nil, nil
	})
	// Each poll can claim one task (one slot); the next poll starts at the
	// next shard, so every shard is served in turn.
	for i := 0; i < 8; i++ {
		if _, err := w.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		release <- struct{}{}
		w.Wait()
	}
	var got []int64
	for s := range perShard {
		got = append(got, perShard[s].Load())
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if got[0] < 1 {
		t.Fatalf("claims per shard %v: a shard starved", got)
	}
}

func TestAnIdleFleetShrinksToOneSleepingMemberThatAProducerWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := s3store.NewCounter(mem.New())
		f := newFleet(t, st, 4)
		started := make(chan string, 10)
		var ws []*worker.Worker
		standbys := s3store.NewCounter(st) // the two that will stand by
		for i := 0; i < 3; i++ {
			cfg := f.fast(fmt.Sprintf("w%d", i))
			cfg.IdleLeave, cfg.SleepAfter, cfg.BellPoll, cfg.AwakeGrace = 300*time.Millisecond, 300*time.Millisecond, 50*time.Millisecond, 2100*time.Millisecond
			cfg.Dedicated = false
			if i == 0 {
				cfg.Dedicated = true // the first one joins an empty fleet anyway
			}
			var own s3store.Store
			if i > 0 {
				own = standbys
			}
			ws = append(ws, f.start(cfg, own, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				started <- tk.ID
				return nil, nil
			}))
		}
		waitFor(t, "the idle fleet to shrink to one sleeping member", 20*time.Second, func() bool {
			fl, _, err := shards.ReadFleet(f.ctx, st)
			return err == nil && len(fl.Members) == 1 && fl.Asleep
		})
		// Past its awake grace, the sleeping member reads the doorbell instead
		// of listing.
		time.Sleep(4 * time.Second) // let the awake grace (2.1s) and its last scan run out: a stretch of time under test, not a wait for work
		before, sbBefore := st.Counts(), standbys.Counts()
		time.Sleep(time.Second) // an idle stretch, measured: not a wait for background work
		idle, sbIdle := st.Counts().Sub(before), standbys.Counts().Sub(sbBefore)
		if idle.Of(s3store.OpList) > 0 {
			t.Fatalf("a sleeping fleet listed: %s", idle)
		}
		// While the fleet sleeps, standbys read it 5 times less often than
		// standby_poll (100ms here: 20 reads a second for two of them).
		if n := sbIdle.Of(s3store.OpGet); n > 8 {
			t.Fatalf("two standbys of a sleeping fleet read it %d times in a second, want at most 8", n)
		}
		if n := sbIdle.Of(s3store.OpHead); n > 0 {
			t.Fatalf("standbys made %d clock requests: the read of the fleet object dates itself", n)
		}
		// The sleeping member's entry lasts twice member_ttl (600ms here), so
		// it renews every 400ms instead of every 200ms.
		if n := idle.Sub(sbIdle).Of(s3store.OpPut); n > 3 {
			t.Fatalf("the sleeping member renewed %d times in a second, want at most 3", n)
		}
		fl, _, _ := shards.ReadFleet(f.ctx, st)
		p := f.producer(st)
		id := f.submit(p)
		expectRun(t, started, id, 10*time.Second, func() string { return "the sleeping member was not woken by the producer's ring" })
		fl, _, _ = shards.ReadFleet(f.ctx, st)
		if fl.Ring == 0 || len(fl.Members) == 0 {
			t.Fatal("the producer did not ring the doorbell")
		}
	})
}

func TestStandbysJoinWhenMembersAreSaturated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		block := blockUntilCleanup(t)
		first := f.fast("first")
		first.Concurrency = 1
		w0 := f.start(first, nil, block)
		waitFor(t, "the first worker to join", 10*time.Second, func() bool { m, _ := w0.Member(); return m })
		standby := f.fast("standby")
		w1 := f.start(standby, nil, block)
		p := f.producer(st)
		if m, _ := w1.Member(); m {
			t.Fatal("a second elastic worker joined an idle fleet")
		}
		for i := 0; i < 10; i++ {
			f.submit(p)
		}
		start := time.Now()
		waitFor(t, "the standby to join a saturated fleet", 20*time.Second, func() bool { m, _ := w1.Member(); return m })
		t.Logf("standby joined after %v", time.Since(start))
	})
}

func TestASnoozedTaskDoesNotHoldUpNewerOnes(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, st, worker.Config{Shards: 1, Concurrency: 1, OwnShards: []int{0}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 10)
	w.Handle("job", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
		ran <- tk.ID
		if tk.Input != nil {
			return nil, worker.RetryAfter(time.Hour, fmt.Errorf("later"))
		}
		return nil, nil
	})
	snoozed, _ := p.Submit(ctx, "job", map[string]bool{"snooze": true}, producer.Options{})
	if _, err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	w.Wait()
	if got := <-ran; got != snoozed {
		t.Fatalf("ran %s", got)
	}
	newer, _ := p.Submit(ctx, "job", nil, producer.Options{})
	for i := 0; i < 5; i++ {
		if _, err := w.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		w.Wait()
		select {
		case got := <-ran:
			if got != newer {
				t.Fatalf("ran %s, want the newer task", got)
			}
			return
		default:
		}
	}
	t.Fatal("a task snoozed for an hour blocked the newer task behind it")
}

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

func TestACorruptFleetObjectIsReportedAndReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		if _, err := st.Put(f.ctx, shards.FleetKey, []byte("{not json"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := shards.ReadFleet(f.ctx, st); !errors.Is(err, shards.ErrCorruptFleet) {
			t.Fatalf("ReadFleet of a corrupt object: %v, want ErrCorruptFleet", err)
		}
		var logs syncBuffer
		cfg := f.fast("w")
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		done := make(chan string, 1)
		f.start(cfg, nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			done <- tk.ID
			return nil, nil
		})
		p := f.producer(st)
		id := f.submit(p)
		expectRun(t, done, id, 10*time.Second, func() string { return "the task was not run with a corrupt fleet object in the bucket" })
		fl, _, err := shards.ReadFleet(f.ctx, st)
		if err != nil || len(fl.Members) != 1 {
			t.Fatalf("fleet after the worker joined: %+v, %v; want the worker's entry", fl, err)
		}
		if !strings.Contains(logs.String(), "fleet.json is corrupt") {
			t.Fatalf("the worker did not report the corrupt fleet object; logs:\n%s", logs.String())
		}
	})
}

// A member paced to list rarely (a large poll_batch at a trickle) is not
// idle between its listings: it does not fall asleep while work flows.
func TestAPacedMemberStaysAwakeWhileWorkTrickles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		cfg := f.fast("w")
		cfg.PollBatch, cfg.PollMax, cfg.SleepAfter, cfg.Dedicated = 10, 2*time.Second, 300*time.Millisecond, false
		f.start(cfg, nil, nil)
		p, err := producer.New(f.ctx, st, producer.Config{Shards: 2, LeaseMargin: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		slept := 0
		for i := 0; i < 40; i++ { // 5 tasks a second for 8 seconds: a listing every 2 seconds
			f.submit(p)
			time.Sleep(200 * time.Millisecond) // the arrival process under test, not a wait for work
			if i >= 10 {
				if fl, _, _ := shards.ReadFleet(f.ctx, st); fl.Asleep {
					slept++
				}
			}
		}
		if slept > 0 {
			t.Fatalf("the member was asleep at %d of 30 arrivals while work trickled in", slept)
		}
	})
}

// A member behind a backlog of short tasks asks for help too: a slot is
// free after almost every poll (a task ends every few milliseconds), but
// every poll leaves due work behind.
func TestStandbysJoinAMemberBehindABacklogOfShortTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := s3store.NewFaults(mem.New())
		f := newFleet(t, st, 4)
		short := func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			time.Sleep(100 * time.Millisecond)
			return nil, nil
		}
		first := f.fast("first")
		first.Concurrency = 16
		w0 := f.start(first, nil, short)
		waitFor(t, "the first worker to join", 10*time.Second, func() bool { m, _ := w0.Member(); return m })
		p := f.producer(st)
		for range 3000 {
			f.submit(p)
		}
		// Then S3's latency on tasks, so that a poll takes as long as it
		// does there and handlers end while it runs.
		st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Latency: 30 * time.Millisecond})
		st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Latency: 35 * time.Millisecond})
		st.Inject(s3store.Fault{Op: s3store.OpList, KeyPrefix: "tasks/", Latency: 40 * time.Millisecond})
		w1 := f.start(f.fast("standby"), nil, short)
		start := time.Now()
		waitFor(t, "the standby to join a member behind its backlog", 20*time.Second, func() bool { m, _ := w1.Member(); return m })
		t.Logf("standby joined after %v", time.Since(start))
	})
}

// A fleet grown for a burst shrinks to what its steady load needs once the
// burst is over, though a trickle spread over every member keeps each of
// them from ever being idle for idle_leave: the members whose slots the
// trickle leaves nearly unused leave together (1M tasks a day on MinIO kept
// 29 members of 4 slots at 1 % each, each listing its shard).
func TestAFleetGrownForABurstShrinksToItsSteadyLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		h := func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			d := 5 * time.Millisecond
			if string(tk.Input) == `"burst"` {
				d = 300 * time.Millisecond
			}
			time.Sleep(d)
			return nil, nil
		}
		for i := range 4 {
			cfg := f.fast(fmt.Sprintf("w%d", i))
			cfg.IdleLeave = 2 * time.Second
			f.start(cfg, nil, h)
		}
		p := f.producer(st)
		members := func() int {
			fl, _, err := shards.ReadFleet(f.ctx, st)
			if err != nil {
				return -1
			}
			return len(fl.Members)
		}
		for range 120 {
			if _, err := p.Submit(f.ctx, "job", json.RawMessage(`"burst"`), producer.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the burst to grow the fleet to 4 members", 30*time.Second, func() bool { return members() == 4 })
		// The trickle: a 5 ms task every 50 ms, about a task every 200 ms
		// for each of 4 members, a tenth of one member's 2 slots.
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := p.Submit(f.ctx, "job", json.RawMessage(`"trickle"`), producer.Options{}); err != nil && f.ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		}()
		defer func() { close(stop); <-done }()
		waitFor(t, "the fleet to shrink to one member under the trickle", 30*time.Second, func() bool { return members() == 1 })
	})
}

// A task submitted as a sleeping fleet's last member leaves it is picked up
// within about bell_poll, every time: the standbys learn the fleet sleeps
// only at their next turns, planned at the awake fleet's spacing, and
// until each has read since, the member watches the doorbell itself (50
// workers on MinIO waited 5 s for one pickup in three).
func TestAFleetJustAsleepAnswersItsDoorbellWithinABellPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 16)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f.ctx = ctx // the fleet sleeps five times: longer than newFleet's 2 minutes
		started := make(chan string, 10)
		for i := range 50 {
			f.start(worker.Config{ID: fmt.Sprintf("w%02d", i), Shards: 16, Logger: quiet}, nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				started <- tk.ID
				return nil, nil
			})
		}
		p := f.producer(st)
		asleep := func() bool {
			fl, _, err := shards.ReadFleet(f.ctx, st)
			return err == nil && fl.Asleep && len(fl.Members) == 0
		}
		for i := range 5 {
			waitFor(t, "the fleet to sleep with no member", 10*time.Minute, asleep)
			at := time.Now()
			id := f.submit(p)
			expectRun(t, started, id, time.Minute, func() string { return "the task was not picked up" })
			if d := time.Since(at); d > 2*time.Second {
				t.Errorf("pickup %d took %v after the fleet fell asleep, want at most 2 s (bell_poll 1.5 s)", i, d)
			}
		}
	})
}

// RetryLater snoozes by the task's retry policy: the n-th snooze waits the
// policy's delay for n, so a handler that keeps asking backs off.
func TestRetryLaterBacksOffBySnoozes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := mem.New()
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(ctx, st, worker.Config{Shards: 1, Concurrency: 1, OwnShards: []int{0}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var seen []int
		w.Handle("job", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			seen = append(seen, tk.Snoozes)
			return nil, worker.RetryLater(errors.New("busy"))
		})
		id, err := p.Submit(ctx, "job", nil, producer.Options{
			Retry: &task.RetryPolicy{InitialDelay: task.Duration(time.Minute), MaxDelay: task.Duration(3 * time.Minute), Multiplier: 2}})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute} {
			if _, err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			w.Wait()
			got, err := p.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != task.Pending || got.Snoozes != i+1 || got.Attempt != 0 {
				t.Fatalf("after snooze %d: %s, snoozes %d, attempt %d", i+1, got.Status, got.Snoozes, got.Attempt)
			}
			// Due the delay after the latest the S3 clock could be (the
			// history records the best estimate, up to a second before).
			if d := got.AvailableAt.Sub(got.UpdatedAt); d < want || d > want+time.Second {
				t.Errorf("snooze %d waits %v, want %v", i+1, d, want)
			}
			if r := got.History[len(got.History)-1].Reason; r != "snoozed: retry after "+want.String()+": busy" {
				t.Errorf("snooze %d: history says %q", i+1, r)
			}
			time.Sleep(want + 2*time.Second) // the fake clock: the snooze's delay passes
		}
		if fmt.Sprint(seen) != "[0 1 2]" {
			t.Errorf("the handler saw snoozes %v, want [0 1 2]", seen)
		}
	})
}
