package worker

import "github.com/s3queue/s3queue/internal/taskio"

// Dispatch is the seam between discovery and the handlers. Discovery
// reserves a slot before it claims a task (reserveSlot), so the worker
// never claims more than it can run, and hands each task it claimed to
// dispatch, which today starts its run at once on that slot. A run that
// ends frees its slot (releaseSlot) and wakes the scheduler, which claims a
// prefetched candidate or polls again soon.
//
// A dispatch queue (admission limits, claimed tasks waiting for a handler,
// queue policies) slots in here, and only here: reserveSlot is admission,
// dispatch enqueues, releaseSlot hands the freed slot to the next task
// waiting.

// free is how many slots are free.
func (w *Worker) free() int { return cap(w.slots) - len(w.slots) }

// reserveSlot takes a free slot for a task about to be claimed, and reports
// whether there was one.
func (w *Worker) reserveSlot() bool {
	select {
	case w.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// unreserveSlot gives back a slot reserved for a claim that failed.
func (w *Worker) unreserveSlot() { <-w.slots }

// dispatch runs the handler h for the task v, claimed under claimID, on the
// slot reserved for it.
func (w *Worker) dispatch(v taskio.Versioned, claimID string, h Handler) {
	r := &run{w: w, v: v, claimID: claimID, handler: h}
	w.inflight.Add(1)
	go r.execute()
}

// releaseSlot frees the slot of a run that ended and wakes the scheduler
// (Run), which may refill it.
func (w *Worker) releaseSlot() {
	<-w.slots
	select {
	case w.freed <- struct{}{}:
	default:
	}
}
