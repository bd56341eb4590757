// Package backoff is the queue's one shape of delay between the tries of
// something that failed or lost a race: a task's retry policy (its failed
// attempts and snoozes), the pauses between lost CAS races, a worker's
// failing fleet requests and task updates, and the S3 client's retries all
// draw their delays from a Policy.
//
// It is pure code: no clock, no I/O and no global randomness. Randomness is
// passed to Delay, so a seeded run (the simulator) replays exactly; the
// caller sleeps on its own injected clock.
package backoff

import (
	"math"
	"time"
)

// Policy is a bounded backoff. The n-th delay (n >= 1) is
// Initial × Multiplier^(n-1), or Initial × n when Linear, at most Max, then
// jittered as Spread says.
type Policy struct {
	// Initial is the first delay.
	Initial time.Duration
	// Max caps every delay before jitter (so Around may exceed it by
	// Jitter of itself). A cap of 0 makes every delay 0.
	Max time.Duration
	// Multiplier grows the delay per step when not Linear; values below 1,
	// NaN and infinities count as 1.
	Multiplier float64
	// Linear grows the delay by Initial per step instead.
	Linear bool
	// Jitter is the fraction (0..1; above 1 counts as 1) of the delay that
	// is randomised, so that tries that failed together do not come back
	// together. 0 means none.
	Jitter float64
	// Spread is how the jitter applies.
	Spread Spread
}

// Spread is how a Policy's jitter moves a delay d.
type Spread int

const (
	// Below only shortens: up to Jitter of d is taken away,
	// d − d·Jitter·r, in [d(1−Jitter), d].
	Below Spread = iota
	// Around spreads evenly about d: d·((1−Jitter) + 2·Jitter·r), in
	// [d(1−Jitter), d(1+Jitter)). With Jitter 1 the delay is uniform in
	// [0, 2d): "full jitter" with mean d.
	Around
)

// Delay returns the n-th delay (n below 1 counts as 1), jittered with one
// draw from rnd, which returns values in [0, 1) (values outside are
// clamped). A nil rnd means no jitter. The result is never negative and
// saturates at the largest time.Duration instead of overflowing.
func (p Policy) Delay(n int, rnd func() float64) time.Duration {
	n = max(n, 1)
	initial := float64(max(p.Initial, 0))
	var d float64
	if p.Linear {
		d = initial * float64(n)
	} else {
		mult := p.Multiplier
		if !(mult >= 1) || math.IsInf(mult, 0) { // also catches NaN
			mult = 1
		}
		d = initial * math.Pow(mult, float64(n-1))
	}
	if ceiling := float64(max(p.Max, 0)); !(d <= ceiling) { // also catches +Inf
		d = ceiling
	}
	if rnd != nil && p.Jitter > 0 {
		r := rnd()
		if !(r >= 0) { // NaN or negative
			r = 0
		}
		r = min(r, 1)
		j := min(p.Jitter, 1)
		// The two forms are kept as written, not factored, so that each
		// caller's delays stay the same to the nanosecond (a seeded run
		// replays the same timeline).
		switch p.Spread {
		case Around:
			d *= (1 - j) + 2*j*r
		default:
			d -= d * j * r
		}
	}
	if d >= float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(max(d, 0))
}
