package s3queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue"
)

// One bus in Config reaches the queue's producer, workers and monitors.
func TestConfigEventsReachesEveryService(t *testing.T) {
	bus := s3queue.NewBus()
	got := make(chan s3queue.Event, 1024)
	bus.Subscribe("test", 1024, func(e s3queue.Event) { got <- e })
	var lines bytes.Buffer
	bus.Subscribe("json", 0, s3queue.EventJSONLines(&lines))
	f := setup(t, s3queue.Config{Events: bus, Monitor: s3queue.MonitorConfig{Retention: time.Hour, Interval: 10 * time.Millisecond}})
	id := f.submit(t, "resize", nil, s3queue.SubmitOptions{})
	stopWorker := f.runWorker(t, map[string]s3queue.Handler{
		"resize": func(context.Context, *s3queue.Task) (json.RawMessage, error) { return nil, nil },
	})
	wait := func(kind s3queue.EventKind, source string) s3queue.Event {
		t.Helper()
		timeout := time.After(deadline)
		for {
			select {
			case e := <-got:
				if e.Kind == kind && e.TaskID == id {
					if e.Source != source {
						t.Errorf("%s event from %q, want %q", kind, e.Source, source)
					}
					return e
				}
			case <-timeout:
				t.Fatalf("no %s event for %s within %v", kind, id, deadline)
			}
		}
	}
	wait(s3queue.EventSubmitted, "producer")
	claimed := wait(s3queue.EventClaimed, "worker")
	wait(s3queue.EventSucceeded, "worker")
	stopWorker()

	f.store.SetNow(func() time.Time { return time.Now().Add(2 * time.Hour) })
	m, err := f.q.NewMonitor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stop := runUntilStopped(t, "monitor", m.Run)
	deleted := wait(s3queue.EventDeleted, "monitor")
	stop()
	if claimed.Origin == "" || deleted.Origin == "" || claimed.Origin == deleted.Origin {
		t.Errorf("origins: worker %q, monitor %q", claimed.Origin, deleted.Origin)
	}
	bus.Close() // flushes the JSON lines
	if !strings.Contains(lines.String(), `"kind":"succeeded","task_id":"`+id+`"`) {
		t.Errorf("JSON lines lack the success:\n%s", lines.String())
	}
}
