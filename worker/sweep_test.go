package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
)

// applicationRace writes, once the keeper has listed a lapsed lease object
// of worker x, x's application to join at that key (x came back) just
// before the keeper's next write of the fleet object: between the
// keeper's listing and its sweep of what it listed. It records whether a
// DELETE then removed the fresh application.
type applicationRace struct {
	s3store.Store
	mu          sync.Mutex
	listedStale bool
	appliedAt   time.Time // when x's application landed (zero: not yet)
	listsAfter  int       // the keeper's listings of the leases since
	deleted     bool      // a DELETE removed the application within its TTL
}

var xKey = shards.LeaseKey("x", false)

func (s *applicationRace) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	page, err := s.Store.List(ctx, prefix, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.appliedAt.IsZero() && prefix == shards.LeasePrefix {
		s.listsAfter++
	}
	for _, o := range page.Objects {
		if o.Key == xKey && s.appliedAt.IsZero() && time.Since(o.LastModified) > time.Minute {
			s.listedStale = true
		}
	}
	return page, err
}

func (s *applicationRace) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	s.mu.Lock()
	race := key == shards.FleetKey && s.listedStale && s.appliedAt.IsZero()
	s.mu.Unlock()
	if race {
		app, _ := json.Marshal(shards.Application{Types: []string{"job"}, TTL: 3 * time.Second})
		if _, err := s.Store.Put(ctx, xKey, app, s3store.PutOptions{}); err != nil {
			panic(err)
		}
		s.mu.Lock()
		s.appliedAt = time.Now()
		s.mu.Unlock()
	}
	return s.Store.Put(ctx, key, body, opts)
}

func (s *applicationRace) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	if key == xKey {
		s.mu.Lock()
		if !s.appliedAt.IsZero() && time.Since(s.appliedAt) < 3*time.Second {
			if _, err := s.Store.Head(ctx, key); err == nil {
				s.deleted = true
			}
		}
		s.mu.Unlock()
	}
	return s.Store.Delete(ctx, key, opts)
}

// The keeper deletes the lease objects of workers that are not members
// once they have certainly lapsed, from its listing. An application to
// join that the worker writes at that key between the keeper's listing
// and its DELETE (it came back) is not deleted with the lapsed object it
// replaced: the applicant's join would wait until it applied again.
func TestTheKeeperDeletesNoApplicationWrittenSinceItsListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mst := mem.New()
		// x's lease object lapsed an hour ago (x died a leased member).
		mst.SetNow(func() time.Time { return time.Now().Add(-time.Hour) })
		if _, err := mst.Put(context.Background(), xKey, []byte{}, s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		mst.SetNow(time.Now)
		st := &applicationRace{Store: mst}
		f := newFleet(t, st, 4)
		f.start(leasedConfig(f, "k", 1), st, nil)
		// The keeper's sweep of that listing comes before its next one.
		waitFor(t, "the keeper to list x's lapsed lease, x to apply, and the keeper to list again", 20*time.Second, func() bool {
			st.mu.Lock()
			defer st.mu.Unlock()
			return st.listsAfter > 0
		})
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.deleted {
			t.Fatal("the keeper deleted x's application, written after its listing, within its TTL")
		}
	})
}
