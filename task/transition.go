package task

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Transitions. Each method mutates the receiver only on success; on error the
// task is unchanged and the caller must not write it. Every success bumps
// Version and sets UpdatedAt, and all but Renew append to History. Callers
// pass now from S3 time and write the result back with If-Match on the ETag
// they read.

// Due reports whether the task is pending and available at now.
func (t *Task) Due(now time.Time) bool {
	return t.Status == Pending && !t.AvailableAt.After(now)
}

// DeadlinePassed reports whether the task has a deadline and earliest is
// after it. Callers pass the earliest S3 time the clock allows
// (clock.Interval.Earliest), so that a task is never declared late before
// its deadline has certainly passed.
func (t *Task) DeadlinePassed(earliest time.Time) bool {
	return !t.Deadline.IsZero() && earliest.After(t.Deadline)
}

// MissDeadline ends a pending task whose deadline has passed without
// starting it: → dead, with the last error "deadline passed at ..., not
// started". The caller checks DeadlinePassed with the earliest S3 time;
// now is when the write is stamped. Errors: ErrNotPending (also
// ErrTerminal for a finished task), ErrNotDue when the task has no
// deadline or now is not after it.
func (t *Task) MissDeadline(now time.Time) error {
	if t.Status != Pending {
		return t.statusErr("end task past its deadline", ErrNotPending)
	}
	if !t.DeadlinePassed(now) {
		return fmt.Errorf("end task %s past its deadline: %w: deadline %q, now %s", t.ID, ErrNotDue,
			t.deadlineText(), now.UTC().Format(time.RFC3339))
	}
	now = now.UTC()
	t.Status = Dead
	t.LastError = "deadline passed at " + t.deadlineText() + ", not started"
	t.commit(now, &Transition{From: Pending, To: Dead, Reason: t.LastError, Attempt: t.Attempt})
	return nil
}

// deadlineText is the task's deadline as RFC 3339, "" when it has none.
func (t *Task) deadlineText() string {
	if t.Deadline.IsZero() {
		return ""
	}
	return t.Deadline.UTC().Format(time.RFC3339Nano)
}

// ClaimExpired reports whether the task is running and now is past its
// claim's expiry. The caller applies clock margins (invariant 4) by shifting
// now. A running task without a claim counts as expired so it can be
// recovered.
func (t *Task) ClaimExpired(now time.Time) bool {
	if t.Status != Running {
		return false
	}
	return t.Claim == nil || now.After(t.Claim.ExpiresAt)
}

// ClaimBy starts an attempt: pending → running under a new claim that expires
// Timeout after now. claimID must be unique per claim; it fences every
// later outcome. Errors: ErrNotPending (also ErrTerminal for a finished
// task), ErrNotDue, ErrInvalid for an empty worker or claim id.
//
// (The method is not called Claim because Task has a field of that name.)
func (t *Task) ClaimBy(worker, claimID string, now time.Time) error {
	if t.Status != Pending {
		return t.statusErr("claim", ErrNotPending)
	}
	if !t.Due(now) {
		return fmt.Errorf("claim task %s: %w: available at %s, now %s", t.ID, ErrNotDue,
			t.AvailableAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if worker == "" || claimID == "" {
		return fmt.Errorf("claim task %s: %w: worker and claim id must be set", t.ID, ErrInvalid)
	}
	now = now.UTC()
	t.Attempt++
	t.Claim = &Claim{Worker: worker, ID: claimID, ExpiresAt: now.Add(t.Timeout.D())}
	t.CancelRequested = false // a pending task never carries one; keep the state canonical
	t.Status = Running
	t.commit(now, &Transition{From: Pending, To: Running, Worker: worker, Reason: "claimed", Attempt: t.Attempt})
	return nil
}

// Renew extends the lease of the claim claimID to now+Timeout. It appends no
// history (renewals would flood it) but still bumps Version. A claim that is
// past ExpiresAt may still renew as long as nobody has expired it: the
// task object, not the clock, decides who holds it.
func (t *Task) Renew(claimID string, now time.Time) error {
	if err := t.fence("renew", claimID); err != nil {
		return err
	}
	now = now.UTC()
	t.Claim.ExpiresAt = now.Add(t.Timeout.D())
	t.commit(now, nil)
	return nil
}

// Succeed records the outcome of the attempt under claimID: → succeeded
// with result (any JSON up to MaxResultBytes; empty means none). A cancel
// requested meanwhile does not change the outcome: the work was done.
func (t *Task) Succeed(claimID string, result json.RawMessage, now time.Time) error {
	if err := t.fence("complete", claimID); err != nil {
		return err
	}
	res, err := normaliseJSON(result, MaxResultBytes)
	if err != nil {
		return fmt.Errorf("complete task %s: %w: result %v", t.ID, ErrInvalid, err)
	}
	worker := t.Claim.Worker
	t.Status = Succeeded
	t.Result = res
	t.Claim = nil
	t.CancelRequested = false
	t.commit(now, &Transition{From: Running, To: Succeeded, Worker: worker, Reason: "succeeded", Attempt: t.Attempt})
	return nil
}

// Fail records a failed attempt under claimID. The task goes
//   - to canceled if a cancel was requested,
//   - to dead if permanent or the attempts are used up,
//   - else back to pending, available after Retry.Delay(Attempt) (jittered
//     with rnd, values in [0,1); nil means no jitter).
//
// LastError is errMsg truncated to MaxErrorBytes.
func (t *Task) Fail(claimID, errMsg string, permanent bool, now time.Time, rnd func() float64) error {
	if err := t.fence("fail", claimID); err != nil {
		return err
	}
	how := failedRetry
	if permanent {
		how = failedForGood
	}
	t.settleFailure(errMsg, how, now, rnd)
	return nil
}

// FailPastDeadline ends the running attempt under claimID that its task's
// deadline stopped (the handler's context ended at the deadline and the
// handler returned an error): → dead, whatever attempts are left, since a
// retry would start after the deadline. The last error is "deadline passed
// at T while running", then ": " and errMsg when the handler said more. A
// cancel requested meanwhile wins (canceled). Errors: those of Fail, and
// ErrNotDue for a task without a deadline.
func (t *Task) FailPastDeadline(claimID, errMsg string, now time.Time) error {
	if err := t.fence("fail past deadline", claimID); err != nil {
		return err
	}
	if t.Deadline.IsZero() {
		return fmt.Errorf("fail task %s past its deadline: %w: it has none", t.ID, ErrNotDue)
	}
	msg := "deadline passed at " + t.deadlineText() + " while running"
	if errMsg != "" {
		msg += ": " + errMsg
	}
	t.settleFailure(msg, failedAtDeadline, now, nil)
	return nil
}

// Snooze hands the attempt under claimID back without counting it (a handler
// asked to retry later, exit code 75): → pending at now+delay, Attempt
// decremented, Snoozes incremented. Past MaxSnoozes a snooze counts as a
// failed attempt instead: the attempt is kept, and the task goes to dead
// once its attempts are used up (else pending at now+delay). If a cancel
// was requested the task goes to canceled instead. delay must not be
// negative.
func (t *Task) Snooze(claimID string, delay time.Duration, reason string, now time.Time) error {
	return t.handBack("snooze", claimID, delay, "snoozed", reason, true, now)
}

// SnoozeDelay is how long the task's next snooze waits when its handler
// names no delay (the CLI's exit 75, worker.RetryLater): its retry
// policy's delay for that snooze's number, Snoozes+1, so snoozes back off
// as failed attempts do (1s, 2s, 4s ... up to 5m under the default
// policy), less up to the policy's jitter drawn from rnd (nil: none).
func (t *Task) SnoozeDelay(rnd func() float64) time.Duration {
	return t.Retry.withDefaults().Delay(t.Snoozes+1, rnd)
}

// Release hands the attempt under claimID back because the worker is
// shutting down: → pending now, Attempt decremented. It is not the
// handler's doing, so it never counts against MaxSnoozes. If a cancel was
// requested the task goes to canceled instead.
func (t *Task) Release(claimID, reason string, now time.Time) error {
	return t.handBack("release", claimID, 0, "released", reason, false, now)
}

func (t *Task) handBack(op, claimID string, delay time.Duration, what, reason string, counted bool, now time.Time) error {
	if err := t.fence(op, claimID); err != nil {
		return err
	}
	if delay < 0 {
		return fmt.Errorf("%s task %s: %w: negative delay %s", op, t.ID, ErrInvalid, delay)
	}
	now = now.UTC()
	r := what
	if reason != "" {
		r += ": " + reason
	}
	if t.CancelRequested {
		worker, attempt := t.Claim.Worker, t.Attempt
		t.Claim = nil
		if !counted {
			// A release: the handler may not have started (a run
			// given back from the worker's queue).
			t.Attempt = max(t.Attempt-1, 0)
		} // a snooze's handler ran, and the task ends: it counts
		t.CancelRequested = false
		t.Status = Canceled
		t.commit(now, &Transition{From: Running, To: Canceled, Worker: worker, Reason: "canceled instead of " + r, Attempt: attempt})
		return nil
	}
	if counted {
		t.Snoozes++
		if t.Snoozes > MaxSnoozes {
			// The handler keeps asking for later: this attempt counts.
			msg := fmt.Sprintf("snoozed more than %d times", MaxSnoozes)
			if reason != "" {
				msg += ": " + reason
			}
			t.settleFailure(msg, failedRetry, now, nil)
			if t.Status == Pending {
				t.AvailableAt = now.Add(delay)
			}
			return nil
		}
	}
	worker, attempt := t.Claim.Worker, t.Attempt
	t.Claim = nil
	t.Attempt = max(t.Attempt-1, 0)
	t.Status = Pending
	t.AvailableAt = now.Add(delay)
	t.commit(now, &Transition{From: Running, To: Pending, Worker: worker, Reason: r, Attempt: attempt})
	return nil
}

// Expire takes the task back from a claim whose lease ran out (the monitor or
// another worker found now past Claim.ExpiresAt; the caller applied the
// clock margin by shifting now). It counts as a failed, non-permanent
// attempt with the error "lease expired", so it obeys Fail's rules.
// Errors: ErrNotRunning (also ErrTerminal for a finished task),
// ErrNotExpired.
func (t *Task) Expire(now time.Time, rnd func() float64) error {
	if t.Status != Running {
		return t.statusErr("expire", ErrNotRunning)
	}
	if !t.ClaimExpired(now) {
		return fmt.Errorf("expire task %s: %w: lease of claim %s expires at %s, now %s", t.ID, ErrNotExpired,
			t.Claim.ID, t.Claim.ExpiresAt.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	t.settleFailure("lease expired", failedRetry, now, rnd)
	return nil
}

// Cancel asks for the task to be canceled.
//   - pending: → canceled at once; requested is false.
//   - running: CancelRequested is set and the task stays running until its
//     worker's handler returns; requested is true. The worker cancels the
//     handler's context when it sees the request, and whatever outcome it
//     then commits (Fail, Snooze, Release, Expire) ends the task canceled;
//     a success still succeeds.
//     The change is a write (Version bump, a "cancel requested" history
//     entry from running to running).
//   - running with the cancel already requested: (true,
//     ErrCancelAlreadyRequested) and nothing changes; treat it as success
//     but do not write.
//   - terminal: ErrTerminal.
func (t *Task) Cancel(now time.Time) (requested bool, err error) {
	switch {
	case t.Retired:
		return false, t.retiredErr("cancel")
	case t.Status == Pending || t.Status == Blocked:
		from := t.Status
		t.Status = Canceled
		t.Attempt = max(t.Attempt, t.snoozedBack())
		t.commit(now, &Transition{From: from, To: Canceled, Reason: "canceled", Attempt: t.Attempt})
		return false, nil
	case t.Status == Running && t.CancelRequested:
		return true, fmt.Errorf("cancel task %s: %w", t.ID, ErrCancelAlreadyRequested)
	case t.Status == Running:
		t.CancelRequested = true
		worker := ""
		if t.Claim != nil {
			worker = t.Claim.Worker
		}
		t.commit(now, &Transition{From: Running, To: Running, Worker: worker, Reason: "cancel requested", Attempt: t.Attempt})
		return true, nil
	default:
		return false, t.statusErr("cancel", ErrTerminal)
	}
}

// snoozedBack returns the attempt the task's last run gave back by a
// snooze (running → pending, the attempt not counted), or 0 when its last
// run did not. That attempt's handler ran: a task canceled before it runs
// again counts it.
func (t *Task) snoozedBack() int {
	for i := len(t.History) - 1; i >= 0; i-- {
		if h := t.History[i]; h.From == Running && h.To != Running {
			if h.To == Pending && h.Attempt > t.Attempt && strings.HasPrefix(h.Reason, "snoozed") {
				return h.Attempt
			}
			return 0
		}
	}
	return 0
}

// Requeue gives a dead or canceled task a fresh start: → pending now with
// Attempt 0 and Snoozes 0. LastError is kept for the record. Errors: ErrNotRequeueable,
// ErrRetired.
func (t *Task) Requeue(now time.Time) error {
	if t.Retired {
		return t.retiredErr("requeue")
	}
	if t.Status != Dead && t.Status != Canceled {
		return fmt.Errorf("requeue task %s: %w (status %s)", t.ID, ErrNotRequeueable, t.Status)
	}
	from := t.Status
	now = now.UTC()
	t.Status = Pending
	t.Attempt = 0
	t.Snoozes = 0
	t.AvailableAt = now
	t.Claim = nil
	t.CancelRequested = false
	t.Result = nil
	t.commit(now, &Transition{From: from, To: Pending, Reason: "requeued"})
	return nil
}

// RequeueWaiting is Requeue for a task of a slot that must wait behind the
// slot's holder: → blocked instead of pending.
func (t *Task) RequeueWaiting(now time.Time) error {
	if t.Slot == "" {
		return fmt.Errorf("requeue task %s: %w: no slot to wait for", t.ID, ErrInvalid)
	}
	if err := t.Requeue(now); err != nil {
		return err
	}
	t.Status = Blocked
	t.History[len(t.History)-1].To = Blocked
	return nil
}

// Retire marks a finished task as expired by retention, the tombstone
// written before an unconditional DELETE on servers that ignore a
// conditional one: the status stays, a "retention" entry is appended, and
// no transition applies to the task afterwards, so deleting it can never
// delete a live task. Errors: ErrNotFinished, ErrRetired.
func (t *Task) Retire(now time.Time) error {
	switch {
	case t.Retired:
		return t.retiredErr("retire")
	case !t.Status.Terminal():
		return fmt.Errorf("retire task %s: %w: status %s", t.ID, ErrNotFinished, t.Status)
	}
	t.Retired = true
	t.commit(now, &Transition{From: t.Status, To: t.Status, Reason: "retention", Attempt: t.Attempt})
	return nil
}

func (t *Task) retiredErr(op string) error {
	return fmt.Errorf("%s task %s: %w", op, t.ID, ErrRetired)
}

// failure is how settleFailure ends a failed attempt.
type failure int

const (
	failedRetry      failure = iota // retried if attempts and the deadline allow
	failedForGood                   // a permanent error: dead
	failedAtDeadline                // stopped by the task's deadline: dead
)

// settleFailure ends a running attempt that failed (Fail, Expire,
// FailPastDeadline).
func (t *Task) settleFailure(errMsg string, how failure, now time.Time, rnd func() float64) {
	now = now.UTC()
	worker := ""
	if t.Claim != nil {
		worker = t.Claim.Worker
	}
	tr := Transition{From: Running, Worker: worker, Attempt: t.Attempt}
	t.Claim = nil
	t.LastError = truncateUTF8(errMsg, MaxErrorBytes)
	switch {
	case t.CancelRequested:
		t.CancelRequested = false
		t.Status = Canceled
		tr.Reason = "canceled after failure: " + errMsg
	case how == failedAtDeadline:
		t.Status = Dead
		tr.Reason = errMsg // "deadline passed at ..."
	case how == failedForGood:
		t.Status = Dead
		tr.Reason = "permanent failure: " + errMsg
	case t.Attempt >= t.MaxAttempts:
		t.Status = Dead
		tr.Reason = "attempts exhausted: " + errMsg
	default:
		next := now.Add(t.Retry.Delay(t.Attempt, rnd))
		if !t.Deadline.IsZero() && next.After(t.Deadline) {
			// Its retry would be due after its deadline: it would
			// never start again.
			t.Status = Dead
			t.LastError = truncateUTF8(errMsg+"; deadline passed at "+t.deadlineText()+", not retried", MaxErrorBytes)
			tr.Reason = "deadline passed: " + errMsg
			break
		}
		t.Status = Pending
		t.AvailableAt = next
		tr.Reason = "failed: " + errMsg
	}
	tr.To = t.Status
	t.commit(now, &tr)
}

// fence enforces invariant 3: only the current claim may act on a running
// task, whatever the status looks like.
func (t *Task) fence(op, claimID string) error {
	if t.Status != Running {
		if t.Status.Terminal() {
			return fmt.Errorf("%s task %s: %w: status %s: %w: %w", op, t.ID, ErrClaimMismatch, t.Status, ErrNotRunning, ErrTerminal)
		}
		return fmt.Errorf("%s task %s: %w: status %s: %w", op, t.ID, ErrClaimMismatch, t.Status, ErrNotRunning)
	}
	if claimID == "" || t.Claim == nil || t.Claim.ID != claimID {
		held := "none"
		if t.Claim != nil {
			held = t.Claim.ID
		}
		return fmt.Errorf("%s task %s: %w: claim %q, task is held by claim %q", op, t.ID, ErrClaimMismatch, claimID, held)
	}
	return nil
}

// statusErr reports a transition refused because of the task's status,
// adding ErrTerminal when the task is finished.
func (t *Task) statusErr(op string, sentinel error) error {
	if t.Status.Terminal() && sentinel != ErrTerminal {
		return fmt.Errorf("%s task %s: %w: status %s: %w", op, t.ID, sentinel, t.Status, ErrTerminal)
	}
	return fmt.Errorf("%s task %s: %w: status %s", op, t.ID, sentinel, t.Status)
}

// Stamp makes the transitions that follow on this copy of the task record
// at, the writer's best estimate of S3 time (clock.Interval.Mid), as their
// history entries' At and as UpdatedAt, instead of the time they decide by.
// A worker decides by the latest time its S3 clock allows, so that a lease
// runs its full length by everyone's reckoning; recorded, that time runs
// up to the Date header's resolution (1 s) ahead of the true time, and
// ahead of the times other writers record. A task due at once by such a
// transition (a release, a requeue) is due at the recorded time. Not
// stored: a task read again has no stamp.
func (t *Task) Stamp(at time.Time) { t.stamp = at.UTC() }

// commit records a successful transition at now, or at the stamp. The time
// recorded is after the task's last one (UpdatedAt), by a nanosecond if it
// must: writers' clocks differ by their uncertainty, and a history must read
// in the order its transitions were made. History is rebuilt into a fresh
// slice, so shallow copies of the task never share a backing array that a
// later transition writes into.
func (t *Task) commit(now time.Time, tr *Transition) {
	now = now.UTC()
	if !t.stamp.IsZero() {
		if t.AvailableAt.Equal(now) {
			t.AvailableAt = t.stamp
		}
		now = t.stamp
	}
	if !now.After(t.UpdatedAt) && !t.UpdatedAt.IsZero() {
		now = t.UpdatedAt.Add(time.Nanosecond)
	}
	t.Version++
	t.UpdatedAt = now
	if tr == nil {
		return
	}
	tr.At = now
	tr.Reason = truncateUTF8(tr.Reason, MaxReasonBytes)
	h := make([]Transition, 0, min(len(t.History)+1, MaxHistory))
	if excess := len(t.History) + 1 - MaxHistory; excess > 0 && len(t.History) > 0 {
		// Keep the first (submit) entry; drop the oldest after it.
		h = append(h, t.History[0])
		h = append(h, t.History[1+excess:]...)
		t.HistoryDropped += excess
	} else {
		h = append(h, t.History...)
	}
	t.History = append(h, *tr)
}

// truncateUTF8 cuts s to at most n bytes without splitting a rune.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// MarkDependents records that other tasks depend on this one (their edges
// are written), so that whoever records its end passes it on. It bumps
// Version and appends no history.
func (t *Task) MarkDependents(now time.Time) {
	t.Dependents = true
	t.commit(now, nil)
}

// Waiting returns the ids of the dependencies whose end the task has not
// learned yet.
func (t *Task) Waiting() []string {
	var out []string
	for _, d := range t.Deps {
		if d.Ended == "" {
			out = append(out, d.ID)
		}
	}
	return out
}

// SettleDep records that the dependency parent ended with status ended
// (terminal). A blocked task whose dependencies have all succeeded becomes
// pending (due at once, or at its own later AvailableAt); one whose
// dependency ended dead or canceled is canceled, or dead under DepFail,
// with LastError "dependency PARENT ended STATUS", then ": " and why (the
// parent's own last error) when there is one. Errors: ErrNoChange when
// there is nothing to write (the dependency was already settled, the task
// no longer blocked, or parent is not one of its dependencies): settling
// is idempotent.
func (t *Task) SettleDep(parent string, ended Status, why string, now time.Time) error {
	if !ended.Terminal() {
		return fmt.Errorf("settle dependency %s of task %s: %w: status %s is not an end", parent, t.ID, ErrInvalid, ended)
	}
	if t.Status != Blocked || t.Retired {
		return fmt.Errorf("settle dependency %s of task %s: %w: status %s", parent, t.ID, ErrNoChange, t.Status)
	}
	i := slices.IndexFunc(t.Deps, func(d Dep) bool { return d.ID == parent })
	if i < 0 || t.Deps[i].Ended != "" {
		return fmt.Errorf("settle dependency %s of task %s: %w", parent, t.ID, ErrNoChange)
	}
	t.Deps = slices.Clone(t.Deps)
	t.Deps[i].Ended = ended
	t.settleDeps(now, parent, why)
	if t.Status == Blocked {
		t.commit(now, nil) // one dependency less to wait for
	}
	return nil
}

// settleDeps moves a blocked task on once its dependencies say so. why is
// the last error of dependency parent, the one just settled ("" for none).
func (t *Task) settleDeps(now time.Time, parent, why string) {
	now = now.UTC()
	for _, d := range t.Deps {
		if d.Ended == Dead || d.Ended == Canceled {
			to, verb := Canceled, "canceled"
			if t.OnDepFailure == DepFail {
				to, verb = Dead, "dead"
			}
			t.Status = to
			// Canceled or dead, it says why: wait and get show a task
			// that never ran the reason it will not.
			msg := fmt.Sprintf("dependency %s ended %s", d.ID, d.Ended)
			t.LastError = msg
			if d.ID == parent && why != "" {
				t.LastError = truncateUTF8(msg+": "+why, MaxErrorBytes)
			}
			t.commit(now, &Transition{From: Blocked, To: to, Reason: verb + ": " + msg})
			return
		}
	}
	if len(t.Waiting()) > 0 {
		return
	}
	t.Status = Pending
	if t.AvailableAt.Before(now) {
		t.AvailableAt = now
	}
	t.commit(now, &Transition{From: Blocked, To: Pending, Reason: "dependencies succeeded"})
}

// SlotGranted gives a task blocked behind its slot's holder the slot, for
// the holder's turn (the slot's entry: a task admitted again by the
// monitor's repair holds a later turn than its submit gave it): →
// pending, due at once (or at its own later AvailableAt). Errors:
// ErrNoChange when it is not waiting for its slot (already granted,
// canceled meanwhile).
func (t *Task) SlotGranted(turn int64, now time.Time) error {
	if t.Status != Blocked || t.Slot == "" || len(t.Deps) > 0 || t.Retired {
		return fmt.Errorf("grant the slot to task %s: %w: status %s", t.ID, ErrNoChange, t.Status)
	}
	now = now.UTC()
	t.Status = Pending
	t.SlotTurn = max(t.SlotTurn, turn)
	if t.AvailableAt.Before(now) {
		t.AvailableAt = now
	}
	t.commit(now, &Transition{From: Blocked, To: Pending, Reason: "slot " + t.Slot + " granted"})
	return nil
}

// SlotReplaced cancels a task waiting for its slot that a later submit
// replaced (admission replace). Errors: ErrNoChange when it no longer
// waits.
func (t *Task) SlotReplaced(by string, now time.Time) error {
	if t.Status != Blocked || t.Slot == "" || t.Retired {
		return fmt.Errorf("replace task %s: %w: status %s", t.ID, ErrNoChange, t.Status)
	}
	t.Status = Canceled
	t.commit(now, &Transition{From: Blocked, To: Canceled, Reason: "replaced in slot " + t.Slot + " by " + by})
	return nil
}
