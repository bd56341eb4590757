// Package clock provides authoritative time: the S3 server's clock as seen
// through the Date header of responses, carried forward between responses by
// the local monotonic clock. Local wall clocks never decide anything
// (invariant 4): a host whose wall clock is minutes off makes the same
// decisions as any other.
//
// The package must not issue requests when responses already flowing give it
// a recent enough sample.
package clock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// Source is what the clock asks for a time when it has no recent sample.
// Every s3store.Store is one.
type Source interface {
	Now(ctx context.Context) (time.Time, error)
}

// Config tunes an Authoritative clock. Zero fields take the defaults.
type Config struct {
	// Resolution of the server's Date header (S3: 1s).
	Resolution time.Duration
	// MaxAge is how old the newest sample may be before Now issues a
	// request of its own (default 30s).
	MaxAge time.Duration
	// Local is this machine's clock. Only differences between its readings
	// are used, through Go's monotonic clock, so a skewed wall clock does not
	// matter. Tests inject a skewed one to prove it. Default System().
	Local Local
	// DriftPPM bounds how fast the local monotonic clock may drift from the
	// server's, in parts per million (default 200).
	DriftPPM float64
}

func (c *Config) fill() {
	if c.Resolution <= 0 {
		c.Resolution = time.Second
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 30 * time.Second
	}
	if c.Local == nil {
		c.Local = System()
	}
	if c.DriftPPM <= 0 {
		c.DriftPPM = 200
	}
}

// Interval bounds the server's current time: the true time is within
// [Earliest, Latest].
type Interval struct {
	Earliest, Latest time.Time
	// Best, when set, is a better single estimate than the middle: the
	// server's Date had a finer resolution than the clock assumes (an
	// embedded store's Date is its exact time; an HTTP Date never is).
	// It lies within [Earliest, Latest].
	Best time.Time
}

// Mid is the best single estimate: Best when set, else the middle of the
// interval. Decisions take a bound (Earliest or Latest); the times a
// writer records for people to read (a task's history, its updated time)
// take Mid, which is off the true time by at most half the interval's
// width (half a second with S3's 1-second Date), either way.
func (i Interval) Mid() time.Time {
	if !i.Best.IsZero() {
		return i.Best
	}
	return i.Earliest.Add(i.Latest.Sub(i.Earliest) / 2)
}

// Uncertainty is the width of the interval.
func (i Interval) Uncertainty() time.Duration { return i.Latest.Sub(i.Earliest) }

// After reports whether the server time is certainly after t.
func (i Interval) After(t time.Time) bool { return i.Earliest.After(t) }

// Before reports whether the server time is certainly before t.
func (i Interval) Before(t time.Time) bool { return i.Latest.Before(t) }

// Authoritative is the server clock estimate. It is safe for concurrent use.
//
// It keeps bounds on A, the server's time at the local instant base: a
// response whose Date is D, sent at local s and received at r, proves
// D - e(r) <= A < D + resolution - e(s), where e is monotonic time since base.
// Samples narrow the bounds; a sample that contradicts them means the server
// clock stepped, and it replaces them.
type Authoritative struct {
	src  Source
	cfg  Config
	base time.Time

	mu       sync.Mutex
	have     bool
	lo, hi   time.Time     // bounds on A
	lastSeen time.Duration // e() of the newest sample
	// best estimates A from the newest sample whose Date was finer than
	// a second (zero: the newest was not): the Date, taken at the middle
	// of its round trip.
	best     time.Time
	samples  int64
	requests int64
}

// New returns a clock fed by src. When src reports response dates (every
// remote store does), the clock syncs from them for free.
func New(src Source, cfg Config) *Authoritative {
	cfg.fill()
	c := &Authoritative{src: src, cfg: cfg, base: cfg.Local.Now()}
	if st, ok := src.(s3store.Store); ok {
		s3store.WatchDates(st, c.Observe)
	}
	return c
}

// publishSlack covers the moment between a response's arrival and its
// sample reaching Observe.
const publishSlack = 5 * time.Millisecond

func (c *Authoritative) elapsed(t time.Time) time.Duration { return t.Sub(c.base) }

// Observe feeds one response's Date to the clock.
func (c *Authoritative) Observe(s s3store.DateSample) {
	if s.Date.IsZero() {
		return
	}
	// Samples are published the moment a response arrives, so the arrival
	// is stamped here, with this clock's local time; only the round trip is
	// taken from the sample. That keeps every local instant on one clock.
	rtt := s.Received.Sub(s.Sent)
	if rtt < 0 {
		rtt = 0
	}
	recv := c.elapsed(c.cfg.Local.Now())
	sent := recv - rtt - publishSlack
	lo := s.Date.Add(-recv)
	hi := s.Date.Add(c.cfg.Resolution - sent)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples++
	if c.have {
		// Widen the old bounds by the drift the local clock may have
		// accumulated since they were last confirmed.
		since := recv - c.lastSeen
		if since < 0 {
			since = 0
		}
		drift := time.Duration(float64(since) * c.cfg.DriftPPM / 1e6)
		oldLo, oldHi := c.lo.Add(-drift), c.hi.Add(drift)
		if !lo.After(oldHi) && !oldLo.After(hi) {
			if oldLo.After(lo) {
				lo = oldLo
			}
			if oldHi.Before(hi) {
				hi = oldHi
			}
		}
	}
	c.lo, c.hi, c.have = lo, hi, true
	if recv >= c.lastSeen {
		c.lastSeen = recv
		// An HTTP Date is whole seconds; a finer one is the server's
		// exact time (the embedded stores').
		c.best = time.Time{}
		if s.Date.Nanosecond() != 0 {
			c.best = s.Date.Add(rtt/2 - recv)
		}
	}
}

// Now returns bounds on the server's current time. It issues a request
// only when no response in the last MaxAge gave it a sample.
func (c *Authoritative) Now(ctx context.Context) (Interval, error) {
	now := c.cfg.Local.Now()
	e := c.elapsed(now)
	c.mu.Lock()
	fresh := c.have && e-c.lastSeen <= c.cfg.MaxAge
	c.mu.Unlock()
	if !fresh {
		if err := c.Sync(ctx); err != nil {
			return Interval{}, err
		}
		now = c.cfg.Local.Now()
		e = c.elapsed(now)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	drift := time.Duration(float64(e-c.lastSeen) * c.cfg.DriftPPM / 1e6)
	iv := Interval{Earliest: c.lo.Add(e - drift), Latest: c.hi.Add(e + drift)}
	if !c.best.IsZero() {
		iv.Best = c.best.Add(e)
		if iv.Best.Before(iv.Earliest) {
			iv.Best = iv.Earliest
		}
		if iv.Best.After(iv.Latest) {
			iv.Best = iv.Latest
		}
	}
	return iv, nil
}

// Held returns the bounds the clock's samples still give, however old,
// without a request: wider than Now's by the drift since the newest
// sample, and as certain. ok is false before the first sample. It is the
// answer when the server cannot be asked (a partition): a lease judged by
// Held is judged conservatively, never optimistically.
func (c *Authoritative) Held() (iv Interval, ok bool) {
	e := c.elapsed(c.cfg.Local.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.have {
		return Interval{}, false
	}
	drift := time.Duration(float64(e-c.lastSeen) * c.cfg.DriftPPM / 1e6)
	return Interval{Earliest: c.lo.Add(e - drift), Latest: c.hi.Add(e + drift)}, true
}

// Sync asks the source for its time now, whatever samples the clock has.
func (c *Authoritative) Sync(ctx context.Context) error {
	sent := c.cfg.Local.Now()
	t, err := c.src.Now(ctx)
	if err != nil {
		return fmt.Errorf("read server time: %w", err)
	}
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	c.Observe(s3store.DateSample{Date: t, Sent: sent, Received: c.cfg.Local.Now()})
	return nil
}

// CertainlyAfter reports whether the server time is certainly past t.
func (c *Authoritative) CertainlyAfter(ctx context.Context, t time.Time) (bool, error) {
	i, err := c.Now(ctx)
	return err == nil && i.After(t), err
}

// CertainlyBefore reports whether the server time is certainly before t.
func (c *Authoritative) CertainlyBefore(ctx context.Context, t time.Time) (bool, error) {
	i, err := c.Now(ctx)
	return err == nil && i.Before(t), err
}

// Stats reports how many samples the clock has seen and how many requests
// of its own it issued.
func (c *Authoritative) Stats() (samples, requests int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.samples, c.requests
}
