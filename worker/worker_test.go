package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// zeros is a seeded source that always draws zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Every random draw comes from Config.Rand: the default id and claim ids
// are the source's bytes, so a seeded run is reproducible.
func TestRandIsTheSourceOfIDsAndClaims(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	w, err := worker.New(ctx, st, worker.Config{Shards: 1, OwnShards: []int{0}, Rand: zeros{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(w.ID(), "-000000") {
		t.Fatalf("default worker id %q did not come from Rand", w.ID())
	}
	var claimID string
	w.Handle("job", func(_ context.Context, t *task.Task) (json.RawMessage, error) {
		claimID = t.Claim.ID
		return nil, nil
	})
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Submit(ctx, "job", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Poll(ctx); n != 1 || err != nil {
		t.Fatalf("poll claimed %d: %v", n, err)
	}
	w.Wait()
	if tk, err := p.Get(ctx, id); err != nil || tk.Status != task.Succeeded {
		t.Fatalf("task: %+v %v", tk, err)
	}
	if claimID != strings.Repeat("0", 24) {
		t.Fatalf("claim id %q did not come from Rand", claimID)
	}
}
