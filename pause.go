package s3queue

import (
	"context"
	"fmt"
	"os"
	"os/user"

	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/task"
)

// PauseState is what the queue's pause object says: the whole queue
// paused (All), the paused types, and who last changed it, when and why.
// See docs/pause.md.
type PauseState = pause.State

// PauseKey is the pause object's key under the queue's prefix.
const PauseKey = pause.Key

// Pause pauses tasks of types, or the whole queue with none: workers stop
// claiming them within their pause_check_interval (each reads the pause
// object once per interval), tasks already running finish, and paused
// tasks stay pending, their attempts untouched, until Resume. The change
// is a compare-and-swap on the pause object, so concurrent Pause and
// Resume calls never lose each other's change. It returns the state now in
// the bucket.
//
// A type no task can have (task.ValidType, as Submit checks it) is an
// error wrapping task.ErrInvalid, and nothing is changed.
func (q *Queue) Pause(ctx context.Context, types ...string) (PauseState, error) {
	return q.PauseWithReason(ctx, "", types...)
}

// PauseWithReason pauses as Pause does, recording reason in the object.
func (q *Queue) PauseWithReason(ctx context.Context, reason string, types ...string) (PauseState, error) {
	for _, t := range types {
		if err := task.ValidType(t); err != nil {
			return PauseState{}, fmt.Errorf("s3queue: pause: %w", err)
		}
	}
	return q.changePause(ctx, reason, pause.Pausing(types...))
}

// Resume resumes types, or, with none, everything: the whole-queue pause
// and every paused type. Workers claim the resumed tasks within their
// pause_check_interval. A type resumed while the whole queue stays paused
// runs once the queue is resumed.
func (q *Queue) Resume(ctx context.Context, types ...string) (PauseState, error) {
	return q.changePause(ctx, "", pause.Resuming(types...))
}

// Paused reads the pause object (one GET): a missing object is nothing
// paused; a malformed one is an error wrapping the decode failure.
func (q *Queue) Paused(ctx context.Context) (PauseState, error) {
	s, _, err := pause.Read(ctx, q.store)
	if err != nil {
		return PauseState{}, fmt.Errorf("s3queue: paused: %w", err)
	}
	return s, nil
}

func (q *Queue) changePause(ctx context.Context, reason string, change func(*pause.State) bool) (PauseState, error) {
	iv, err := q.clock.Now(ctx)
	if err != nil {
		return PauseState{}, fmt.Errorf("s3queue: pause: %w", err)
	}
	s, err := pause.Change(ctx, q.store, iv.Latest, operator(), reason, change)
	if err != nil {
		return PauseState{}, fmt.Errorf("s3queue: pause: %w", err)
	}
	return s, nil
}

// operator names who changes the pause object: user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
