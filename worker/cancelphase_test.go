package worker_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/worker"
)

// docs/flow-control.md, "Cancellation in each phase": for a task canceled
// in flight, "OnCancel and the event carry phase in-flight". The hook does;
// this checks the canceled event does too.
func TestTheCanceledEventCarriesItsPhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var mu sync.Mutex
		phases := map[string]string{}
		cfg := worker.Config{MaxInFlight: 1, MaxQueueDepth: 1, QueuePolicy: worker.Reject,
			OnEvent: func(e worker.Event) {
				if e.Kind == "canceled" {
					mu.Lock()
					phases[e.TaskID] = string(e.Phase)
					mu.Unlock()
				}
			}}
		s := newQueueSetup(t, cfg, "job", "job")
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- s.w.Run(runCtx) }()
		synctest.Wait()
		for _, i := range []int{1, 0} {
			if _, err := s.p.Cancel(ctx, s.ids[i]); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(11 * time.Second)
		synctest.Wait()
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := phases[s.ids[1]]; got != "pending" {
			t.Errorf("canceled event of the pending task: phase %q, want pending", got)
		}
		if got := phases[s.ids[0]]; got != "in-flight" {
			t.Errorf("canceled event of the running task: phase %q, want in-flight (docs/flow-control.md)", got)
		}
	})
}
