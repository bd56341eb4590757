// Package direct holds the objects of direct dispatch, the opt-in mode of
// seed 003 (docs/direct-dispatch.md): worker leases, each worker's inbox of
// pointers, the overflow that dead workers' inboxes are moved to, and the
// producers' cached view of the live workers.
//
// A pointer is only a hint, as a ready pointer is: the canonical task
// object decides (invariant 6), and every claim is a CAS on it. Inbox and
// overflow entries are empty objects whose keys say everything a reader
// needs, so finding a task through one costs no GET of the entry:
//
//	workers/{worker}.lease.json          the worker's lease (lease.Lease), its record in Data
//	workers/{worker}.bell                its doorbell, rung by producers while it sleeps
//	inbox/{worker}/{bucket}/{id}~{shard} a task routed to the worker, due in minute {bucket}
//	overflow/{bucket}/{id}~{shard}       an entry moved from a dead worker's inbox
//
// {bucket} is the minute the task becomes due, by S3 time, as
// YYYYMMDD-HHMM: buckets sort by time, so one LIST from a cursor finds
// every entry due by now and none due later.
package direct

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/s3queue/s3queue/task"
)

// Key prefixes.
const (
	WorkersPrefix  = "workers/"
	InboxPrefix    = "inbox/"
	OverflowPrefix = "overflow/"
	leaseSuffix    = ".lease.json"
	bellSuffix     = ".bell"
)

// bucketLayout formats a bucket: the minute, UTC.
const bucketLayout = "20060102-1504"

// Bucket is the time bucket of S3 time t: its minute, UTC.
func Bucket(t time.Time) string { return t.UTC().Format(bucketLayout) }

// BucketTime is the start of bucket b.
func BucketTime(b string) (time.Time, error) {
	t, err := time.ParseInLocation(bucketLayout, b, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("time bucket %q: want YYYYMMDD-HHMM", b)
	}
	return t, nil
}

// CheckWorkerID reports whether id can name a worker's lease and inbox:
// what worker ids allow, without '/' or '~'.
func CheckWorkerID(id string) error {
	if id == "" || strings.ContainsAny(id, "/~") {
		return fmt.Errorf("worker id %q cannot name an inbox: direct dispatch needs an id without '/' or '~'", id)
	}
	return nil
}

// LeaseKey is the key of worker id's lease.
func LeaseKey(id string) string { return WorkersPrefix + id + leaseSuffix }

// BellKey is the key of worker id's doorbell.
func BellKey(id string) string { return WorkersPrefix + id + bellSuffix }

// LeaseWorker returns the worker a lease key belongs to, and false for any
// other key under WorkersPrefix.
func LeaseWorker(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, WorkersPrefix)
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, leaseSuffix)
	return id, ok && CheckWorkerID(id) == nil
}

// Inbox is the prefix of worker id's inbox.
func Inbox(id string) string { return InboxPrefix + id + "/" }

// EntryKey is the inbox entry routing task id, in shard, to worker,
// in the bucket of at (S3 time: when the task becomes due).
func EntryKey(worker string, at time.Time, id string, shard int) string {
	return Inbox(worker) + Bucket(at) + "/" + id + "~" + task.ShardName(shard)
}

// OverflowKey is the overflow entry of task id, in shard, due in bucket.
func OverflowKey(bucket, id string, shard int) string {
	return OverflowPrefix + bucket + "/" + id + "~" + task.ShardName(shard)
}

// Entry is a parsed inbox or overflow entry.
type Entry struct {
	Key    string
	Worker string // "" for an overflow entry
	Bucket string
	At     time.Time // the bucket's start
	ID     string
	Shard  int
}

// TaskKey is the key of the task e points at.
func (e Entry) TaskKey() string { return task.Key(e.Shard, e.ID) }

// ParseEntry parses an inbox or overflow entry key.
func ParseEntry(key string) (Entry, error) {
	var e Entry
	var rest string
	switch {
	case strings.HasPrefix(key, InboxPrefix):
		var ok bool
		e.Worker, rest, ok = strings.Cut(strings.TrimPrefix(key, InboxPrefix), "/")
		if !ok || CheckWorkerID(e.Worker) != nil {
			return Entry{}, fmt.Errorf("inbox entry %q: want inbox/WORKER/BUCKET/ID~SHARD", key)
		}
	case strings.HasPrefix(key, OverflowPrefix):
		rest = strings.TrimPrefix(key, OverflowPrefix)
	default:
		return Entry{}, fmt.Errorf("%q is not an inbox or overflow entry", key)
	}
	bucket, name, ok := strings.Cut(rest, "/")
	id, shard, ok2 := strings.Cut(name, "~")
	n, err := strconv.Atoi(shard)
	if !ok || !ok2 || err != nil || n < 0 || task.ShardName(n) != shard || !task.ValidID(id) {
		return Entry{}, fmt.Errorf("entry %q: want BUCKET/ID~SHARD", key)
	}
	at, err := BucketTime(bucket)
	if err != nil {
		return Entry{}, fmt.Errorf("entry %q: %w", key, err)
	}
	e.Key, e.Bucket, e.At, e.ID, e.Shard = key, bucket, at, id, n
	return e, nil
}
