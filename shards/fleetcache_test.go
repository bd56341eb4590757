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

// Members whose entries last less than the cache's view (member_ttl below
// 3 × FleetCacheTTL) renew more often than the view is read: once the
// routes of a view have lapsed (its members may have turned suspect), the
// cache reads the fleet again rather than route on a view that shows
// members who renewed on time as suspect. (Routing on the stale view sent
// every task to shard 0: a producer opened before a reshard put none of 20
// tasks in the new shards in about 1 run in 12.)
func TestFleetCacheRoutesByAViewNoOlderThanItsMembersRenewals(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const ttl = 600 * time.Millisecond
	fleetAt := func(at time.Time) shards.Fleet {
		f := shards.Fleet{Shards: 4}
		for _, id := range []string{"a", "b", "c", "d"} {
			f.Members = append(f.Members, shards.Member{ID: id, Joined: t0, Renewed: at, ExpiresAt: at.Add(ttl), Types: []string{"x"}})
		}
		return f
	}
	write := func(at time.Time) {
		f, etag, err := shards.ReadFleet(ctx, st)
		if err != nil && !errors.Is(err, s3store.ErrNotFound) {
			t.Fatal(err)
		}
		if _, _, err := shards.UpdateFleet(ctx, st, s3store.CAS{}, f, etag, func(g *shards.Fleet) bool { *g = fleetAt(at); return true }); err != nil {
			t.Fatal(err)
		}
	}
	local := t0
	c := shards.NewFleetCache(st, 100*time.Millisecond, clock.LocalFunc(func() time.Time { return local }), nil)
	for step := range 10 {
		// The members renew every third of their TTL; S3 time and the
		// cache's local clock run together.
		at := t0.Add(time.Duration(step) * ttl / 3)
		write(at)
		local = at
		now := clock.Interval{Earliest: at.Add(10 * time.Millisecond), Latest: at.Add(20 * time.Millisecond)}
		if got := c.ShardsFor(ctx, "x", now, 4); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Fatalf("at +%v (the members renewed at it), routes %v, want every shard", at.Sub(t0), got)
		}
	}
}
