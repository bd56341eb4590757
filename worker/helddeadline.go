package worker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// A task the worker holds — of a paused type (pause.go) or waiting for a
// rate limit's window (ratelimit.go) — keeps its deadline. Once the
// earliest S3 time the clock allows is past it, the worker ends the task
// dead at once, as its claim would have (tryClaim: "deadline passed at T,
// not started"): one read and one conditional PUT, no token reserved, no
// wait for the resume or the window. The worker wakes at the earliest
// held deadline, not at a poll. While the whole queue is paused nothing is
// ended: discovery stops then, and held tasks are ended once it resumes.

// lateHeld is a held task whose deadline has passed, and the list it was
// held in.
type lateHeld struct {
	key  string
	h    heldTask
	from map[string]heldTask
}

// endLateHeld ends dead the held tasks whose deadline has passed. It
// returns how long until the next held deadline passes (by the local
// clock), or forever, and how many it ended. No request while no held
// task has a deadline.
func (w *Worker) endLateHeld(ctx context.Context) (wait time.Duration, ended int) {
	wait = forever
	if w.stopping.Load() || w.pausedAll() {
		return wait, 0
	}
	lists := []map[string]heldTask{w.held}
	for _, typ := range slices.Sorted(maps.Keys(w.limits)) {
		lists = append(lists, w.limits[typ].held)
	}
	first := earliestDeadline(lists, time.Time{})
	if first.IsZero() {
		return wait, 0
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return w.cfg.PollMin, 0
	}
	if !iv.Earliest.After(first) {
		return untilPassed(first, iv.Earliest), 0
	}
	var late []lateHeld
	for _, m := range lists {
		// Sorted, so a seeded run ends them in the same order.
		for _, k := range slices.SortedFunc(maps.Keys(m), heldOrder) {
			if h := m[k]; !h.Deadline.IsZero() && iv.Earliest.After(h.Deadline) {
				late = append(late, lateHeld{k, h, m})
			}
		}
	}
	retry := false
	for len(late) > 0 {
		n := min(len(late), maxClaimBatch)
		part := late[:n]
		late = late[n:]
		batch := make([]shards.Candidate, 0, n)
		for _, l := range part {
			delete(l.from, l.key)
			if _, id, err := task.ParseKey(l.key); err == nil {
				batch = append(batch, shards.Candidate{Key: l.key, ID: id, Shard: -1})
			}
		}
		s := heldSettler{}
		w.claimBatch(ctx, s, batch, iv, nil)
		for _, l := range part {
			switch _, again := l.from[l.key]; {
			case s[l.key]:
				ended++ // ended dead, or found no longer pending
			case !again:
				// Neither settled nor held again (a failed write, a lost
				// race): kept, and tried again after poll_min.
				l.from[l.key] = l.h
				retry = true
			}
		}
	}
	if next := earliestDeadline(lists, iv.Earliest); !next.IsZero() {
		wait = untilPassed(next, iv.Earliest)
	}
	if retry {
		wait = min(wait, max(w.cfg.PollMin, time.Millisecond))
	}
	return wait, ended
}

// earliestDeadline returns the earliest deadline after after among the
// held tasks of lists, or the zero time.
func earliestDeadline(lists []map[string]heldTask, after time.Time) time.Time {
	var first time.Time
	for _, m := range lists {
		for _, h := range m {
			if !h.Deadline.IsZero() && h.Deadline.After(after) && (first.IsZero() || h.Deadline.Before(first)) {
				first = h.Deadline
			}
		}
	}
	return first
}

// untilPassed is how long until earliest is past deadline.
func untilPassed(deadline, earliest time.Time) time.Duration {
	return deadline.Sub(earliest) + time.Millisecond
}
