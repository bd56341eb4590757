package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	Task      string // task id, when it concerns one
	Detail    string
}

func (v Violation) String() string {
	if v.Task != "" {
		return fmt.Sprintf("%s: task %s: %s", v.Invariant, v.Task, v.Detail)
	}
	return v.Invariant + ": " + v.Detail
}

// Invariants the checker proves, by name.
const (
	InvTransition  = "valid transition" // each write of a task is a step of its state machine
	InvBytesChange = "every write changes the bytes"
	InvFenced      = "outcomes are fenced"               // only the claim's own worker writes its outcome or renews it
	InvOutcomeOnce = "outcome written once"              // succeeded at most once per task
	InvNotLost     = "nothing is lost"                   // a live task is never deleted; an acknowledged task exists
	InvRetention   = "retention is respected"            // nothing deleted before its retention
	InvRetained    = "retention is applied"              // at the end, no finished task long past its retention (see checkRetained)
	InvIdempotent  = "one live task per idempotency key" // of a key without a uniqueness window
	// InvUniqueWindow: a key with a uniqueness window makes one task per
	// window (see checkUnique).
	InvUniqueWindow = "one task per key per uniqueness window"
	InvHonest       = "a failed call changed nothing" // a caller told "failed" made no change
	InvLiveness     = "due tasks are picked up"
	InvRunnable     = "a claimed task can run"                     // no handler starts with its lease already given up
	InvLeaseHeld    = "a handler starts under its lease"           // no handler starts after its claim's expires_at by the server's clock
	InvOneLeader    = "one monitor leads at a time"                // the leader lease changes holder only after the last holder's expiry
	InvPoolBound    = "a pool runs at most max_in_flight handlers" // counted in each process as handlers start and return
	InvNotEarly     = "a delay is never cut short"                 // a delayed task's claim is sent no earlier than its available_at, by the server's clock
	InvAfterStop    = "nothing outlives Run"
	InvCursor       = "scan cursors advance" // a member's cursor passes every key older than its lag
	InvDecodable    = "the queue writes only valid task objects"
	InvNoResurrect  = "a deleted task stays deleted"
	InvLayout       = "a task lives in one shard of the layout"          // placed in [0, shards) by a count of the manifest, in one shard only
	InvFound        = "every task is found by id"                        // at the end, over the final manifest's counts
	InvResharded    = "a reshard completes"                              // at the end the fleet assigns by the manifest's count
	InvMembers      = "the fleet lists its live workers, and only them"  // at the end: dead members pruned, their leases deleted; dedicated ones listed
	InvReleased     = "a release uses no attempt"                        // a claimed task handed back is pending again at its attempt before the claim
	InvDepOrder     = "no dependent starts before its parents succeeded" // a task with dependencies is claimed only after each parent's success
	InvDepOnce      = "a dependent is released once"                     // blocked -> pending happens at most once, and only when every parent succeeded
	InvDepStuck     = "no dependent is stuck after its parents ended"    // at the end, no task is blocked on parents that all ended
	InvSlotOne      = "a slot runs one task at a time"                   // never two tasks of one slot key running at once
	InvSlotAdvance  = "a slot advances only after its holder ended"      // a waiting task is granted its slot only once the tasks granted before it ended
	InvSlotStuck    = "no slot task is stuck"                            // at the end, no task waits for a slot whose other tasks all ended
	InvDeadline     = "no handler starts after its task's deadline"      // not later than deadlineSlack after it; and no task is left pending or running past it
	// InvPromptRelease: in the quiet tail a dependent a worker's pass-on
	// made pending is claimed within Plan.promptBound (see chains.go).
	InvPromptRelease = "a released dependent is claimed promptly"
	// InvBusy: in the quiet tail every live worker that can serve is busy
	// within Plan.busyBound of a backlog's first submit (see checkBusy).
	InvBusy = "every live worker is busy soon after a backlog appears"
	// InvJoinOrder: a member that joins is placed after every member
	// already in the fleet, so that a join moves no member off the shard
	// it has started on (by Joined, the fleet's order).
	InvJoinOrder = "a join moves no member"
	// Direct dispatch (see checkDirect).
	InvWorkerLease     = "one holder per worker lease"               // a worker's lease changes holder only after the last holder's expiry
	InvLeaseStops      = "a worker without its lease claims nothing" // no claim lands long after its worker's own lease expired
	InvInboxRecovered  = "a dead worker's inbox is moved"            // at the end, an inbox whose lease expired holds no old entry
	InvOverflowDrained = "the overflow is drained"                   // at the end, the overflow holds no old entry
	// Pause (see checkPause).
	InvPaused = "no claim of a paused type" // no claim lands more than pauseSlack after its type was paused, and every pause is lifted
	// Rate limits (see checkRateLimit).
	InvRateLimit = "a rate limit is never exceeded" // no window of S3 time has more claims of a limited type, by when they were sent, than its limit
	// Priorities (see checkPriority).
	InvPriority = "a window is claimed in priority order" // a member attempts one listing's candidates high first, ties oldest first
	// Results (see checkResults).
	InvResult = "a result is its committing attempt's" // inline or stored apart; a referenced object exists until its TTL or retention; no result dropped before its TTL
	// Schedules (see checkSchedules).
	InvSchedule = "one task per tick, on S3 time" // never two tasks for one tick, none before its tick, none missed while monitors run

	// InvInOrder: each write of a task records a time (updated_at) after
	// the last one's, and its history's times never go back (issue 26.8:
	// writers whose clocks differ recorded them out of order).
	InvInOrder = "a task's history reads in order"

	retentionMargin = 5 * time.Second // clock uncertainty the monitor may use
	cursorLag       = time.Minute     // how far a member's scan may trail its shard's keys
)

// taskState is what the checker knows of one task, from the writes so far.
type taskState struct {
	t        *task.Task
	dueAt    time.Time // pending: when it became due (or was written, if later)
	changed  time.Time // UpdatedAt of its last change of status (a retirement is not one)
	deleted  bool
	created  bool
	succeeds int
	// unblocked counts its moves from blocked to pending.
	unblocked int
	// released: when a worker's pass-on made it pending in the quiet
	// tail (due from then), until its claim; releasedBy: that worker.
	released   time.Time
	releasedBy string
	// ahead: while released, under a rate limit, each worker's last
	// start or end of an attempt of a task of an older id (promptAhead).
	ahead map[string]time.Time
}

// deadlineSlack is how long after its deadline a handler may still start:
// a worker starts a task unless the earliest S3 time its clock allows is
// past the deadline, and that reading trails S3 time by the clock's
// uncertainty (S3's 1-second Date, and the round trip of its sample).
const deadlineSlack = 3 * time.Second

// check runs the checker over the finished run.
func (w *world) check() Result {
	res := Result{Plan: w.plan, Trace: w.srv.Trace(), Counts: w.srv.Counts(), Tasks: len(w.acked), Executions: len(w.execs), LeaseLosses: w.leaseLosses}
	log := w.srv.Log()
	res.log = log
	end := time.Now()
	var vs []Violation
	reported := make(map[string]bool)
	add := func(inv, id, format string, args ...any) {
		if id != "" && reported[inv+id] {
			return // the first break of an invariant per task tells the story
		}
		reported[inv+id] = true
		vs = append(vs, Violation{Invariant: inv, Task: id, Detail: fmt.Sprintf(format, args...)})
	}

	tasks := make(map[string]*taskState)
	liveByKey := make(map[string]map[string]bool)     // idempotency key -> live task ids
	succeededAt := make(map[string]time.Time)         // task id -> when it succeeded (server time)
	runningBySlot := make(map[string]map[string]bool) // slot key -> its tasks pending or running now (its holder)
	heldBySlot := make(map[string]map[string]bool)    // slot key -> its tasks ever pending or running
	setLive := func(t *task.Task, live bool) {
		// A key with a window may have a live task per window: checkUnique
		// proves those.
		if t == nil || t.IdempotencyKey == "" || t.UniqueFor > 0 {
			return
		}
		m := liveByKey[t.IdempotencyKey]
		if m == nil {
			m = make(map[string]bool)
			liveByKey[t.IdempotencyKey] = m
		}
		if live {
			m[t.ID] = true
		} else {
			delete(m, t.ID)
		}
	}
	isWorker := func(proc string) bool { return strings.HasPrefix(proc, "w") }
	// claimedBy: the process that made each claim, by claim id. Under
	// direct dispatch a later process may run under a dead one's worker
	// id: only the process that made a claim may write under it.
	claimedBy := make(map[string]string)
	waiting := make(map[string]*taskState) // released in the quiet tail, not claimed yet (InvPromptRelease)
	retention := func(t *task.Task) time.Duration {
		return max(w.opts.Retention, t.MinRetention())
	}

	// When members asked for help (fleet writes raising want).
	var asked []time.Time
	for _, e := range log {
		var f shards.Fleet
		if e.Key == shards.FleetKey && e.New != nil && json.Unmarshal(e.New, &f) == nil && f.Want > 0 {
			asked = append(asked, e.At)
		}
	}
	askedBetween := func(from, to time.Time) bool {
		for _, a := range asked {
			if !a.Before(from) && !a.After(to) {
				return true
			}
		}
		return false
	}
	// The layout as the manifest said when each write was applied, and the
	// shard each task was placed in.
	layout := shards.Manifest{Shards: w.plan.Shards}
	placed := make(map[string]int)
	// The shard count of the manifest after each log index, for the count
	// a worker read when it started.
	countAt := make([]int, len(log)+1)
	fleetShards := 0
	behind := make(map[string]bool)
	var fleetBefore shards.Fleet
	for i, e := range log {
		countAt[i] = layout.Shards
		if e.Key == shards.ManifestKey && e.New != nil {
			var m shards.Manifest
			if err := json.Unmarshal(e.New, &m); err != nil || m.Shards < layout.Shards {
				add(InvLayout, "", "%s wrote a manifest of %d shards over one of %d at %s (%v)", e.Proc, m.Shards, layout.Shards, e.At.Format("15:04:05.000"), err)
				continue
			}
			layout = m
			res.Reshards++
			continue
		}
		// A reshard's fleet write may not happen (its resharder died):
		// every worker that opened the queue after the manifest changed
		// raises the fleet's count to the manifest's in its own fleet
		// writes, and nothing lowers it.
		var f shards.Fleet
		if e.Key == shards.FleetKey && e.New != nil && json.Unmarshal(e.New, &f) == nil {
			if f.Shards < fleetShards {
				add(InvResharded, "", "%s lowered the fleet's shard count from %d to %d at %s", e.Proc, fleetShards, f.Shards, e.At.Format("15:04:05.000"))
			}
			if from, ok := w.spawned[e.Proc]; ok && isWorker(e.Proc) && f.Shards < countAt[from] && !behind[e.Proc] {
				behind[e.Proc] = true // once per worker tells the story
				add(InvResharded, "", "%s, started when the manifest had %d shards, wrote a fleet of %d at %s", e.Proc, countAt[from], f.Shards, e.At.Format("15:04:05.000"))
			}
			fleetShards = f.Shards
			for _, m := range f.Members {
				if _, was := fleetBefore.Member(m.ID); was {
					continue
				}
				for _, old := range fleetBefore.Members {
					if _, stays := f.Member(old.ID); stays && !m.Joined.After(old.Joined) {
						add(InvJoinOrder, "", "%s wrote %s joining at %s, not after %s (joined %s) at %s", e.Proc, m.ID,
							m.Joined.Format("15:04:05.000000"), old.ID, old.Joined.Format("15:04:05.000000"), e.At.Format("15:04:05.000"))
					}
				}
			}
			fleetBefore = f
			continue
		}
		if !strings.HasPrefix(e.Key, "tasks/") {
			continue
		}
		if shards.IsPointer(e.Key) {
			p, err := shards.ParsePointerKey(e.Key)
			if err != nil || e.New == nil {
				continue
			}
			if p.In >= layout.Shards {
				add(InvLayout, p.ID, "%s wrote a pointer in shard %d at %s, outside the %d shards of the layout", e.Proc, p.In, e.At.Format("15:04:05.000"), layout.Shards)
			}
			if s, ok := placed[p.ID]; ok && p.Shard >= 0 && p.Shard != s {
				add(InvLayout, p.ID, "%s wrote a pointer naming shard %d at %s, but the task lives in shard %d", e.Proc, p.Shard, e.At.Format("15:04:05.000"), s)
			}
			continue
		}
		shard, id, err := task.ParseKey(e.Key)
		if err != nil {
			continue // a foreign object the run planted
		}
		if e.New != nil {
			if s, ok := placed[id]; ok && s != shard {
				add(InvLayout, id, "%s wrote it in shard %d at %s, but it lives in shard %d", e.Proc, shard, e.At.Format("15:04:05.000"), s)
			}
			if !slices.ContainsFunc(layout.Counts(), func(n int) bool { return task.ShardFor(id, n) == shard }) {
				add(InvLayout, id, "%s wrote it in shard %d at %s, which no shard count of the layout %v places it in", e.Proc, shard, e.At.Format("15:04:05.000"), layout.Counts())
			}
			placed[id] = shard
		}
		st := tasks[id]
		if st == nil {
			st = &taskState{}
			tasks[id] = st
		}
		at := e.At.Format("15:04:05.000")
		if e.New == nil { // a DELETE
			prev := st.t
			switch {
			case prev == nil:
			case !prev.Status.Terminal():
				add(InvNotLost, id, "%s deleted it at %s while it was %s (%s)", e.Proc, at, prev.Status, e.Fault)
			case e.At.Before(st.changed.Add(retention(prev) - retentionMargin)):
				add(InvRetention, id, "%s deleted it at %s, %v after it finished, before the retention of %v",
					e.Proc, at, e.At.Sub(st.changed).Round(time.Second), retention(prev))
			}
			setLive(prev, false)
			st.t, st.deleted = nil, true
			continue
		}
		t, err := task.Decode(e.New)
		if err != nil {
			add(InvDecodable, id, "%s wrote an object that does not decode at %s: %v", e.Proc, at, err)
			continue
		}
		if !e.Existed {
			if st.deleted {
				add(InvNoResurrect, id, "%s created it again at %s after it was deleted", e.Proc, at)
			} else if st.created {
				add(InvNoResurrect, id, "%s created it again at %s", e.Proc, at)
			}
			if t.Status != task.Pending && (len(t.Deps) == 0 && t.Slot == "" || t.Status == task.Running) {
				add(InvTransition, id, "%s created it %s at %s", e.Proc, t.Status, at)
			}
			st.created = true
		} else if prev := st.t; prev != nil {
			if bytes.Equal(e.Old, e.New) {
				add(InvBytesChange, id, "%s rewrote the same bytes at %s", e.Proc, at)
			}
			if t.Version <= prev.Version {
				add(InvBytesChange, id, "%s wrote version %d over version %d at %s", e.Proc, t.Version, prev.Version, at)
			}
			if why := badStep(prev, t); why != "" {
				add(InvTransition, id, "%s at %s: %s", e.Proc, at, why)
			}
			if why := outOfOrder(prev, t); why != "" {
				add(InvInOrder, id, "%s at %s: %s", e.Proc, at, why)
			}
			if prev.Status == task.Running && prev.Claim != nil {
				owner := claimedBy[prev.Claim.ID]
				if owner == "" {
					owner = prev.Claim.Worker
				}
				switch {
				case e.Proc == owner:
				case isWorker(e.Proc):
					add(InvFenced, id, "%s wrote %s at %s over the claim of %s", e.Proc, t.Status, at, owner)
				default:
					if why := notHoldersWrite(prev, t, e.At); why != "" {
						add(InvFenced, id, "%s wrote %s at %s over the claim of %s: %s", e.Proc, t.Status, at, owner, why)
					}
				}
			}
		}
		if t.Status == task.Running && t.Claim != nil && (st.t == nil || st.t.Claim == nil || st.t.Claim.ID != t.Claim.ID) {
			claimedBy[t.Claim.ID] = e.Proc
		}
		// In the quiet tail a task of the burst is claimed within the bound
		// (the fleet has a slot for each; other tasks may wait behind
		// them), or at least its member asked for help within it: a task
		// left in a full member's shard reaches a newcomer only when the
		// monitor's repair routes it there, at random.
		switch {
		case t.Status == task.Pending:
			st.dueAt = t.AvailableAt
			if e.At.After(st.dueAt) {
				st.dueAt = e.At
			}
		case t.Status == task.Running && st.t != nil && st.t.Status == task.Pending:
			if bytes.Contains(t.Input, []byte(`"long"`)) && !st.dueAt.Before(w.quietAt) && e.At.Sub(st.dueAt) > w.opts.Bound &&
				!askedBetween(w.quietAt, st.dueAt.Add(w.opts.Bound)) {
				add(InvLiveness, id, "due at %s in the quiet tail, claimed only at %s, %v later",
					st.dueAt.Format("15:04:05"), at, e.At.Sub(st.dueAt).Round(time.Second))
			}
		}
		if t.Status == task.Succeeded && (st.t == nil || st.t.Status != task.Succeeded) {
			succeededAt[id] = e.At
		}
		if t.Slot != "" {
			// The slot's holder is pending or running (docs/slots.md):
			// no other task of the key is either, whichever way it came
			// to be (a submit that took the slot, a grant, a requeue
			// into a new turn, a claim).
			if t.Status == task.Running || t.Status == task.Pending {
				for other := range runningBySlot[t.Slot] {
					if other != id {
						add(InvSlotOne, id, "%s made it %s at %s while %s of slot %s was %s", e.Proc, t.Status, at, other, t.Slot, tasks[other].t.Status)
					}
				}
				if runningBySlot[t.Slot] == nil {
					runningBySlot[t.Slot] = make(map[string]bool)
				}
				runningBySlot[t.Slot][id] = true
			} else {
				delete(runningBySlot[t.Slot], id)
			}
			if t.Status == task.Pending && st.t != nil && st.t.Status == task.Blocked {
				// Granted: every other task of the slot that was
				// granted before must have ended.
				for other := range heldBySlot[t.Slot] {
					if o := tasks[other]; other != id && o != nil && o.t != nil && (o.t.Status == task.Pending || o.t.Status == task.Running) {
						add(InvSlotAdvance, id, "%s granted it slot %s at %s while %s was %s", e.Proc, t.Slot, at, other, o.t.Status)
					}
				}
			}
			if t.Status == task.Pending || t.Status == task.Running {
				if heldBySlot[t.Slot] == nil {
					heldBySlot[t.Slot] = make(map[string]bool)
				}
				heldBySlot[t.Slot][id] = true
			}
		}
		if len(t.Deps) > 0 {
			if t.Status == task.Running && st.t != nil && st.t.Status == task.Pending {
				for _, d := range t.Deps {
					if pat, ok := succeededAt[d.ID]; !ok || pat.After(e.At) {
						add(InvDepOrder, id, "%s claimed it at %s before its dependency %s succeeded (it says %q)", e.Proc, at, d.ID, d.Ended)
					}
				}
			}
			if t.Status == task.Pending && st.t != nil && (st.t.Status == task.Dead || st.t.Status == task.Canceled) {
				// A requeue: a dependent made pending again only once
				// every parent has succeeded (the requeue checks them).
				for _, d := range t.Deps {
					if pat, ok := succeededAt[d.ID]; !ok || pat.After(e.At) {
						add(InvDepOrder, id, "%s requeued it at %s before its dependency %s succeeded", e.Proc, at, d.ID)
					}
				}
			}
			if t.Status == task.Pending && (st.t == nil || st.t.Status == task.Blocked) {
				st.unblocked++
				res.Unblocked++
				if st.unblocked > 1 {
					add(InvDepOnce, id, "%s released it a second time at %s", e.Proc, at)
				}
				for _, d := range t.Deps {
					if d.Ended != task.Succeeded {
						add(InvDepOnce, id, "%s released it at %s with dependency %s %q", e.Proc, at, d.ID, d.Ended)
					}
				}
			}
		}
		w.promptAhead(waiting, st.t, t, e, isWorker(e.Proc))
		w.promptRelease(waiting, st, t, e, isWorker(e.Proc), &res, add)
		if t.Status == task.Succeeded && (st.t == nil || st.t.Status != task.Succeeded) {
			st.succeeds++
			if st.succeeds > 1 {
				add(InvOutcomeOnce, id, "succeeded a second time at %s, by %s", at, e.Proc)
			}
		}
		if st.t == nil || st.t.Status != t.Status {
			st.changed = t.UpdatedAt
		}
		setLive(st.t, false)
		st.t = t
		setLive(t, !t.Status.Terminal())
		if t.IdempotencyKey != "" && len(liveByKey[t.IdempotencyKey]) > 1 {
			add(InvIdempotent, id, "at %s key %q has live tasks %v", at, t.IdempotencyKey, keys(liveByKey[t.IdempotencyKey]))
		}
	}

	// What producers were told.
	for id, a := range w.acked {
		if st := tasks[id]; st == nil || !st.created {
			add(InvNotLost, id, "%s was told it was submitted (key %q), but it was never written", a.proc, a.key)
		}
	}
	w.checkFound(tasks, add)
	w.checkRetained(tasks, end, add)
	for _, o := range w.ops {
		if o.err == nil || errors.Is(o.err, producer.ErrOutcomeUnknown) || errors.Is(o.err, taskio.ErrUnknownOutcome) {
			continue // told "unknown", not "failed": the change may stand
		}
		for _, e := range log[o.from:o.to] {
			if e.Proc != o.proc || !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) || marksDependents(e) {
				continue
			}
			add(InvHonest, idOf(e.Key), "%s %s %s was told %q, but it wrote %s at %s", o.proc, o.kind, o.id, o.err, e.Key, e.At.Format("15:04:05.000"))
			break
		}
	}

	// Liveness, after the quiet tail.
	ids := make([]string, 0, len(tasks))
	for id := range tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := tasks[id].t
		if t == nil {
			continue
		}
		w.promptReleaseEnd(id, tasks[id], end, add)
		if t.Status == task.Blocked && t.Slot != "" && len(t.Deps) == 0 {
			live := 0
			for other, o := range tasks {
				if other != id && o.t != nil && o.t.Slot == t.Slot && !o.t.Status.Terminal() && o.t.Status != task.Blocked {
					live++
				}
			}
			if live == 0 && t.UpdatedAt.Before(end.Add(-w.opts.Bound)) {
				add(InvSlotStuck, id, "waits for slot %s at the end, and no task of it is pending or running", t.Slot)
			}
		}
		if t.Status == task.Blocked && len(t.Deps) > 0 {
			ended := 0
			for _, d := range t.Deps {
				if p := tasks[d.ID]; p != nil && (p.t == nil || p.t.Status.Terminal()) && p.changed.Before(end.Add(-w.opts.Bound)) {
					ended++
				}
			}
			if ended == len(t.Deps) {
				add(InvDepStuck, id, "blocked at the end on %d dependencies that all ended more than %v before", ended, w.opts.Bound)
			}
		}
		if !t.Deadline.IsZero() && (t.Status == task.Pending || t.Status == task.Running) && t.Deadline.Before(end.Add(-w.opts.Bound)) {
			add(InvDeadline, id, "%s at the end, its deadline %s passed %v before", t.Status, t.Deadline.Format("15:04:05"), end.Sub(t.Deadline).Round(time.Second))
		}
		switch {
		case t.Status == task.Pending && t.AvailableAt.Before(end.Add(-w.opts.Bound)):
			add(InvLiveness, id, "pending and due since %s, %v before the end", t.AvailableAt.Format("15:04:05"), end.Sub(t.AvailableAt).Round(time.Second))
		case t.Status == task.Running && t.Claim != nil && t.Claim.ExpiresAt.Before(end.Add(-w.opts.Bound)):
			add(InvLiveness, id, "running under %s's lease, which expired at %s, %v before the end", t.Claim.Worker, t.Claim.ExpiresAt.Format("15:04:05"), end.Sub(t.Claim.ExpiresAt).Round(time.Second))
		}
	}

	// Handlers, and processes after they stopped. A duplicate execution is
	// one whose claim ended without an outcome of its own (its lease was
	// lost, its worker died) and whose task ran again (invariant 5: counted,
	// not hidden).
	settled := make(map[string]bool) // claim ids that wrote their own outcome
	for _, e := range log {
		if !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) || e.Old == nil || e.New == nil {
			continue
		}
		prev, err1 := task.Decode(e.Old)
		next, err2 := task.Decode(e.New)
		if err1 == nil && err2 == nil && prev.Status == task.Running && next.Status != task.Running && prev.Claim != nil && e.Proc == prev.Claim.Worker {
			settled[prev.Claim.ID] = true
		}
		// A task whose available_at is later than its last write was
		// delayed (a retry, a snooze, a submit with a delay): a worker
		// claims it only once the earliest time its S3 clock allows has
		// passed available_at, so before the server's time does.
		if err1 == nil && err2 == nil && prev.Status == task.Pending && next.Status == task.Running &&
			prev.AvailableAt.After(prev.CreatedAt) && prev.AvailableAt.After(prev.UpdatedAt) && e.Sent.Before(prev.AvailableAt) {
			add(InvNotEarly, next.ID, "%s claimed it at %s, %v before its available_at %s", e.Proc, e.Sent.Format("15:04:05.000"),
				prev.AvailableAt.Sub(e.Sent).Round(time.Millisecond), prev.AvailableAt.Format("15:04:05.000"))
		}
		if err1 == nil && err2 == nil && prev.Status != task.Dead && next.Status == task.Dead && strings.Contains(next.LastError, "deadline passed at ") {
			res.DeadlineEnds++
		}
		if err1 == nil && err2 == nil && prev.Status == task.Running && next.Status != task.Running && len(next.History) > 0 &&
			strings.Contains(next.History[len(next.History)-1].Reason, "timed out after ") {
			res.TimedOut++
		}
		if err1 == nil && err2 == nil && prev.Status == task.Running && next.Status == task.Pending && len(next.History) > 0 &&
			strings.HasPrefix(next.History[len(next.History)-1].Reason, "released") {
			res.Releases++
			if next.Attempt != prev.Attempt-1 {
				add(InvReleased, next.ID, "released at attempt %d from attempt %d", next.Attempt, prev.Attempt)
			}
		}
	}
	last := make(map[string]int) // task id -> index of its last execution
	for i, x := range w.execs {
		last[x.id] = i
	}
	// Each claim's lease by server time, write by write (the claim and
	// its renewals, whoever wrote them): a handler starts only while its
	// claim's lease runs. A worker decides that by the latest time its
	// S3 clock allows, with lease_margin to spare, so a start after the
	// expiry the server holds is a run the worker could not know was its
	// own (another may run the task meanwhile).
	type leaseAt struct{ at, expires time.Time }
	leases := make(map[string][]leaseAt) // claim id -> its writes, in log order
	for _, e := range log {
		if e.New == nil || !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) {
			continue
		}
		if t, err := task.Decode(e.New); err == nil && t.Status == task.Running && t.Claim != nil {
			leases[t.Claim.ID] = append(leases[t.Claim.ID], leaseAt{at: e.At, expires: t.Claim.ExpiresAt})
		}
	}
	for _, x := range w.execs {
		var held *leaseAt
		for i, l := range leases[x.claim] {
			if l.at.After(x.at) {
				break
			}
			held = &leases[x.claim][i]
		}
		if held != nil && x.at.After(held.expires) {
			add(InvLeaseHeld, x.id, "%s started attempt %d at %s, %v after its claim's lease expired at %s", x.worker, x.attempt,
				x.at.Format("15:04:05.000"), x.at.Sub(held.expires).Round(time.Millisecond), held.expires.Format("15:04:05.000"))
		}
	}
	for i, x := range w.execs {
		if !settled[x.claim] && last[x.id] > i {
			res.Duplicates++
		}
		if st := tasks[x.id]; st != nil && st.t != nil && !st.t.Deadline.IsZero() && x.at.After(st.t.Deadline.Add(deadlineSlack)) {
			add(InvDeadline, x.id, "%s started attempt %d at %s, %v after its deadline %s", x.worker, x.attempt, x.at.Format("15:04:05.000"),
				x.at.Sub(st.t.Deadline), st.t.Deadline.Format("15:04:05.000"))
		}
		// A handler started within the clock's uncertainty of its task's
		// deadline may find its context ended at once: the deadline
		// ends it at the latest S3 time the clock allows.
		nearDeadline := false
		if st := tasks[x.id]; st != nil && st.t != nil && !st.t.Deadline.IsZero() && x.at.After(st.t.Deadline.Add(-deadlineSlack)) {
			nearDeadline = true
		}
		if x.dead && !nearDeadline && !x.at.Before(w.quietAt.Add(time.Minute)) {
			add(InvRunnable, x.id, "%s started attempt %d at %s with its context already canceled", x.worker, x.attempt, x.at.Format("15:04:05"))
		}
	}
	// Every member's scan of its own shards has passed every key that is
	// more than cursorLag old: a cursor held by a key it never settles
	// starves the rest of its shard.
	for _, d := range w.deadMembers {
		add(InvMembers, "", "%s", d)
	}
	for _, c := range w.cursors {
		var newest time.Time
		for key := range w.srv.Objects(shards.TasksPrefix(c.shard)) {
			var at time.Time
			if p, err := shards.ParsePointerKey(key); err == nil {
				at = p.At
			} else if _, id, err := task.ParseKey(key); err == nil {
				at, _ = task.IDTime(id)
			} else {
				continue
			}
			if at.Before(end.Add(-cursorLag)) && at.After(newest) {
				newest = at
			}
		}
		if c.at.Before(newest.Add(-cursorLag)) {
			add(InvCursor, "", "%s's scan of shard %d stands at %s, behind keys of %s", c.worker, c.shard,
				c.at.Format("15:04:05"), newest.Format("15:04:05"))
		}
	}
	for _, v := range w.srv.Violations() {
		add(InvAfterStop, "", "%s", v)
	}
	checkLeader(log, add)
	for _, v := range w.overLimit {
		add(InvPoolBound, "", "%s", v)
	}
	if w.plan.Direct {
		w.checkDirect(log, &res, add)
	}
	if len(w.plan.Schedules) > 0 {
		res.Scheduled = w.checkSchedules(log, end, add)
	}
	if w.plan.Pause != nil {
		w.checkPause(log, add)
	}
	if w.plan.RateLimit != nil {
		w.checkRateLimit(log, add)
	}
	w.checkBusy(log, add)
	w.checkUnique(log, add)
	w.checkPriority(log, add)
	if w.plan.Results != nil {
		w.checkResults(log, &res, add)
	}
	res.Violations = vs
	return res
}

// checkFound proves that every task is found by its id as `s3queue get`
// finds it, with taskio.LoadID over the manifest's counts: at the end of
// the chaos phase, every task object then in the bucket; at the end of the
// run, every task object in the bucket and every task a producer was told
// it submitted, unless retention deleted it (checked above). And that the
// fleet assigns by the manifest's count: every reshard, even one whose
// resharder died, completed.
func (w *world) checkFound(tasks map[string]*taskState, add func(inv, id, format string, args ...any)) {
	ctx := context.Background()
	find := func(when string, objects map[string][]byte, ids []string) (shards.Manifest, s3store.Store) {
		bucket := mem.New()
		for key, body := range objects {
			bucket.Put(ctx, key, body, s3store.PutOptions{})
		}
		m, err := shards.ReadManifest(ctx, bucket)
		if err != nil {
			add(InvFound, "", "%s: %v", when, err)
			return m, bucket
		}
		for key, body := range objects {
			if _, id, err := task.ParseKey(key); err == nil && !shards.IsPointer(key) {
				if _, err := task.Decode(body); err == nil {
					ids = append(ids, id)
				}
			}
		}
		sort.Strings(ids)
		for _, id := range slices.Compact(ids) {
			v, err := taskio.LoadID(ctx, bucket, id, m.Counts())
			switch {
			case err != nil:
				add(InvFound, id, "%s, not found by id over the shard counts %v: %v", when, m.Counts(), err)
			case v.Task.ID != id:
				add(InvFound, id, "%s, loading it by id found task %s", when, v.Task.ID)
			}
		}
		return m, bucket
	}
	find("at the end of the chaos phase", w.midway, nil)
	var acked []string
	for id := range w.acked {
		if st := tasks[id]; st != nil && st.t != nil {
			acked = append(acked, id) // not deleted by retention
		}
	}
	m, bucket := find("at the end", w.srv.Objects(""), acked)
	if len(w.plan.Reshards) == 0 {
		return
	}
	f, _, err := shards.ReadFleet(ctx, bucket)
	if err != nil || f.ShardCount(0) != m.Shards {
		add(InvResharded, "", "the manifest has %d shards, but the fleet assigns by %d (%v)", m.Shards, f.ShardCount(0), err)
	}
}

// marksDependents reports whether e only marked a task as having
// dependents (a submit with dependencies does, before it may fail): no
// change of any task's course.
func marksDependents(e Entry) bool {
	prev, err1 := task.Decode(e.Old)
	next, err2 := task.Decode(e.New)
	return err1 == nil && err2 == nil && prev.Status == next.Status && !prev.Dependents && next.Dependents
}

// notHoldersWrite says what is wrong with next, written over prev, a running
// task, at at (server time), by a process other than its claim's (a monitor,
// a producer, the racer), or "". Such a process may change a running task
// only by:
//   - a cancel request (Task.Cancel: CancelRequested set, one "cancel
//     requested" entry of history; a producer's Cancel, or a replace
//     admission's cancel of its slot's holder), at any time: the holder's
//     handler sees it and the holder writes the outcome;
//   - marking it as having dependents (Task.MarkDependents: the Dependents
//     flag; a submit with dependencies on it), at any time;
//   - taking it back from its lease (Task.Expire, "lease expired": the
//     monitor's re-dispatch), once at is past the claim's ExpiresAt +
//     leaseMargin (the processes' lease_margin: invariant 4 lets others
//     take a lease over only then).
//
// Everything else (a second claim, an outcome, a requeue, an expiry before
// the lease has run out by the server's clock) overwrites the holder's
// claim: invariant 3.
func notHoldersWrite(prev, next *task.Task, at time.Time) string {
	if onlyFlagSet(prev, next, "cancel requested", func(t *task.Task) *bool { return &t.CancelRequested }) ||
		onlyFlagSet(prev, next, "", func(t *task.Task) *bool { return &t.Dependents }) {
		return ""
	}
	if expires := prev.Claim.ExpiresAt.Add(leaseMargin); !at.After(expires) {
		return fmt.Sprintf("its lease expires at %s, and %v later by the lease margin", prev.Claim.ExpiresAt.Format("15:04:05.000"), leaseMargin)
	}
	if n := len(next.History); next.Status == task.Running || n == 0 || !strings.HasSuffix(next.History[n-1].Reason, "lease expired") {
		return "after its lease expired, but not as the lease's expiry"
	}
	return ""
}

// onlyFlagSet reports whether next is prev with the flag flag names set
// (unset in prev), and, if reason is not "", one entry of history with that
// reason appended: nothing else changes but the version and UpdatedAt.
func onlyFlagSet(prev, next *task.Task, reason string, flag func(*task.Task) *bool) bool {
	if *flag(prev) || !*flag(next) {
		return false
	}
	a, b := prev.Clone(), next.Clone()
	if reason != "" {
		n := len(b.History)
		if n == 0 || b.History[n-1].Reason != reason || b.History[n-1].From != prev.Status || b.History[n-1].To != prev.Status {
			return false
		}
		// The history is bounded: compare what precedes the entry.
		a.History, a.HistoryDropped, b.History, b.HistoryDropped = nil, 0, nil, 0
	}
	*flag(a) = true
	a.Version, a.UpdatedAt = b.Version, b.UpdatedAt
	x, err1 := task.Marshal(a)
	y, err2 := task.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// ended counts the dependencies of t whose end it has learned.
func ended(t *task.Task) int {
	return len(t.Deps) - len(t.Waiting())
}

// snoozedBack is the attempt t's last run gave back by a snooze, or -1.
func snoozedBack(t *task.Task) int {
	for i := len(t.History) - 1; i >= 0; i-- {
		if h := t.History[i]; h.From == task.Running && h.To != task.Running {
			if h.To == task.Pending && strings.HasPrefix(h.Reason, "snoozed") && h.Attempt == t.Attempt+1 {
				return h.Attempt
			}
			return -1
		}
	}
	return -1
}

// outOfOrder says how the write of next records a time before prev's, or "".
func outOfOrder(prev, next *task.Task) string {
	if !next.UpdatedAt.After(prev.UpdatedAt) {
		return fmt.Sprintf("updated at %s, not after the last write's %s", next.UpdatedAt.Format(time.RFC3339Nano), prev.UpdatedAt.Format(time.RFC3339Nano))
	}
	for i := 1; i < len(next.History); i++ {
		if next.History[i].At.Before(next.History[i-1].At) {
			return fmt.Sprintf("history entry %d (%s→%s) at %s, before the one above it at %s", i, next.History[i].From, next.History[i].To,
				next.History[i].At.Format(time.RFC3339Nano), next.History[i-1].At.Format(time.RFC3339Nano))
		}
	}
	return ""
}

// badStep says what is wrong with the write of next over prev, or "".
func badStep(prev, next *task.Task) string {
	from, to := prev.Status, next.Status
	switch {
	case from == task.Pending && to == task.Running:
		if next.Claim == nil || next.Attempt != prev.Attempt+1 {
			return fmt.Sprintf("claimed without a claim or with attempt %d after %d", next.Attempt, prev.Attempt)
		}
	case from == task.Pending && to == task.Canceled:
		// A cancel keeps the count, and counts the attempt a snooze gave
		// back: its handler ran (issue 26.6).
		if next.Attempt != prev.Attempt && next.Attempt != snoozedBack(prev) {
			return fmt.Sprintf("canceled at attempt %d from attempt %d", next.Attempt, prev.Attempt)
		}
	case from == task.Pending && to == task.Dead:
		// Found past its deadline: ended unstarted (task.MissDeadline).
		if next.Deadline.IsZero() || !next.UpdatedAt.After(next.Deadline) || next.Attempt != prev.Attempt ||
			!strings.HasPrefix(next.LastError, "deadline passed at ") {
			return fmt.Sprintf("pending -> dead at %s with deadline %s (last error %q)", next.UpdatedAt.Format(time.RFC3339Nano), next.Deadline.Format(time.RFC3339Nano), next.LastError)
		}
	case from == task.Blocked && (to == task.Canceled || to == task.Dead || to == task.Pending):
	case from == task.Blocked && to == task.Blocked:
		// One more dependency settled, or its dependents marked.
		if ended(next) < ended(prev) {
			return "a settled dependency came undone"
		}
	case from == task.Pending && to == task.Pending:
		// Its dependents marked (task.MarkDependents), nothing else.
		if !next.Dependents || prev.Dependents {
			return "pending -> pending is not a transition"
		}
	case from == task.Running && to == task.Running && prev.Claim != nil && next.Claim != nil && prev.Claim.ID != next.Claim.ID:
		// A crashed handler's task requeued at once (crash_policy
		// requeue): the failed attempt and the next claim in one write,
		// by the same worker, one attempt on.
		n := len(next.History)
		if next.Claim.Worker != prev.Claim.Worker || next.Attempt != prev.Attempt+1 || n < 2 ||
			!strings.HasPrefix(next.History[n-2].Reason, "failed: ") || next.History[n-1].Reason != "claimed" {
			return "the claim changed while the task stayed running"
		}
	case from == task.Running && to == task.Running:
		if prev.Claim == nil || next.Claim == nil || prev.Claim.ID != next.Claim.ID {
			return "the claim changed while the task stayed running"
		}
	case from == task.Running && (to == task.Pending || to.Terminal()):
		if next.Claim != nil {
			return fmt.Sprintf("%s but still carries a claim", to)
		}
		// A failed attempt (an expired lease too) is not retried after
		// the task's deadline: it would start past it.
		if n := len(next.History); to == task.Pending && !next.Deadline.IsZero() && next.AvailableAt.After(next.Deadline) &&
			n > 0 && strings.HasPrefix(next.History[n-1].Reason, "failed: ") {
			return fmt.Sprintf("retried at %s, after its deadline %s", next.AvailableAt.Format(time.RFC3339Nano), next.Deadline.Format(time.RFC3339Nano))
		}
	case (from == task.Dead || from == task.Canceled) && (to == task.Pending || to == task.Blocked && next.Slot != ""):
		if next.Attempt != 0 {
			return "requeued without resetting its attempts"
		}
	case from.Terminal() && to == from:
		// A retirement tombstone: same outcome, marked for deletion.
	default:
		return fmt.Sprintf("%s -> %s is not a transition", from, to)
	}
	return ""
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func idOf(key string) string {
	if _, id, err := task.ParseKey(key); err == nil {
		return id
	}
	return key
}

// Report renders a failed run: the plan, each violation, and the last
// lines of the trace that touch each task concerned.
func (r Result) Report(lines int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", r.Plan)
	fmt.Fprintf(&b, "replay: S3QUEUE_SIM_SEED=%d go test ./internal/sim -run 'TestSimulation' -v\n", r.Plan.Seed)
	done := make(map[string]bool)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION %s\n", v)
		if v.Task == "" || done[v.Task] {
			continue
		}
		done[v.Task] = true
		var touch []string
		grep := os.Getenv("S3QUEUE_SIM_GREP") // and the requests touching this too
		for _, l := range r.Trace {
			if strings.Contains(l, v.Task) || grep != "" && strings.Contains(l, grep) {
				touch = append(touch, l)
			}
		}
		if len(touch) > lines {
			touch = touch[len(touch)-lines:]
		}
		fmt.Fprintf(&b, "  last %d requests touching %s:\n", len(touch), v.Task)
		for _, l := range touch {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

// Faults counts the faults a run injected, by kind.
func (r Result) Faults() map[string]int {
	out := make(map[string]int)
	for _, k := range []string{"error", "conflict", "lost", "delay", "zombie", "forbidden", "partitioned", "outage"} {
		out[k] = r.Counts[k]
	}
	return out
}

// checkLeader proves that one monitor leads at a time: a write of the
// monitors' leader lease (monitor.LeaseKey) by a new holder lands only
// after the expiry the last holder wrote. A monitor that took a lease
// another had just taken for its own would renew it under the other's
// ETag, and the two would lead at once (blind defect B1).
func checkLeader(log []Entry, add func(inv, id, format string, args ...any)) {
	var last *leaseRecord
	for _, e := range log {
		if e.Key != monitor.LeaseKey {
			continue
		}
		if e.New == nil {
			last = nil // released
			continue
		}
		var r leaseRecord
		if json.Unmarshal(e.New, &r) != nil {
			continue
		}
		if last != nil && last.Holder != r.Holder && e.At.Before(last.ExpiresAt) {
			add(InvOneLeader, "", "%s took the leader lease at %s, held by %s until %s", r.Holder,
				e.At.Format("15:04:05.000"), last.Holder, last.ExpiresAt.Format("15:04:05.000"))
		}
		last = &r
	}
}
