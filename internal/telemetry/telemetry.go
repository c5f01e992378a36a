// Package telemetry is OpenTelemetry tracing of a Baton process: the tracer provider and its
// OTLP/HTTP exporter, W3C trace-context propagation, the server span of each HTTP request, and
// the flush at shutdown.
//
// Tracing is off unless an OTLP endpoint is given (--otlp-endpoint). Off, there is no exporter
// and no tracer provider: the parts of Baton that trace take a nil trace.TracerProvider to mean
// "do nothing" and skip even the no-op calls, so that tracing off costs nothing on the hot path.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name of every span a Baton process exports.
const ServiceName = "baton"

// ScopeName is the instrumentation scope of Baton's own spans.
const ScopeName = "github.com/baton-dev/baton"

// tracesPath is the OTLP/HTTP path of traces, appended to an endpoint given without a path.
const tracesPath = "/v1/traces"

// ParseEndpoint checks an --otlp-endpoint value and returns the URL spans are sent to: an http or
// https URL with a host. A URL without a path (http://collector:4318) is the collector's base URL
// and gets the OTLP traces path, /v1/traces; a URL with a path is used as it is.
func ParseEndpoint(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("--otlp-endpoint %q: want the OTLP/HTTP collector's URL, http(s)://host[:port][/path] (e.g. http://localhost:4318)", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--otlp-endpoint %q: want http(s)://host[:port][/path], without user, query or fragment", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = tracesPath
	}
	return u.String(), nil
}

// Config configures Setup.
type Config struct {
	// Endpoint is the OTLP/HTTP URL spans are sent to, as ParseEndpoint returns it; "" turns
	// tracing off.
	Endpoint string
	// Command names the Baton command the process runs ("server", "dev", "worker"): the
	// baton.command attribute of its resource.
	Command string
	// Timeout bounds each export request; default 10 s.
	Timeout time.Duration
}

// Tracing is a process's tracing: on, a tracer provider that batches spans to an OTLP exporter;
// off, nothing. The zero value and a nil *Tracing are off.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// Setup starts tracing as cfg says. On, it also installs the tracer provider and the W3C
// trace-context propagator as OpenTelemetry's globals, for code that uses them (the worker SDK by
// default). The exporter connects lazily: a collector that is down costs dropped spans, logged by
// OpenTelemetry, never a failed start.
func Setup(ctx context.Context, cfg Config) (*Tracing, error) {
	if cfg.Endpoint == "" {
		return &Tracing{}, nil
	}
	endpoint, err := ParseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithTimeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter for %s: %w", endpoint, err)
	}
	t := &Tracing{tp: NewTracerProvider(cfg.Command, sdktrace.WithBatcher(exp))}
	otel.SetTracerProvider(t.tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return t, nil
}

// NewTracerProvider returns a tracer provider of the service "baton" with the given options (an
// exporter: sdktrace.WithBatcher, or sdktrace.WithSyncer in tests), sampling every trace whose
// caller did not decide otherwise (parent-based).
func NewTracerProvider(command string, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	attrs := []attribute.KeyValue{attribute.String("service.name", ServiceName)}
	if command != "" {
		attrs = append(attrs, attribute.String("baton.command", command))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		// Only conflicting schema URLs fail a merge, and a schemaless resource has none.
		res = resource.NewSchemaless(attrs...)
	}
	opts = append([]sdktrace.TracerProviderOption{sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample()))}, opts...)
	return sdktrace.NewTracerProvider(opts...)
}

// On reports whether tracing is on.
func (t *Tracing) On() bool { return t != nil && t.tp != nil }

// TracerProvider is the provider to trace with, or nil when tracing is off: pass it on as it is
// (api.Config, dispatch.Config, worker.WithTracerProvider), nil meaning "do not trace".
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.On() {
		return nil
	}
	return t.tp
}

// Shutdown flushes the spans not exported yet and stops the exporter; ctx bounds how long it may
// take. A no-op when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

// Traceparent is the W3C traceparent header value of sc ("00-<trace id>-<span id>-<flags>"), or ""
// when sc is not valid.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// ParseTraceparent reads a W3C traceparent header value into the remote span context it names; ok
// is false when v is not a valid traceparent (which W3C says to ignore).
func ParseTraceparent(v string) (sc trace.SpanContext, ok bool) {
	if v == "" {
		return trace.SpanContext{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": v})
	sc = trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// NormalTraceparent is v in the form Baton stores and hands on: a valid traceparent of any version
// rewritten as version 00 (its trace id, parent id and flags), or "" when v is not valid.
func NormalTraceparent(v string) string {
	if len(v) > 512 || strings.TrimSpace(v) != v {
		return ""
	}
	sc, ok := ParseTraceparent(v)
	if !ok {
		return ""
	}
	return Traceparent(sc)
}

// ValidTraceparent reports whether v is a W3C traceparent header value: version-traceid-parentid-
// flags in lowercase hex, version not ff, ids not all zeros.
func ValidTraceparent(v string) bool {
	parts := strings.Split(v, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return false
	}
	if parts[0] == "ff" || (parts[0] == "00" && len(parts) != 4) {
		return false
	}
	for _, p := range parts[:4] {
		for _, c := range p {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return strings.Trim(parts[1], "0") != "" && strings.Trim(parts[2], "0") != ""
}
