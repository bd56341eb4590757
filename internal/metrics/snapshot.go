package metrics

import (
	"time"

	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/task"
)

// Snapshot is the queue-level gauges' view of a monitor's state (for
// SetQueue).
func Snapshot(s monitor.State) QueueSnapshot {
	var q QueueSnapshot
	for _, sh := range s.Shards {
		c := sh.Counts
		q.Shards = append(q.Shards, ShardSnapshot{
			Shard: sh.Shard, Pending: c[task.Pending], Running: c[task.Running], Blocked: c[task.Blocked],
			Succeeded: c[task.Succeeded], Dead: c[task.Dead], Canceled: c[task.Canceled],
			AnyPending:    !sh.OldestPending.IsZero(),
			OldestPending: time.Duration(sh.OldestPendingSecs * float64(time.Second)),
		})
	}
	return q
}
