package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/retention"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// retentionExpiry deletes finished tasks after their retention and drops
// succeeded tasks' results after their TTL, object by object as the sweeps
// list them.
type retentionExpiry struct {
	st    s3store.Store
	clock *clock.Authoritative
	local clock.Local
	log   *slog.Logger
	cas   s3store.CAS
	// retention is Config.Retention (0: kept for ever), resultTTL
	// Config.ResultTTL (0: results kept until retention).
	retention, resultTTL time.Duration
	// deleteHonoured is the queue manifest's, as the monitor knows it now.
	deleteHonoured func() bool
	// known is the monitor's cache of what task objects said (shared with
	// the sweeps): what retention read is remembered there.
	known map[string]known
	// publish and publishCorrupt publish the monitor's events.
	publish        func(events.Kind, *task.Task, error)
	publishCorrupt func(key string, err error)
}

// inspectFinished does what a listed task object that is finished by its
// size needs: its deletion once its retention passed by its last write,
// else the drop of its result once the TTL passed.
func (r *retentionExpiry) inspectFinished(ctx context.Context, o s3store.ObjectInfo, iv clock.Interval, st *TickStats) error {
	// Finished (which way is read at retention): nothing to remember,
	// so retained history costs the monitor no memory.
	delete(r.known, o.Key)
	if r.retention > 0 && iv.After(o.LastModified.Add(r.retention)) {
		return r.expireRetention(ctx, o.Key, iv, st)
	}
	if r.holdsResult(o) && iv.After(o.LastModified.Add(r.resultTTL)) {
		return r.expireResult(ctx, o.Key, iv, st)
	}
	return nil
}

// due reports whether a task known finished, last changed at updated, is
// past its retention.
func (r *retentionExpiry) due(updated time.Time, iv clock.Interval) bool {
	return r.retention > 0 && iv.After(updated.Add(r.retention))
}

// expireRetention deletes a finished task and its idempotency record
// through internal/retention, which `s3queue purge` shares: the task is
// re-read first, and the decision is made on what it says (the listing
// that sent us here may predate a requeue and a fresh completion), and a
// task requeued meanwhile is never deleted (see package retention).
func (r *retentionExpiry) expireRetention(ctx context.Context, key string, iv clock.Interval, st *TickStats) error {
	d := retention.Deleter{Store: r.st, Clock: r.clock, Local: r.local, DeleteHonoured: r.deleteHonoured(), CAS: r.cas, Log: r.log}
	out, err := d.Expire(ctx, key, r.retention, iv)
	st.Loaded++
	if err != nil {
		return err
	}
	switch out.Result {
	case retention.Corrupt:
		// An odd-sized object that is not a task read as finished until now.
		st.Corrupt++
		r.log.Error("corrupt task object; skipped", "key", key, "err", out.Err)
		r.publishCorrupt(key, out.Err)
		r.known[key] = known{etag: out.Read.ETag, corrupt: true, loaded: true}
	case retention.Gone, retention.Changed:
		// Gone, or changed since it was read (requeued, or retired by
		// another monitor): the sweeps see what it is now.
		delete(r.known, key)
	case retention.Kept:
		r.known[key] = remember(out.Read)
	case retention.Waiting:
		// Its record is on its way out through another monitor: a later
		// sweep deletes the task.
	case retention.Deleted:
		delete(r.known, key)
		st.Deleted++
		r.publish(events.Deleted, out.Read.Task, nil)
	}
	return nil
}

// holdsResult reports whether o is a succeeded task that holds a result
// by its size, with a result TTL on.
func (r *retentionExpiry) holdsResult(o s3store.ObjectInfo) bool {
	return r.resultTTL > 0 && !shards.IsPointer(o.Key) && task.HoldsResultBySize(o.Size)
}

// expireResult drops the result of the succeeded task at key if it
// finished ResultTTL ago by S3 time: one GET, one PUT (If-Match), and for a
// result stored apart one DELETE after the PUT landed. The task no longer
// references the object when it goes; a crash between the two leaves it
// unreferenced (docs/scheduling.md#results-ttl-and-large-results).
func (r *retentionExpiry) expireResult(ctx context.Context, key string, iv clock.Interval, st *TickStats) error {
	v, err := taskio.Load(ctx, r.st, key)
	st.Loaded++
	switch {
	case errors.Is(err, s3store.ErrNotFound), errors.Is(err, task.ErrCorrupt), errors.Is(err, task.ErrUnsupportedFormat):
		return nil // gone; or corrupt, reported by retention when its time comes
	case err != nil:
		return err
	}
	t := v.Task
	if t.Status != task.Succeeded || t.Retired || !iv.After(t.UpdatedAt.Add(r.resultTTL)) {
		return nil
	}
	if deps.NeedsPassOn(t) {
		// Its end may still be being passed on (to its dependents, or
		// its slot's next task) under the marker of this version, which
		// the repair honours only while the task stays at it: the result
		// waits for a later sweep until the marker is gone. (No marker of
		// this version can appear after: it is written before the write.)
		// One HEAD, for such tasks only.
		_, err := r.st.Head(ctx, deps.EndedKey(t.ID, t.Shard, t.Version))
		if err == nil {
			return nil
		}
		if !errors.Is(err, s3store.ErrNotFound) {
			return err
		}
	}
	ref, held := t.ResultRef, t.HoldsResult()
	if err := t.ExpireResult(iv.Mid()); err != nil {
		return err
	}
	if _, err := taskio.Update(ctx, r.st, r.local, t, v.ETag); s3store.LostRace(err) || errors.Is(err, s3store.ErrNotFound) {
		return nil // changed meanwhile (another monitor, retention): a later sweep sees it
	} else if err != nil {
		return err
	}
	if !held {
		return nil // written before sizes told results apart; its size says so now
	}
	st.ResultsExpired++
	if ref != nil {
		if err := r.st.Delete(ctx, ref.Key, s3store.DeleteOptions{}); err != nil && !errors.Is(err, s3store.ErrNotFound) {
			return fmt.Errorf("delete expired result object %s of task %s: %w", ref.Key, t.ID, err)
		}
	}
	return nil
}
