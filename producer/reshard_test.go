package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// A task placed under 16 shards is still found after a reshard to 32, by a
// producer opened since: one GET when its shard did not move, two when it
// did (the current count's shard first).
func TestATaskPlacedBeforeAReshardIsFound(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	before, err := producer.New(ctx, st, producer.Config{Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	var moved, stayed string
	for moved == "" || stayed == "" {
		id, err := before.Submit(ctx, "t", nil, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if task.ShardFor(id, 16) != task.ShardFor(id, 32) {
			moved = id
		} else {
			stayed = id
		}
	}
	if _, err := shards.Reshard(ctx, st, 32); err != nil {
		t.Fatal(err)
	}
	ctr := s3store.NewCounter(st)
	after, err := producer.New(ctx, ctr, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	newer, err := after.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		id   string
		gets int64
	}{{"placed under 32", newer, 1}, {"placed under 16, same shard under 32", stayed, 1}, {"placed under 16, another shard under 32", moved, 2}} {
		c0 := ctr.Counts()
		tk, err := after.Get(ctx, tc.id)
		if err != nil || tk.ID != tc.id {
			t.Fatalf("%s: get: %v", tc.what, err)
		}
		if d := ctr.Counts().Sub(c0); d.Total() != tc.gets || d.Of(s3store.OpGet) != tc.gets {
			t.Errorf("%s: get made %s, want %d GET", tc.what, d, tc.gets)
		}
	}
	if requested, err := after.Cancel(ctx, moved); err != nil || requested {
		t.Fatalf("cancel of a task placed before the reshard: %v %v", requested, err)
	}
	if tk, _ := after.Get(ctx, moved); tk.Status != task.Canceled || tk.Shard != task.ShardFor(moved, 16) {
		t.Fatalf("canceled task: %s in shard %d, want canceled where it was placed", tk.Status, tk.Shard)
	}
}

// A submit whose idempotency key was taken before a reshard returns the
// task placed then, and creates none in the new layout.
func TestAnIdempotencyKeyTakenBeforeAReshardKeepsItsTask(t *testing.T) {
	ctx := context.Background()
	for _, recorded := range []bool{true, false} {
		name := map[bool]string{true: "a record naming its shard count", false: "a record from before placements were recorded"}[recorded]
		t.Run(name, func(t *testing.T) {
			mst, srv, clk := fakeTime(t)
			before, err := producer.New(ctx, mst, producer.Config{Shards: 2, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			var key, x string
			for i := 0; x == "" || task.ShardFor(x, 2) == task.ShardFor(x, 3); i++ {
				key = fmt.Sprintf("k%d", i)
				if x, err = before.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: key}); err != nil {
					t.Fatal(err)
				}
			}
			if !recorded {
				body, _ := json.Marshal(map[string]any{"id": x, "spec": task.SpecHash("t", nil)})
				mst.Put(ctx, task.IdempotencyRecordKey(key), body, s3store.PutOptions{})
			}
			if _, err := shards.Reshard(ctx, mst, 3); err != nil {
				t.Fatal(err)
			}
			*srv = srv.Add(time.Hour) // an old record: the submit looks for its task
			after, err := producer.New(ctx, mst, producer.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			got, err := after.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: key})
			if err != nil || got != x {
				t.Fatalf("submit = %s %v, want the record's task %s", got, err, x)
			}
			if _, err := mst.Head(ctx, task.Key(task.ShardFor(x, 3), x)); err == nil {
				t.Fatal("the task was created again in the new layout: it would run twice")
			}
		})
	}
}
