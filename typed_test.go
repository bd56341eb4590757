package s3queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue"
)

// typedStart registers fn as the typed handler of Resize on a worker of
// f's queue and runs it until the test ends.
func typedStart[R any](t *testing.T, f *fixture, fn func(context.Context, *s3queue.Job[Resize]) (R, error)) {
	t.Helper()
	w, err := f.q.NewWorker(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s3queue.Handle(w, fn)
	runUntilStopped(t, "worker", w.Run)
}

// An input that does not decode as the handler's Args ends the task dead
// at its first attempt, without calling the handler, its last error
// naming the task type, the Go type and the decode error.
func TestTypedHandlerRefusesMalformedInputAtOnce(t *testing.T) {
	f := setup(t, s3queue.Config{})
	called := false
	typedStart(t, f, func(context.Context, *s3queue.Job[Resize]) (any, error) {
		called = true
		return nil, nil
	})
	id := f.submit(t, "resize", json.RawMessage(`{"image": 42}`), s3queue.SubmitOptions{MaxAttempts: 5})
	f.waitEvent(t, s3queue.EventDead, id)
	tk := f.get(t, id)
	if called || tk.Attempt != 1 {
		t.Errorf("handler called %v, attempts %d: want no call and one attempt", called, tk.Attempt)
	}
	for _, want := range []string{`task type "resize"`, "s3queue_test.Resize", "cannot unmarshal number"} {
		if !strings.Contains(tk.LastError, want) {
			t.Errorf("last error %q does not say %q", tk.LastError, want)
		}
	}
	_, err := s3queue.ResultOf[Thumb](context.Background(), f.q, id)
	if !errors.Is(err, s3queue.ErrNotSucceeded) || !strings.Contains(err.Error(), "dead") {
		t.Errorf("ResultOf of a dead task: %v, want ErrNotSucceeded saying it is dead", err)
	}
}

// The Job carries the task's identity and counts; the result is stored as
// JSON, and a nil one as none; ResultOf decodes it.
func TestTypedHandlerSeesJobAndStoresResult(t *testing.T) {
	f := setup(t, s3queue.Config{})
	var mu sync.Mutex
	jobs := map[string]s3queue.Job[Resize]{}
	typedStart(t, f, func(_ context.Context, j *s3queue.Job[Resize]) (*Thumb, error) {
		mu.Lock()
		jobs[j.ID] = *j
		mu.Unlock()
		if j.Args.Image == "" {
			return nil, nil
		}
		return &Thumb{URL: "t/" + j.Args.Image}, nil
	})
	ctx := context.Background()
	id, err := f.q.SubmitArgs(ctx, Resize{Image: "a.png", Width: 3}, s3queue.SubmitOptions{MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	none, err := f.q.SubmitArgs(ctx, Resize{})
	if err != nil {
		t.Fatal(err)
	}
	for left := map[string]bool{id: true, none: true}; len(left) > 0; {
		select {
		case e := <-f.events:
			if e.Kind == s3queue.EventSucceeded {
				delete(left, e.TaskID)
			}
		case <-time.After(deadline):
			t.Fatalf("tasks %v did not succeed within %v", left, deadline)
		}
	}
	mu.Lock()
	j := jobs[id]
	mu.Unlock()
	if j.ID != id || j.Type != "resize" || j.Attempt != 1 || j.MaxAttempts != 4 || j.Snoozes != 0 ||
		j.Args != (Resize{Image: "a.png", Width: 3}) || j.Task == nil || j.Task.ID != id {
		t.Errorf("job %+v", j)
	}
	th, err := s3queue.ResultOf[Thumb](ctx, f.q, id)
	if err != nil || th.URL != "t/a.png" {
		t.Errorf("ResultOf: %+v, %v", th, err)
	}
	if tk := f.get(t, none); tk.Result != nil {
		t.Errorf("a nil result was stored as %s", tk.Result)
	}
	if _, err := f.q.SubmitArgs(ctx, Resize{}, s3queue.SubmitOptions{}, s3queue.SubmitOptions{}); err == nil {
		t.Error("SubmitArgs took two SubmitOptions")
	}
}

// Handler middleware runs in order, the first outermost, inside the run's
// span, around every invocation; it may replace the outcome.
func TestHandlerMiddlewareWrapsEveryInvocation(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var mu sync.Mutex
	var order []string
	layer := func(name string) s3queue.HandlerMiddleware {
		return func(ctx context.Context, ti *s3queue.TaskInfo, next func(context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s>%s/%d/span:%v", name, ti.Type, ti.Attempt, trace.SpanFromContext(ctx).SpanContext().IsValid()))
			mu.Unlock()
			if string(ti.Task.Input) == `"refuse"` {
				return nil, s3queue.Permanent(errors.New("refused by " + name))
			}
			res, err := next(ctx)
			mu.Lock()
			order = append(order, name+"<")
			mu.Unlock()
			return res, err
		}
	}
	cfg := s3queue.Config{TracerProvider: tp}
	cfg.Worker.Middleware = []s3queue.HandlerMiddleware{layer("a"), layer("b")}
	f := setup(t, cfg)
	f.runWorker(t, map[string]s3queue.Handler{"job": func(context.Context, *s3queue.Task) (json.RawMessage, error) {
		mu.Lock()
		order = append(order, "handler")
		mu.Unlock()
		return json.RawMessage(`1`), nil
	}})
	id := f.submit(t, "job", nil, s3queue.SubmitOptions{})
	f.waitEvent(t, s3queue.EventSucceeded, id)
	refused := f.submit(t, "job", "refuse", s3queue.SubmitOptions{})
	f.waitEvent(t, s3queue.EventDead, refused)
	mu.Lock()
	got := strings.Join(order, " ")
	mu.Unlock()
	if want := "a>job/1/span:true b>job/1/span:true handler b< a< a>job/1/span:true"; got != want {
		t.Errorf("calls %q, want %q", got, want)
	}
	if tk := f.get(t, refused); !strings.Contains(tk.LastError, "refused by a") {
		t.Errorf("the middleware's outcome was not recorded: last error %q", tk.LastError)
	}
}

// Submit middleware sees every submit, SubmitBatch's and SubmitArgs' too,
// may change the request, and refuses by returning an error: nothing is
// created.
func TestSubmitMiddlewareWrapsEverySubmit(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	cfg := s3queue.Config{Submit: s3queue.SubmitDefaults{MaxAttempts: 7}}
	cfg.Producer.Middleware = []s3queue.SubmitMiddleware{func(ctx context.Context, req s3queue.Request, next func(context.Context, s3queue.Request) (string, error)) (string, error) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s/%d", req.Type, req.Options.MaxAttempts))
		mu.Unlock()
		if req.Type == "forbidden" {
			return "", errors.New("not allowed")
		}
		req.Options.ShardKey = "tenant-1"
		return next(ctx, req)
	}}
	f := setup(t, cfg)
	ctx := context.Background()
	a := f.submit(t, "job", nil, s3queue.SubmitOptions{})
	b, err := f.q.SubmitArgs(ctx, Resize{})
	if err != nil {
		t.Fatal(err)
	}
	res := f.q.SubmitBatch(ctx, []s3queue.Request{{Type: "batch"}, {Type: "forbidden"}})
	if res[0].Err != nil || res[1].Err == nil || !strings.Contains(res[1].Err.Error(), "not allowed") {
		t.Fatalf("batch results %+v", res)
	}
	if _, err := f.q.Submit(ctx, "forbidden", nil, s3queue.SubmitOptions{}); err == nil {
		t.Error("a refused submit succeeded")
	}
	for _, id := range []string{a, b, res[0].ID} {
		if tk := f.get(t, id); tk.ShardKey != "tenant-1" {
			t.Errorf("task %s has shard key %q: the middleware's change was lost", id, tk.ShardKey)
		}
	}
	if st, err := f.q.Stats(ctx); err != nil || st.Total != 3 {
		t.Errorf("stats %+v, %v: want 3 tasks, the refused ones not created", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, " "); !strings.Contains(got, "job/7 resize/7") || len(seen) != 5 {
		t.Errorf("middleware saw %q", got)
	}
}

// The Gatherer holds the s3queue_* metrics alone (a service's own registry
// has the runtime's), the monitor's queue-level gauges among them.
func TestMetricsGathererHoldsOnlyQueueMetrics(t *testing.T) {
	m := s3queue.NewMetrics()
	f := setup(t, s3queue.Config{Metrics: m})
	f.submit(t, "job", nil, s3queue.SubmitOptions{})
	if _, err := s3queue.OpenStore(context.Background(), f.store, s3queue.Config{Metrics: m, Logger: quiet}); err == nil {
		t.Error("one Metrics served two queues")
	}
	mon, err := f.q.NewMonitor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = mon
	fams, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, fam := range fams {
		names[fam.GetName()] = true
		if !strings.HasPrefix(fam.GetName(), "s3queue_") {
			t.Errorf("gathered %s", fam.GetName())
		}
	}
	for _, want := range []string{"s3queue_s3_requests_total", "s3queue_build_info"} {
		if !names[want] {
			t.Errorf("no %s among %v", want, names)
		}
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "go_goroutines") || !strings.Contains(string(body), "s3queue_s3_requests_total") {
		t.Errorf("Handler serves no runtime or task metrics:\n%.500s", body)
	}
}
