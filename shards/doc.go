// Package shards owns how the queue's work is partitioned and found: the
// queue manifest (shard count and layout format, which every process must
// agree on), the ready index that re-dispatched and retried tasks are
// announced in, and the scan of a shard's canonical task objects.
//
// It reads task objects but never changes a task's state; that is the job of
// the producer, worker and monitor, through the task package's transitions.
package shards
