package s3store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ErrInjected marks a failure produced by Faults rather than by a backend.
var ErrInjected = errors.New("injected fault")

// Injected server errors, as a remote store would report them after its
// retries gave up.
var (
	ErrInjected500 = fmt.Errorf("%w: 500 internal error", ErrInjected)
	ErrInjected503 = fmt.Errorf("%w: 503 slow down", ErrInjected)
)

// Fault is one rule of a fault injector. A request matches when its type,
// key prefix and key suffix match; the first matching rule with Times left applies.
type Fault struct {
	Op        Op
	KeyPrefix string
	KeySuffix string
	// Err is returned instead of the result: ErrPreconditionFailed,
	// ErrConflict, ErrInjected500, ErrInjected503, or any error.
	Err error
	// AfterWrite performs the request first and then returns Err: the
	// response was lost after the write succeeded.
	AfterWrite bool
	// Latency delays the request (before it is performed).
	Latency time.Duration
	// Times is how many requests the rule affects; 0 means every one.
	Times int
	// Hook, if set, runs when the rule fires, before the request.
	Hook func(key string)
}

// Faults wraps a Store and injects failures by rule, for tests of races,
// lost responses, 412/409/5xx and latency.
type Faults struct {
	inner Store
	mu    sync.Mutex
	rules []*Fault
}

var _ Store = (*Faults)(nil)

// NewFaults wraps inner with no rules.
func NewFaults(inner Store) *Faults { return &Faults{inner: inner} }

// Inject adds a rule.
func (f *Faults) Inject(r Fault) {
	f.mu.Lock()
	f.rules = append(f.rules, &r)
	f.mu.Unlock()
}

// Clear removes every rule.
func (f *Faults) Clear() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

func (f *Faults) match(op Op, key string) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if r.Op != op || !strings.HasPrefix(key, r.KeyPrefix) || !strings.HasSuffix(key, r.KeySuffix) {
			continue
		}
		fired := *r
		if r.Times > 0 {
			r.Times--
			if r.Times == 0 {
				f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
			}
		}
		return &fired
	}
	return nil
}

// apply runs do under the rule matching op and key.
func (f *Faults) apply(ctx context.Context, op Op, key string, do func() error) error {
	r := f.match(op, key)
	if r == nil {
		return do()
	}
	if r.Hook != nil {
		r.Hook(key)
	}
	if r.Latency > 0 {
		t := time.NewTimer(r.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if r.Err == nil {
		return do()
	}
	if r.AfterWrite {
		if err := do(); err != nil {
			return err
		}
	}
	return fmt.Errorf("faults: %s %q: %w", op, key, r.Err)
}

// Get implements Store.
func (f *Faults) Get(ctx context.Context, key string) (o Object, err error) {
	err = f.apply(ctx, OpGet, key, func() (e error) { o, e = f.inner.Get(ctx, key); return })
	return o, err
}

// Head implements Store.
func (f *Faults) Head(ctx context.Context, key string) (o ObjectInfo, err error) {
	err = f.apply(ctx, OpHead, key, func() (e error) { o, e = f.inner.Head(ctx, key); return })
	return o, err
}

// Put implements Store.
func (f *Faults) Put(ctx context.Context, key string, body []byte, opts PutOptions) (etag string, err error) {
	err = f.apply(ctx, OpPut, key, func() (e error) { etag, e = f.inner.Put(ctx, key, body, opts); return })
	if err != nil {
		etag = ""
	}
	return etag, err
}

// Delete implements Store.
func (f *Faults) Delete(ctx context.Context, key string, opts DeleteOptions) error {
	return f.apply(ctx, OpDelete, key, func() error { return f.inner.Delete(ctx, key, opts) })
}

// List implements Store. Rules match on the listed prefix.
func (f *Faults) List(ctx context.Context, prefix string, opts ListOptions) (p ListPage, err error) {
	err = f.apply(ctx, OpList, prefix, func() (e error) { p, e = f.inner.List(ctx, prefix, opts); return })
	return p, err
}

// Now implements Store. Rules for OpHead with an empty KeyPrefix match it.
func (f *Faults) Now(ctx context.Context) (t time.Time, err error) {
	err = f.apply(ctx, OpHead, "", func() (e error) { t, e = f.inner.Now(ctx); return })
	return t, err
}

// WatchDates implements DateWatcher by forwarding to the wrapped store.
func (f *Faults) WatchDates(fn func(DateSample)) { WatchDates(f.inner, fn) }
