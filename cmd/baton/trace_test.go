package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
)

const (
	producerTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpanID      = "00f067aa0ba902b7"
	producerTraceparent = "00-" + producerTraceID + "-" + producerSpanID + "-01"
)

// A bad --otlp-endpoint is a usage error of every command that has it, before anything starts.
func TestOTLPEndpointIsAUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"server", "--internal-insecure", "--database-url", unusedDatabaseURL, "--otlp-endpoint", "localhost:4318"},
		{"dev", "--data-dir", t.TempDir(), "--otlp-endpoint", "grpc://collector:4317"},
		{"worker", "--task", "x", "--exec", "true", "--otlp-endpoint", "http://"},
	} {
		code, _, stderr := runBaton(t, args...)
		if code != 2 || !strings.Contains(stderr, "--otlp-endpoint") || !strings.Contains(stderr, "http(s)://host") {
			t.Errorf("baton %q: exit %d, stderr %q; want 2 and a message on --otlp-endpoint", args, code, stderr)
		}
	}
	code, _, stderr := runBaton(t, "worker", "--task", "x", "--exec", "true", "--child-env", "TRACEPARENT=x")
	if code != 2 || !strings.Contains(stderr, "may not set TRACEPARENT") {
		t.Errorf("--child-env TRACEPARENT=x: exit %d, stderr %q; want it refused", code, stderr)
	}
}

// collector is an OTLP/HTTP trace receiver: it decodes every export it is sent.
type collector struct {
	*httptest.Server
	mu    sync.Mutex
	spans map[string]string // span id → "<name> <trace id> <parent span id>"
}

func newCollector(t *testing.T) *collector {
	c := &collector{spans: map[string]string{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("collector: undecodable export to %s: %v", r.URL.Path, err)
		}
		c.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans[hex.EncodeToString(s.SpanId)] = s.Name + " " + hex.EncodeToString(s.TraceId) + " " + hex.EncodeToString(s.ParentSpanId)
				}
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) span(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spans[id]
}

// childTraceparent runs one task of a job submitted with the producer's traceparent under
// `baton worker` with args, and returns the TRACEPARENT its child saw.
func childTraceparent(t *testing.T, args ...string) (string, *execWorker) {
	t.Helper()
	s := newExecServer(t)
	res, err := s.d.CreateJob(context.Background(), dispatch.CreateJobParams{Tenant: "acme", Traceparent: producerTraceparent,
		Tasks: []lifecycle.TaskSpec{{Key: "t", Name: "traced"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, tasks, err := s.d.GetJob(context.Background(), "", res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	w := startExecWorker(t, s, `printf '{"traceparent":"%s"}\n' "$TRACEPARENT"`, append([]string{"--task", "traced"}, args...)...)
	tk := s.waitTask(t, tasks[0].ID, 20*time.Second, terminal)
	if tk.Status != lifecycle.Completed {
		t.Fatalf("task: %s %+v; worker:\n%s", tk.Status, tk.Error, w.stderr.String())
	}
	var out struct {
		Traceparent string `json:"traceparent"`
	}
	if err := json.Unmarshal(tk.Output, &out); err != nil {
		t.Fatalf("output %s: %v", tk.Output, err)
	}
	return out.Traceparent, w
}

// Without tracing, the child of `baton worker` gets the producer's traceparent: its spans are
// children of the producer's span.
func TestWorkerChildGetsTheProducersTraceparent(t *testing.T) {
	t.Parallel()
	if got, _ := childTraceparent(t); got != producerTraceparent {
		t.Errorf("the child's TRACEPARENT is %q, want the producer's %q", got, producerTraceparent)
	}
}

// With --otlp-endpoint, the worker's own span of the task is a child of the producer's span and
// the child's TRACEPARENT names that span: the child's spans are the producer's grandchildren.
// Not parallel: tracing installs OpenTelemetry's global tracer provider.
func TestWorkerChildIsAGrandchildWhenTheWorkerTraces(t *testing.T) {
	c := newCollector(t)
	got, w := childTraceparent(t, "--otlp-endpoint", c.URL)
	parts := strings.Split(got, "-")
	if len(parts) != 4 || parts[1] != producerTraceID || parts[2] == producerSpanID {
		t.Fatalf("the child's TRACEPARENT is %q, want the producer's trace %s under a span of the worker's", got, producerTraceID)
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("baton worker exited %d:\n%s", code, w.stderr.String())
	}
	// Stopping flushed the worker's spans to the collector.
	if want := "baton.task traced " + producerTraceID + " " + producerSpanID; c.span(parts[2]) != want {
		t.Errorf("the collector has span %s as %q, want %q", parts[2], c.span(parts[2]), want)
	}
}
