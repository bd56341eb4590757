package s3queue_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// deadline bounds every wait for background work.
const deadline = 10 * time.Second

var quiet = slog.New(slog.DiscardHandler)

// signalStore is an in-memory store whose server time tests can move, and
// which reports every successful DELETE.
type signalStore struct {
	*mem.Store
	deleted chan string
}

func (s *signalStore) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	err := s.Store.Delete(ctx, key, opts)
	if err == nil {
		select {
		case s.deleted <- key:
		default:
		}
	}
	return err
}

// fixture is a queue, its store (setup's) and its workers' events.
type fixture struct {
	q      *s3queue.Queue
	store  *signalStore
	events chan s3queue.Event
}

// datelessStore hides its store's response dates, so that a clock on it
// learns S3 time only by asking (one Now request per clock, while its
// sample is fresh), and counts those requests. It signals every LIST.
type datelessStore struct {
	s3store.Store // an interface: mem.Store's WatchDates is not promoted
	nows          atomic.Int32
	lists         chan struct{}
}

func (s *datelessStore) Now(ctx context.Context) (time.Time, error) {
	s.nows.Add(1)
	return s.Store.Now(ctx)
}

func (s *datelessStore) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	select {
	case s.lists <- struct{}{}:
	default:
	}
	return s.Store.List(ctx, prefix, opts)
}

// setup opens a queue on a fresh in-memory store, whose workers poll often
// and report their events.
func setup(t *testing.T, cfg s3queue.Config) *fixture {
	t.Helper()
	st := &signalStore{Store: mem.New(), deleted: make(chan string, 64)}
	f := setupOn(t, st, cfg)
	f.store = st
	return f
}

// setupOn is setup on the store st.
func setupOn(t *testing.T, st s3store.Store, cfg s3queue.Config) *fixture {
	t.Helper()
	f := &fixture{events: make(chan s3queue.Event, 256)}
	cfg.Logger = quiet
	cfg.Worker.PollMin, cfg.Worker.PollMax = 50*time.Millisecond, 100*time.Millisecond
	cfg.Worker.OnEvent = func(e s3queue.Event) { f.events <- e }
	q, err := s3queue.OpenStore(context.Background(), st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.q = q
	return f
}

// runWorker runs a worker with handlers until the test stops it (or ends).
func (f *fixture) runWorker(t *testing.T, handlers map[string]s3queue.Handler) (stop func()) {
	t.Helper()
	w, err := f.q.NewWorker(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for typ, h := range handlers {
		w.Handle(typ, h)
	}
	return runUntilStopped(t, "worker", w.Run)
}

// runUntilStopped runs run in the background; stop ends its context and
// waits for it to return nil.
func runUntilStopped(t *testing.T, what string, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Run: %v", what, err)
			}
		case <-time.After(deadline):
			t.Fatalf("%s: Run did not return within %v of its context's end", what, deadline)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitEvent waits for a worker event of kind about task id.
func (f *fixture) waitEvent(t *testing.T, kind s3queue.EventKind, id string) s3queue.Event {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case e := <-f.events:
			if e.Kind == kind && e.TaskID == id {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event for task %s within %v", kind, id, deadline)
		}
	}
}

func (f *fixture) submit(t *testing.T, typ string, input any, opts s3queue.SubmitOptions) string {
	t.Helper()
	id, err := f.q.Submit(context.Background(), typ, input, opts)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (f *fixture) get(t *testing.T, id string) *s3queue.Task {
	t.Helper()
	tk, err := f.q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestOpenRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, url string
		want      string
	}{
		{"no store", "", "no store URL"},
		{"unknown scheme", "ftp://bucket/queue", `unknown scheme "ftp"`},
		{"relative dir", "file://queue", "relative path"},
		{"credentials in the URL", "s3://AKIA:hunter2@bucket/queue", "credentials"},
		{"secret parameter", "s3://bucket/queue?endpoint=http://127.0.0.1:9000&secret_key=hunter2", "credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := s3queue.Open(ctx, s3queue.Config{Store: tc.url, Logger: quiet})
			if err == nil {
				t.Fatalf("Open(%q) = %v, want an error", tc.url, q)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q): %v, want it to say %q", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Open(%q): error shows a secret: %v", tc.url, err)
			}
		})
	}
}

func TestOpenStoreRejectsNil(t *testing.T) {
	if _, err := s3queue.OpenStore(context.Background(), nil, s3queue.Config{}); err == nil {
		t.Fatal("OpenStore(nil) succeeded")
	}
}

func TestLoadConfig(t *testing.T) {
	t.Run("file with an env override", func(t *testing.T) {
		dir := t.TempDir()
		fileStore, envStore := filepath.Join(dir, "from-file"), filepath.Join(dir, "from-env")
		path := filepath.Join(dir, "queue.toml")
		toml := fmt.Sprintf("store = %q\nshards = 4\n\n[worker]\nconcurrency = 8\n\n[submit]\nmax_attempts = 5\ntimeout = \"1m\"\n", "file://"+fileStore)
		if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		env := []string{"S3QUEUE_STORE=file://" + envStore, "S3QUEUE_SUBMIT_MAX_ATTEMPTS=7"}
		cfg, err := s3queue.LoadConfig(path, env)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Worker.Concurrency != 8 || cfg.Shards != 4 {
			t.Errorf("worker concurrency %d, shards %d; want the file's 8 and 4", cfg.Worker.Concurrency, cfg.Shards)
		}
		cfg.Logger = quiet
		ctx := context.Background()
		q, err := s3queue.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		id, err := q.Submit(ctx, "resize", nil, s3queue.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The task went to the environment's store, with the file's
		// timeout and the environment's attempts.
		other, err := s3queue.Open(ctx, s3queue.Config{Store: "file://" + envStore, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		tk, err := other.Get(ctx, id)
		if err != nil {
			t.Fatalf("task %s is not in the store S3QUEUE_STORE names: %v", id, err)
		}
		if tk.MaxAttempts != 7 || time.Duration(tk.Timeout) != time.Minute {
			t.Errorf("task has %d attempts and timeout %v, want 7 and 1m", tk.MaxAttempts, time.Duration(tk.Timeout))
		}
		if st, err := other.Stats(ctx); err != nil || st.Shards != 4 {
			t.Errorf("Stats: shards %d, err %v; want the file's 4", st.Shards, err)
		}
		if _, err := os.Stat(fileStore); !os.IsNotExist(err) {
			t.Errorf("the file's store %s was used: %v", fileStore, err)
		}
	})
	t.Run("unreadable file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "missing.toml")
		_, err := s3queue.LoadConfig(path, nil)
		if err == nil || !strings.Contains(err.Error(), "s3queue: load config") || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadConfig(%s): %v, want an error naming the file", path, err)
		}
	})
	t.Run("bad env value", func(t *testing.T) {
		_, err := s3queue.LoadConfig("", []string{"S3QUEUE_WORKER_CONCURRENCY=many"})
		if err == nil || !strings.Contains(err.Error(), "S3QUEUE_WORKER_CONCURRENCY") {
			t.Errorf("LoadConfig: %v, want an error naming the variable", err)
		}
	})
	t.Run("misspelt variable", func(t *testing.T) {
		_, err := s3queue.LoadConfig("", []string{"S3QUEUE_WORKER_CONCURENCY=8"})
		if err == nil || !strings.Contains(err.Error(), "S3QUEUE_WORKER_CONCURENCY") || !strings.Contains(err.Error(), "S3QUEUE_WORKER_CONCURRENCY") {
			t.Errorf("LoadConfig: %v, want an error naming the variable and suggesting the key", err)
		}
	})
}

func TestWorkerRunsHandler(t *testing.T) {
	f := setup(t, s3queue.Config{})
	id := f.submit(t, "resize", map[string]string{"image": "cat.png"}, s3queue.SubmitOptions{})
	if got := f.get(t, id).Status; got != s3queue.Pending {
		t.Fatalf("status after submit %s, want pending", got)
	}
	stop := f.runWorker(t, map[string]s3queue.Handler{
		"resize": func(ctx context.Context, tk *s3queue.Task) (json.RawMessage, error) {
			var in struct{ Image string }
			if err := json.Unmarshal(tk.Input, &in); err != nil {
				return nil, s3queue.Permanent(err)
			}
			return json.Marshal("small-" + in.Image)
		},
	})
	f.waitEvent(t, "succeeded", id)
	stop()

	tk := f.get(t, id)
	if tk.Status != s3queue.Succeeded || string(tk.Result) != `"small-cat.png"` || tk.Attempt != 1 {
		t.Errorf("task is %s, attempt %d, result %s; want succeeded at attempt 1 with \"small-cat.png\"", tk.Status, tk.Attempt, tk.Result)
	}
	h, err := f.q.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var path []s3queue.Status
	for _, tr := range h {
		path = append(path, tr.To)
	}
	if want := []s3queue.Status{s3queue.Pending, s3queue.Running, s3queue.Succeeded}; fmt.Sprint(path) != fmt.Sprint(want) {
		t.Errorf("history %v, want %v", path, want)
	}
}

func TestSubmitBatchTakesDefaults(t *testing.T) {
	f := setup(t, s3queue.Config{Submit: s3queue.SubmitDefaults{MaxAttempts: 4}})
	res := f.q.SubmitBatch(context.Background(), []s3queue.Request{
		{Type: "resize", Input: 1},
		{Type: "", Input: 2},
		{Type: "resize", Input: 3, Options: s3queue.SubmitOptions{MaxAttempts: 2}},
	})
	if len(res) != 3 {
		t.Fatalf("%d results for 3 requests", len(res))
	}
	if res[1].Err == nil || !strings.Contains(res[1].Err.Error(), "s3queue: task type") {
		t.Errorf("a request without a type: %v, want an error naming the task type", res[1].Err)
	}
	for i, want := range map[int]int{0: 4, 2: 2} {
		if res[i].Err != nil {
			t.Fatalf("request %d: %v", i, res[i].Err)
		}
		if got := f.get(t, res[i].ID).MaxAttempts; got != want {
			t.Errorf("request %d: %d attempts, want %d", i, got, want)
		}
	}
}

func TestCancel(t *testing.T) {
	f := setup(t, s3queue.Config{})
	ctx := context.Background()
	id := f.submit(t, "report", nil, s3queue.SubmitOptions{Delay: time.Hour})
	running, err := f.q.Cancel(ctx, id)
	if err != nil || running {
		t.Fatalf("Cancel of a pending task: running %v, err %v; want false, nil", running, err)
	}
	if got := f.get(t, id).Status; got != s3queue.Canceled {
		t.Errorf("status after Cancel %s, want canceled", got)
	}
	if _, err := f.q.Cancel(ctx, id); !errors.Is(err, s3queue.ErrTerminal) {
		t.Errorf("second Cancel: %v, want ErrTerminal", err)
	}
	missing, err := task.NewID(time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Cancel(ctx, missing); !errors.Is(err, s3queue.ErrNotFound) {
		t.Errorf("Cancel of an unknown task: %v, want ErrNotFound", err)
	}
}

func TestRequeueDeadTask(t *testing.T) {
	f := setup(t, s3queue.Config{})
	ctx := context.Background()
	id := f.submit(t, "import", nil, s3queue.SubmitOptions{MaxAttempts: 1})
	var attempts atomic.Int32
	f.runWorker(t, map[string]s3queue.Handler{
		"import": func(ctx context.Context, tk *s3queue.Task) (json.RawMessage, error) {
			if attempts.Add(1) == 1 {
				return nil, errors.New("upstream down")
			}
			return nil, nil
		},
	})
	f.waitEvent(t, "dead", id)
	tk := f.get(t, id)
	if tk.Status != s3queue.Dead || !strings.Contains(tk.LastError, "upstream down") {
		t.Fatalf("task is %s with last error %q; want dead with the handler's error", tk.Status, tk.LastError)
	}

	if err := f.q.Requeue(ctx, id); err != nil {
		t.Fatal(err)
	}
	f.waitEvent(t, "succeeded", id)
	if got := f.get(t, id).Status; got != s3queue.Succeeded {
		t.Errorf("status after requeue and a second run %s, want succeeded", got)
	}
	if err := f.q.Requeue(ctx, id); !errors.Is(err, s3queue.ErrNotRequeueable) {
		t.Errorf("Requeue of a succeeded task: %v, want ErrNotRequeueable", err)
	}
}

func TestMonitorAppliesRetention(t *testing.T) {
	f := setup(t, s3queue.Config{Monitor: s3queue.MonitorConfig{Retention: time.Hour, Interval: 10 * time.Millisecond}})
	id := f.submit(t, "resize", nil, s3queue.SubmitOptions{})
	stopWorker := f.runWorker(t, map[string]s3queue.Handler{
		"resize": func(context.Context, *s3queue.Task) (json.RawMessage, error) { return nil, nil },
	})
	f.waitEvent(t, "succeeded", id)
	stopWorker()
	key := task.Key(f.get(t, id).Shard, id)

	// Two hours later by S3 time, the finished task is past its retention.
	later := time.Now().Add(2 * time.Hour)
	f.store.SetNow(func() time.Time { return time.Now().Add(2 * time.Hour) })
	m, err := f.q.NewMonitor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stop := runUntilStopped(t, "monitor", m.Run)
	timeout := time.After(deadline)
	for deleted := false; !deleted; {
		select {
		case k := <-f.store.deleted:
			deleted = k == key
		case <-timeout:
			t.Fatalf("the monitor did not delete %s within %v (S3 time %v)", key, deadline, later)
		}
	}
	stop()
	if _, err := f.q.Get(context.Background(), id); !errors.Is(err, s3queue.ErrNotFound) {
		t.Errorf("Get after retention: %v, want ErrNotFound", err)
	}
	if s := m.Stats(); s.Deleted != 1 {
		t.Errorf("monitor stats: %+v, want one task deleted", s)
	}
}

func TestListAndStats(t *testing.T) {
	var skips []string
	f := setup(t, s3queue.Config{OnSkip: func(key string, err error) {
		if err == nil {
			t.Errorf("OnSkip(%s) without a reason", key)
		}
		skips = append(skips, key)
	}})
	ctx := context.Background()
	first := f.submit(t, "a", nil, s3queue.SubmitOptions{})
	f.submit(t, "b", nil, s3queue.SubmitOptions{Delay: time.Hour})
	canceled := f.submit(t, "c", nil, s3queue.SubmitOptions{})
	if _, err := f.q.Cancel(ctx, canceled); err != nil {
		t.Fatal(err)
	}
	// A stray object under tasks/ is reported and skipped.
	junk, err := task.NewID(time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	junkKey := task.Key(0, junk)
	if _, err := f.store.Put(ctx, junkKey, []byte("not a task\n"), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wantSkips := func(call string) {
		t.Helper()
		if len(skips) != 1 || skips[0] != junkKey {
			t.Errorf("%s reported %v as skipped, want %s alone", call, skips, junkKey)
		}
		skips = nil
	}

	all, err := f.q.List(ctx, s3queue.ListOptions{})
	if err != nil || len(all) != 3 {
		t.Fatalf("List: %d tasks, err %v; want 3", len(all), err)
	}
	wantSkips("List")
	got, err := f.q.List(ctx, s3queue.ListOptions{Status: s3queue.Canceled})
	if err != nil || len(got) != 1 || got[0].ID != canceled {
		t.Errorf("List of canceled tasks: %v, err %v; want task %s", got, err, canceled)
	}
	skips = nil
	if got, err := f.q.List(ctx, s3queue.ListOptions{Limit: 2}); err != nil || len(got) != 2 {
		t.Errorf("List with limit 2: %d tasks, err %v", len(got), err)
	}
	if _, err := f.q.List(ctx, s3queue.ListOptions{Status: "lost"}); err == nil {
		t.Error("List of status \"lost\" succeeded")
	}
	if _, err := f.q.List(ctx, s3queue.ListOptions{Limit: -1}); err == nil {
		t.Error("List with limit -1 succeeded")
	}

	// The server's own time, as an operator compares it with the tasks'.
	at := time.Now().Add(time.Minute).Truncate(time.Second).UTC()
	f.store.SetNow(func() time.Time { return at })
	skips = nil
	s, err := f.q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantSkips("Stats")
	if s.Total != 3 || s.ByStatus[s3queue.Pending] != 2 || s.ByStatus[s3queue.Canceled] != 1 || s.Skipped != 1 {
		t.Errorf("Stats: %+v, want 3 tasks: 2 pending, 1 canceled, and 1 skipped object", s)
	}
	if _, ok := s.ByStatus[s3queue.Dead]; !ok {
		t.Errorf("Stats.ByStatus %v has no entry for dead", s.ByStatus)
	}
	if s.OldestPending == nil || s.OldestPending.ID != first {
		t.Errorf("oldest pending %v, want %s", s.OldestPending, first)
	}
	if s.Shards != 16 || !s.ServerTime.Equal(at) {
		t.Errorf("Stats: %d shards at %v, want 16 at the server's %v", s.Shards, s.ServerTime, at)
	}

	// A requeued task is announced by a ready pointer beside the tasks:
	// the queue's own, passed over without a report.
	if err := f.q.Requeue(ctx, canceled); err != nil {
		t.Fatal(err)
	}
	page, err := f.store.List(ctx, "tasks/", s3store.ListOptions{})
	if err != nil || !slices.ContainsFunc(page.Objects, func(o s3store.ObjectInfo) bool { return strings.HasSuffix(o.Key, ".ready") }) {
		t.Fatalf("no ready pointer after a requeue (err %v): %v", err, page.Objects)
	}
	if s, err := f.q.Stats(ctx); err != nil || s.Total != 3 || s.ByStatus[s3queue.Pending] != 3 || s.Skipped != 1 {
		t.Errorf("Stats after a requeue: %+v, err %v; want 3 pending tasks and 1 skipped object", s, err)
	}
	wantSkips("Stats after a requeue")
}

func TestTasks(t *testing.T) {
	f := setup(t, s3queue.Config{})
	ctx := context.Background()
	want := map[string]bool{}
	for range 3 {
		want[f.submit(t, "a", nil, s3queue.SubmitOptions{})] = true
	}
	n := 0
	for tk, err := range f.q.Tasks(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if !want[tk.ID] {
			t.Errorf("Tasks yielded %s, not a task submitted", tk.ID)
		}
		delete(want, tk.ID)
		n++
	}
	if n != 3 || len(want) != 0 {
		t.Errorf("Tasks yielded %d tasks, missed %v", n, want)
	}
	n = 0
	for range f.q.Tasks(ctx) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("a loop that broke at once saw %d tasks", n)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for tk, err := range f.q.Tasks(canceled) {
		if tk != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("Tasks on a canceled context yielded %v, %v; want only context.Canceled", tk, err)
		}
	}
}

func TestMustExist(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := s3queue.Config{Store: "mem://shared", Logger: quiet, MustExist: true}
	_, err := s3queue.OpenStore(ctx, st, cfg)
	if !errors.Is(err, s3queue.ErrNoQueue) || !strings.Contains(err.Error(), "mem://shared") {
		t.Fatalf("OpenStore on an empty store with MustExist: %v, want ErrNoQueue naming the store", err)
	}
	if n := st.Len(); n != 0 {
		t.Fatalf("OpenStore with MustExist wrote %d objects into a store without a queue", n)
	}
	if _, err := s3queue.OpenStore(ctx, st, s3queue.Config{Logger: quiet, Shards: 4}); err != nil {
		t.Fatal(err)
	}
	q, err := s3queue.OpenStore(ctx, st, cfg)
	if err != nil {
		t.Fatalf("OpenStore with MustExist on an existing queue: %v", err)
	}
	if m := q.Manifest(); m.Shards != 4 {
		t.Errorf("Manifest: %d shards, want the queue's 4", m.Shards)
	}
}

// TestOneClock: the producer, the worker and the monitor of a queue share
// one authoritative clock, so S3 time is asked for once, not once per
// service.
func TestOneClock(t *testing.T) {
	st := &datelessStore{Store: mem.New(), lists: make(chan struct{}, 1)}
	f := setupOn(t, st, s3queue.Config{})
	opened := st.nows.Load() // creating a queue checks the provider, which reads the time
	id := f.submit(t, "resize", nil, s3queue.SubmitOptions{})
	if n := st.nows.Load() - opened; n != 1 {
		t.Fatalf("%d time requests for a submit, want 1", n)
	}

	m, err := f.q.NewMonitor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	select { // drop any LIST before the monitor's
	case <-st.lists:
	default:
	}
	runUntilStopped(t, "monitor", m.Run)
	select { // a tick reads the clock before it lists
	case <-st.lists:
	case <-time.After(deadline):
		t.Fatalf("the monitor did not list within %v", deadline)
	}
	f.runWorker(t, map[string]s3queue.Handler{
		"resize": func(context.Context, *s3queue.Task) (json.RawMessage, error) { return nil, nil },
	})
	f.waitEvent(t, "succeeded", id)
	if n := st.nows.Load() - opened; n != 1 {
		t.Errorf("%d time requests for a submit, a monitor tick and a task run, want 1: the services do not share the queue's clock", n)
	}
}

// The queue's Local paces its services: a monitor ticking every hour on a
// manual clock ticks again as soon as that clock is moved, not an hour of
// real time later.
func TestServicesRunOnTheQueuesLocalClock(t *testing.T) {
	local := clock.NewManual(time.Now())
	f := setupOn(t, mem.New(), s3queue.Config{Local: local, Monitor: s3queue.MonitorConfig{Interval: time.Hour}})
	m, err := f.q.NewMonitor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	runUntilStopped(t, "monitor", m.Run)
	give := time.After(deadline)
	for m.Stats().Ticks < 1 { // Run's first tick comes at once
		select {
		case <-time.After(10 * time.Millisecond):
		case <-give:
			t.Fatalf("the monitor did not tick within %v", deadline)
		}
	}
	for m.Stats().Ticks < 2 {
		local.Advance(time.Hour) // until Run's timer is armed and fires
		select {
		case <-time.After(10 * time.Millisecond):
		case <-give:
			t.Fatalf("the monitor did not tick again within %v of moving its queue's local clock an hour", deadline)
		}
	}
}

// countingReader is a seeded-looking reader that is not safe for
// concurrent use: the race detector reports two unserialised reads.
type countingReader struct{ n uint64 }

func (r *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		r.n++
		p[i] = byte(r.n)
	}
	return len(p), nil
}

// The services made from one Config share its Rand: their draws are
// serialised by the queue (go test -race proves it), and each worker still
// gets its own id.
func TestWorkersShareOneRand(t *testing.T) {
	src := &countingReader{}
	f := setupOn(t, mem.New(), s3queue.Config{Rand: src})
	ids := make(chan string, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := f.q.NewWorker(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			ids <- w.ID()
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := f.q.NewMonitor(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	close(ids)
	seen := make(map[string]bool)
	for id := range ids {
		if seen[id] {
			t.Errorf("two workers got id %s", id)
		}
		seen[id] = true
	}
}

// A worker id set by hand serves one worker of the queue: a second would
// share its fleet entry.
func TestNewWorkerRefusesATakenID(t *testing.T) {
	f := setupOn(t, mem.New(), s3queue.Config{Worker: s3queue.WorkerConfig{ID: "w1"}})
	if _, err := f.q.NewWorker(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := f.q.NewWorker(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"w1"`) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("second NewWorker with id w1: %v, want an error naming the id", err)
	}
}

// The fields a Queue owns are never overwritten: a service config that sets
// them to another value than the queue's is an error naming the field.
func TestServiceConfigConflictingWithTheQueueIsAnError(t *testing.T) {
	ctx := context.Background()
	other := clock.New(mem.New(), clock.Config{})
	for _, tc := range []struct {
		name  string
		cfg   s3queue.Config
		field string
		new   func(q *s3queue.Queue) error
	}{
		{"worker shards", s3queue.Config{Shards: 4, Worker: s3queue.WorkerConfig{Shards: 8}}, "Config.Worker.Shards",
			func(q *s3queue.Queue) error { _, err := q.NewWorker(ctx); return err }},
		{"monitor dispatch mode", s3queue.Config{DispatchMode: s3queue.DispatchShared, Monitor: s3queue.MonitorConfig{DispatchMode: s3queue.DispatchDirect}}, "Config.Monitor.DispatchMode",
			func(q *s3queue.Queue) error { _, err := q.NewMonitor(ctx); return err }},
		{"worker clock", s3queue.Config{Worker: s3queue.WorkerConfig{Clock: other}}, "Config.Worker.Clock",
			func(q *s3queue.Queue) error { _, err := q.NewWorker(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = quiet
			q, err := s3queue.OpenStore(ctx, mem.New(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.new(q); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want an error naming %s", err, tc.field)
			}
		})
	}
	t.Run("producer shards", func(t *testing.T) {
		_, err := s3queue.OpenStore(ctx, mem.New(), s3queue.Config{Logger: quiet, Shards: 4, Producer: s3queue.ProducerConfig{Shards: 8}})
		if err == nil || !strings.Contains(err.Error(), "Config.Producer.Shards") {
			t.Fatalf("got %v, want an error naming Config.Producer.Shards", err)
		}
	})
	t.Run("the same values are fine", func(t *testing.T) {
		q, err := s3queue.OpenStore(ctx, mem.New(), s3queue.Config{Logger: quiet, Shards: 4, DispatchMode: s3queue.DispatchShared,
			Worker: s3queue.WorkerConfig{Shards: 4, DispatchMode: s3queue.DispatchShared}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.NewWorker(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
