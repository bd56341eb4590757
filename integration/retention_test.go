package integration

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/internal/retention"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// requeueBeforeDelete requeues the task at key just before the first
// conditional PUT or DELETE of it: a requeue landing between retention's
// read and its deletion.
type requeueBeforeDelete struct {
	s3store.Store
	t    *testing.T
	key  string
	once sync.Once
}

func (s *requeueBeforeDelete) requeue(ctx context.Context, key string) {
	if key != s.key {
		return
	}
	s.once.Do(func() {
		v, err := taskio.Load(ctx, s.Store, key)
		if err == nil {
			err = v.Task.Requeue(time.Now())
		}
		if err == nil {
			_, err = taskio.Update(ctx, s.Store, clock.System(), v.Task, v.ETag)
		}
		if err != nil {
			s.t.Error(err)
		}
	})
}

func (s *requeueBeforeDelete) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if opts.IfMatch != "" {
		s.requeue(ctx, key)
	}
	return s.Store.Put(ctx, key, body, opts)
}

func (s *requeueBeforeDelete) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	s.requeue(ctx, key)
	return s.Store.Delete(ctx, key, opts)
}

// The deletion shared by the monitor's retention and `s3queue purge`, on
// real servers: MinIO ignores a conditional DELETE (the task is tombstoned
// by CAS first), versitygw honours it. A finished task and its record go;
// a task requeued between the read and the deletion lives on.
func TestRetentionDeletesSafely(t *testing.T) {
	honoured := map[string]bool{harness.MinIOName: false, harness.VersityGWName: true}
	harness.ForEach(t, func(t *testing.T, srv *harness.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st := newStore(t, srv)
		past := time.Now().Add(-2 * time.Hour)
		put := func(key string) *task.Task {
			id, err := task.NewID(past, rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := task.New(id, 0, task.Spec{Type: "x", IdempotencyKey: key}, past)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tk.Cancel(past); err != nil {
				t.Fatal(err)
			}
			if _, err := taskio.Create(ctx, st, clock.System(), tk); err != nil {
				t.Fatal(err)
			}
			if key != "" {
				rec := task.IdempotencyRecord{ID: tk.ID, Spec: task.SpecHash("x", nil)}
				if _, err := st.Put(ctx, task.IdempotencyRecordKey(key), rec.Encode(), s3store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			return tk
		}
		finished, requeued := put("k1"), put("")
		now, err := clock.New(st, clock.Config{}).Now(ctx)
		if err != nil {
			t.Fatal(err)
		}

		d := &retention.Deleter{Store: st, Clock: clock.New(st, clock.Config{}), Local: clock.System(), DeleteHonoured: honoured[srv.Name], Log: slog.Default()}
		out, err := d.Expire(ctx, finished.Key(), time.Hour, now)
		if err != nil || out.Result != retention.Deleted {
			t.Fatalf("%s: Expire of a task finished 2h ago: %v %v", srv.Name, out.Result, err)
		}
		for _, key := range []string{finished.Key(), task.IdempotencyRecordKey("k1")} {
			if _, err := st.Head(ctx, key); !errors.Is(err, s3store.ErrNotFound) {
				t.Errorf("%s: %s after Expire: %v, want not found", srv.Name, key, err)
			}
		}

		d.Store = &requeueBeforeDelete{Store: st, t: t, key: requeued.Key()}
		out, err = d.Expire(ctx, requeued.Key(), time.Hour, now)
		if err != nil || out.Result != retention.Changed {
			t.Errorf("%s: Expire of a task requeued meanwhile: %v %v, want Changed", srv.Name, out.Result, err)
		}
		v, err := taskio.Load(ctx, st, requeued.Key())
		if err != nil || v.Task.Status != task.Pending || v.Task.Retired {
			t.Errorf("%s: the requeued task after Expire: %v %v", srv.Name, v.Task, err)
		}
	})
}
