package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// twoPools is a static worker with the default pool (idle, with room) and
// a pool "slow" of one handler, and n slow tasks submitted a second apart:
// the first runs, the rest wait for the slow pool. Its handlers hold their
// tasks until finish is called. The worker runs (Run) until stop.
type twoPools struct {
	counter *s3store.Counter
	p       *producer.Producer
	w       *worker.Worker
	ids     []string
	stop    func()
	done    chan error

	mu      sync.Mutex
	hooks   []string // "kind:phase:task id"
	started []string
	finish  chan struct{} // one send finishes one running handler
}

func newTwoPools(t *testing.T, policy worker.QueuePolicy, n int) *twoPools {
	t.Helper()
	ctx := context.Background()
	s := &twoPools{counter: s3store.NewCounter(mem.New()), finish: make(chan struct{}), done: make(chan error, 1)}
	var err error
	if s.p, err = producer.New(ctx, s.counter, producer.Config{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id, err := s.p.Submit(ctx, "slow", map[string]int{"i": i}, producer.Options{Timeout: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		s.ids = append(s.ids, id)
		time.Sleep(time.Second) // virtual: ids in submit order
	}
	note := func(kind string) func(worker.Queued) {
		return func(q worker.Queued) {
			s.mu.Lock()
			s.hooks = append(s.hooks, kind+":"+string(q.Phase)+":"+q.TaskID)
			s.mu.Unlock()
		}
	}
	cfg := worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Logger: quiet,
		Pools: []worker.Pool{{Name: "slow", MaxInFlight: 1, QueuePolicy: policy}},
		Hooks: worker.Hooks{OnReject: note("reject"), OnDrop: note("drop"),
			OnDispatch: func(q worker.Queued) {
				s.mu.Lock()
				s.started = append(s.started, q.TaskID)
				s.mu.Unlock()
			}}}
	if s.w, err = worker.New(ctx, s.counter, cfg); err != nil {
		t.Fatal(err)
	}
	hold := func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		select {
		case <-s.finish:
			return nil, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	s.w.Handle("slow", hold)
	s.w.Handle("job", hold)
	runCtx, stop := context.WithCancel(ctx)
	s.stop = stop
	go func() { s.done <- s.w.Run(runCtx) }()
	return s
}

func (s *twoPools) end(t *testing.T) {
	t.Helper()
	s.stop()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
}

func (s *twoPools) startedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.started)
}

func (s *twoPools) hookList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.hooks...)
}

// window counts the requests the worker makes over d of virtual time.
func (s *twoPools) window(d time.Duration) s3store.Counts {
	synctest.Wait()
	before := s.counter.Counts()
	time.Sleep(d)
	synctest.Wait()
	return s.counter.Counts().Sub(before)
}

// TestRequestsWithOnePoolFull is a regression guard on what an otherwise
// idle worker costs while one of its pools is full and tasks wait for it:
// the default pool's room makes every poll list, and read what the listing
// brings; the tasks refused for the full pool must not make it poll at
// once again (a poll that claims nothing backs off as an empty one does),
// nor be read again while they are unchanged. Counted on the in-memory
// store over windows of 20 s of virtual time: about one LIST per poll_max
// (5 s), and no GET but the pause object's (one per 10 s), under every
// policy: a drop-oldest pool does not trade its pending tasks for the
// tasks that were waiting when it claimed them (before the fix: 602 GETs
// and 100 LISTs in the first window under block).
func TestRequestsWithOnePoolFull(t *testing.T) {
	const pauseReads = 2
	for _, tc := range []struct {
		policy     worker.QueuePolicy
		gets, puts int64 // in the first window
	}{
		{worker.Block, 0, 0},
		{worker.Reject, 0, 0},
		{worker.DropLatest, 0, 0},
		{worker.DropOldest, 0, 0},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newTwoPools(t, tc.policy, 10)
				time.Sleep(2 * time.Second) // the first polls: one runs, the rest wait
				for i, want := range [][2]int64{{tc.gets, tc.puts}, {0, 0}} {
					c := s.window(20 * time.Second)
					t.Logf("%s, slow pool full, 9 tasks waiting, window %d of 20 s: %s", tc.policy, i+1, c)
					if got := c.Of(s3store.OpList); got > 5 {
						t.Errorf("window %d: %d LISTs in 20 s, want at most 5 (one per poll_max, 5 s, and one more)", i+1, got)
					}
					if got := c.Of(s3store.OpGet); got > want[0]+pauseReads {
						t.Errorf("window %d: %d GETs in 20 s, want at most %d: a refused task unchanged is not read again", i+1, got, want[0]+pauseReads)
					}
					if got := c.Of(s3store.OpPut); got > want[1] {
						t.Errorf("window %d: %d PUTs in 20 s, want at most %d", i+1, got, want[1])
					}
				}
				s.end(t)
			})
		})
	}
}

// A pool full, its tasks waiting and the worker's polls backed off: a slot
// freeing in that pool makes the worker poll at once and claim the next
// task, rather than after the grown interval.
func TestFreedSlotInAFullPoolWakesThePoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTwoPools(t, worker.Block, 4)
		time.Sleep(30 * time.Second) // backed off to poll_max
		synctest.Wait()
		if n := s.startedCount(); n != 1 {
			t.Fatalf("%d started, want 1", n)
		}
		s.finish <- struct{}{}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if n := s.startedCount(); n != 2 {
			t.Errorf("10 ms after the slow pool's slot freed, %d started, want 2", n)
		}
		s.end(t)
	})
}

// One task refused again and again is reported once per distinct refusal
// (the task at one version): a task in the bucket that this worker reads
// again, unchanged, for the same full pool is not a new event. Under
// drop-oldest a task found older than every pending one is left waiting,
// as under block: no drop is reported for a task never claimed.
func TestRefusalsReportedOncePerTask(t *testing.T) {
	for _, policy := range []worker.QueuePolicy{worker.Reject, worker.DropLatest, worker.DropOldest} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newTwoPools(t, policy, 10)
				time.Sleep(30 * time.Second)
				synctest.Wait()
				seen := map[string]int{}
				for _, h := range s.hookList() {
					seen[h]++
					if policy == worker.DropOldest && h[:len("drop:waiting")] == "drop:waiting" {
						t.Errorf("hook %s: a task never claimed is waiting, not dropped", h)
					}
				}
				for h, n := range seen {
					if n > 1 {
						t.Errorf("hook %s called %d times in 30 s, want once", h, n)
					}
				}
				t.Logf("hooks: %d (%s)", len(s.hookList()), fmt.Sprint(s.hookList()))
				s.end(t)
			})
		})
	}
}

// Two fleet members with a drop-oldest slow pool of one handler (and four
// pending places) and the default pool idle, twenty slow tasks (30 s each,
// submitted a second apart: ten are held, the rest wait): every task runs once, at
// attempt 1, and the members trade pending tasks back and forth little: a
// task just claimed is not evicted by the listing that claimed it, nor by a
// task that was waiting when it was claimed, and a task refused is not
// read again while unchanged.
func TestDropOldestTwoWorkersChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := s3store.NewCounter(mem.New())
		p, err := producer.New(ctx, st, producer.Config{Shards: 2})
		if err != nil {
			t.Fatal(err)
		}
		var ws []*worker.Worker
		var dones []chan error
		runCtx, stop := context.WithCancel(ctx)
		for _, id := range []string{"a", "b"} {
			w, err := worker.New(ctx, st, worker.Config{ID: id, Shards: 2, Dedicated: true, Logger: quiet,
				Pools: []worker.Pool{{Name: "slow", MaxInFlight: 1, QueuePolicy: worker.DropOldest}}})
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("slow", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
				select {
				case <-time.After(30 * time.Second):
					return nil, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			ws, dones = append(ws, w), append(dones, done)
		}
		time.Sleep(3 * time.Second) // both members in the fleet: the tasks go to both shards
		const n = 20
		for i := range n {
			if _, err := p.Submit(ctx, "slow", map[string]int{"i": i}, producer.Options{Timeout: 10 * time.Minute}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		var claimed, released, succeeded int64
		for range 200 {
			time.Sleep(5 * time.Second)
			synctest.Wait()
			succeeded = 0
			for _, w := range ws {
				succeeded += w.Stats().Succeeded
			}
			if succeeded == n {
				break
			}
		}
		var per []string
		for _, w := range ws {
			s := w.Stats()
			claimed += s.Claimed
			released += s.Released
			per = append(per, fmt.Sprintf("%d/%d/%d", s.Claimed, s.Released, s.Succeeded))
		}
		c := st.Counts()
		t.Logf("%d tasks: %d claims, %d releases, %d succeeded (a, b: claimed/released/succeeded %v); %s", n, claimed, released, succeeded, per, c)
		if succeeded != n {
			t.Fatalf("%d of %d succeeded", succeeded, n)
		}
		// The ten tasks that arrive while the first ten are held are newer
		// work: each may evict a pending task (10 to 16 releases over 30
		// runs; before the fix 24 to 34, the same tasks traded back and
		// forth).
		if claimed != n+released || released > n {
			t.Errorf("%d claims and %d releases for %d tasks, want at most %d releases, and one claim per task and release", claimed, released, n, n)
		}
		stop()
		for _, d := range dones {
			if err := <-d; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A member whose slow pool is full, with due work of that pool left in its
// shard, is behind its shards even though its idle default pool has room:
// it says so in the fleet (busy) and asks for help, so that the work
// reaches another member rather than waiting for its one handler (sim
// seeds 500407, 500559: burst tasks waited 8 minutes behind a full pool).
func TestAMemberWithOnePoolFullAsksForHelp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := mem.New()
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(ctx, st, worker.Config{ID: "a", Shards: 1, Dedicated: true, Logger: quiet,
			Pools: []worker.Pool{{Name: "slow", MaxInFlight: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		w.Handle("slow", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		})
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		time.Sleep(3 * time.Second) // a member of the fleet
		for i := range 4 {
			if _, err := p.Submit(ctx, "slow", map[string]int{"i": i}, producer.Options{Timeout: 10 * time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		asked := false
		for range 30 {
			time.Sleep(time.Second)
			synctest.Wait()
			f, _, err := shards.ReadFleet(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			busy := false
			for _, m := range f.Members {
				busy = busy || m.ID == "a" && m.Busy
			}
			if busy || f.Want > 0 {
				asked = true
				break
			}
		}
		if !asked {
			t.Error("30 s with the slow pool full and 3 of its tasks waiting: the member never said it was busy nor asked for help")
		}
		close(release)
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// Tasks refused for a full pool in a drain shard (an inactive one, swept
// now and then on a back-off that grows to drain_max while its sweeps
// claim nothing) start once the pool's slot frees, not at the next sweep
// minutes later, nor never: a member idle for sleep_after puts the fleet
// to sleep, and a sleeping member sweeps no drain shard (sim seed 510535:
// two chain heads waited 7 minutes in a drain shard behind a pool of one
// handler, until the run ended). One member, default timings, a pool
// "jobs" of one handler; three jobs in a drain shard: the first runs for
// three minutes, and the second must start within a second of its end.
func TestRefusedTasksInADrainShardStartWhenThePoolFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()
		st := mem.New()
		f := newFleet(t, st, 4)
		f.ctx = ctx
		p := f.producer(st)
		key := ""
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("k%d", i); task.ShardFor(k, 4) == 3 {
				key = k
			}
		}
		var ids []string
		for range 3 {
			id, err := p.Submit(ctx, "job", nil, producer.Options{ShardKey: key, Timeout: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		// As if written while their shard was active: no ready pointer
		// announces them in a shard the member polls.
		page, err := st.List(ctx, "tasks/", s3store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			if strings.HasSuffix(o.Key, ".ready") {
				if err := st.Delete(ctx, o.Key, s3store.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		started := make(chan string, len(ids))
		release := make(chan struct{})
		w := f.start(worker.Config{ID: "a", Shards: 4, Logger: quiet, Pools: []worker.Pool{{Name: "jobs", Types: []string{"job"}, MaxInFlight: 1}}},
			nil, func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
				started <- tk.ID
				select {
				case <-release:
					return nil, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
		var first string
		select {
		case first = <-started:
		case <-time.After(time.Minute):
			t.Fatal("no job started within a minute")
		}
		time.Sleep(3 * time.Minute) // the drain sweeps back off, the other two refused
		synctest.Wait()
		if member, a := w.Member(); !member || !slices.Contains(a.Drain, 3) {
			t.Fatalf("member %v, assignment %+v: want shard 3 a drain shard", member, a)
		}
		select {
		case id := <-started:
			t.Fatalf("%s started while %s held the pool's one handler", id, first)
		default:
		}
		release <- struct{}{}
		select {
		case <-started:
		case <-time.After(time.Second):
			t.Fatal("the pool's slot freed with two of its tasks refused in a drain shard: none started within a second")
		}
		close(release)
	})
}

// A member woken by the sleeping fleet's wake time (the delayed tasks it
// saw coming due) that claims a task is not idle in that step: it does not
// put the fleet back to sleep at once, though its last work was long ago,
// while the task runs. Asleep again, it would sweep no drain shard: the
// tasks its sweep in that step found due and refused for the pool the
// claim filled would never start (sim seed 510535: the member slept 0.1 s
// after its safety scan's claim; two chain heads it had refused waited
// 7m39s, until the run ended). One worker, default timings, a pool "jobs"
// of one handler: a job in its own shard and two in a drain shard, all due
// two minutes on, the fleet asleep by then; the first to start holds the
// handler for 20 s.
func TestAMemberWokenByItsWakeTimeSweepsItsRefusedTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()
		st := mem.New()
		f := newFleet(t, st, 4)
		f.ctx = ctx
		p := f.producer(st)
		key := ""
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("k%d", i); task.ShardFor(k, 4) == 3 {
				key = k
			}
		}
		var ids []string
		for i := range 3 {
			o := producer.Options{Delay: 2 * time.Minute, Timeout: 10 * time.Minute}
			if i > 0 {
				o.ShardKey = key
			}
			id, err := p.Submit(ctx, "job", nil, o)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		// Written while the fleet was awake: no pointer announces them.
		page, err := st.List(ctx, "tasks/", s3store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			if strings.HasSuffix(o.Key, ".ready") {
				if err := st.Delete(ctx, o.Key, s3store.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		started := make(chan string, len(ids))
		release := make(chan struct{})
		w := f.start(worker.Config{ID: "a", Shards: 4, Logger: quiet, Pools: []worker.Pool{{Name: "jobs", Types: []string{"job"}, MaxInFlight: 1}}},
			nil, func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
				started <- tk.ID
				select {
				case <-release:
					return nil, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
		time.Sleep(time.Minute)
		synctest.Wait()
		fl, _, err := shards.ReadFleet(ctx, st)
		if err != nil || !fl.Asleep || len(fl.Members) != 0 {
			t.Fatalf("a minute on, want the idle fleet asleep with no member, got %+v (%v)", fl, err)
		}
		if due, _ := task.IDTime(ids[0]); fl.WakeAt.IsZero() || fl.WakeAt.After(due.Add(time.Second)) {
			t.Fatalf("the sleeping fleet wakes at %v, want by the jobs' due time %v", fl.WakeAt, due)
		}
		if member, _ := w.Member(); member {
			t.Fatal("the worker that put the fleet to sleep is still a member")
		}
		var first string
		select {
		case first = <-started:
		case <-time.After(3 * time.Minute):
			t.Fatal("no job started within three minutes of their due time")
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		select {
		case id := <-started:
			t.Fatalf("%s started while %s held the pool's one handler", id, first)
		default:
		}
		release <- struct{}{}
		select {
		case <-started:
		case <-time.After(time.Second):
			fl, _, _ := shards.ReadFleet(ctx, st)
			t.Fatalf("the pool's slot freed with two of its tasks refused in a drain shard: none started within a second (fleet asleep: %v)", fl.Asleep)
		}
		close(release)
	})
}
