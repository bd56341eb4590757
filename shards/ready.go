package shards

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// The ready index announces tasks that went back to pending after their
// first dispatch (retries, expired leases, requeues, repairs) and so sit
// behind the shard scan's cursor. Entries are empty objects at
//
//	ready/{shard}/{bucket}/{id}
//
// where bucket is the UTC minute of the task's available_at, so a listing
// reaches future entries only after everything due, and stops there. An
// entry is a hint: the task object decides (invariant 6), and an entry whose
// task is not pending is deleted when seen.
const readyRoot = "ready/"

const bucketLayout = "20060102T1504"

// ReadyPrefix is the prefix of shard's ready entries.
func ReadyPrefix(shard int) string { return readyRoot + task.ShardName(shard) + "/" }

// ReadyKey is the entry for task id of shard, available at at.
func ReadyKey(shard int, id string, at time.Time) string {
	return ReadyPrefix(shard) + at.UTC().Format(bucketLayout) + "/" + id
}

// ReadyEntry is one parsed ready key.
type ReadyEntry struct {
	Key    string
	Shard  int
	ID     string
	Bucket time.Time // start of the minute the task becomes available
}

// ParseReadyKey parses an entry key.
func ParseReadyKey(key string) (ReadyEntry, error) {
	rest, ok := strings.CutPrefix(key, readyRoot)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return ReadyEntry{}, fmt.Errorf("parse ready entry %q: want ready/SHARD/BUCKET/ID", key)
	}
	shard, _, err := task.ParseKey("tasks/" + parts[0] + "/" + parts[2] + ".json")
	if err != nil {
		return ReadyEntry{}, fmt.Errorf("parse ready entry %q: %w", key, err)
	}
	b, err := time.Parse(bucketLayout, parts[1])
	if err != nil {
		return ReadyEntry{}, fmt.Errorf("parse ready entry %q: bad time bucket: %w", key, err)
	}
	return ReadyEntry{Key: key, Shard: shard, ID: parts[2], Bucket: b}, nil
}

// Announce writes t's ready entry. Index writes are idempotent, so a plain
// PUT is enough.
func Announce(ctx context.Context, st s3store.Store, t *task.Task) error {
	if _, err := st.Put(ctx, ReadyKey(t.Shard, t.ID, t.AvailableAt), nil, s3store.PutOptions{}); err != nil {
		return fmt.Errorf("announce task %s: %w", t.ID, err)
	}
	return nil
}

// ListReady returns up to max entries of shard whose bucket has begun by
// now, oldest first. Keys under the prefix that do not parse are returned
// in bad so the caller can report and delete them (invariant 7).
func ListReady(ctx context.Context, st s3store.Store, shard int, now time.Time, max int) (due []ReadyEntry, bad []string, err error) {
	after := ""
	for len(due) < max {
		page, err := st.List(ctx, ReadyPrefix(shard), s3store.ListOptions{StartAfter: after, MaxKeys: max})
		if err != nil {
			return due, bad, fmt.Errorf("list ready entries of shard %d: %w", shard, err)
		}
		for _, o := range page.Objects {
			e, perr := ParseReadyKey(o.Key)
			if perr != nil {
				bad = append(bad, o.Key)
				continue
			}
			if e.Bucket.After(now) {
				return due, bad, nil
			}
			due = append(due, e)
		}
		if !page.Truncated || len(page.Objects) == 0 {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	return due, bad, nil
}
