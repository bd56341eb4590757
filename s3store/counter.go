package s3store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Op is a request type as S3 bills it.
type Op int

// Request types. Now is counted as the HEAD it costs on a remote store.
const (
	OpPut Op = iota
	OpGet
	OpHead
	OpList
	OpDelete
	numOps
)

var opNames = [numOps]string{"PUT", "GET", "HEAD", "LIST", "DELETE"}

func (o Op) String() string { return opNames[o] }

// Ops lists every request type in a stable order.
func Ops() []Op { return []Op{OpPut, OpGet, OpHead, OpList, OpDelete} }

// Outcome classifies how a request ended.
type Outcome int

// Outcomes.
const (
	OutcomeOK Outcome = iota
	OutcomeNotFound
	OutcomePrecondition
	OutcomeConflict
	OutcomeError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "not_found", "precondition_failed", "conflict", "error"}

func (o Outcome) String() string { return outcomeNames[o] }

// OutcomeOf classifies err.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, ErrPreconditionFailed):
		return OutcomePrecondition
	case errors.Is(err, ErrConflict):
		return OutcomeConflict
	}
	return OutcomeError
}

// Counts is a snapshot of request counts by type and outcome.
type Counts [numOps][numOutcomes]int64

// Of returns the number of requests of type op, whatever their outcome.
func (c Counts) Of(op Op) int64 {
	var n int64
	for _, v := range c[op] {
		n += v
	}
	return n
}

// Total returns the number of requests of every type.
func (c Counts) Total() int64 {
	var n int64
	for op := range c {
		n += c.Of(Op(op))
	}
	return n
}

// Sub returns c minus earlier, the requests made in between.
func (c Counts) Sub(earlier Counts) Counts {
	for op := range c {
		for o := range c[op] {
			c[op][o] -= earlier[op][o]
		}
	}
	return c
}

// String renders the non-zero counts, e.g. "PUT=3 GET=1 (precondition_failed=1)".
func (c Counts) String() string {
	var parts []string
	for _, op := range Ops() {
		if n := c.Of(op); n > 0 {
			var detail []string
			for o := OutcomeNotFound; o < numOutcomes; o++ {
				if v := c[op][o]; v > 0 {
					detail = append(detail, fmt.Sprintf("%s=%d", o, v))
				}
			}
			s := fmt.Sprintf("%s=%d", op, n)
			if len(detail) > 0 {
				sort.Strings(detail)
				s += " (" + strings.Join(detail, " ") + ")"
			}
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Counter wraps a Store and counts every request by type and outcome. It
// is the truth the cost model and the metrics are built on.
type Counter struct {
	inner   Store
	counts  [numOps][numOutcomes]atomic.Int64
	observe func(op Op, outcome Outcome, d time.Duration)
}

var _ Store = (*Counter)(nil)

// NewCounter wraps inner.
func NewCounter(inner Store) *Counter { return &Counter{inner: inner} }

// OnRequest registers fn to be called after every request (for metrics).
// Call it before the store is used.
func (c *Counter) OnRequest(fn func(op Op, outcome Outcome, d time.Duration)) { c.observe = fn }

// Counts returns a snapshot of the counts so far.
func (c *Counter) Counts() Counts {
	var out Counts
	for op := range c.counts {
		for o := range c.counts[op] {
			out[op][o] = c.counts[op][o].Load()
		}
	}
	return out
}

// Unwrap returns the wrapped store.
func (c *Counter) Unwrap() Store { return c.inner }

func (c *Counter) record(op Op, start time.Time, err error) {
	outcome := OutcomeOf(err)
	c.counts[op][outcome].Add(1)
	if c.observe != nil {
		c.observe(op, outcome, time.Since(start))
	}
}

// Get implements Store.
func (c *Counter) Get(ctx context.Context, key string) (Object, error) {
	start := time.Now()
	o, err := c.inner.Get(ctx, key)
	c.record(OpGet, start, err)
	return o, err
}

// Head implements Store.
func (c *Counter) Head(ctx context.Context, key string) (ObjectInfo, error) {
	start := time.Now()
	o, err := c.inner.Head(ctx, key)
	c.record(OpHead, start, err)
	return o, err
}

// Put implements Store.
func (c *Counter) Put(ctx context.Context, key string, body []byte, opts PutOptions) (string, error) {
	start := time.Now()
	etag, err := c.inner.Put(ctx, key, body, opts)
	c.record(OpPut, start, err)
	return etag, err
}

// Delete implements Store.
func (c *Counter) Delete(ctx context.Context, key string, opts DeleteOptions) error {
	start := time.Now()
	err := c.inner.Delete(ctx, key, opts)
	c.record(OpDelete, start, err)
	return err
}

// List implements Store.
func (c *Counter) List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error) {
	start := time.Now()
	p, err := c.inner.List(ctx, prefix, opts)
	c.record(OpList, start, err)
	return p, err
}

// Now implements Store. It is counted as a HEAD.
func (c *Counter) Now(ctx context.Context) (time.Time, error) {
	start := time.Now()
	t, err := c.inner.Now(ctx)
	c.record(OpHead, start, err)
	return t, err
}

// WatchDates implements DateWatcher by forwarding to the wrapped store.
func (c *Counter) WatchDates(fn func(DateSample)) { WatchDates(c.inner, fn) }
