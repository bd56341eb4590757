package direct

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
)

// ForgetAfter is how long after its expiry a dead worker's lease is kept,
// so that entries producers route to it from a stale view (at most
// worker_discovery_cache_ttl old, and that is capped well below this) are
// still found and moved. Then its inbox is moved one last time, and its
// lease and doorbell deleted.
const ForgetAfter = time.Hour

// Recovered is what one Recover pass did.
type Recovered struct {
	Dead      []string // the dead workers whose inbox had entries to move
	Moved     int      // inbox entries moved to overflow
	Forgotten int      // leases deleted, ForgetAfter past their expiry
}

// Recover moves the inbox entries of every dead worker (a lease expired
// by S3 time, by now and margin) to overflow, where any worker's
// scavenger claims them. Any process may run it, and several at once:
// each move is a plain PUT of the overflow entry, then a DELETE of the
// inbox entry, so a crash between them leaves a duplicate that the task's
// CAS makes harmless, never a loss.
//
// It costs one LIST of workers/, a GET of each lease whose object was
// written more than recent ago (0 reads them all: a live worker rewrites
// its lease every renewal interval), and for a dead worker a LIST of its
// inbox and a PUT and DELETE per entry; forgetting a lease is a DELETE of
// it and of its doorbell, and a PUT more (lease.Retire) where the
// provider ignores a conditional DELETE (deleteHonoured false: the
// manifest's record, shards.Manifest.DeleteHonoured).
func Recover(ctx context.Context, st s3store.Store, now clock.Interval, margin, recent time.Duration, deleteHonoured bool) (Recovered, error) {
	var rec Recovered
	objs, err := listAll(ctx, st, WorkersPrefix)
	if err != nil {
		return rec, err
	}
	var errs []error
	for _, o := range objs {
		id, ok := LeaseWorker(o.Key)
		if !ok || recent > 0 && o.LastModified.After(now.Earliest.Add(-recent)) {
			continue
		}
		info, err := lease.Peek(ctx, st, o.Key)
		switch {
		case errors.Is(err, s3store.ErrNotFound):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case !lease.Expired(info.ExpiresAt, now, margin):
			continue
		}
		n, err := MoveInbox(ctx, st, id)
		rec.Moved += n
		if n > 0 {
			rec.Dead = append(rec.Dead, id)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if lease.Expired(info.ExpiresAt.Add(ForgetAfter), now, margin) {
			// The last move is done; a producer can no longer route here.
			// The lease goes only if nobody took the name over since it
			// was read (the move takes a while): where conditional DELETE
			// is honoured, DELETE If-Match on the ETag read is atomic.
			// Where it is ignored (MinIO, gofakes3), that DELETE deleted a
			// lease taken over since, and the name then had two holders:
			// the lease is first retired by CAS (lease.Retire), which a
			// takeover since makes fail, and which no Acquire takes over
			// for lease.RetiredGrace; then it is deleted unconditionally,
			// as retention deletes a tombstoned task. A lease retired less
			// than that ago by another process is left to its DELETE; one
			// retired longer ago (its forgetter failed or died) is retired
			// again, and deleted.
			if deleteHonoured {
				if err := st.Delete(ctx, o.Key, s3store.DeleteOptions{IfMatch: info.ETag}); err != nil && !s3store.LostRace(err) && !errors.Is(err, s3store.ErrNotFound) {
					errs = append(errs, err)
					continue
				}
			} else {
				if info.Retired && now.Earliest.Sub(info.Modified) < lease.RetiredGrace {
					continue
				}
				switch err := lease.Retire(ctx, st, o.Key, info); {
				case s3store.LostRace(err), errors.Is(err, s3store.ErrNotFound):
					continue // taken over, or forgotten, since the read
				case err != nil:
					errs = append(errs, err)
					continue
				}
				if err := st.Delete(ctx, o.Key, s3store.DeleteOptions{}); err != nil && !errors.Is(err, s3store.ErrNotFound) {
					errs = append(errs, err)
					continue
				}
			}
			if err := st.Delete(ctx, BellKey(id), s3store.DeleteOptions{}); err != nil && !errors.Is(err, s3store.ErrNotFound) {
				errs = append(errs, err)
			}
			rec.Forgotten++
		}
	}
	return rec, errors.Join(errs...)
}

// MoveInbox moves every entry of worker id's inbox to overflow and
// reports how many it moved. Idempotent.
func MoveInbox(ctx context.Context, st s3store.Store, id string) (int, error) {
	objs, err := listAll(ctx, st, Inbox(id))
	moved := 0
	for _, o := range objs {
		e, perr := ParseEntry(o.Key)
		if perr != nil {
			continue // not ours to move; nothing reads it
		}
		if _, err := st.Put(ctx, OverflowKey(e.Bucket, e.ID, e.Shard), nil, s3store.PutOptions{}); err != nil {
			return moved, fmt.Errorf("move %s to overflow: %w", o.Key, err)
		}
		if err := st.Delete(ctx, o.Key, s3store.DeleteOptions{}); err != nil && !errors.Is(err, s3store.ErrNotFound) {
			return moved, fmt.Errorf("move %s to overflow: %w", o.Key, err)
		}
		moved++
	}
	return moved, err
}
