// Package ratelimit owns the fleet-wide rate limit counters,
// ratelimits/{hash}.json: one object per limited task type, counting the
// starts (claims) granted in the current fixed window of S3 time. Workers
// reserve tokens from it by compare-and-swap before they claim tasks of the
// type (Reserve); it does not decide what a worker does with a task over
// the limit: that is the worker's (docs/scheduling.md#rate-limits).
//
// Windows are fixed by S3 time, aligned on the Unix epoch: window k of an
// interval I covers [k·I, (k+1)·I). A counter only ever grants tokens of
// one window; the first reservation of a later window resets it.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// Prefix is where the counters live under the queue's prefix.
const Prefix = "ratelimits/"

// MinInterval is the shortest interval a limit may have.
const MinInterval = time.Second

// Limit is at most N starts per Interval.
type Limit struct {
	N        int
	Interval time.Duration
}

// String formats l as Parse reads it ("100/1m0s").
func (l Limit) String() string { return strconv.Itoa(l.N) + "/" + l.Interval.String() }

// Check reports a limit that cannot be kept.
func (l Limit) Check() error {
	if l.N < 1 {
		return fmt.Errorf("want at least 1 start per interval, got %d", l.N)
	}
	if l.Interval < MinInterval {
		return fmt.Errorf("the interval must be at least %v, got %v", MinInterval, l.Interval)
	}
	if l.Interval%time.Millisecond != 0 {
		return fmt.Errorf("the interval must be a whole number of milliseconds, got %v", l.Interval)
	}
	return nil
}

// Parse reads "N/INTERVAL": N a whole number of starts, INTERVAL a Go
// duration ("2s", "1m", "1h30m") or a bare unit (s, m, h: one of it), so
// "100/1m", "5/s" and "3/2s" all read.
func Parse(s string) (Limit, error) {
	n, iv, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, fmt.Errorf("rate limit %q: want N/INTERVAL, such as 100/1m or 5/s", s)
	}
	count, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil {
		return Limit{}, fmt.Errorf("rate limit %q: %q is not a whole number of starts", s, n)
	}
	iv = strings.TrimSpace(iv)
	var d time.Duration
	switch iv {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	default:
		if d, err = time.ParseDuration(iv); err != nil {
			return Limit{}, fmt.Errorf("rate limit %q: interval %q: want a duration such as 1s, 2m or 1h", s, iv)
		}
	}
	l := Limit{N: count, Interval: d}
	if err := l.Check(); err != nil {
		return Limit{}, fmt.Errorf("rate limit %q: %w", s, err)
	}
	return l, nil
}

// Key is the counter object of task type typ: a hash, since a type may
// hold any character.
func Key(typ string) string {
	sum := sha256.Sum256([]byte(typ))
	return Prefix + hex.EncodeToString(sum[:])[:16] + ".json"
}

// Window returns the start and end of the window of interval d holding t.
func Window(t time.Time, d time.Duration) (start, end time.Time) {
	ns := t.UnixNano()
	k := ns / int64(d)
	if ns < 0 && ns%int64(d) != 0 {
		k--
	}
	start = time.Unix(0, k*int64(d)).UTC()
	return start, start.Add(d)
}

// Counter is a counter object's content.
type Counter struct {
	// Type is the task type counted.
	Type string `json:"type"`
	// Window is the S3 time at which the counted window starts.
	Window time.Time `json:"window"`
	// Used is how many starts were granted in Window (reserved: some may
	// go unused).
	Used int `json:"used"`
	// Limit is the limit of the last writer, for a reader whose own
	// differs to say so: every worker enforces its own configured limit.
	Limit string `json:"limit"`
	// Version grows by one at every write (invariant 2).
	Version int64 `json:"version"`
	// UpdatedBy names the last writer.
	UpdatedBy string `json:"updated_by,omitempty"`
}

// ErrMalformed: the counter exists and cannot be decoded.
var ErrMalformed = errors.New("malformed rate limit counter")

// Decode parses a counter object's body.
func Decode(body []byte) (Counter, error) {
	var c Counter
	if err := json.Unmarshal(body, &c); err != nil {
		return Counter{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if c.Used < 0 {
		return Counter{}, fmt.Errorf("%w: used %d", ErrMalformed, c.Used)
	}
	return c, nil
}

// Read returns the counter of typ and its ETag ("" and the zero Counter
// when there is none). One GET.
func Read(ctx context.Context, st s3store.Store, typ string) (Counter, string, error) {
	obj, err := st.Get(ctx, Key(typ))
	if errors.Is(err, s3store.ErrNotFound) {
		return Counter{Type: typ}, "", nil
	}
	if err != nil {
		return Counter{}, "", fmt.Errorf("read the rate limit counter of %s: %w", typ, err)
	}
	c, err := Decode(obj.Body)
	if err != nil {
		return Counter{}, obj.ETag, fmt.Errorf("rate limit counter of %s (%s): %w", typ, Key(typ), err)
	}
	return c, obj.ETag, nil
}

// Grant is the outcome of a reservation.
type Grant struct {
	// Tokens is how many starts were reserved in Window: each may be
	// used by one claim sent while the window is still open.
	Tokens int
	// Window and End bound the window reserved in.
	Window, End time.Time
	// Full: the window has no token left (Tokens may still be > 0: the
	// last ones).
	Full bool
	// Ahead: the counter already counts a later window than the caller
	// can be sure it is in (its clock's Earliest lags): nothing reserved.
	Ahead bool
	// Counter is the counter as written (or read, when nothing was
	// written).
	Counter Counter
	// Malformed: the counter could not be decoded and was replaced, the
	// window counted as full.
	Malformed bool
}

// Reserve reserves up to want tokens of typ's limit l in the window that
// starts at window (the caller is certain the server's time is in it), by
// one read and one conditional write, repeated under cas when another
// writer won the race. A write whose response was lost is not read back:
// its tokens are wasted, which under-uses the limit and never exceeds it.
// A malformed counter is replaced by one that counts the window as full,
// so bad bytes cost at most one window.
func Reserve(ctx context.Context, st s3store.Store, cas s3store.CAS, typ string, l Limit, window time.Time, want int, by string) (Grant, error) {
	g := Grant{Window: window, End: window.Add(l.Interval)}
	err := cas.Retry(ctx, func(int) (bool, error) {
		g.Tokens, g.Full, g.Ahead, g.Malformed = 0, false, false, false
		c, etag, err := Read(ctx, st, typ)
		switch {
		case errors.Is(err, ErrMalformed):
			g.Malformed = true
			c = Counter{Type: typ, Window: window, Used: l.N}
		case err != nil:
			return false, err
		}
		next := c
		switch {
		case g.Malformed:
		case c.Window.After(window):
			g.Ahead, g.Counter = true, c
			return false, nil
		case c.Window.Equal(window):
			g.Tokens = min(want, l.N-c.Used)
			if g.Tokens <= 0 {
				g.Tokens, g.Full, g.Counter = 0, true, c
				return false, nil
			}
			next.Used += g.Tokens
		default:
			// A new window: the count starts again.
			g.Tokens = min(want, l.N)
			next.Window, next.Used = window, g.Tokens
		}
		next.Type, next.Limit, next.UpdatedBy = typ, l.String(), by
		next.Version++
		body, err := json.Marshal(next)
		if err != nil {
			return false, err
		}
		_, err = st.Put(ctx, Key(typ), body, s3store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""})
		switch {
		case err == nil:
			g.Full, g.Counter = next.Used >= l.N, next
			if g.Malformed {
				g.Tokens, g.Full = 0, true
			}
			return false, nil
		case s3store.LostRace(err), errors.Is(err, s3store.ErrNotFound):
			return true, err
		default:
			return false, fmt.Errorf("write the rate limit counter of %s: %w", typ, err)
		}
	})
	if err != nil {
		g.Tokens = 0
	}
	return g, err
}
