package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/ratelimit"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Rate limits (docs/scheduling.md#rate-limits): at most N starts of a task
// type per fixed window of S3 time, fleet-wide. A start is a claim: the
// conditional PUT that makes the task running under a new claim id, sent
// while the window is open by this worker's S3 clock.
//
//   - Tokens. Before it claims a batch holding tasks of a limited type
//     (their type is known once they are read), the worker reserves as
//     many starts as the batch has such tasks, less those it still holds,
//     by one read and one CAS of the type's counter
//     (internal/ratelimit.Reserve). It reserves only in a window it is
//     certain has begun (its clock's Earliest), and uses a token only for
//     a claim sent before the window's end less the margin (its clock's
//     Latest): a claim never lands in another window on this window's
//     tokens. Tokens it cannot use (a lost race for the task, the window
//     closing first, a crash) are wasted: the limit may be under-used,
//     never exceeded.
//   - Waiting. A task of the type found while the worker holds no token
//     is not claimed and not failed: it stays pending, is settled in its
//     scan (so it neither pins the cursor nor hides the other types behind
//     it) and remembered, as a paused task is (up to maxHeld). When the
//     window the counter said was full has ended, the worker reserves
//     again and claims its held tasks, oldest first, reading each again
//     (one GET) before its claim. No request is made for a waiting task
//     while its window stays full.
//   - A held task the worker could not remember (beyond maxHeld, or the
//     worker stopped or crashed) is found again by the next owner of its
//     shard whose scan starts before it, or by the monitor's repair of
//     pending tasks (after repair_after), as a paused task is.

// RateLimit is at most N starts per Interval (Config.RateLimits).
type RateLimit struct {
	N        int
	Interval time.Duration
}

// String formats l as ParseRateLimit reads it ("100/1m0s").
func (l RateLimit) String() string { return ratelimit.Limit(l).String() }

// Check reports a limit that cannot be kept.
func (l RateLimit) Check() error { return ratelimit.Limit(l).Check() }

// ParseRateLimit reads a rate limit written "N/INTERVAL": "100/1m",
// "5/s", "3/2s". N is at least 1 and INTERVAL at least one second.
func ParseRateLimit(s string) (RateLimit, error) {
	l, err := ratelimit.Parse(s)
	return RateLimit(l), err
}

// CheckRateLimits reports the first invalid entry of limits, by type.
func CheckRateLimits(limits map[string]RateLimit) error {
	for _, typ := range slices.Sorted(maps.Keys(limits)) {
		if err := task.ValidType(typ); err != nil {
			return fmt.Errorf("rate limit of %q: %w", typ, err)
		}
		if err := limits[typ].Check(); err != nil {
			return fmt.Errorf("rate limit of %s: %w", typ, err)
		}
	}
	return nil
}

// limiter is the worker's side of one type's limit. Only the scheduler
// touches it.
type limiter struct {
	typ   string
	limit RateLimit
	// tokens are starts reserved in the window [window, end) not used yet.
	tokens      int
	window, end time.Time
	// openAt is the S3 time before which a reservation cannot succeed
	// (the end of a window the counter said was full, or the start of a
	// window another worker has certainly reached): no request before.
	openAt time.Time
	// retryAt is the local time before which no reservation is tried
	// after one failed.
	retryAt time.Time
	held    map[string]heldTask // task key -> task waiting for a token
	taking  map[string]bool     // held tasks being claimed by claimHeld (held again without a second event)
	warned  string              // the other limit last warned about
	bad     bool                // a malformed counter was reported
}

// newLimiters sets up the limiters of the configured limits.
func (w *Worker) newLimiters() {
	if len(w.cfg.RateLimits) == 0 {
		return
	}
	w.limits = make(map[string]*limiter, len(w.cfg.RateLimits))
	for typ, l := range w.cfg.RateLimits {
		w.limits[typ] = &limiter{typ: typ, limit: l, held: make(map[string]heldTask)}
	}
}

// warnUnhandledLimits logs a warning, when Run starts, for each rate
// limited type this worker has no handler for: most likely a typo in
// --rate-limit or Config.RateLimits. Not an error: a Go program may
// register the type's handler later (Handle while the worker runs), and
// the limit applies from then.
func (w *Worker) warnUnhandledLimits() {
	for _, typ := range slices.Sorted(maps.Keys(w.cfg.RateLimits)) {
		if w.handler(typ) == nil {
			w.log.Warn("rate limit for a type this worker does not run (no handler registered yet); it applies once one is", "type", typ, "limit", w.cfg.RateLimits[typ].String())
		}
	}
}

// rateLimited reports whether typ has a rate limit. Safe from any
// goroutine: the configuration does not change.
func (w *Worker) rateLimited(typ string) bool {
	_, ok := w.cfg.RateLimits[typ]
	return ok
}

// margin is how long before a window's end the worker stops sending
// claims on its tokens: the lease margin, but no more than a quarter of
// the interval, so that short windows keep most of their length.
func (l *limiter) margin(leaseMargin time.Duration) time.Duration {
	return min(leaseMargin, l.limit.Interval/4)
}

// open reports whether a claim sent now, by iv, lands in the window the
// tokens were reserved in.
func (l *limiter) open(iv clock.Interval, margin time.Duration) bool {
	return !iv.Earliest.Before(l.window) && iv.Latest.Before(l.end.Add(-margin))
}

// expire drops the tokens of a window that has closed for this worker.
func (l *limiter) expire(iv clock.Interval, margin time.Duration) {
	if l.tokens > 0 && !l.open(iv, margin) {
		l.tokens = 0
	}
}

// reserveFor reserves the tokens the loaded attempts as need: one read and
// one CAS of the counter per limited type among them that lacks tokens.
func (w *Worker) reserveFor(ctx context.Context, as []attempt, iv clock.Interval) {
	if len(w.limits) == 0 {
		return
	}
	need := make(map[string]int)
	for i := range as {
		a := &as[i]
		if a.loadErr != nil {
			continue
		}
		t := a.v.Task
		if w.limits[t.Type] == nil || t.Status != task.Pending || !dueNow(t, iv) || w.handler(t.Type) == nil || w.pausedType(t.Type) ||
			t.DeadlinePassed(iv.Earliest) { // ended dead unstarted (tryClaim): no start, no token
			continue
		}
		need[t.Type]++
	}
	if len(need) == 0 {
		return
	}
	now, err := w.clock.Now(ctx)
	if err != nil {
		for typ := range need {
			w.limits[typ].tokens = 0 // no clock, no claim on a token
		}
		return
	}
	w.rateAt = now
	for _, typ := range slices.Sorted(maps.Keys(need)) {
		l := w.limits[typ]
		l.expire(now, l.margin(w.cfg.LeaseMargin))
		if n := need[typ] - l.tokens; n > 0 {
			w.reserve(ctx, l, n, now)
		}
	}
}

// reserve reserves up to n tokens of l in the window iv is certainly in,
// unless the counter is known to grant none before openAt.
func (w *Worker) reserve(ctx context.Context, l *limiter, n int, iv clock.Interval) {
	margin := l.margin(w.cfg.LeaseMargin)
	start, end := ratelimit.Window(iv.Earliest, l.limit.Interval)
	switch {
	case iv.Earliest.Before(l.openAt), w.now().Before(l.retryAt):
		return
	case !iv.Latest.Before(end.Add(-margin)):
		// Too close to the window's end to claim on its tokens: wait for
		// the next one.
		l.openAt = end
		return
	}
	g, err := ratelimit.Reserve(ctx, w.st, w.fleetCAS(), l.typ, ratelimit.Limit(l.limit), start, n, w.cfg.ID)
	if err != nil {
		w.log.Warn("reserve rate limited starts; will try again", "type", l.typ, "err", err)
		l.retryAt = w.now().Add(w.cfg.PollMin)
		return
	}
	if g.Malformed && !l.bad {
		l.bad = true
		w.stats.corrupt.Add(1)
		w.log.Error("replaced a malformed rate limit counter; its window counts as full", "type", l.typ, "key", ratelimit.Key(l.typ))
		w.emit(Event{Kind: "corrupt", Shard: -1, Type: l.typ, Key: ratelimit.Key(l.typ)})
	}
	if other := g.Counter.Limit; other != "" && other != l.limit.String() && other != l.warned {
		l.warned = other
		w.log.Warn("another worker enforces a different rate limit for this type; every worker should configure the same",
			"type", l.typ, "limit", l.limit.String(), "other_limit", other, "other_worker", g.Counter.UpdatedBy)
	}
	switch {
	case g.Ahead:
		l.openAt = g.Counter.Window
		return
	case g.Full:
		l.openAt = g.End
	}
	if !l.window.Equal(g.Window) {
		l.tokens = 0
	}
	l.window, l.end = g.Window, g.End
	l.tokens += g.Tokens
}

// takeToken reports whether a task of l's type may be claimed now, and
// uses one of its tokens if so.
func (l *limiter) takeToken() bool {
	if l.tokens == 0 {
		return false
	}
	l.tokens--
	return true
}

// holdLimited keeps a due task of a rate-limited type for the next window.
// It reports false when the task was not remembered (a direct-dispatch
// entry that could not be handed back, or no room): it stays unsettled,
// and a later listing returns it.
func (w *Worker) holdLimited(ctx context.Context, c shards.Candidate, t *task.Task, iv clock.Interval, l *limiter) bool {
	if _, ok := l.held[t.Key()]; !ok && !l.taking[t.Key()] {
		if len(l.held) >= maxHeld {
			return false
		}
		w.emit(Event{Kind: "rate_limited", TaskID: t.ID, Shard: t.Shard, Type: t.Type, Attempt: t.Attempt})
	}
	if c.Inbox && !w.forward(ctx, t, iv) {
		if err := shards.Announce(ctx, w.st, t, iv.Latest, -1); err != nil {
			w.log.Warn("hand a rate limited task's inbox entry back to a shard", "task_id", t.ID, "err", err)
			return false
		}
	}
	l.held[t.Key()] = heldOf(t)
	return true
}

// holdingLimited reports whether tasks wait for a rate limit's window:
// the worker is not idle while they do.
func (w *Worker) holdingLimited() bool {
	for _, l := range w.limits {
		if len(l.held) > 0 {
			return true
		}
	}
	return false
}

// heldSettler is the settler of a batch of held tasks: it records which
// ones no longer need holding.
type heldSettler map[string]bool

func (s heldSettler) Seen(c shards.Candidate, _ string)           { s[c.Key] = true }
func (s heldSettler) Failed(c shards.Candidate, _ time.Time) bool { return false }

// claimHeld claims the held tasks of limited types whose window may have
// opened, oldest first, while slots are free. It returns how long until a
// window of a type with held tasks may open (by the local clock), or
// forever, and how many it claimed.
func (w *Worker) claimHeld(ctx context.Context) (wait time.Duration, claimed int) {
	wait = forever
	if !w.holdingLimited() || w.stopping.Load() || w.pausedAll() {
		return wait, 0
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return w.cfg.PollMin, 0
	}
	for _, typ := range slices.Sorted(maps.Keys(w.limits)) {
		l := w.limits[typ]
		if len(l.held) == 0 || w.pausedType(typ) {
			continue
		}
		if iv.Earliest.Before(l.openAt) {
			wait = min(wait, l.openAt.Sub(iv.Earliest))
			continue
		}
		if d := clock.Until(w.local, l.retryAt); d > 0 {
			wait = min(wait, d)
			continue
		}
		for len(l.held) > 0 && w.free() > 0 && !iv.Earliest.Before(l.openAt) && !w.now().Before(l.retryAt) {
			// Reserve first, so that a window with fewer starts left than
			// held tasks costs the reads of those it can start only.
			want := min(len(l.held), w.free(), maxClaimBatch)
			l.expire(iv, l.margin(w.cfg.LeaseMargin))
			if l.tokens < want {
				w.reserve(ctx, l, want-l.tokens, iv)
			}
			if l.tokens == 0 {
				break
			}
			keys := slices.SortedFunc(maps.Keys(l.held), heldOrder)
			keys = keys[:min(want, l.tokens)]
			batch := make([]shards.Candidate, 0, len(keys))
			taken := make(map[string]heldTask, len(keys))
			for _, k := range keys {
				_, id, err := task.ParseKey(k)
				if err != nil {
					delete(l.held, k)
					continue
				}
				batch = append(batch, shards.Candidate{Key: k, ID: id, Shard: -1})
				taken[k] = l.held[k]
				delete(l.held, k)
			}
			s := heldSettler{}
			l.taking = make(map[string]bool, len(taken))
			for k := range taken {
				l.taking[k] = true
			}
			n := w.claimBatch(ctx, s, batch, iv, nil)
			l.taking = nil
			claimed += n
			for k, h := range taken {
				if _, again := l.held[k]; !again && !s[k] {
					l.held[k] = h // neither settled nor held again: keep it
				}
			}
			if n == 0 {
				break
			}
			if iv, err = w.clock.Now(ctx); err != nil {
				return w.cfg.PollMin, claimed
			}
		}
		if len(l.held) > 0 && iv.Earliest.Before(l.openAt) {
			wait = min(wait, l.openAt.Sub(iv.Earliest))
		}
		if d := clock.Until(w.local, l.retryAt); len(l.held) > 0 && d > 0 {
			wait = min(wait, d)
		}
	}
	return wait, claimed
}

// heldOrder orders held task keys by task id (ids sort by due time), then
// by key.
func heldOrder(a, b string) int {
	_, ia, _ := task.ParseKey(a)
	_, ib, _ := task.ParseKey(b)
	if ia != ib {
		if ia < ib {
			return -1
		}
		return 1
	}
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// forever is a wait with nothing to wait for.
const forever = time.Duration(1<<63 - 1)

// inWindow returns the claims that may still be sent: a claim on a rate
// limit's token only while the window the token belongs to is open by the
// clock now (the loads, the reservation and any eviction took time). A
// claim whose window closed is undone and its task held for the next.
func (w *Worker) inWindow(ctx context.Context, s settler, claiming []*attempt) []*attempt {
	if len(w.limits) == 0 {
		return claiming
	}
	var iv clock.Interval
	var err error
	checked := false
	out := claiming[:0]
	for _, a := range claiming {
		l := a.limiter
		if l == nil {
			out = append(out, a)
			continue
		}
		if !checked {
			iv, err = w.clock.Now(ctx)
			checked = true
		}
		if err == nil && l.open(iv, l.margin(w.cfg.LeaseMargin)) {
			out = append(out, a)
			continue
		}
		l.tokens = 0
		a.claiming, a.limiter = false, nil
		a.pool.unadmit(a.adm)
		// tryClaim marked the task claimed in memory: back to what the
		// object still says.
		*a.v.Task = a.unclaimed
		if err == nil && w.holdLimited(ctx, a.c, a.v.Task, iv, l) {
			a.settledAt = a.v.ETag
		}
	}
	return out
}
