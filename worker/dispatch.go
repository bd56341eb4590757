package worker

func (w *Worker) free() int { return cap(w.slots) - len(w.slots) }
