package api_test

import (
	"context"
	"log/slog"
	"maps"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// metricsAPI is both listeners of a server with metrics over st.
type metricsAPI struct {
	m                *metrics.Metrics
	public, internal *httptest.Server
}

func newMetricsAPI(t *testing.T, st store.Store, limits auth.Limits) *metricsAPI {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	m := metrics.New()
	d, err := dispatch.New(st, dispatch.Config{Logger: quiet, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, limits, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), Dispatcher: d}),
		Logger: quiet, Metrics: m})
	a := &metricsAPI{m: m, public: httptest.NewServer(s.ProducerHandler()), internal: httptest.NewServer(s.InternalHandler())}
	t.Cleanup(a.public.Close)
	t.Cleanup(a.internal.Close)
	return a
}

// TestMetricsRejectedCredentials sends requests with each kind of bad credential and checks
// that each is counted once under its kind, and its request under its route and status.
func TestMetricsRejectedCredentials(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		newKey := func() string {
			_, secret, err := auth.CreateKey(ctx, st, "test", "acme", "", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return secret
		}
		revoked, revokedSecret, err := auth.CreateKey(ctx, st, "old", "acme", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.APIKeyRevoke(ctx, revoked.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		tokens := auth.NewTokens(st, nil)
		if _, err := tokens.Rotate(ctx); err != nil {
			t.Fatal(err)
		}
		issue := func(taskID string, ttl time.Duration) string {
			tok, _, err := tokens.Issue(ctx, auth.TaskClaims{Tenant: "acme", JobID: "job-1", TaskID: taskID, Attempt: 1, LeaseToken: "lease"}, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		plain := newMetricsAPI(t, st, auth.Limits{})
		limited := newMetricsAPI(t, st, auth.Limits{RatePerSecond: 0.001, Burst: 1})
		quota := newMetricsAPI(t, st, auth.Limits{DailyQuota: 1})
		rateKey, quotaKey := newKey(), newKey()
		taskA, taskB := uuid.NewString(), uuid.NewString()
		heartbeat := `{"task_id": "` + taskB + `", "attempt": 1, "lease_token": "lease"}`
		callback := `{"attempt": 1, "workerId": "w"}`

		for _, tc := range []struct {
			name         string
			a            *metricsAPI
			method, path string
			body         string
			headers      []string
			code         int
			route        string
			kind         string // "" for none
		}{
			{"no key", plain, "GET", "/jobs", "", nil, 401, "/jobs", "api_key_missing"},
			{"unknown key", plain, "GET", "/jobs/job-1", "", []string{"x-api-key", "bk_nope"}, 401, "/jobs/{jobId}", "api_key_invalid"},
			{"revoked key", plain, "GET", "/jobs", "", []string{"x-api-key", revokedSecret}, 401, "/jobs", "api_key_revoked"},
			{"first request of a rate-limited key", limited, "GET", "/jobs", "", []string{"x-api-key", rateKey}, 200, "/jobs", ""},
			{"second request of a rate-limited key", limited, "GET", "/jobs", "", []string{"x-api-key", rateKey}, 429, "/jobs", "rate_limited"},
			{"first request of a quota", quota, "GET", "/jobs", "", []string{"x-api-key", quotaKey}, 200, "/jobs", ""},
			{"second request of a quota", quota, "GET", "/jobs", "", []string{"x-api-key", quotaKey}, 429, "/jobs", "quota_exceeded"},
			{"no capability token", plain, "POST", "/v1/task/heartbeat", heartbeat, nil, 401, "/v1/task/heartbeat", "capability_token_missing"},
			{"forged capability token", plain, "POST", "/v1/task/heartbeat", heartbeat, []string{"X-Trace-Task-Capability", "not.a.token"}, 401, "/v1/task/heartbeat", "capability_token_invalid"},
			{"expired capability token", plain, "POST", "/v1/task/heartbeat", heartbeat, []string{"X-Trace-Task-Capability", issue(taskB, -time.Minute)}, 401, "/v1/task/heartbeat", "capability_token_expired"},
			{"another task's capability token", plain, "POST", "/v1/task/heartbeat", heartbeat, []string{"X-Trace-Task-Capability", issue(taskA, time.Minute)}, 403, "/v1/task/heartbeat", "token_scope"},
			{"no callback token", plain, "POST", "/v1/tasks/" + taskB + "/started", callback, nil, 401, "/v1/tasks/{task_id}/started", "callback_token_missing"},
			{"forged callback token", plain, "POST", "/api/v1/tasks/" + taskB + "/started", callback, []string{"Authorization", "Bearer nope"}, 401, "/api/v1/tasks/{task_id}/started", "callback_token_invalid"},
			{"another task's callback token", plain, "POST", "/v1/tasks/" + taskB + "/started", callback, []string{"Authorization", "Bearer " + issue(taskA, time.Minute)}, 403, "/v1/tasks/{task_id}/started", "token_scope"},
		} {
			before := rejectedCount(t, tc.a.m, tc.kind)
			res, err := roundTrip(tc.method, tc.a.public.URL+tc.path, tc.body, tc.headers...)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.code {
				t.Fatalf("%s: %s %s answered %d %s, want %d", tc.name, tc.method, tc.path, res.Status, res.Raw, tc.code)
			}
			if tc.kind != "" {
				if got := rejectedCount(t, tc.a.m, tc.kind) - before; got != 1 {
					t.Errorf("%s: credentials rejected {kind=%q} moved by %v, want 1", tc.name, tc.kind, got)
				}
			}
			if n := requests(t, tc.a.m, "public", tc.route, tc.method, tc.code); n < 1 {
				t.Errorf("%s: no request counted under route %q, code %d", tc.name, tc.route, tc.code)
			}
		}
		// The counts of each kind, all told: nothing counted twice or under another kind.
		want := map[string]float64{"api_key_missing": 1, "api_key_invalid": 1, "api_key_revoked": 1, "capability_token_missing": 1,
			"capability_token_invalid": 1, "capability_token_expired": 1, "token_scope": 2, "callback_token_missing": 1, "callback_token_invalid": 1}
		for kind, n := range want {
			if got := rejectedCount(t, plain.m, kind); got != n {
				t.Errorf("credentials rejected {kind=%q} = %v, want %v", kind, got, n)
			}
		}
		if got := rejectedCount(t, plain.m, "rate_limited") + rejectedCount(t, plain.m, "quota_exceeded"); got != 0 {
			t.Errorf("the server without limits counted %v rate or quota refusals", got)
		}
		// The internal listener's requests are its own.
		if res, err := roundTrip("GET", plain.internal.URL+"/healthz", nil); err != nil || res.Status != 200 {
			t.Fatalf("internal /healthz: %v %v", res.Status, err)
		}
		if n := requests(t, plain.m, "internal", "/healthz", "GET", 200); n != 1 {
			t.Errorf("internal GET /healthz counted %v times, want 1", n)
		}
	})
}

// rejectedCount is baton_credentials_rejected_total{kind}; 0 for an empty kind.
func rejectedCount(t *testing.T, m *metrics.Metrics, kind string) float64 {
	t.Helper()
	if kind == "" {
		return 0
	}
	return series(t, m, "baton_credentials_rejected_total", map[string]string{"kind": kind})
}

// requests is baton_http_requests_total of a route and status.
func requests(t *testing.T, m *metrics.Metrics, listener, route, method string, code int) float64 {
	t.Helper()
	return series(t, m, "baton_http_requests_total", map[string]string{"listener": listener, "route": route, "method": method, "code": strconv.Itoa(code)})
}

// series is the value of the counter of name with exactly labels, 0 if it has none.
func series(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range s.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}
