package worker

import (
	"context"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Lanes (shards/lanes.go): a busy member claims the high-priority tasks
// that producers announced in its shards' lanes before it claims from
// their windows, so that a high task overtakes a backlog deeper than a
// window. Lane claims take at most half of the free slots of a poll (an
// odd free slot every other poll), so the window's tasks, in priority
// order, keep at least half of the member's claims.

// laneSettler settles lane candidates: a lane entry is deleted once done
// with (its candidate is an Inbox one, see applyClaim), and kept
// otherwise, to be listed again at the next busy poll; the shard scan is
// not told, so its cursor moves only by its own listing.
type laneSettler struct{}

func (laneSettler) Seen(shards.Candidate, string) {}

func (laneSettler) Failed(shards.Candidate, time.Time) bool { return false }

// busyMember reports whether the member is busy as its fleet entry says:
// producers write lane entries only for a member their view of the fleet
// shows busy (FleetCache.Busy), so only then has it lanes to list. (Asked
// of its own state instead, a member at a light load took every passing
// clump of arrivals for a busy spell and listed its empty lanes at every
// poll of it: 0.1 LIST per task at 1.16 tasks/s.) A lane entry written
// while the entry said busy and left when it stopped saying so is read at
// its next busy spell; its task is found by the shard's scan meanwhile.
func (w *Worker) busyMember() bool {
	m := &w.fleet
	if w.direct != nil || !m.member {
		return false
	}
	me, _ := m.fleet.Member(w.cfg.ID)
	return me.Busy
}

// claimLanes claims, while the member is busy, the tasks of list's lanes:
// one LIST per shard and poll, a GET and a claim per task, a DELETE per
// entry, at most half of the free slots.
func (w *Worker) claimLanes(ctx context.Context, list []int, iv clock.Interval, p *pass) {
	if !w.busyMember() || w.pausedAll() {
		return
	}
	free := w.free()
	quota := free / 2
	if free%2 == 1 {
		if w.laneOdd {
			quota++
		}
		w.laneOdd = !w.laneOdd
	}
	for _, shard := range list {
		if quota <= 0 || w.free() == 0 {
			return
		}
		page, err := w.st.List(ctx, shards.LanesPrefix(shard), s3store.ListOptions{MaxKeys: s3store.DefaultMaxKeys})
		if err != nil {
			p.err = err
			continue
		}
		var cands []shards.Candidate
		for _, o := range page.Objects {
			s, id, err := shards.ParseLaneKey(o.Key)
			if err != nil || s != shard {
				continue // not ours to read or delete
			}
			at, _ := task.IDTime(id)
			cands = append(cands, shards.Candidate{Key: o.Key, ID: id, ETag: o.ETag, Avail: at, Pointer: true, Inbox: true,
				Shard: shard, Priority: task.PriorityHigh})
		}
		for i := 0; i < len(cands) && quota > 0 && w.free() > 0; {
			n := nextBatch(cands[i:], min(quota, w.free(), maxClaimBatch))
			got := w.claimBatch(ctx, laneSettler{}, cands[i:i+n], iv, nil)
			p.claimed += got
			quota -= got
			i += n
		}
	}
}
