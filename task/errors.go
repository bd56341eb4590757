package task

import "errors"

// Sentinel errors, tested with errors.Is. A transition that fails with one of
// them leaves the task unchanged, so the caller must not write it back.
var (
	// ErrNotPending: the transition needs a pending task (Claim).
	ErrNotPending = errors.New("task is not pending")
	// ErrNotDue: the task is pending but its available_at is in the future.
	ErrNotDue = errors.New("task is not due yet")
	// ErrNotRunning: the transition needs a running task (Expire). Fenced
	// transitions return it together with ErrClaimMismatch.
	ErrNotRunning = errors.New("task is not running")
	// ErrClaimMismatch: fencing (invariant 3). The task is no longer running
	// under the caller's claim: it finished, was re-dispatched, or was
	// claimed again by someone else. The caller's outcome must be dropped.
	ErrClaimMismatch = errors.New("task is no longer running under this claim")
	// ErrTerminal: the task already reached a terminal status.
	ErrTerminal = errors.New("task is in a terminal state")
	// ErrNotExpired: Expire was called before the claim's lease ran out.
	ErrNotExpired = errors.New("task claim has not expired")
	// ErrCancelAlreadyRequested: Cancel on a running task whose cancel was
	// already requested. Nothing changed; do not write.
	ErrCancelAlreadyRequested = errors.New("task cancel already requested")
	// ErrNotRequeueable: Requeue on a task that is not dead or canceled.
	ErrNotRequeueable = errors.New("only dead or canceled tasks can be requeued")
	// ErrRetired: the task expired by retention and is being deleted
	// (Task.Retired); no transition applies to it any more.
	ErrRetired = errors.New("task expired by retention and is being deleted")
	// ErrNotFinished: Retire on a task that is not terminal.
	ErrNotFinished = errors.New("task is not finished")
	// ErrNoChange: SettleDep found nothing to change (already settled, or
	// the task no longer blocked). Do not write.
	ErrNoChange = errors.New("nothing to change")
	// ErrInvalid: a spec, result or argument was rejected by validation.
	ErrInvalid = errors.New("invalid task")
	// ErrCorrupt: the bytes are not a task object this package can trust
	// (invalid JSON, missing fields, inconsistent state). Report and skip or
	// quarantine it (invariant 7).
	ErrCorrupt = errors.New("corrupt task object")
	// ErrUnsupportedFormat: the object was written by a newer s3queue.
	ErrUnsupportedFormat = errors.New("unsupported task format")
)
