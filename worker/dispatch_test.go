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
	ctx := context.Background()
	s := &queueSetup{counter: s3store.NewCounter(mem.New()), release: make(chan struct{})}
	s.st = s.counter
	var err error
	if s.p, err = producer.New(ctx, s.st, producer.Config{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	for i, typ := range types {
		id, err := s.p.Submit(ctx, typ, map[string]int{"i": i}, producer.Options{})
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
		if q.InFlight != 2 || q.Pending != 0 || q.Waiting != 2 {
			t.Errorf("gauges %+v: want 2 in flight, 0 pending, 2 waiting (the rest of the listing)", q)
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
		if n := s.poll(t); n != 2 {
			t.Errorf("after the handlers freed up, claimed %d, want 2", n)
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
				s := newQueueSetup(t, worker.Config{MaxInFlight: 1, MaxQueueDepth: 2, QueuePolicy: policy},
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
