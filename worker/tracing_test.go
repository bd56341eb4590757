package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// recorded is a tracer provider that keeps the spans it ends.
func recorded(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// attr returns the value of span s's attribute key, "" if it has none.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// spans returns the ended spans named name whose s3queue.task.id is id.
func spans(rec *tracetest.SpanRecorder, name, id string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name && attr(s, "s3queue.task.id") == id {
			out = append(out, s)
		}
	}
	return out
}

// rawTask returns the stored bytes of task id in a queue of one shard.
func rawTask(t *testing.T, st s3store.Store, id string) []byte {
	t.Helper()
	obj, err := st.Get(context.Background(), task.Key(0, id))
	if err != nil {
		t.Fatal(err)
	}
	return obj.Body
}

// A producer's trace continues in the worker: the task carries the
// submit's trace context, and the worker's claim, run and commit spans
// are its children, attempt after attempt; the handler's own spans are the
// run's children. A task submitted without tracing carries nothing.
func TestTracesContinueFromSubmitToWorker(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	ptp, prec := recorded(t)
	wtp, wrec := recorded(t)
	p, err := producer.New(ctx, st, producer.Config{Shards: 1, TracerProvider: ptp})
	if err != nil {
		t.Fatal(err)
	}
	// The user's own span, around the submits.
	uctx, user := ptp.Tracer("app").Start(ctx, "handle request")
	ok, err := p.Submit(uctx, "job", "ok", producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	retried, err := p.Submit(uctx, "job", "fail once", producer.Options{MaxAttempts: 2,
		Retry: &task.RetryPolicy{InitialDelay: task.Duration(10 * time.Millisecond), Multiplier: 1}})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := p.Submit(uctx, "job", "fail", producer.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	batch := p.SubmitBatch(uctx, []producer.Request{{Type: "job", Input: "ok"}, {Type: "job", Input: "ok"}})
	for _, r := range batch {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	user.End()
	// A producer that traces nothing, with no provider installed.
	plain, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	untraced, err := plain.Submit(ctx, "job", "ok", producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Called within a span, it passes that span's trace on.
	passed, err := plain.Submit(uctx, "job", "ok", producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b := rawTask(t, st, passed); !bytes.Contains(b, []byte(user.SpanContext().TraceID().String())) {
		t.Errorf("an untraced producer's task lacks the trace of the span it was submitted in:\n%s", b)
	}

	if b := rawTask(t, st, untraced); bytes.Contains(b, []byte(`"trace"`)) {
		t.Errorf("a task submitted without tracing has a trace field:\n%s", b)
	}
	if b := rawTask(t, st, ok); !bytes.Contains(b, []byte(`"trace":{"traceparent":"00-`)) {
		t.Errorf("a traced submit's task lacks its traceparent:\n%s", b)
	} else if !task.PendingBySize(int64(len(b))) {
		t.Errorf("a traced pending task's size %d does not say pending (the size hint's padding)", len(b))
	}

	w, err := worker.New(ctx, st, worker.Config{ID: "w-trace", Shards: 1, OwnShards: []int{0}, TracerProvider: wtp,
		PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("job", func(hctx context.Context, tk *task.Task) (json.RawMessage, error) {
		// User code traces with its own tracer: a child of the run.
		_, s := wtp.Tracer("app").Start(hctx, "user work "+tk.ID)
		defer s.End()
		switch string(tk.Input) {
		case `"fail"`:
			return nil, worker.Permanent(errors.New("bad input"))
		case `"fail once"`:
			if tk.Attempt == 1 {
				return nil, errors.New("try again")
			}
		}
		return nil, nil
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for _, id := range []string{ok, retried, untraced, passed, batch[0].ID, batch[1].ID} {
		waitStatus(t, p, id, task.Succeeded)
	}
	waitStatus(t, p, dead, task.Dead)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b := rawTask(t, st, ok); !bytes.Contains(b, []byte(`"trace":`)) || !task.FinishedBySize(int64(len(b))) {
		t.Errorf("the finished task lost its trace context, or its size %d does not say finished:\n%s", len(b), b)
	}

	one := func(rec *tracetest.SpanRecorder, name, id string) sdktrace.ReadOnlySpan {
		t.Helper()
		ss := spans(rec, name, id)
		if len(ss) != 1 {
			t.Fatalf("%d %s spans of task %s, want 1", len(ss), name, id)
		}
		return ss[0]
	}
	// checkWorker checks that the worker's spans of task id continue the
	// trace of its submit span, and returns its run spans.
	checkWorker := func(id string, submit sdktrace.ReadOnlySpan, attempts int) []sdktrace.ReadOnlySpan {
		t.Helper()
		for _, name := range []string{"s3queue.claim", "s3queue.run", "s3queue.commit"} {
			ss := spans(wrec, name, id)
			if len(ss) != attempts {
				t.Fatalf("%d %s spans of task %s, want %d", len(ss), name, id, attempts)
			}
			for i, s := range ss {
				if s.SpanContext().TraceID() != submit.SpanContext().TraceID() || s.Parent().SpanID() != submit.SpanContext().SpanID() || !s.Parent().IsRemote() {
					t.Errorf("task %s: %s span %d: trace %s parent %s, want trace %s parent %s (remote)", id, name, i,
						s.SpanContext().TraceID(), s.Parent().SpanID(), submit.SpanContext().TraceID(), submit.SpanContext().SpanID())
				}
				if got := attr(s, "s3queue.task.attempt"); got != fmt.Sprint(i+1) {
					t.Errorf("task %s: %s span %d: attempt %s", id, name, i, got)
				}
				if attr(s, "messaging.system") != "s3queue" || attr(s, "s3queue.worker.id") != "w-trace" {
					t.Errorf("task %s: %s span attributes %v", id, name, s.Attributes())
				}
			}
		}
		return spans(wrec, "s3queue.run", id)
	}

	sub := one(prec, "s3queue.submit", ok)
	if sub.Parent().SpanID() != user.SpanContext().SpanID() || sub.SpanKind() != trace.SpanKindProducer ||
		attr(sub, "s3queue.task.shard") != "0" || attr(sub, "s3queue.task.type") != "job" {
		t.Errorf("submit span: parent %s (want the user's %s), kind %s, attributes %v", sub.Parent().SpanID(), user.SpanContext().SpanID(), sub.SpanKind(), sub.Attributes())
	}
	run := checkWorker(ok, sub, 1)[0]
	if run.Status().Code == codes.Error {
		t.Errorf("the run of a succeeded task has status %v", run.Status())
	}
	if c := one(wrec, "s3queue.claim", ok); attr(c, "s3queue.outcome") != "claimed" {
		t.Errorf("claim span attributes %v", c.Attributes())
	}
	if c := one(wrec, "s3queue.commit", ok); attr(c, "s3queue.outcome") != "succeeded" || attr(c, "s3queue.task.status") != "succeeded" {
		t.Errorf("commit span attributes %v", c.Attributes())
	}
	var work sdktrace.ReadOnlySpan
	for _, s := range wrec.Ended() {
		if s.Name() == "user work "+ok {
			work = s
		}
	}
	if work == nil || work.Parent().SpanID() != run.SpanContext().SpanID() {
		t.Errorf("the handler's span is not a child of the run's: %v", work)
	}

	// A retry continues the same trace; the failed attempt's run is an
	// error.
	runs := checkWorker(retried, one(prec, "s3queue.submit", retried), 2)
	if runs[0].Status().Code != codes.Error || runs[0].Status().Description != "try again" || runs[1].Status().Code == codes.Error {
		t.Errorf("retried task's runs: status %v then %v", runs[0].Status(), runs[1].Status())
	}
	runs = checkWorker(dead, one(prec, "s3queue.submit", dead), 1)
	if runs[0].Status().Code != codes.Error || len(runs[0].Events()) == 0 || runs[0].Events()[0].Name != "exception" {
		t.Errorf("a failing handler's run span: status %v, events %v", runs[0].Status(), runs[0].Events())
	}
	if c := one(wrec, "s3queue.commit", dead); attr(c, "s3queue.outcome") != "dead" || attr(c, "s3queue.task.status") != "dead" {
		t.Errorf("commit span of the dead task: attributes %v", c.Attributes())
	}

	// A batch is a span, the parent of each submit.
	var bs []sdktrace.ReadOnlySpan
	for _, s := range prec.Ended() {
		if s.Name() == "s3queue.submit_batch" {
			bs = append(bs, s)
		}
	}
	if len(bs) != 1 || bs[0].Parent().SpanID() != user.SpanContext().SpanID() || attr(bs[0], "messaging.batch.message_count") != "2" {
		t.Fatalf("submit_batch spans %v", bs)
	}
	for _, r := range batch {
		s := one(prec, "s3queue.submit", r.ID)
		if s.Parent().SpanID() != bs[0].SpanContext().SpanID() {
			t.Errorf("batch task %s: submit span's parent %s, want the batch's", r.ID, s.Parent().SpanID())
		}
		checkWorker(r.ID, s, 1)
	}

	// The untraced task's attempt is a trace of its own, started by the
	// claim.
	claim := one(wrec, "s3queue.claim", untraced)
	if claim.Parent().IsValid() || claim.SpanContext().TraceID() == user.SpanContext().TraceID() {
		t.Errorf("an untraced task's claim has parent %v in trace %s", claim.Parent(), claim.SpanContext().TraceID())
	}
	if r := one(wrec, "s3queue.run", untraced); r.Parent().SpanID() != claim.SpanContext().SpanID() {
		t.Errorf("an untraced task's run is not the claim's child")
	}
}

// A Submitter's submissions run under its own context, yet their spans are
// children of the span of the ctx given to Add.
func TestSubmitterSpansAreChildrenOfAddsContext(t *testing.T) {
	ctx := context.Background()
	tp, rec := recorded(t)
	p, err := producer.New(ctx, mem.New(), producer.Config{Shards: 1, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ids := make(chan string, 1)
	s, err := p.NewSubmitter(producer.SubmitterConfig{OnResult: func(o producer.Outcome) { ids <- o.ID }})
	if err != nil {
		t.Fatal(err)
	}
	uctx, user := tp.Tracer("app").Start(ctx, "enqueue")
	if err := s.Add(uctx, producer.Request{Type: "job"}, nil); err != nil {
		t.Fatal(err)
	}
	user.End()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	id := <-ids
	ss := spans(rec, "s3queue.submit", id)
	if len(ss) != 1 || ss[0].Parent().SpanID() != user.SpanContext().SpanID() {
		t.Errorf("submit spans %v: want one, a child of the span given to Add", ss)
	}
}
