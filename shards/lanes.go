package shards

import (
	"context"
	"fmt"
	"strings"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/task"
)

// Lanes let a high-priority task overtake a backlog deeper than a scan's
// window (docs/scheduling.md#priorities). A lane entry is an empty object,
//
//	lanes/{shard}/{id}
//
// written by the producer of a high task, after the task object, when its
// view of the fleet shows the member of the task's shard busy. The busy
// member lists its shard's lane (one LIST per poll, only while busy) and
// claims what it finds before its window, with at most half of its free
// slots; it deletes an entry once its task is claimed or is not pending.
// An entry is only a hint: the task object decides, and a lost entry
// loses nothing (the task is still found in time order, invariant 6).

// LanesPrefix is the prefix of shard's lane entries.
func LanesPrefix(shard int) string { return "lanes/" + task.ShardName(shard) + "/" }

// LaneKey is the lane entry of task id, in shard.
func LaneKey(shard int, id string) string { return LanesPrefix(shard) + id }

// ParseLaneKey returns the shard and task id of a lane entry's key.
func ParseLaneKey(key string) (shard int, id string, err error) {
	rest, ok := strings.CutPrefix(key, "lanes/")
	name, id, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || !task.ValidID(id) {
		return 0, "", fmt.Errorf("not a lane entry: %q", key)
	}
	if shard, err = task.ParseShardName(name); err != nil {
		return 0, "", fmt.Errorf("not a lane entry: %q", key)
	}
	return shard, id, nil
}

// Busy reports whether, in the cached view (one GET at most once per
// FleetCacheTTL), the live member that polls shard was busy at its last
// write: every slot taken, due work left behind. n is the shard count.
func (c *FleetCache) Busy(ctx context.Context, now clock.Interval, shard, n int) bool {
	f, _ := c.Get(ctx)
	live := f.Live(now, c.margin)
	if len(live) == 0 || shard < 0 || shard >= n {
		return false
	}
	k := Active(len(live), n)
	if shard < k {
		return live[shard%len(live)].Busy
	}
	return live[(shard-k)%len(live)].Busy
}
