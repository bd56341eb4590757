package worker

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Discovery finds due tasks in the shards and claims them: each shard's
// scan lists it from its cursor (shards.Scan), the tasks a listing returns
// beyond the free slots are prefetched for the slots that free up next,
// and each claim is a CAS on the task object. A claimed task goes to
// dispatch (dispatch.go). Only the scheduler runs discovery.

// ScanCursors reports, for each shard the worker has scanned, how far its
// scan has got: every key of an earlier time has been handled. A cursor
// that stops advancing while its shard receives work is a starved shard
// (the simulator checks that none does).
//
// It reads what the last poll published, without waiting for a poll in
// progress.
func (w *Worker) ScanCursors() map[int]time.Time {
	out := make(map[int]time.Time)
	if c := w.cursors.Load(); c != nil {
		for shard, at := range *c {
			out[shard] = at
		}
	}
	return out
}

// publishCursors publishes the scans' cursors for ScanCursors.
func (w *Worker) publishCursors() {
	c := make(map[int]time.Time, len(w.scans))
	for shard, s := range w.scans {
		c[shard] = s.Cursor()
	}
	w.cursors.Store(&c)
}

// pass is what one poll of some shards did.
type pass struct {
	claimed  int  // tasks claimed
	refused  int  // candidates left waiting for a full pool (read and refused, or remembered as refused)
	listed   int  // due candidates its LISTs returned: the arrivals since the last
	lists    bool // it listed, rather than only claiming prefetched candidates
	capped   bool // a listing returned as many as it asked for: more may be due
	full     bool // every slot was busy at the end
	leftover bool // due candidates were left behind for lack of slots
	err      error
}

// pollShards polls list once: for each shard, the candidates prefetched by
// its last listing, or a new listing. With every slot busy it claims nothing;
// if peek, it then learns whether due work waits (see peek).
func (w *Worker) pollShards(ctx context.Context, list []int, peek bool) (p pass) {
	defer w.publishCursors()
	w.polls++
	w.blocked = make(map[*pool]int)
	defer w.publishWaiting()
	defer func() {
		for _, n := range w.blocked {
			p.refused += n
		}
		// Due work refused for a full pool is left behind for lack of
		// room, though another pool has some: as far as saturation goes
		// the member is behind, and asks for help (a member of an io and
		// a compute pool whose compute pool is full is saturated for it).
		p.leftover = p.leftover || p.refused > 0
	}()
	if w.stopping.Load() || len(list) == 0 || w.pausedAll() {
		return p // paused: the cursors stay, and find everything at the resume
	}
	// A slot owed to the overflow's listing is not the shards' (see
	// owesOverflow): the poll only peeks, as a full one does.
	full := func() bool { return w.free() == 0 || w.owesOverflow() }
	if full() && !peek {
		p.full = true
		return p
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		p.err = err
		return p
	}
	if full() {
		p.full = true
		p.err = w.peek(ctx, list, iv, &p)
		return p
	}
	// A busy member claims from its shards' lanes first (lanes.go).
	w.claimLanes(ctx, list, iv, &p)
	// Rotate the starting shard so that no shard starves when slots run
	// out part way through a pass.
	w.rotate++
	for i := range list {
		if w.free() == 0 {
			p.full, p.leftover = true, true
			return p
		}
		shard := list[(w.rotate+i)%len(list)]
		if err := w.pollShard(ctx, shard, iv, &p); err != nil {
			p.err = errors.Join(p.err, err)
		}
	}
	p.full = w.free() == 0
	return p
}

// publishWaiting sets each pool's waiting gauge from the last poll: the
// tasks it found due and left unclaimed for lack of room, and, in the
// default pool's, the candidates held from a listing, whose types are not
// known until they are read.
func (w *Worker) publishWaiting() {
	held := 0
	for _, pf := range w.prefetched {
		held += len(pf.cands)
	}
	for i, p := range w.pools {
		p.markLooked()
		n := w.blocked[p]
		if i == 0 {
			n += held
		}
		p.setWaiting(n)
	}
}

// peek learns, while every slot is busy, whether due work waits in list, so
// that a saturated member asks for help (a member that only listed when a
// slot was free would never see a backlog under long handlers). Candidates
// prefetched by a listing less than PollMax old say so for free; otherwise one
// listing per shard refreshes them, and they are claimed as slots free up,
// without another LIST. The member's own-shard polls come every PollMax
// while it is full, so this costs at most one LIST per own shard per
// PollMax, as an idle member's polls do.
func (w *Worker) peek(ctx context.Context, list []int, iv clock.Interval, p *pass) error {
	for _, shard := range list {
		if pf := w.prefetched[shard]; pf.fresh(w.now(), w.cfg.PollMax) {
			p.leftover = true
			continue
		}
		cands, capped, err := w.listShard(ctx, shard, iv, p, 0, nil)
		if err != nil {
			return err
		}
		pf := w.relisted(w.prefetched[shard], cands)
		pf.capped = capped
		w.prefetched[shard] = pf
		p.leftover = p.leftover || len(cands) > 0
	}
	return nil
}

// list lists shard for up to a poll's worth of tasks (PollBatch), or a
// full set of slots under a backlog, so that slots freeing up one by one
// are refilled from what is prefetched, not by a LIST each. One more than that
// tells whether work is left behind.
// extra asks for that many more, to hand off.
func (w *Worker) list(ctx context.Context, shard int, iv clock.Interval, p *pass, extra int) ([]shards.Candidate, error) {
	cands, _, err := w.listShard(ctx, shard, iv, p, extra, nil)
	return cands, err
}

// listShard is list, its first LIST the one ahead sent (nil: none, see
// shards.Scan.NextAhead), and reports whether the listing returned all it
// asked for (more may be due: a backlog).
func (w *Worker) listShard(ctx context.Context, shard int, iv clock.Interval, p *pass, extra int, ahead *shards.Ahead) ([]shards.Candidate, bool, error) {
	// Twice what a listing at the pace brings, at least: one that returns
	// all it asked for is taken for a backlog (listed again as slots
	// free), which work arriving at the pace is not.
	expected := int(math.Ceil(2 * w.pace.rate * w.pace.paced.Seconds()))
	want := max(w.free(), w.capacity(), int(math.Ceil(w.cfg.PollBatch)), min(expected, maxBacklogProbe)) + 1 + extra
	s := w.scan(shard, iv)
	cands, err := s.NextAhead(ctx, w.st, iv.Latest, want, ahead)
	if err != nil {
		return nil, false, err
	}
	if h := w.cfg.Hooks.OnWindow; h != nil {
		h(shard, slices.Clone(s.Window()))
	}
	capped := len(cands) >= want
	p.capped = p.capped || capped
	p.listed += len(cands)
	p.lists = true
	return cands, capped, nil
}

func (w *Worker) scan(shard int, iv clock.Interval) *shards.Scan {
	s, ok := w.scans[shard]
	if !ok {
		s = shards.NewScan(shard, iv.Earliest.Add(-w.cfg.ScanLookback), w.cfg.ScanLag)
		s.PointersOnly = w.direct != nil
		w.scans[shard] = s
	}
	return s
}

// prefetch is what one listing of a shard returned beyond the free slots,
// kept for the slots that free up next: a worker with few slots then pays
// one LIST per poll_batch tasks, not one per slot's worth.
type prefetch struct {
	at    time.Time // local time of the listing
	cands []shards.Candidate
	// capped: the listing returned all it asked for (a backlog): the
	// pipeline lists ahead once cands are under way.
	capped bool
	// seen is when this worker first listed each candidate still held,
	// by id: where a task's wait for dispatch (queue.wait_ms) starts.
	seen map[string]time.Time
}

// relisted is the prefetch of a new listing of cands, keeping the times
// old first saw them.
func (w *Worker) relisted(old prefetch, cands []shards.Candidate) prefetch {
	now := w.now()
	pf := prefetch{at: now, cands: cands, seen: make(map[string]time.Time, len(cands))}
	for _, c := range cands {
		if at, ok := old.seen[c.ID]; ok {
			pf.seen[c.ID] = at
		} else {
			pf.seen[c.ID] = now
		}
	}
	return pf
}

// hasPrefetched reports whether candidates prefetched for one of these
// shards are still fresh enough to claim at local time now.
func (w *Worker) hasPrefetched(now time.Time, list []int) bool {
	for _, s := range list {
		if w.prefetched[s].fresh(now, w.cfg.PollMax) {
			return true
		}
	}
	return false
}

// fresh reports whether pf has candidates listed less than maxAge before
// local time now.
func (pf prefetch) fresh(now time.Time, maxAge time.Duration) bool {
	return len(pf.cands) > 0 && now.Sub(pf.at) < maxAge
}

// pollShard claims what shard offers, its prefetched candidates or a new
// listing's, while slots are free, and prefetches the rest. Under a
// backlog it lists ahead while it claims (claimPipelined).
func (w *Worker) pollShard(ctx context.Context, shard int, iv clock.Interval, p *pass) error {
	s := w.scan(shard, iv)
	pf := w.prefetched[shard]
	cands := pf.cands
	if !pf.fresh(w.now(), w.cfg.PollMax) {
		// Candidates prefetched longer than PollMax ago are listed afresh
		// (they stay unsettled in the scan, so the listing returns them
		// again).
		var capped bool
		var err error
		if cands, capped, err = w.listShard(ctx, shard, iv, p, 0, nil); err != nil {
			return err
		}
		pf = w.relisted(pf, cands)
		pf.capped = capped
	}
	if len(w.limits) > 0 {
		// Up to maxClaimBatch candidates, no more than the free slots, are
		// claimed at once, their tokens reserved together (claimBatch);
		// one free slot claims one at a time.
		i := 0
		for i < len(cands) && w.free() > 0 {
			n := nextBatch(cands[i:], min(w.free(), maxClaimBatch))
			if h := w.cfg.Hooks.OnAttempt; h != nil {
				for _, c := range cands[i : i+n] {
					h(shard, c)
				}
			}
			p.claimed += w.claimBatch(ctx, s, cands[i:i+n], iv, pf.seen)
			i += n
		}
		pf.cands = append([]shards.Candidate(nil), cands[i:]...)
		w.prefetched[shard] = pf
		p.leftover = p.leftover || len(pf.cands) > 0
		return nil
	}
	var listErr error
	r := claimRun{s: s, iv: iv, shard: shard, cands: cands, found: func(id string) time.Time { return pf.seen[id] }}
	if pf.capped {
		var at clock.Interval // the clock's reading the listing ahead is sent at
		r.send = func() *shards.Ahead {
			// A pipeline runs for up to pipelineFor: the clock is read
			// again (for free, while responses flow), so that the
			// listing and the claims see what is due now.
			var err error
			if at, err = w.clock.Now(ctx); err != nil {
				listErr = err
				return nil
			}
			return s.ListAhead(ctx, w.st, at.Latest)
		}
		r.take = func(a *shards.Ahead, busy map[string]bool, held int) ([]shards.Candidate, clock.Interval, bool) {
			cands, capped, err := w.listShard(ctx, shard, at, p, held, a)
			if err != nil {
				listErr = err
				return nil, at, false
			}
			next := make([]shards.Candidate, 0, len(cands))
			for _, c := range cands {
				if !busy[c.Key] {
					next = append(next, c)
				}
			}
			p.listed -= len(cands) - len(next) // not arrivals
			pf = w.relisted(pf, next)
			pf.capped = capped
			return next, at, capped
		}
	}
	n, rest := w.claimPipelined(ctx, r)
	p.claimed += n
	pf.cands = append([]shards.Candidate(nil), rest...)
	w.prefetched[shard] = pf
	p.leftover = p.leftover || len(pf.cands) > 0
	return listErr
}

// reportLoad logs a failed load and reports whether the object is settled
// as unusable (corrupt, gone) rather than unreadable for now.
func (w *Worker) reportLoad(key string, err error) bool {
	switch {
	case errors.Is(err, s3store.ErrNotFound):
		return true
	case errors.Is(err, task.ErrCorrupt), errors.Is(err, task.ErrUnsupportedFormat):
		w.stats.corrupt.Add(1)
		w.log.Error("skipping corrupt task object", "key", key, "err", err)
		w.emit(Event{Kind: "corrupt", Key: key, Err: err})
		return true
	}
	w.log.Warn("load task", "key", key, "err", err)
	return false
}

// dueNow reports whether t may be claimed now. A task meant to run at once
// (a new task, or one handed back by a release: due when it was written)
// is claimed when it may already be due; a delayed one only once it
// certainly is, so delays are never cut short by clock uncertainty.
func dueNow(t *task.Task, iv clock.Interval) bool {
	if t.AvailableAt.After(t.CreatedAt) && t.AvailableAt.After(t.UpdatedAt) {
		return t.Due(iv.Earliest)
	}
	return t.Due(iv.Latest)
}
