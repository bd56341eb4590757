package worker

import (
	"context"
	"time"
)

// Poll runs one discovery pass (poll) for the external tests, which drive
// the worker with it instead of Run. Never call it while Run runs.
func (w *Worker) Poll(ctx context.Context) (int, error) { return w.poll(ctx) }

// StepInbox runs direct dispatch's share of one scheduler step (stepInbox)
// and returns how long until the next. Never call it while Run runs.
func (w *Worker) StepInbox(ctx context.Context) time.Duration { return w.stepInbox(ctx) }

// MarkBusy makes the member busy, as a pass that left a backlog its slots
// take seconds to clear does (a look that saw a page of due tasks), and
// writes its fleet entry (Busy).
func (w *Worker) MarkBusy(ctx context.Context) error {
	now := w.now()
	w.fleet.noteBehind(now, true, true)
	w.fleet.backlogSeen = maxBacklogProbe
	return w.syncFleet(ctx, now)
}
