package dispatch

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the dispatcher's spans.
const tracerName = "github.com/baton-dev/baton/internal/dispatch"

// Span names of the dispatcher's transactions.
const (
	// SpanGroupCommit is a group commit's transaction: the transitions of a batch, with its size
	// in AttrBatchSize, a child of the first traced transition's caller and linked to the others'.
	SpanGroupCommit = "baton.group_commit"
	// SpanTransaction is one transition's transaction of its own (group commit off, a batch of
	// one, or a retry alone).
	SpanTransaction = "baton.transaction"
	// AttrBatchSize is the number of transitions a group commit applied.
	AttrBatchSize = "baton.batch_size"
)

// endSpan ends a transaction's span with its outcome.
type endSpan func(err error)

func noEnd(error) {}

// traceTx starts the span of a transaction, a child of ctx's span and linked to the spans of
// links (the other callers of a group commit; the first of them with a span is the parent when ctx
// has none). Only the transactions of traced callers are spans: one whose callers have no span
// (a background loop's: the reaper, the relay, pipeline sources) would be a trace of its own every
// few seconds, which says nothing. With tracing off it returns ctx and does nothing.
func (d *Dispatcher) traceTx(ctx context.Context, name string, size int, links []context.Context) (context.Context, endSpan) {
	if d.tracer == nil {
		return ctx, noEnd
	}
	parent := trace.SpanContextFromContext(ctx)
	for _, l := range links {
		if parent.IsValid() {
			break
		}
		if parent = trace.SpanContextFromContext(l); parent.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, parent)
		}
	}
	if !parent.IsValid() {
		return ctx, noEnd
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if name == SpanGroupCommit {
		opts = append(opts, trace.WithAttributes(attribute.Int(AttrBatchSize, size)))
		for _, l := range links {
			if sc := trace.SpanContextFromContext(l); sc.IsValid() && !sc.Equal(parent) {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
	}
	ctx, span := d.tracer.Start(ctx, name, opts...)
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
