package shards

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// Ready pointers announce tasks that went back to pending after their first
// dispatch (retries, expired leases, requeues, repairs): their canonical keys
// sit behind every scan cursor, so a pointer is written where the scans will
// look. A pointer is an empty object in a shard's task prefix,
//
//	tasks/{shard}/{time}~{id}.ready
//
// whose {time} is the first ten characters of an id — the millisecond the
// task becomes due, or the writer's now if that is later — so the one LIST a
// shard scan makes finds new tasks and re-dispatched ones alike, each when it
// is due and not before. A pointer is only a hint: the task object decides
// (invariant 6), and a pointer whose task is not pending is deleted when
// seen (DELETE is free). {shard} is the task's own shard (three digits, as
// task.ShardName writes it), so a reader loads the task with one GET
// whatever shard count it was placed with; pointers written before it was
// added, tasks/{in}/{time}~{id}.ready, are still read, and their task found
// by trying each of the manifest's counts (taskio.LoadID).
const pointerSuffix = ".ready"

// timeChars is how many leading characters of an id encode its time.
const timeChars = 10

// PointerKey is the pointer in shard `in` to task id, which lives in shard
// shard, due at at.
func PointerKey(in, shard int, id string, at time.Time) string {
	return TasksPrefix(in) + lowID(at)[:timeChars] + "~" + id + "~" + task.ShardName(shard) + pointerSuffix
}

// IsPointer reports whether key is a ready pointer.
func IsPointer(key string) bool { return strings.HasSuffix(key, pointerSuffix) }

// Pointer is one parsed ready pointer.
type Pointer struct {
	Key string
	In  int       // the shard it was written in
	ID  string    // the task it points at
	At  time.Time // when it becomes due
	// Shard is the task's own shard, or -1 for a pointer written before
	// pointers named it (find the task with taskio.LoadID).
	Shard int
}

// ParsePointerKey parses a pointer key, in either form.
func ParsePointerKey(key string) (Pointer, error) {
	rest, ok := strings.CutPrefix(key, "tasks/")
	shardName, name, ok2 := strings.Cut(rest, "/")
	base, ok3 := strings.CutSuffix(name, pointerSuffix)
	at, id, ok4 := strings.Cut(base, "~")
	shard := -1
	if i, s, named := strings.Cut(id, "~"); named {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n >= MaxShards || task.ShardName(n) != s {
			ok4 = false
		}
		id, shard = i, n
	}
	if !ok || !ok2 || !ok3 || !ok4 || len(at) != timeChars || !task.ValidID(id) {
		return Pointer{}, fmt.Errorf("parse ready pointer %q: want tasks/SHARD/TIME~ID~SHARD%s", key, pointerSuffix)
	}
	in, _, err := task.ParseKey("tasks/" + shardName + "/" + id + ".json")
	if err != nil {
		return Pointer{}, fmt.Errorf("parse ready pointer %q: %w", key, err)
	}
	t, err := task.IDTime(at + strings.Repeat("0", task.IDLen-timeChars))
	if err != nil {
		return Pointer{}, fmt.Errorf("parse ready pointer %q: %w", key, err)
	}
	return Pointer{Key: key, In: in, ID: id, At: t, Shard: shard}, nil
}

// Announce writes a pointer to t in shard `in` (an active shard, where
// members poll; -1 means t's own shard), due when t is available or at now
// (S3 time) if that is later, so it lands ahead of scan cursors. Index
// writes are idempotent, so a plain PUT is enough.
func Announce(ctx context.Context, st s3store.Store, t *task.Task, now time.Time, in int) error {
	at := t.AvailableAt
	if now.After(at) {
		at = now
	}
	if in < 0 {
		in = t.Shard
	}
	if _, err := st.Put(ctx, PointerKey(in, t.Shard, t.ID, at), nil, s3store.PutOptions{}); err != nil {
		return fmt.Errorf("announce task %s: %w", t.ID, err)
	}
	return nil
}

// FloorLag is how far behind S3 time the monitor's sweeps may start: a
// shard's floor (the end of its run of finished tasks) is kept at least
// this far back, so a task submitted now never lands below it. A task whose
// id time is older than this may lie below the floor when it becomes live
// again (a requeue, a late PUT, an orphaned idempotency record completed),
// and the sweeps must be told of it.
const FloorLag = time.Minute

// MayLieBelowFloor reports whether task id's time is older than FloorLag
// by now (the latest the S3 clock can be): the task may lie below the
// monitor's sweep floor.
//
// Whoever makes such a task live (a requeue, a retry, an orphaned
// idempotency record completed) writes its ready pointer first and the
// task after: a pointer that cannot be written then fails the change
// before it is made, instead of leaving a live task nobody can find but
// the full walk. Workers leave pointers to such tasks in place; the
// monitor deletes them, no sooner than PointerGrace after their time,
// once it has lowered its floor under a live task or found the task
// finished. A writer whose task write lands more than PointerGrace/2
// after its pointer writes the pointer again.
func MayLieBelowFloor(id string, now time.Time) bool {
	at, err := task.IDTime(id)
	return err == nil && now.Sub(at) > FloorLag
}

// PointerGrace is the least time after a ready pointer's time before the
// monitor may delete it (see MayLieBelowFloor).
const PointerGrace = 30 * time.Second
