package events

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// DefaultBuffer is a subscription's buffer when Subscribe is given none.
const DefaultBuffer = 1024

// Bus carries events from publishers to subscribers. Publish never waits
// for a subscriber: each subscription has a bounded buffer and its own
// goroutine, and an event that finds the buffer full is dropped for that
// subscriber alone, counted, and warned about once per episode of drops.
//
// A nil *Bus is valid: it publishes nothing and Subscribe returns a nil
// *Subscription, whose methods do nothing. A Bus is safe for concurrent
// use.
type Bus struct {
	log *slog.Logger

	// mu guards subs and closed. Publish holds it for reading while it
	// sends, so that Close, which holds it for writing, never closes a
	// channel a Publish is sending on.
	mu     sync.RWMutex
	subs   []*Subscription
	closed bool
}

// Option configures a Bus.
type Option func(*Bus)

// WithLogger makes the bus warn through l (default slog.Default()) when a
// subscriber starts dropping events, and report a subscriber that panics.
func WithLogger(l *slog.Logger) Option {
	return func(b *Bus) {
		if l != nil {
			b.log = l
		}
	}
}

// NewBus returns a bus with no subscribers.
func NewBus(opts ...Option) *Bus {
	b := &Bus{log: slog.Default()}
	for _, o := range opts {
		o(b)
	}
	b.log = b.log.WithGroup("events")
	return b
}

// Subscribe registers fn under name (which names it in warnings and in
// Stats) with a buffer of buffer events (DefaultBuffer if buffer < 1). fn
// runs on the subscription's own goroutine, one event at a time, in the
// order they were published; it must not call the subscription's Close. A
// panic in fn is logged and the subscription goes on with the next event.
//
// Subscribing to a closed bus returns a closed subscription.
func (b *Bus) Subscribe(name string, buffer int, fn func(Event)) *Subscription {
	if b == nil {
		return nil
	}
	if buffer < 1 {
		buffer = DefaultBuffer
	}
	s := &Subscription{bus: b, name: name, fn: fn, ch: make(chan Event, buffer), done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.closed = true
		close(s.done)
		return s
	}
	b.subs = append(b.subs, s)
	go s.run()
	return s
}

// Publish hands e to every subscriber without waiting for any: a
// subscriber whose buffer is full loses e (Subscription.Dropped counts
// it). Publish on a closed or nil bus does nothing.
func (b *Bus) Publish(e Event) {
	if b == nil {
		return
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return
	}
	for _, s := range b.subs {
		select {
		case s.ch <- e:
		default:
			s.drop()
		}
	}
}

// Close stops the bus: later Publish calls do nothing, and Close returns
// once every subscriber has handled the events already in its buffer.
func (b *Bus) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	subs := b.subs
	b.subs, b.closed = nil, true
	for _, s := range subs {
		s.closed = true
		close(s.ch)
	}
	b.mu.Unlock()
	for _, s := range subs {
		<-s.done
	}
}

// SubscriberStats is one subscription's counters in Bus.Stats.
type SubscriberStats struct {
	Name string
	// Delivered counts the events its function has handled; Dropped the
	// events it lost to a full buffer.
	Delivered, Dropped int64
	// Buffered is how many events wait in its buffer now.
	Buffered int
}

// Stats returns the counters of the bus's open subscriptions, in the order
// they subscribed. A nil bus has none.
func (b *Bus) Stats() []SubscriberStats {
	if b == nil {
		return nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]SubscriberStats, 0, len(b.subs))
	for _, s := range b.subs {
		out = append(out, SubscriberStats{Name: s.name, Delivered: s.delivered.Load(), Dropped: s.dropped.Load(), Buffered: len(s.ch)})
	}
	return out
}

// Subscription is one subscriber of a Bus.
type Subscription struct {
	bus  *Bus
	name string
	fn   func(Event)
	ch   chan Event
	done chan struct{} // closed when run has returned
	// closed is guarded by bus.mu: the channel is closed once, by whoever
	// sets it.
	closed bool

	delivered, dropped atomic.Int64
	// dropping is set at the first drop of an episode (when the warning is
	// logged) and cleared when the subscriber has emptied its buffer.
	dropping atomic.Bool
}

// Name returns the name the subscription was registered under.
func (s *Subscription) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Dropped returns how many events the subscription has lost to a full
// buffer.
func (s *Subscription) Dropped() int64 {
	if s == nil {
		return 0
	}
	return s.dropped.Load()
}

// Delivered returns how many events the subscription's function has
// handled.
func (s *Subscription) Delivered() int64 {
	if s == nil {
		return 0
	}
	return s.delivered.Load()
}

// Done returns a channel closed when the subscription has ended: after
// Close, or after its bus closed and it handled what it had buffered. A
// nil subscription's is closed.
func (s *Subscription) Done() <-chan struct{} {
	if s == nil {
		return closedChan
	}
	return s.done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Close unsubscribes: it returns once the function has handled the events
// already buffered; events published after Close begins are not delivered.
// It must not be called from the subscription's own function. Closing
// twice is harmless.
func (s *Subscription) Close() {
	if s == nil {
		return
	}
	b := s.bus
	b.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
		for i, o := range b.subs {
			if o == s {
				b.subs = append(b.subs[:i:i], b.subs[i+1:]...)
				break
			}
		}
	}
	b.mu.Unlock()
	<-s.done
}

// drop counts an event lost to a full buffer and warns at the first drop of
// an episode, so that a subscriber that falls behind is visible without a
// warning per event.
func (s *Subscription) drop() {
	n := s.dropped.Add(1)
	if s.dropping.CompareAndSwap(false, true) {
		s.bus.log.Warn("event subscriber is falling behind; dropping events until it catches up",
			"subscriber", s.name, "buffer", cap(s.ch), "dropped_total", n)
	}
}

func (s *Subscription) run() {
	defer close(s.done)
	for e := range s.ch {
		s.handle(e)
		s.delivered.Add(1)
		if len(s.ch) == 0 && s.dropping.Load() {
			// Caught up: the next drop starts a new episode, and warns.
			s.dropping.Store(false)
			s.bus.log.Info("event subscriber caught up", "subscriber", s.name, "dropped_total", s.dropped.Load())
		}
	}
}

func (s *Subscription) handle(e Event) {
	defer func() {
		if p := recover(); p != nil {
			s.bus.log.Error("event subscriber panicked; it goes on with the next event", "subscriber", s.name,
				"kind", string(e.Kind), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	s.fn(e)
}

// background is the context of the built-in subscribers' log calls: a
// subscriber has no caller's context to pass on.
var background = context.Background()
