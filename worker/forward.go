package worker

import (
	"context"
	"maps"
	"slices"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// forwardOrKeep forwards a pending task of a type this worker has no
// handler for, or, when no member can run it yet, keeps it (up to 1000)
// for forwardWaiting to forward once the fleet changes.
func (w *Worker) forwardOrKeep(ctx context.Context, t *task.Task, iv clock.Interval) {
	if !w.forward(ctx, t, iv) && len(w.unhandled) < 1000 {
		w.unhandled[t.Key()] = t.Type
	}
}

// forward sends a pending task this worker cannot run to a shard whose
// member can, by a ready pointer there. Producers route by type already;
// this heals the moments their view of the fleet was stale.
func (w *Worker) forward(ctx context.Context, t *task.Task, iv clock.Interval) bool {
	v := w.view.Load()
	targets := v.fleet.ShardsFor(t.Type, iv, w.cfg.LeaseMargin, v.fleet.ShardCount(w.manifest.Shards))
	if len(targets) == 0 {
		return false // nobody can run it yet: it waits, unclaimed
	}
	in := targets[int(t.Version)%len(targets)]
	if now, err := w.clock.Now(ctx); err == nil {
		iv = now // a pass can take a while: stamp the pointer with now
	}
	if err := shards.Announce(ctx, w.st, t, iv.Latest, in); err != nil {
		w.log.Warn("forward task", "task_id", t.ID, "err", err)
		return false
	}
	return true
}

// forwardWaiting retries forwarding the pending tasks no member could run,
// after the fleet changed.
func (w *Worker) forwardWaiting(ctx context.Context) {
	if len(w.unhandled) == 0 {
		return
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return
	}
	f := w.view.Load().fleet
	// Sorted, so a seeded run forwards in the same order.
	for _, key := range slices.Sorted(maps.Keys(w.unhandled)) {
		typ := w.unhandled[key]
		if !f.Covers(typ, iv, w.cfg.LeaseMargin) {
			continue
		}
		v, err := taskio.Load(ctx, w.st, key)
		if err == nil && (v.Task.Status != task.Pending || w.forward(ctx, v.Task, iv)) {
			delete(w.unhandled, key)
		}
	}
}
