// Package lease is a CAS lease on one S3 object: acquire with
// If-None-Match, take over an expired lease with If-Match, renew, release.
// It is timed by S3 time with margins on both sides, and carries an epoch
// that fences the holder's writes: a new holder always has a higher epoch.
//
// The holder treats the lease as held only until expires_at - margin by the
// latest the S3 clock can be; anyone else takes it over only after
// expires_at + margin by the earliest it can be. So a holder that cannot
// renew stops before anyone else may start, whatever local clocks say.
//
// The package must not delete lease objects: release is a CAS write, so a
// holder can only ever release what it still holds.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
)

var (
	// ErrHeld: another holder has the lease and it has not expired.
	ErrHeld = errors.New("lease held by another")
	// ErrLost: the lease was taken over or released since we last wrote it.
	ErrLost = errors.New("lease lost")
	// ErrCorrupt: the lease object is not a lease.
	ErrCorrupt = errors.New("corrupt lease object")
)

// Record is the lease object's content.
type Record struct {
	Holder    string    `json:"holder"`
	Epoch     int64     `json:"epoch"`   // +1 per new holder: the fencing token
	Version   int64     `json:"version"` // +1 per write, so every write changes the bytes
	ExpiresAt time.Time `json:"expires_at"`
	Released  bool      `json:"released,omitempty"`
	// Data is the holder's checkpoint (e.g. a discovery cursor); a new
	// holder reads the previous one's.
	Data json.RawMessage `json:"data,omitempty"`
}

// Config times a lease. Zero fields take the defaults.
type Config struct {
	TTL    time.Duration // default 30s
	Margin time.Duration // default 2s
}

// Lease is one holder's handle on a lease object. It is not safe for
// concurrent use.
type Lease struct {
	st     s3store.Store
	clock  *clock.Authoritative
	key    string
	holder string
	cfg    Config

	rec  Record
	etag string
	held bool
}

// New returns a handle for holder on the lease at key.
func New(st s3store.Store, c *clock.Authoritative, key, holder string, cfg Config) *Lease {
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.Margin <= 0 {
		cfg.Margin = 2 * time.Second
	}
	return &Lease{st: st, clock: c, key: key, holder: holder, cfg: cfg}
}

// Key is the lease object's key.
func (l *Lease) Key() string { return l.key }

// Record returns the lease as last read or written.
func (l *Lease) Record() Record { return l.rec }

// Epoch is the fencing token of the current holding (0 when not held).
func (l *Lease) Epoch() int64 {
	if !l.held {
		return 0
	}
	return l.rec.Epoch
}

// Read returns the lease object at key and its ETag.
func Read(ctx context.Context, st s3store.Store, key string) (Record, string, error) {
	obj, err := st.Get(ctx, key)
	if err != nil {
		return Record{}, "", fmt.Errorf("read lease %s: %w", key, err)
	}
	var r Record
	if err := json.Unmarshal(obj.Body, &r); err != nil || r.Epoch < 0 {
		return Record{}, obj.ETag, fmt.Errorf("read lease %s: %w", key, ErrCorrupt)
	}
	return r, obj.ETag, nil
}

// Free reports whether r may be taken over at now: it was released, or it
// is certainly expired beyond the margin.
func Free(r Record, now clock.Interval, margin time.Duration) bool {
	return r.Released || r.Holder == "" || now.After(r.ExpiresAt.Add(margin))
}

// Acquire takes the lease: creates it if missing, or takes it over with a
// new epoch if it was released or has expired. It returns ErrHeld (wrapped,
// naming the holder) when someone else holds it. data is the checkpoint to
// write; nil keeps the previous holder's.
func (l *Lease) Acquire(ctx context.Context, data json.RawMessage) error {
	cur, etag, err := Read(ctx, l.st, l.key)
	// Time is read after the object, so the decision uses the Date of
	// the response that carried it.
	iv, terr := l.clock.Now(ctx)
	if terr != nil {
		return terr
	}
	var opts s3store.PutOptions
	next := Record{Holder: l.holder, Epoch: 1, Version: 1, ExpiresAt: iv.Latest.Add(l.cfg.TTL), Data: data}
	switch {
	case errors.Is(err, s3store.ErrNotFound):
		opts.IfNoneMatch = true
	case errors.Is(err, ErrCorrupt):
		// A corrupt lease is taken over in place; the epoch restarts above
		// anything a reader could have seen only if we knew it, so the
		// version and epoch start high enough to be distinct.
		opts.IfMatch = etag
		next.Epoch, next.Version = iv.Latest.UnixNano(), 1
	case err != nil:
		return err
	default:
		if !Free(cur, iv, l.cfg.Margin) && cur.Holder != l.holder {
			l.rec, l.etag, l.held = cur, etag, false
			return fmt.Errorf("acquire lease %s: %w: %s until %s", l.key, ErrHeld, cur.Holder, cur.ExpiresAt.Format(time.RFC3339))
		}
		opts.IfMatch = etag
		next.Epoch, next.Version = cur.Epoch+1, cur.Version+1
		if data == nil {
			next.Data = cur.Data
		}
	}
	return l.write(ctx, next, opts, ErrHeld)
}

func (l *Lease) write(ctx context.Context, next Record, opts s3store.PutOptions, raceErr error) error {
	body, _ := json.Marshal(next)
	etag, err := l.st.Put(ctx, l.key, body, opts)
	switch {
	case err == nil:
		l.rec, l.etag, l.held = next, etag, !next.Released
		return nil
	case errors.Is(err, s3store.ErrPreconditionFailed), errors.Is(err, s3store.ErrConflict), errors.Is(err, s3store.ErrNotFound):
		l.held = false
		return fmt.Errorf("lease %s: %w", l.key, raceErr)
	}
	return fmt.Errorf("write lease %s: %w", l.key, err)
}

// Renew extends the lease by TTL from now and stores data (nil keeps the
// current checkpoint). ErrLost means someone else holds it now: stop.
// Any other error leaves the lease possibly held until Valid says no.
func (l *Lease) Renew(ctx context.Context, data json.RawMessage) error {
	if !l.held {
		return fmt.Errorf("renew lease %s: %w", l.key, ErrLost)
	}
	iv, err := l.clock.Now(ctx)
	if err != nil {
		return err
	}
	next := l.rec
	next.Version++
	next.ExpiresAt = iv.Latest.Add(l.cfg.TTL)
	if data != nil {
		next.Data = data
	}
	return l.write(ctx, next, s3store.PutOptions{IfMatch: l.etag}, ErrLost)
}

// Release gives the lease up by a CAS write (never a blind delete), so a
// holder can only release what it still holds. data is the final checkpoint.
func (l *Lease) Release(ctx context.Context, data json.RawMessage) error {
	if !l.held {
		return nil
	}
	iv, err := l.clock.Now(ctx)
	if err != nil {
		return err
	}
	next := l.rec
	next.Version++
	next.Released = true
	next.ExpiresAt = iv.Earliest
	if data != nil {
		next.Data = data
	}
	err = l.write(ctx, next, s3store.PutOptions{IfMatch: l.etag}, ErrLost)
	l.held = false
	return err
}

// Valid reports whether the lease is certainly still held: the latest the
// S3 clock can be is before expires_at - margin.
func (l *Lease) Valid(ctx context.Context) bool {
	if !l.held {
		return false
	}
	iv, err := l.clock.Now(ctx)
	return err == nil && iv.Before(l.rec.ExpiresAt.Add(-l.cfg.Margin))
}

// Remaining is how long, by the local monotonic clock, the lease is certainly
// still held (0 when it is not).
func (l *Lease) Remaining(ctx context.Context) time.Duration {
	if !l.held {
		return 0
	}
	iv, err := l.clock.Now(ctx)
	if err != nil {
		return 0
	}
	d := l.rec.ExpiresAt.Add(-l.cfg.Margin).Sub(iv.Latest)
	if d < 0 {
		return 0
	}
	return d
}
