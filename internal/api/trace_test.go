package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/push"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/telemetry"
)

const (
	producerTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpanID      = "00f067aa0ba902b7"
	producerTraceparent = "00-" + producerTraceID + "-" + producerSpanID + "-01"
)

// tracedAPI is a server with both listeners over a real store, traced into an in-memory exporter
// when exp is not nil.
type tracedAPI struct {
	t                *testing.T
	st               store.Store
	exp              *tracetest.InMemoryExporter
	m                *metrics.Metrics // the server's metrics, on in every traced test
	public, internal *httptest.Server
	key              string
}

func newTracedAPI(t *testing.T, st store.Store, traced bool) *tracedAPI {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	a := &tracedAPI{t: t, st: st, m: metrics.New()}
	var tp trace.TracerProvider
	if traced {
		a.exp = tracetest.NewInMemoryExporter()
		provider := telemetry.NewTracerProvider("test", sdktrace.WithSyncer(a.exp))
		t.Cleanup(func() { provider.Shutdown(context.Background()) })
		tp = provider
	}
	d, err := dispatch.New(st, dispatch.Config{Logger: quiet, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), Dispatcher: d}),
		Logger: quiet, TracerProvider: tp, Metrics: a.m})
	a.public, a.internal = httptest.NewServer(s.ProducerHandler()), httptest.NewServer(s.InternalHandler())
	t.Cleanup(a.public.Close)
	t.Cleanup(a.internal.Close)
	_, a.key, err = auth.CreateKey(context.Background(), st, "test-acme", "acme", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// submit posts a job of the given task keys (all named "work", no dependencies) with the
// traceparent header tp (none if ""), and returns the job id and its task ids by key.
func (a *tracedAPI) submit(tp string, keys ...string) (string, map[string]string) {
	a.t.Helper()
	var tasks []map[string]any
	for _, k := range keys {
		tasks = append(tasks, map[string]any{"taskId": k, "name": "work"})
	}
	headers := []string{"x-api-key", a.key}
	if tp != "" {
		headers = append(headers, "traceparent", tp)
	}
	res, err := roundTrip(http.MethodPost, a.public.URL+"/jobs", map[string]any{"tasks": tasks}, headers...)
	if err != nil || res.Status != http.StatusCreated {
		a.t.Fatalf("POST /jobs: %v %d %s", err, res.Status, res.Raw)
	}
	jobID := res.Body["jobId"].(string)
	summaries, err := a.st.TaskListByJob(context.Background(), jobID)
	if err != nil {
		a.t.Fatal(err)
	}
	ids := map[string]string{}
	for _, s := range summaries {
		ids[s.Key] = s.ID
	}
	return jobID, ids
}

func (a *tracedAPI) post(path string, body any) response {
	a.t.Helper()
	res, err := roundTrip(http.MethodPost, a.internal.URL+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	if res.Status != http.StatusOK {
		a.t.Fatalf("POST %s: %d %s", path, res.Status, res.Raw)
	}
	return res
}

func (a *tracedAPI) jobTraceparent(jobID string) string {
	a.t.Helper()
	j, err := a.st.JobGet(context.Background(), jobID)
	if err != nil {
		a.t.Fatal(err)
	}
	return j.Traceparent
}

func (a *tracedAPI) spansNamed(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range a.exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// A producer's traceparent sent with POST /jobs is kept with the job and is in the answer of
// every claim of its tasks, in each worker dialect. The request's server span is a child of the
// producer's span, and the job's transaction a child of the server span.
func TestTrace_ProducerTraceparentReachesEveryClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		a := newTracedAPI(t, st, true)
		jobID, ids := a.submit(producerTraceparent, "a", "b", "c", "d", "e")
		if got := a.jobTraceparent(jobID); got != producerTraceparent {
			t.Fatalf("job's traceparent %q, want the header's %q", got, producerTraceparent)
		}

		// The stream dialect: one claim, and a batch.
		one := a.post("/internal/worker/claim", map[string]any{"worker_id": "w", "streams": []string{"work"}, "max_wait_ms": 0})
		if one.Body["claimed"] != true || one.Body["traceparent"] != producerTraceparent {
			t.Errorf("/internal/worker/claim: claimed %v, traceparent %v; want %s", one.Body["claimed"], one.Body["traceparent"], producerTraceparent)
		}
		batch := a.post("/internal/worker/claim-batch", map[string]any{"worker_id": "w", "streams": []string{"work"}, "max_wait_ms": 0, "max_tasks": 2})
		claims, _ := batch.Body["claims"].([]any)
		if len(claims) != 2 {
			t.Fatalf("claim-batch claimed %d tasks, want 2: %s", len(claims), batch.Raw)
		}
		for _, c := range claims {
			if tp := c.(map[string]any)["traceparent"]; tp != producerTraceparent {
				t.Errorf("claim-batch: traceparent %v, want %s", tp, producerTraceparent)
			}
		}
		// The internal dialect: the claim by id, beside the task and in it, and the fetch.
		var left []string
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			if tk, err := st.TaskGet(context.Background(), ids[k]); err == nil && tk.Attempt == 0 {
				left = append(left, ids[k])
			}
		}
		if len(left) != 2 {
			t.Fatalf("%d tasks left unclaimed, want 2", len(left))
		}
		claim := a.post("/internal/task-claim", map[string]any{"task_id": left[0], "worker_id": "w"})
		task, _ := claim.Body["task"].(map[string]any)
		if claim.Body["status"] != "Claimed" || claim.Body["traceparent"] != producerTraceparent || task["traceparent"] != producerTraceparent {
			t.Errorf("/internal/task-claim: %s; want traceparent %s beside and in the task", claim.Raw, producerTraceparent)
		}
		fetch, err := roundTrip(http.MethodGet, a.internal.URL+"/internal/task-fetch?task_id="+left[1], nil)
		if err != nil || fetch.Status != http.StatusOK || fetch.Body["traceparent"] != producerTraceparent {
			t.Errorf("/internal/task-fetch: %v %d %s; want traceparent %s", err, fetch.Status, fetch.Raw, producerTraceparent)
		}

		// The spans: POST /jobs is a child of the producer's span; the job's transaction of it.
		posts := a.spansNamed("POST /jobs")
		if len(posts) != 1 {
			t.Fatalf("%d POST /jobs spans, want 1", len(posts))
		}
		post := posts[0]
		if post.SpanContext.TraceID().String() != producerTraceID || post.Parent.SpanID().String() != producerSpanID || !post.Parent.IsRemote() {
			t.Errorf("POST /jobs span: trace %s, parent %s; want the producer's trace %s and span %s",
				post.SpanContext.TraceID(), post.Parent.SpanID(), producerTraceID, producerSpanID)
		}
		var commits int
		for _, s := range append(a.spansNamed(dispatch.SpanGroupCommit), a.spansNamed(dispatch.SpanTransaction)...) {
			if s.Parent.SpanID() == post.SpanContext.SpanID() {
				commits++
			}
		}
		if commits == 0 {
			t.Errorf("no commit span is a child of the POST /jobs span (spans: %v)", spanNames(a.exp.GetSpans()))
		}
		if len(a.spansNamed("POST /internal/worker/claim")) != 1 || len(a.spansNamed("GET /internal/task-fetch")) != 1 {
			t.Errorf("the internal listener's spans are not named by route: %v", spanNames(a.exp.GetSpans()))
		}
	})
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// An invalid traceparent is ignored: tracing on, the job keeps the server span's context (so the
// job is still one trace); tracing off, it keeps none and claims carry none.
func TestTrace_InvalidTraceparentIsIgnored(t *testing.T) {
	const invalid = "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
	st := storetest.OpenSQLite(t)
	on := newTracedAPI(t, st, true)
	jobID, _ := on.submit(invalid, "a")
	posts := on.spansNamed("POST /jobs")
	if len(posts) != 1 {
		t.Fatalf("%d POST /jobs spans, want 1", len(posts))
	}
	if posts[0].Parent.IsValid() {
		t.Errorf("the server span has parent %v from an invalid traceparent", posts[0].Parent)
	}
	if got, want := on.jobTraceparent(jobID), telemetry.Traceparent(posts[0].SpanContext); got != want {
		t.Errorf("job's traceparent %q, want the server span's %q", got, want)
	}
	noHeader, _ := on.submit("", "b")
	if got := on.jobTraceparent(noHeader); got == "" || got == on.jobTraceparent(jobID) {
		t.Errorf("a job posted without traceparent, tracing on, keeps %q; want its own server span's", got)
	}

	off := newTracedAPI(t, storetest.OpenSQLite(t), false)
	jobID, _ = off.submit(invalid, "a")
	if got := off.jobTraceparent(jobID); got != "" {
		t.Errorf("tracing off: an invalid traceparent was kept as %q", got)
	}
	c := off.post("/internal/worker/claim", map[string]any{"worker_id": "w", "streams": []string{"work"}, "max_wait_ms": 0})
	if _, ok := c.Body["traceparent"]; ok || c.Body["claimed"] != true {
		t.Errorf("claim of a job without trace context: %s; want no traceparent", c.Raw)
	}
	jobID, _ = off.submit(producerTraceparent, "b")
	if got := off.jobTraceparent(jobID); got != producerTraceparent {
		t.Errorf("tracing off: the job keeps %q, want the header's %q", got, producerTraceparent)
	}
}

// The push delivery of a task carries its job's traceparent, in the envelope and as the
// traceparent header; a job without one sends neither.
func TestTrace_PushDeliveryCarriesTheTraceparent(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		target := newTestTarget(t, func(d delivery, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
		})
		a.startPusher(push.Config{Targets: map[string]string{"work": target.url}})
		submit := func(key string, headers ...string) {
			res := a.request(http.MethodPost, a.public.URL+"/jobs", map[string]any{"tasks": []any{
				withFields(tk(key, "work"), "runtime", "push")}}, append([]string{"x-api-key", a.key}, headers...)...)
			wantStatus(t, res, http.StatusCreated)
		}
		submit("traced", "traceparent", producerTraceparent)
		submit("plain")
		eventually(t, "both tasks are delivered", func() bool { return len(target.deliveries()) == 2 })
		for _, d := range target.deliveries() {
			want := ""
			if d.str("taskKey") == "traced" {
				want = producerTraceparent
			}
			if _, has := d.env["traceparent"]; d.str("traceparent") != want || (want == "" && has) {
				t.Errorf("delivery of %s: envelope traceparent %q, want %q", d.str("taskKey"), d.env["traceparent"], want)
			}
			if got := d.header.Get("traceparent"); got != want {
				t.Errorf("delivery of %s: traceparent header %q, want %q", d.str("taskKey"), got, want)
			}
		}
	})
}

// With tracing and metrics both on, a request's span and its counted series are named by the
// route that served it: the span gives the request a new context, and the metrics must still
// see the pattern the ServeMux set.
func TestTrace_SpansAndMetricsNameTheRoute(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		a := newTracedAPI(t, st, true)
		job, _ := a.submit("", "a")
		res, err := roundTrip(http.MethodGet, a.public.URL+"/jobs/"+job, nil, "x-api-key", a.key)
		if err != nil || res.Status != http.StatusOK {
			t.Fatalf("GET /jobs/{jobId}: %v %d", err, res.Status)
		}
		if len(a.spansNamed("GET /jobs/{jobId}")) != 1 {
			t.Errorf("spans %v, want one GET /jobs/{jobId}", spanNames(a.exp.GetSpans()))
		}
		if n := requests(t, a.m, "public", "/jobs/{jobId}", "GET", http.StatusOK); n != 1 {
			t.Errorf("GET /jobs/{jobId} 200 counted %v times, want 1", n)
		}
		if n := requests(t, a.m, "public", metrics.NoRoute, "GET", http.StatusOK); n != 0 {
			t.Errorf("%v requests counted without a route", n)
		}
	})
}
