// Package tracing holds what the producer and the workers share of
// OpenTelemetry tracing: the span and attribute names, and the trace
// context a task carries from its submit to its workers (task.Task.Trace).
//
// It uses the OpenTelemetry API only, never the SDK: the user's
// TracerProvider decides whether and where spans go, and without one every
// call is a no-op that writes nothing to the task (docs/tracing.md). It
// makes no request of its own.
package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3queue/s3queue/task"
)

// ScopeName is the instrumentation scope of s3queue's tracer.
const ScopeName = "github.com/s3queue/s3queue"

// The spans s3queue starts.
const (
	// SpanSubmit: a producer's submit, from its call to the task written.
	SpanSubmit = "s3queue.submit"
	// SpanSubmitBatch: a producer's SubmitBatch, the parent of its
	// submits.
	SpanSubmitBatch = "s3queue.submit_batch"
	// SpanClaim: a worker's claim, the conditional PUT that takes a task.
	SpanClaim = "s3queue.claim"
	// SpanRun: one attempt's handler; its context is the handler's.
	SpanRun = "s3queue.run"
	// SpanCommit: the write of an attempt's outcome (or of a claimed task
	// handed back unrun).
	SpanCommit = "s3queue.commit"
)

// Attribute keys: OpenTelemetry's messaging conventions where they fit,
// s3queue.* for the rest.
const (
	MessagingSystem = attribute.Key("messaging.system")
	// Operation is messaging.operation.name: submit, claim, run, commit.
	Operation = attribute.Key("messaging.operation.name")
	// OperationType is messaging.operation.type: send, receive, process,
	// settle.
	OperationType = attribute.Key("messaging.operation.type")
	// MessageID is messaging.message.id: the task id.
	MessageID = attribute.Key("messaging.message.id")
	// Destination is messaging.destination.name: the task type, which
	// selects the handler.
	Destination = attribute.Key("messaging.destination.name")

	TaskID   = attribute.Key("s3queue.task.id")
	TaskType = attribute.Key("s3queue.task.type")
	Shard    = attribute.Key("s3queue.task.shard")
	// Attempt is the attempt a claim starts (1 for the first).
	Attempt = attribute.Key("s3queue.task.attempt")
	// Status is the task's status after a commit.
	Status = attribute.Key("s3queue.task.status")
	// Repeat: a submit whose idempotency key was already taken, answered
	// with the existing task's id.
	Repeat   = attribute.Key("s3queue.idempotency.repeat")
	WorkerID = attribute.Key("s3queue.worker.id")
	// BatchCount is messaging.batch.message_count: a batch's submissions.
	BatchCount = attribute.Key("messaging.batch.message_count")
	// BatchFailed counts a batch's submissions that failed.
	BatchFailed = attribute.Key("s3queue.batch.failed")
	// Outcome is what a claim or commit came to: claimed, lost_race or
	// error for a claim; the event kind (succeeded, failed, dead, snoozed,
	// canceled, released, rejected) or error for a commit.
	Outcome = attribute.Key("s3queue.outcome")
)

// System is the messaging.system attribute of every span.
var System = MessagingSystem.String("s3queue")

// Tracing is a service's tracer, and the carrier of a task's trace
// context.
//
// The context a task carries is always W3C Trace Context (traceparent and
// tracestate), whatever propagator the program installs: the task object
// is stored, shown by get --json and the dashboard, and bounded
// (task.MaxTraceBytes), so it must not pick up what a composite global
// propagator adds, such as W3C baggage (which often holds auth tokens or
// user ids, and of any size).
type Tracing struct {
	Tracer trace.Tracer
	log    *slog.Logger
}

// carrier is the only propagator a task's trace context goes through.
var carrier = propagation.TraceContext{}

// New returns the tracing of a service configured with tp: nil tp is the
// global TracerProvider (a no-op unless the program installs one, and
// followed when it is installed later). log, if not nil, hears at debug
// level of a trace context too large for a task (Inject).
func New(tp trace.TracerProvider, log *slog.Logger) Tracing {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return Tracing{Tracer: tp.Tracer(ScopeName), log: log}
}

// Inject returns the W3C trace context of ctx's span, for a task to carry,
// or nil when ctx has no valid span context (nothing is traced): the task
// then has no trace field.
//
// A context over task.MaxTraceBytes (a tracestate far beyond the 512
// bytes its specification allows) loses its tracestate, keeping the
// traceparent: a trace must never make a submit fail.
func (tr Tracing) Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	carrier.Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	if n := size(c); n > task.MaxTraceBytes {
		if tr.log != nil {
			tr.log.Debug("trace context too large for a task: its tracestate is dropped", "bytes", n, "limit", task.MaxTraceBytes)
		}
		c = propagation.MapCarrier{"traceparent": c["traceparent"]}
		if size(c) > task.MaxTraceBytes || c["traceparent"] == "" {
			return nil
		}
	}
	return c
}

// size is what task.Spec.Trace's bound counts: keys and values.
func size(c map[string]string) int {
	n := 0
	for k, v := range c {
		n += len(k) + len(v)
	}
	return n
}

// Extract returns ctx with the remote span context carried (W3C Trace
// Context), the parent of a task's spans in a worker; ctx as it is when
// carried is empty or not readable. Entries other than traceparent and
// tracestate (an older producer's baggage, say) are ignored.
func (tr Tracing) Extract(ctx context.Context, carried map[string]string) context.Context {
	if len(carried) == 0 {
		return ctx
	}
	return carrier.Extract(ctx, propagation.MapCarrier(carried))
}

// End ends span, recording err, if any, as its error.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
