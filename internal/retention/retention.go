// Package retention deletes finished tasks, and the idempotency records
// that name them, without ever deleting a task that lives again: the
// monitor's retention and `s3queue purge` share it.
//
// Only a final object is ever deleted unconditionally. Where the provider
// honours a conditional DELETE (the manifest says so), DELETE If-Match on
// the ETag read is atomic: a requeue that landed since makes it fail.
// Elsewhere (MinIO ignores the condition) the task is first tombstoned by
// CAS (task.Retire): a requeue that landed makes that write fail, and once
// it is written nothing writes the task again (Requeue and Cancel refuse a
// retired task), so the unconditional DELETE that follows cannot delete a
// live task. A task found already retired (another deleter, or a crash
// between the two requests) is final: it is deleted.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// Deleter deletes finished tasks of one queue.
type Deleter struct {
	Store s3store.Store
	// Clock is the queue's S3 clock: a task's age and a retired record's
	// are judged by it.
	Clock *clock.Authoritative
	// Local stamps the writes (taskio.Update's read-back of a lost response).
	Local clock.Local
	// DeleteHonoured: the provider honours DELETE If-Match
	// (shards.Manifest.DeleteHonoured).
	DeleteHonoured bool
	// CAS paces the retries of an idempotency record's CAS.
	CAS s3store.CAS
	Log *slog.Logger
	// Only, if set, narrows what Expire deletes to the finished tasks it
	// accepts (purge: the statuses asked for). It is asked about the task
	// as Expire reads it, whose version the deletion is conditional on, not
	// about a listing that may predate a change; a task it refuses is Kept.
	Only func(*task.Task) bool
}

// Result says what Expire did.
type Result int

const (
	// Deleted: the task (and its record) is gone.
	Deleted Result = iota
	// Gone: there was no task at the key (deleted meanwhile).
	Gone
	// Corrupt: the object is not a readable task (Err says why); nothing
	// was deleted.
	Corrupt
	// Kept: the task read is not finished, or not for long enough, or
	// Deleter.Only refused it; it was left alone (Outcome.Read is what was
	// read).
	Kept
	// Changed: the task changed since it was read (requeued, or retired by
	// another deleter): nothing was deleted.
	Changed
	// Waiting: the task is retired, but its idempotency record was retired
	// a moment ago by another deleter, whose DELETE may be on the way: the
	// task waits for a later try.
	Waiting
)

// Outcome is what Expire did, with the task it read.
type Outcome struct {
	Result Result
	// Read is the task as read (zero for Gone and Corrupt).
	Read taskio.Versioned
	// Err is why a Corrupt object is not a task.
	Err error
}

// Expire deletes the finished task at key and its idempotency record if the
// task, as read now, finished at least hold ago by S3 time (iv is the S3
// time now) and Deleter.Only, if set, accepts it; a task with an
// idempotency key must also have finished t.MinRetention() ago
// (task.MinKeyedRetention, or its uniqueness window and a minute). The
// decision is made on what the task read says, not on a listing: the
// listing may predate a requeue and a fresh completion, and its size may
// misread the status of an object written before the size told every
// status (task.StatusBySize). A finished task whose end is still being
// passed on to its dependents or its slot (its ended marker is there) is
// Kept until it has been. It costs one GET (and a HEAD of the marker for a
// task with dependents or a slot), then for a task it deletes one DELETE (two
// with a result stored apart, deleted first), plus
// one PUT where the task must be tombstoned first, plus a GET, PUT and
// DELETE of its record if it has one.
func (d *Deleter) Expire(ctx context.Context, key string, hold time.Duration, iv clock.Interval) (Outcome, error) {
	v, err := taskio.Load(ctx, d.Store, key)
	if errors.Is(err, task.ErrCorrupt) || errors.Is(err, task.ErrUnsupportedFormat) {
		return Outcome{Result: Corrupt, Read: v, Err: err}, nil
	}
	if errors.Is(err, s3store.ErrNotFound) {
		return Outcome{Result: Gone}, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	t := v.Task
	hold = max(hold, t.MinRetention())
	if !t.Status.Terminal() || d.Only != nil && !d.Only(t) || !t.Retired && !iv.After(t.UpdatedAt.Add(hold)) {
		return Outcome{Result: Kept, Read: v}, nil
	}
	if !t.Retired && deps.NeedsPassOn(t) {
		// Its end may still be being passed on (to its dependents, or its
		// slot's next task) under the marker of this version, which the
		// repair honours only while the task stays at that version and
		// exists: a tombstone would move it past the marker, a DELETE
		// would make the repair cancel the children of a success. The task
		// waits for a later try until the marker is gone. (No marker of
		// this version can appear after: it is written before the write.)
		// One HEAD, for such tasks only.
		switch _, err := d.Store.Head(ctx, deps.EndedKey(t.ID, t.Shard, t.Version)); {
		case err == nil:
			return Outcome{Result: Kept, Read: v}, nil
		case !errors.Is(err, s3store.ErrNotFound):
			return Outcome{}, err
		}
	}
	changed := Outcome{Result: Changed, Read: v}
	lost := func(err error) bool { return s3store.LostRace(err) || errors.Is(err, s3store.ErrNotFound) }
	// A keyed task is tombstoned first on every provider: its record goes
	// before it (see below), and a requeue landing between the two would
	// otherwise leave a live task whose key is free for a second one.
	if !t.Retired && (!d.DeleteHonoured || t.IdempotencyKey != "") {
		now, err := d.Clock.Now(ctx)
		if err != nil {
			return Outcome{}, err
		}
		if err := t.Retire(now.Mid()); err != nil {
			return Outcome{}, err
		}
		if _, err := taskio.Update(ctx, d.Store, d.Local, t, v.ETag); lost(err) {
			// Changed since it was read (requeued, or retired by another
			// deleter): it is what it is now.
			return changed, nil
		} else if err != nil {
			return Outcome{}, err
		}
	}
	// The record goes before its task: while a record names a task, no
	// submit recreates that task as if its producer had crashed (see
	// producer.Submit), so a record without its task never outlives
	// retention, and a submit after it starts afresh.
	// (A keyed task is retired by now: nothing can requeue it.)
	if t.IdempotencyKey != "" {
		gone, err := d.expireRecord(ctx, t)
		if err != nil {
			return Outcome{}, err
		}
		if !gone {
			// A record another deleter retired a moment ago: its DELETE may
			// be on the way; the task waits for a later try.
			return Outcome{Result: Waiting, Read: v}, nil
		}
	}
	// A result stored apart goes before its task, so that no object is
	// left that nothing references. (A succeeded task changes no more
	// but by its result's expiry, which deletes the object too, or by
	// another deleter's retirement.)
	if ref := t.ResultRef; ref != nil {
		if err := d.Store.Delete(ctx, ref.Key, s3store.DeleteOptions{}); err != nil && !errors.Is(err, s3store.ErrNotFound) {
			return Outcome{}, fmt.Errorf("delete the result object of task %s: %w", t.ID, err)
		}
	}
	if t.Retired {
		err = d.Store.Delete(ctx, key, s3store.DeleteOptions{})
	} else {
		err = d.Store.Delete(ctx, key, s3store.DeleteOptions{IfMatch: v.ETag})
		if lost(err) {
			// Requeued since it was read (the DELETE is atomic here): the
			// task lives on.
			return changed, nil
		}
	}
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Result: Deleted, Read: v}, nil
}

// expireRecord deletes the idempotency record of t, which is being
// deleted, if the record names t, and reports whether no record of t is
// left. Like the task, the record is deleted unconditionally only once it
// is final: where conditional DELETE is honoured, DELETE If-Match;
// elsewhere it is first marked retired by CAS (a retired record is never
// written again but to retire it again). There, a record that another
// deleter retired less than task.RetiredRecordGrace ago is left to that
// deleter's DELETE (false, nil): a second DELETE could reach the server
// after the first and a submit's new record. A record that names another
// task (a submit replaced it once its uniqueness window passed, or claimed
// the key again after an earlier deletion) is left alone: it is that
// task's, deleted with it. A record that names t and whose uniqueness
// window is still open is kept too (false, nil), so retention never frees
// a key early (Task.MinRetention makes this rare). A lost race (the record
// changed or went meanwhile: a replacing submit's CAS or another deleter's)
// reads it again.
func (d *Deleter) expireRecord(ctx context.Context, t *task.Task) (bool, error) {
	key := task.IdempotencyRecordKey(t.IdempotencyKey)
	gone := true
	err := d.CAS.Retry(ctx, func(int) (bool, error) {
		gone = true
		obj, err := d.Store.Get(ctx, key)
		if errors.Is(err, s3store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		rec, perr := task.ParseIdempotencyRecord(obj.Body)
		switch {
		case perr != nil:
			// Nobody writes a corrupt record again (a submit refuses it),
			// so it is final too.
			d.Log.Error("corrupt idempotency record; deleted with its task", "key", key, "task_id", t.ID, "err", perr)
			err := d.Store.Delete(ctx, key, s3store.DeleteOptions{})
			return s3store.LostRace(err) || errors.Is(err, s3store.ErrNotFound), err
		case rec.ID != t.ID:
			return false, nil // the key was claimed again after an earlier deletion of t, or after its window
		case !rec.Retired && rec.UniqueFor > 0:
			now, err := d.Clock.Now(ctx)
			if err != nil {
				return false, err
			}
			if !rec.Expired(obj.LastModified, now.Earliest) {
				gone = false
				return false, nil
			}
		}
		switch {
		case d.DeleteHonoured:
			err = d.Store.Delete(ctx, key, s3store.DeleteOptions{IfMatch: obj.ETag})
		default:
			if rec.Retired {
				now, err := d.Clock.Now(ctx)
				if err != nil {
					return false, err
				}
				if now.Earliest.Sub(obj.LastModified) < task.RetiredRecordGrace {
					gone = false
					return false, nil
				}
			}
			rec.Retired = true
			rec.Retires++
			if _, err = d.Store.Put(ctx, key, rec.Encode(), s3store.PutOptions{IfMatch: obj.ETag}); err == nil {
				err = d.Store.Delete(ctx, key, s3store.DeleteOptions{})
			}
		}
		return s3store.LostRace(err) || errors.Is(err, s3store.ErrNotFound), err
	})
	if err != nil {
		return false, fmt.Errorf("expire idempotency record of task %s: %w", t.ID, err)
	}
	return gone, nil
}
