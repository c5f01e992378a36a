package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// Tests of the callback dialect (callback.go).

// callback posts body to /v1/tasks/{taskID}/{endpoint} with the token as a bearer token ("": no
// Authorization header).
func (w *workerAPI) callback(taskID, endpoint, token string, body any) response {
	w.t.Helper()
	if token == "" {
		return w.post(w.public.URL, "/v1/tasks/"+taskID+"/"+endpoint, body)
	}
	return w.post(w.public.URL, "/v1/tasks/"+taskID+"/"+endpoint, body, "Authorization", "Bearer "+token)
}

// callbackOK checks a 200 answer: acknowledged, an RFC 3339 UTC serverTime, and exactly the
// given other members.
func callbackOK(t *testing.T, res response, keys ...string) map[string]any {
	t.Helper()
	if res.Status != http.StatusOK || res.Body["acknowledged"] != true {
		t.Fatalf("answer %d %s, want 200 acknowledged", res.Status, res.Raw)
	}
	wantKeysStream(t, "answer", res.Body, append([]string{"acknowledged", "serverTime"}, keys...)...)
	s, _ := res.Body["serverTime"].(string)
	at, err := time.Parse(time.RFC3339, s)
	if err != nil || !strings.HasSuffix(s, "Z") || time.Since(at) > time.Minute || time.Until(at) > time.Minute {
		t.Fatalf("serverTime %q is not the current RFC 3339 UTC time", s)
	}
	return res.Body
}

// callbackRefused checks a refusal's status and error code.
func callbackRefused(t *testing.T, res response, status int, code string) map[string]any {
	t.Helper()
	if res.Status != status || res.Body["error"] != code {
		t.Fatalf("answer %d %s, want %d %q", res.Status, res.Raw, status, code)
	}
	if msg, _ := res.Body["message"].(string); msg == "" {
		t.Fatalf("refusal without a message: %s", res.Raw)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("refusal Content-Type %q", ct)
	}
	return res.Body
}

// callbackExact checks an answer's status and exact JSON body.
func callbackExact(t *testing.T, res response, status int, want string) {
	t.Helper()
	if res.Status != status || !streamJSONEqual(t, res.Body, want) {
		t.Fatalf("answer %d %s, want %d %s", res.Status, res.Raw, status, want)
	}
}

// callbackSucceeded is the callback dialect's success report, for attempt.
func callbackSucceeded(attempt int) map[string]any {
	return map[string]any{
		"attempt": attempt, "workerId": "worker-abc123", "outcome": "SUCCEEDED", "completedAt": "2025-01-15T10:30:00Z",
		"output": map[string]any{"materializationId": "mat_01HGW5N7XHJM4GX29KZRXQP6NA", "rowCount": 1000000, "byteSize": 52428800,
			"outputPath": "gs://bucket/tenant/workspace/assets/raw/events/2025-01-15/"},
		"metrics": map[string]any{"cpuTimeMs": 45000, "peakMemoryBytes": 2147483648, "ioReadBytes": 10485760, "ioWriteBytes": 52428800},
	}
}

func callbackBeat(attempt int) map[string]any {
	return map[string]any{"attempt": attempt, "workerId": "worker-abc123", "heartbeatAt": "2025-01-15T10:05:00Z",
		"progressPct": 45, "message": "Processing partition 5 of 10"}
}

func callbackStart(attempt int) map[string]any {
	return map[string]any{"attempt": attempt, "workerId": "worker-abc123", "startedAt": "2025-01-15T10:00:00Z"}
}

// callbackAttempt reads one attempt of a task from the store.
func callbackAttempt(t *testing.T, w *workerAPI, taskID string, n int) *store.Attempt {
	t.Helper()
	a, err := w.st.AttemptGet(context.Background(), taskID, n)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// callbackRetried fails the current attempt of a task through the core (a retryable failure of a
// task without backoff) and claims the next one, returning its token.
func callbackRetried(t *testing.T, w *workerAPI, c *dispatch.Claim) (*dispatch.Claim, string) {
	t.Helper()
	res, err := w.d.Complete(context.Background(), dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
		Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: lifecycle.Infrastructure, Message: "node lost"}})
	if err != nil || !res.Requeued {
		t.Fatalf("fail attempt %d: %+v %v", c.Task.Attempt, res, err)
	}
	return w.claim(c.Task.ID)
}

var callbackNoBackoff = lifecycle.TaskSpec{BackoffBaseMs: streamPtr[int64](0), BackoffMaxMs: streamPtr[int64](0)}

func callbackSpec(key, name string) lifecycle.TaskSpec {
	s := callbackNoBackoff
	s.Key, s.Name = key, name
	return s
}

func TestCallbackConformance(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "events", Name: "materialize"})
		id := ids["events"]
		_, tok := w.claim(id)

		// started changes nothing.
		before := streamState(t, w, id)
		callbackOK(t, w.callback(id, "started", tok, callbackStart(1)))
		if after := streamState(t, w, id); after != before {
			t.Fatalf("started changed state:\n%s\n%s", before, after)
		}

		// heartbeat extends the lease; no cancel, so no cancelReason; a young token is not
		// replaced.
		lease := w.task(id).LeaseExpiresAt
		time.Sleep(5 * time.Millisecond)
		hb := callbackOK(t, w.callback(id, "heartbeat", tok, callbackBeat(1)), "shouldCancel")
		if hb["shouldCancel"] != false {
			t.Fatalf("heartbeat: %v", hb)
		}
		if !w.task(id).LeaseExpiresAt.After(lease) {
			t.Fatalf("heartbeat did not extend the lease")
		}
		// heartbeatAt is optional.
		callbackOK(t, w.callback(id, "heartbeat", tok, map[string]any{"attempt": 1, "workerId": "worker-abc123"}), "shouldCancel")

		// completed: output on the task, metrics on the attempt.
		res := callbackOK(t, w.callback(id, "completed", tok, callbackSucceeded(1)), "finalState", "willRetry")
		if res["finalState"] != "SUCCEEDED" || res["willRetry"] != false {
			t.Fatalf("completed: %v", res)
		}
		task := w.task(id)
		if task.Status != lifecycle.Completed || !streamJSONEqual(t, mustJSON(t, task.Output), `{"materializationId":"mat_01HGW5N7XHJM4GX29KZRXQP6NA",
			"rowCount":1000000,"byteSize":52428800,"outputPath":"gs://bucket/tenant/workspace/assets/raw/events/2025-01-15/"}`) {
			t.Fatalf("task: %s %s", task.Status, task.Output)
		}
		a := callbackAttempt(t, w, id, 1)
		if a.Outcome != store.OutcomeSucceeded || !streamJSONEqual(t, mustJSON(t, a.Metrics),
			`{"cpuTimeMs":45000,"peakMemoryBytes":2147483648,"ioReadBytes":10485760,"ioWriteBytes":52428800}`) {
			t.Fatalf("attempt: %s metrics %s", a.Outcome, a.Metrics)
		}

		// A repeat is acknowledged again without a second effect.
		before = streamState(t, w, id)
		res = callbackOK(t, w.callback(id, "completed", tok, callbackSucceeded(1)), "finalState", "willRetry")
		if res["finalState"] != "SUCCEEDED" || res["willRetry"] != false {
			t.Fatalf("repeated completed: %v", res)
		}
		if after := streamState(t, w, id); after != before {
			t.Fatalf("a repeated completed changed state")
		}
		// The attempt is over: /started and /heartbeat now hear that the task is terminal.
		body := callbackRefused(t, w.callback(id, "started", tok, callbackStart(1)), http.StatusConflict, "task_already_terminal")
		if body["state"] != "SUCCEEDED" {
			t.Fatalf("started after success: %v", body)
		}
		callbackRefused(t, w.callback(id, "heartbeat", tok, callbackBeat(1)), http.StatusConflict, "task_already_terminal")
		// A different outcome for the same attempt conflicts.
		callbackRefused(t, w.callback(id, "completed", tok, map[string]any{"attempt": 1, "workerId": "w", "outcome": "FAILED"}),
			http.StatusConflict, "outcome_conflict")
		if after := streamState(t, w, id); after != before {
			t.Fatalf("refused calls changed state")
		}
	})
}

// mustJSON decodes raw JSON for comparisons.
func mustJSON(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("stored JSON %q: %v", raw, err)
	}
	return v
}

func TestCallbackCancellation(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "materialize"}, lifecycle.TaskSpec{Key: "b", Name: "materialize"})
		a, b := ids["a"], ids["b"]
		_, tokA := w.claim(a)
		_, tokB := w.claim(b)
		for _, id := range []string{a, b} {
			if _, err := w.d.CancelTask(ctx, id, ""); err != nil {
				t.Fatal(err)
			}
		}

		// Cancelled before the worker started: /started says 409, and changes nothing.
		before := streamState(t, w, a)
		callbackExact(t, w.callback(a, "started", tokA, callbackStart(1)), http.StatusConflict,
			`{"error":"task_already_terminal","state":"CANCELLED","message":"Task was cancelled before worker started"}`)
		if after := streamState(t, w, a); after != before {
			t.Fatalf("started changed state")
		}

		// A running worker hears it on its heartbeat.
		hb := callbackOK(t, w.callback(b, "heartbeat", tokB, callbackBeat(1)), "shouldCancel", "cancelReason")
		if hb["shouldCancel"] != true || hb["cancelReason"] != "user_requested" {
			t.Fatalf("heartbeat after cancel: %v", hb)
		}

		// It reports CANCELLED; the phase and partial progress are kept in the attempt's metrics.
		for _, c := range []struct {
			id, tok string
			body    map[string]any
			metrics string
		}{
			{a, tokA, map[string]any{"attempt": 1, "workerId": "worker-abc123", "outcome": "CANCELLED", "completedAt": "2025-01-15T10:15:00Z"}, `null`},
			{b, tokB, map[string]any{"attempt": 1, "workerId": "worker-abc123", "outcome": "CANCELLED", "completedAt": "2025-01-15T10:15:00Z",
				"cancelledDuringPhase": "processing", "partialProgress": map[string]any{"recordsProcessed": 500000, "lastCheckpoint": "partition-5"},
				"metrics": map[string]any{"cpuTimeMs": 5000}},
				`{"cpuTimeMs":5000,"cancelledDuringPhase":"processing","partialProgress":{"recordsProcessed":500000,"lastCheckpoint":"partition-5"}}`},
		} {
			res := callbackOK(t, w.callback(c.id, "completed", c.tok, c.body), "finalState", "willRetry")
			if res["finalState"] != "CANCELLED" || res["willRetry"] != false {
				t.Fatalf("completed CANCELLED: %v", res)
			}
			if task := w.task(c.id); task.Status != lifecycle.Canceled {
				t.Fatalf("task %s", task.Status)
			}
			at := callbackAttempt(t, w, c.id, 1)
			var got any
			if len(at.Metrics) > 0 {
				got = mustJSON(t, at.Metrics)
			}
			if at.Outcome != store.OutcomeCanceled || !streamJSONEqual(t, got, c.metrics) {
				t.Fatalf("attempt: %s metrics %s, want %s", at.Outcome, at.Metrics, c.metrics)
			}
		}
		body := callbackRefused(t, w.callback(b, "started", tokB, callbackStart(1)), http.StatusConflict, "task_already_terminal")
		if body["state"] != "CANCELLED" {
			t.Fatalf("started after the cancel completed: %v", body)
		}
	})
}

func TestCallbackFailureCategoriesDecideWillRetry(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		for i, c := range []struct {
			error     map[string]any // nil: no error member
			attempts  int            // max attempts; 0: the default 3
			willRetry bool
			category  lifecycle.Category
		}{
			{map[string]any{"category": "USER_CODE", "message": "KeyError: 'missing_column'", "stackTrace": "Traceback ..."}, 0, true, lifecycle.UserCode},
			{map[string]any{"category": "DATA_QUALITY", "message": "bad rows"}, 0, false, lifecycle.DataQuality},
			{map[string]any{"category": "INFRASTRUCTURE", "message": "OOM"}, 0, true, lifecycle.Infrastructure},
			{map[string]any{"category": "CONFIGURATION", "message": "no env"}, 0, false, lifecycle.Configuration},
			{map[string]any{"category": "TIMEOUT", "message": "deadline"}, 0, true, lifecycle.Timeout},
			{map[string]any{"category": "CANCELLED", "message": "stopped"}, 0, false, lifecycle.Cancelled},
			{map[string]any{"category": "USER_CODE", "retryable": false}, 0, false, lifecycle.UserCode},
			{map[string]any{"category": "DATA_QUALITY", "retryable": true}, 0, true, lifecycle.DataQuality},
			{map[string]any{"message": "no category"}, 0, true, lifecycle.UserCode},
			{nil, 0, true, lifecycle.UserCode},
			{map[string]any{"category": "USER_CODE", "retryable": true}, 1, false, lifecycle.UserCode}, // last attempt
		} {
			t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
				w := *w
				w.t = t
				spec := lifecycle.TaskSpec{Key: "t", Name: "materialize"}
				if c.attempts > 0 {
					spec.MaxAttempts = streamPtr(c.attempts)
				}
				_, ids := w.submit(spec)
				_, tok := w.claim(ids["t"])
				body := map[string]any{"attempt": 1, "workerId": "worker-abc123", "outcome": "FAILED", "completedAt": "2025-01-15T10:30:00Z",
					"metrics": map[string]any{"cpuTimeMs": 5000, "peakMemoryBytes": 1073741824}}
				if c.error != nil {
					body["error"] = c.error
				}
				res := callbackOK(t, w.callback(ids["t"], "completed", tok, body), "finalState", "willRetry")
				if res["finalState"] != "FAILED" || res["willRetry"] != c.willRetry {
					t.Fatalf("error %v: %v, want FAILED willRetry=%v", c.error, res, c.willRetry)
				}
				task := w.task(ids["t"])
				want := lifecycle.Failed
				if c.willRetry {
					want = lifecycle.Pending
				}
				a := callbackAttempt(t, &w, ids["t"], 1)
				if task.Status != want || a.Error == nil || a.Error.Category != c.category ||
					!streamJSONEqual(t, mustJSON(t, a.Metrics), `{"cpuTimeMs":5000,"peakMemoryBytes":1073741824}`) {
					t.Fatalf("task %s (want %s), attempt error %+v metrics %s", task.Status, want, a.Error, a.Metrics)
				}
				// The repeat answers the same.
				res = callbackOK(t, w.callback(ids["t"], "completed", tok, body), "finalState", "willRetry")
				if res["finalState"] != "FAILED" || res["willRetry"] != c.willRetry {
					t.Fatalf("repeat: %v", res)
				}
			})
		}
	})
}

func TestCallbackHeartbeatRefreshesAnAgingToken(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "materialize"})
		c, _ := w.claim(ids["a"])
		// A one-hour token issued 40 minutes ago has less than half its life left.
		old := auth.NewTokens(w.st, func() time.Time { return time.Now().Add(-40 * time.Minute) })
		tok, _, err := old.Issue(ctx, auth.TaskClaims{Tenant: "acme", JobID: c.Task.JobID, TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		hb := callbackOK(t, w.callback(ids["a"], "heartbeat", tok, callbackBeat(1)), "shouldCancel", "taskToken", "tokenExpiresAt")
		fresh, err := w.tokens.Verify(ctx, hb["taskToken"].(string))
		if err != nil || fresh.TaskID != c.Task.ID || fresh.Attempt != 1 || fresh.LeaseToken != c.Task.LeaseToken || time.Until(fresh.ExpiresAt.Time) < 50*time.Minute {
			t.Fatalf("fresh token: %+v %v", fresh, err)
		}
		exp, err := time.Parse(time.RFC3339, hb["tokenExpiresAt"].(string))
		if err != nil || !exp.Equal(fresh.ExpiresAt.Time) {
			t.Fatalf("tokenExpiresAt %v, token says %v", hb["tokenExpiresAt"], fresh.ExpiresAt.Time)
		}
		// The fresh token works, and being young is not replaced.
		callbackOK(t, w.callback(ids["a"], "heartbeat", hb["taskToken"].(string), callbackBeat(1)), "shouldCancel")
	})
}

func TestCallbackExpiredAttemptIsGone(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		ctx := context.Background()
		_, ids := w.submit(
			lifecycle.TaskSpec{Key: "late", Name: "materialize", HeartbeatTimeoutSeconds: streamPtr(10)},
			lifecycle.TaskSpec{Key: "last", Name: "materialize", HeartbeatTimeoutSeconds: streamPtr(10), MaxAttempts: streamPtr(1)})
		_, tokLate := w.claim(ids["late"])
		_, tokLast := w.claim(ids["last"])
		clock.Advance(11 * time.Second)

		// The heartbeat itself applies the timeout (the reaper has not run): 410, abort.
		callbackExact(t, w.callback(ids["late"], "heartbeat", tokLate, callbackBeat(1)), http.StatusGone,
			`{"error":"task_expired","message":"Task exceeded heartbeat timeout"}`)
		if task := w.task(ids["late"]); task.Status != lifecycle.Pending {
			t.Fatalf("after the timeout: %s", task.Status)
		}
		before := streamState(t, w, ids["late"])
		callbackRefused(t, w.callback(ids["late"], "started", tokLate, callbackStart(1)), http.StatusGone, "task_expired")
		callbackRefused(t, w.callback(ids["late"], "heartbeat", tokLate, callbackBeat(1)), http.StatusGone, "task_expired")
		if after := streamState(t, w, ids["late"]); after != before {
			t.Fatalf("refused calls changed state")
		}
		// No newer attempt was claimed, so its late result still counts
		// (docs/lifecycle.md#late-replies).
		res := callbackOK(t, w.callback(ids["late"], "completed", tokLate, callbackSucceeded(1)), "finalState", "willRetry")
		if res["finalState"] != "SUCCEEDED" || w.task(ids["late"]).Status != lifecycle.Completed {
			t.Fatalf("late result: %v", res)
		}

		// Timed out on its last attempt and dead-lettered by the reaper: every callback is 410.
		if _, err := w.d.Reap(ctx); err != nil {
			t.Fatal(err)
		}
		if task := w.task(ids["last"]); task.Status != lifecycle.Failed {
			t.Fatalf("last attempt after the reaper: %s", task.Status)
		}
		before = streamState(t, w, ids["last"])
		callbackRefused(t, w.callback(ids["last"], "started", tokLast, callbackStart(1)), http.StatusGone, "task_expired")
		callbackExact(t, w.callback(ids["last"], "heartbeat", tokLast, callbackBeat(1)), http.StatusGone,
			`{"error":"task_expired","message":"Task exceeded heartbeat timeout"}`)
		callbackRefused(t, w.callback(ids["last"], "completed", tokLast, callbackSucceeded(1)), http.StatusGone, "task_expired")
		if after := streamState(t, w, ids["last"]); after != before {
			t.Fatalf("refused calls changed state")
		}
	})
}

func TestCallbackStaleAttemptAfterRetry(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		spec := callbackSpec("a", "materialize")
		spec.HeartbeatTimeoutSeconds = streamPtr(10)
		_, ids := w.submit(spec)
		id := ids["a"]
		_, tok1 := w.claim(id)
		clock.Advance(11 * time.Second)
		if _, err := w.d.Reap(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, tok2 := w.claim(id) // attempt 2
		before := streamState(t, w, id)

		mismatch := func(endpoint string, body any) map[string]any {
			t.Helper()
			b := callbackRefused(t, w.callback(id, endpoint, tok1, body), http.StatusConflict, "attempt_mismatch")
			if b["expectedAttempt"] != 2.0 || b["receivedAttempt"] != 1.0 {
				t.Fatalf("%s: %v", endpoint, b)
			}
			return b
		}
		mismatch("started", callbackStart(1))
		mismatch("heartbeat", callbackBeat(1))
		callbackExact(t, w.callback(id, "completed", tok1, callbackSucceeded(1)), http.StatusConflict,
			`{"error":"attempt_mismatch","expectedAttempt":2,"receivedAttempt":1,"message":"A newer attempt has already completed"}`)
		if after := streamState(t, w, id); after != before {
			t.Fatalf("stale calls changed state:\n%s\n%s", before, after)
		}

		// The current attempt proceeds; the stale one stays refused afterwards.
		callbackOK(t, w.callback(id, "started", tok2, callbackStart(2)))
		res := callbackOK(t, w.callback(id, "completed", tok2, callbackSucceeded(2)), "finalState", "willRetry")
		if res["finalState"] != "SUCCEEDED" {
			t.Fatalf("current attempt: %v", res)
		}
		before = streamState(t, w, id)
		mismatch("completed", callbackSucceeded(1))
		mismatch("heartbeat", callbackBeat(1))
		if after := streamState(t, w, id); after != before {
			t.Fatalf("stale calls changed state")
		}
	})
}

// callbackExpiredToken mints a token of t's current attempt that expired an hour ago. (The
// harness's w.token(t, negative ttl) does not: its clock closure reads ttl after it was negated,
// so it mints a token that is valid for hours.)
func callbackExpiredToken(t *testing.T, w *workerAPI, task *store.Task) string {
	t.Helper()
	past := auth.NewTokens(w.st, func() time.Time { return time.Now().Add(-2 * time.Hour) })
	tok, _, err := past.Issue(context.Background(), auth.TaskClaims{Tenant: "acme", JobID: task.JobID, TaskID: task.ID,
		Attempt: task.Attempt, LeaseToken: task.LeaseToken}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.tokens.Verify(context.Background(), tok); err != auth.ErrTokenExpired {
		t.Fatalf("the expired token verifies as %v", err)
	}
	return tok
}

// callbackTamper rewrites a token's claims without re-signing it.
func callbackTamper(t *testing.T, token string, edit func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	edit(claims)
	raw, _ = json.Marshal(claims)
	parts[1] = base64.RawURLEncoding.EncodeToString(raw)
	return strings.Join(parts, ".")
}

// TestCallbackAuthMatrix: every endpoint × every kind of credential. A token of attempt 1 used to
// act for the current attempt 2 is 403: an old token must never act for a new attempt. Every other
// valid token of the task that meets a body naming a non-current attempt is a conflict, 409
// attempt_mismatch: attempt 1's token for attempt 1 (a stale worker), attempt 2's token with a
// body saying 1, attempt 1's token with a body saying 3. The attempt guard comes before the token.
func TestCallbackAuthMatrix(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		for _, endpoint := range []string{"started", "heartbeat", "completed"} {
			t.Run(endpoint, func(t *testing.T) {
				w := *w
				w.t = t
				body := func(attempt int) map[string]any {
					switch endpoint {
					case "started":
						return callbackStart(attempt)
					case "heartbeat":
						return callbackBeat(attempt)
					}
					return callbackSucceeded(attempt)
				}
				_, ids := w.submit(callbackSpec("x", "materialize"), callbackSpec("other", "materialize"))
				x := ids["x"]
				c1, tok1 := w.claim(x)
				c2, tok2 := callbackRetried(t, &w, c1)
				_, tokOther := w.claim(ids["other"])
				expired := callbackExpiredToken(t, &w, c2.Task)
				forged := callbackTamper(t, tok2, func(m map[string]any) { m["attempt"] = 3 })
				retargeted := callbackTamper(t, tokOther, func(m map[string]any) { m["task_id"] = x })
				unsigned := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + strings.Split(tok2, ".")[1] + "."

				before := streamState(t, &w, x) + streamState(t, &w, ids["other"])
				for _, c := range []struct {
					name    string
					headers []string
					attempt int
					status  int
					code    string
					message string
				}{
					{"no token", nil, 2, http.StatusUnauthorized, "unauthorized", "missing task capability token"},
					{"not a bearer token", []string{"Authorization", "Basic " + tok2}, 2, http.StatusUnauthorized, "unauthorized", "missing task capability token"},
					{"empty bearer", []string{"Authorization", "Bearer "}, 2, http.StatusUnauthorized, "unauthorized", "missing task capability token"},
					{"token in another header", []string{"X-Trace-Task-Capability", tok2}, 2, http.StatusUnauthorized, "unauthorized", "missing task capability token"},
					{"token for another task", []string{"Authorization", "Bearer " + tokOther}, 1, http.StatusForbidden, "forbidden", ""},
					{"attempt 1's token for attempt 2", []string{"Authorization", "Bearer " + tok1}, 2, http.StatusForbidden, "forbidden", ""},
					{"attempt 2's token for attempt 1 (a stale body)", []string{"Authorization", "Bearer " + tok2}, 1, http.StatusConflict, "attempt_mismatch", ""},
					{"attempt 1's token for attempt 3 (not the current one)", []string{"Authorization", "Bearer " + tok1}, 3, http.StatusConflict, "attempt_mismatch", ""},
					{"attempt 1's token for attempt 1 (stale worker)", []string{"Authorization", "Bearer " + tok1}, 1, http.StatusConflict, "attempt_mismatch", ""},
					{"expired token", []string{"Authorization", "Bearer " + expired}, 2, http.StatusUnauthorized, "unauthorized", "task capability token expired"},
					{"tampered attempt", []string{"Authorization", "Bearer " + forged}, 3, http.StatusUnauthorized, "unauthorized", "invalid task capability token"},
					{"tampered task", []string{"Authorization", "Bearer " + retargeted}, 1, http.StatusUnauthorized, "unauthorized", "invalid task capability token"},
					{"unsigned token", []string{"Authorization", "Bearer " + unsigned}, 2, http.StatusUnauthorized, "unauthorized", "invalid task capability token"},
					{"garbage", []string{"Authorization", "Bearer not-a-jwt"}, 2, http.StatusUnauthorized, "unauthorized", "invalid task capability token"},
				} {
					res := w.post(w.public.URL, "/v1/tasks/"+x+"/"+endpoint, body(c.attempt), c.headers...)
					if res.Status != c.status || res.Body["error"] != c.code || (c.message != "" && res.Body["message"] != c.message) {
						t.Errorf("%s: %d %s, want %d %s %q", c.name, res.Status, res.Raw, c.status, c.code, c.message)
					}
				}
				// The other task's own path with x's token.
				res := w.callback(ids["other"], endpoint, tok2, body(1))
				callbackRefused(t, res, http.StatusForbidden, "forbidden")
				if after := streamState(t, &w, x) + streamState(t, &w, ids["other"]); after != before {
					t.Fatalf("refused calls changed state:\n%s\n%s", before, after)
				}
				// The valid credential, in either letter case of the scheme.
				res = w.post(w.public.URL, "/v1/tasks/"+x+"/"+endpoint, body(2), "Authorization", "bearer "+tok2)
				if res.Status != http.StatusOK || res.Body["acknowledged"] != true {
					t.Fatalf("valid call: %d %s", res.Status, res.Raw)
				}
				// Not behind the producer API key, and a producer key is no credential here.
				res = w.post(w.public.URL, "/v1/tasks/"+x+"/"+endpoint, body(2), "x-api-key", "bk_whatever")
				callbackRefused(t, res, http.StatusUnauthorized, "unauthorized")
			})
		}
	})
}

func TestCallbackRejectsBadBodies(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "materialize"})
		id := ids["a"]
		_, tok := w.claim(id)
		with := func(m map[string]any, kv ...any) map[string]any { return streamWith(m, kv...) }
		done := callbackSucceeded(1)
		failed := with(done, "outcome", "FAILED", "output", nil)
		cancelled := with(done, "outcome", "CANCELLED", "output", nil)
		before := streamState(t, w, id)
		for _, c := range []struct {
			endpoint string
			body     any
			field    string
		}{
			{"started", `{"attempt":1,"workerId":"w"`, "JSON"},
			{"started", ``, "body"},
			{"started", `[1]`, "object"},
			{"started", map[string]any{"workerId": "w"}, "attempt"},
			{"started", map[string]any{"attempt": "1", "workerId": "w"}, "attempt"},
			{"started", map[string]any{"attempt": 0, "workerId": "w"}, "attempt"},
			{"started", map[string]any{"attempt": 1.5, "workerId": "w"}, "attempt"},
			{"started", map[string]any{"attempt": 1}, "workerId"},
			{"started", map[string]any{"attempt": 1, "workerId": 7}, "workerId"},
			{"started", with(callbackStart(1), "startedAt", "yesterday"), "startedAt"},
			{"started", with(callbackStart(1), "attemptId", 5), "attemptId"},
			{"started", with(callbackStart(1), "traceparent", "not-a-trace"), "traceparent"},
			{"started", with(callbackStart(1), "traceparent", 7), "traceparent"},
			{"heartbeat", with(callbackBeat(1), "progressPct", 101), "progressPct"},
			{"heartbeat", with(callbackBeat(1), "progressPct", -1), "progressPct"},
			{"heartbeat", with(callbackBeat(1), "progressPct", "45"), "progressPct"},
			{"heartbeat", with(callbackBeat(1), "heartbeatAt", 5), "heartbeatAt"},
			{"heartbeat", with(callbackBeat(1), "message", 5), "message"},
			{"completed", with(done, "outcome", nil), "outcome"},
			{"completed", with(done, "outcome", "DONE"), "outcome"},
			{"completed", with(done, "outcome", "succeeded"), "outcome"},
			{"completed", with(done, "completedAt", "10:30"), "completedAt"},
			{"completed", with(done, "metrics", []int{1}), "metrics"},
			{"completed", with(done, "error", map[string]any{"category": "USER_CODE"}), "error"},
			{"completed", with(done, "cancelledDuringPhase", "x"), "cancelledDuringPhase"},
			{"completed", with(failed, "output", map[string]any{"x": 1}), "output"},
			{"completed", with(failed, "error", "boom"), "error"},
			{"completed", with(failed, "error", map[string]any{"category": "OOPS"}), "category"},
			{"completed", with(failed, "error", map[string]any{"category": "USER_CODE", "retryable": "yes"}), "retryable"},
			{"completed", with(cancelled, "cancelledDuringPhase", 5), "cancelledDuringPhase"},
			{"completed", with(cancelled, "partialProgress", map[string]any{"n": 1}, "error", map[string]any{}), "error"},
		} {
			res := w.callback(id, c.endpoint, tok, c.body)
			callbackRefused(t, res, http.StatusBadRequest, "invalid_request")
			if msg := res.Body["message"].(string); !strings.Contains(msg, c.field) {
				t.Errorf("%s %v: message %q does not name %q", c.endpoint, c.body, msg, c.field)
			}
		}
		if after := streamState(t, w, id); after != before {
			t.Fatalf("bad bodies changed state:\n%s\n%s", before, after)
		}
		// Explicit nulls of the optional members are fine.
		callbackOK(t, w.callback(id, "heartbeat", tok, map[string]any{"attempt": 1, "workerId": "w", "heartbeatAt": nil, "progressPct": nil, "message": nil}), "shouldCancel")
		nulls := with(done)
		nulls["error"], nulls["cancelledDuringPhase"], nulls["partialProgress"] = nil, nil, nil
		res := callbackOK(t, w.callback(id, "completed", tok, nulls), "finalState", "willRetry")
		if res["finalState"] != "SUCCEEDED" {
			t.Fatalf("completed: %v", res)
		}
	})
}
