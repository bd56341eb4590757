package s3queue_test

import (
	"context"
	"encoding/json"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/s3queue/s3queue"
)

// Config.TracerProvider reaches the queue's producer and its workers: a
// submit's trace continues in the worker that runs the task.
func TestQueueTracerProviderReachesProducerAndWorkers(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := setup(t, s3queue.Config{TracerProvider: tp})
	id := f.submit(t, "job", nil, s3queue.SubmitOptions{})
	stop := f.runWorker(t, map[string]s3queue.Handler{"job": func(context.Context, *s3queue.Task) (json.RawMessage, error) { return nil, nil }})
	f.waitEvent(t, s3queue.EventSucceeded, id)
	stop() // the commit's span has ended once Run returns

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	submit, run := byName["s3queue.submit"], byName["s3queue.run"]
	if submit == nil || run == nil || byName["s3queue.claim"] == nil || byName["s3queue.commit"] == nil {
		t.Fatalf("spans recorded: %v; want submit, claim, run and commit", byName)
	}
	if run.SpanContext().TraceID() != submit.SpanContext().TraceID() || run.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Errorf("the run span is not the submit span's child: parent %s, want %s", run.Parent().SpanID(), submit.SpanContext().SpanID())
	}
}
