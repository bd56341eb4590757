package worker_test

import (
	"context"
	"encoding/json"
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

// claimSetup is one static worker on one shard whose task reads take 30 ms
// and task writes 35 ms (virtual time), with n tasks waiting and handlers
// that hold their slots until release is closed.
func claimSetup(t *testing.T, concurrency, n int) (w *worker.Worker, st *s3store.Faults, release chan struct{}) {
	ctx := context.Background()
	st = s3store.NewFaults(mem.New())
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := p.Submit(ctx, "job", map[string]int{"i": i}, producer.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Latency: 30 * time.Millisecond})
	st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Latency: 35 * time.Millisecond})
	w, err = worker.New(ctx, st, worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Concurrency: concurrency, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	release = make(chan struct{})
	w.Handle("job", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	return w, st, release
}

// A member with free slots claims the candidates of a listing all at once
// (up to 64): a poll that fills 16 slots takes one claim's time, not
// sixteen (a GET and a conditional PUT each, about 65 ms), nor two (the
// batches of 8 of before).
func TestFreeSlotsAreClaimedSeveralAtATime(t *testing.T) {
	for _, tc := range []struct {
		name            string
		concurrency     int
		claimed         int
		atLeast, atMost time.Duration
	}{
		{"sixteen slots claim in one round", 16, 16, 65 * time.Millisecond, 100 * time.Millisecond},
		{"one slot claims one", 1, 1, 65 * time.Millisecond, 2 * 65 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, _, release := claimSetup(t, tc.concurrency, 20)
				began := time.Now()
				n, err := w.Poll(context.Background())
				took := time.Since(began)
				if err != nil || n != tc.claimed {
					t.Fatalf("poll claimed %d tasks (%v), want %d", n, err, tc.claimed)
				}
				if took < tc.atLeast || took > tc.atMost {
					t.Errorf("the poll took %v, want %v to %v", took, tc.atLeast, tc.atMost)
				}
				close(release)
				w.Wait()
				if s := w.Stats(); s.Claimed != int64(tc.claimed) || s.Succeeded != int64(tc.claimed) {
					t.Errorf("stats %+v: want %d claimed and succeeded", s, tc.claimed)
				}
			})
		})
	}
}

// A task and a ready pointer to it in one listing are not claimed together:
// the pointer waits for the outcome of the task's claim, as it did when
// candidates were claimed one at a time, so the task costs one claim PUT,
// not a second one that loses with a 412.
func TestATaskAndItsPointerAreNotClaimedTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w, st, release := claimSetup(t, 16, 1)
		keys, err := st.List(ctx, shards.TasksPrefix(0), s3store.ListOptions{})
		if err != nil || len(keys.Objects) != 1 {
			t.Fatalf("listing: %+v %v", keys, err)
		}
		obj, err := st.Get(ctx, keys.Objects[0].Key)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := task.Decode(obj.Body)
		if err != nil {
			t.Fatal(err)
		}
		if err := shards.Announce(ctx, st, tk, time.Now(), -1); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var puts []string
		st.Clear()
		st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Latency: 30 * time.Millisecond})
		st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Latency: 35 * time.Millisecond, Hook: func(key string) {
			mu.Lock()
			puts = append(puts, key)
			mu.Unlock()
		}})
		if n, err := w.Poll(ctx); n != 1 || err != nil {
			t.Fatalf("poll claimed %d tasks (%v), want 1", n, err)
		}
		close(release)
		w.Wait()
		mu.Lock()
		defer mu.Unlock()
		var claimPuts int
		for _, k := range puts {
			if strings.HasSuffix(k, ".json") {
				claimPuts++
			}
		}
		// The claim and the commit.
		if claimPuts != 2 || w.Stats().Claimed != 1 {
			t.Errorf("%d task writes %v and %d claims, want 2 writes (claim, commit) and 1 claim", claimPuts, puts, w.Stats().Claimed)
		}
	})
}

// A task claimed with a lease that is no longer certainly the worker's by
// the time the claim lands (its read took longer than the lease: the claim
// is stamped with the poll's clock reading) is never started, and its
// handler is given back before the poll returns, on the scheduler: were a
// handler loop to give it back, it would do so at the very instant the
// scheduler goes on, in an order the Go scheduler picks (a seeded
// simulation diverged so: seed 1 of TestASeedReplaysExactly).
func TestAClaimWhoseLeaseIsAlreadyLostIsGivenUpBeforeThePollReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := s3store.NewFaults(mem.New())
		p, err := producer.New(ctx, st, producer.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Submit(ctx, "job", nil, producer.Options{Timeout: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Latency: 2 * time.Minute})
		w, err := worker.New(ctx, st, worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Concurrency: 1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) {
			ran = true
			return nil, nil
		})
		if n, err := w.Poll(ctx); err != nil || n != 1 {
			t.Fatalf("poll claimed %d tasks (%v), want 1", n, err)
		}
		// No synctest.Wait: all of it is done when Poll returns.
		if s := w.Stats(); s.LeaseLost != 1 {
			t.Errorf("%d leases lost when the poll returned, want 1", s.LeaseLost)
		}
		if q := w.QueueStates()[0]; q.InFlight != 0 || q.Pending != 0 {
			t.Errorf("pool %+v when the poll returned, want nothing in flight or pending", q)
		}
		w.Wait()
		if ran {
			t.Error("the handler ran under a lease that was no longer certainly the worker's")
		}
	})
}

// A claim whose PUT landed but answered 500, and whose read-backs all
// failed (the outage went on), has an outcome the worker does not know.
// It must not abandon the task: when it reads the task later and finds
// its own claim, it runs it while the lease is certainly its own, and
// otherwise hands it back, its attempt unused. (Before, it took the claim
// as failed, settled the task as someone else's at its next read, and
// with max_attempts = 1 the monitor's expiry of the lease made it dead,
// its handler never run.)
func TestAClaimWhoseOutcomeIsUnknownIsRunOnceSeen(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after is how long the outage lasts past the claim's read-backs:
		// past the lease, the task is handed back and claimed afresh.
		after time.Duration
		polls int
	}{
		{"within its lease", 0, 1},
		{"after its lease", 40 * time.Second, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				st := s3store.NewFaults(mem.New())
				p, err := producer.New(ctx, st, producer.Config{Shards: 1})
				if err != nil {
					t.Fatal(err)
				}
				id, err := p.Submit(ctx, "job", nil, producer.Options{MaxAttempts: 1, Timeout: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				w, err := worker.New(ctx, st, worker.Config{ID: "a", Shards: 1, OwnShards: []int{0}, Concurrency: 1, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				runs := 0
				w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) {
					runs++
					return nil, nil
				})
				// The claim lands, its response is lost, and the four
				// reads back fail.
				st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: ".json", Err: s3store.ErrInjected500, AfterWrite: true, Times: 1,
					Hook: func(string) {
						st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Err: s3store.ErrInjected503, Times: 4})
					}})
				if n, err := w.Poll(ctx); n != 0 || err != nil {
					t.Fatalf("the poll whose claim's outcome is unknown claimed %d (%v), want 0", n, err)
				}
				time.Sleep(tc.after)
				// The next polls read the task: running under the
				// worker's own claim.
				for range tc.polls {
					if _, err := w.Poll(ctx); err != nil {
						t.Fatal(err)
					}
					w.Wait()
				}
				got, err := p.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != task.Succeeded || runs != 1 || got.Attempt != 1 {
					t.Fatalf("task %s (attempt %d, %q) after its handler ran %d times, want it succeeded at attempt 1, run once", got.Status, got.Attempt, got.LastError, runs)
				}
			})
		})
	}
}
