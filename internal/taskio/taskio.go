// Package taskio reads and writes canonical task objects: one GET to load,
// one conditional PUT to write. It is the only place that turns task bytes
// into requests; state changes themselves are the task package's.
package taskio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// Versioned is a task with the ETag it was read or written with.
type Versioned struct {
	Task *task.Task
	ETag string
}

// Load reads the task at key. A corrupt object is an error wrapping
// task.ErrCorrupt (or task.ErrUnsupportedFormat); a missing one wraps
// s3store.ErrNotFound.
func Load(ctx context.Context, st s3store.Store, key string) (Versioned, error) {
	obj, err := st.Get(ctx, key)
	if err != nil {
		return Versioned{}, fmt.Errorf("load task %s: %w", key, err)
	}
	t, err := task.Decode(obj.Body)
	if err != nil {
		return Versioned{ETag: obj.ETag}, fmt.Errorf("load task %s: %w", key, err)
	}
	if want := t.Key(); want != key {
		return Versioned{ETag: obj.ETag}, fmt.Errorf("load task %s: %w: object says it is %s", key, task.ErrCorrupt, want)
	}
	return Versioned{Task: t, ETag: obj.ETag}, nil
}

// LoadID reads task id in a queue whose shard counts are counts (the
// manifest's Counts: the current one first). A task stays in the shard it
// was placed in when the queue is resharded, so each count's shard is tried
// in turn, skipping shards already tried, and the first found wins: one GET
// for a task placed under the current count, one more (a 404) per older
// count otherwise. A task found under none wraps s3store.ErrNotFound.
func LoadID(ctx context.Context, st s3store.Store, id string, counts []int) (Versioned, error) {
	if !task.ValidID(id) {
		return Versioned{}, fmt.Errorf("load task %q: %w", id, ErrBadID)
	}
	var tried []int
	err := fmt.Errorf("load task %s: %w", id, s3store.ErrNotFound)
	for _, n := range counts {
		shard := task.ShardFor(id, n)
		if slices.Contains(tried, shard) {
			continue
		}
		tried = append(tried, shard)
		var v Versioned
		if v, err = Load(ctx, st, task.Key(shard, id)); !errors.Is(err, s3store.ErrNotFound) {
			return v, err
		}
	}
	return Versioned{}, err
}

// ErrBadID reports a string that is not a task id.
var ErrBadID = fmt.Errorf("not a task id")

// Create writes a new task; it fails with s3store.ErrPreconditionFailed if
// the key already exists. A write whose response was lost (the store's retry
// then sees a 412, or the error came after the write was applied) is
// recognised by reading the object back, and succeeds; local times the
// pauses between read-backs. A write that failed otherwise (a 5xx, a
// timeout) and could not be read back is ErrUnknownOutcome; a 412 that
// could not be read back stays a 412: the key exists.
func Create(ctx context.Context, st s3store.Store, local clock.Local, t *task.Task) (Versioned, error) {
	return put(ctx, st, local, t, s3store.PutOptions{IfNoneMatch: true})
}

// Update writes t over the version read with etag (invariant 1: never
// blindly). A lost race is an error s3store.LostRace reports; a write that
// landed with its response lost succeeds, as with Create; one whose
// outcome could not be learnt is ErrUnknownOutcome.
func Update(ctx context.Context, st s3store.Store, local clock.Local, t *task.Task, etag string) (Versioned, error) {
	return put(ctx, st, local, t, s3store.PutOptions{IfMatch: etag})
}

func put(ctx context.Context, st s3store.Store, local clock.Local, t *task.Task, opts s3store.PutOptions) (Versioned, error) {
	body, err := task.Marshal(t)
	if err != nil {
		return Versioned{}, fmt.Errorf("write task %s: %w", t.ID, err)
	}
	for range task.PaddingOf(len(body), t) {
		body = append(body, '\n')
	}
	etag, err := st.Put(ctx, t.Key(), body, opts)
	if err != nil {
		landed, ok, known := ownWrite(ctx, st, local, t, body, opts.IfNoneMatch)
		switch {
		case ok:
			return Versioned{Task: t, ETag: landed}, nil
		case !known && mayHaveLanded(err, opts.IfNoneMatch) && s3store.LostRace(err):
			// Not a lost race (it may be the write's own retry): the
			// 412 is not wrapped.
			return Versioned{}, fmt.Errorf("write task %s: %w (%v)", t.ID, ErrUnknownOutcome, err)
		case !known && mayHaveLanded(err, opts.IfNoneMatch):
			return Versioned{}, fmt.Errorf("write task %s: %w (%w)", t.ID, ErrUnknownOutcome, err)
		}
		return Versioned{}, fmt.Errorf("write task %s: %w", t.ID, err)
	}
	return Versioned{Task: t, ETag: etag}, nil
}

// ErrUnknownOutcome reports a write whose outcome is not known: its
// request failed in a way that may have come after the write was applied
// (a lost response: a 5xx, a timeout, or for an If-Match write a 412,
// which may be the store's own retry meeting the write), and every read
// back failed too (the outage that lost the response went on). The write
// may be there: a caller must neither take it as failed (and make it
// again, or give up what it would have owned) nor as done. It is no lost
// race (s3store.LostRace reports false): whoever gets it reads the object
// again before deciding anything.
var ErrUnknownOutcome = errors.New("its outcome is unknown: the request failed and the object could not be read back")

// mayHaveLanded reports whether a write that failed with err may have been
// applied. A 409 (a concurrent conditional write won), a 404 (If-Match on
// a missing key) and an unusable store are refusals; so is a 412 to a
// create (If-None-Match): the key exists, whoever wrote it, and the caller
// decides what that means.
func mayHaveLanded(err error, create bool) bool {
	switch {
	case errors.Is(err, s3store.ErrConflict), errors.Is(err, s3store.ErrNotFound), errors.Is(err, s3store.ErrUnusable):
		return false
	case errors.Is(err, s3store.ErrPreconditionFailed):
		return !create
	}
	return true
}

// ownWrite tells a failed write whose request landed anyway from one that
// did not: the response was lost and the store's retry then met its own
// write (a 412), or the error came after the write was applied. Every task
// write carries a new version and a fresh UpdatedAt (and a claim its own
// claim id), so the object holds exactly these bytes only if this write
// landed and nothing has overwritten it since. One GET, on the failure path
// only.
//
// The object may also have moved on since (a worker claimed the task just
// created, a cancel was requested): it descends from this write if it is
// the same task, created at the same instant, at a later version, and, for
// a write that added a history entry, still lists that entry. Then the
// write landed, and the ETag returned is StaleETag: the next conditional
// write fails and its caller re-reads.
//
// A read that fails too (the outage that lost the response goes on) is
// tried again after a pause, up to verifyAttempts times: a caller told
// "failed" about a write that landed would do it again (a second task, a
// requeue reported as refused).
//
// known reports whether a read answered: false when every read failed (or
// ctx ended first), and the write's outcome is not known.
func ownWrite(ctx context.Context, st s3store.Store, local clock.Local, t *task.Task, body []byte, create bool) (etag string, ok, known bool) {
	pause := verifyPause
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return "", false, false
		}
		obj, err := st.Get(ctx, t.Key())
		switch {
		case err == nil:
			if bytes.Equal(obj.Body, body) {
				return obj.ETag, true, true
			}
			if descends(obj.Body, t, create) {
				return StaleETag, true, true
			}
			return "", false, true
		case errors.Is(err, s3store.ErrNotFound):
			return "", false, true
		case errors.Is(err, s3store.ErrUnusable), attempt == verifyAttempts:
			return "", false, false
		}
		if !clock.Sleep(local, pause, ctx.Done()) {
			return "", false, false
		}
		pause *= 4
	}
}

// StaleETag is the ETag of a write that landed and was overwritten since:
// no object has it, so a write conditional on it fails.
const StaleETag = "landed-then-overwritten"

// descends reports whether body is a later version of the task t would
// have written.
func descends(body []byte, t *task.Task, create bool) bool {
	cur, err := task.Decode(body)
	if err != nil || cur.ID != t.ID || !cur.CreatedAt.Equal(t.CreatedAt) || cur.Version <= t.Version {
		return false
	}
	if create {
		return true
	}
	if len(t.History) == 0 {
		return false
	}
	mine := t.History[len(t.History)-1]
	if !mine.At.Equal(t.UpdatedAt) {
		return false // this write added no entry (a renewal): nothing to recognise it by
	}
	for _, h := range cur.History {
		if h.At.Equal(mine.At) && h.From == mine.From && h.To == mine.To && h.Worker == mine.Worker &&
			h.Reason == mine.Reason && h.Attempt == mine.Attempt {
			return true
		}
	}
	return false
}

// How often, and after what first pause, ownWrite reads an object back
// when the read itself fails: 0.1 + 0.4 + 1.6 s of pauses in all.
const (
	verifyAttempts = 4
	verifyPause    = 100 * time.Millisecond
)
