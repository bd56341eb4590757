package worker

import "context"

// Poll runs one discovery pass (poll) for the external tests, which drive
// the worker with it instead of Run. Never call it while Run runs.
func (w *Worker) Poll(ctx context.Context) (int, error) { return w.poll(ctx) }
