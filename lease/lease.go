// Package lease owns the one rule by which s3queue times a lease on S3: an
// expiry written in S3 time, judged with a margin on both sides. The holder
// treats the lease as held only while the latest the S3 clock can be is
// before expires_at - margin (Held); anyone else takes it over only once the
// earliest it can be is past expires_at + margin (Expired). So a holder that
// cannot renew stops before anyone else may start, whatever local clocks
// say. Leases in the queue are judged by these two functions: the
// monitors' leader lease here, fleet membership (shards.Fleet and the
// worker) and the monitor's takeover of an expired task claim. (A worker
// times its own claim's renewals by the same rule, as a duration.)
//
// It also holds the one single-holder lease object, Lease, which elects the
// sweeping monitor and, under direct dispatch, reserves a worker's id
// (workers/{id}.lease.json, its record in Data): acquire with If-None-Match, take over an expired lease
// with If-Match, renew by CAS, with an epoch that grows with every new
// holder. Fleet membership is not built on it: the fleet is one object
// listing many members, each renewing its own entry with a CAS write of the
// whole object (see shards.UpdateFleet), which a one-holder lease cannot
// express without one object per member; only the timing rule is shared.
//
// The package must not delete lease objects; a lease ends by expiring.
package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
)

// Held reports whether a holder whose lease runs to expiresAt (S3 time)
// certainly still holds it at now: the latest the S3 clock can be is before
// expiresAt - margin.
func Held(expiresAt time.Time, now clock.Interval, margin time.Duration) bool {
	return now.Before(expiresAt.Add(-margin))
}

// Expired reports whether a lease that runs to expiresAt (S3 time) may be
// taken over at now by anyone but its holder: the earliest the S3 clock can
// be is past expiresAt + margin.
func Expired(expiresAt time.Time, now clock.Interval, margin time.Duration) bool {
	return now.After(expiresAt.Add(margin))
}

var (
	// ErrHeld: another holder has the lease and it has not expired.
	ErrHeld = errors.New("lease held by another")
	// ErrLost: the lease was taken over since we last wrote it.
	ErrLost = errors.New("lease lost")
	// ErrCorrupt: the lease object is not a lease.
	ErrCorrupt = errors.New("corrupt lease object")
)

// record is the lease object's content.
type record struct {
	Holder    string    `json:"holder"`
	Epoch     int64     `json:"epoch"`   // +1 per new holder: the fencing token
	Version   int64     `json:"version"` // +1 per write, so every write changes the bytes
	ExpiresAt time.Time `json:"expires_at"`
	// Data is the holder's own record (a worker lease's host, inbox
	// cursor and doorbell state), written with every renewal.
	Data json.RawMessage `json:"data,omitempty"`
	// Retired: the lease is being forgotten (Retire): it is deleted next,
	// and not taken over meanwhile.
	Retired bool `json:"retired,omitempty"`
}

// RetiredGrace is how long a retired lease (Retire) is left to the DELETE
// of the process that retired it: Acquire does not take it over, and a
// second forgetter does not delete it, before it has been retired this
// long by its S3 LastModified. One whose forgetter failed or died is
// taken over, or retired again and deleted, after it. This assumes no
// request reaches the server a minute after it was sent.
const RetiredGrace = time.Minute

// Info is what a reader learns of a lease object without holding it.
type Info struct {
	Holder    string
	ExpiresAt time.Time
	Data      json.RawMessage
	ETag      string
	// Retired: the lease is being forgotten (Retire), since Modified (the
	// object's S3 LastModified).
	Retired  bool
	Modified time.Time

	rec record // what Retire writes back
}

// Peek reads the lease object at key: one GET. A missing object is an
// error wrapping s3store.ErrNotFound; one that is not a lease wraps
// ErrCorrupt.
func Peek(ctx context.Context, st s3store.Store, key string) (Info, error) {
	obj, err := st.Get(ctx, key)
	if err != nil {
		return Info{}, fmt.Errorf("read lease %s: %w", key, err)
	}
	var r record
	if err := json.Unmarshal(obj.Body, &r); err != nil || r.Epoch < 0 || r.Holder == "" {
		return Info{}, fmt.Errorf("read lease %s: %w", key, ErrCorrupt)
	}
	return Info{Holder: r.Holder, ExpiresAt: r.ExpiresAt, Data: r.Data, ETag: obj.ETag, Retired: r.Retired, Modified: obj.LastModified, rec: r}, nil
}

// Retire marks the lease that Peek read as info retired, by CAS on its
// ETag, before it is deleted: a lease taken over (or renewed) since the
// read makes the write fail (s3store.LostRace, or ErrNotFound for a lease
// deleted meanwhile), and is left alone. Once it is written, no Acquire
// takes the lease over for RetiredGrace, so an unconditional DELETE that
// follows deletes no fresh holding: where the provider ignores a
// conditional DELETE (MinIO, gofakes3), a DELETE If-Match on the ETag
// read would delete a lease taken over since. One PUT; a lease retired
// again changes its bytes (its version grows).
func Retire(ctx context.Context, st s3store.Store, key string, info Info) error {
	r := info.rec
	r.Retired = true
	r.Version++
	body, _ := json.Marshal(r)
	if _, err := st.Put(ctx, key, body, s3store.PutOptions{IfMatch: info.ETag}); err != nil {
		return fmt.Errorf("retire lease %s: %w", key, err)
	}
	return nil
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

	rec  record
	etag string
	held bool
	data json.RawMessage // the holder's record, written with each write
	prev json.RawMessage // the record found by a takeover
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

// Epoch is the fencing token of the current holding (0 when not held).
func (l *Lease) Epoch() int64 {
	if !l.held {
		return 0
	}
	return l.rec.Epoch
}

// read returns the lease object, its ETag and its S3 LastModified.
func (l *Lease) read(ctx context.Context) (record, string, time.Time, error) {
	obj, err := l.st.Get(ctx, l.key)
	if err != nil {
		return record{}, "", time.Time{}, fmt.Errorf("read lease %s: %w", l.key, err)
	}
	var r record
	if err := json.Unmarshal(obj.Body, &r); err != nil || r.Epoch < 0 {
		return record{}, obj.ETag, obj.LastModified, fmt.Errorf("read lease %s: %w", l.key, ErrCorrupt)
	}
	return r, obj.ETag, obj.LastModified, nil
}

// Acquire takes the lease: creates it if missing, or takes it over with a
// new epoch if it has expired. It returns ErrHeld (wrapped, naming the
// holder) when someone else holds it.
func (l *Lease) Acquire(ctx context.Context) error {
	cur, etag, modified, err := l.read(ctx)
	// Time is read after the object, so the decision uses the Date of
	// the response that carried it.
	iv, terr := l.clock.Now(ctx)
	if terr != nil {
		return terr
	}
	var opts s3store.PutOptions
	next := record{Holder: l.holder, Epoch: 1, Version: 1, ExpiresAt: iv.Latest.Add(l.cfg.TTL), Data: l.data}
	l.prev = nil
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
	case cur.Retired && iv.Earliest.Sub(modified) < RetiredGrace:
		// Being forgotten: its DELETE may be on the way, and would
		// delete a holding taken now. Free once it is gone.
		l.rec, l.etag, l.held = cur, etag, false
		return fmt.Errorf("acquire lease %s: %w: it is being forgotten (retired at %s)", l.key, ErrHeld, modified.UTC().Format(time.RFC3339))
	default:
		if cur.Holder != "" && !Expired(cur.ExpiresAt, iv, l.cfg.Margin) && cur.Holder != l.holder {
			l.rec, l.etag, l.held = cur, etag, false
			return fmt.Errorf("acquire lease %s: %w: %s until %s", l.key, ErrHeld, cur.Holder, cur.ExpiresAt.Format(time.RFC3339))
		}
		opts.IfMatch = etag
		next.Epoch, next.Version = cur.Epoch+1, cur.Version+1
		l.prev = cur.Data
	}
	next.Retired = false
	return l.write(ctx, next, opts, ErrHeld)
}

func (l *Lease) write(ctx context.Context, next record, opts s3store.PutOptions, raceErr error) error {
	body, _ := json.Marshal(next)
	etag, err := l.st.Put(ctx, l.key, body, opts)
	if err != nil && !errors.Is(err, s3store.ErrNotFound) {
		// A write whose response was lost (the store's retry then meets
		// it: a 412, or an error after it landed) is this holder's all
		// the same if the object holds its bytes (every write grows the
		// version; a new holding, the epoch). Taken for another's, an
		// Acquire reported the lease held, by itself. One GET, on the
		// failure path only.
		if obj, gerr := l.st.Get(ctx, l.key); gerr == nil && bytes.Equal(obj.Body, body) {
			etag, err = obj.ETag, nil
		}
	}
	switch {
	case err == nil:
		l.rec, l.etag, l.held = next, etag, true
		return nil
	case s3store.LostRace(err) || errors.Is(err, s3store.ErrNotFound):
		l.held = false
		return fmt.Errorf("lease %s: %w", l.key, raceErr)
	}
	return fmt.Errorf("write lease %s: %w", l.key, err)
}

// Renew extends the lease by TTL from now. ErrLost means someone else holds
// it now: stop. Any other error leaves the lease possibly held until Valid
// says no.
func (l *Lease) Renew(ctx context.Context) error { return l.RenewFor(ctx, l.cfg.TTL) }

// RenewFor is Renew for ttl instead of the configured TTL (a sleeping
// worker's longer lease).
func (l *Lease) RenewFor(ctx context.Context, ttl time.Duration) error {
	if !l.held {
		return fmt.Errorf("renew lease %s: %w", l.key, ErrLost)
	}
	return l.rewrite(ctx, func(iv clock.Interval) time.Time { return iv.Latest.Add(ttl) })
}

// rewrite writes the held lease again by CAS, with the holder's record and
// the expiry expires gives at now.
func (l *Lease) rewrite(ctx context.Context, expires func(now clock.Interval) time.Time) error {
	iv, err := l.clock.Now(ctx)
	if err != nil {
		return err
	}
	next := l.rec
	next.Version++
	next.Data = l.data
	next.ExpiresAt = expires(iv)
	return l.write(ctx, next, s3store.PutOptions{IfMatch: l.etag}, ErrLost)
}

// Reclaim is for a Renew that returned ErrLost: when the write before it
// landed but its response was lost (the retry's If-Match then fails), the
// object is still that write of ours, at our epoch, which nobody has taken
// over since, and Reclaim holds it again at its ETag (one GET). Any other
// object, or a failed read, leaves the lease lost and returns ErrLost.
func (l *Lease) Reclaim(ctx context.Context) error {
	cur, etag, _, err := l.read(ctx)
	if err != nil || cur.Holder != l.holder || cur.Epoch != l.rec.Epoch || cur.Retired {
		return fmt.Errorf("reclaim lease %s: %w (%v)", l.key, ErrLost, err)
	}
	l.rec, l.etag, l.held = cur, etag, true
	return nil
}

// SetData sets the holder's record, written from the next Acquire or
// Renew on.
func (l *Lease) SetData(data json.RawMessage) { l.data = data }

// Previous is the holder's record found in the lease object when Acquire
// took over an expired lease (nil for a new one): what the last holder of
// the name left, such as a worker's inbox cursor.
func (l *Lease) Previous() json.RawMessage { return l.prev }

// ExpiresAt is the expiry of the last write (S3 time).
func (l *Lease) ExpiresAt() time.Time { return l.rec.ExpiresAt }

// Release ends the holding at once: the lease is written expired, so
// anyone may take it over (or act on its holder's departure) without
// waiting for its expiry. The handle no longer holds it.
func (l *Lease) Release(ctx context.Context) error {
	if !l.held {
		return nil
	}
	err := l.rewrite(ctx, func(iv clock.Interval) time.Time { return iv.Earliest.Add(-l.cfg.Margin - time.Second) })
	l.held = false
	return err
}

// Valid reports whether the lease is certainly still held (see Held).
func (l *Lease) Valid(ctx context.Context) bool {
	if !l.held {
		return false
	}
	iv, err := l.clock.Now(ctx)
	return err == nil && Held(l.rec.ExpiresAt, iv, l.cfg.Margin)
}
