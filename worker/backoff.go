package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/s3queue/s3queue/internal/backoff"
	"github.com/s3queue/s3queue/s3store"
)

// retryPace paces the retries of one failing operation: bounded exponential,
// with jitter, so a persistent error costs a request (and a log line) now
// and then, not a hot loop.
type retryPace struct {
	n    int       // failures in a row
	next time.Time // local monotonic time before which not to retry
}

// failed records a failure at now and returns the wait before the next
// try: base doubled per failure in a row, at most max, ±25 % jitter.
func (b *retryPace) failed(now time.Time, base, max time.Duration, rnd func() float64) time.Duration {
	b.n++
	d := backoff.Policy{Initial: base, Max: max, Multiplier: 2, Jitter: 0.25, Spread: backoff.Around}.Delay(b.n, rnd)
	b.next = now.Add(d)
	return d
}

// ok records a success.
func (b *retryPace) ok() { *b = retryPace{} }

// ready reports whether a try is allowed at now.
func (b *retryPace) ready(now time.Time) bool { return !now.Before(b.next) }

// until is how long until the next try is allowed (0 if it is).
func (b *retryPace) until(now time.Time) time.Duration { return max(b.next.Sub(now), 0) }

// guarded is the worker's view of its store: every error that will not heal
// (s3store.ErrUnusable: the bucket or local root gone, access denied) stops
// the worker, whichever request met it.
type guarded struct {
	inner s3store.Store
	once  sync.Once
	err   error
	gone  chan struct{} // closed on the first unusable error
}

var _ s3store.Store = (*guarded)(nil)

func newGuarded(inner s3store.Store) *guarded {
	return &guarded{inner: inner, gone: make(chan struct{})}
}

func (g *guarded) check(err error) error {
	if err != nil && errors.Is(err, s3store.ErrUnusable) {
		g.once.Do(func() { g.err = err; close(g.gone) })
	}
	return err
}

// unusable returns the first unusable error, or nil.
func (g *guarded) unusable() error {
	select {
	case <-g.gone:
		return g.err
	default:
		return nil
	}
}

func (g *guarded) Get(ctx context.Context, key string) (s3store.Object, error) {
	o, err := g.inner.Get(ctx, key)
	return o, g.check(err)
}

func (g *guarded) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	o, err := g.inner.Head(ctx, key)
	return o, g.check(err)
}

func (g *guarded) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	etag, err := g.inner.Put(ctx, key, body, opts)
	return etag, g.check(err)
}

func (g *guarded) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	return g.check(g.inner.Delete(ctx, key, opts))
}

func (g *guarded) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	p, err := g.inner.List(ctx, prefix, opts)
	return p, g.check(err)
}

func (g *guarded) Now(ctx context.Context) (time.Time, error) {
	t, err := g.inner.Now(ctx)
	return t, g.check(err)
}

// WatchDates forwards to the wrapped store, so the clock still syncs from
// every response.
func (g *guarded) WatchDates(fn func(s3store.DateSample)) { s3store.WatchDates(g.inner, fn) }
