package shards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/s3queue/s3queue/s3store"
)

// ErrShrink reports a reshard to fewer shards than the queue has: tasks
// in the shards that would go are found only by listing them, so they
// would be lost to the workers.
var ErrShrink = errors.New("shrinking is not supported")

// Reshard grows the queue's shard count to n while producers, workers and
// monitors run, and returns the manifest as it now is. It writes the
// manifest by CAS (format 2, the old count appended to Previous), so two
// reshards at once both decide on the manifest they replace: the second
// re-reads and grows from there or refuses. Then it raises the fleet
// object's shard count (Fleet.Shards), which is how running processes
// learn of the change: members assign shards by it from their next fleet
// read, and every process re-reads the manifest when it sees a count larger
// than its own. A crash between the two writes is repaired by the members,
// whose next renewal raises the fleet's count to their manifest's.
//
// Tasks stay where they were placed: a task id is found by trying each
// count of Manifest.Counts (one more GET per older count, for tasks placed
// before the reshard).
//
// n equal to the current count changes nothing in the manifest (and
// raises the fleet's count if a reshard stopped short of it); n smaller is
// ErrShrink; n outside 1..MaxShards is refused. A store without a queue is
// an error wrapping s3store.ErrNotFound. Requests: a GET and a PUT of the
// manifest, a GET and a PUT of the fleet object (created if there is none
// yet), and a retry of either after a lost race; a failed manifest PUT
// is read back (a GET).
func Reshard(ctx context.Context, st s3store.Store, n int) (Manifest, error) {
	_, after, err := Grow(ctx, st, n)
	return after, err
}

// Grow is Reshard, and also returns the manifest it replaced (the one it
// found, when it changed nothing).
func Grow(ctx context.Context, st s3store.Store, n int) (before, after Manifest, err error) {
	var cas s3store.CAS // a reshard is rare: host-time pauses after a lost race
	if n < 1 || n > MaxShards {
		return Manifest{}, Manifest{}, fmt.Errorf("reshard: shard count %d out of range 1..%d", n, MaxShards)
	}
	var out Manifest
	err = cas.Retry(ctx, func(int) (bool, error) {
		m, etag, err := readManifest(ctx, st)
		before = m
		if errors.Is(err, s3store.ErrNotFound) {
			return false, fmt.Errorf("reshard: no queue in this store (no %s): %w", ManifestKey, err)
		}
		if err != nil {
			return false, fmt.Errorf("reshard: %w", err)
		}
		switch {
		case n < m.Shards:
			return false, fmt.Errorf("reshard: %w: the queue has %d shards, more than the %d asked for", ErrShrink, m.Shards, n)
		case n == m.Shards:
			out = m
			return false, nil
		}
		next := m
		next.Format, next.Shards = FormatVersion, n
		next.Previous = append(append([]int(nil), m.Previous...), m.Shards)
		body, _ := json.Marshal(next)
		if _, err := st.Put(ctx, ManifestKey, body, s3store.PutOptions{IfMatch: etag}); err != nil {
			// A write whose response was lost (the store's retry then
			// meets it: a 412, or an error after it landed) is this
			// reshard's all the same: the manifest holds its bytes. Taken
			// for someone else's, the retry found the count asked for,
			// and the reshard it had made reported "nothing to do". (A
			// reshard to the same count from the same manifest writes the
			// same bytes: it is reported too, as made.)
			if obj, gerr := st.Get(ctx, ManifestKey); gerr == nil && bytes.Equal(obj.Body, body) {
				out = next
				return false, nil
			}
			return s3store.LostRace(err), fmt.Errorf("reshard: write queue manifest: %w", err)
		}
		out = next
		return false, nil
	})
	if err != nil {
		return Manifest{}, Manifest{}, err
	}
	// The fleet object is written even when there is none yet: a worker
	// that opened the manifest before this reshard may be about to create
	// it, and would record its own, older count.
	f, etag, err := ReadFleet(ctx, st)
	if err != nil && !errors.Is(err, ErrCorruptFleet) {
		return before, out, fmt.Errorf("reshard: the manifest says %d shards; members learn it at their next renewal: %w", out.Shards, err)
	}
	_, _, err = UpdateFleet(ctx, st, cas, f, etag, func(f *Fleet) bool {
		if f.Shards >= out.Shards {
			return false
		}
		f.Shards = out.Shards
		return true
	})
	if err != nil {
		return before, out, fmt.Errorf("reshard: the manifest says %d shards; members learn it at their next renewal: %w", out.Shards, err)
	}
	return before, out, nil
}
