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
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/push"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// pushStart is the fake dispatcher clock's start in the push tests.
var pushStart = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// pushAPI is a full server (producer and internal listeners, task tokens) over a dispatcher with
// a fake clock, with the api.Server at hand to start a Pusher on.
type pushAPI struct {
	*workerAPI
	srv   *api.Server
	caps  *capability.Issuer
	clock *clockwork.FakeClock
	key   string // x-api-key of tenant acme
}

// forEachPushDriver runs fn on SQLite and PostgreSQL; pushTargets is the Server's
// Config.PushTargets (the submission check), not the Deliverer's (internal/push).
func forEachPushDriver(t *testing.T, pushTargets map[string]string, fn func(t *testing.T, a *pushAPI)) {
	t.Helper()
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		clock := clockwork.NewFakeClockAt(pushStart)
		quiet := slog.New(slog.DiscardHandler)
		d, err := dispatch.New(st, dispatch.Config{Clock: clock, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		tokens := auth.NewTokens(st, nil)
		caps := capability.New(capability.Config{Tokens: tokens, Dispatcher: d})
		s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Capabilities: caps,
			Logger: quiet, PushTargets: pushTargets})
		w := &workerAPI{t: t, st: st, d: d, tokens: tokens,
			public: httptest.NewServer(s.ProducerHandler()), internal: httptest.NewServer(s.InternalHandler())}
		t.Cleanup(w.public.Close)
		t.Cleanup(w.internal.Close)
		_, key, err := auth.CreateKey(context.Background(), st, "test-acme", "acme", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		fn(t, &pushAPI{workerAPI: w, srv: s, caps: caps, clock: clock, key: key})
	})
}

// startPusher starts a push dispatcher that calls back on the public listener; the test's end
// stops it.
func (a *pushAPI) startPusher(cfg push.Config) *push.Deliverer {
	if cfg.CallbackBaseURL == "" {
		cfg.CallbackBaseURL = a.public.URL
	}
	cfg.Token = a.caps.Mint
	cfg.Logger = slog.New(slog.DiscardHandler)
	p := push.New(a.d, cfg)
	p.Start(context.Background())
	a.t.Cleanup(p.Stop)
	return p
}

// producer sends a producer API request with the acme key.
func (a *pushAPI) producer(method, path string, body any) response {
	a.t.Helper()
	return a.request(method, a.public.URL+path, body, "x-api-key", a.key)
}

// createJob submits tasks through POST /jobs and returns the job id and each task's id by key.
func (a *pushAPI) createJob(tasks ...map[string]any) (string, map[string]string) {
	a.t.Helper()
	res := a.producer("POST", "/jobs", map[string]any{"tasks": tasks})
	wantStatus(a.t, res, http.StatusCreated)
	jobID, _ := res.Body["jobId"].(string)
	_, list, err := a.d.GetJob(context.Background(), "", jobID)
	if err != nil {
		a.t.Fatal(err)
	}
	ids := map[string]string{}
	for _, tk := range list {
		ids[tk.Key] = tk.ID
	}
	return jobID, ids
}

// attempts reads the attempts of a task.
func (a *pushAPI) attempts(id string) []*store.Attempt {
	a.t.Helper()
	d, err := a.d.GetTask(context.Background(), "", id)
	if err != nil {
		a.t.Fatal(err)
	}
	return d.Attempts
}

// untilRetried moves the fake clock past the backoff of a task whose retry is scheduled, so the
// push dispatcher's long poll claims it; it returns whether the task reached want.
func (a *pushAPI) untilRetried(id string, want lifecycle.TaskStatus) func() bool {
	return func() bool {
		tk := a.task(id)
		if tk.Status == lifecycle.Pending && tk.Attempt > 0 {
			// Also when the retry time has passed: the dispatcher's timer may have been set
			// after an earlier advance, as long from then as the wait it computed before it, so
			// keep moving time on in steps until it fires.
			a.clock.Advance(max(tk.AvailableAt.Sub(a.clock.Now()), 0) + 50*time.Millisecond)
		}
		return tk.Status == want
	}
}

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// delivery is one request a push target received.
type delivery struct {
	header http.Header
	raw    []byte
	env    map[string]any
}

func (d delivery) str(key string) string { s, _ := d.env[key].(string); return s }
func (d delivery) num(key string) int64  { n, _ := d.env[key].(float64); return int64(n) }

// testTarget is a push target: an HTTP server that records each delivery and answers it with
// answer, which can read the request's body again.
type testTarget struct {
	url string
	mu  sync.Mutex
	got []delivery
}

func newTestTarget(t *testing.T, answer func(d delivery, w http.ResponseWriter, r *http.Request)) *testTarget {
	t.Helper()
	tt := &testTarget{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		d := delivery{header: r.Header.Clone(), raw: raw}
		_ = json.Unmarshal(raw, &d.env)
		tt.mu.Lock()
		tt.got = append(tt.got, d)
		tt.mu.Unlock()
		answer(d, w, r)
	}))
	t.Cleanup(srv.Close)
	tt.url = srv.URL + "/run"
	return tt
}

func (tt *testTarget) deliveries() []delivery {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return slices.Clone(tt.got)
}

// received returns a condition: the target has received n deliveries.
func (tt *testTarget) received(n int) func() bool {
	return func() bool { return len(tt.deliveries()) >= n }
}

// envelopeKeys are the members of every envelope.
var envelopeKeys = []string{"taskId", "runId", "taskKey", "taskName", "queue", "tenantId", "attempt", "attemptId", "leaseToken",
	"leaseExpiresAt", "enqueuedAt", "deadline", "input", "dependencyOutputs", "callbackBaseUrl", "taskToken",
	"tokenExpiresAt", "heartbeatIntervalMs", "heartbeatTimeoutMs", "cancelGracePeriodMs", "idempotencyKey"}

func TestPushDeliversTheEnvelopeAndCallbacksRunTheDAG(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		var (
			mu        sync.Mutex
			callbacks []string // problems of the target's callbacks
		)
		target := newTestTarget(t, func(d delivery, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			// A callback worker: report started, then success, from outside the delivery.
			go func() {
				cb := d.str("callbackBaseUrl") + "/v1/tasks/" + d.str("taskId")
				auth := "Bearer " + d.str("taskToken")
				attempt := d.num("attempt")
				steps := []struct {
					endpoint string
					body     map[string]any
				}{
					{"started", map[string]any{"attempt": attempt, "workerId": "push-target", "startedAt": time.Now().UTC().Format(time.RFC3339)}},
					{"completed", map[string]any{"attempt": attempt, "workerId": "push-target", "outcome": "SUCCEEDED",
						"output": map[string]any{"from": d.str("taskKey"), "attempt": attempt}}},
				}
				for _, s := range steps {
					res, err := roundTrip("POST", cb+"/"+s.endpoint, s.body, "Authorization", auth)
					if err == nil && (res.Status != http.StatusOK || res.Body["acknowledged"] != true) {
						err = fmt.Errorf("%d %s", res.Status, res.Raw)
					}
					if err != nil {
						mu.Lock()
						callbacks = append(callbacks, fmt.Sprintf("%s %s: %v", d.str("taskKey"), s.endpoint, err))
						mu.Unlock()
						return
					}
				}
			}()
		})
		a.startPusher(push.Config{Targets: map[string]string{"work": target.url}})
		push := func(key string, n int, deps ...string) map[string]any {
			return withFields(tk(key, "work", deps...), "runtime", "push", "input", map[string]any{"n": n},
				"heartbeatTimeoutSeconds", 40, "cancelGraceSeconds", 5)
		}
		jobID, ids := a.createJob(push("a", 1), withFields(push("b", 2, "a"), "timeoutSeconds", 120))

		eventually(t, "the job completes", func() bool {
			job, _, err := a.d.GetJob(context.Background(), "", jobID)
			return err == nil && job.Status == lifecycle.JobCompleted
		})
		mu.Lock()
		if len(callbacks) > 0 {
			t.Fatalf("callbacks failed: %v", callbacks)
		}
		mu.Unlock()
		got := target.deliveries()
		if len(got) != 2 || got[0].str("taskKey") != "a" || got[1].str("taskKey") != "b" {
			t.Fatalf("deliveries %d, want a then b", len(got))
		}
		t.Logf("envelope of b: %s", got[1].raw)

		ctx := context.Background()
		for _, c := range []struct {
			d        delivery
			key      string
			input    string
			deps     string
			deadline any
			timeout  time.Duration
		}{
			{got[0], "a", `{"n":1}`, `{}`, nil, 0},
			{got[1], "b", `{"n":2}`, `{"a":{"from":"a","attempt":1}}`, pushStart.Add(120 * time.Second).Format(time.RFC3339), 120 * time.Second},
		} {
			d, tk := c.d, a.task(ids[c.key])
			for _, k := range envelopeKeys {
				if _, ok := d.env[k]; !ok {
					t.Errorf("%s: envelope has no %s: %s", c.key, k, d.raw)
				}
			}
			if len(d.env) != len(envelopeKeys) {
				t.Errorf("%s: envelope has %d members, want %d: %s", c.key, len(d.env), len(envelopeKeys), d.raw)
			}
			idem := fmt.Sprintf("%s/%s/1", jobID, ids[c.key])
			want := map[string]any{
				"taskId": ids[c.key], "runId": jobID, "taskKey": c.key, "taskName": "work", "queue": tk.Queue, "tenantId": "acme",
				"attempt": 1.0, "attemptId": tk.LeaseToken, "leaseToken": tk.LeaseToken, "callbackBaseUrl": a.public.URL,
				"leaseExpiresAt": pushStart.Add(40 * time.Second).Format(time.RFC3339),
				"enqueuedAt":     tk.AvailableAt.UTC().Format(time.RFC3339),
				"deadline":       c.deadline,
				// min(the 30 s default, half the heartbeat timeout)
				"heartbeatIntervalMs": 20000.0, "heartbeatTimeoutMs": 40000.0, "cancelGracePeriodMs": 5000.0,
				"idempotencyKey": idem,
			}
			for k, v := range want {
				if d.env[k] != v {
					t.Errorf("%s: %s = %#v, want %#v", c.key, k, d.env[k], v)
				}
			}
			if !sameJSON(d.env["input"], c.input) || !sameJSON(d.env["dependencyOutputs"], c.deps) {
				t.Errorf("%s: input %v, dependencyOutputs %v; want %s, %s", c.key, d.env["input"], d.env["dependencyOutputs"], c.input, c.deps)
			}
			if h := d.header.Get("Idempotency-Key"); h != idem {
				t.Errorf("%s: Idempotency-Key %q, want %q", c.key, h, idem)
			}
			if ct := d.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s: Content-Type %q", c.key, ct)
			}
			claims, err := a.tokens.Verify(ctx, d.str("taskToken"))
			if err != nil {
				t.Fatalf("%s: task token: %v", c.key, err)
			}
			if claims.TaskID != ids[c.key] || claims.JobID != jobID || claims.Tenant != "acme" || claims.Attempt != 1 || claims.LeaseToken != tk.LeaseToken {
				t.Errorf("%s: token claims %+v do not bind the attempt", c.key, claims)
			}
			if got, want := d.str("tokenExpiresAt"), claims.ExpiresAt.UTC().Format(time.RFC3339); got != want {
				t.Errorf("%s: tokenExpiresAt %s, want the token's expiry %s", c.key, got, want)
			}
			if ttl := claims.ExpiresAt.Sub(claims.IssuedAt.Time); ttl != auth.TokenTTL(c.timeout) {
				t.Errorf("%s: token lives %s, want %s", c.key, ttl, auth.TokenTTL(c.timeout))
			}
		}
		if b := a.task(ids["b"]); !sameJSON(json.RawMessage(b.Output), `{"from":"b","attempt":1}`) {
			t.Errorf("b's output %s", b.Output)
		}
	})
}

func TestPushTargetErrorIsRetriedThenDeadLettered(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		target := newTestTarget(t, func(_ delivery, w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		})
		p := a.startPusher(push.Config{Targets: map[string]string{"work": target.url}})
		_, ids := a.createJob(withFields(tk("a", "work"), "runtime", "push", "maxAttempts", 3, "backoffBaseMs", 1000, "backoffMaxMs", 1000))
		id := ids["a"]

		eventually(t, "the task fails for good", a.untilRetried(id, lifecycle.Failed))
		p.Stop() // no delivery in flight, none to come
		msg := "push target " + target.url + " answered 500 Internal Server Error: boom"
		tk := a.task(id)
		if tk.Attempt != 3 || tk.DeadLetteredAt.IsZero() || tk.Error == nil || tk.Error.Category != lifecycle.Infrastructure || tk.Error.Message != msg {
			t.Fatalf("task: attempt %d, dead-lettered at %v, error %+v; want attempt 3, dead-lettered, INFRASTRUCTURE %q",
				tk.Attempt, tk.DeadLetteredAt, tk.Error, msg)
		}
		got := target.deliveries()
		if len(got) != 3 {
			t.Fatalf("target called %d times, want 3", len(got))
		}
		attempts := a.attempts(id)
		for i, d := range got {
			n := i + 1
			if d.num("attempt") != int64(n) || d.header.Get("Idempotency-Key") != fmt.Sprintf("%s/%s/%d", tk.JobID, id, n) {
				t.Errorf("delivery %d: attempt %v, Idempotency-Key %q", n, d.env["attempt"], d.header.Get("Idempotency-Key"))
			}
			at := attempts[i]
			wantResult := lifecycle.Pending // retry scheduled
			if n == 3 {
				wantResult = lifecycle.Failed
			}
			if at.Attempt != n || at.Outcome != store.OutcomeFailed || at.Result != wantResult || at.Error == nil ||
				at.Error.Category != lifecycle.Infrastructure || at.LeaseToken != d.str("leaseToken") {
				t.Errorf("attempt %d: %+v (error %+v), want failed INFRASTRUCTURE with result %s under the delivered lease", n, at, at.Error, wantResult)
			}
		}
	})
}

func TestPushTargetThatDoesNotAnswerFailsTheAttempt(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		release := make(chan struct{})
		target := newTestTarget(t, func(_ delivery, w http.ResponseWriter, r *http.Request) {
			select { // never answers, until the pusher hangs up or the test ends
			case <-r.Context().Done():
			case <-release:
			}
		})
		t.Cleanup(func() { close(release) }) // before the target closes: Close waits for handlers
		a.startPusher(push.Config{Targets: map[string]string{"work": target.url}, Timeout: 300 * time.Millisecond})
		_, ids := a.createJob(withFields(tk("a", "work"), "runtime", "push", "backoffBaseMs", 1000, "backoffMaxMs", 1000))
		id := ids["a"]

		eventually(t, "the first attempt fails", func() bool { tk := a.task(id); return tk.Status == lifecycle.Pending && tk.Attempt == 1 })
		msg := "push target " + target.url + " did not answer within 300ms"
		at := a.attempts(id)[0]
		if at.Outcome != store.OutcomeFailed || at.Result != lifecycle.Pending || at.Error == nil ||
			at.Error.Category != lifecycle.Infrastructure || at.Error.Message != msg {
			t.Fatalf("attempt 1: %+v (error %+v), want failed INFRASTRUCTURE %q with a retry scheduled", at, at.Error, msg)
		}
		eventually(t, "the retry is delivered", func() bool { a.untilRetried(id, lifecycle.Running)(); return target.received(2)() })
		if got := target.deliveries(); got[1].num("attempt") != 2 {
			t.Fatalf("second delivery is attempt %v, want 2", got[1].env["attempt"])
		}
	})
}

func TestPushSubmissionWithoutTargetIsRejected(t *testing.T) {
	forEachPushDriver(t, map[string]string{"known": "http://127.0.0.1:1/run"}, func(t *testing.T, a *pushAPI) {
		noTarget := func(key, name string) string {
			return fmt.Sprintf("Task %s: no push target for task name %q (baton server --push-target %s=URL)", key, name, name)
		}
		push := func(key, name string, deps ...string) map[string]any {
			return withFields(tk(key, name, deps...), "runtime", "push")
		}
		res := a.producer("POST", "/jobs", map[string]any{"tasks": []any{
			push("a", "known"), push("b", "mystery", "a"), tk("c", "mystery"), push("d", "other")}})
		wantErrors(t, res, noTarget("b", "mystery"), noTarget("d", "other"))
		if list := a.producer("GET", "/jobs", nil); !sameJSON(list.Body["jobs"], `[]`) {
			t.Fatalf("a job was created: %s", list.Raw)
		}

		jobID, _ := a.createJob(push("a", "known"), tk("c", "mystery"))
		res = a.producer("POST", "/jobs/"+jobID+"/tasks", map[string]any{"tasks": []any{push("e", "mystery", "a")}})
		wantErrors(t, res, noTarget("e", "mystery"))
		if job := a.producer("GET", "/jobs/"+jobID, nil); job.Body["totalTasks"] != 2.0 {
			t.Fatalf("tasks were added: %s", job.Raw)
		}
	})
}

func TestPushDeliveryWithoutTargetIsAConfigurationError(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		a.startPusher(push.Config{Targets: map[string]string{}})
		_, ids := a.createJob(withFields(tk("a", "orphan"), "runtime", "push", "maxAttempts", 3))
		id := ids["a"]

		eventually(t, "the task fails", func() bool { return a.task(id).Status == lifecycle.Failed })
		msg := `no push target for task name "orphan" (baton server --push-target orphan=URL)`
		tk := a.task(id)
		if tk.Attempt != 1 || tk.DeadLetteredAt.IsZero() || tk.Error == nil || tk.Error.Category != lifecycle.Configuration || tk.Error.Message != msg {
			t.Fatalf("task: attempt %d, dead-lettered at %v, error %+v; want dead-lettered after attempt 1 with CONFIGURATION %q",
				tk.Attempt, tk.DeadLetteredAt, tk.Error, msg)
		}
	})
}

func TestPushTasksAreNeverClaimedByPullWorkers(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		// No push dispatcher runs: the push task stays ready, and the higher priority one.
		_, ids := a.createJob(withFields(tk("p", "work"), "runtime", "push", "queue", "q", "priority", 10),
			withFields(tk("l", "work"), "queue", "q"))

		res := a.post(a.internal.URL, "/internal/task-claim", map[string]any{"task_id": ids["p"], "worker_id": "w1"})
		if res.Status != http.StatusOK || res.Body["status"] != "NotClaimed" {
			t.Fatalf("internal claim of the push task: %d %s", res.Status, res.Raw)
		}
		claim := map[string]any{"worker_id": "w1", "streams": []string{"q"}, "max_wait_ms": 0}
		res = a.post(a.internal.URL, "/internal/worker/claim", claim)
		if res.Status != http.StatusOK || res.Body["claimed"] != true || res.Body["job_id"] != ids["l"] {
			t.Fatalf("stream claim: %d %s; want the pull task %s", res.Status, res.Raw, ids["l"])
		}
		res = a.post(a.internal.URL, "/internal/worker/claim", claim)
		if res.Status != http.StatusOK || res.Body["claimed"] != false {
			t.Fatalf("second stream claim: %d %s; want nothing", res.Status, res.Raw)
		}
		if p := a.task(ids["p"]); p.Status != lifecycle.Pending || p.Attempt != 0 {
			t.Fatalf("push task %s attempt %d, want pending and never claimed", p.Status, p.Attempt)
		}
	})
}

func TestPushStopWaitsForDeliveriesInFlight(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		release := make(chan struct{})
		target := newTestTarget(t, func(_ delivery, w http.ResponseWriter, _ *http.Request) {
			<-release
			w.WriteHeader(http.StatusAccepted)
		})
		p := a.startPusher(push.Config{Targets: map[string]string{"work": target.url}})
		_, ids := a.createJob(withFields(tk("a", "work"), "runtime", "push"))
		eventually(t, "the task is delivered", target.received(1))

		stopped := make(chan struct{})
		go func() { p.Stop(); close(stopped) }()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a delivery was in flight")
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatal("Stop did not return after the delivery ended")
		}
		// The target took the task: the attempt runs on, the dispatcher does not fail it.
		if tk := a.task(ids["a"]); tk.Status != lifecycle.Running || tk.Attempt != 1 {
			t.Fatalf("task %s attempt %d, want running attempt 1", tk.Status, tk.Attempt)
		}
	})
}
