package shards_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
)

// slowFleetStore holds every read of the fleet object until released.
type slowFleetStore struct {
	s3store.Store
	reads   atomic.Int32
	started chan struct{}
	release chan struct{}
}

func (s *slowFleetStore) Get(ctx context.Context, key string) (s3store.Object, error) {
	if key == shards.FleetKey {
		s.reads.Add(1)
		s.started <- struct{}{}
		<-s.release
	}
	return s.Store.Get(ctx, key)
}

// Callers that need the fleet while another reads it wait for that read and
// share it (one request), and a caller whose context ends while it waits
// gives up at once instead of queueing behind the request.
func TestFleetCacheSharesOneReadAndHoldsNoLockAcrossIt(t *testing.T) {
	st := &slowFleetStore{Store: mem.New(), started: make(chan struct{}, 8), release: make(chan struct{})}
	c := shards.NewFleetCache(st, 2*time.Second, nil, nil)
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Get(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	<-st.started // one read is in flight

	waiting, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Get(waiting); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with an ended context while a read is in flight: %v, want context.Canceled", err)
	}
	_ = c.Cached() // the view is readable while the request is in flight

	close(st.release)
	wg.Wait()
	if n := st.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the fleet object for three concurrent Gets, want 1", n)
	}
}

// The cache's routing answers as the fleet would at every instant: as a
// member's entry expires, its shard leaves the routes of its type.
func TestFleetCacheRoutesAsTheFleetDoes(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	f := shards.Fleet{Members: []shards.Member{
		{ID: "a", Joined: t0, ExpiresAt: t0.Add(30 * time.Second), Types: []string{"x", "y"}},
		{ID: "b", Joined: t0.Add(time.Second), ExpiresAt: t0.Add(10 * time.Second), Types: []string{"y"}},
		{ID: "c", Joined: t0.Add(2 * time.Second), ExpiresAt: t0.Add(20 * time.Second), Types: []string{"x"}},
	}}
	if _, _, err := shards.UpdateFleet(ctx, st, s3store.CAS{}, shards.Fleet{}, "", func(g *shards.Fleet) bool { *g = f; return true }); err != nil {
		t.Fatal(err)
	}
	margin := time.Second
	c := shards.NewFleetCache(st, margin, nil, nil)
	for _, at := range []time.Duration{0, 5 * time.Second, 11 * time.Second, 12 * time.Second, 21 * time.Second, 40 * time.Second} {
		now := clock.Interval{Earliest: t0.Add(at), Latest: t0.Add(at + 500*time.Millisecond)}
		for _, typ := range []string{"x", "y", "z"} {
			got := c.ShardsFor(ctx, typ, now, 8)
			want := f.ShardsFor(typ, now, margin, 8)
			if len(want) == 0 {
				for s := range shards.Active(len(f.Live(now, margin)), 8) {
					want = append(want, s)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("at +%v, type %s: routes %v, want %v", at, typ, got, want)
			}
		}
	}
}
