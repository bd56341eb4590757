package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

var remote = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{0x00, 0xf0, 2}, TraceFlags: trace.FlagsSampled, Remote: true})

// With nothing installed, the task carries W3C Trace Context of ctx's
// span, and nothing when ctx has none.
func TestInjectExtract(t *testing.T) {
	tr := New(nil, nil)
	if got := tr.Inject(context.Background()); got != nil {
		t.Errorf("Inject without a span context: %v, want nil", got)
	}
	carried := tr.Inject(trace.ContextWithSpanContext(context.Background(), remote))
	want := "00-" + remote.TraceID().String() + "-" + remote.SpanID().String() + "-01"
	if len(carried) != 1 || carried["traceparent"] != want {
		t.Fatalf("Inject: %v, want traceparent %s", carried, want)
	}
	if sc := trace.SpanContextFromContext(tr.Extract(context.Background(), carried)); !sc.Equal(remote) {
		t.Errorf("Extract: %v, want %v", sc, remote)
	}
	for _, bad := range []map[string]string{nil, {"traceparent": "00-zz"}} {
		if sc := trace.SpanContextFromContext(tr.Extract(context.Background(), bad)); sc.IsValid() {
			t.Errorf("Extract(%v): %v, want none", bad, sc)
		}
	}
	// Whatever the program installs globally, a task's context is W3C
	// Trace Context alone: baggage is neither written nor read.
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	defer otel.SetTextMapPropagator(prev)
	m, _ := baggage.NewMember("auth", "secret")
	bag, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), remote), bag)
	if got := tr.Inject(ctx); len(got) != 1 || got["traceparent"] != want {
		t.Errorf("Inject with baggage and a composite global propagator: %v, want traceparent alone", got)
	}
	got := tr.Extract(context.Background(), map[string]string{"traceparent": want, "baggage": "auth=secret"})
	if b := baggage.FromContext(got); b.Len() != 0 {
		t.Errorf("Extract read baggage %v from a task", b)
	}
}
