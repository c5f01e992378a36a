package api_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// Tests of what clients written for the worker contracts, outside Baton, send and read: newer
// fields the server does not know, the shapes they parse, the ids they acknowledge, the codes
// they abort on. Bodies follow the contracts' own examples.

// TestWorkerEndpointsIgnoreUnknownFields: a newer client's extra members (attemptId, traceparent,
// outcome...) are ignored by every worker dialect, at the top level and inside nested objects;
// the report still takes effect.
func TestWorkerEndpointsIgnoreUnknownFields(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "s", Name: "jobs:stream:high", Input: json.RawMessage(`{"url":"https://example.com"}`)},
			lifecycle.TaskSpec{Key: "i", Name: "block_follower"}, lifecycle.TaskSpec{Key: "c", Name: "materialize"},
			lifecycle.TaskSpec{Key: "v", Name: "udf"})

		// Stream-worker dialect: claim, heartbeat and complete with extra members.
		res := w.streamCall("claim", map[string]any{"worker_id": "py-1", "streams": []string{"jobs:stream:high"}, "max_wait_ms": 0,
			"consumer_group": "workers", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
		claim := wantOK(t, res)
		if claim["claimed"] != true {
			t.Fatalf("claim: %s", res.Raw)
		}
		lease := streamLease(claim)
		if res := w.streamCall("heartbeat", streamWith(lease, "progress", 0.5)); res.Status != http.StatusOK || res.Body["ok"] != true {
			t.Fatalf("stream heartbeat with an extra field: %d %s", res.Status, res.Raw)
		}
		res = w.streamCall("complete", streamWith(lease, "result", map[string]any{"ok": 1}, "outcome", "success", "duration_ms", 12))
		if res.Status != http.StatusOK || res.Body["ack"] != true {
			t.Fatalf("stream complete with extra fields: %d %s", res.Status, res.Raw)
		}
		if tk := w.task(ids["s"]); tk.Status != lifecycle.Completed {
			t.Fatalf("stream task: %s", tk.Status)
		}

		// Internal dialect: claim and complete with extra members, and an error object with one.
		res = w.post(w.internal.URL, "/internal/task-claim", map[string]any{"task_id": ids["i"], "worker_id": "ecs:cluster/service/task", "attemptId": "a-1"})
		ic := wantOK(t, res)
		fence := map[string]any{"task_id": ids["i"], "attempt": ic["attempt"], "lease_token": ic["lease_token"], "traceparent": "x"}
		wantOK(t, w.post(w.internal.URL, "/internal/heartbeat", fence))
		res = w.post(w.internal.URL, "/internal/task-complete", streamWith(fence, "status", "Failed",
			"error", map[string]any{"category": "DATA_QUALITY", "message": "bad row", "code": "E42", "details": []int{1}}))
		if wantOK(t, res)["dead_lettered"] != true {
			t.Fatalf("internal failed report: %s", res.Raw)
		}

		// Callback dialect: every endpoint with the newer members.
		_, tok := w.claim(ids["c"])
		extra := func(m map[string]any) map[string]any {
			return streamWith(m, "attemptId", w.task(ids["c"]).LeaseToken, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"runtimeVersion", "2.1.0")
		}
		callbackOK(t, w.callback(ids["c"], "started", tok, extra(callbackStart(1))))
		callbackOK(t, w.callback(ids["c"], "heartbeat", tok, extra(callbackBeat(1))), "shouldCancel")
		failed := extra(callbackSucceeded(1))
		failed["outcome"], failed["output"] = "FAILED", nil
		failed["error"] = map[string]any{"category": "USER_CODE", "message": "KeyError", "stackTrace": "...", "retryable": false, "exceptionType": "KeyError"}
		if body := callbackOK(t, w.callback(ids["c"], "completed", tok, failed), "finalState", "willRetry"); body["finalState"] != "FAILED" {
			t.Fatalf("callback completed: %v", body)
		}

		// Task-scoped dialect.
		c, tok := w.claim(ids["v"])
		body := map[string]any{"task_id": c.Task.ID, "attempt": c.Task.Attempt, "lease_token": c.Task.LeaseToken, "status": "Completed",
			"events": []any{map[string]any{"dataset_uuid": w.buffered(), "dataset_version": "v", "cursor": 1, "emitted_at": "now"}}, "sdk": "py"}
		wantOK(t, scoped(w, "/v1/task/complete", body, tok))

		// Still refused: a body that is not an object, and members of the wrong type.
		for _, c := range []struct {
			path string
			body any
		}{
			{"/internal/worker/claim", `["w"]`},
			{"/internal/worker/claim", map[string]any{"worker_id": 7, "streams": []string{"q"}, "extra": true}},
			{"/internal/task-claim", `"task"`},
			{"/internal/heartbeat", map[string]any{"task_id": ids["i"], "attempt": "1", "lease_token": "x", "extra": 1}},
		} {
			if res := w.post(w.internal.URL, c.path, c.body); res.Status != http.StatusBadRequest {
				t.Errorf("%s %v: %d %s, want 400", c.path, c.body, res.Status, res.Raw)
			}
		}
	})
}

// TestStreamWorkerQueueNamedLikeARedisKey: a stream-worker client whose stream is
// "jobs:stream:high" gets work submitted through the producer API to that queue, reads its own
// fields from payload, and gets a well-formed message id to XACK.
func TestStreamWorkerQueueNamedLikeARedisKey(t *testing.T) {
	storeDrivers(t, func(t *testing.T, w *workerAPI, a *testAPI) {
		res := a.do("POST", "/jobs", `{"tasks":[
			{"taskId":"fetch","name":"fetch-page","queue":"jobs:stream:high","dependsOn":[],"input":{"url":"https://example.com","type":"html"}},
			{"taskId":"index","name":"index.v2","dependsOn":["fetch"],"input":{"type":"search"}}]}`)
		wantStatus(t, res, http.StatusCreated)
		claim := w.streamClaimed("py-worker-1", "jobs:stream:high")
		if claim["stream"] != "jobs:stream:high" || !streamJSONEqual(t, claim["payload"], `{"url":"https://example.com","type":"html"}`) {
			t.Fatalf("claim: %v", claim)
		}
		msgID, _ := claim["message_id"].(string)
		if !regexp.MustCompile(`^[0-9]+-[0-9]+$`).MatchString(msgID) {
			t.Fatalf("message_id %v", claim["message_id"])
		}
		// The same attempt keeps its id; the worker echoes it with its report.
		res = w.streamCall("complete", streamWith(streamLease(claim), "result", map[string]any{"bytes": 5120}))
		if res.Status != http.StatusOK || res.Body["ack"] != true {
			t.Fatalf("complete: %d %s", res.Status, res.Raw)
		}
		child := w.streamClaimed("py-worker-1", "index.v2")
		if !streamJSONEqual(t, child["payload"], `{"type":"search"}`) ||
			!streamJSONEqual(t, child["dependency_outputs"], `{"fetch":{"bytes":5120}}`) || child["message_id"] == msgID {
			t.Fatalf("child claim: %v", child)
		}
	})
}

// storeDrivers runs fn with a worker API and a producer API over the same store and dispatcher.
func storeDrivers(t *testing.T, fn func(t *testing.T, w *workerAPI, a *testAPI)) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		a := &testAPI{t: t, st: w.st, d: w.d, srv: w.public}
		a.key = a.newKey("acme")
		fn(t, w, a)
	})
}

// TestTaskClaimWithoutWorkerID: the internal dialect's claim may omit worker_id; the attempt is
// then recorded under the client certificate's subject, or "unknown"; the answer has task_id at its
// top level.
func TestTaskClaimWithoutWorkerID(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "block_follower"}, lifecycle.TaskSpec{Key: "b", Name: "block_follower"})
		res := w.post(w.internal.URL, "/internal/task-claim", `{"task_id":"`+ids["a"]+`"}`)
		claim := wantOK(t, res)
		if claim["status"] != "Claimed" || claim["task_id"] != ids["a"] {
			t.Fatalf("claim: %s", res.Raw)
		}
		if got := w.task(ids["a"]).WorkerID; got != "unknown" {
			t.Fatalf("worker id %q, want unknown", got)
		}

		// Over mTLS, the certificate names the worker.
		req := httptest.NewRequest("POST", "/internal/task-claim", strings.NewReader(`{"task_id":"`+ids["b"]+`","worker_id":""}`))
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "wrapper-7", Organization: []string{"baton"}}}}}
		rec := httptest.NewRecorder()
		w.server.InternalHandler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("claim over mTLS: %d %s", rec.Code, rec.Body)
		}
		if got := w.task(ids["b"]).WorkerID; got != "CN=wrapper-7,O=baton" {
			t.Fatalf("worker id %q, want the certificate's subject", got)
		}
	})
}

// TestCallbackAttemptGuardComesFirst: attempt 1's token with a body saying attempt 2, while 1 is
// current, is 409 attempt_mismatch with the current and received attempts (the contract's shape),
// not 403; attemptId, when sent, fences too; /api/v1/tasks/... is the same API.
func TestCallbackAttemptGuardComesFirst(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(callbackSpec("x", "materialize"))
		x := ids["x"]
		c, tok := w.claim(x)
		before := streamState(t, w, x)
		for _, path := range []string{"/v1/tasks/", "/api/v1/tasks/"} {
			res := w.post(w.public.URL, path+x+"/completed", callbackSucceeded(2), "Authorization", "Bearer "+tok)
			body := callbackRefused(t, res, http.StatusConflict, "attempt_mismatch")
			if body["expectedAttempt"] != 1.0 || body["receivedAttempt"] != 2.0 {
				t.Fatalf("%s: %s", path, res.Raw)
			}
			// attemptId names another attempt than the current one.
			res = w.post(w.public.URL, path+x+"/heartbeat", streamWith(callbackBeat(1), "attemptId", "00000000-0000-0000-0000-000000000000"),
				"Authorization", "Bearer "+tok)
			if res.Status != http.StatusConflict {
				t.Fatalf("%s heartbeat with a stale attemptId: %d %s", path, res.Status, res.Raw)
			}
		}
		if after := streamState(t, w, x); after != before {
			t.Fatalf("refused calls changed state:\n%s\n%s", before, after)
		}
		// The newer path works end to end, with the current attemptId.
		ok := streamWith(callbackSucceeded(1), "attemptId", c.Task.LeaseToken)
		res := w.post(w.public.URL, "/api/v1/tasks/"+x+"/completed", ok, "Authorization", "Bearer "+tok)
		if body := callbackOK(t, res, "finalState", "willRetry"); body["finalState"] != "SUCCEEDED" {
			t.Fatalf("completed: %s", res.Raw)
		}
	})
}

// TestCallbackTraceparentIsKept: a W3C traceparent sent with the callbacks is kept on the attempt
// and on the audit events of the transitions it caused.
func TestCallbackTraceparentIsKept(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		jobID, ids := w.submit(callbackSpec("x", "materialize"))
		x := ids["x"]
		_, tok := w.claim(x)
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		callbackOK(t, w.callback(x, "started", tok, streamWith(callbackStart(1), "traceparent", tp)))
		if got := callbackAttempt(t, w, x, 1).Traceparent; got != tp {
			t.Fatalf("attempt traceparent after started: %q", got)
		}
		callbackOK(t, w.callback(x, "heartbeat", tok, streamWith(callbackBeat(1), "traceparent", tp)), "shouldCancel")
		callbackOK(t, w.callback(x, "completed", tok, streamWith(callbackSucceeded(1), "traceparent", tp)), "finalState", "willRetry")
		if got := callbackAttempt(t, w, x, 1).Traceparent; got != tp {
			t.Fatalf("attempt traceparent after completed: %q", got)
		}
		events, err := w.st.EventList(context.Background(), store.EventListParams{JobID: jobID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		traced := map[string]bool{}
		for _, e := range events {
			var data map[string]any
			_ = json.Unmarshal(e.Data, &data)
			if data["traceparent"] == tp {
				traced[e.Type] = true
			}
		}
		if !traced["Task Heartbeat"] || !traced["Task Completed"] {
			t.Fatalf("events carrying the traceparent: %v", traced)
		}
	})
}

// TestInternalListenerAnswers405: a known worker path with another method is a 405 with Allow.
func TestInternalListenerAnswers405(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		for _, c := range []struct{ method, path, allow string }{
			{"GET", "/internal/worker/claim", "POST"}, {"POST", "/internal/task-fetch", "GET, HEAD"},
			{"DELETE", "/internal/worker/report-batch", "POST"},
		} {
			res := w.request(c.method, w.internal.URL+c.path, nil)
			if res.Status != http.StatusMethodNotAllowed || res.Header.Get("Allow") != c.allow || res.Body["error"] != "method_not_allowed" {
				t.Errorf("%s %s: %d Allow %q %s", c.method, c.path, res.Status, res.Header.Get("Allow"), res.Raw)
			}
		}
		res := w.request("GET", w.public.URL+"/v1/tasks/x/completed", nil)
		if res.Status != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "POST" {
			t.Errorf("GET callback: %d %s", res.Status, res.Raw)
		}
	})
}
