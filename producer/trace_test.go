package producer_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/producer"
)

// The common global propagator (tracecontext,baggage) must not put the
// caller's W3C baggage into the task: a large baggage made every submit
// fail (the trace field is bounded), and a small one (an auth token, say)
// was stored in the task and shown by get --json and the dashboard.
func TestBaggageNeverReachesTheTask(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	for _, size := range []int{20, 2000} {
		secret := "tok-" + strings.Repeat("s", size)
		m, err := baggage.NewMember("auth", secret)
		if err != nil {
			t.Fatal(err)
		}
		bag, err := baggage.New(m)
		if err != nil {
			t.Fatal(err)
		}
		ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), bag)
		p, _ := setup(t)
		id, err := p.Submit(ctx, "t", nil, producer.Options{})
		if err != nil {
			t.Fatalf("submit with %d bytes of baggage: %v", size, err)
		}
		got, err := p.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Trace) != 1 || !strings.Contains(got.Trace["traceparent"], sc.TraceID().String()) {
			t.Errorf("with %d bytes of baggage the task carries %v, want its traceparent alone", size, got.Trace)
		}
	}
}

// A tracestate too large for a task (far beyond what its specification
// allows) costs the task its tracestate, never the submit.
func TestAnOversizedTraceStateDoesNotFailTheSubmit(t *testing.T) {
	ts := trace.TraceState{}
	var err error
	for i := 0; i < 8; i++ {
		if ts, err = ts.Insert("k"+string(rune('a'+i)), strings.Repeat("v", 200)); err != nil {
			t.Fatal(err)
		}
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	p, _ := setup(t)
	id, err := p.Submit(trace.ContextWithSpanContext(context.Background(), sc), "t", nil, producer.Options{})
	if err != nil {
		t.Fatalf("submit with a %d-byte tracestate: %v", len(ts.String()), err)
	}
	got, err := p.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Trace) != 1 || got.Trace["traceparent"] == "" {
		t.Errorf("the task carries %v, want its traceparent alone", got.Trace)
	}
}
