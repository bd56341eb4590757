package integration

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
)

// BenchmarkRawConditionalPut measures the server's conditional-PUT rate:
// the physical ceiling every other figure is held against. The raw rates
// of this file are also measured around BenchmarkHeavyLoad's run, whose
// throughput they bound.
func BenchmarkRawConditionalPut(b *testing.B) {
	rate := measureRawPut(b, 8, 10*time.Second)
	b.ReportMetric(rate, "puts/s")
	b.ReportMetric(0, "ns/op")
}

// rawPutRate is the server's ceiling for the queue's kind of write: clients
// goroutines PUT 500-byte objects with If-None-Match: * for d through the
// queue's own store (the same client stack the queue uses).
func rawPutRate(ctx context.Context, st s3store.Store, clients int, d time.Duration) (rate float64, n, errs int64) {
	body := bytes.Repeat([]byte("x"), 500)
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("raw/%02d/%08d", c, i)
				if _, err := st.Put(ctx, key, body, s3store.PutOptions{IfNoneMatch: true}); err != nil {
					bad.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	return float64(ok.Load()) / el.Seconds(), ok.Load(), bad.Load()
}

// rawTaskRate is the server's ceiling for the queue's request mix with no
// coordination at all: each of clients goroutines repeats the minimal
// life of a task — create (If-None-Match: *), GET, two If-Match PUTs —
// on task-sized objects (800 bytes).
func rawTaskRate(ctx context.Context, st s3store.Store, clients int, d time.Duration) (rate float64, errs int64) {
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			body := bytes.Repeat([]byte("y"), 800) // each client changes its own
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("rawtask/%02d/%08d", c, i)
				etag, err := st.Put(ctx, key, body, s3store.PutOptions{IfNoneMatch: true})
				if err == nil {
					var o s3store.Object
					if o, err = st.Get(ctx, key); err == nil {
						body[0] = 'a'
						if etag, err = st.Put(ctx, key, body, s3store.PutOptions{IfMatch: o.ETag}); err == nil {
							body[0] = 'b'
							_, err = st.Put(ctx, key, body, s3store.PutOptions{IfMatch: etag})
						}
					}
				}
				if err != nil {
					bad.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(ok.Load()) / time.Since(start).Seconds(), bad.Load()
}

// measureRawTask runs rawTaskRate on a new bucket and prints it.
func measureRawTask(b *testing.B, clients int, d time.Duration) float64 {
	srv := harness.MinIO(b)
	st, err := storeurl.Open(context.Background(), srv.StoreURL(srv.NewBucket(b), "rawtask"))
	if err != nil {
		b.Fatal(err)
	}
	rate, errs := rawTaskRate(context.Background(), st, clients, d)
	fmt.Printf("raw task-shaped sequences (PUT create, GET, 2 x PUT If-Match; 800 bytes; %d clients, %v): %.0f/s (%d failed)\n", clients, d, rate, errs)
	return rate
}

// measureRawPut runs rawPutRate on a new bucket and prints it.
func measureRawPut(b *testing.B, clients int, d time.Duration) float64 {
	srv := harness.MinIO(b)
	st, err := storeurl.Open(context.Background(), srv.StoreURL(srv.NewBucket(b), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	rate, n, errs := rawPutRate(context.Background(), st, clients, d)
	if errs > 0 {
		b.Logf("raw PUT: %d requests failed", errs)
	}
	fmt.Printf("\nraw conditional PUT (If-None-Match: *, 500 bytes, %d clients, %v): %d PUTs, %.0f PUTs/s\n", clients, d, n, rate)
	return rate
}
