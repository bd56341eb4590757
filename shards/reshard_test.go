package shards_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
)

func readManifest(t *testing.T, st s3store.Store) shards.Manifest {
	t.Helper()
	m, err := shards.ReadManifest(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestReshardGrowsTheShardCountAndRecordsTheOldOne(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	created, err := shards.Open(ctx, st, 16)
	if err != nil {
		t.Fatal(err)
	}
	if created.Format != shards.FormatOriginal || !reflect.DeepEqual(created.Counts(), []int{16}) {
		t.Fatalf("a new queue: format %d counts %v, want format 1 and [16]", created.Format, created.Counts())
	}
	m, err := shards.Reshard(ctx, st, 32)
	if err != nil {
		t.Fatal(err)
	}
	if m.Shards != 32 || m.Format != shards.FormatVersion || !reflect.DeepEqual(m.Previous, []int{16}) {
		t.Fatalf("after a reshard to 32: %+v, want 32 shards, format 2, previous [16]", m)
	}
	if !m.CreatedAt.Equal(created.CreatedAt) || m.ConditionalDelete != created.ConditionalDelete {
		t.Fatalf("the reshard lost the manifest's other fields: %+v, was %+v", m, created)
	}
	if _, err := shards.Reshard(ctx, st, 64); err != nil {
		t.Fatal(err)
	}
	if got := readManifest(t, st); got.Shards != 64 || !reflect.DeepEqual(got.Counts(), []int{64, 32, 16}) {
		t.Fatalf("after 16 -> 32 -> 64: %+v counts %v, want counts [64 32 16]", got, got.Counts())
	}
	// A process configured with the old count is told the queue moved on.
	if _, err := shards.Open(ctx, st, 16); !errors.Is(err, shards.ErrLayoutMismatch) || !strings.Contains(err.Error(), "resharded from 16 to 64") {
		t.Fatalf("open with shards = 16 after the reshard: %v, want a layout mismatch saying it was resharded", err)
	}
	if m, err := shards.Open(ctx, st, 0); err != nil || m.Shards != 64 {
		t.Fatalf("open with shards = 0: %+v %v", m, err)
	}
}

func TestReshardRefuses(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	if _, err := shards.Reshard(ctx, st, 8); !errors.Is(err, s3store.ErrNotFound) || !strings.Contains(err.Error(), "no queue") {
		t.Fatalf("reshard of a store without a queue: %v, want not found naming no queue", err)
	}
	if st.Len() != 0 {
		t.Fatalf("a refused reshard wrote %d objects", st.Len())
	}
	if _, err := shards.Open(ctx, st, 8); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    int
		want string
	}{{4, "shrinking is not supported"}, {0, "out of range"}, {-1, "out of range"}, {shards.MaxShards + 1, "out of range"}} {
		_, err := shards.Reshard(ctx, st, tc.n)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("reshard to %d: %v, want %q", tc.n, err, tc.want)
		}
		if tc.n == 4 && !errors.Is(err, shards.ErrShrink) {
			t.Errorf("reshard to 4: %v, want ErrShrink", err)
		}
	}
	m, err := shards.Reshard(ctx, st, 8)
	if err != nil || m.Shards != 8 || m.Format != shards.FormatOriginal {
		t.Fatalf("reshard to the same count: %+v %v, want the manifest unchanged", m, err)
	}
	// The first one recorded the count in the fleet object (a repair of a
	// reshard that stopped short); a second one writes nothing.
	ctr := s3store.NewCounter(st)
	if _, err := shards.Reshard(ctx, ctr, 8); err != nil {
		t.Fatal(err)
	}
	if c := ctr.Counts(); c.Of(s3store.OpPut) != 0 {
		t.Fatalf("a reshard to the same count wrote: %s", c)
	}
}

// An older manifest (format 1, written before the history existed) is
// resharded like any other.
func TestReshardOfAFormat1Manifest(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	body, _ := json.Marshal(map[string]any{"format": 1, "shards": 4, "created_at": "2026-01-02T03:04:05Z"})
	st.Put(ctx, shards.ManifestKey, body, s3store.PutOptions{})
	if m := readManifest(t, st); !reflect.DeepEqual(m.Counts(), []int{4}) {
		t.Fatalf("format-1 manifest counts %v, want [4]", m.Counts())
	}
	m, err := shards.Reshard(ctx, st, 6)
	if err != nil || m.Format != 2 || !reflect.DeepEqual(m.Counts(), []int{6, 4}) || m.CreatedAt.Year() != 2026 {
		t.Fatalf("reshard of a format-1 manifest: %+v %v", m, err)
	}
}

// raceStore runs `first` just before the first write of the manifest it
// sees, so the write it delays loses a race to it.
type raceStore struct {
	s3store.Store
	once  sync.Once
	first func()
}

func (s *raceStore) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if key == shards.ManifestKey {
		s.once.Do(s.first)
	}
	return s.Store.Put(ctx, key, body, opts)
}

func TestReshardsAtOnce(t *testing.T) {
	ctx := context.Background()
	t.Run("the one that lost the race grows from the winner's count", func(t *testing.T) {
		st := mem.New()
		if _, err := shards.Open(ctx, st, 16); err != nil {
			t.Fatal(err)
		}
		rs := &raceStore{Store: st, first: func() {
			if _, err := shards.Reshard(ctx, st, 32); err != nil {
				t.Error(err)
			}
		}}
		m, err := shards.Reshard(ctx, rs, 48)
		if err != nil || m.Shards != 48 || !reflect.DeepEqual(m.Previous, []int{16, 32}) {
			t.Fatalf("reshard to 48 racing one to 32: %+v %v, want 48 shards after [16 32]", m, err)
		}
		if got := readManifest(t, st); !reflect.DeepEqual(got.Counts(), []int{48, 32, 16}) {
			t.Fatalf("counts %v, want [48 32 16]: no count a task was placed with is forgotten", got.Counts())
		}
	})
	t.Run("the one that lost the race to a larger count refuses to shrink", func(t *testing.T) {
		st := mem.New()
		if _, err := shards.Open(ctx, st, 16); err != nil {
			t.Fatal(err)
		}
		rs := &raceStore{Store: st, first: func() {
			if _, err := shards.Reshard(ctx, st, 32); err != nil {
				t.Error(err)
			}
		}}
		if _, err := shards.Reshard(ctx, rs, 24); !errors.Is(err, shards.ErrShrink) {
			t.Fatalf("reshard to 24 losing to one to 32: %v, want ErrShrink", err)
		}
		if got := readManifest(t, st); got.Shards != 32 || !reflect.DeepEqual(got.Previous, []int{16}) {
			t.Fatalf("manifest %+v, want the winner's 32 after [16]", got)
		}
	})
}

func TestReshardRaisesTheFleetsCount(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	if _, err := shards.Open(ctx, st, 2); err != nil {
		t.Fatal(err)
	}
	// No fleet yet: a worker that opened the manifest before the reshard
	// may be about to create one with its own count, so the reshard does.
	if _, err := shards.Reshard(ctx, st, 3); err != nil {
		t.Fatal(err)
	}
	f, etag, _ := shards.ReadFleet(ctx, st)
	if f.Shards != 3 || len(f.Members) != 0 {
		t.Fatalf("fleet after a reshard of a queue without one: %+v, want an empty fleet of 3 shards", f)
	}
	if _, _, err := shards.UpdateFleet(ctx, st, s3store.CAS{}, f, etag, func(f *shards.Fleet) bool {
		f.Members = []shards.Member{{ID: "w"}}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := shards.Reshard(ctx, st, 4); err != nil {
		t.Fatal(err)
	}
	f, _, err := shards.ReadFleet(ctx, st)
	if err != nil || f.Shards != 4 || len(f.Members) != 1 {
		t.Fatalf("fleet after the reshard: %+v %v, want shards 4 and its member kept", f, err)
	}
	if f.ShardCount(2) != 4 || (shards.Fleet{}).ShardCount(2) != 2 {
		t.Fatal("ShardCount: want the fleet's count when recorded, else the held one")
	}
}

// A reshard whose manifest PUT landed with its response lost (the store's
// retry then meets it: 412, or a 500 after the write) reports the reshard
// it made, not "nothing to do": it reads the manifest back and finds its
// own write. (Before, it took the 412 for someone else's write, re-read,
// found the count it asked for, and returned it as the count before.)
func TestAReshardWhoseResponseWasLostReportsItself(t *testing.T) {
	for _, lost := range []error{s3store.ErrPreconditionFailed, s3store.ErrInjected500} {
		t.Run(lost.Error(), func(t *testing.T) {
			ctx := context.Background()
			st := s3store.NewFaults(mem.New())
			if _, err := shards.Open(ctx, st, 4); err != nil {
				t.Fatal(err)
			}
			st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: shards.ManifestKey, Err: lost, AfterWrite: true, Times: 1})
			before, after, err := shards.Grow(ctx, st, 8)
			if err != nil {
				t.Fatal(err)
			}
			if before.Shards != 4 || after.Shards != 8 {
				t.Fatalf("reshard to 8 reports %d -> %d shards, want 4 -> 8", before.Shards, after.Shards)
			}
			if m := readManifest(t, st); m.Shards != 8 || !reflect.DeepEqual(m.Previous, []int{4}) {
				t.Fatalf("manifest %+v, want 8 shards, previous [4]", m)
			}
		})
	}
}
