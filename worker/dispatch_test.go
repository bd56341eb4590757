package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// queueSetup is a bucket of one shard holding the tasks of types (one per
// entry, submitted in order, a second apart), and a static worker on it
// configured by cfg whose handlers hold their tasks until release is
// closed. It records the hooks' calls.
type queueSetup struct {
	st      s3store.Store
	counter *s3store.Counter
	f       *s3store.Faults // under counter, for the tests that inject faults
	p       *producer.Producer
	w       *worker.Worker
	ids     []string
	release chan struct{}

	mu      sync.Mutex
	calls   []string // "kind:phase:task id"
	started []string
}

func newQueueSetup(t *testing.T, cfg worker.Config, types ...string) *queueSetup {
	t.Helper()
	return newQueueSetupWith(t, cfg, producer.Options{}, types...)
}

// newQueueSetupWith is newQueueSetup with the tasks submitted with opts.
func newQueueSetupWith(t *testing.T, cfg worker.Config, opts producer.Options, types ...string) *queueSetup {
	t.Helper()
	ctx := context.Background()
	s := &queueSetup{f: s3store.NewFaults(mem.New()), release: make(chan struct{})}
	s.counter = s3store.NewCounter(s.f)
	s.st = s.counter
	var err error
	if s.p, err = producer.New(ctx, s.st, producer.Config{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	for i, typ := range types {
		id, err := s.p.Submit(ctx, typ, map[string]int{"i": i}, opts)
		if err != nil {
			t.Fatal(err)
		}
		s.ids = append(s.ids, id)
		time.Sleep(time.Second) // virtual: ids in submit order
	}
	note := func(kind string) func(worker.Queued) {
		return func(q worker.Queued) {
			s.mu.Lock()
			s.calls = append(s.calls, kind+":"+string(q.Phase)+":"+q.TaskID)
			s.mu.Unlock()
		}
	}
	cfg.ID, cfg.Shards, cfg.OwnShards, cfg.Logger = "a", 1, []int{0}, quiet
	cfg.Hooks = worker.Hooks{OnReject: note("reject"), OnDrop: note("drop"), OnCancel: note("cancel"),
		OnDispatch: func(q worker.Queued) {
			s.mu.Lock()
			s.started = append(s.started, q.TaskID)
			s.mu.Unlock()
		}}
	if s.w, err = worker.New(ctx, s.st, cfg); err != nil {
		t.Fatal(err)
	}
	hold := func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		select {
		case <-s.release:
			return nil, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	for _, typ := range types {
		s.w.Handle(typ, hold)
	}
	return s
}

func (s *queueSetup) poll(t *testing.T) int {
	t.Helper()
	n, err := s.w.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return n
}

func (s *queueSetup) state(pool string) worker.QueueState {
	for _, q := range s.w.QueueStates() {
		if q.Pool == pool {
			return q
		}
	}
	return worker.QueueState{}
}

func (s *queueSetup) status(t *testing.T, i int) *task.Task {
	t.Helper()
	tk, err := s.p.Get(context.Background(), s.ids[i])
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func (s *queueSetup) hooks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// Under block a worker claims only what its handlers can start: the rest
// stays pending in the bucket, unclaimed, counted as waiting.
func TestBlockClaimsOnlyForFreeHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueSetup(t, worker.Config{MaxInFlight: 2}, "job", "job", "job", "job", "job")
		if n := s.poll(t); n != 2 {
			t.Fatalf("claimed %d, want 2", n)
		}
		q := s.state("default")
		if q.InFlight != 2 || q.Pending != 0 || q.Waiting != 3 {
			t.Errorf("gauges %+v: want 2 in flight, 0 pending, 3 waiting (the rest of the listing)", q)
		}
		for i := 2; i < 5; i++ {
			if st := s.status(t, i).Status; st != task.Pending {
				t.Errorf("task %d is %s, want pending (unclaimed)", i, st)
			}
		}
		if n := s.poll(t); n != 0 {
			t.Errorf("a full worker claimed %d more", n)
		}
		close(s.release)
		s.w.Wait()
		// The three left, two free handlers: two claims, and a third if
		// one of those handlers (released now, it returns at once) ended
		// while the poll's pipeline was still claiming. Never one pending.
		if n := s.poll(t); n < 2 || n > 3 {
			t.Errorf("after the handlers freed up, claimed %d, want 2 (or 3, one handler having ended meanwhile)", n)
		}
		if q := s.state("default"); q.Pending != 0 {
			t.Errorf("gauges %+v: under block nothing is claimed ahead of a free handler", q)
		}
		s.w.Wait()
	})
}

// Every policy, with a pool of one handler and one pending place: a poll
// finds two tasks (the first starts; the second waits, claimed in pending,
// or under block in the bucket), then a third arrives and the next poll
// finds it for a full pool (the default pool's room makes the poll read
// it).
func TestPoliciesOnAFullPool(t *testing.T) {
	for _, tc := range []struct {
		policy      worker.QueuePolicy
		claimed     int
		pending     []int // tasks claimed and waiting, by index
		inBucket    []int // tasks left or handed back, pending and unclaimed
		hooks       []string
		refused     int64
		dropped     int64
		released    int64
		thirdStarts bool
	}{
		{worker.Block, 1, nil, []int{1, 2}, nil, 0, 0, 0, false},
		{worker.Reject, 2, []int{1}, []int{2}, []string{"reject:waiting:2"}, 1, 0, 0, false},
		{worker.DropLatest, 2, []int{1}, []int{2}, []string{"drop:waiting:2"}, 0, 1, 0, false},
		{worker.DropOldest, 3, []int{2}, []int{1}, []string{"drop:pending:1"}, 0, 1, 1, true},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newQueueSetup(t, worker.Config{MaxInFlight: 4, Pools: []worker.Pool{
					{Name: "io", MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: tc.policy},
				}}, "io", "io")
				n := s.poll(t)
				id, err := s.p.Submit(context.Background(), "io", map[string]int{"i": 2}, producer.Options{})
				if err != nil {
					t.Fatal(err)
				}
				s.ids = append(s.ids, id)
				time.Sleep(time.Second)
				if n += s.poll(t); n != tc.claimed {
					t.Fatalf("claimed %d, want %d", n, tc.claimed)
				}
				if st := s.status(t, 0).Status; st != task.Running {
					t.Errorf("the first task is %s, want running", st)
				}
				for _, i := range tc.pending {
					if tk := s.status(t, i); tk.Status != task.Running || tk.Claim.Worker != "a" {
						t.Errorf("task %d is %s, want claimed by a", i, tk.Status)
					}
				}
				for _, i := range tc.inBucket {
					tk := s.status(t, i)
					if tk.Status != task.Pending || tk.Attempt != 0 {
						t.Errorf("task %d is %s at attempt %d, want pending at attempt 0", i, tk.Status, tk.Attempt)
					}
				}
				q := s.state("io")
				if q.InFlight != 1 || q.Pending != len(tc.pending) {
					t.Errorf("gauges %+v: want 1 in flight, %d pending", q, len(tc.pending))
				}
				var want []string
				for _, h := range tc.hooks {
					kind, rest, _ := cut2(h)
					want = append(want, kind+":"+rest[0]+":"+s.ids[atoi(rest[1])])
				}
				if got := s.hooks(); !equal(got, want) {
					t.Errorf("hooks %v, want %v", got, want)
				}
				st := s.w.Stats()
				if st.Refused != tc.refused || st.Dropped != tc.dropped || st.Released != tc.released {
					t.Errorf("stats %+v: want refused %d, dropped %d, released %d", st, tc.refused, tc.dropped, tc.released)
				}
				// The pending task starts when the handler frees up; a
				// released one is claimed again (attempt 1, not 2).
				close(s.release)
				s.w.Wait()
				s.poll(t)
				s.w.Wait()
				for i := range 3 {
					if tc.policy == worker.Block || tc.policy == worker.Reject || tc.policy == worker.DropLatest {
						if i == 2 {
							continue // left in the bucket, and may or may not be claimed by this poll
						}
					}
					tk := s.status(t, i)
					if tk.Status == task.Succeeded && tk.Attempt != 1 {
						t.Errorf("task %d succeeded at attempt %d, want 1: a release must not use an attempt", i, tk.Attempt)
					}
				}
			})
		})
	}
}

func cut2(h string) (string, []string, bool) {
	var parts []string
	start := 0
	for i := range len(h) {
		if h[i] == ':' {
			parts = append(parts, h[start:i])
			start = i + 1
		}
	}
	parts = append(parts, h[start:])
	return parts[0], parts[1:], len(parts) == 3
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Cancellation in each phase, under each policy that claims ahead: a task
// canceled while waiting (unclaimed) is canceled in the bucket and never
// claimed; one canceled while pending (claimed, its handler not started)
// is canceled at the pending lease's renewal, its handler never run; one
// canceled in flight has its handler's context canceled. The hooks say
// which phase.
func TestCancelInEachPhase(t *testing.T) {
	for _, policy := range []worker.QueuePolicy{worker.Reject, worker.DropLatest, worker.DropOldest} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				s := newQueueSetup(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: policy},
					"job", "job", "job")
				runCtx, stop := context.WithCancel(ctx)
				done := make(chan error)
				go func() { done <- s.w.Run(runCtx) }()
				synctest.Wait()
				// Task 0 runs, task 1 is pending (claimed ahead), task 2
				// waits in the bucket.
				if tk := s.status(t, 1); tk.Status != task.Running {
					t.Fatalf("task 1 is %s, want claimed ahead", tk.Status)
				}
				if q := s.state("default"); q.InFlight != 1 || q.Pending != 1 {
					t.Fatalf("gauges %+v: want 1 in flight and 1 pending", q)
				}
				for _, i := range []int{2, 1, 0} {
					requested, err := s.p.Cancel(ctx, s.ids[i])
					if err != nil {
						t.Fatal(err)
					}
					if want := i != 2; requested != want {
						t.Errorf("cancel of task %d: requested %v, want %v (canceled at once only while unclaimed)", i, requested, want)
					}
				}
				// The renewals (a third of the 30s timeout) find the requests.
				time.Sleep(11 * time.Second)
				synctest.Wait()
				for i := range 3 {
					if st := s.status(t, i).Status; st != task.Canceled {
						t.Errorf("task %d is %s, want canceled", i, st)
					}
				}
				s.mu.Lock()
				started := append([]string(nil), s.started...)
				s.mu.Unlock()
				if len(started) != 1 || started[0] != s.ids[0] {
					t.Errorf("handlers started for %v, want only task 0's: a task canceled while pending never starts", started)
				}
				got, want := s.hooks(), []string{"cancel:in-flight:" + s.ids[0], "cancel:pending:" + s.ids[1]}
				slices.Sort(got)
				if !equal(got, want) {
					t.Errorf("hooks %v, want %v", got, want)
				}
				stop()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// At shutdown, under each policy that claims ahead, the tasks waiting in
// pending go back to the bucket at once (released: pending, their attempt
// not used), the running one after its handler stops, and the unclaimed
// one was never touched: nothing is lost and no attempt is used.
func TestShutdownReleasesPending(t *testing.T) {
	for _, policy := range []worker.QueuePolicy{worker.Reject, worker.DropLatest, worker.DropOldest} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// A grace shorter than the tasks' timeout: the handler's
				// context would end at the timeout first.
				s := newQueueSetup(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 2, QueuePolicy: policy, ShutdownGrace: 10 * time.Second},
					"job", "job", "job", "job")
				runCtx, stop := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- s.w.Run(runCtx) }()
				synctest.Wait()
				if q := s.state("default"); q.InFlight != 1 || q.Pending != 2 {
					t.Fatalf("gauges %+v: want 1 in flight and 2 pending", q)
				}
				stop()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				for i := range 4 {
					if tk := s.status(t, i); tk.Status != task.Pending || tk.Attempt != 0 {
						t.Errorf("task %d is %s at attempt %d, want pending at attempt 0", i, tk.Status, tk.Attempt)
					}
				}
				if st := s.w.Stats(); st.Released != 3 {
					t.Errorf("released %d, want 3 (two pending, one running)", st.Released)
				}
			})
		})
	}
}

// queue.wait_ms runs from discovery to dispatch, waiting included: a task
// that a block pool found while its one handler was busy, and claimed 5s
// later, waited about 5s.
func TestQueueWaitIncludesWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1}, "job", "job")
		s.poll(t) // the first starts, the second waits in the bucket
		time.Sleep(5 * time.Second)
		close(s.release)
		synctest.Wait()
		s.poll(t) // claims the second from what the first poll listed
		s.w.Wait()
		h := s.w.QueueWait()["default"]
		if h.Count != 2 {
			t.Fatalf("%d waits recorded, want 2", h.Count)
		}
		if h.SumMs < 5000 {
			t.Errorf("waits sum to %.0f ms, want at least 5000 (the second task's wait)", h.SumMs)
		}
		if q := h.Quantile(1); q != 5000 {
			t.Errorf("the longest wait falls in the bucket up to %v ms, want 5000 (5s exactly, in virtual time)", q)
		}
	})
}

// A handler that panics under crash_policy requeue runs again at once on the
// same worker, ahead of the pool's pending tasks, at the next attempt, in
// one write.
func TestCrashRequeueRunsAgainFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 2, QueuePolicy: worker.Reject, CrashPolicy: worker.CrashRequeue},
			"job", "job")
		var mu sync.Mutex
		var order []string
		s.w.Handle("job", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			mu.Lock()
			order = append(order, tk.ID)
			mu.Unlock()
			if tk.ID == s.ids[0] && tk.Attempt == 1 {
				panic("boom")
			}
			return nil, nil
		})
		s.poll(t)
		s.w.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := []string{s.ids[0], s.ids[0], s.ids[1]}
		if !equal(order, want) {
			t.Errorf("handlers ran %v, want %v: the crashed task first, again, then the pending one", order, want)
		}
		tk, err := s.p.Get(ctx, s.ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status != task.Succeeded || tk.Attempt != 2 {
			t.Errorf("the crashed task is %s at attempt %d, want succeeded at 2", tk.Status, tk.Attempt)
		}
		if st := s.w.Stats(); st.Requeued != 1 || st.Panics != 1 {
			t.Errorf("stats %+v: want 1 panic, 1 requeue", st)
		}
	})
}

// What a drop-oldest eviction costs: the poll that finds a new task for a
// full pool lists once, reads the new task, releases the oldest pending one
// (a conditional PUT, and a PUT of the ready pointer that brings it back)
// and claims the new one (a conditional PUT).
func TestReleaseCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueSetup(t, worker.Config{MaxInFlight: 4, Pools: []worker.Pool{
			{Name: "io", MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: worker.DropOldest},
		}}, "io", "io")
		s.poll(t)
		if _, err := s.p.Submit(context.Background(), "io", nil, producer.Options{}); err != nil {
			t.Fatal(err)
		}
		before := s.counter.Counts()
		s.poll(t)
		after := s.counter.Counts()
		puts := after.Of(s3store.OpPut) - before.Of(s3store.OpPut)
		gets := after.Of(s3store.OpGet) - before.Of(s3store.OpGet)
		lists := after.Of(s3store.OpList) - before.Of(s3store.OpList)
		t.Logf("the evicting poll: PUT %d GET %d LIST %d", puts, gets, lists)
		if puts != 3 || gets != 1 || lists != 1 {
			t.Errorf("the evicting poll made PUT %d GET %d LIST %d, want PUT 3 (release, pointer, claim), GET 1, LIST 1", puts, gets, lists)
		}
		if st := s.w.Stats(); st.Released != 1 {
			t.Errorf("released %d, want 1", st.Released)
		}
		close(s.release)
		s.w.Wait()
	})
}

// A crashed handler's task requeued (crash_policy requeue) while the
// worker shuts down goes back to the bucket as the pending tasks do: the
// requeue's write lands after the pools closed, so the pool must not keep
// the task (never started, never released, the shutdown waiting for it).
func TestCrashRequeueDuringShutdownReleasesTheTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, CrashPolicy: worker.CrashRequeue, ShutdownGrace: 5 * time.Second}, "job")
		blocked, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s.w.Handle("job", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			once.Do(func() {
				// The requeue's write (the task's next PUT) waits for the
				// shutdown to begin.
				s.f.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: tk.ID + ".json", Times: 1,
					Hook: func(string) { close(blocked); <-gate }})
			})
			panic("boom")
		})
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.w.Run(runCtx) }()
		<-blocked
		stop()
		synctest.Wait() // Run has closed the pools and waits for the handlers
		close(gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if tk := s.status(t, 0); tk.Status != task.Pending || tk.Claim != nil {
			t.Errorf("task is %s (claim %+v), want pending again, released at shutdown", tk.Status, tk.Claim)
		}
		if st := s.w.Stats(); st.Requeued != 1 || st.Released != 1 {
			t.Errorf("stats %+v: want 1 requeue, then 1 release", st)
		}
	})
}

// A shutdown whose grace runs out while a task has been handed to a loop
// but its handler has not started yet (here, its OnDispatch hook is slow)
// cancels what runs and returns: a run not yet started has nothing to
// cancel.
func TestShutdownWhileARunStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, ShutdownGrace: time.Second}, "job")
		entered, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		// newQueueSetup's hooks are set; a worker of its own, with a slow
		// OnDispatch.
		w, err := worker.New(context.Background(), s.st, worker.Config{ID: "b", Shards: 1, OwnShards: []int{0}, Logger: quiet,
			MaxInFlight: 1, ShutdownGrace: time.Second,
			Hooks: worker.Hooks{OnDispatch: func(worker.Queued) {
				once.Do(func() { close(entered); <-gate })
			}}})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		})
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(runCtx) }()
		<-entered
		stop()
		// Run returns once the grace and the wait for late handlers run
		// out, the run still in its hook.
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		close(gate)
		synctest.Wait() // the run, canceled, ends with its loop
	})
}

// The scheduler renews the leases of pending tasks (tendPending) while the
// pool's loops take them: a task a loop took out of pending and ran is no
// longer the scheduler's to read (go test -race).
func TestRenewingPendingWhileALoopTakesOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 2, QueuePolicy: worker.Reject}, "job", "job", "job")
		ran := make(chan struct{})
		s.w.Handle("job", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			<-s.release
			if tk.ID == s.ids[2] {
				close(ran)
			}
			return nil, nil
		})
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.w.Run(runCtx) }()
		synctest.Wait()
		if q := s.state("default"); q.InFlight != 1 || q.Pending != 2 {
			t.Fatalf("gauges %+v: want 1 in flight, 2 pending", q)
		}
		// The renewal of task 1, the first pending, lets task 0's handler
		// return and waits until the loop runs task 2, whose commit then
		// runs as the scheduler goes on to task 2.
		s.f.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: s.ids[1] + ".json", Times: 1,
			Hook: func(string) {
				close(s.release)
				<-ran
			}})
		time.Sleep(11 * time.Second) // a third of the timeout: renewals are due
		synctest.Wait()
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if st := s.status(t, i).Status; st != task.Succeeded {
				t.Errorf("task %d is %s, want succeeded", i, st)
			}
		}
	})
}

// A drop-oldest pool hands its oldest pending task back for a newer one
// once it has waited poll_max; a lone worker whose one handler is busy must
// not trade its pending tasks back and forth for each other every
// poll_max (a release, a pointer and a claim each time): only task 2 is
// newer than what it holds.
func TestDropOldestDoesNotChurnOnALoneWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A timeout past the minute: the handler's context would end at
		// it.
		s := newQueueSetupWith(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: worker.DropOldest},
			producer.Options{Timeout: 2 * time.Minute}, "job", "job", "job")
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.w.Run(runCtx) }()
		time.Sleep(time.Minute) // task 0's handler holds its one handler
		synctest.Wait()
		if st := s.w.Stats(); st.Released > 1 || st.Claimed != 3 {
			t.Errorf("in a minute with nothing new: %d releases and %d claims of 3 tasks, want at most 1 release and 3 claims (stats %+v)", st.Released, st.Claimed, st)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A pending task's lease is renewed in time for a short lease too: with a
// 1.2s timeout and a 500ms lease margin the lease is certainly the
// worker's for 0.7s after each write, so renewing every second (a third of
// the timeout, at least a second) lets it lapse before its handler starts,
// and the worker then neither runs nor releases it: it stays claimed until
// the lease expires and the monitor requeues it, an attempt used.
func TestPendingLeaseRenewedInTimeForShortTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		margin := 500 * time.Millisecond
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: worker.Reject, LeaseMargin: margin})
		p, err := producer.New(ctx, s.st, producer.Config{Shards: 1, LeaseMargin: margin})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			id, err := p.Submit(ctx, "short", map[string]int{"i": i}, producer.Options{Timeout: 1200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			s.ids = append(s.ids, id)
			time.Sleep(time.Second)
		}
		s.w.Handle("short", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			if tk.ID == s.ids[0] {
				time.Sleep(900 * time.Millisecond) // task 1 waits in pending
			}
			return nil, nil
		})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- s.w.Run(runCtx) }()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		for i := range 2 {
			if tk := s.status(t, i); tk.Status != task.Succeeded {
				t.Errorf("task %d is %s, want succeeded", i, tk.Status)
			}
		}
		if st := s.w.Stats(); st.LeaseLost != 0 {
			t.Errorf("%d leases lost, want none", st.LeaseLost)
		}
		// The renewals are counted (s3queue_lease_renewals_total): the
		// pending task's, and the running one's.
		if st := s.w.Stats(); st.Renewed < 2 || st.RenewFailed != 0 {
			t.Errorf("%d renewals counted (%d failed), want at least 2, none failed", st.Renewed, st.RenewFailed)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A pending task whose cancel was requested and that the worker hands back
// at shutdown is canceled, not released: OnCancel says so, with phase
// pending, as when a renewal finds the request.
func TestCancelOfAPendingTaskAtShutdownCallsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newQueueSetup(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: worker.Reject, ShutdownGrace: time.Second},
			"job", "job")
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- s.w.Run(runCtx) }()
		synctest.Wait()
		if requested, err := s.p.Cancel(ctx, s.ids[1]); err != nil || !requested {
			t.Fatalf("cancel of the pending task: requested %v, %v", requested, err)
		}
		stop() // before the pending lease's renewal
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st := s.status(t, 1).Status; st != task.Canceled {
			t.Errorf("the pending task is %s, want canceled", st)
		}
		if got, want := s.hooks(), []string{"cancel:pending:" + s.ids[1]}; !equal(got, want) {
			t.Errorf("hooks %v, want %v", got, want)
		}
	})
}
