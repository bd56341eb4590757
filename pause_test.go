package s3queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/task"
)

// Pause refuses a type no task can have, as Submit does, and stores
// nothing.
func TestPauseRefusesAnInvalidType(t *testing.T) {
	f := setup(t, s3queue.Config{})
	ctx := context.Background()
	for _, typ := range []string{"bad/type", "", "has space"} {
		if _, err := f.q.Pause(ctx, "ok", typ); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("Pause(%q): %v, want an error wrapping task.ErrInvalid", typ, err)
		}
		if _, err := f.q.Submit(ctx, typ, nil, s3queue.SubmitOptions{}); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("Submit(%q): %v, want an error wrapping task.ErrInvalid", typ, err)
		}
	}
	s, err := f.q.Paused(ctx)
	if err != nil || s.Any() || s.Version != 0 {
		t.Errorf("after refused pauses: %+v, %v; want nothing stored", s, err)
	}
}
