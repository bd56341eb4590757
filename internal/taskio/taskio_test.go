package taskio_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Every write keeps the size hint true, whatever the JSON's length: a
// pending task is a multiple of 4 bytes, a running one 2 more, a finished
// one odd. Scans and the monitor decide what to read by it.
func TestWritesKeepTheSizeHint(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Now()
	check := func(v taskio.Versioned, what string) {
		t.Helper()
		o, err := st.Head(ctx, v.Task.Key())
		if err != nil {
			t.Fatal(err)
		}
		pending, finished := shards.PendingBySize(o.Size), shards.FinishedBySize(o.Size)
		if pending != (v.Task.Status == task.Pending) || finished != v.Task.Status.Terminal() {
			t.Fatalf("%s: %s task of %d bytes reads as pending %v, finished %v", what, v.Task.Status, o.Size, pending, finished)
		}
		if got, err := taskio.Load(ctx, st, v.Task.Key()); err != nil || got.Task.Status != v.Task.Status {
			t.Fatalf("%s: the padded object does not load back: %v", what, err)
		}
	}
	for n := range 8 { // inputs of every length modulo 4, twice over
		id, err := task.NewID(now, strings.NewReader(strings.Repeat(string(rune('a'+n)), 16)))
		if err != nil {
			t.Fatal(err)
		}
		input, _ := json.Marshal(strings.Repeat("x", n))
		tk, err := task.New(id, 0, task.Spec{Type: "t", Input: input}, now)
		if err != nil {
			t.Fatal(err)
		}
		v, err := taskio.Create(ctx, st, tk)
		if err != nil {
			t.Fatal(err)
		}
		check(v, "submitted")
		if err := v.Task.ClaimBy("w", "c1", now); err != nil {
			t.Fatal(err)
		}
		if v, err = taskio.Update(ctx, st, v.Task, v.ETag); err != nil {
			t.Fatal(err)
		}
		check(v, "claimed")
		if err := v.Task.Succeed("c1", input, now); err != nil {
			t.Fatal(err)
		}
		if v, err = taskio.Update(ctx, st, v.Task, v.ETag); err != nil {
			t.Fatal(err)
		}
		check(v, "succeeded")
	}
}
