package s3store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/internal/backoff"
)

// LostRace reports whether err is a conditional write that lost to another
// writer: the condition no longer held (ErrPreconditionFailed, S3 412) or a
// concurrent conditional write won (ErrConflict, S3 409). The object must be
// read again before anything is decided.
func LostRace(err error) bool {
	return errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict)
}

// ErrContended reports a read-modify-CAS that lost CASAttempts races in a
// row. It wraps the last attempt's error.
var ErrContended = errors.New("too many concurrent writers")

// The queue's one policy for read-modify-CAS: after the n-th lost race in a
// row, a pause drawn uniformly from [0, n×CASPauseStep), so writers that
// raced spread out rather than meet again; at most CASAttempts attempts.
const (
	CASAttempts  = 20
	CASPauseStep = 10 * time.Millisecond
)

// CAS runs read-modify-CAS loops under the queue's one policy. The zero
// value works: it pauses half of each step and sleeps on the host clock.
type CAS struct {
	// Jitter draws a uniform float in [0,1) for each pause; services pass
	// one drawn from their Config.Rand, so a seeded run replays.
	Jitter func() float64
	// Sleep waits for d or until ctx ends (then returns ctx.Err());
	// services pass one timed by their injected local clock.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Retry calls try with attempt 0, 1, ... until try reports no lost race, and
// returns try's error then. try reads the object (or, on attempt 0, may use
// the caller's view), applies its change and writes it conditionally; it
// returns lost = true when the write lost a race (LostRace, or what the
// caller counts as one), and Retry pauses (see CASPauseStep) and calls it
// again. After CASAttempts attempts it returns ErrContended wrapping the last
// error; a ctx that ends during a pause ends Retry with ctx.Err().
func (c CAS) Retry(ctx context.Context, try func(attempt int) (lost bool, err error)) error {
	for attempt := 0; ; attempt++ {
		lost, err := try(attempt)
		if !lost {
			return err
		}
		if attempt+1 >= CASAttempts {
			return fmt.Errorf("%w: %w", ErrContended, err)
		}
		if err := c.sleep(ctx, c.Pause(attempt+1)); err != nil {
			return err
		}
	}
}

// casPause is the pause after the n-th lost race in a row: n half-steps on
// average, uniform in [0, n×CASPauseStep) (full jitter); without a jitter
// source, exactly n half-steps.
var casPause = backoff.Policy{Initial: CASPauseStep / 2, Max: CASAttempts * CASPauseStep / 2, Linear: true, Jitter: 1, Spread: backoff.Around}

// Pause is how long Retry waits after the n-th lost race in a row (n >= 1),
// for a loop that cannot be a Retry.
func (c CAS) Pause(n int) time.Duration { return casPause.Delay(n, c.Jitter) }

func (c CAS) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
