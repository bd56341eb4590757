package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/events"
)

// eventServer is an events endpoint: each connection gets the next batch
// of events as JSON lines (written by the --events subscriber) and then
// ends, as a worker that restarts would; after the last batch the
// connection stays open until the test ends.
type eventServer struct {
	*httptest.Server
	mu      sync.Mutex
	batches [][]events.Event
	conns   int
}

func newEventServer(t *testing.T, batches ...[]events.Event) *eventServer {
	s := &eventServer{batches: batches}
	done := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		n := s.conns
		s.conns++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-ndjson")
		if n < len(s.batches) {
			write := events.JSONLines(w)
			for _, e := range s.batches[n] {
				write(e)
			}
			w.(http.Flusher).Flush()
			if n < len(s.batches)-1 {
				return // the stream drops
			}
		}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); s.Close() })
	return s
}

func ev(kind events.Kind, id, typ string) events.Event {
	return events.Event{Time: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), Source: events.SourceWorker, Origin: "w1",
		Kind: kind, TaskID: id, Type: typ, Attempt: 1, Shard: 3}
}

// runTail runs tail until stdout holds want lines, then stops it as Ctrl-C
// would, and returns its result.
func runTail(t *testing.T, want int, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"tail"}, args...), strings.NewReader(""), &out, &errb) }()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(out.String(), "\n") < want {
		select {
		case code := <-done:
			cancel()
			return cliResult{code, out.String(), errb.String()}
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("tail printed %d lines, want %d:\n%s\nstderr: %s", strings.Count(out.String(), "\n"), want, out.String(), errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		return cliResult{code, out.String(), errb.String()}
	case <-time.After(20 * time.Second):
		t.Fatal("tail did not stop on Ctrl-C")
	}
	return cliResult{}
}

// tail merges the events of several endpoints, filters them, and
// reconnects to an endpoint whose stream dropped.
func TestTailMergesFiltersAndReconnects(t *testing.T) {
	w1 := newEventServer(t,
		[]events.Event{ev(events.Claimed, "t1", "resize"), ev(events.Succeeded, "t1", "resize")},
		[]events.Event{ev(events.Failed, "t2", "resize"), ev(events.Dead, "t3", "mail")})
	w2 := newEventServer(t, []events.Event{ev(events.Succeeded, "t4", "mail")})

	r := runTail(t, 5, "--from", w1.URL, "--from", strings.TrimPrefix(w2.URL, "http://"))
	if r.code != 0 {
		t.Fatalf("tail: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{`claimed\s+t1`, `succeeded\s+t1`, `failed\s+t2`, `dead\s+t3\s+mail`, `succeeded\s+t4`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("tail output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "2026-11-26T12:00:00.000Z  worker/w1") || !strings.Contains(r.stdout, "attempt=1  shard=3") {
		t.Errorf("tail line format:\n%s", r.stdout)
	}
	if i, j := strings.Index(r.stdout, "claimed"), strings.Index(r.stdout, "failed"); i > j {
		t.Errorf("one endpoint's events out of order:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, w1.URL+"/events: stream ended; reconnecting") || !strings.Contains(r.stderr, "reconnected") {
		t.Errorf("the dropped stream is not noted on stderr: %q", r.stderr)
	}

	w3 := newEventServer(t, []events.Event{ev(events.Claimed, "t1", "resize"), ev(events.Failed, "t2", "resize"),
		ev(events.Dead, "t3", "mail"), ev(events.Dead, "t5", "resize")})
	r = runTail(t, 1, "--from", w3.URL, "--kind", "dead", "--type", "resize", "--json")
	line := strings.TrimSpace(r.stdout)
	if r.code != 0 || line != `{"time":"2026-11-26T12:00:00Z","source":"worker","origin":"w1","kind":"dead","task_id":"t5","type":"resize","attempt":1,"shard":3}` {
		t.Errorf("tail --kind dead --type resize --json: exit %d: %s", r.code, r.stdout)
	}
}

func TestTailErrors(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close()
	notEvents := httptest.NewServer(http.NotFoundHandler())
	defer notEvents.Close()
	r := cli(t, "", "tail", "--from", goneURL, "--from", notEvents.URL)
	wantExit(t, r, exitRuntime, "tail: no events endpoint reachable: ")
	for _, want := range []string{goneURL + "/events: ", "connection refused", notEvents.URL + "/events: 404 Not Found (is it a worker started with --http?)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, r.stderr)
		}
	}
	wantExit(t, cli(t, "", "tail"), exitUsage, "want at least one --from URL")
	wantExit(t, cli(t, "", "tail", "--from", "ftp://x"), exitUsage, "not an http(s) URL")
	wantExit(t, cli(t, "", "tail", "--from", "127.0.0.1:1", "--kind", "finished"), exitUsage, `--kind "finished": not an event kind`)
	wantExit(t, cli(t, "", "tail", "--from", "127.0.0.1:1", "--store", "file:///tmp"), exitUsage, "unknown flag --store")
}

// tail follows a real worker's --http /events stream.
func TestTailFollowsAWorker(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+"[handlers]\necho = \"cat\"\n")
	stderr, _ := background(t, "worker", "--store", store, "--config", cfg, "--http", "127.0.0.1:0")
	addr := listeningAt(t, stderr)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"tail", "--from", addr, "--kind", "succeeded", "--type", "echo"}, strings.NewReader(""), &out, &errb)
	}()
	// The stream carries only what happens once tail is connected: submit
	// until a task's success shows.
	var ids []string
	waitFor(t, "tail to print a task's success", func() bool {
		ids = append(ids, strings.TrimSpace(must(t, "submit", "--store", store, "--type", "echo", "--input", `"hi"`)))
		for _, id := range ids {
			if regexp.MustCompile(`worker/\S+\s+succeeded\s+` + id + `\s+echo\s+attempt=1`).MatchString(out.String()) {
				return true
			}
		}
		return false
	})
	cancel()
	if code := <-done; code != 0 || strings.Contains(out.String(), "claimed") {
		t.Errorf("tail: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// documentedKinds returns the kinds of docs/events.md's table of what the
// queue publishes (its first column).
func documentedKinds(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "events.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "| kind | published by |")
	table, _, _ = strings.Cut(table, "\n\n")
	var kinds []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(table, -1) {
		kinds = append(kinds, m[1])
	}
	if len(kinds) < 30 {
		t.Fatalf("found %d kinds in docs/events.md's table: the parse is wrong", len(kinds))
	}
	return kinds
}

// Every kind docs/events.md documents is one tail --kind accepts, and
// keeps: a monitor's scheduled events among them.
func TestTailAcceptsEveryDocumentedKind(t *testing.T) {
	kinds := documentedKinds(t)
	var published []string
	for _, k := range events.Kinds() {
		published = append(published, string(k))
	}
	slices.Sort(kinds)
	slices.Sort(published)
	if !slices.Equal(kinds, published) {
		t.Errorf("docs/events.md documents the kinds\n  %v\nthe queue publishes\n  %v", kinds, published)
	}
	sched := ev(events.Scheduled, "t1", "report")
	sched.Source = events.SourceMonitor
	batch := []events.Event{ev(events.Claimed, "t0", "report"), sched}
	r := runTail(t, 1, "--from", newEventServer(t, batch).URL, "--kind", "scheduled")
	if r.code != 0 || !regexp.MustCompile(`monitor/w1\s+scheduled\s+t1`).MatchString(r.stdout) || strings.Contains(r.stdout, "claimed") {
		t.Errorf("tail --kind scheduled: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Each server streams its events to its first connection only.
	r = runTail(t, 2, "--from", newEventServer(t, batch).URL, "--kind", strings.Join(kinds, ","))
	if r.code != 0 || !strings.Contains(r.stdout, "claimed") || !strings.Contains(r.stdout, "scheduled") {
		t.Errorf("tail --kind <every documented kind>: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
