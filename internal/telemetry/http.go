package telemetry

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/observe"
)

// Handler wraps next, a listener's handler whose routes are an http.ServeMux's, so that each
// request runs in a server span. The span is a child of the caller's span when the request
// carries a valid W3C traceparent header; its name is the method and the ServeMux pattern that
// matched ("POST /jobs", "GET /jobs/{jobId}"), never the raw path, so that one route is one
// span name. With tp nil (tracing off) Handler returns next itself.
func Handler(tp trace.TracerProvider, next http.Handler) http.Handler {
	if tp == nil {
		return next
	}
	tracer := tp.Tracer(ScopeName)
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method)))
		defer span.End()
		sw := &observe.StatusWriter{ResponseWriter: w}
		// The ServeMux sets Pattern on the request it is given: this one, passed on as it is by
		// the wrappers between here and the mux.
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		if route := SpanName(r.Method, r.Pattern); route != r.Method {
			span.SetName(route)
			span.SetAttributes(attribute.String("http.route", route[len(r.Method)+1:]))
		}
		status := sw.Status()
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}

// SpanName is the name of a request's server span: its method and the path part of the
// ServeMux pattern that matched ("POST /jobs" for the pattern "POST /jobs" or "/jobs"), or the
// method alone when no pattern matched.
func SpanName(method, pattern string) string {
	if pattern == "" {
		return method
	}
	return method + " " + observe.Route(pattern)
}
