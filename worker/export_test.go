package worker

import "context"

// Poll runs one discovery pass (see poll) for the external tests, which
// drive polls directly instead of Run.
func (w *Worker) Poll(ctx context.Context) (int, error) { return w.poll(ctx) }
