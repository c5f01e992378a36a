package worker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/baton-dev/baton/worker"

// withTraceparent returns ctx carrying the remote span context that the W3C traceparent tp names,
// or ctx itself when tp is empty or not valid.
func withTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// startSpan starts the span "baton.task <name>" of a's handler call, a child of the job's trace
// context, with the host's tracer provider (WithTracerProvider, else the global one).
func (h *host) startSpan(a *attempt) (context.Context, trace.Span) {
	tp := h.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := a.task
	return tp.Tracer(tracerName).Start(a.handlerCtx, "baton.task "+t.Name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("baton.task.id", t.ID),
			attribute.String("baton.task.key", t.Key),
			attribute.String("baton.job.id", t.JobID),
			attribute.Int("baton.attempt", t.Attempt),
			attribute.String("baton.worker.id", h.workerID)))
}
