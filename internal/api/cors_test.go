package api_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/auth"
)

const browserOrigin = "https://ui.example.com"

// headerList splits a comma-separated header's values into lower-case entries.
func headerList(h http.Header, name string) []string {
	var out []string
	for _, v := range h.Values(name) {
		for _, e := range strings.Split(v, ",") {
			if e = strings.ToLower(strings.TrimSpace(e)); e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// wantCORS fails unless res lets allowOrigin read it and exposes Retry-After.
func wantCORS(t *testing.T, what string, res response, allowOrigin string) {
	t.Helper()
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != allowOrigin {
		t.Errorf("%s: Access-Control-Allow-Origin %q, want %q (status %d)", what, got, allowOrigin, res.Status)
	}
	if exposed := headerList(res.Header, "Access-Control-Expose-Headers"); !slices.Contains(exposed, "retry-after") {
		t.Errorf("%s: Access-Control-Expose-Headers %v, want Retry-After among them", what, exposed)
	}
}

// wantNoCORS fails if res lets a browser read it.
func wantNoCORS(t *testing.T, what string, res response) {
	t.Helper()
	for _, h := range []string{"Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers"} {
		if v := res.Header.Get(h); v != "" {
			t.Errorf("%s: %s %q, want none", what, h, v)
		}
	}
}

// preflight sends the OPTIONS a browser sends before a cross-origin call, without an API key.
func (a *testAPI) preflight(path, origin, method, headers string) response {
	a.t.Helper()
	return a.do("OPTIONS", path, nil, "Origin", origin, "Access-Control-Request-Method", method, "Access-Control-Request-Headers", headers)
}

// wantPreflightOK fails unless res allows origin to send method with the headers every Baton
// client needs, without a body.
func wantPreflightOK(t *testing.T, what string, res response, allowOrigin, method string) {
	t.Helper()
	if res.Status != http.StatusNoContent || len(res.Raw) != 0 {
		t.Fatalf("%s: %d %s, want 204 without a body", what, res.Status, res.Raw)
	}
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != allowOrigin {
		t.Errorf("%s: Access-Control-Allow-Origin %q, want %q", what, got, allowOrigin)
	}
	methods := headerList(res.Header, "Access-Control-Allow-Methods")
	for _, m := range []string{"get", "post", "options", strings.ToLower(method)} {
		if !slices.Contains(methods, m) {
			t.Errorf("%s: Access-Control-Allow-Methods %v lacks %s", what, methods, m)
		}
	}
	allowed := headerList(res.Header, "Access-Control-Allow-Headers")
	for _, h := range []string{"x-api-key", "content-type", "idempotency-key", "last-event-id", "authorization", "x-trace-task-capability"} {
		if !slices.Contains(allowed, h) {
			t.Errorf("%s: Access-Control-Allow-Headers %v lacks %s", what, allowed, h)
		}
	}
	if age, err := strconv.Atoi(res.Header.Get("Access-Control-Max-Age")); err != nil || age <= 0 {
		t.Errorf("%s: Access-Control-Max-Age %q, want a positive number of seconds", what, res.Header.Get("Access-Control-Max-Age"))
	}
}

func corsOptions(origins ...string) apiOptions {
	opts := defaultOptions()
	opts.corsOrigins = origins
	return opts
}

// By default every answer of the public listener carries Access-Control-Allow-Origin: *, as the
// producer contract's responses do: successes, errors, the event stream, the probes and the
// OpenAPI document, whatever the request's Origin.
func TestCORSEveryAnswerAllowsAnyOrigin(t *testing.T) {
	forEachDriver(t, corsOptions("*"), func(t *testing.T, a *testAPI) {
		key := []string{"x-api-key", a.key, "Origin", browserOrigin}
		created := a.do("POST", "/jobs", exampleJob, key...)
		wantStatus(t, created, http.StatusCreated)
		wantCORS(t, "201 POST /jobs", created, "*")
		id := created.Body["jobId"].(string)
		if v := created.Header.Values("Vary"); slices.Contains(headerList(created.Header, "Vary"), "origin") {
			t.Errorf("Vary %v: an answer for every origin does not vary by origin", v)
		}
		a.runAll(id, exampleKeys...)

		for _, c := range []struct {
			name    string
			method  string
			path    string
			body    any
			headers []string
			status  int
		}{
			{"200 job", "GET", "/jobs/" + id, nil, key, http.StatusOK},
			{"200 task events", "GET", "/jobs/" + id + "/tasks/scrape-store/events", nil, key, http.StatusOK},
			{"200 without Origin", "GET", "/jobs", nil, []string{"x-api-key", a.key}, http.StatusOK},
			{"400 bad body", "POST", "/jobs", "{", key, http.StatusBadRequest},
			{"401 no key", "GET", "/jobs/" + id, nil, []string{"Origin", browserOrigin}, http.StatusUnauthorized},
			{"401 bad key", "POST", "/jobs", exampleJob, []string{"x-api-key", "bk_not-a-key", "Origin", browserOrigin}, http.StatusUnauthorized},
			{"404 job", "GET", "/jobs/job-nope", nil, key, http.StatusNotFound},
			{"404 endpoint", "GET", "/nope", nil, key, http.StatusNotFound},
			{"409 finished job", "POST", "/jobs/" + id + "/tasks", addTasksExample, key, http.StatusConflict},
			{"task-scoped 401", "POST", "/v1/task/heartbeat", "{}", []string{"Origin", browserOrigin}, http.StatusUnauthorized},
			{"healthz", "GET", "/healthz", nil, []string{"Origin", browserOrigin}, http.StatusOK},
			{"openapi", "GET", "/openapi.json", nil, []string{"Origin", browserOrigin}, http.StatusOK},
		} {
			res := a.do(c.method, c.path, c.body, c.headers...)
			wantStatus(t, res, c.status)
			wantCORS(t, c.name, res, "*")
		}

		// The live event stream (the job has finished, so it ends by itself).
		stream := a.do("GET", "/jobs/"+id+"/events", nil, append(key, "Accept", "text/event-stream")...)
		wantStatus(t, stream, http.StatusOK)
		if ct := stream.Header.Get("Content-Type"); ct != "text/event-stream" || !strings.Contains(string(stream.Raw), "event: end") {
			t.Fatalf("stream: %s %s", ct, stream.Raw)
		}
		wantCORS(t, "event stream", stream, "*")
	})
}

// A browser's preflight is answered before any route or key check, on any path of the public
// listener, and allows the headers Baton's clients send.
func TestCORSPreflight(t *testing.T) {
	forEachDriver(t, corsOptions("*"), func(t *testing.T, a *testAPI) {
		res := a.preflight("/jobs", browserOrigin, "POST", "x-api-key, content-type, idempotency-key")
		wantPreflightOK(t, "OPTIONS /jobs", res, "*", "POST")
		id := a.createJob(exampleJob)
		for _, c := range []struct{ path, method, headers string }{
			{"/jobs/" + id, "GET", "x-api-key"},
			{"/jobs/" + id + "/events", "GET", "x-api-key, last-event-id"},
			{"/jobs/" + id + "/tasks/scrape-store/events", "GET", "x-api-key"},
			{"/jobs/" + id + "/cancel", "POST", "x-api-key, content-type"},
			{"/v1/task/heartbeat", "POST", "x-trace-task-capability, content-type"},
			{"/v1/tasks/" + id + "/heartbeat", "POST", "authorization, content-type"},
			{"/no/such/path", "GET", "x-api-key"},
		} {
			wantPreflightOK(t, "OPTIONS "+c.path, a.preflight(c.path, browserOrigin, c.method, c.headers), "*", c.method)
		}
		// An OPTIONS that is not a preflight (no Origin, or no requested method) is an ordinary
		// request, with a method /jobs does not serve.
		notAllowed := "method OPTIONS is not allowed on /jobs; allowed: GET, HEAD, POST"
		wantError(t, a.do("OPTIONS", "/jobs", nil, "x-api-key", a.key), http.StatusMethodNotAllowed, notAllowed)
		wantError(t, a.do("OPTIONS", "/jobs", nil, "Origin", browserOrigin), http.StatusMethodNotAllowed, notAllowed)
	})

	// Preflights need no key and spend none of a key's budget; a 429 is readable and its
	// Retry-After exposed.
	opts := corsOptions("*")
	opts.limits = auth.Limits{RatePerSecond: 1.0 / 60, Burst: 1} // refills one request a minute
	t.Run("rate limited", func(t *testing.T) {
		forEachDriver(t, opts, func(t *testing.T, a *testAPI) {
			for range 5 {
				wantPreflightOK(t, "OPTIONS /jobs", a.preflight("/jobs", browserOrigin, "GET", "x-api-key"), "*", "GET")
			}
			wantStatus(t, a.do("GET", "/jobs", nil, "x-api-key", a.key, "Origin", browserOrigin), http.StatusOK)
			limited := a.do("GET", "/jobs", nil, "x-api-key", a.key, "Origin", browserOrigin)
			wantError(t, limited, http.StatusTooManyRequests, "rate limit exceeded")
			wantCORS(t, "429", limited, "*")
			if limited.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		})
	})
}

// A list of origins lets exactly those read answers: the listed Origin is echoed with Vary:
// Origin, any other gets no CORS header (the browser then hides the answer) and a refused
// preflight.
func TestCORSOriginList(t *testing.T) {
	const local = "http://localhost:5173"
	forEachDriver(t, corsOptions(browserOrigin, local), func(t *testing.T, a *testAPI) {
		for _, origin := range []string{browserOrigin, local} {
			res := a.do("GET", "/jobs", nil, "x-api-key", a.key, "Origin", origin)
			wantStatus(t, res, http.StatusOK)
			wantCORS(t, "listed "+origin, res, origin)
			if !slices.Contains(headerList(res.Header, "Vary"), "origin") {
				t.Errorf("listed %s: Vary %v, want Origin", origin, res.Header.Values("Vary"))
			}
			wantPreflightOK(t, "preflight from "+origin, a.preflight("/jobs", origin, "POST", "x-api-key, content-type"), origin, "POST")
			wantCORS(t, "401 to "+origin, a.do("GET", "/jobs", nil, "Origin", origin), origin)
		}
		for _, origin := range []string{"https://evil.example.com", "https://ui.example.com:8443", "http://ui.example.com", "null"} {
			res := a.do("GET", "/jobs", nil, "x-api-key", a.key, "Origin", origin)
			wantStatus(t, res, http.StatusOK) // the server answers; the browser does not show it
			wantNoCORS(t, "unlisted "+origin, res)
			if !slices.Contains(headerList(res.Header, "Vary"), "origin") {
				t.Errorf("unlisted %s: Vary %v, want Origin", origin, res.Header.Values("Vary"))
			}
			pre := a.preflight("/jobs", origin, "POST", "x-api-key")
			wantStatus(t, pre, http.StatusForbidden)
			wantNoCORS(t, "preflight from "+origin, pre)
		}
		noOrigin := a.do("GET", "/jobs", nil, "x-api-key", a.key)
		wantStatus(t, noOrigin, http.StatusOK)
		wantNoCORS(t, "no Origin", noOrigin)
	})
}

// Without allowed origins the listener sends no CORS header and has no preflight answer.
func TestCORSOff(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		res := a.do("GET", "/jobs", nil, "x-api-key", a.key, "Origin", browserOrigin)
		wantStatus(t, res, http.StatusOK)
		wantNoCORS(t, "GET /jobs", res)
		pre := a.preflight("/jobs", browserOrigin, "POST", "x-api-key")
		wantError(t, pre, http.StatusMethodNotAllowed, "method OPTIONS is not allowed on /jobs; allowed: GET, HEAD, POST")
		wantNoCORS(t, "OPTIONS /jobs", pre)
	})
}
