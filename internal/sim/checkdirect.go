package sim

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/direct"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// leaseRecord is what the checker reads of a worker's lease object.
type leaseRecord struct {
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expires_at"`
}

// leaseMargin is the workers' and monitors' lease_margin (their default).
const leaseMargin = 2 * time.Second

// checkDirect proves the invariants of direct dispatch over the log, and
// over the inboxes, the overflow and the worker leases at the end of the
// quiet tail:
//
//   - one holder per worker lease: a write of a worker's lease by a new
//     holder (a later process of the id taking it over) lands only after
//     the expiry the last holder wrote, so no two processes hold one
//     worker's lease, and with it its inbox, at once;
//   - a worker without its lease claims nothing: every claim a worker
//     makes lands within leaseStopSlack of the expiry of its own lease's
//     last write (a renewal, or a release at shutdown), the time for the
//     requests of the step that was under way when the lease lapsed to be
//     served (three held requests: a listing, a read, the claim) and for
//     its failed renewal to be retried; a worker that lost its lease stops
//     at once;
//   - a dead worker's inbox is moved: at the end, no inbox of a worker
//     whose lease has expired (by lease_margin) holds an entry written
//     more than Bound before, whatever its task's state (Recover moves
//     every entry, and runs every repair_after in each monitor and every
//     overflow_scavenge_interval in each worker);
//   - the overflow is drained: at the end, the overflow holds no entry
//     written more than Bound before (scavengers delete every entry once
//     its task is claimed or no longer pending).
//
// Entries left in a live worker's inbox at the end are not checked: one
// whose DELETE failed during the chaos phase stays there, settled, until
// the worker dies and it is moved; tasks that no one picks up are
// InvLiveness's business.
func (w *world) checkDirect(log []Entry, res *Result, add func(inv, id, format string, args ...any)) {
	slack := leaseStopSlack(w.plan.Faults.MaxDelay)
	leases := make(map[string]leaseRecord) // lease key -> the last write
	expiry := make(map[string]time.Time)   // process -> the expiry of its last write of its lease
	written := make(map[string]time.Time)  // inbox or overflow key -> when it was last written
	for _, e := range log {
		switch {
		case strings.HasPrefix(e.Key, direct.InboxPrefix) || strings.HasPrefix(e.Key, direct.OverflowPrefix):
			if e.Op != s3store.OpPut {
				continue
			}
			written[e.Key] = e.At
			if strings.HasPrefix(e.Key, direct.InboxPrefix) {
				res.Routed++
			} else {
				res.Moved++
			}
			continue
		case strings.HasPrefix(e.Key, direct.WorkersPrefix):
			id, ok := direct.LeaseWorker(e.Key)
			if !ok {
				continue
			}
			if e.Op != s3store.OpPut {
				delete(leases, e.Key)
				continue
			}
			var r leaseRecord
			if json.Unmarshal(e.New, &r) != nil {
				continue
			}
			if prev, ok := leases[e.Key]; ok && prev.Holder != r.Holder {
				res.Takeovers++
				if e.At.Before(prev.ExpiresAt) {
					add(InvWorkerLease, "", "%s took over the lease of worker %s at %s, held by %s until %s",
						e.Proc, id, e.At.Format("15:04:05.000"), prev.Holder, prev.ExpiresAt.Format("15:04:05.000"))
				}
			}
			leases[e.Key] = r
			expiry[e.Proc] = r.ExpiresAt
			continue
		}
		if !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) || e.New == nil || !strings.HasPrefix(e.Proc, "w") {
			continue
		}
		next, err := task.Decode(e.New)
		if err != nil || next.Status != task.Running || next.Claim == nil {
			continue
		}
		if prev, err := task.Decode(e.Old); err == nil && prev.Claim != nil && prev.Claim.ID == next.Claim.ID {
			continue // a renewal or a retirement, not a claim
		}
		if x, ok := expiry[e.Proc]; !ok || e.At.After(x.Add(slack)) {
			add(InvLeaseStops, next.ID, "%s claimed it at %s, %v after its own lease expired at %s",
				e.Proc, e.At.Format("15:04:05.000"), e.At.Sub(x).Round(time.Millisecond), x.Format("15:04:05.000"))
		}
	}

	old := w.endAt.Add(-w.opts.Bound)
	for key := range w.directEnd {
		ent, err := direct.ParseEntry(key)
		if err != nil || !written[key].Before(old) {
			continue
		}
		if ent.Worker == "" {
			add(InvOverflowDrained, ent.ID, "its overflow entry %s, written at %s, is still there at the end",
				key, written[key].Format("15:04:05.000"))
			continue
		}
		var r leaseRecord
		body, ok := w.directEnd[direct.LeaseKey(ent.Worker)]
		if ok && json.Unmarshal(body, &r) == nil && r.ExpiresAt.Add(leaseMargin).After(w.endAt) {
			continue // a live worker's inbox
		}
		add(InvInboxRecovered, ent.ID, "its entry %s, written at %s, is in the inbox of %s at the end, whose lease expired at %s",
			key, written[key].Format("15:04:05.000"), ent.Worker, r.ExpiresAt.Format("15:04:05.000"))
	}
}

// leaseStopSlack is how long after its lease's expiry a claim of its
// worker may land, with requests held up to maxDelay: three held requests
// and the second of a renewal's retry, with a second of room.
func leaseStopSlack(maxDelay time.Duration) time.Duration {
	return 3*maxDelay + 2*time.Second
}
