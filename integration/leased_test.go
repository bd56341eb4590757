package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// TestLeasedMembersOnMinIO runs five `s3queue worker` processes with
// root_members 1 on MinIO: the first renews in fleet.json, the other four
// apply through lease objects and are admitted by it, and renew their
// leases by PUT. One leased worker is killed (SIGKILL): its entry is pruned
// and its lease object deleted, by the S3 time of the lease's
// LastModified as MinIO lists it; every task succeeds (a monitor re-dispatches
// the one the victim may have held).
func TestLeasedMembersOnMinIO(t *testing.T) {
	q := newMinIOQueue(t, 8, 4*time.Minute)
	ctx, srv, bucket, url, st, prod := q.ctx, q.srv, q.bucket, q.url, q.st, q.prod
	bin := buildCLI(t)
	env := []string{"S3QUEUE_STORE=" + url, "S3QUEUE_WORKER_ROOT_MEMBERS=1", "S3QUEUE_WORKER_DEDICATED=true",
		"S3QUEUE_WORKER_MEMBER_TTL=9s", "S3QUEUE_WORKER_LEASE_MARGIN=1s", "S3QUEUE_WORKER_POLL_MAX=1s",
		"S3QUEUE_WORKER_SHUTDOWN_GRACE=5s"}
	procs := map[string]*cliProcess{}
	for i := range 5 {
		id := fmt.Sprintf("w%d", i)
		procs[id] = startCLI(t, bin, append(env, "S3QUEUE_WORKER_ID="+id), "worker", "--exec", "job=cat")
		if i == 0 {
			waitFleet(ctx, t, st, "w0 to join", func(f shards.Fleet) bool { return len(f.Members) == 1 })
		}
	}
	fleet := waitFleet(ctx, t, st, "five members, four of them leased", func(f shards.Fleet) bool {
		leased := 0
		for _, m := range f.Members {
			if m.Leased {
				leased++
			}
		}
		return len(f.Members) == 5 && leased == 4
	})
	// The independent client sees the leases the workers renew.
	leases := listLeases(ctx, t, srv.Minio(), bucket)
	if len(leases) != 4 {
		t.Fatalf("lease objects %v, want the four leased members'", leases)
	}
	var victim string
	for _, m := range fleet.Members {
		if m.Leased {
			victim = m.ID
			break
		}
	}
	// A task the victim held when it was killed is re-dispatched by the
	// monitor once its lease expires, as in production: without one the
	// test passed only when the kill found the victim between tasks.
	startCLI(t, bin, append(append([]string(nil), env...), "S3QUEUE_MONITOR_INTERVAL=1s"), "monitor")
	var ids []string
	for i := range 40 {
		id, err := prod.Submit(ctx, "job", map[string]int{"i": i}, producer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	procs[victim].kill(t)
	killed := time.Now()
	waitFleet(ctx, t, st, victim+"'s entry to be pruned", func(f shards.Fleet) bool {
		for _, m := range f.Members {
			if m.ID == victim {
				return false
			}
		}
		return len(f.Members) == 4
	})
	t.Logf("%s pruned %v after it was killed", victim, time.Since(killed).Round(time.Second))
	for {
		gone := true
		for _, k := range listLeases(ctx, t, srv.Minio(), bucket) {
			gone = gone && !strings.HasSuffix(k, "/"+victim)
		}
		if gone {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s's lease object was never deleted", victim)
		case <-time.After(time.Second):
		}
	}
	for _, id := range ids {
		for {
			tk, err := prod.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if tk.Status == task.Succeeded {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("task %s is %s, want succeeded", id, tk.Status)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	for id, p := range procs {
		if id != victim {
			p.stop(t)
		}
	}
	if left := listLeases(ctx, t, srv.Minio(), bucket); len(left) != 0 {
		t.Errorf("lease objects left after every worker stopped: %v", left)
	}
}

// waitFleet polls fleet.json until ok holds, and returns it.
func waitFleet(ctx context.Context, t *testing.T, st s3store.Store, what string, ok func(shards.Fleet) bool) shards.Fleet {
	t.Helper()
	for {
		f, _, err := shards.ReadFleet(ctx, st)
		if err == nil && ok(f) {
			return f
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last fleet %+v)", what, ctx.Err(), f)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// listLeases lists the queue's lease objects with minio-go.
func listLeases(ctx context.Context, t *testing.T, c *minio.Client, bucket string) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "q/" + shards.LeasePrefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// minioQueue is a queue under prefix q/ of a new MinIO bucket, with a
// producer that created it.
type minioQueue struct {
	ctx         context.Context
	srv         *harness.Server
	bucket, url string
	st          s3store.Store
	prod        *producer.Producer
}

// newMinIOQueue creates a queue of n shards on MinIO; its context ends
// after within, or with the test.
func newMinIOQueue(t *testing.T, n int, within time.Duration) minioQueue {
	t.Helper()
	srv := harness.MinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	q := minioQueue{ctx: ctx, srv: srv, bucket: srv.NewBucket(t)}
	q.url = srv.StoreURL(q.bucket, "q")
	var err error
	if q.st, err = storeurl.Open(ctx, q.url); err != nil {
		t.Fatal(err)
	}
	if q.prod, err = producer.New(ctx, q.st, producer.Config{Shards: n}); err != nil {
		t.Fatal(err)
	}
	return q
}
