package monitor_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// Monitors schedule: each tick gets one task, submitted within a second
// of the tick (the scheduler wakes at the tick, not at the sweeps'
// interval); with leader = true only the leader submits.
func TestMonitorsSubmitOneTaskPerTick(t *testing.T) {
	for _, leader := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := mem.New()
			var mu sync.Mutex
			byKey := map[string]string{}
			submitters := map[string]bool{}
			late := time.Duration(0)
			submit := func(id string) monitor.SubmitFunc {
				return func(_ context.Context, s monitor.Submission) (string, error) {
					mu.Lock()
					defer mu.Unlock()
					submitters[id] = true
					late = max(late, time.Since(s.Tick))
					if _, ok := byKey[s.IdempotencyKey]; !ok {
						byKey[s.IdempotencyKey] = "task-" + s.IdempotencyKey
					}
					return byKey[s.IdempotencyKey], nil
				}
			}
			if _, _, err := schedule.Put(ctx, st, schedule.Definition{Name: "beat", Every: task.Duration(3 * time.Second), Type: "t"}, time.Now(), "test"); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for _, id := range []string{"m1", "m2"} {
				m, err := monitor.New(ctx, st, monitor.Config{ID: id, Shards: 1, Leader: leader, Interval: 5 * time.Second, Submit: submit(id),
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.Run(ctx)
				}()
			}
			time.Sleep(time.Minute)
			cancel()
			wg.Wait()
			s, spec, _, err := schedule.Read(context.Background(), st, "beat")
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for at := spec.Next(s.CreatedAt); !at.After(s.Cursor); at = spec.Next(at) {
				if _, ok := byKey[schedule.IdempotencyKey("beat", at)]; !ok {
					t.Errorf("leader %v: tick %v has no task", leader, at)
				}
				n++
			}
			// The monitors may stop between a tick's submit and its record:
			// that tick (the one after the cursor) has its task, unrecorded,
			// which the next scheduler would submit again under the same key.
			_, unrecorded := byKey[schedule.IdempotencyKey("beat", spec.Next(s.Cursor))]
			if n < 15 || len(byKey) != n && !(unrecorded && len(byKey) == n+1) {
				t.Errorf("leader %v: %d ticks recorded, %d tasks", leader, n, len(byKey))
			}
			if late > 1500*time.Millisecond {
				t.Errorf("leader %v: a tick was submitted %v after it", leader, late)
			}
			if leader && len(submitters) != 1 {
				t.Errorf("leader = true, yet %v submitted", submitters)
			}
		})
	}
}
