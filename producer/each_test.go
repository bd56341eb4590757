package producer_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

// peakStore records how many task PUTs run at once. Its first n PUTs wait
// until n are in at once, so a helper that allows n reaches n.
type peakStore struct {
	s3store.Store
	n    int
	full chan struct{}

	mu              sync.Mutex
	cur, peak, seen int
}

func newPeakStore(n int) *peakStore {
	return &peakStore{Store: mem.New(), n: n, full: make(chan struct{})}
}

func (s *peakStore) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if !strings.HasPrefix(key, "tasks/") {
		return s.Store.Put(ctx, key, body, opts)
	}
	s.mu.Lock()
	s.cur++
	s.seen++
	s.peak = max(s.peak, s.cur)
	first := s.seen <= s.n
	if s.cur == s.n && s.seen == s.n {
		close(s.full)
	}
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.cur--; s.mu.Unlock() }()
	if first {
		select {
		case <-s.full:
		case <-time.After(deadline):
			return "", errors.New("the first PUTs never ran all at once")
		}
	}
	return s.Store.Put(ctx, key, body, opts)
}

// count yields 0..n-1 and counts the items taken.
func count(n int, taken *atomic.Int64) iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := range n {
			taken.Add(1)
			if !yield(i) {
				return
			}
		}
	}
}

// peak is a counter that remembers its highest value.
type peak struct {
	mu       sync.Mutex
	cur, max int
}

func (p *peak) add(d int) {
	p.mu.Lock()
	p.cur += d
	p.max = max(p.max, p.cur)
	p.mu.Unlock()
}

// Reserve, then build: over 10,000 items with n = 8, no more than 8
// payloads exist and no more than 8 submissions run at once.
func TestSubmitEachHoldsAtMostNPayloads(t *testing.T) {
	const items, n = 10_000, 8
	ctx := context.Background()
	st := newPeakStore(n)
	p, err := producer.New(ctx, st, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	var held, building peak // payloads built and not yet yielded; builds running
	var taken atomic.Int64
	var yielded atomic.Int64
	build := func(_ context.Context, i int) (producer.Request, error) {
		building.add(1)
		defer building.add(-1)
		held.add(1)
		if got := taken.Load() - yielded.Load(); got > n {
			// Items are taken only once a slot is free.
			t.Errorf("%d items taken and not finished", got)
		}
		payload := make([]byte, 1024) // the heavy input, built inside the slot
		return producer.Request{Type: "t", Input: map[string]any{"i": i, "payload": len(payload)}}, nil
	}
	ids := make(map[string]bool, items)
	for i, res := range producer.SubmitEach(ctx, p, n, count(items, &taken), build) {
		held.add(-1)
		yielded.Add(1)
		if res.Err != nil || res.ID == "" || ids[res.ID] {
			t.Fatalf("item %d: %+v", i, res)
		}
		ids[res.ID] = true
	}
	if len(ids) != items {
		t.Fatalf("%d tasks, want %d", len(ids), items)
	}
	if st.peak != n || held.max != n || building.max > n {
		t.Errorf("peak concurrent PUTs %d, peak payloads held %d, peak builds %d; want %d, %d and at most %d", st.peak, held.max, building.max, n, n, n)
	}
	t.Logf("%d items: peak PUTs %d, peak payloads %d, peak builds %d", items, st.peak, held.max, building.max)
}

func TestSubmitEachReportsBuildErrors(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	before := st.Counts().Of(s3store.OpPut)
	var taken atomic.Int64
	bad := errors.New("unreadable")
	failed := 0
	for i, res := range producer.SubmitEach(ctx, p, 3, count(10, &taken), func(_ context.Context, i int) (producer.Request, error) {
		if i%2 == 1 {
			return producer.Request{}, fmt.Errorf("item %d: %w", i, bad)
		}
		return producer.Request{Type: "t", Input: i}, nil
	}) {
		if (i%2 == 1) != errors.Is(res.Err, bad) || (res.Err == nil) == (res.ID == "") {
			t.Errorf("item %d: %+v", i, res)
		}
		if res.Err != nil {
			failed++
		}
	}
	if puts := st.Counts().Of(s3store.OpPut) - before; failed != 5 || puts != 5 {
		t.Errorf("%d failed, %d PUTs; want 5 and 5", failed, puts)
	}
}

// Breaking out of the loop stops taking items and returns once the
// submissions under way have ended.
func TestSubmitEachStopsWhenTheLoopBreaks(t *testing.T) {
	ctx := context.Background()
	p, _ := setup(t)
	var taken atomic.Int64
	seen := 0
	for _, res := range producer.SubmitEach(ctx, p, 4, count(1000, &taken), func(_ context.Context, i int) (producer.Request, error) {
		return producer.Request{Type: "t", Input: i}, nil
	}) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		seen++
		if seen == 10 {
			break
		}
	}
	if got := taken.Load(); got > 10+4 {
		t.Errorf("%d items taken after a break at the 10th result, want at most 14", got)
	}
}

// When ctx ends, SubmitEach takes no more items and reports those it took.
// The consumer cancels as it reads the 5th result: no item is taken after
// that, and every item taken is reported.
func TestSubmitEachStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, _ := setup(t)
	var taken atomic.Int64
	results := 0
	var atCancel int64
	for i, res := range producer.SubmitEach(ctx, p, 2, count(1000, &taken), func(_ context.Context, i int) (producer.Request, error) {
		return producer.Request{Type: "t", Input: i}, nil
	}) {
		if res.Err != nil && !errors.Is(res.Err, context.Canceled) {
			t.Errorf("item %d: %v", i, res.Err)
		}
		results++
		if results == 5 {
			cancel()
			atCancel = taken.Load()
		}
	}
	if got := taken.Load(); int64(results) != got || got != atCancel {
		t.Errorf("%d items taken (%d when ctx ended), %d results: want every item taken reported and none taken after the cancel", got, atCancel, results)
	}
}
