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
