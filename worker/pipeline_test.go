package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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

// inFlight counts the requests on task objects (their GETs and PUTs) under
// way at once, and notes, at each listing of a shard, how many GETs were.
type inFlight struct {
	s3store.Store
	mu         sync.Mutex
	now, most  int
	getting    int   // task GETs under way: claims' loads
	gets, puts int   // task requests in all
	listGets   []int // task GETs under way at each LIST of tasks/
}

func (f *inFlight) track(key string, put bool) func() {
	if !strings.HasPrefix(key, "tasks/") || !strings.HasSuffix(key, ".json") {
		return func() {}
	}
	f.mu.Lock()
	if put {
		f.puts++
	} else {
		f.gets++
		f.getting++
	}
	f.now++
	f.most = max(f.most, f.now)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.now--
		if !put {
			f.getting--
		}
		f.mu.Unlock()
	}
}

func (f *inFlight) Get(ctx context.Context, key string) (s3store.Object, error) {
	defer f.track(key, false)()
	return f.Store.Get(ctx, key)
}

func (f *inFlight) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	defer f.track(key, true)()
	return f.Store.Put(ctx, key, body, opts)
}

func (f *inFlight) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	if strings.HasPrefix(prefix, "tasks/") {
		f.mu.Lock()
		f.listGets = append(f.listGets, f.getting)
		f.mu.Unlock()
	}
	return f.Store.List(ctx, prefix, opts)
}

func (f *inFlight) WatchDates(fn func(s3store.DateSample)) { s3store.WatchDates(f.Store, fn) }

func (f *inFlight) reset() {
	f.mu.Lock()
	f.most, f.listGets, f.gets, f.puts = f.now, nil, 0, 0
	f.mu.Unlock()
}

// pipelineSetup is one static worker on one shard (cfg, with its ID,
// shards and store filled in) with n tasks waiting, whose task reads take
// 30 ms and task writes 35 ms (virtual time), over a store that counts
// the task requests in flight. Its handler runs h with the task's input i.
func pipelineSetup(t *testing.T, cfg worker.Config, n int, h func(ctx context.Context, i int)) (w *worker.Worker, f *inFlight) {
	ctx := context.Background()
	st := s3store.NewFaults(mem.New())
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]producer.Request, n)
	for i := range reqs {
		reqs[i] = producer.Request{Type: "job", Input: map[string]int{"i": i}}
	}
	for _, r := range p.SubmitBatch(ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Latency: 30 * time.Millisecond})
	st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Latency: 35 * time.Millisecond})
	f = &inFlight{Store: st}
	cfg.ID, cfg.Shards, cfg.OwnShards, cfg.Logger = "a", 1, []int{0}, quiet
	w, err = worker.New(ctx, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
		var in struct{ I int }
		if err := json.Unmarshal(tk.Input, &in); err != nil {
			return nil, worker.Permanent(err)
		}
		h(ctx, in.I)
		return nil, nil
	})
	f.reset()
	return w, f
}

// A member claims as many candidates at once as it has free slots, up to
// 64: their GETs are all in flight together, then their PUTs (no longer at
// most 8 at a time, the old batches).
func TestClaimsInFlightAreBoundedByFreeSlots(t *testing.T) {
	for _, tc := range []struct {
		name          string
		concurrency   int
		mostInFlight  int
		claimedByPoll int
	}{
		{"4 slots: 4 claims at once", 4, 4, 4},
		{"64 slots: 64 claims at once", 64, 64, 64},
		{"100 slots: at most 64 claims at once", 100, 64, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				w, f := pipelineSetup(t, worker.Config{Concurrency: tc.concurrency}, 150, func(ctx context.Context, _ int) {
					select {
					case <-release:
					case <-ctx.Done():
					}
				})
				n, err := w.Poll(context.Background())
				if err != nil || n != tc.claimedByPoll {
					t.Fatalf("poll claimed %d tasks (%v), want %d", n, err, tc.claimedByPoll)
				}
				if f.most != tc.mostInFlight {
					t.Errorf("at most %d task requests were in flight at once, want %d", f.most, tc.mostInFlight)
				}
				close(release)
				w.Wait()
				if s := w.Stats(); s.Claimed != int64(n) || s.Succeeded != int64(n) {
					t.Errorf("stats %+v: want %d claimed and succeeded", s, n)
				}
			})
		})
	}
}

// Under a backlog, a member whose slots free up while it claims lists the
// shard again while claims are still in flight, not after the last of
// them: some listings are made while claims' GETs are under way (before
// the pipeline, the scheduler listed only between batches of claims).
// Nothing is claimed twice: each task is read once and claimed once.
func TestABacklogIsListedAheadWhileClaimsAreInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tasks = 600
		var succeeded atomic.Int64
		done := make(chan struct{})
		cfg := worker.Config{Concurrency: 64, OnEvent: func(e worker.Event) {
			if e.Kind == "succeeded" && succeeded.Add(1) == tasks {
				close(done)
			}
		}}
		// Handlers of 10 to 14 ms, so that slots free up at different
		// times.
		w, f := pipelineSetup(t, cfg, tasks, func(_ context.Context, i int) {
			time.Sleep(time.Duration(10+i%5) * time.Millisecond)
		})
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		<-done
		cancel()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		ahead := 0
		for _, gets := range f.listGets {
			if gets > 0 {
				ahead++
			}
		}
		if ahead == 0 {
			t.Errorf("none of %d listings was made while claims' GETs were in flight", len(f.listGets))
		}
		if s := w.Stats(); s.Claimed != tasks || s.Succeeded != tasks {
			t.Errorf("stats %+v: want %d claimed and succeeded", s, tasks)
		}
		if f.gets != tasks || f.puts != 2*tasks {
			t.Errorf("%d GETs and %d PUTs of task objects for %d tasks, want one GET and two PUTs each (the claim, the commit)", f.gets, f.puts, tasks)
		}
	})
}

// The candidates of one listing are attempted in the window's order
// (priority, then key) also when they are claimed many at once and the
// pipeline lists ahead: what the OnAttempt hook sees between two
// listings follows that listing's order.
func TestPipelinedAttemptsFollowTheWindowOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := s3store.NewFaults(mem.New())
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		prios := []task.Priority{task.PriorityLow, task.PriorityDefault, task.PriorityHigh}
		for i := range 300 {
			if _, err := p.Submit(ctx, "job", map[string]int{"i": i}, producer.Options{Priority: prios[i%3]}); err != nil {
				t.Fatal(err)
			}
		}
		st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Latency: 30 * time.Millisecond})
		st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Latency: 35 * time.Millisecond})
		var window map[string]int // key -> place in the last window's order
		last, windows, attempts := -1, 0, 0
		var bad []string
		hooks := worker.Hooks{
			OnWindow: func(_ int, win []shards.Candidate) {
				windows++
				window, last = make(map[string]int, len(win)), -1
				// Stable by rank: the window comes in key order.
				i := 0
				for _, pr := range []task.Priority{task.PriorityHigh, task.PriorityDefault, task.PriorityLow} {
					for _, c := range win {
						if c.Priority == pr {
							window[c.Key] = i
							i++
						}
					}
				}
			},
			OnAttempt: func(_ int, c shards.Candidate) {
				attempts++
				i, ok := window[c.Key]
				if !ok {
					return
				}
				if i < last {
					bad = append(bad, c.Key)
				}
				last = i
			},
		}
		w, err := worker.New(ctx, st, worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Concurrency: 64, Logger: quiet, Hooks: hooks})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
		for w.Stats().Succeeded < 300 {
			if _, err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			w.Wait()
		}
		if windows < 2 || attempts < 300 {
			t.Errorf("%d windows and %d attempts, want several windows and an attempt per task", windows, attempts)
		}
		if len(bad) > 0 {
			t.Errorf("%d candidates attempted before one their window ranks ahead of them: %v", len(bad), bad)
		}
	})
}

// TestMemberThroughputWithS3Latencies measures, in virtual time, how many
// short tasks one member runs a second when each request takes what it
// takes on S3 (GET 30 ms, PUT 35 ms, LIST 40 ms): 2,000 tasks waiting, a
// 10 ms handler, 16 and 64 slots (docs/performance.md, "One member's
// throughput"). The in-memory store serves everything else at once, so it
// shows what the claim pipeline keeps up, not what a server does; it
// checks only that every task ran once. Opt-in, as the figures are for
// the docs:
//
//	S3QUEUE_MEASURE=1 go test ./worker -run TestMemberThroughputWithS3Latencies -v
func TestMemberThroughputWithS3Latencies(t *testing.T) {
	if os.Getenv("S3QUEUE_MEASURE") == "" {
		t.Skip("set S3QUEUE_MEASURE=1 to measure")
	}
	for _, slots := range []int{16, 64} {
		t.Run(fmt.Sprintf("%d slots", slots), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const tasks = 2000
				var succeeded atomic.Int64
				done := make(chan struct{})
				cfg := worker.Config{Concurrency: slots, OnEvent: func(e worker.Event) {
					if e.Kind == "succeeded" && succeeded.Add(1) == tasks {
						close(done)
					}
				}}
				w, f := pipelineSetup(t, cfg, tasks, func(context.Context, int) { time.Sleep(10 * time.Millisecond) })
				f.Store.(*s3store.Faults).Inject(s3store.Fault{Op: s3store.OpList, Latency: 40 * time.Millisecond})
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan error, 1)
				began := time.Now()
				go func() { ran <- w.Run(ctx) }()
				<-done
				took := time.Since(began)
				cancel()
				if err := <-ran; err != nil {
					t.Fatal(err)
				}
				if s := w.Stats(); s.Claimed != tasks || s.Succeeded != tasks {
					t.Errorf("stats %+v: want %d claimed and succeeded", s, tasks)
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				t.Logf("%d slots: %d tasks in %v of virtual time: %.0f tasks/s; task requests per task: GET %.3f, PUT %.3f; at most %d in flight",
					slots, tasks, took, tasks/took.Seconds(), float64(f.gets)/tasks, float64(f.puts)/tasks, f.most)
			})
		})
	}
}
