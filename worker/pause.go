package worker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/pause"
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
	// Deadline is the task's deadline, if any: a held task whose deadline
	// passes is ended dead without waiting for its resume or its window
	// (endLateHeld).
	Deadline time.Time
}

// heldOf is what holding t keeps of it.
func heldOf(t *task.Task) heldTask {
	return heldTask{Type: t.Type, Shard: t.Shard, Version: t.Version, Avail: t.AvailableAt, Deadline: t.Deadline}
}

// pausedType reports whether tasks of typ must not be claimed now. Safe
// from any goroutine: it reads the state the scheduler published.
func (w *Worker) pausedType(typ string) bool { return w.pauseState.Load().Paused(typ) }

// pausedAll reports whether the whole queue is paused.
func (w *Worker) pausedAll() bool { return w.pauseState.Load().All }

// checkPauseIfClaiming is checkPause for a worker that may claim: a
// member, a worker pinned to its shards, any worker under direct dispatch,
// or one that holds paused tasks for their resume. A standby claims
// nothing, so it does not read the pause object at all: one GET per
// standby per PauseCheckInterval was most of an idle fleet's bill (50
// standbys: 5 GET/s, $5/month). A standby that joins reads it before its
// first claim (takePlace). It returns how long until the next read is
// due (the longest wait for a standby).
func (w *Worker) checkPauseIfClaiming(ctx context.Context) time.Duration {
	if !w.claiming() {
		w.takeCrashedHeld()
		return time.Hour
	}
	w.checkPause(ctx)
	return w.pauses.Until()
}

// readPauseOnJoin reads the pause object for a standby that has just
// joined: it read none while it stood by, and claims from its next poll.
func (w *Worker) readPauseOnJoin(ctx context.Context) {
	if w.static() || w.direct != nil {
		return // it has been reading all along
	}
	w.pauses.Expire()
	w.checkPause(ctx)
}

// claiming reports whether the worker may claim tasks now (see
// checkPauseIfClaiming).
func (w *Worker) claiming() bool {
	return w.static() || w.direct != nil || w.fleet.member || len(w.held) > 0
}

// checkPause reads the pause object when its interval has passed, and
// announces the held tasks of the types resumed since. An announcement
// that failed (the clock, a PUT) is tried again at each later read of the
// object, until every held task of a resumed type is announced: the held
// tasks do not wait for the monitor's repair (or, with no monitor, for
// ever) because one request failed.
func (w *Worker) checkPause(ctx context.Context) {
	w.takeCrashedHeld()
	reads, was := w.pauses.Reads(), w.pauseState.Load()
	changed := w.pauses.Refresh(ctx)
	if s := w.pauseView(); changed || s.All != was.All || !slices.Equal(s.Types, was.Types) {
		w.pauseState.Store(&s)
		w.log.Info("the queue's pause changed", "paused_all", s.All, "paused_types", s.Types)
		if !s.All {
			w.resumeHeld(ctx)
		}
		return
	}
	if w.resumePending && w.pauses.Reads() != reads && !w.pausedAll() {
		// Once per read of the pause object, not at every step: a store
		// that keeps failing costs one PUT per held task per interval.
		w.resumePending = !w.announceHeld(ctx)
	}
}

// pauseView is the pause state the worker acts on: the last one read, or,
// until a read of the pause object has answered, the whole queue paused (a
// worker whose first read failed claims nothing until one answers; it
// tries again every pause.UnknownRetry). After a whole interval without an
// answer it goes on as if nothing were paused, and says so at error level:
// a policy that refuses the pause object must not stop the worker
// silently.
func (w *Worker) pauseView() pause.State {
	switch {
	case !w.pauses.Settled():
		return pause.State{All: true}
	case !w.pauses.Known() && !w.pauseGaveUp:
		w.pauseGaveUp = true
		w.log.Error("the pause object could not be read for a whole pause_check_interval; claiming as if nothing were paused (the worker's credentials need s3:GetObject on control/pause.json, and s3:ListBucket on the queue's prefix so a missing object reads as missing)",
			"key", pause.Key)
	}
	return w.pauses.State()
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
	w.keep(t.Key(), heldOf(t))
	return true
}

// keep remembers a paused task for its resume, if there is room.
func (w *Worker) keep(key string, h heldTask) {
	if len(w.held) < maxHeld {
		w.held[key] = h
	}
}

// holdCrashed hands the scheduler a task released to pending after its
// handler crashed under CrashRequeue while its type was paused (run.go's
// requeueCrashed runs on the task's own goroutine, and the held list
// belongs to the scheduler). The next checkPause takes it.
func (w *Worker) holdCrashed(t *task.Task) {
	w.crashed.mu.Lock()
	defer w.crashed.mu.Unlock()
	if w.crashed.tasks == nil {
		w.crashed.tasks = make(map[string]heldTask)
	}
	w.crashed.tasks[t.Key()] = heldOf(t)
}

// takeCrashedHeld moves the tasks holdCrashed was handed into the held
// list. Its type may have been resumed meanwhile: the next read of the
// pause object announces it then.
func (w *Worker) takeCrashedHeld() {
	w.crashed.mu.Lock()
	tasks := w.crashed.tasks
	w.crashed.tasks = nil
	w.crashed.mu.Unlock()
	for key, h := range tasks {
		if l := w.limits[h.Type]; l != nil && !w.pausedType(h.Type) && len(l.held) < maxHeld {
			// Rate limited: claimed from the held list once a token is
			// reserved (ratelimit.go), with no announcement.
			l.held[key] = h
			continue
		}
		w.keep(key, h)
		w.resumePending = true
	}
}

// resumeHeld wakes the worker's discovery (and the fleet, or the inbox, if
// it sleeps) after a resume, and announces the held tasks whose type is no
// longer paused.
func (w *Worker) resumeHeld(ctx context.Context) {
	now := w.now()
	if w.direct != nil {
		if !w.direct.asleepAt.IsZero() {
			w.wakeInbox(ctx)
		}
		w.direct.next = now
	}
	w.pace.next = now
	w.resumePending = !w.announceHeld(ctx)
}

// announceHeld announces the held tasks whose type is no longer paused
// (one PUT each), and wakes the fleet if it sleeps. It reports false when
// some could not be announced: they stay held, and the next read of the
// pause object tries again (checkPause).
func (w *Worker) announceHeld(ctx context.Context) (all bool) {
	// Sorted, so a seeded run announces in the same order.
	var due []string
	for _, key := range slices.Sorted(maps.Keys(w.held)) {
		if !w.pausedType(w.held[key].Type) {
			due = append(due, key)
		}
	}
	if len(due) == 0 {
		return true
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		w.log.Warn("announce resumed tasks; will try again", "tasks", len(due), "err", err)
		return false
	}
	all = true
	announced := 0
	for _, key := range due {
		h := w.held[key]
		_, id, err := task.ParseKey(key)
		if err != nil {
			delete(w.held, key)
			continue
		}
		t := &task.Task{ID: id, Shard: h.Shard, Type: h.Type, Version: h.Version, AvailableAt: h.Avail, Deadline: h.Deadline}
		if !w.forward(ctx, t, iv) {
			if err := shards.Announce(ctx, w.st, t, iv.Latest, int(w.pointerShard.Load())); err != nil {
				w.log.Warn("announce a resumed task; will try again", "task_id", id, "err", err)
				all = false
				continue
			}
		}
		delete(w.held, key)
		announced++
	}
	if announced > 0 {
		w.log.Info("announced resumed tasks", "tasks", announced)
		if m := &w.fleet; m.asleep || m.fleet.Asleep {
			w.wake(ctx, w.now())
		}
	}
	return all
}
