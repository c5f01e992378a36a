package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestParseEndpoint(t *testing.T) {
	for raw, want := range map[string]string{
		"http://localhost:4318":            "http://localhost:4318/v1/traces",
		"http://localhost:4318/":           "http://localhost:4318/v1/traces",
		"https://collector.example/otlp/x": "https://collector.example/otlp/x",
	} {
		got, err := ParseEndpoint(raw)
		if err != nil || got != want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "localhost:4318", "grpc://localhost:4317", "http://", "http://u:p@host:4318", "http://host:4318/?a=1", "not a url\x00"} {
		if got, err := ParseEndpoint(raw); err == nil || !strings.Contains(err.Error(), "--otlp-endpoint") {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want an error that names the flag", raw, got, err)
		}
	}
}

func TestOffIsNothing(t *testing.T) {
	tr, err := Setup(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.On() || tr.TracerProvider() != nil || tr.Shutdown(t.Context()) != nil {
		t.Fatalf("tracing without an endpoint: on %v, provider %v", tr.On(), tr.TracerProvider())
	}
	var nilTracing *Tracing
	if nilTracing.On() || nilTracing.TracerProvider() != nil || nilTracing.Shutdown(t.Context()) != nil {
		t.Fatal("a nil *Tracing is not off")
	}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := Handler(nil, h); !sameHandler(got, h) {
		t.Fatal("Handler(nil, h) is not h itself")
	}
}

// sameHandler reports whether a and b are the same handler func.
func sameHandler(a, b http.Handler) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, ok := ParseTraceparent(tp)
	if !ok || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() || !sc.IsRemote() {
		t.Fatalf("ParseTraceparent(%q) = %v, %v", tp, sc, ok)
	}
	if got := Traceparent(sc); got != tp {
		t.Errorf("Traceparent = %q, want %q", got, tp)
	}
	if got := Traceparent(trace.SpanContext{}); got != "" {
		t.Errorf("Traceparent of an invalid span context = %q", got)
	}
	for v, want := range map[string]string{
		tp: tp,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future": tp, // a later version, read as 00
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":        "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":        "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":        "",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":        "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra":  "",
		" " + tp:  "",
		"garbage": "",
	} {
		if got := NormalTraceparent(v); got != want {
			t.Errorf("NormalTraceparent(%q) = %q, want %q", v, got, want)
		}
	}
}

// ValidTraceparent is stricter than ParseTraceparent: a worker that sends a trace context must
// send it in the exact W3C form.
func TestValidTraceparent(t *testing.T) {
	for v, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":        true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra":  false,
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":        false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":        false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":        false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":        false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1":         false,
		"":        false,
		"garbage": false,
	} {
		if got := ValidTraceparent(v); got != want {
			t.Errorf("ValidTraceparent(%q) = %v, want %v", v, got, want)
		}
	}
}

// The server span of a request is named by its route, is a child of the caller's traceparent,
// and carries the status code; a request without one starts a new trace.
func TestHandlerSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := NewTracerProvider("test", sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	mux := http.NewServeMux()
	var inHandler trace.SpanContext
	mux.HandleFunc("POST /jobs/{jobId}/cancel", func(w http.ResponseWriter, r *http.Request) {
		inHandler = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusConflict)
	})
	mux.HandleFunc("GET /boom", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the span's writer is not an http.Flusher")
			return
		}
		io.WriteString(w, "data\n")
		f.Flush()
	})
	// A wrapper between the span and the mux, as the listeners have (CORS, the byte guard).
	srv := httptest.NewServer(Handler(tp, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) })))
	defer srv.Close()

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/jobs/job-123/cancel", nil)
	req.Header.Set("traceparent", parent)
	mustDo(t, req, http.StatusConflict)
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/boom", nil)
	mustDo(t, req, http.StatusInternalServerError)
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/events", nil)
	mustDo(t, req, http.StatusOK)
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/nowhere/42", nil)
	mustDo(t, req, http.StatusNotFound)

	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4: %v", len(spans), spans)
	}
	cancel := spans[0]
	if cancel.Name != "POST /jobs/{jobId}/cancel" || cancel.SpanKind != trace.SpanKindServer {
		t.Errorf("span %q of kind %v, want the route's server span POST /jobs/{jobId}/cancel", cancel.Name, cancel.SpanKind)
	}
	if cancel.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || cancel.Parent.SpanID().String() != "00f067aa0ba902b7" || !cancel.Parent.IsRemote() {
		t.Errorf("span's parent is %v, want the caller's traceparent %s", cancel.Parent, parent)
	}
	if inHandler.SpanID() != cancel.SpanContext.SpanID() {
		t.Errorf("the handler's context holds span %v, want the server span %v", inHandler.SpanID(), cancel.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range cancel.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["http.route"] != "/jobs/{jobId}/cancel" || attrs["http.response.status_code"] != "409" || attrs["http.request.method"] != "POST" {
		t.Errorf("attributes %v", attrs)
	}
	if spans[1].Name != "GET /boom" || spans[1].Status.Code.String() != "Error" || spans[1].Parent.IsValid() {
		t.Errorf("span %q status %v parent %v; want GET /boom, Error, a new trace", spans[1].Name, spans[1].Status, spans[1].Parent)
	}
	if spans[2].Name != "GET /events" {
		t.Errorf("span %q, want GET /events", spans[2].Name)
	}
	if spans[3].Name != "GET" {
		t.Errorf("a request no route matched: span %q, want the method alone", spans[3].Name)
	}
	for _, s := range spans {
		if strings.Contains(s.Name, "job-123") || strings.Contains(s.Name, "42") {
			t.Errorf("span name %q holds the raw path", s.Name)
		}
	}
}

func mustDo(t *testing.T, req *http.Request, want int) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d", req.Method, req.URL.Path, res.StatusCode, want)
	}
}

// Setup with an endpoint exports over OTLP/HTTP: Shutdown flushes the spans to the collector,
// here an HTTP server that decodes what it receives.
func TestSetupExportsToCollector(t *testing.T) {
	var (
		mu    sync.Mutex
		got   []*coltrace.ExportTraceServiceRequest
		paths []string
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("collector: undecodable export: %v", err)
		}
		mu.Lock()
		got, paths = append(got, &req), append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	tr, err := Setup(t.Context(), Config{Endpoint: collector.URL, Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.On() || tr.TracerProvider() == nil {
		t.Fatal("tracing with an endpoint is off")
	}
	_, span := tr.TracerProvider().Tracer(ScopeName).Start(t.Context(), "exported")
	span.End()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("the collector received nothing")
	}
	if paths[0] != "POST /v1/traces" {
		t.Errorf("export sent to %s, want POST /v1/traces", paths[0])
	}
	var service, name string
	for _, rs := range got[0].ResourceSpans {
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				service = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				name = s.Name
			}
		}
	}
	if service != "baton" || name != "exported" {
		t.Errorf("exported span %q of service %q, want exported of baton", name, service)
	}
}
