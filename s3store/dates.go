package s3store

import "sync"

// DateFanout distributes DateSamples to the functions registered with
// WatchDates. Backends embed it to implement DateWatcher.
type DateFanout struct {
	mu  sync.RWMutex
	fns []func(DateSample)
}

// WatchDates implements DateWatcher.
func (f *DateFanout) WatchDates(fn func(DateSample)) {
	f.mu.Lock()
	f.fns = append(f.fns, fn)
	f.mu.Unlock()
}

// Publish hands s to every registered function.
func (f *DateFanout) Publish(s DateSample) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, fn := range f.fns {
		fn(s)
	}
}
