package shards_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
