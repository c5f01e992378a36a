package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// families returns the families of reg by name.
func families(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fs {
		byName[f.GetName()] = f
	}
	return byName
}

// value is the value (a histogram's count) of the series of name with exactly labels, and
// whether there is one.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	f := families(t, reg)[name]
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		same := true
		for k, v := range labels {
			same = same && got[k] == v
		}
		if !same {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func TestInstrumentLabelsByPattern(t *testing.T) {
	m := metrics.New()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /jobs", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux.HandleFunc("GET /jobs/{jobId}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })
	mux.HandleFunc("GET /jobs/{jobId}/events", func(w http.ResponseWriter, r *http.Request) {
		// An event stream: the wrapper must keep the Flusher.
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the instrumented writer lost http.Flusher")
		}
		w.(http.Flusher).Flush()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	// A guard that answers before the mux routes, as the API's does for bad bytes.
	h := m.Instrument("public", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Refuse") != "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	for _, tc := range []struct {
		method, path string
		refuse       bool
	}{
		{"POST", "/jobs", false},
		{"GET", "/jobs/j-1", false},
		{"GET", "/jobs/j-2", false},
		{"GET", "/jobs/j-1/events", false},
		{"GET", "/nowhere/at/all", false},
		{"BREW", "/jobs/j-3", false},
		{"GET", "/jobs/j-4", true},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.refuse {
			r.Header.Set("X-Refuse", "1")
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	reg := m.Registry()
	for _, w := range []struct {
		route, method, code string
		want                float64
	}{
		{"/jobs", "POST", "201", 1},
		{"/jobs/{jobId}", "GET", "200", 2},
		{"/jobs/{jobId}/events", "GET", "200", 1},
		{"/", "GET", "404", 1},
		{"/", "other", "404", 1},
		{metrics.NoRoute, "GET", "400", 1},
	} {
		labels := map[string]string{"listener": "public", "route": w.route, "method": w.method, "code": w.code}
		if got, _ := value(t, reg, "baton_http_requests_total", labels); got != w.want {
			t.Errorf("requests %v = %v, want %v", labels, got, w.want)
		}
	}
	if got, _ := value(t, reg, "baton_http_request_duration_seconds", map[string]string{"listener": "public", "route": "/jobs/{jobId}", "method": "GET"}); got != 2 {
		t.Errorf("durations of GET /jobs/{jobId}: %v, want 2", got)
	}
	// Raw paths never become labels.
	for _, m := range families(t, reg)["baton_http_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if strings.Contains(l.GetValue(), "j-") || strings.Contains(l.GetValue(), "nowhere") {
				t.Errorf("a raw path became a label: %s=%s", l.GetName(), l.GetValue())
			}
		}
	}
}

func TestTallyIsRecordedOnce(t *testing.T) {
	m := metrics.New()
	var a, b metrics.Tally
	a.Retry(lifecycle.Infrastructure)
	a.Retry(lifecycle.Infrastructure)
	a.DeadLetter(lifecycle.UserCode)
	b.Expiry(metrics.ExpiryOf(lifecycle.ReasonExecutionTimeout))
	b.Expiry(metrics.ExpiryOf(lifecycle.ReasonCancelTimeout))
	b.Expiry(metrics.ExpiryOf(lifecycle.ReasonHeartbeatTimeout))
	b.Retry("SOMETHING_NEW")
	a.Add(&b)
	m.Record(&a)
	m.Record(&metrics.Tally{}) // an empty tally changes nothing
	reg := m.Registry()
	for _, w := range []struct {
		name, label, value string
		want               float64
	}{
		{"baton_task_retries_total", "category", "INFRASTRUCTURE", 2},
		{"baton_task_retries_total", "category", "USER_CODE", 0},
		{"baton_task_retries_total", "category", "OTHER", 1},
		{"baton_task_dead_letters_total", "category", "USER_CODE", 1},
		{"baton_reaper_expiries_total", "reason", "deadline", 1},
		{"baton_reaper_expiries_total", "reason", "cancel_timeout", 1},
		{"baton_reaper_expiries_total", "reason", "lease_expired", 1},
	} {
		got, ok := value(t, reg, w.name, map[string]string{w.label: w.value})
		if !ok || got != w.want {
			t.Errorf("%s{%s=%q} = %v (present %v), want %v", w.name, w.label, w.value, got, ok, w.want)
		}
	}
}

func TestNilMetricsIsOff(t *testing.T) {
	var m *metrics.Metrics
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	if got := m.Instrument("public", h); got == nil {
		t.Fatal("Instrument on nil returned nil")
	}
	m.Transitions(metrics.Claim, metrics.OK, 3)
	m.ClaimWait(time.Second, true)
	m.HandOff(time.Second)
	m.Commit(3, time.Millisecond)
	m.CredentialRejected(metrics.APIKeyInvalid)
	m.Record(&metrics.Tally{})
	if err := m.Refresh(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	m.RefreshLoop(context.Background(), nil, time.Millisecond, nil) // returns at once
	if m.Registry() != nil {
		t.Fatal("a nil Metrics has a registry")
	}
}

// TestRefreshCountsTasksAndOutbox sets the gauges from a real store as a dispatcher leaves it.
func TestRefreshCountsTasksAndOutbox(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	d, err := dispatch.New(st, dispatch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Tasks: []lifecycle.TaskSpec{
		{Key: "a", Name: "fetch"}, {Key: "b", Name: "fetch"}, {Key: "c", Name: "load", DependsOn: []string{"a", "b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{"fetch"}, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	reg := m.Registry()
	check := func(queue, state string, want float64) {
		t.Helper()
		got, ok := value(t, reg, "baton_tasks", map[string]string{"queue": queue, "state": state})
		if !ok || got != want {
			t.Errorf("baton_tasks{queue=%q,state=%q} = %v (present %v), want %v", queue, state, got, ok, want)
		}
	}
	check("fetch", "running", 1)
	check("fetch", "pending", 1)
	check("load", "waiting", 1)
	// The two root tasks' wake-ups wait in the outbox: no relay runs here.
	if got, _ := value(t, reg, "baton_outbox_unsent_messages", map[string]string{}); got != 2 {
		t.Errorf("unsent outbox messages = %v, want 2", got)
	}
	if got, _ := value(t, reg, "baton_outbox_oldest_unsent_age_seconds", map[string]string{}); got < 0 || got > 60 {
		t.Errorf("oldest unsent age = %vs, want a few milliseconds", got)
	}
	// Canceled: the series fall to zero instead of disappearing.
	if _, err := d.CancelJob(ctx, "acme", res.Job.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	check("fetch", "pending", 0)
	check("load", "waiting", 0)
	check("fetch", "running", 1) // asked to stop; it runs until it does or its grace ends
}

// The hot path's costs: a transition, a committed transaction's tally, an instrumented request.
func BenchmarkTransitions(b *testing.B) {
	m := metrics.New()
	b.ReportAllocs()
	for b.Loop() {
		m.Transitions(metrics.Complete, metrics.OK, 1)
	}
}

func BenchmarkRecordTally(b *testing.B) {
	m := metrics.New()
	b.ReportAllocs()
	for b.Loop() {
		var t metrics.Tally
		t.Retry(lifecycle.Infrastructure)
		m.Record(&t)
	}
}

func BenchmarkInstrument(b *testing.B) {
	m := metrics.New()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jobs/{jobId}", func(w http.ResponseWriter, r *http.Request) {})
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"bare", mux}, {"instrumented", m.Instrument("public", mux)}} {
		b.Run(h.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/jobs/j-1", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.h.ServeHTTP(w, r)
			}
		})
	}
}

// A refused credential is counted by its kind, a task token's by the header it came in; any other
// error is not the credential's fault.
func TestRejection(t *testing.T) {
	for _, c := range []struct {
		err      error
		callback bool
		want     metrics.Credential
	}{
		{auth.ErrNoKey, false, metrics.APIKeyMissing},
		{fmt.Errorf("wrapped: %w", auth.ErrBadKey), true, metrics.APIKeyInvalid},
		{auth.ErrTokenMissing, false, metrics.CapabilityTokenMissing},
		{auth.ErrTokenMissing, true, metrics.CallbackTokenMissing},
		{auth.ErrTokenExpired, false, metrics.CapabilityTokenExpired},
		{auth.ErrTokenExpired, true, metrics.CallbackTokenExpired},
		{auth.ErrTokenInvalid, false, metrics.CapabilityTokenInvalid},
		{auth.ErrTokenInvalid, true, metrics.CallbackTokenInvalid},
		{auth.ErrTokenScope, false, metrics.TokenScope},
		{auth.ErrTokenScope, true, metrics.TokenScope},
	} {
		if got, ok := metrics.Rejection(c.err, c.callback); !ok || got != c.want {
			t.Errorf("%v (callback %v): %v %v, want %v", c.err, c.callback, got, ok, c.want)
		}
	}
	if _, ok := metrics.Rejection(errors.New("database down"), false); ok {
		t.Error("a database failure counted as a refused credential")
	}
}

// TestRefreshCountsHeldRoutings sets the backpressure gauges from the routings the store holds.
func TestRefreshCountsHeldRoutings(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	paused := time.Now().Add(-time.Minute)
	err := st.InTx(ctx, func(tx store.Tx) error {
		return tx.HeldRoutingInsertMany(ctx, []*store.HeldRouting{
			{Tenant: "acme", Pipeline: "p", Version: "v", Job: "a", Key: "k1", Event: []byte(`{}`), HeldAt: paused, PausedSince: paused},
			{Tenant: "acme", Pipeline: "p", Version: "v", Job: "a", Key: "k2", Event: []byte(`{}`), HeldAt: time.Now(), PausedSince: paused},
			{Tenant: "acme", Pipeline: "p", Version: "v", Job: "b", Key: "k3", Event: []byte(`{}`), HeldAt: time.Now(), PausedSince: time.Now()},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	reg := m.Registry()
	if got, _ := value(t, reg, "baton_backpressure_held_events", map[string]string{}); got != 3 {
		t.Errorf("held events = %v, want 3", got)
	}
	if got, _ := value(t, reg, "baton_backpressure_paused_jobs", map[string]string{}); got != 2 {
		t.Errorf("paused jobs = %v, want 2", got)
	}
	if got, _ := value(t, reg, "baton_backpressure_longest_pause_seconds", map[string]string{}); got < 59 || got > 120 {
		t.Errorf("longest pause = %vs, want about 60", got)
	}
}
