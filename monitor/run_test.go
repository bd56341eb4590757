package monitor_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/s3store/mem"
)

// Run ticks at once and then on every multiple of Interval, on the
// monitor's local clock (virtual here), and returns nil when ctx ends.
func TestRunTicksAtOnceAndThenEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		m, err := monitor.New(ctx, mem.New(), monitor.Config{Shards: 2, Interval: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- m.Run(ctx) }()
		for _, tc := range []struct {
			wait  time.Duration
			ticks int
		}{{0, 1}, {4 * time.Second, 1}, {time.Second, 2}, {12 * time.Second, 4}} {
			time.Sleep(tc.wait)
			synctest.Wait()
			if got := m.Stats().Ticks; got != tc.ticks {
				t.Fatalf("after %v more: %d ticks, want %d", tc.wait, got, tc.ticks)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}
