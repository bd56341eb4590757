package worker

import (
	"errors"
	"fmt"
	"time"
)

// ErrLeaseLost is the cause of a handler's context cancellation when the
// worker lost the task's lease: another worker may run it now.
var ErrLeaseLost = errors.New("task lease lost")

// ErrCanceled is the cause when the task was canceled while running.
var ErrCanceled = errors.New("task canceled")

// ErrShutdown is the cause when the worker stopped before the handler did;
// the task is handed back to the queue without using up an attempt.
var ErrShutdown = errors.New("worker shutting down")

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the task goes to dead at once.
func Permanent(err error) error { return permanentError{err} }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool { var p permanentError; return errors.As(err, &p) }

type retryAfterError struct {
	delay time.Duration
	err   error
	// backoff: the delay is the task's (Task.SnoozeDelay), set when the
	// snooze is recorded.
	backoff bool
}

func (e retryAfterError) Error() string {
	if e.backoff && e.delay == 0 {
		return fmt.Sprintf("retry later: %v", e.err)
	}
	return fmt.Sprintf("retry after %v: %v", e.delay, e.err)
}
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter asks for the task to run again after delay without using up an
// attempt (a snooze: the task is pending again, due after delay, and its
// snoozes count one more). From the 51st snooze on (task.MaxSnoozes), a
// snooze uses up an attempt as a failure does.
func RetryAfter(delay time.Duration, err error) error { return retryAfterError{delay: delay, err: err} }

// RetryLater is RetryAfter with the delay the task's retry policy gives
// its next snooze (task.Task.SnoozeDelay): the policy's backoff by the
// snooze's number, so a handler that keeps asking waits 1s, 2s, 4s ... up
// to the policy's max_delay (5m by default), jittered. The CLI's exit code
// 75 is RetryLater.
func RetryLater(err error) error { return retryAfterError{err: err, backoff: true} }

type crashedError struct{ err error }

func (e crashedError) Error() string { return e.err.Error() }
func (e crashedError) Unwrap() error { return e.err }

// Crashed marks err as a crash of the handler (the command handler returns
// it for a command killed by a signal the worker did not send): the worker's
// crash_policy applies, as to a handler that panics.
func Crashed(err error) error { return crashedError{err} }

// IsCrashed reports whether err was marked with Crashed.
func IsCrashed(err error) bool { var c crashedError; return errors.As(err, &c) }
