package task

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/s3queue/s3queue/internal/backoff"
)

// Duration is a time.Duration that marshals as a Go duration string ("1m30s")
// so task objects stay readable. On input it also accepts a JSON number of
// nanoseconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON implements json.Unmarshaler. JSON null leaves d unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("parse duration: %w", err)
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("parse duration: %w", err)
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("parse duration %s: want a string like \"1m30s\" or integer nanoseconds", b)
	}
	*d = Duration(n)
	return nil
}

// RetryPolicy decides how long a failed task waits before its next attempt:
// exponential backoff with a ceiling and jitter. Delays are measured in S3
// time (invariant 4).
type RetryPolicy struct {
	// InitialDelay is the delay after the first failed attempt. Default 1s.
	InitialDelay Duration `json:"initial_delay"`
	// MaxDelay caps every delay. Default 5m (or InitialDelay if larger).
	MaxDelay Duration `json:"max_delay"`
	// Multiplier grows the delay per failed attempt; >= 1. Default 2.
	Multiplier float64 `json:"multiplier"`
	// Jitter is the fraction (0..1) of the delay that may be randomised
	// away, so tasks that failed together do not retry together. Default
	// 0.2 in DefaultRetryPolicy; 0 means no jitter.
	Jitter float64 `json:"jitter"`
}

// DefaultRetryPolicy returns 1s initial delay, doubling, capped at 5m, 20% jitter.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		InitialDelay: Duration(time.Second),
		MaxDelay:     Duration(5 * time.Minute),
		Multiplier:   2,
		Jitter:       0.2,
	}
}

// withDefaults fills the zero fields a user most likely left out. Jitter is
// kept as given: 0 is a meaningful value (no jitter).
func (p RetryPolicy) withDefaults() RetryPolicy {
	def := DefaultRetryPolicy()
	if p.InitialDelay == 0 {
		p.InitialDelay = def.InitialDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = max(def.MaxDelay, p.InitialDelay)
	}
	if p.Multiplier == 0 {
		p.Multiplier = def.Multiplier
	}
	return p
}

// Validate reports whether the policy is usable as is (no defaults applied).
func (p RetryPolicy) Validate() error {
	switch {
	case p.InitialDelay <= 0:
		return fmt.Errorf("retry policy: initial_delay must be positive, got %s", p.InitialDelay)
	case p.MaxDelay < p.InitialDelay:
		return fmt.Errorf("retry policy: max_delay %s is below initial_delay %s", p.MaxDelay, p.InitialDelay)
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier < 1:
		return fmt.Errorf("retry policy: multiplier must be a finite number >= 1, got %v", p.Multiplier)
	case math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("retry policy: jitter must be between 0 and 1, got %v", p.Jitter)
	}
	return nil
}

// Delay returns the wait before the retry that follows attempt failed
// attempts (attempt >= 1; smaller values count as 1):
// min(MaxDelay, InitialDelay * Multiplier^(attempt-1)), then reduced by up to
// Jitter of itself using rnd, which returns values in [0, 1). A nil rnd
// means no jitter. The result is never negative.
func (p RetryPolicy) Delay(attempt int, rnd func() float64) time.Duration {
	return p.backoff().Delay(attempt, rnd)
}

// backoff is the policy as the queue's one backoff shape (a multiplier
// below 1 or not finite, from a hand-edited object, counts as 1).
func (p RetryPolicy) backoff() backoff.Policy {
	return backoff.Policy{Initial: p.InitialDelay.D(), Max: p.MaxDelay.D(), Multiplier: p.Multiplier, Jitter: p.Jitter, Spread: backoff.Below}
}
