// Package shards owns how the queue's work is partitioned and found: the
// queue manifest (shard count and layout format, which every process must
// agree on), the fleet object (which members poll which shards, and the
// doorbell a sleeping fleet is woken by), the ready index that re-dispatched
// and retried tasks are announced in, and the scan of a shard's canonical
// task objects.
//
// It reads task objects but never changes a task's state; that is the job of
// the producer, worker and monitor, through the task package's transitions.
// What a task object or an idempotency record holds is the task package's;
// when a lease has expired is the lease package's (fleet members are judged
// by lease.Expired).
package shards
