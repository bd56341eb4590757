package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// resultObjects lists the keys under results/.
func resultObjects(t *testing.T, st s3store.Store) []string {
	t.Helper()
	page, err := st.List(context.Background(), task.ResultsPrefix, s3store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	return keys
}

// runOne submits one task of type job with handler h on a worker with
// cfg, runs it, and returns its id.
func runOne(t *testing.T, st s3store.Store, cfg worker.Config, h worker.Handler) (*producer.Producer, *worker.Worker, string) {
	t.Helper()
	ctx := context.Background()
	cfg.Shards, cfg.OwnShards, cfg.Logger = 1, []int{0}, quiet
	w, err := worker.New(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", h)
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "job", nil, producer.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Poll(ctx); n != 1 || err != nil {
		t.Fatalf("poll claimed %d: %v", n, err)
	}
	w.Wait()
	return p, w, id
}

// A result over result_inline_max is stored apart, at the key of the
// claim that produced it, before the commit that references it; Get reads
// it back, checked. One under the limit stays inline; one over
// max_result_bytes ends the task dead.
func TestALargeResultIsStoredApart(t *testing.T) {
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)
	cfg := worker.Config{ResultInlineMax: 1024, MaxResultBytes: 8000}

	st := s3store.NewCounter(mem.New())
	var claim string
	p, _, id := runOne(t, st, cfg, func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
		claim = tk.Claim.ID
		return big, nil
	})
	v, err := taskio.LoadID(ctx, st, id, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	want := task.ResultKey(0, id, claim)
	if v.Task.Status != task.Succeeded || v.Task.ResultRef == nil || v.Task.ResultRef.Key != want || len(v.Task.Result) != 0 {
		t.Fatalf("task %+v: want succeeded, referencing %s", v.Task, want)
	}
	if keys := resultObjects(t, st); len(keys) != 1 || keys[0] != want {
		t.Fatalf("result objects %v, want [%s]", keys, want)
	}
	got, err := p.Get(ctx, id)
	if err != nil || string(got.Result) != string(big) {
		t.Fatalf("Get: %d bytes of result, %v", len(got.Result), err)
	}

	// A result object that no longer matches is an error naming the task.
	if _, err := st.Put(ctx, want, []byte(`"tampered"`), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Get(ctx, id); !errors.Is(err, producer.ErrResultUnavailable) || !strings.Contains(err.Error(), id) || got == nil || got.Status != task.Succeeded {
		t.Fatalf("Get of a tampered result: %v", err)
	}
	if err := st.Delete(ctx, want, s3store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, id); !errors.Is(err, producer.ErrResultUnavailable) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Get of a missing result: %v", err)
	}
	// Lookup (what `history` reads) is the task object alone: one GET,
	// whatever became of its result object.
	gets := st.Counts().Of(s3store.OpGet)
	if got, err := p.Lookup(ctx, id); err != nil || got.Status != task.Succeeded || got.ResultRef == nil || len(got.Result) != 0 {
		t.Fatalf("Lookup of a task whose result object is missing: %+v %v", got, err)
	}
	if n := st.Counts().Of(s3store.OpGet) - gets; n != 1 {
		t.Fatalf("Lookup made %d GETs, want 1", n)
	}

	small := mem.New()
	p, _, id = runOne(t, small, cfg, func(context.Context, *task.Task) (json.RawMessage, error) { return json.RawMessage(`{"ok":true}`), nil })
	if got, err := p.Get(ctx, id); err != nil || string(got.Result) != `{"ok":true}` || got.ResultRef != nil {
		t.Fatalf("small result: %+v %v", got, err)
	}
	if keys := resultObjects(t, small); len(keys) != 0 {
		t.Fatalf("a small result left objects %v", keys)
	}

	huge := mem.New()
	p, _, id = runOne(t, huge, cfg, func(context.Context, *task.Task) (json.RawMessage, error) {
		return json.RawMessage(`"` + strings.Repeat("y", 9000) + `"`), nil
	})
	if got, err := p.Get(ctx, id); err != nil || got.Status != task.Dead || !strings.Contains(got.LastError, "result refused") {
		t.Fatalf("result over max_result_bytes: %+v %v", got, err)
	}
	if keys := resultObjects(t, huge); len(keys) != 0 {
		t.Fatalf("a refused result left objects %v", keys)
	}
}

// An attempt whose commit the fence refuses (its claim was taken over
// while it ran) deletes the result object it wrote: it is nobody's
// result.
func TestARefusedCommitDeletesItsResultObject(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := worker.Config{ResultInlineMax: 1024}
	p, w, id := runOne(t, st, cfg, func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
		// Another claim takes the task over while the handler runs.
		v, err := taskio.Load(ctx, st, tk.Key())
		if err != nil {
			return nil, err
		}
		v.Task.Claim.ID = "stolen"
		v.Task.Version++
		if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
			return nil, err
		}
		return json.RawMessage(`"` + strings.Repeat("z", 4000) + `"`), nil
	})
	if w.Stats().Rejected != 1 {
		t.Fatalf("stats %+v: want one rejected outcome", w.Stats())
	}
	if keys := resultObjects(t, st); len(keys) != 0 {
		t.Fatalf("the refused attempt left result objects %v", keys)
	}
	if got, err := p.Get(ctx, id); err != nil || got.Status != task.Running || got.Claim.ID != "stolen" {
		t.Fatalf("task %+v %v: want still running under the other claim", got, err)
	}
}
