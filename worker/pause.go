package worker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Pause (docs/pause.md): the worker reads the queue's pause object every
// PauseCheckInterval (one GET, whatever it does meanwhile) and claims no
// task of a paused type, nor any task while the whole queue is paused.
// Tasks already claimed run on. A paused task stays pending and untouched
// (no attempt used); what discovery does with it depends on how it came:
//
//   - While the whole queue is paused, discovery stops altogether: no
//     shard, inbox or overflow listing, so the scans' cursors stay where
//     they are and find everything once the queue resumes. The member paces
//     as an idle one does (and may leave the fleet or sleep at the doorbell).
//   - A task of a paused type is read (its type is in the object, not the
//     key), then settled in its scan, so it neither pins the cursor nor
//     starves the other types behind it, and remembered (up to maxHeld) so
//     that, once its type is resumed, the worker announces it again: a ready
//     pointer in a shard whose member runs the type. A ready pointer to it
//     stays in place; a direct-dispatch inbox or overflow entry is handed
//     back as a ready pointer in a shard whose member runs its type first (an inbox listing
//     would otherwise return it at every poll, ahead of the work behind it),
//     then deleted.
//   - A task the worker could not remember (beyond maxHeld, or the worker
//     crashed) is found by the monitor's repair of pending tasks, which
//     skips paused types and announces it again within repair_after of the
//     resume.

// maxHeld bounds the paused tasks a worker remembers for their resume.
const maxHeld = 10000

// heldTask is what the resume of a paused task needs of it.
type heldTask struct {
	Type    string
	Shard   int
	Version int64
	Avail   time.Time
}

// pausedType reports whether tasks of typ must not be claimed now.
func (w *Worker) pausedType(typ string) bool { return w.pauses.State().Paused(typ) }

// pausedAll reports whether the whole queue is paused.
func (w *Worker) pausedAll() bool { return w.pauses.State().All }

// checkPause reads the pause object when its interval has passed, and
// announces the held tasks of the types resumed since.
func (w *Worker) checkPause(ctx context.Context) {
	if !w.pauses.Refresh(ctx) {
		return
	}
	s := w.pauses.State()
	w.log.Info("the queue's pause changed", "paused_all", s.All, "paused_types", s.Types)
	if !s.All {
		w.resumeHeld(ctx)
	}
}

// hold keeps a due task of a paused type for its resume. It reports false
// when a direct-dispatch entry could not be handed back (the entry stays,
// and the next listing tries again).
func (w *Worker) hold(ctx context.Context, c shards.Candidate, t *task.Task, iv clock.Interval) bool {
	if c.Inbox && !w.forward(ctx, t, iv) {
		if err := shards.Announce(ctx, w.st, t, iv.Latest, -1); err != nil {
			w.log.Warn("hand a paused task's inbox entry back to a shard", "task_id", t.ID, "err", err)
			return false
		}
	}
	if len(w.held) < maxHeld {
		w.held[t.Key()] = heldTask{Type: t.Type, Shard: t.Shard, Version: t.Version, Avail: t.AvailableAt}
	}
	return true
}

// resumeHeld announces the held tasks whose type is no longer paused, and
// wakes the fleet (or the inbox) if it sleeps. One PUT per task announced.
func (w *Worker) resumeHeld(ctx context.Context) {
	now := w.now()
	if w.direct != nil {
		if !w.direct.asleepAt.IsZero() {
			w.wakeInbox(ctx)
		}
		w.direct.next = now
	}
	w.pace.next = now
	if len(w.held) == 0 {
		return
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return // the next check tries again
	}
	announced := 0
	// Sorted, so a seeded run announces in the same order.
	for _, key := range slices.Sorted(maps.Keys(w.held)) {
		h := w.held[key]
		if w.pausedType(h.Type) {
			continue
		}
		_, id, err := task.ParseKey(key)
		if err != nil {
			delete(w.held, key)
			continue
		}
		t := &task.Task{ID: id, Shard: h.Shard, Type: h.Type, Version: h.Version, AvailableAt: h.Avail}
		if !w.forward(ctx, t, iv) {
			if err := shards.Announce(ctx, w.st, t, iv.Latest, int(w.pointerShard.Load())); err != nil {
				w.log.Warn("announce a resumed task; the monitor's repair will", "task_id", id, "err", err)
				continue
			}
		}
		delete(w.held, key)
		announced++
	}
	if announced > 0 {
		w.log.Info("announced resumed tasks", "tasks", announced)
		if m := &w.fleet; m.asleep || m.fleet.Asleep {
			w.wake(ctx, now)
		}
	}
}
