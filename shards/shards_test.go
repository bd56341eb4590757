package shards_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

func TestManifest(t *testing.T) {
	ctx := context.Background()
	t.Run("a new queue gets the default shard count and others agree", func(t *testing.T) {
		st := mem.New()
		m, err := shards.Open(ctx, st, 0)
		if err != nil || m.Shards != shards.DefaultShards || m.Format != shards.FormatVersion {
			t.Fatalf("open new queue: %+v %v", m, err)
		}
		if m2, err := shards.Open(ctx, st, shards.DefaultShards); err != nil || m2.Shards != m.Shards {
			t.Fatalf("reopen: %+v %v", m2, err)
		}
	})
	t.Run("a process configured with another shard count refuses to start", func(t *testing.T) {
		st := mem.New()
		if _, err := shards.Open(ctx, st, 8); err != nil {
			t.Fatal(err)
		}
		_, err := shards.Open(ctx, st, 16)
		if !errors.Is(err, shards.ErrLayoutMismatch) || !strings.Contains(err.Error(), "8 shards") {
			t.Fatalf("want a layout mismatch naming 8 shards, got %v", err)
		}
	})
	t.Run("a newer layout format is refused", func(t *testing.T) {
		st := mem.New()
		st.Put(ctx, shards.ManifestKey, []byte(`{"format":2,"shards":16}`), s3store.PutOptions{})
		if _, err := shards.Open(ctx, st, 0); !errors.Is(err, shards.ErrLayoutMismatch) {
			t.Fatalf("want ErrLayoutMismatch, got %v", err)
		}
	})
	t.Run("a corrupt manifest is a clear error", func(t *testing.T) {
		st := mem.New()
		st.Put(ctx, shards.ManifestKey, []byte(`garbage`), s3store.PutOptions{})
		if _, err := shards.Open(ctx, st, 0); err == nil || !strings.Contains(err.Error(), "not a valid s3queue manifest") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("racing creators agree", func(t *testing.T) {
		st := mem.New()
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			go func() { _, err := shards.Open(ctx, st, 4); errs <- err }()
		}
		for i := 0; i < 8; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestReadyIndex(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	now := time.Date(2026, 11, 25, 23, 30, 15, 0, time.UTC)
	mk := func(at time.Time) *task.Task {
		id, _ := task.NewID(at, strings.NewReader(strings.Repeat("r", 16)))
		return &task.Task{ID: id, Shard: 3, AvailableAt: at}
	}
	past, due, future := mk(now.Add(-time.Hour)), mk(now), mk(now.Add(2*time.Minute))
	for _, tk := range []*task.Task{future, due, past} {
		if err := shards.Announce(ctx, st, tk); err != nil {
			t.Fatal(err)
		}
	}
	st.Put(ctx, shards.ReadyPrefix(3)+"000-not-a-bucket", nil, s3store.PutOptions{})
	got, bad, err := shards.ListReady(ctx, st, 3, now, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != past.ID || got[1].ID != due.ID {
		t.Fatalf("due entries = %+v, want the past and the due one, oldest first", got)
	}
	if len(bad) != 1 {
		t.Fatalf("malformed entries = %v, want 1", bad)
	}
	e, err := shards.ParseReadyKey(shards.ReadyKey(3, due.ID, due.AvailableAt))
	if err != nil || e.ID != due.ID || e.Shard != 3 {
		t.Fatalf("round trip: %+v %v", e, err)
	}
}

func TestScanFindsNewTasksOnceAndStopsAtTheFuture(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	now := time.Now()
	put := func(at time.Time) string {
		id, _ := task.NewID(at, strings.NewReader(strings.Repeat("x", 16)))
		if _, err := st.Put(ctx, task.Key(0, id), []byte("{}"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a := put(now.Add(-3 * time.Second))
	b := put(now.Add(-time.Second))
	put(now.Add(time.Hour)) // not due
	s := shards.NewScan(0, now.Add(-time.Minute), 5*time.Second)
	c, err := s.Next(ctx, st, now, 10)
	if err != nil || len(c) != 2 || c[0].ID != a || c[1].ID != b {
		t.Fatalf("first scan = %+v %v, want a and b", c, err)
	}
	for _, x := range c {
		s.Seen(x, x.ETag)
	}
	c, _ = s.Next(ctx, st, now, 10)
	if len(c) != 0 {
		t.Fatalf("second scan handed out %d seen keys again", len(c))
	}
	late := put(now.Add(-2 * time.Second)) // landed behind the cursor, within the lag
	c, _ = s.Next(ctx, st, now, 10)
	if len(c) != 1 || c[0].ID != late {
		t.Fatalf("scan missed a task that landed within the lag: %+v", c)
	}
	if lists := st.Counts().Of(s3store.OpList); lists != 3 {
		t.Fatalf("3 scans made %d LISTs, want 3 (one page each)", lists)
	}
	if gets := st.Counts().Of(s3store.OpGet); gets != 0 {
		t.Fatalf("scans made %d GETs; they must read only the listing", gets)
	}
}
