package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// submitMoved submits tasks through p until one whose shard under 2 shards
// differs from its shard under 4, and returns it.
func submitMoved(t *testing.T, p *producer.Producer) *task.Task {
	t.Helper()
	ctx := context.Background()
	for {
		id, err := p.Submit(ctx, "job", nil, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if task.ShardFor(id, 2) != task.ShardFor(id, 4) {
			tk, err := p.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return tk
		}
	}
}

// A ready pointer written before pointers named their task's shard
// (tasks/{in}/{time}~{id}.ready) still brings its task to a worker after a
// reshard: the worker finds the task by trying each of the manifest's
// counts, one GET more than a pointer that names the shard.
func TestAPointerOfTheOldFormIsFollowedAfterAReshard(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	p, err := producer.New(ctx, st, producer.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	tk := submitMoved(t, p)
	if _, err := shards.Reshard(ctx, st, 4); err != nil {
		t.Fatal(err)
	}
	// The worker polls shard 3 only, where no task was placed under 2
	// shards: it finds the task through the pointer alone.
	w, err := worker.New(ctx, st, worker.Config{OwnShards: []int{3}, ScanLookback: time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
	now := time.Now()
	at, _ := task.NewID(now, strings.NewReader(strings.Repeat("0", 16)))
	old := shards.TasksPrefix(3) + at[:10] + "~" + tk.ID + ".ready"
	if _, err := st.Put(ctx, old, nil, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := st.Counts()
	if n, err := w.Poll(ctx); n != 1 || err != nil {
		t.Fatalf("poll claimed %d (%v), want the task through its old pointer", n, err)
	}
	w.Wait()
	if d := st.Counts().Sub(before); d.Of(s3store.OpGet) != 2 {
		t.Fatalf("the poll made %s, want 2 GETs: the task's shard under 4 shards (404), then under 2", d)
	}
	if got, _ := p.Get(ctx, tk.ID); got.Status != task.Succeeded || got.Shard != tk.Shard {
		t.Fatalf("task %s in shard %d, want succeeded where it was placed (%d)", got.Status, got.Shard, tk.Shard)
	}
}

// Resharding a running fleet: two members poll the queue's two shards and
// two more stand by as spares; after a reshard to 4 every member polls a
// shard of its own, without a restart.
func TestAReshardPutsSparesToWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		var ws []*worker.Worker
		for i := range 4 {
			cfg := f.fast(fmt.Sprintf("w%d", i))
			cfg.Dedicated = true
			ws = append(ws, f.start(cfg, nil, nil))
			waitFor(t, "the member to join", 5*time.Second, func() bool { member, _ := ws[i].Member(); return member })
		}
		polling := func(n int) func() bool {
			return func() bool {
				own, _, exact := shares(ws, n)
				busy := 0
				for _, o := range own {
					if len(o) == 1 {
						busy++
					}
				}
				return exact && busy == min(n, len(ws))
			}
		}
		waitFor(t, "two members on the two shards", 5*time.Second, polling(2))
		if _, err := shards.Reshard(f.ctx, st, 4); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "all four members on a shard each", 5*time.Second, polling(4))
		fl, _, _ := shards.ReadFleet(f.ctx, st)
		if fl.Shards != 4 {
			t.Fatalf("the fleet assigns by %d shards, want 4", fl.Shards)
		}
	})
}

// A reshard that stopped between its two writes (the manifest written, the
// fleet object not) is completed by the members: the first member to read
// the new manifest raises the fleet's count in its next write, and the
// others follow.
func TestMembersCompleteAReshardThatStoppedShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		var ws []*worker.Worker
		for i := range 4 {
			cfg := f.fast(fmt.Sprintf("w%d", i))
			cfg.Dedicated = true
			ws = append(ws, f.start(cfg, nil, nil))
		}
		waitFor(t, "four members", 5*time.Second, func() bool {
			fl, _, _ := shards.ReadFleet(f.ctx, st)
			return len(fl.Members) == 4 && fl.Shards == 2
		})
		m, err := shards.ReadManifest(f.ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		m.Format, m.Shards, m.Previous = shards.FormatVersion, 4, []int{2}
		body, _ := json.Marshal(m)
		st.Put(f.ctx, shards.ManifestKey, body, s3store.PutOptions{}) // and the reshard stops here
		cfg := f.fast("late")
		cfg.Shards, cfg.Dedicated = 0, true
		ws = append(ws, f.start(cfg, nil, nil)) // opens the manifest of 4 shards
		waitFor(t, "four members on a shard each", 5*time.Second, func() bool {
			own, _, exact := shares(ws, 4)
			busy := 0
			for _, o := range own {
				busy += len(o)
			}
			return exact && busy == 4
		})
	})
}

// A producer opened before a reshard keeps submitting: it learns the new
// count from the fleet object, places new tasks with it, and every task,
// placed before the reshard or after, is found and run.
//
// The members' entries last 600 ms here, against the 2 s a producer
// reuses its view of the fleet for: a view that old showed every member
// suspect, and the producer routed most tasks to shard 0 alone, so that
// in about 1 run in 12 none of the tasks submitted in the 4 s after the
// reshard landed in shards 2 and 3 (the ids are random). Lengthening the
// test hid that; the producer now reads the fleet again once its routes
// lapse (shards.FleetCache.ShardsFor), and each task submitted once it has
// learnt the count lands in a new shard with probability 1/2 (20 of them
// all miss with probability 2^-20).
func TestAProducerOpenedBeforeAReshardKeepsSubmitting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 2)
		var ran sync.Map
		h := func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			ran.Store(tk.ID, true)
			return nil, nil
		}
		var ws []*worker.Worker
		for i := range 4 {
			cfg := f.fast(fmt.Sprintf("w%d", i))
			cfg.Dedicated = true
			ws = append(ws, f.start(cfg, nil, h))
		}
		p, err := producer.New(f.ctx, st, producer.Config{Shards: 2, LeaseMargin: 100 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		submit := func() string {
			id, err := p.Submit(f.ctx, "job", nil, producer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			return id
		}
		for range 10 {
			submit()
		}
		if _, err := shards.Reshard(f.ctx, st, 4); err != nil {
			t.Fatal(err)
		}
		// A task every 200 ms (virtual): the producer learns the count
		// from the fleet object within its view's 2 s.
		resharded := time.Now()
		for p.Manifest().Shards != 4 {
			if time.Since(resharded) > 3*time.Second {
				t.Fatalf("the producer still places tasks with %d shards %v after the reshard, want 4", p.Manifest().Shards, time.Since(resharded))
			}
			submit()
			time.Sleep(200 * time.Millisecond)
		}
		inNew := 0
		for range 20 {
			if tk, err := p.Get(f.ctx, submit()); err == nil && tk.Shard >= 2 {
				inNew++
			}
			time.Sleep(200 * time.Millisecond)
		}
		if inNew == 0 {
			t.Error("none of the 20 tasks submitted after the producer learnt the count went to the new shards 2 and 3")
		}
		waitFor(t, "every task to run", 20*time.Second, func() bool {
			for _, id := range ids {
				if _, ok := ran.Load(id); !ok {
					return false
				}
			}
			return true
		})
		for _, id := range ids {
			tk, err := p.Get(f.ctx, id)
			if err != nil || tk.Status != task.Succeeded {
				t.Fatalf("task %s: %v %v", id, tk, err)
			}
		}
	})
}
