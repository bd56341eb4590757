package clock_test

import (
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
)

func TestManualFiresTimersInOrderOnlyWhenAdvanced(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := clock.NewManual(start)
	a, b := m.NewTimer(2*time.Second), m.NewTimer(time.Second)
	if m.Timers() != 2 {
		t.Fatalf("Timers() = %d, want 2", m.Timers())
	}
	if at, ok := m.Next(); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("Next() = %v %v, want %v", at, ok, start.Add(time.Second))
	}
	m.Advance(999 * time.Millisecond)
	select {
	case <-b.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	m.Advance(time.Millisecond)
	if got := <-b.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("fired at %v", got)
	}
	if a.Stop() != true || m.Timers() != 0 {
		t.Fatalf("Stop on an armed timer: want true and no timers left, have %d", m.Timers())
	}
	m.Advance(time.Hour)
	select {
	case <-a.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	a.Reset(time.Minute)
	m.Advance(time.Minute)
	if got := <-a.C(); !got.Equal(m.Now()) {
		t.Fatalf("reset timer fired at %v, want %v", got, m.Now())
	}
	if clock.Since(m, start) != time.Hour+time.Minute+time.Second {
		t.Fatalf("Since = %v", clock.Since(m, start))
	}
}
