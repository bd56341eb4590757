package task

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Outcome is how an attempt ended, as the worker that ran it saw it: what
// Settle records. The first of these that applies decides:
//
//   - Release: the task is handed back unfinished (given back from the
//     worker's queue, a drop, a renewal that found a cancel request),
//     whatever its handler did;
//   - ShutDown and Err: the worker shut down while the handler ran, and it
//     returned an error: handed back too;
//   - Err and TimedOut or PastDeadline: the handler's time ran out;
//   - no Err and StoreErr: the result could not be stored apart;
//   - no Err: the handler succeeded;
//   - Snooze: the handler asked to run later;
//   - Err: the attempt failed.
type Outcome struct {
	// ClaimID is the claim the attempt ran under: every transition is
	// fenced on it.
	ClaimID string
	// Attempt is the task's attempt under the claim.
	Attempt int
	// Release, when set, is the reason the task is handed back.
	Release string
	// MissedDeadline, with Release: the task's deadline passed while it
	// waited in the worker's queue, so it ends dead unstarted.
	MissedDeadline bool
	// ShutDown: the worker was shutting down when the handler returned.
	ShutDown bool
	// Err is the handler's error; nil for a success.
	Err error
	// Permanent: Err is not worth retrying (dead at once).
	Permanent bool
	// TimedOut: the handler's context ended at the attempt's timeout;
	// PastDeadline: at the task's deadline.
	TimedOut, PastDeadline bool
	// Result is a success's result, inline; ResultRef the reference to a
	// result stored apart. ResultErr is why the result was refused before
	// the commit (ErrInvalid: the attempt ends dead); StoreErr why it could
	// not be stored apart (a failed attempt, retried).
	Result    json.RawMessage
	ResultRef *ResultRef
	ResultErr error
	StoreErr  error
	// Snooze, set when Err asks for the task to run again later.
	Snooze *Snooze
}

// Snooze is a handler's request to run the task again later without using
// up an attempt.
type Snooze struct {
	// Delay is the wait the handler named, unless Backoff: then the
	// task's own (SnoozeDelay).
	Delay   time.Duration
	Backoff bool
	// Reason is what the history records, given the delay; nil means
	// Err's text.
	Reason func(delay time.Duration) string
}

// Settlement is what Settle recorded.
type Settlement struct {
	// Kind names it as the worker's events do: succeeded, failed (to run
	// again), dead, canceled, snoozed or released.
	Kind string
	// Backoff: a snooze took the task's own delay (Snooze.Backoff), Delay.
	Backoff bool
	Delay   time.Duration
}

// Settle applies the transition that records o to t, the task as last read,
// at now (the latest the S3 clock can be). rnd draws the jitter of a retry
// or a snooze's backoff; a caller that settles again after a lost race
// passes a source that draws the same, so the decision does not change.
// Errors are the transitions': ErrClaimMismatch or ErrNotRunning when the
// claim no longer holds the task (the outcome is dropped), ErrInvalid for
// a negative snooze delay.
func (t *Task) Settle(o Outcome, now time.Time, rnd func() float64) (Settlement, error) {
	switch {
	case o.Release != "":
		if err := t.Release(o.ClaimID, o.Release, now); err != nil {
			return Settlement{}, err
		}
		if o.MissedDeadline && t.Status == Pending {
			if err := t.MissDeadline(now); err != nil {
				return Settlement{}, err
			}
		}
		kind := t.failedKind(true)
		if kind == "snoozed" {
			kind = "released"
		}
		return Settlement{Kind: kind}, nil
	case o.ShutDown && o.Err != nil:
		// Named released even when a cancel request made it canceled.
		return Settlement{Kind: "released"}, t.Release(o.ClaimID, "worker shut down", now)
	case o.Err != nil && (o.TimedOut || o.PastDeadline):
		// The handler's time ran out and it returned an error: the
		// attempt timed out (retried by the policy), or the deadline
		// stopped it (dead: a retry would start after it).
		detail := o.Err.Error()
		if detail == context.DeadlineExceeded.Error() {
			detail = "" // the context's own error says nothing more
		}
		if o.PastDeadline {
			if err := t.FailPastDeadline(o.ClaimID, detail, now); err != nil {
				return Settlement{}, err
			}
			return Settlement{Kind: t.failedKind(false)}, nil
		}
		msg := "timed out after " + t.Timeout.D().String()
		if detail != "" {
			msg += ": " + detail
		}
		return t.settleFailed(o.ClaimID, msg, o.Permanent, now, rnd)
	case o.Err == nil && o.StoreErr != nil:
		// The result object could not be written: a failed attempt,
		// retried as any other.
		return t.settleFailed(o.ClaimID, o.StoreErr.Error(), false, now, rnd)
	case o.Err == nil:
		err := o.ResultErr
		switch {
		case err != nil:
		case o.ResultRef != nil:
			err = t.SucceedRef(o.ClaimID, *o.ResultRef, now)
		default:
			err = t.Succeed(o.ClaimID, o.Result, now)
		}
		if err == nil {
			return Settlement{Kind: "succeeded"}, nil
		}
		if !errors.Is(err, ErrInvalid) {
			return Settlement{}, err
		}
		// The result cannot be stored (too large, not JSON): a
		// permanent failure, recorded now rather than left to expire.
		// Named dead even when a cancel request made it canceled.
		if err := t.Fail(o.ClaimID, "handler result refused: "+err.Error(), true, now, rnd); err != nil {
			return Settlement{}, err
		}
		return Settlement{Kind: "dead"}, nil
	case o.Snooze != nil:
		s := Settlement{}
		delay, reason := o.Snooze.Delay, ""
		if o.Snooze.Backoff {
			delay = t.SnoozeDelay(rnd)
			s.Backoff, s.Delay = true, delay
		}
		if o.Snooze.Reason != nil {
			reason = o.Snooze.Reason(delay)
		} else {
			reason = o.Err.Error()
		}
		if err := t.Snooze(o.ClaimID, delay, reason, now); err != nil {
			return Settlement{}, err
		}
		// Past MaxSnoozes a snooze is a failed attempt, and a cancel
		// requested meanwhile wins.
		s.Kind = t.failedKind(t.Attempt != o.Attempt)
		return s, nil
	}
	return t.settleFailed(o.ClaimID, o.Err.Error(), o.Permanent, now, rnd)
}

func (t *Task) settleFailed(claimID, msg string, permanent bool, now time.Time, rnd func() float64) (Settlement, error) {
	if err := t.Fail(claimID, msg, permanent, now, rnd); err != nil {
		return Settlement{}, err
	}
	return Settlement{Kind: t.failedKind(false)}, nil
}

// failedKind names an attempt that did not succeed by the status its
// transition left: dead, canceled (a cancel requested meanwhile wins),
// snoozed (back to pending without using an attempt), or failed.
func (t *Task) failedKind(snoozed bool) string {
	switch {
	case t.Status == Dead:
		return "dead"
	case t.Status == Canceled:
		return "canceled"
	case t.Status == Pending && snoozed:
		return "snoozed"
	}
	return "failed"
}
