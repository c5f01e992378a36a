package telemetry

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
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
		sw := &statusWriter{ResponseWriter: w}
		// The ServeMux sets Pattern on the request it is given: this one, passed on as it is by
		// the wrappers between here and the mux.
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		if route := SpanName(r.Method, r.Pattern); route != r.Method {
			span.SetName(route)
			span.SetAttributes(attribute.String("http.route", route[len(r.Method)+1:]))
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
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
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		pattern = strings.TrimLeft(pattern[i+1:], " \t")
	}
	// A pattern may name a host ("example.com/path"): the route is its path.
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:]
	}
	return method + " " + pattern
}

// statusWriter records the status code of a response. It keeps what handlers look for on a
// ResponseWriter: Flush (event streams) and Unwrap (http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
