package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/s3queue/s3queue"
)

// eventsBuffer is the buffer of the --events subscriber: the events of a
// burst this long wait for the file instead of being dropped.
const eventsBuffer = 8192

// eventsFlag defines --events on fs.
func eventsFlag(fs *flag.FlagSet) *string {
	return fs.String("events", "", "append events as JSON lines to `FILE` (created 0600; - for stdout)")
}

// openEvents returns the bus that writes events to path as JSON lines (nil
// when path is ""), and the function that flushes and closes it, which
// may be called more than once and returns the file's close error.
func (a *app) openEvents(path string) (*s3queue.Bus, func() error, error) {
	return a.openBus(path, false)
}

// openBus is openEvents, but with always it returns a bus even when path
// is "" (for the subscribers of --http). A file it cannot open is a usage
// error (exit 2): worker and monitor open it at start-up, before the store.
func (a *app) openBus(path string, always bool) (*s3queue.Bus, func() error, error) {
	if path == "" {
		if !always {
			return nil, func() error { return nil }, nil
		}
		bus := s3queue.NewBus(s3queue.WithBusLogger(a.log))
		var once sync.Once
		return bus, func() error { once.Do(bus.Close); return nil }, nil
	}
	var w io.Writer = a.stdout
	var f *os.File
	if path != "-" {
		var err error
		// Events name task ids, types and errors: the file is the
		// user's alone, as the file store's files are.
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			// A start-up flag that cannot be used, as a bad --http
			// address is: bad usage (exit 2), before the store is opened.
			return nil, nil, usageError("%s: --events: %v", a.cmd.name, err)
		}
		w = f
	}
	bus := s3queue.NewBus(s3queue.WithBusLogger(a.log))
	sub := bus.Subscribe("events", eventsBuffer, s3queue.EventJSONLines(w))
	var once sync.Once
	var err error
	return bus, func() error {
		once.Do(func() {
			bus.Close()
			if n := sub.Dropped(); n > 0 {
				a.log.Warn("events were dropped: the --events output could not keep up", "dropped", n)
			}
			if f != nil {
				if cerr := f.Close(); cerr != nil {
					err = fmt.Errorf("%s: --events: %w", a.cmd.name, cerr)
				}
			}
		})
		return err
	}, nil
}
