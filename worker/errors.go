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
}

func (e retryAfterError) Error() string {
	return fmt.Sprintf("retry after %v: %v", e.delay, e.err)
}
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter asks for the task to run again after delay without using up an
// attempt (the CLI's exit code 75).
func RetryAfter(delay time.Duration, err error) error { return retryAfterError{delay, err} }

type crashedError struct{ err error }

func (e crashedError) Error() string { return e.err.Error() }
func (e crashedError) Unwrap() error { return e.err }

// Crashed marks err as a crash of the handler (the command handler returns
// it for a command killed by a signal the worker did not send): the worker's
// crash_policy applies, as to a handler that panics.
func Crashed(err error) error { return crashedError{err} }

// IsCrashed reports whether err was marked with Crashed.
func IsCrashed(err error) bool { var c crashedError; return errors.As(err, &c) }
