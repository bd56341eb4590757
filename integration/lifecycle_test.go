package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/internal/lifecycletest"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// openStore opens a fresh bucket on srv through the queue's own store URL.
func openStore(t *testing.T, srv *harness.Server, prefix string) (s3store.Store, string) {
	t.Helper()
	bucket := srv.NewBucket(t)
	st, err := storeurl.Open(context.Background(), srv.StoreURL(bucket, prefix))
	if err != nil {
		t.Fatalf("open store on %s: %v", srv.Name, err)
	}
	return st, bucket
}

func TestLifecycleMinIO(t *testing.T) {
	srv := harness.MinIO(t)
	lifecycletest.Run(t, func(t *testing.T) s3store.Store {
		st, _ := openStore(t, srv, "queue")
		return st
	})
}

func TestProviderCheck(t *testing.T) {
	want := map[string]string{harness.MinIOName: s3store.DeleteIgnored, harness.VersityGWName: s3store.DeleteHonoured}
	harness.ForEach(t, func(t *testing.T, srv *harness.Server) {
		st, _ := openStore(t, srv, "")
		r, err := s3store.CheckProvider(context.Background(), st, "doctor/")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Supported(); err != nil {
			t.Fatalf("%s reported unsupported: %v", srv.Name, err)
		}
		if r.ConditionalDelete != want[srv.Name] {
			t.Fatalf("%s: conditional DELETE %s, want %s", srv.Name, r.ConditionalDelete, want[srv.Name])
		}
		t.Logf("%s: %+v", srv.Name, r)
	})
}

// TestIndependentClientSeesTheQueue reads what the queue wrote with
// minio-go, and plants a corrupt task object that the worker must skip.
func TestIndependentClientSeesTheQueue(t *testing.T) {
	srv := harness.MinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, bucket := openStore(t, srv, "q")
	prod, err := producer.New(ctx, st, producer.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	id, err := prod.Submit(ctx, "echo", map[string]string{"hello": "minio"}, producer.Options{ShardKey: "same"})
	if err != nil {
		t.Fatal(err)
	}
	key := "q/" + task.Key(task.ShardFor(id, 2), id)
	obj, err := srv.Minio().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("read %s with minio-go: %v", key, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil || raw["id"] != id || raw["status"] != "pending" {
		t.Fatalf("task object as minio-go sees it: %s", body)
	}

	badID, _ := task.NewID(time.Now().Add(-time.Second), bytes.NewReader(make([]byte, 16)))
	badKey := "q/" + task.Key(task.ShardFor(id, 2), badID)
	// Even size: an odd-sized object reads as a finished task to scans (the
	// size hint, docs/shards.md) and is reported only when retention reads it.
	junk := []byte("\x00\x01 not a task!")
	if _, err := srv.Minio().PutObject(ctx, bucket, badKey, bytes.NewReader(junk), int64(len(junk)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	after, err := prod.Submit(ctx, "echo", nil, producer.Options{ShardKey: "same"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, st, worker.Config{Shards: 2, PollMin: 20 * time.Millisecond, PollMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("echo", func(_ context.Context, tk *task.Task) (json.RawMessage, error) { return tk.Input, nil })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(wctx); close(done) }()
	defer func() { stop(); <-done }()
	for _, want := range []string{id, after} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := prod.Get(ctx, want)
			if err == nil && got.Status == task.Succeeded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s not succeeded behind a corrupt object (%v, %v)", want, got, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The tasks may have been found through ready pointers in the active
	// shard; the sweep of their own shard reports the corrupt object.
	for deadline := time.Now().Add(30 * time.Second); w.Stats().Corrupt == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the corrupt object was not reported")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := srv.Minio().StatObject(ctx, bucket, badKey, minio.StatObjectOptions{}); err != nil {
		t.Fatalf("the corrupt object must be left for an operator, not deleted: %v", err)
	}
}
