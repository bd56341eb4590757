package worker

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// finishHandlers ends Run's handlers on shutdown: it waits for them within
// the grace period, then cancels them with ErrShutdown; their tasks are
// handed back by their runs.
//
// On a store that will not heal (s3store.ErrUnusable) it cancels the
// handlers at once, since waiting cannot help, and returns that error.
func (w *Worker) finishHandlers() error {
	if err := w.guard.unusable(); err != nil {
		w.log.Error("the store is unusable; the worker stops", "err", err)
		w.finishHandlersWithin(0)
		return fmt.Errorf("worker: %w", err)
	}
	return w.finishHandlersWithin(w.cfg.ShutdownGrace)
}

// finishHandlersWithin is finishHandlers with another grace period.
func (w *Worker) finishHandlersWithin(graceFor time.Duration) error {
	w.stopping.Store(true)
	// Tasks claimed but never started go back to the bucket at once.
	ctx, cancel := context.WithTimeout(w.stopped, time.Minute)
	w.closePools(ctx)
	cancel()
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	grace := w.local.NewTimer(graceFor)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C():
	}
	// In claim id order, so a seeded run cancels (and so commits) alike.
	var ids []string
	w.running.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return true
	})
	slices.Sort(ids)
	for _, id := range ids {
		if v, ok := w.running.Load(id); ok {
			v.(*run).cancel(ErrShutdown)
		}
	}
	// Handlers that ignore their context are not waited for forever: once
	// Run returns their leases are no longer renewed, so they expire and
	// the monitor re-dispatches the tasks.
	late := w.local.NewTimer(min(10*time.Second, max(time.Second, w.cfg.ShutdownGrace)))
	defer late.Stop()
	select {
	case <-done:
	case <-late.C():
		w.log.Warn("handlers still running after shutdown; their leases are no longer renewed and will expire")
	}
	return nil
}

// Wait blocks until no handler is running and no claimed task waits for
// one, and retires the idle handler loops.
func (w *Worker) Wait() {
	w.inflight.Wait()
	for _, p := range w.pools {
		p.retireIdle()
	}
	w.loops.Wait()
	for _, p := range w.pools {
		p.mu.Lock()
		p.retiring = false
		p.mu.Unlock()
	}
}
