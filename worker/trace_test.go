package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/telemetry"
	"github.com/baton-dev/baton/worker"
)

const (
	producerTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpanID      = "00f067aa0ba902b7"
	producerTraceparent = "00-" + producerTraceID + "-" + producerSpanID + "-01"
)

// tracedServer is a real server with both listeners, traced into its own in-memory exporter.
type tracedServer struct {
	t                *testing.T
	d                *dispatch.Dispatcher
	exp              *tracetest.InMemoryExporter
	public, internal *httptest.Server
	key              string
}

func newTracedServer(t *testing.T) *tracedServer {
	t.Helper()
	st := storetest.OpenSQLite(t)
	exp := tracetest.NewInMemoryExporter()
	tp := telemetry.NewTracerProvider("server", sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	d, err := dispatch.New(st, dispatch.Config{Logger: quiet(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), Dispatcher: d}),
		Logger: quiet(), TracerProvider: tp})
	srv := &tracedServer{t: t, d: d, exp: exp, public: httptest.NewServer(s.ProducerHandler()), internal: httptest.NewServer(s.InternalHandler())}
	t.Cleanup(func() { s.Drain(); srv.public.Close(); srv.internal.Close() })
	if _, srv.key, err = auth.CreateKey(context.Background(), st, "producer", "acme", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	return srv
}

// postJob submits one task named name over POST /jobs with the traceparent header tp.
func (s *tracedServer) postJob(name, tp string) string {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"tasks": []any{map[string]any{"taskId": "only", "name": name}}})
	req, _ := http.NewRequest(http.MethodPost, s.public.URL+"/jobs", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", s.key)
	req.Header.Set("traceparent", tp)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		JobID string `json:"jobId"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusCreated {
		s.t.Fatalf("POST /jobs: %d, %v", res.StatusCode, err)
	}
	return out.JobID
}

func (s *tracedServer) waitJob(jobID string) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		job, _, err := s.d.GetJob(context.Background(), "", jobID)
		if err == nil && job.Status == lifecycle.JobCompleted {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s did not complete (%v)", jobID, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A job submitted with a producer's traceparent runs in the producer's trace: the worker's
// "baton.task" span is a child of the producer's span, the spans the handler starts are children
// of the worker's, and the server's spans of the submission are in the same trace.
func TestTrace_WorkerSpansJoinTheProducersTrace(t *testing.T) {
	s := newTracedServer(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	var (
		mu        sync.Mutex
		inHandler trace.SpanContext
		seen      string // the Task's Traceparent
	)
	start(t, s.internal.URL, map[string]worker.Handler{"traced": func(ctx context.Context, task *worker.Task) (any, error) {
		_, span := tp.Tracer("user code").Start(ctx, "resize")
		defer span.End()
		mu.Lock()
		inHandler, seen = trace.SpanContextFromContext(ctx), task.Traceparent
		mu.Unlock()
		return map[string]any{"ok": true}, nil
	}}, worker.WithTracerProvider(tp))

	jobID := s.postJob("traced", producerTraceparent)
	s.waitJob(jobID)

	mu.Lock()
	if seen != producerTraceparent {
		t.Errorf("Task.Traceparent = %q, want %q", seen, producerTraceparent)
	}
	mu.Unlock()
	var taskSpan, userSpan *tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		switch spans[i].Name {
		case "baton.task traced":
			taskSpan = &spans[i]
		case "resize":
			userSpan = &spans[i]
		}
	}
	if taskSpan == nil || userSpan == nil {
		t.Fatalf("the worker's spans: %v; want baton.task traced and the handler's resize", spans)
	}
	if taskSpan.SpanContext.TraceID().String() != producerTraceID || taskSpan.Parent.SpanID().String() != producerSpanID || !taskSpan.Parent.IsRemote() {
		t.Errorf("baton.task span: trace %s, parent %s; want the producer's trace %s, parent span %s",
			taskSpan.SpanContext.TraceID(), taskSpan.Parent.SpanID(), producerTraceID, producerSpanID)
	}
	if taskSpan.SpanKind != trace.SpanKindConsumer {
		t.Errorf("baton.task span of kind %v, want consumer", taskSpan.SpanKind)
	}
	if userSpan.SpanContext.TraceID().String() != producerTraceID || userSpan.Parent.SpanID() != taskSpan.SpanContext.SpanID() {
		t.Errorf("the handler's span: trace %s, parent %s; want the producer's trace and the baton.task span %s",
			userSpan.SpanContext.TraceID(), userSpan.Parent.SpanID(), taskSpan.SpanContext.SpanID())
	}
	if inHandler.SpanID() != taskSpan.SpanContext.SpanID() {
		t.Errorf("the handler's context holds span %s, want the baton.task span %s", inHandler.SpanID(), taskSpan.SpanContext.SpanID())
	}
	var post bool
	for _, sp := range s.exp.GetSpans() {
		if sp.Name == "POST /jobs" {
			post = sp.SpanContext.TraceID().String() == producerTraceID && sp.Parent.SpanID().String() == producerSpanID
		}
	}
	if !post {
		t.Error("the server's POST /jobs span is not a child of the producer's span")
	}
}

// Without a tracer provider of its own (the global one does nothing), the handler's context still
// carries the producer's span context, for the handler to hand on.
func TestTrace_HandlerContextCarriesTheTraceparentWithoutTracing(t *testing.T) {
	s := newTracedServer(t)
	got := make(chan trace.SpanContext, 1)
	start(t, s.internal.URL, map[string]worker.Handler{"plain": func(ctx context.Context, task *worker.Task) (any, error) {
		got <- trace.SpanContextFromContext(ctx)
		return nil, nil
	}})
	s.waitJob(s.postJob("plain", producerTraceparent))
	sc := <-got
	if sc.TraceID().String() != producerTraceID || sc.SpanID().String() != producerSpanID || !sc.IsRemote() {
		t.Errorf("the handler's span context is %v, want the producer's remote %s", sc, producerTraceparent)
	}
}
