package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
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
