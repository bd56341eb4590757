package worker

import (
	"context"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
)

// fleetCAS is the policy of the worker's writes to the fleet object, with
// its pauses' jitter drawn from the worker's source: fleet writes happen
// on the Run goroutine only (see Worker.rand).
func (w *Worker) fleetCAS() s3store.CAS { return s3store.CAS{Jitter: w.rand.Float64, Sleep: w.pause} }

// pause waits d on the worker's local clock, or until ctx ends (then it
// returns ctx.Err()).
func (w *Worker) pause(ctx context.Context, d time.Duration) error {
	if !clock.Sleep(w.local, d, ctx.Done()) {
		return ctx.Err()
	}
	return nil
}
