package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// scaleOut runs 8 elastic workers with long handlers on a queue of 4
// shards, with maxShards as their ceiling (and configured with the shard
// count if pinned), under a backlog of 200 tasks, and returns the workers
// and the fleet once the backlog has been worked on for a while.
func scaleOut(t *testing.T, maxShards int, pinned bool) ([]*worker.Worker, shards.Fleet) {
	st := mem.New()
	f := newFleet(t, st, 4)
	long := func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
		return nil, nil
	}
	p, err := producer.New(f.ctx, st, producer.Config{Shards: 4, LeaseMargin: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		f.submit(p)
	}
	var ws []*worker.Worker
	for i := range 8 {
		cfg := f.fast(fmt.Sprintf("w%d", i))
		cfg.MaxShards, cfg.ReshardAfter = maxShards, 2*time.Second
		if !pinned {
			cfg.Shards = 0 // the queue's manifest decides
		}
		ws = append(ws, f.start(cfg, nil, long))
	}
	time.Sleep(20 * time.Second) // virtual
	fl, _, err := shards.ReadFleet(f.ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	return ws, fl
}

// A fleet larger than the shard count puts every worker to work: the
// members, saturated, keep asking for more members than there are shards,
// and the first member grows the shard count; the standbys join for the
// new shards and claim tasks.
func TestAFleetLargerThanTheShardCountReshardsAndEveryWorkerClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws, fl := scaleOut(t, 256, false)
		if fl.Shards < 8 {
			t.Fatalf("the fleet assigns by %d shards, want 8 or more", fl.Shards)
		}
		for _, w := range ws {
			if w.Stats().Claimed == 0 {
				t.Errorf("worker %s claimed no task", w.ID())
			}
		}
	})
}

// With max_shards at the queue's count the policy is off, and so it is for
// workers configured with the shard count: the count stays, the workers
// beyond it stay standbys, and the members share the backlog (all of it in
// shard 0) by handing it off.
func TestTheAutomaticReshardIsOffAtMaxShardsOrWithAPinnedShardCount(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxShards int
		pinned    bool
	}{{"max_shards 4", 4, false}, {"shards = 4", 256, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ws, fl := scaleOut(t, tc.maxShards, tc.pinned)
				if fl.Shards != 4 || fl.Want > 4 {
					t.Fatalf("the fleet assigns by %d shards and wants %d members, want 4 and at most 4", fl.Shards, fl.Want)
				}
				members, claimed := 0, 0
				for _, w := range ws {
					if m, _ := w.Member(); m {
						members++
					}
					if w.Stats().Claimed > 0 {
						claimed++
					}
				}
				if members != 4 || claimed != 4 {
					t.Fatalf("%d members, %d workers claimed tasks; want 4 and 4, the rest standbys", members, claimed)
				}
			})
		})
	}
}
