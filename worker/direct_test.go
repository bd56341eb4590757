package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
	"github.com/s3queue/s3queue/worker"
)

// directWorker is a direct-dispatch worker config with leases short
// enough for tests.
func (f *fleet) directWorker(id string) worker.Config {
	c := f.fast(id)
	c.DispatchMode = shards.DispatchDirect
	c.LeaseDuration, c.LeaseRenewalInterval = 3*time.Second, time.Second
	c.OverflowScavengeInterval = 2 * time.Second
	c.DiscoveryTTL = 200 * time.Millisecond
	c.SleepAfter, c.BellPoll, c.SleepScan, c.AwakeGrace = time.Second, 50*time.Millisecond, 10*time.Second, 2100*time.Millisecond
	return c
}

func (f *fleet) directProducer(st s3store.Store) *producer.Producer {
	f.t.Helper()
	p, err := producer.New(f.ctx, st, producer.Config{Shards: f.shards, LeaseMargin: 100 * time.Millisecond,
		DispatchMode: shards.DispatchDirect, DiscoveryTTL: 200 * time.Millisecond})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// keysUnder lists the keys under prefix.
func keysUnder(t *testing.T, st s3store.Store, prefix string) []string {
	t.Helper()
	page, err := st.List(context.Background(), prefix, s3store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range page.Objects {
		out = append(out, o.Key)
	}
	return out
}

// prefixPuts counts the PUTs under each prefix.
type prefixPuts struct {
	s3store.Store
	mu   sync.Mutex
	puts map[string]int
}

func (c *prefixPuts) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	c.mu.Lock()
	c.puts[strings.SplitN(key, "/", 2)[0]]++
	c.mu.Unlock()
	return c.Store.Put(ctx, key, body, opts)
}

func (c *prefixPuts) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[prefix]
}

// Under direct dispatch a producer routes each task to the inbox of a live
// worker, round robin, and the workers claim from their own inboxes: every
// task runs once, on the worker whose inbox it was routed to, and the
// inboxes are empty after.
func TestDirectDispatchRoutesTasksToInboxes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &prefixPuts{Store: mem.New(), puts: map[string]int{}}
		f := newFleet(t, st, 4)
		var mu sync.Mutex
		ranOn := map[string]string{}
		for _, id := range []string{"a", "b"} {
			f.start(f.directWorker(id), nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				mu.Lock()
				ranOn[tk.ID] = tk.Claim.Worker
				mu.Unlock()
				return nil, nil
			})
		}
		waitLive(t, st, 2)
		p := f.directProducer(st)
		var ids []string
		for range 20 {
			ids = append(ids, f.submit(p))
		}
		waitFor(t, "every task to run", 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(ranOn) == len(ids)
		})
		per := map[string]int{}
		for _, w := range ranOn {
			per[w]++
		}
		if per["a"] != 10 || per["b"] != 10 {
			t.Errorf("tasks ran %v, want 10 on each worker (round robin)", per)
		}
		if n := st.count("inbox"); n != len(ids) {
			t.Errorf("%d inbox entries written for %d tasks", n, len(ids))
		}
		for _, id := range ids {
			waitStatus(t, p, id, task.Succeeded)
		}
		waitFor(t, "the inboxes to empty", 10*time.Second, func() bool { return len(keysUnder(t, st, direct.InboxPrefix)) == 0 })
	})
}

// waitLive waits until n worker leases name the type "job".
func waitLive(t *testing.T, st s3store.Store, n int) {
	t.Helper()
	waitFor(t, "the workers' leases to name their types", 10*time.Second, func() bool {
		ws, _ := direct.ReadWorkers(context.Background(), st)
		live := 0
		for _, w := range ws {
			if w.Runs("job") {
				live++
			}
		}
		return live == n
	})
}

// A second worker started with the id of a live one is refused; once the
// first stops (its lease released), the id is free again.
func TestDirectWorkerIDConflict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		f.start(f.directWorker("w1"), nil, nil)
		_, err := worker.New(f.ctx, st, f.directWorker("w1"))
		if err == nil || !strings.Contains(err.Error(), `worker id "w1" is in use`) {
			t.Fatalf("second worker w1: %v, want refused as in use", err)
		}
		f.stop("w1")
		if _, err := worker.New(f.ctx, st, f.directWorker("w1")); err != nil {
			t.Fatalf("w1 after the first stopped: %v", err)
		}
	})
}

// A worker that loses its lease (here, another process deletes it and
// takes the name) stops at once: its running handler is canceled and Run
// returns ErrWorkerLeaseLost.
func TestDirectWorkerStopsOnLeaseLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		cfg := f.directWorker("w1")
		cfg.ShutdownGrace = time.Hour // a lost lease does not wait for it
		w, err := worker.New(f.ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		canceled := make(chan error, 1)
		w.Handle("job", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			close(started)
			<-ctx.Done()
			canceled <- context.Cause(ctx)
			return nil, ctx.Err()
		})
		done := make(chan error, 1)
		go func() { done <- w.Run(f.ctx) }()
		p := f.directProducer(st)
		id := f.submit(p)
		<-started
		if err := st.Delete(f.ctx, direct.LeaseKey("w1"), s3store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, worker.ErrWorkerLeaseLost) {
				t.Fatalf("Run returned %v, want ErrWorkerLeaseLost", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the worker did not stop after losing its lease")
		}
		select {
		case <-canceled:
		default:
			t.Fatal("the running handler was not canceled")
		}
		// Its task is handed back, as at a shutdown, for another worker.
		waitStatus(t, p, id, task.Pending)
	})
}

// A worker that dies with a full inbox loses nothing: its lease expires,
// another worker's scavenge moves every entry to the overflow and claims
// them all.
func TestDeadWorkersInboxIsRecoveredThroughTheOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		// The dead worker: it took its lease, runs "job", and never ran.
		deadCfg := f.directWorker("dead")
		dead, err := worker.New(f.ctx, st, deadCfg)
		if err != nil {
			t.Fatal(err)
		}
		dead.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		// Its lease is written by New without types; write one naming
		// them, as its first renewal would.
		if _, err := dead.Poll(f.ctx); err != nil {
			t.Fatal(err)
		}
		p := f.directProducer(st)
		// Route to the dead worker: it holds the only live lease whose
		// record names the type.
		var ids []string
		for range 12 {
			ids = append(ids, f.submit(p))
		}
		if n := len(keysUnder(t, st, direct.Inbox("dead"))); n != 12 {
			t.Fatalf("%d entries in the dead worker's inbox, want 12", n)
		}
		f.start(f.directWorker("alive"), nil, nil)
		// The dead worker's lease lapses after 3 s; the asleep fleet's
		// scavenge (every 2 s, stretched while it sleeps) moves the
		// entries, and each scavenge lists the overflow once.
		waitFor(t, "every task to succeed", time.Minute, func() bool {
			for _, id := range ids {
				if tk, err := p.Get(context.Background(), id); err != nil || tk.Status != task.Succeeded {
					return false
				}
			}
			return true
		})
		if left := keysUnder(t, st, direct.InboxPrefix); len(left) != 0 {
			t.Errorf("inbox entries left: %v", left)
		}
		waitFor(t, "the overflow to empty", 10*time.Second, func() bool { return len(keysUnder(t, st, direct.OverflowPrefix)) == 0 })
	})
}

// A producer that crashes between the task and its inbox entry loses
// nothing: the monitor's repair announces the pending task nobody picked
// up, and a worker claims it through the shared path.
func TestDirectTaskWithoutItsEntryIsFoundByTheRepair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		p := f.directProducer(st)
		// The task, as the producer wrote it before crashing.
		id, err := task.NewID(time.Now(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := task.New(id, task.ShardFor(id, 2), task.Spec{Type: "job", AvailableAt: time.Now()}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := taskio.Create(f.ctx, st, clock.System(), tk); err != nil {
			t.Fatal(err)
		}
		f.start(f.directWorker("w1"), nil, nil)
		f.runMonitor(st, monitor.Config{Shards: 2, DispatchMode: shards.DispatchDirect, StaleAfter: 500 * time.Millisecond})
		waitStatus(t, p, id, task.Succeeded)
	})
}

// runMonitor runs a monitor with cfg, quick to repair (ticks of 100ms,
// repair_after 1s), until the test ends.
func (f *fleet) runMonitor(st s3store.Store, cfg monitor.Config) {
	f.t.Helper()
	cfg.Interval, cfg.RepairAfter, cfg.LeaseMargin, cfg.Logger = 100*time.Millisecond, time.Second, 100*time.Millisecond, quiet
	m, err := monitor.New(f.ctx, st, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(f.ctx)
	f.t.Cleanup(stop)
	go m.Run(ctx)
}

// The mode is the queue's: a process configured for the other one
// refuses to open it, naming the fix.
func TestMixedDispatchModesRefuse(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	if _, err := producer.New(ctx, st, producer.Config{DispatchMode: shards.DispatchDirect}); err != nil {
		t.Fatal(err)
	}
	_, err := worker.New(ctx, st, worker.Config{Logger: quiet})
	if !errors.Is(err, shards.ErrLayoutMismatch) || !strings.Contains(err.Error(), `set dispatch_mode = "direct"`) {
		t.Fatalf("a shared-mode worker on a direct queue: %v", err)
	}
	other := mem.New()
	if _, err := producer.New(ctx, other, producer.Config{}); err != nil {
		t.Fatal(err)
	}
	_, err = monitor.New(ctx, other, monitor.Config{DispatchMode: shards.DispatchDirect})
	if !errors.Is(err, shards.ErrLayoutMismatch) || !strings.Contains(err.Error(), `set dispatch_mode = "shared"`) {
		t.Fatalf("a direct-mode monitor on a shared queue: %v", err)
	}
}

// listCounter counts the LISTs of inbox/, the HEADs of doorbells and the
// PUTs of leases.
type listCounter struct {
	s3store.Store
	mu                   sync.Mutex
	inbox, bells, leases int
}

func (c *listCounter) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if strings.HasSuffix(key, ".lease.json") {
		c.mu.Lock()
		c.leases++
		c.mu.Unlock()
	}
	return c.Store.Put(ctx, key, body, opts)
}

func (c *listCounter) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	if strings.HasPrefix(prefix, direct.InboxPrefix) {
		c.mu.Lock()
		c.inbox++
		c.mu.Unlock()
	}
	return c.Store.List(ctx, prefix, opts)
}

func (c *listCounter) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	if strings.HasSuffix(key, ".bell") {
		c.mu.Lock()
		c.bells++
		c.mu.Unlock()
	}
	return c.Store.Head(ctx, key)
}

func (c *listCounter) counts() (inbox, bells, leases int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inbox, c.bells, c.leases
}

// An idle direct-dispatch worker goes to sleep at its own doorbell: it
// marks itself asleep in its lease, keeps listing its inbox until every
// producer's view shows the mark, then reads the bell (a HEAD) instead of
// listing, and lists only every sleep_scan. A producer that routes a task
// to it rings the bell, and it wakes and runs the task within a bell poll.
func TestIdleDirectWorkerSleepsAtItsDoorbell(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &listCounter{Store: mem.New()}
		f := newFleet(t, st, 2)
		bus := events.NewBus()
		t.Cleanup(bus.Close)
		got := collect(bus)
		cfg := f.directWorker("w1")
		cfg.Events = bus
		ran := make(chan string, 1)
		f.start(cfg, nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			ran <- tk.ID
			return nil, nil
		})
		waitFor(t, "the idle worker to sleep", 10*time.Second, func() bool { return got.count(events.InboxAsleep) == 1 })
		// Past the grace (DiscoveryTTL + AwakeGrace) it only reads its bell.
		time.Sleep(cfg.DiscoveryTTL + cfg.AwakeGrace + 100*time.Millisecond)
		lists, bells, leases := st.counts()
		time.Sleep(6 * time.Second)
		lists2, bells2, leases2 := st.counts()
		if lists2 != lists {
			t.Errorf("%d LISTs of the inbox in 6s asleep (sleep_scan %v), want none", lists2-lists, cfg.SleepScan)
		}
		if want := int(6 * time.Second / cfg.BellPoll); bells2-bells < want-2 || bells2-bells > want+2 {
			t.Errorf("%d doorbell reads in 6s asleep, want about %d (one per bell_poll %v)", bells2-bells, want, cfg.BellPoll)
		}
		// Asleep, the lease is renewed three times less often (every 3s).
		if n := leases2 - leases; n < 1 || n > 2 {
			t.Errorf("%d lease renewals in 6s asleep, want 2 (every 3 × lease_renewal_interval %v)", n, cfg.LeaseRenewalInterval)
		}
		p := f.directProducer(st)
		id := f.submit(p)
		select {
		case got := <-ran:
			if got != id {
				t.Fatalf("ran %s, want %s", got, id)
			}
		case <-time.After(cfg.BellPoll + cfg.PollMax + time.Second):
			t.Fatalf("the sleeping worker did not run the task within a bell poll of its ring")
		}
		waitFor(t, "the worker to wake", 10*time.Second, func() bool { return got.count(events.InboxWoken) == 1 })
	})
}

// Dependencies, slots and retries behave as in the shared mode: a child
// released by its parent's end, a slot's next task and a retried task all
// come back through ready pointers, which the shard scans of direct-mode
// workers still hand out.
func TestDirectDispatchRunsDependenciesSlotsAndRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		var mu sync.Mutex
		var order []string
		failed := map[string]bool{}
		for _, id := range []string{"a", "b"} {
			f.start(f.directWorker(id), nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, tk.ID)
				if string(tk.Input) == `"flaky"` && !failed[tk.ID] {
					failed[tk.ID] = true
					return nil, errors.New("first attempt fails")
				}
				return nil, nil
			})
		}
		waitLive(t, st, 2)
		p := f.directProducer(st)
		submit := func(input string, o producer.Options) string {
			o.Retry = &task.RetryPolicy{InitialDelay: task.Duration(100 * time.Millisecond), MaxDelay: task.Duration(time.Second), Multiplier: 2}
			id, err := p.Submit(f.ctx, "job", input, o)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		parent := submit("flaky", producer.Options{})
		child := submit("child", producer.Options{DependsOn: []string{parent}})
		s1 := submit("s1", producer.Options{Slot: "k"})
		s2 := submit("s2", producer.Options{Slot: "k"})
		for _, id := range []string{parent, child, s1, s2} {
			waitStatus(t, p, id, task.Succeeded)
		}
		mu.Lock()
		defer mu.Unlock()
		at := func(id string) int { return slices.Index(order, id) }
		last := func(id string) int {
			n := -1
			for i, o := range order {
				if o == id {
					n = i
				}
			}
			return n
		}
		if at(child) < last(parent) || last(parent) == at(parent) {
			t.Errorf("the child ran before its parent's success, or the parent was not retried: %v", order)
		}
		if at(s2) < at(s1) {
			t.Errorf("the slot's second task ran before its first: %v", order)
		}
		if n := len(keysUnder(t, st, direct.InboxPrefix)); n != 0 {
			t.Errorf("%d inbox entries left", n)
		}
	})
}

// Scavengers race for the same overflow entries: the task's CAS decides,
// so each task runs exactly once, and every entry is deleted, by whoever
// claimed its task or found it claimed.
func TestScavengersRaceHarmlessly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		p := f.directProducer(st) // no worker yet: tasks take the shared path...
		var ids []string
		for range 30 {
			id := f.submit(p)
			ids = append(ids, id)
		}
		// ...so their pointers are removed, and overflow entries written
		// instead, as if a dead worker's inbox had been moved.
		for _, k := range keysUnder(t, st, "tasks/") {
			if shards.IsPointer(k) {
				if err := st.Delete(f.ctx, k, s3store.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, id := range ids {
			tk, err := p.Get(f.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Put(f.ctx, direct.OverflowKey(direct.Bucket(tk.AvailableAt), id, tk.Shard), nil, s3store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		runs := map[string]int{}
		for _, name := range []string{"a", "b", "c"} {
			cfg := f.directWorker(name)
			cfg.OverflowScavengeInterval = time.Second
			f.start(cfg, nil, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				mu.Lock()
				runs[tk.ID]++
				mu.Unlock()
				return nil, nil
			})
		}
		for _, id := range ids {
			waitStatus(t, p, id, task.Succeeded)
		}
		waitFor(t, "the overflow to empty", 10*time.Second, func() bool { return len(keysUnder(t, st, direct.OverflowPrefix)) == 0 })
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if runs[id] != 1 {
				t.Errorf("task %s ran %d times, want once", id, runs[id])
			}
		}
	})
}

// failingPuts fails every PUT of one key while fail is set, with a 503.
type failingPuts struct {
	s3store.Store
	key  string
	fail atomic.Bool
}

func (f *failingPuts) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if key == f.key && f.fail.Load() {
		return "", fmt.Errorf("503 slow down: %w", s3store.ErrInjected)
	}
	return f.Store.Put(ctx, key, body, opts)
}

// A renewal of the worker's lease that fails while the lease is still
// valid is retried a second later, and the scheduler waits for that: it
// does not step again at once, over and over, until then (the simulator's
// seed 2 hung in a busy loop: the overdue renewal made every wait 0).
func TestAFailedLeaseRenewalIsRetriedAfterAPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &failingPuts{Store: mem.New(), key: direct.LeaseKey("a")}
		f := newFleet(t, st, 1)
		cfg := f.directWorker("a")
		cfg.LeaseDuration, cfg.LeaseRenewalInterval = 10*time.Second, time.Second
		w, err := worker.New(f.ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		w.StepInbox(f.ctx)
		time.Sleep(cfg.LeaseRenewalInterval)
		st.fail.Store(true)
		if d := w.StepInbox(f.ctx); d <= 0 {
			t.Fatalf("after a failed renewal the next step is due in %v, want a pause before the retry", d)
		}
		st.fail.Store(false)
		time.Sleep(time.Second)
		if d := w.StepInbox(f.ctx); d <= 0 {
			t.Fatalf("after the retried renewal the next step is due in %v", d)
		}
	})
}

// lostOnce applies the next PUT of one key, once armed, and reports it
// failed, as a response lost on the way back does.
type lostOnce struct {
	s3store.Store
	key string
	arm atomic.Bool
	hit atomic.Bool
}

func (l *lostOnce) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	etag, err := l.Store.Put(ctx, key, body, opts)
	if err == nil && key == l.key && l.arm.CompareAndSwap(true, false) {
		l.hit.Store(true)
		return "", fmt.Errorf("500 after apply: %w", s3store.ErrInjected)
	}
	return etag, err
}

// A renewal of the worker's lease whose response is lost landed: the retry
// meets a 412, and the worker reads the lease back and finds its own write
// there, so it keeps the lease and keeps running (it stopped, with
// ErrWorkerLeaseLost, after every lost renewal response: 19 times a run in
// the simulator's direct-dispatch seeds).
func TestALostRenewalResponseDoesNotLoseTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &lostOnce{Store: mem.New(), key: direct.LeaseKey("a")}
		f := newFleet(t, st, 1)
		cfg := f.directWorker("a")
		w, err := worker.New(f.ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		ctx, cancel := context.WithCancel(f.ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		time.Sleep(time.Second / 2)
		st.arm.Store(true)
		time.Sleep(3 * cfg.LeaseDuration)
		if !st.hit.Load() {
			t.Fatal("no renewal was made")
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v after a renewal whose response was lost", err)
		default:
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v at a clean stop", err)
		}
	})
}

// failFirstDelete fails the first DELETE of each key under prefix.
type failFirstDelete struct {
	s3store.Store
	prefix string
	mu     sync.Mutex
	failed map[string]bool
}

func (f *failFirstDelete) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	f.mu.Lock()
	first := strings.HasPrefix(key, f.prefix) && !f.failed[key]
	if first {
		f.failed[key] = true
	}
	f.mu.Unlock()
	if first {
		return fmt.Errorf("503 slow down: %w", s3store.ErrInjected)
	}
	return f.Store.Delete(ctx, key, opts)
}

// An inbox entry whose DELETE fails is handed out again and deleted then:
// nobody else deletes it (the simulator's seed 160331 left an overflow
// entry behind this way).
func TestAFailedEntryDeleteIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &failFirstDelete{Store: mem.New(), prefix: direct.InboxPrefix, failed: map[string]bool{}}
		f := newFleet(t, st, 1)
		f.start(f.directWorker("a"), nil, nil)
		waitLive(t, st, 1)
		p := f.directProducer(st)
		id := f.submit(p)
		waitStatus(t, p, id, task.Succeeded)
		waitFor(t, "the inbox to empty", 10*time.Second, func() bool { return len(keysUnder(t, st, direct.InboxPrefix)) == 0 })
		if len(st.failed) != 1 {
			t.Fatalf("%d DELETEs of inbox entries failed, want the one the test injected", len(st.failed))
		}
	})
}

// A worker whose slots are all taken by a long task hands what waits in
// its inbox on to a worker that is not busy: those tasks run while the
// long one still does, not after it.
func TestABusyWorkerHandsItsInboxOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 1)
		release := make(chan struct{})
		defer close(release)
		ranOn := make(chan string, 10)
		handler := func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			if string(tk.Input) == `"long"` {
				<-release
				return nil, nil
			}
			ranOn <- tk.Claim.Worker
			return nil, nil
		}
		a := f.directWorker("a")
		a.Concurrency = 1
		f.start(a, nil, handler)
		waitLive(t, st, 1)
		p := f.directProducer(st)
		long, err := p.Submit(f.ctx, "job", "long", producer.Options{Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p, long, task.Running)
		var ids []string
		for range 3 { // a is the only live worker: they wait in its inbox
			ids = append(ids, f.submit(p))
		}
		f.start(f.directWorker("b"), nil, handler)
		for _, id := range ids {
			waitStatus(t, p, id, task.Succeeded)
			if got := <-ranOn; got != "b" {
				t.Errorf("a task waiting behind a's long task ran on %s, want b", got)
			}
		}
		if tk, _ := p.Get(f.ctx, long); tk.Status != task.Running {
			t.Fatalf("the long task is %s: the others did not run beside it", tk.Status)
		}
	})
}

// A scavenge that finds every slot taken owes its listing of the overflow
// to the first slot that frees: a worker kept full by its shards at every
// scavenge still claims what the overflow holds (the simulator's seed
// 320065: a pause left a dead worker's inbox in the overflow, the
// monitor's repair announced those tasks in the shards, and the one
// worker, full at every scavenge, never listed the overflow again; the
// entries stayed to the end).
func TestAFullWorkerStillScavengesTheOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 1)
		p := f.directProducer(st) // no worker yet: the backlog takes the shared path
		var backlog []string
		for range 12 {
			backlog = append(backlog, f.submit(p))
		}
		// The overflow's task, dated ten minutes ago (below the shard
		// scan's cursor): only its overflow entry finds it.
		at := time.Now().Add(-10 * time.Minute)
		id, err := task.NewID(at, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := task.New(id, task.ShardFor(id, 1), task.Spec{Type: "job", AvailableAt: at}, at)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := taskio.Create(f.ctx, st, clock.System(), tk); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []string
		started := make(chan struct{}, 100)
		cfg := f.directWorker("a")
		cfg.Concurrency = 1
		cfg.OverflowScavengeInterval = 3 * time.Second
		f.start(cfg, nil, func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
			mu.Lock()
			order = append(order, t.ID)
			mu.Unlock()
			started <- struct{}{}
			if t.ID != id {
				time.Sleep(1300 * time.Millisecond) // the slot stays taken across each scavenge
			}
			return nil, nil
		})
		<-started // full from now on, while the backlog lasts
		if _, err := st.Put(f.ctx, direct.OverflowKey(direct.Bucket(at), id, tk.Shard), nil, s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		// The backlog takes 12 × 1.3 s; without the owed listing the
		// overflow's task ran 13th, after it.
		waitFor(t, "every task to succeed", time.Minute, func() bool {
			for _, x := range append(backlog, id) {
				if tk, err := p.Get(f.ctx, x); err != nil || tk.Status != task.Succeeded {
					return false
				}
			}
			return true
		})
		mu.Lock()
		pos := slices.Index(order, id)
		mu.Unlock()
		if pos < 0 || pos > 4 {
			t.Errorf("the overflow's task ran %dth of %d, want within the first 5 (at the first slot freed after a scavenge)", pos+1, len(backlog)+1)
		}
		waitFor(t, "the overflow to empty", 10*time.Second, func() bool { return len(keysUnder(t, st, direct.OverflowPrefix)) == 0 })
	})
}

// stallingLists holds up, once armed, the next LIST under prefix for
// delay, as a slow store does, and then calls during (if set); and it
// records, at every claim (a PUT of a task object that makes it running),
// whether the claimer's own worker lease, as the store holds it then, had
// expired or was another process's.
type stallingLists struct {
	s3store.Store
	prefix string
	delay  time.Duration
	during func()
	arm    atomic.Bool
	mu     sync.Mutex
	holder string // the worker's holder of its lease
	claims int
	late   []string
}

func (s *stallingLists) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	if prefix == s.prefix && s.arm.CompareAndSwap(true, false) {
		time.Sleep(s.delay)
		if s.during != nil {
			s.during()
		}
	}
	return s.Store.List(ctx, prefix, opts)
}

func (s *stallingLists) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if strings.HasPrefix(key, "tasks/") && strings.HasSuffix(key, ".json") {
		if tk, err := task.Decode(body); err == nil && tk.Status == task.Running && tk.Claim != nil {
			info, err := lease.Peek(ctx, s.Store, direct.LeaseKey(tk.Claim.Worker))
			s.mu.Lock()
			s.claims++
			if err != nil || !time.Now().Before(info.ExpiresAt) || info.Holder != s.holder {
				s.late = append(s.late, fmt.Sprintf("%s claimed %s at %s, its lease held by %s until %s (%v)",
					tk.Claim.Worker, tk.ID, time.Now().Format("15:04:05.000"), info.Holder, info.ExpiresAt.Format("15:04:05.000"), err))
			}
			s.mu.Unlock()
		}
	}
	return s.Store.Put(ctx, key, body, opts)
}

// A worker whose scheduler stalled on a slow request past its own lease's
// expiry claims nothing until it has renewed the lease: it renews first
// and claims, or, if another process took the name meanwhile, claims
// nothing and stops (the simulator's seed 300177: a scavenge held up 32 s
// and 30 s by two delayed requests moved the worker's own inbox to the
// overflow and claimed three tasks from it 1m39s after its lease had
// expired, then renewed).
func TestAWorkerThatStalledPastItsLeaseRenewsBeforeItClaims(t *testing.T) {
	for _, takenOver := range []bool{false, true} {
		name := "the name still its own"
		if takenOver {
			name = "the name taken over"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { stallPastTheLease(t, takenOver) })
		})
	}
}

func stallPastTheLease(t *testing.T, takenOver bool) {
	st := &stallingLists{Store: mem.New(), prefix: direct.WorkersPrefix}
	f := newFleet(t, st, 1)
	cfg := f.directWorker("a")
	cfg.LeaseDuration, cfg.LeaseRenewalInterval = 3*time.Second, time.Second
	cfg.OverflowScavengeInterval = 2 * time.Second
	cfg.SleepAfter = time.Hour // awake: an asleep worker's lease lasts three times longer
	var lost atomic.Bool
	cfg.OnEvent = func(e worker.Event) {
		if e.Kind == events.WorkerLeaseLost {
			lost.Store(true)
		}
	}
	st.delay = 2 * cfg.LeaseDuration
	if takenOver {
		// Another process started as "a" once the lease expired.
		st.during = func() {
			l := lease.New(st.Store, clock.New(st.Store, clock.Config{}), direct.LeaseKey("a"), "a#other",
				lease.Config{TTL: time.Minute, Margin: cfg.LeaseMargin})
			if err := l.Acquire(f.ctx); err != nil {
				t.Errorf("take the expired lease over: %v", err)
			}
		}
	}
	w, err := worker.New(f.ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := lease.Peek(f.ctx, st, direct.LeaseKey("a"))
	if err != nil {
		t.Fatal(err)
	}
	st.holder = info.Holder
	ran := make(chan string, 1)
	w.Handle("job", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
		ran <- tk.ID
		return nil, nil
	})
	w.StepInbox(f.ctx) // the first renewal: the lease names "job"
	// A task found only in the overflow.
	at := time.Now()
	id, err := task.NewID(at, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := task.New(id, task.ShardFor(id, 1), task.Spec{Type: "job", AvailableAt: at}, at)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Create(f.ctx, st, clock.System(), tk); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(f.ctx, direct.OverflowKey(direct.Bucket(at), id, tk.Shard), nil, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// The scavenge is due: its LIST of workers/ is held up twice the
	// lease's duration, and the overflow's listing comes after it.
	time.Sleep(cfg.OverflowScavengeInterval)
	st.arm.Store(true)
	w.StepInbox(f.ctx)
	if st.arm.Load() {
		t.Fatal("the step made no scavenge")
	}
	if takenOver {
		if !lost.Load() {
			t.Error("the worker did not lose its lease to the process that took the name")
		}
	} else {
		select {
		case got := <-ran:
			if got != id {
				t.Fatalf("ran %s, want the overflow's task %s", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the overflow's task did not run")
		}
		if lost.Load() {
			t.Error("the worker lost a lease nobody took over")
		}
	}
	w.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if !takenOver && st.claims == 0 {
		t.Fatal("no claim was made")
	}
	for _, l := range st.late {
		t.Errorf("a claim without the lease: %s", l)
	}
}

// Under direct dispatch a child released by its parent's pass-on goes to a
// live worker's inbox, as a producer routes a new task, not to a ready
// pointer behind whatever the shards hold (the simulator's seed 20660: a
// child waited four minutes behind a shard's kept pointers), and runs
// within a poll or two.
func TestDirectDispatchRoutesAReleasedChildToAnInbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		ws := &putsByKind{Store: st}
		ran := make(chan string, 4)
		for _, id := range []string{"a", "b"} {
			f.start(f.directWorker(id), ws, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				ran <- tk.ID
				return nil, nil
			})
		}
		waitLive(t, st, 2)
		p := f.directProducer(st)
		parent, err := p.Submit(f.ctx, "job", nil, producer.Options{Delay: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		child, err := p.Submit(f.ctx, "job", nil, producer.Options{DependsOn: []string{parent}, ShardKey: "other"})
		if err != nil {
			t.Fatal(err)
		}
		expectRun(t, ran, parent, time.Minute, func() string { return "the parent never ran" })
		done := time.Now()
		expectRun(t, ran, child, time.Minute, func() string { return "the released child never ran" })
		if took := time.Since(done); took > 3*time.Second {
			t.Errorf("the released child ran %v after its parent", took)
		}
		if pointers, _ := ws.counts(); pointers != 0 {
			t.Errorf("the workers wrote %d ready pointers; want the child routed to an inbox", pointers)
		}
		waitStatus(t, p, child, task.Succeeded)
		if n := len(keysUnder(t, st, direct.InboxPrefix)); n != 0 {
			t.Errorf("%d inbox entries left", n)
		}
	})
}
