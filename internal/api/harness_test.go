package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// testAPI is a producer API over a real store, with one API key of tenant "acme".
type testAPI struct {
	t   *testing.T
	st  store.Store
	d   *dispatch.Dispatcher
	srv *httptest.Server
	key string // x-api-key of tenant acme
}

type apiOptions struct {
	limits       auth.Limits
	maxBodyBytes int64
	maxTasks     int
	corsOrigins  []string
}

func defaultOptions() apiOptions {
	return apiOptions{limits: auth.Limits{}, maxTasks: 50} // no rate limit unless a test sets one
}

func newAPI(t *testing.T, st store.Store, opts apiOptions) *testAPI {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{MaxTasksPerJob: opts.maxTasks, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, opts.limits, nil), Logger: quiet,
		MaxBodyBytes: opts.maxBodyBytes, EventPoll: 20 * time.Millisecond, CORSOrigins: opts.corsOrigins})
	srv := httptest.NewServer(s.ProducerHandler())
	t.Cleanup(srv.Close)
	a := &testAPI{t: t, st: st, d: d, srv: srv}
	a.key = a.newKey("acme")
	return a
}

// forEachDriver runs fn as parallel subtests on SQLite and PostgreSQL.
func forEachDriver(t *testing.T, opts apiOptions, fn func(t *testing.T, a *testAPI)) {
	t.Helper()
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) { fn(t, newAPI(t, st, opts)) })
}

func (a *testAPI) newKey(tenant string) string {
	a.t.Helper()
	_, secret, err := auth.CreateKey(context.Background(), a.st, "test-"+tenant, tenant, "", time.Now())
	if err != nil {
		a.t.Fatal(err)
	}
	return secret
}

// response is a decoded answer.
type response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// roundTrip sends one request and decodes a JSON answer; it may run on any goroutine. body is a
// string or []byte sent as is, nil, or a value encoded as JSON; headers are name, value pairs.
func roundTrip(method, url string, body any, headers ...string) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	out := response{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if len(raw) > 0 && res.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(raw, &out.Body); err != nil {
			return out, fmt.Errorf("%s %s: answer is not a JSON object: %s", method, url, raw)
		}
	}
	return out, nil
}

// do sends a request with the acme key (or the given headers, which replace it) and decodes the
// JSON answer.
func (a *testAPI) do(method, path string, body any, headers ...string) response {
	a.t.Helper()
	if len(headers) == 0 {
		headers = []string{"x-api-key", a.key}
	}
	res, err := roundTrip(method, a.srv.URL+path, body, headers...)
	if err != nil {
		a.t.Fatal(err)
	}
	return res
}

// exampleJob is the five-task example request (examples/job.json).
const exampleJob = `{
  "tasks": [
    { "taskId": "scrape-store", "name": "scrape-store", "dependsOn": [], "input": { "storeId": "store-123", "url": "https://example.com" } },
    { "taskId": "analyze-competitors", "name": "analyze-competitors", "dependsOn": [], "input": { "market": "fashion" } },
    { "taskId": "color-tags", "name": "color-tags", "dependsOn": ["scrape-store"], "input": { "style": "modern" } },
    { "taskId": "font-pairing", "name": "font-pairing", "dependsOn": ["scrape-store"], "input": {} },
    { "taskId": "compile-result", "name": "compile-result", "dependsOn": ["color-tags", "font-pairing"], "input": {} }
  ]
}`

// runTask claims the task with the given key (by its global id) and completes it through the core.
func (a *testAPI) runTask(jobID, key string, fail bool) {
	a.t.Helper()
	ctx := context.Background()
	_, tasks, err := a.d.GetJob(ctx, "", jobID)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, tk := range tasks {
		if tk.Key != key {
			continue
		}
		c, err := a.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: tk.ID, WorkerID: "test-worker"})
		if err != nil {
			a.t.Fatalf("claim %s: %v", key, err)
		}
		p := dispatch.CompleteParams{TaskID: tk.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Output: json.RawMessage(`{"done":"` + key + `"}`)}
		if fail {
			p.Outcome, p.Error = store.OutcomeFailed, &store.TaskError{Category: "DATA_QUALITY", Message: "bad input"}
		}
		if _, err := a.d.Complete(ctx, p); err != nil {
			a.t.Fatalf("complete %s: %v", key, err)
		}
		return
	}
	a.t.Fatalf("no task %s in %s", key, jobID)
}

// on returns a copy of a whose helpers report to t, for subtests that share a's server.
func (a *testAPI) on(t *testing.T) *testAPI {
	c := *a
	c.t = t
	return &c
}

// newKeyWithID creates a key of tenant and returns its id and secret.
func (a *testAPI) newKeyWithID(tenant string) (id, secret string) {
	a.t.Helper()
	k, secret, err := auth.CreateKey(context.Background(), a.st, "test-"+tenant, tenant, "", time.Now())
	if err != nil {
		a.t.Fatal(err)
	}
	return k.ID, secret
}

// createJob submits body with the acme key and returns the new job's id.
func (a *testAPI) createJob(body string) string {
	a.t.Helper()
	res := a.do("POST", "/jobs", body)
	if res.Status != http.StatusCreated {
		a.t.Fatalf("POST /jobs: %d %s", res.Status, res.Raw)
	}
	id, _ := res.Body["jobId"].(string)
	return id
}

// send is do without the test: it may run on any goroutine and returns transport errors.
func (a *testAPI) send(method, path, body string, headers ...string) (response, error) {
	return roundTrip(method, a.srv.URL+path, body, headers...)
}

// wantStatus fails the test unless res answered code.
func wantStatus(t *testing.T, res response, code int) {
	t.Helper()
	if res.Status != code {
		t.Fatalf("status %d, want %d; body: %s", res.Status, code, res.Raw)
	}
}

// wantError fails the test unless res answered code with a JSON body whose "error" is msg.
func wantError(t *testing.T, res response, code int, msg string) {
	t.Helper()
	wantStatus(t, res, code)
	if got, _ := res.Body["error"].(string); got != msg {
		t.Fatalf("error %q, want %q; body: %s", got, msg, res.Raw)
	}
}

// wantErrors fails the test unless res is a 400 whose "error" is msgs[0] and "errors" is msgs.
func wantErrors(t *testing.T, res response, msgs ...string) {
	t.Helper()
	wantError(t, res, http.StatusBadRequest, msgs[0])
	got, ok := res.Body["errors"].([]any)
	if !ok || len(got) != len(msgs) {
		t.Fatalf("errors %v, want %q; body: %s", res.Body["errors"], msgs, res.Raw)
	}
	for i, m := range msgs {
		if got[i] != m {
			t.Fatalf("errors[%d] = %q, want %q; body: %s", i, got[i], m, res.Raw)
		}
	}
}

// tickingClock is a real clock whose every reading is one millisecond after the one before, so
// that two readings taken in one transition never agree by chance.
type tickingClock struct {
	clockwork.Clock
	ms atomic.Int64
}

func newTickingClock() *tickingClock {
	c := &tickingClock{Clock: clockwork.NewRealClock()}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *tickingClock) Now() time.Time { return time.UnixMilli(c.ms.Add(1)).UTC() }

// newAPIWithClock is newAPI with a dispatcher that reads clock.
func newAPIWithClock(t *testing.T, st store.Store, opts apiOptions, clock clockwork.Clock) *testAPI {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{Clock: clock, MaxTasksPerJob: opts.maxTasks, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, opts.limits, nil), Logger: quiet,
		MaxBodyBytes: opts.maxBodyBytes, EventPoll: 20 * time.Millisecond, CORSOrigins: opts.corsOrigins})
	srv := httptest.NewServer(s.ProducerHandler())
	t.Cleanup(srv.Close)
	a := &testAPI{t: t, st: st, d: d, srv: srv}
	a.key = a.newKey("acme")
	return a
}
