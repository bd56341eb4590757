package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Chains in the quiet tail: a worker that records a parent's success
// releases the child (blocked -> pending) and must announce it where a
// member polls, ringing the doorbell if the fleet sleeps. A child announced
// in its own shard (a drain shard nobody polls promptly, or any shard of a
// sleeping fleet) waits for the monitor's repair, a minute or more: the
// checks that bound a quiet-tail wait by Options.Bound (5 minutes) do not
// see that, and the chaos phase's releases are too few and too noisy.
const (
	chainCount = 3 // chains per seed
	chainLen   = 4 // tasks per chain: chainLen-1 releases each
	// chainHeadDelay: each chain's head is due this long after its
	// submit, so that every child is submitted while its parent is
	// blocked or not yet run, and is released by a worker.
	chainHeadDelay = 20 * time.Second
	// chainSettle: the chains are submitted this long into the quiet
	// tail, once the chaos phase's leftovers (retries, snoozes, handlers
	// that outlive their timeout, a priority backlog) no longer hold the
	// fleet's handlers: a released task waiting behind them for a free
	// handler is load, not a lost announcement.
	chainSettle = 4 * time.Minute
	// chainAsleepWait is how long into the quiet tail, at most, the
	// producer of ChainsAsleep waits for the fleet to go to sleep (a
	// fleet of several members, or a dedicated one, never does); it then
	// submits anyway, leaving the rest of the quiet tail for the chains.
	chainAsleepWait = 6 * time.Minute
	// chainFleetPoll is how often that producer reads the fleet object.
	chainFleetPoll = 5 * time.Second
)

// The worker settings the simulator runs with (the defaults, worker/keys.go)
// that bound how soon a released task is claimed.
const (
	workerPollMax  = 5 * time.Second // poll_max: a member polls each of its shards at least this often
	workerBellPoll = 2 * time.Second // bell_poll: a sleeping member reads the doorbell this often
	// monitorRepairAfter (repair_after) is when the monitor announces an
	// unclaimed pending task again: the fallback promptBase must beat.
	monitorRepairAfter = time.Minute
)

// promptBase is how long after a worker's pass-on made a task pending, in
// the quiet tail, it may wait for its claim (InvPromptRelease). The
// releasing worker announces it in its own retry shard and polls that at
// once, or in a shard a live member polls at least every poll_max; a
// sleeping fleet is woken by the ring, read within bell_poll, and the woken
// member polls at once. Allow two poll intervals at their maximum (the
// announcement and a poll that raced it), a doorbell read, the quick
// handlers of the other chains' tasks the claimant may run first (each at
// most 2 s, chainCount of them), and the request latencies: 2×5 + 2 + 6 +
// 2 = 20 s. That is a third of the monitor's repair_after (1 minute), the
// earliest a task announced where nobody polls is found again.
//
// Under a rate limit of N starts per interval, the chains' tasks take turns
// at the starts as well: a released task may wait for the starts of the
// other chains' tasks, and for the window after (Plan.promptBound).
const promptBase = 2*workerPollMax + workerBellPoll + chainCount*2*time.Second + 2*time.Second

// promptBound is promptBase, plus, under a rate limit, the
// windows the chains' tasks take turns at: ceil(chainCount / N) of them,
// one more for the window the release lands in, and one for the windows'
// edges, where a worker claims nothing for min(lease_margin, interval/4)
// by its clock's bounds (seed 560091: 42.4 s at 1 per 5 s, against 40).
func (p Plan) promptBound() time.Duration {
	b := promptBase
	if l := p.RateLimit; l != nil {
		b += time.Duration((chainCount+l.N-1)/l.N+2) * l.Interval
	}
	return b
}

// planChains draws the quiet tail's chains: on half of the seeds without a
// burst (whose long tasks hold the fleet's handlers for 8 minutes), and on
// half of those the producer waits for the fleet to sleep first. It draws
// from a source of its own: the other choices of a seed stay as they were.
func planChains(plan *Plan) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0xc4a125))
	plan.Chains = !plan.Burst && rng.IntN(2) == 0
	plan.ChainsAsleep = plan.Chains && rng.IntN(2) == 0
}

// chains submits, chainSettle into the quiet tail (or once the fleet
// sleeps, on ChainsAsleep seeds), chainCount chains of chainLen quick tasks, each depending on the
// one before. Their ids fall in random shards, drain shards among them.
func (w *world) chains() {
	w.spawn("p", "pchain", func(ctx context.Context, p *proc) {
		prod, ok := retry(ctx, func() (*producer.Producer, error) {
			return producer.New(ctx, p.h, w.producerConfig(p))
		})
		if !ok {
			return
		}
		time.Sleep(time.Until(w.quietAt.Add(chainSettle)))
		if w.plan.ChainsAsleep {
			for ctx.Err() == nil && time.Now().Before(w.quietAt.Add(chainAsleepWait)) {
				if f, _, err := shards.ReadFleet(ctx, p.h); err == nil && f.Asleep {
					break
				}
				time.Sleep(chainFleetPoll)
			}
		}
		w.mu.Lock()
		w.chainsAt = time.Now()
		w.mu.Unlock()
		// The heads first, then each link of every chain, so that the
		// chains run side by side.
		prev := make([]string, chainCount)
		for k := range chainLen {
			for c := range chainCount {
				// High: ahead of any leftover of the chaos phase in a
				// listing.
				opts := producer.Options{MaxAttempts: 1, Timeout: 30 * time.Second, Priority: task.PriorityHigh}
				if k == 0 {
					opts.Delay = chainHeadDelay
				} else if prev[c] == "" {
					continue // its parent's submit failed: the chain ends there
				} else {
					opts.DependsOn = []string{prev[c]}
				}
				o := op{proc: p.name, kind: "submit", from: w.logLen()}
				o.id, o.err = prod.Submit(ctx, taskType, json.RawMessage(fmt.Sprintf(`{"chain":%d,"link":%d}`, c, k)), opts)
				o.to = w.logLen()
				w.record(o)
				prev[c] = ""
				if o.err == nil {
					prev[c] = o.id
					w.mu.Lock()
					w.acked[o.id] = ack{proc: p.name}
					w.mu.Unlock()
				}
			}
		}
	})
}

// Under a rate limit a released task waits its turn. A worker holds the
// due tasks of a limited type it has no token for, and claims them as
// windows open and slots free up oldest first by id (ids sort by due time;
// worker/ratelimit.go heldOrder), whatever their priority; its claims of
// held tasks come before it reads its inbox or its shards again
// (worker/worker.go step). So a dependent released while its claimant
// still holds a backlog of older tasks (the chaos phase's leftovers: with
// a handler or two and attempts that run to their timeout, they can
// outlast chainSettle) is claimed once that backlog is worked off, at the
// pace of its handlers and the limit: that is load, not a lost announcement (seed 540314: one worker of one
// slot under 1/2s, 45 older tasks held ahead of a child it released,
// which it claimed 3m48s later, 0.3 s after the last of them ended). Under
// a rate limit the clock of InvPromptRelease therefore starts again at
// each start and each end of an attempt, by the worker that claims the
// task, of a task of an older id. While that worker keeps working the
// tasks ahead, the released one is not passed over; once it stops, the
// released one is next within promptBound. A task passed over for newer
// work, or announced where its claimant does not look while it has
// nothing older to do (defect 35: it waits for the monitor's repair,
// 30-65 s), is still caught. Without a rate limit nothing holds tasks in
// id order: a worker's claims follow its listings' windows (priority,
// then age) and its inbox, and a released task that waits behind older
// tasks there is a bug of that order (a remembered refusal never read
// again in a one-handler pool, seed 20660 before 50acf60): the clock runs
// from the release.

// promptAhead notes, under a rate limit, for each task released and not
// claimed yet, a worker's start or end of an attempt of a task of an
// older id (the write e of t over prev, its last state).
func (w *world) promptAhead(waiting map[string]*taskState, prev, t *task.Task, e Entry, worker bool) {
	if w.plan.RateLimit == nil || !worker || prev == nil || len(waiting) == 0 ||
		!(prev.Status == task.Pending && t.Status == task.Running || prev.Status == task.Running && t.Status != task.Running) {
		return
	}
	for id, c := range waiting {
		if t.ID >= id {
			continue
		}
		if c.ahead == nil {
			c.ahead = make(map[string]time.Time)
		}
		c.ahead[e.Proc] = e.At
	}
}

// promptFrom is when the clock of InvPromptRelease started for st as
// claimed by proc ("": by any worker): its release, or the last start or
// end of a task ahead of it by that worker (promptAhead), whichever is
// later.
func promptFrom(st *taskState, proc string) time.Time {
	from := st.released
	for p, at := range st.ahead {
		if (proc == "" || p == proc) && at.After(from) {
			from = at
		}
	}
	return from
}

// promptRelease tracks, for InvPromptRelease, the write e of t over st's
// last state: a worker's pass-on that makes a dependent pending once the
// chains were submitted (the fleet settled, no faults) starts the clock,
// and the claim must come within Plan.promptBound of it, or of the
// claimant's last start or end of a task ahead of it (promptFrom; every
// worker runs the simulator's task type, so some live worker always
// handles it). It counts the releases it watches, and the longest wait
// (from the release).
func (w *world) promptRelease(waiting map[string]*taskState, st *taskState, t *task.Task, e Entry, worker bool, res *Result, add func(inv, id, format string, args ...any)) {
	prev := st.t
	switch {
	case prev != nil && prev.Status == task.Blocked && t.Status == task.Pending && len(t.Deps) > 0 && worker && !w.chainsAt.IsZero() && !e.At.Before(w.chainsAt):
		st.released, st.releasedBy, st.ahead = st.dueAt, e.Proc, nil
		waiting[t.ID] = st
		res.QuietReleases++
	case st.released.IsZero() || t.Status == task.Pending:
	default:
		if wait := e.At.Sub(st.released); t.Status == task.Running && wait > res.ReleaseWait {
			res.ReleaseWait = wait
		}
		if from := promptFrom(st, e.Proc); t.Status == task.Running && e.At.Sub(from) > w.plan.promptBound() {
			add(InvPromptRelease, t.ID, "%s released it at %s in the quiet tail, claimed only at %s by %s, %v later%s (bound %v)",
				st.releasedBy, st.released.Format("15:04:05.000"), e.At.Format("15:04:05.000"), e.Proc, e.At.Sub(st.released).Round(time.Millisecond),
				aheadNote(st.released, from, e.At), w.plan.promptBound())
		}
		st.released, st.ahead = time.Time{}, nil
		delete(waiting, t.ID)
	}
}

// promptReleaseEnd reports a task a worker released in the quiet tail that
// is still pending at the end, Plan.promptBound after its release and
// after any worker's last start or end of a task ahead of it.
func (w *world) promptReleaseEnd(id string, st *taskState, end time.Time, add func(inv, id, format string, args ...any)) {
	if from := promptFrom(st, ""); st.t != nil && st.t.Status == task.Pending && !st.released.IsZero() && end.Sub(from) > w.plan.promptBound() {
		add(InvPromptRelease, id, "%s released it at %s in the quiet tail, still pending at the end, %v later%s (bound %v)",
			st.releasedBy, st.released.Format("15:04:05.000"), end.Sub(st.released).Round(time.Second), aheadNote(st.released, from, end), w.plan.promptBound())
	}
}

// aheadNote says, when the clock started again after the release, how
// long before at the last start or end of a task ahead of it was.
func aheadNote(released, from, at time.Time) string {
	if !from.After(released) {
		return ""
	}
	return fmt.Sprintf(", %v after the last start or end of a task ahead of it", at.Sub(from).Round(time.Millisecond))
}
