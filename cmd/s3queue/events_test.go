package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/task"
)

// eventLines decodes JSON lines, failing the test on a line that is not an
// event.
func eventLines(t *testing.T, text string) []s3queue.Event {
	t.Helper()
	var out []s3queue.Event
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var e s3queue.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Kind == "" {
			t.Fatalf("not an event line: %q (%v)", line, err)
		}
		out = append(out, e)
	}
	return out
}

// find returns the first event of kind about task id.
func find(evs []s3queue.Event, kind s3queue.EventKind, id string) (s3queue.Event, bool) {
	for _, e := range evs {
		if e.Kind == kind && e.TaskID == id {
			return e, true
		}
	}
	return s3queue.Event{}, false
}

func TestWorkerEventsAppendToAFile(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, strings.Replace(fastWorker, "[worker]\n", "[worker]\nid = \"w-events\"\n", 1))
	path := filepath.Join(t.TempDir(), "events.jsonl")
	earlier := `{"kind":"succeeded","task_id":"from-an-earlier-run"}` + "\n"
	if err := os.WriteFile(path, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	id := submit(t, store, cfg, "echo")
	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "echo=cat", "--events", path)
	if got := waitTerminal(t, store, id); got.Status != task.Succeeded {
		t.Fatalf("task %s", got.Status)
	}
	if code := stop(); code != 0 {
		t.Fatalf("worker exit %d", code)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), earlier) {
		t.Fatalf("the file was not appended to:\n%s", b)
	}
	evs := eventLines(t, string(b))
	claimed, ok := find(evs, s3queue.EventClaimed, id)
	if !ok || claimed.Source != "worker" || claimed.Origin != "w-events" || claimed.Type != "echo" || claimed.Attempt != 1 || claimed.Time.IsZero() {
		t.Errorf("claimed event %+v (found %v)", claimed, ok)
	}
	if _, ok := find(evs, s3queue.EventSucceeded, id); !ok {
		t.Errorf("no succeeded event for %s in:\n%s", id, b)
	}
}

func TestWorkerEventsToStdout(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	id := submit(t, store, cfg, "echo")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"worker", "--store", store, "--config", cfg, "--exec", "echo=cat", "--events", "-"},
			strings.NewReader(""), &stdout, &stderr)
	}()
	waitFor(t, "a succeeded line on stdout", func() bool {
		return strings.Contains(stdout.String(), `"kind":"succeeded","task_id":"`+id+`"`)
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("worker exit %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop")
	}
	if _, ok := find(eventLines(t, stdout.String()), s3queue.EventClaimed, id); !ok {
		t.Errorf("no claimed line on stdout:\n%s", stdout.String())
	}
}

func TestMonitorEventsCreateTheFile(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, "[monitor]\ninterval = \"100ms\"\nretention = \"1s\"\n")
	path := filepath.Join(t.TempDir(), "monitor.jsonl")
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	must(t, "cancel", id, "--store", store)
	_, stop := background(t, "monitor", "--store", store, "--config", cfg, "--events", path)
	waitFor(t, "retention to delete the canceled task", func() bool {
		return cli(t, "", "get", id, "--store", store).code == exitNotFound
	})
	if code := stop(); code != 0 {
		t.Fatalf("monitor exit %d", code)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&0o600 != 0o600 || perm&0o111 != 0 {
		t.Errorf("created with mode %v, want 0644 (less the umask)", perm)
	}
	b, _ := os.ReadFile(path)
	deleted, ok := find(eventLines(t, string(b)), s3queue.EventDeleted, id)
	if !ok || deleted.Source != "monitor" || deleted.Origin == "" {
		t.Errorf("deleted event %+v (found %v) in:\n%s", deleted, ok, b)
	}
}

// An --events file that cannot be opened is bad usage (exit 2), as a bad
// --http address is, before the store is opened.
func TestEventsFileThatCannotBeOpened(t *testing.T) {
	store, _ := newStore(t)
	path := filepath.Join(t.TempDir(), "no-such-dir", "events.jsonl")
	r := cli(t, "", "worker", "--store", store, "--exec", "x=cat", "--events", path)
	wantExit(t, r, exitUsage, "worker: --events: open "+path)
}
