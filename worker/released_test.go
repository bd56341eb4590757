package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// A child released by the worker that records its parent's success is
// "announced to the workers like a retry" (docs/dependencies.md): it runs
// within a poll or two, not when a drain sweep or the monitor comes by.
// Each task of a chain of 6 lies in another shard (as `s3queue submit
// --after ID --key K` makes); one worker with the default config, no
// monitor. Its shards but one are drain shards, swept now and then (backing
// off to drain_max) and not at all once the idle fleet sleeps: the child's
// pointer must land in the shard the member polls.
func TestAChildReleasedByAWorkerRunsWithinAPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()
		st := mem.New()
		f := newFleet(t, st, 16)
		f.ctx = ctx
		p := f.producer(st)
		ws := &putsByKind{Store: st}
		f.start(worker.Config{ID: "a", Shards: 16, Logger: quiet}, ws, nil)
		var chain []string
		for i := range 6 {
			o := producer.Options{ShardKey: fmt.Sprintf("k%d", i)}
			if i == 0 {
				o.Delay = 3 * time.Second
			} else {
				o.DependsOn = []string{chain[i-1]}
			}
			id, err := p.Submit(ctx, "job", nil, o)
			if err != nil {
				t.Fatal(err)
			}
			chain = append(chain, id)
		}
		ended := make([]time.Time, len(chain))
		start := time.Now()
		for i, id := range chain {
			for {
				tk, err := p.Get(ctx, id)
				if err == nil && tk.Status == task.Succeeded {
					ended[i] = time.Now()
					break
				}
				if time.Since(start) > time.Hour {
					t.Fatalf("task %d of the chain (shard %d) not done after an hour: %v %v", i, task.ShardFor(fmt.Sprintf("k%d", i), 16), tk.Status, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if i > 0 {
				hop := ended[i].Sub(ended[i-1])
				t.Logf("hop %d: %v", i, hop)
				if hop > 10*time.Second {
					t.Errorf("hop %d: a child released by the worker ran %v after its parent (a retry is announced in a polled shard at once)", i, hop)
				}
			}
		}
		// Each release writes one pointer (the worker wrote none else: the
		// first task was due when the worker's poll found it), and rings
		// nothing: the worker is the fleet, awake.
		pointers, rings := ws.counts()
		t.Logf("the worker wrote %d ready pointers and %d fleet objects for %d releases", pointers, rings, len(chain)-1)
		if pointers != len(chain)-1 {
			t.Errorf("the worker wrote %d ready pointers for %d releases, want one each", pointers, len(chain)-1)
		}
	})
}

// A slot's next task, granted by the worker that ended the holder, is
// announced where a member that runs its type polls, or waits for one that
// joins for its type. Two elastic workers: "a" runs jobs and is the
// fleet's only member until it sleeps (it then stands by, in the roster);
// "b" runs only the holder's type and joins the sleeping fleet for it (the
// holder's type was left waiting when the fleet went to sleep), which
// wakes it, and "a" joins again for its own type. The holder ends on b;
// the next task, a job, must start within a re-read of b's (a second
// while a task waits for a member that runs it), a forward and a poll of
// a's, not at the sleeping fleet's safety scan (sleep_scan) or never (its
// own shard is a drain shard).
func TestASlotGrantedByAWorkerWakesTheSleepingMemberThatRunsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()
		st := mem.New()
		f := newFleet(t, st, 16)
		f.ctx = ctx
		p := f.producer(st)
		started := make(chan string, 4)
		wa, err := worker.New(ctx, st, worker.Config{ID: "a", Shards: 16, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		wa.Handle("job", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			started <- tk.ID
			return nil, nil
		})
		var runs sync.WaitGroup
		defer runs.Wait()
		defer cancel()
		runs.Go(func() { wa.Run(ctx) })
		// The holder waits for b (no member runs "hold" yet); the next
		// task waits for the holder, in a shard no member polls.
		holder, err := p.Submit(ctx, "hold", nil, producer.Options{Slot: "s"})
		if err != nil {
			t.Fatal(err)
		}
		next, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "s", ShardKey: "k5"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the idle fleet to sleep", time.Hour, func() bool {
			fl, _, err := shards.ReadFleet(ctx, st)
			return err == nil && fl.Asleep
		})
		release := make(chan struct{})
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		bs := &putsByKind{Store: st}
		wb, err := worker.New(ctx, bs, worker.Config{ID: "b", Shards: 16, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		wb.Handle("hold", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			started <- tk.ID
			<-release
			return nil, nil
		})
		runs.Go(func() { wb.Run(ctx) })
		expectRun(t, started, holder, time.Hour, func() string { return "the holder never ran on b" })
		if fl, _, err := shards.ReadFleet(ctx, st); err != nil || fl.Asleep || !fl.Has("b") {
			t.Fatalf("want a fleet woken by b, got %+v (%v)", fl, err)
		}
		p0, f0 := bs.counts()
		close(release)
		ended := time.Now()
		expectRun(t, started, next, time.Hour, func() string { return "the slot's next task never ran" })
		took := time.Since(ended)
		p1, f1 := bs.counts()
		t.Logf("the next task started %v after the holder was released; b wrote %d ready pointers and %d fleet objects (the ring, and any renewal) meanwhile", took, p1-p0, f1-f0)
		if took > 10*time.Second {
			t.Errorf("the slot's next task started %v after its holder ended (a second's re-read, a forward, a poll of at most poll_max: 5s)", took)
		}
	})
}

// putsByKind counts the ready pointers and fleet objects written through
// it.
type putsByKind struct {
	s3store.Store
	mu              sync.Mutex
	pointers, fleet int
}

func (s *putsByKind) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	etag, err := s.Store.Put(ctx, key, body, opts)
	if err == nil {
		s.mu.Lock()
		switch {
		case shards.IsPointer(key):
			s.pointers++
		case key == shards.FleetKey:
			s.fleet++
		}
		s.mu.Unlock()
	}
	return etag, err
}

func (s *putsByKind) counts() (pointers, fleet int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pointers, s.fleet
}
