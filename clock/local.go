package clock

import (
	"sort"
	"sync"
	"time"
)

// Local is this machine's monotonic clock: it measures how long something
// took and paces work (poll intervals, renewals, back-off), and never decides
// on its own whether a lease or a task is due; S3 time does that.
//
// Every service takes one from its Config (default System), so tests and the
// simulator drive time: Manual advances only when told, and under
// testing/synctest System is already virtual.
type Local interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the services use. As with time.Timer
// since Go 1.23, after Stop or Reset returns no stale value is received.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// System is the host clock (time.Now and time.NewTimer).
func System() Local { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// LocalFunc is a Local whose readings come from now (a skewed or frozen
// clock in a test) and whose timers are the host's.
func LocalFunc(now func() time.Time) Local { return funcClock(now) }

type funcClock func() time.Time

func (f funcClock) Now() time.Time { return f() }

func (funcClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

// Since is l.Now().Sub(t).
func Since(l Local, t time.Time) time.Duration { return l.Now().Sub(t) }

// Until is t.Sub(l.Now()).
func Until(l Local, t time.Time) time.Duration { return t.Sub(l.Now()) }

// Sleep waits for d on l, or until done is closed; it reports whether the
// whole duration passed.
func Sleep(l Local, d time.Duration, done <-chan struct{}) bool {
	t := l.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

// Manual is a Local that moves only when Advance is called: a test sets up
// a service, waits until it is blocked on its timers (Timers), then moves
// time forward and watches what it does. Safe for concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*manualTimer]struct{}
}

// NewManual returns a clock reading start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start, timers: make(map[*manualTimer]struct{})}
}

// Now returns the clock's reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTimer returns a timer that fires once the clock has advanced by d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	t := &manualTimer{m: m, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Timers reports how many timers are armed and not yet fired.
func (m *Manual) Timers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// Next reports when the earliest armed timer fires (ok false if none).
func (m *Manual) Next() (at time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for t := range m.timers {
		if !ok || t.when.Before(at) {
			at, ok = t.when, true
		}
	}
	return at, ok
}

// Advance moves the clock forward by d, firing every timer that falls due,
// in order of their deadlines.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	var due []*manualTimer
	for t := range m.timers {
		if !t.when.After(m.now) {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		delete(m.timers, t)
		select {
		case t.c <- t.when:
		default:
		}
	}
}

type manualTimer struct {
	m    *Manual
	when time.Time
	c    chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	_, armed := t.m.timers[t]
	delete(t.m.timers, t)
	t.drain()
	return armed
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	_, armed := t.m.timers[t]
	t.drain()
	t.when = t.m.now.Add(d)
	if d <= 0 {
		delete(t.m.timers, t)
		t.c <- t.when
		return armed
	}
	t.m.timers[t] = struct{}{}
	return armed
}

func (t *manualTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}
