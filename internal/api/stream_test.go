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
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// Tests of the stream-worker dialect (stream.go).

// forEachStreamClockedDriver runs fn on both drivers with a fake dispatcher clock.
func forEachStreamClockedDriver(t *testing.T, fn func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock)) {
	t.Helper()
	forEachClockedWorkerDriver(t, time.Now().UTC().Truncate(time.Millisecond), fn)
}

func streamPtr[T any](v T) *T { return &v }

// streamCall posts body to /internal/worker/<op>.
func (w *workerAPI) streamCall(op string, body any) response {
	w.t.Helper()
	return w.post(w.internal.URL, "/internal/worker/"+op, body)
}

// streamClaim claims from streams without waiting and returns the answer, which must be a 200.
func (w *workerAPI) streamClaim(workerID string, streams ...string) map[string]any {
	w.t.Helper()
	res := w.streamCall("claim", map[string]any{"worker_id": workerID, "streams": streams, "max_wait_ms": 0})
	if res.Status != http.StatusOK {
		w.t.Fatalf("claim %v: %d %s", streams, res.Status, res.Raw)
	}
	return res.Body
}

// streamClaimed claims and requires a task.
func (w *workerAPI) streamClaimed(workerID string, streams ...string) map[string]any {
	w.t.Helper()
	b := w.streamClaim(workerID, streams...)
	if b["claimed"] != true {
		w.t.Fatalf("claim %v: nothing claimed: %v", streams, b)
	}
	return b
}

// streamLease is the fence members of a claim answer, as the worker echoes them.
func streamLease(claim map[string]any) map[string]any {
	return map[string]any{"worker_id": "w-1", "job_id": claim["job_id"], "attempt_id": claim["attempt_id"],
		"lease_token": claim["lease_token"], "stream": claim["stream"], "message_id": claim["message_id"]}
}

func streamWith(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// streamWant checks a 200 answer's exact JSON.
func streamWant(t *testing.T, res response, want string) {
	t.Helper()
	var got, exp any
	if err := json.Unmarshal(res.Raw, &got); err != nil || json.Unmarshal([]byte(want), &exp) != nil || res.Status != http.StatusOK || !reflect.DeepEqual(got, exp) {
		t.Fatalf("answer %d %s, want 200 %s", res.Status, res.Raw, want)
	}
}

// streamRefused checks a refusal: status, {"ok": false, "ack": ack, "error": code, "message"}.
func streamRefused(t *testing.T, res response, status int, ack bool, code string) {
	t.Helper()
	if res.Status != status || res.Body["ok"] != false || res.Body["ack"] != ack || res.Body["error"] != code {
		t.Fatalf("answer %d %s, want %d ok=false ack=%v error=%q", res.Status, res.Raw, status, ack, code)
	}
	if msg, _ := res.Body["message"].(string); msg == "" {
		t.Fatalf("refusal without a message: %s", res.Raw)
	}
}

// streamState is everything a refused call must leave unchanged.
func streamState(t *testing.T, w *workerAPI, taskID string) string {
	t.Helper()
	ctx := context.Background()
	task := w.task(taskID)
	attempts, err := w.st.AttemptList(ctx, taskID)
	if err != nil {
		t.Fatal(err)
	}
	events, err := w.st.EventList(ctx, store.EventListParams{JobID: task.JobID, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"task": task, "attempts": attempts, "events": len(events)})
	return string(b)
}

func streamTimeOf(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("%v is not an RFC 3339 UTC time", v)
	}
	return at
}

func TestStreamConformance(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()

		// Nothing ready: {"claimed": false}, at once.
		streamWant(t, w.streamCall("claim", map[string]any{"worker_id": "w-1", "streams": []string{"render"}, "max_wait_ms": 0}), `{"claimed":false}`)
		// max_wait_ms defaults to 0.
		streamWant(t, w.streamCall("claim", map[string]any{"worker_id": "w-1", "streams": []string{"render"}}), `{"claimed":false}`)

		jobID, ids := w.submit(
			lifecycle.TaskSpec{Key: "frame", Name: "render", Input: json.RawMessage(`{"frame":7}`), TimeoutSeconds: streamPtr(600)},
			lifecycle.TaskSpec{Key: "encode", Name: "encode", DependsOn: []string{"frame"}})
		claim := w.streamClaimed("w-1", "render")
		wantKeysStream(t, "claim", claim, "claimed", "job_id", "attempt_id", "lease_token", "stream", "message_id", "payload",
			"task_id", "task_key", "task_name", "run_id", "dependency_outputs", "timeout_seconds",
			"lease_ttl_seconds", "heartbeat_interval_seconds", "lease_expires_at", "capability_token", "capability_token_expires_at")
		task := w.task(ids["frame"])
		if claim["job_id"] != ids["frame"] || claim["attempt_id"] != 1.0 || claim["lease_token"] != task.LeaseToken || claim["stream"] != "render" {
			t.Fatalf("claim = %v; task %s lease %s", claim, ids["frame"], task.LeaseToken)
		}
		// Without the Redis transport, message_id is a stable id of the attempt shaped like a
		// stream entry id, so that a client that XACKs it sends Redis a well-formed id.
		if id, _ := claim["message_id"].(string); !regexp.MustCompile(`^[0-9]+-[0-9]+$`).MatchString(id) {
			t.Fatalf("message_id %v, want a string <ms>-<seq>", claim["message_id"])
		}
		if task.Status != lifecycle.Running || task.WorkerID != "w-1" {
			t.Fatalf("task after claim: %s by %q", task.Status, task.WorkerID)
		}
		// payload is the producer's input, exactly; Baton's additions are its siblings.
		if !streamJSONEqual(t, claim["payload"], `{"frame":7}`) {
			t.Fatalf("payload = %v", claim["payload"])
		}
		siblings := map[string]any{"task_id": claim["task_id"], "task_key": claim["task_key"], "task_name": claim["task_name"],
			"run_id": claim["run_id"], "dependency_outputs": claim["dependency_outputs"], "timeout_seconds": claim["timeout_seconds"]}
		if !streamJSONEqual(t, siblings, fmt.Sprintf(`{"task_id":%q,"task_key":"frame","task_name":"render","run_id":%q,
			"dependency_outputs":{},"timeout_seconds":600}`, ids["frame"], jobID)) {
			t.Fatalf("claim's task fields = %v", siblings)
		}
		if claim["lease_ttl_seconds"] != 90.0 || claim["heartbeat_interval_seconds"] != 30.0 {
			t.Fatalf("lease ttl %v, heartbeat interval %v; want 90 and 30", claim["lease_ttl_seconds"], claim["heartbeat_interval_seconds"])
		}
		if at := streamTimeOf(t, claim["lease_expires_at"]); !at.Equal(task.LeaseExpiresAt) {
			t.Fatalf("lease_expires_at %v, stored %v", at, task.LeaseExpiresAt)
		}
		c, err := w.tokens.Verify(ctx, claim["capability_token"].(string))
		if err != nil || c.TaskID != ids["frame"] || c.Attempt != 1 || c.LeaseToken != task.LeaseToken || c.JobID != jobID || c.Tenant != "acme" {
			t.Fatalf("capability token: %+v, %v", c, err)
		}
		if exp := streamTimeOf(t, claim["capability_token_expires_at"]); !exp.Equal(c.ExpiresAt.Time) {
			t.Fatalf("capability_token_expires_at %v, token says %v", exp, c.ExpiresAt.Time)
		}

		// Heartbeat: {worker_id, job_id, lease_token}.
		hb := w.streamCall("heartbeat", map[string]any{"worker_id": "w-1", "job_id": claim["job_id"], "lease_token": claim["lease_token"]})
		if hb.Status != http.StatusOK || hb.Body["ok"] != true || hb.Body["should_cancel"] != false || hb.Body["cancel_reason"] != nil {
			t.Fatalf("heartbeat: %d %s", hb.Status, hb.Raw)
		}
		wantKeysStream(t, "heartbeat", hb.Body, "ok", "lease_expires_at", "should_cancel", "cancel_reason")
		if at := streamTimeOf(t, hb.Body["lease_expires_at"]); !at.Equal(w.task(ids["frame"]).LeaseExpiresAt) {
			t.Fatalf("heartbeat lease_expires_at %v, stored %v", at, w.task(ids["frame"]).LeaseExpiresAt)
		}

		// Complete: ack, the result is the output, the child gets it.
		done := streamWith(streamLease(claim), "result", map[string]any{"uri": "s3://frames/7.png", "timings": map[string]any{"ms": 12}})
		streamWant(t, w.streamCall("complete", done), `{"ok":true,"ack":true}`)
		task = w.task(ids["frame"])
		if task.Status != lifecycle.Completed || string(task.Output) != `{"timings":{"ms":12},"uri":"s3://frames/7.png"}` {
			t.Fatalf("task after complete: %s %s", task.Status, task.Output)
		}
		child := w.streamClaimed("w-2", "encode")
		if !streamJSONEqual(t, child["dependency_outputs"], `{"frame":{"timings":{"ms":12},"uri":"s3://frames/7.png"}}`) {
			t.Fatalf("child dependency_outputs: %v", child["dependency_outputs"])
		}
		if !streamJSONEqual(t, child["payload"], `{}`) || child["timeout_seconds"] != nil {
			t.Fatalf("child without input or timeout: payload %v, timeout_seconds %v", child["payload"], child["timeout_seconds"])
		}
	})
}

// streamJSONEqual reports whether got (decoded JSON) equals the JSON text want.
func streamJSONEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expected JSON %s: %v", want, err)
	}
	return reflect.DeepEqual(got, w)
}

func wantKeysStream(t *testing.T, what string, obj map[string]any, keys ...string) {
	t.Helper()
	got := make([]string, 0, len(obj))
	for k := range obj {
		got = append(got, k)
	}
	slices.Sort(got)
	keys = slices.Clone(keys)
	slices.Sort(keys)
	if !slices.Equal(got, keys) {
		t.Fatalf("%s members %v, want %v", what, got, keys)
	}
}

func TestStreamCompleteIsIdempotent(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q"})
		claim := w.streamClaimed("w-1", "q")
		done := streamWith(streamLease(claim), "result", map[string]any{"n": 1})
		streamWant(t, w.streamCall("complete", done), `{"ok":true,"ack":true}`)
		before := streamState(t, w, ids["a"])
		// The same report again (a redelivered message): the same answer, no second effect.
		streamWant(t, w.streamCall("complete", done), `{"ok":true,"ack":true}`)
		if after := streamState(t, w, ids["a"]); after != before {
			t.Fatalf("a repeated complete changed state:\n%s\n%s", before, after)
		}
		// A different outcome for the same attempt is refused; its final state is committed: ack.
		fail := streamWith(streamLease(claim), "error", map[string]any{"code": "E", "message": "late"})
		streamRefused(t, w.streamCall("fail", fail), http.StatusConflict, true, "outcome_conflict")
		if after := streamState(t, w, ids["a"]); after != before {
			t.Fatalf("a conflicting fail changed state")
		}
	})
}

func TestStreamHeartbeatSaysShouldCancel(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q"})
		claim := w.streamClaimed("w-1", "q")
		if _, err := w.d.CancelTask(context.Background(), ids["a"], ""); err != nil {
			t.Fatal(err)
		}
		hb := w.streamCall("heartbeat", map[string]any{"worker_id": "w-1", "job_id": claim["job_id"], "lease_token": claim["lease_token"]})
		if hb.Status != http.StatusOK || hb.Body["should_cancel"] != true || hb.Body["cancel_reason"] != "user_requested" {
			t.Fatalf("heartbeat after cancel: %d %s", hb.Status, hb.Raw)
		}
		// A heartbeat naming the attempt is fenced by it as well.
		hb = w.streamCall("heartbeat", map[string]any{"worker_id": "w-1", "job_id": claim["job_id"], "lease_token": claim["lease_token"], "attempt_id": 2})
		streamRefused(t, hb, http.StatusConflict, true, "attempt_mismatch")
	})
}

func TestStreamHeartbeatRefreshesTheCapabilityToken(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		// No execution timeout: the claim's token lives an hour.
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q", HeartbeatTimeoutSeconds: streamPtr(86400)})
		claim := w.streamClaimed("w-1", "q")
		hb := map[string]any{"worker_id": "w-1", "job_id": claim["job_id"], "lease_token": claim["lease_token"]}
		clock.Advance(29 * time.Minute)
		res := w.streamCall("heartbeat", hb)
		if res.Status != http.StatusOK || res.Body["capability_token"] != nil {
			t.Fatalf("heartbeat with a young token: %d %s", res.Status, res.Raw)
		}
		clock.Advance(2 * time.Minute) // past half of the claim token's life
		res = w.streamCall("heartbeat", hb)
		wantKeysStream(t, "heartbeat", res.Body, "ok", "lease_expires_at", "should_cancel", "cancel_reason", "capability_token", "capability_token_expires_at")
		c, err := w.tokens.Verify(context.Background(), res.Body["capability_token"].(string))
		task := w.task(ids["a"])
		if err != nil || c.TaskID != task.ID || c.Attempt != 1 || c.LeaseToken != task.LeaseToken {
			t.Fatalf("refreshed token: %+v %v", c, err)
		}
		if exp := streamTimeOf(t, res.Body["capability_token_expires_at"]); !exp.Equal(c.ExpiresAt.Time) {
			t.Fatalf("capability_token_expires_at %v, token says %v", exp, c.ExpiresAt.Time)
		}
	})
}

func TestStreamFailRetryableIsRequeued(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(
			lifecycle.TaskSpec{Key: "slow", Name: "slow"}, // default backoff: 10 s and more
			lifecycle.TaskSpec{Key: "fast", Name: "fast", BackoffBaseMs: streamPtr[int64](0), BackoffMaxMs: streamPtr[int64](0)})

		claim := w.streamClaimed("w-1", "slow")
		fail := streamWith(streamLease(claim), "error", map[string]any{"code": "INFRASTRUCTURE", "message": "node lost", "stack": "at x", "retryable": true})
		streamWant(t, w.streamCall("fail", fail), `{"ok":true,"ack":true,"requeued":true,"dlq":false}`)
		task := w.task(ids["slow"])
		if task.Status != lifecycle.Pending || task.Error == nil || task.Error.Category != lifecycle.Infrastructure || task.Error.Message != "node lost" ||
			task.Error.StackTrace != "at x" || task.Error.Retryable == nil || !*task.Error.Retryable || task.Error.Code != "" {
			t.Fatalf("task after a retryable fail: %s %+v", task.Status, task.Error)
		}
		// Backing off: not claimable yet.
		streamWant(t, w.streamCall("claim", map[string]any{"worker_id": "w-2", "streams": []string{"slow"}}), `{"claimed":false}`)
		// The repeat answers the same.
		streamWant(t, w.streamCall("fail", fail), `{"ok":true,"ack":true,"requeued":true,"dlq":false}`)

		// A code that is no category: USER_CODE (retryable by default), the code kept.
		claim = w.streamClaimed("w-1", "fast")
		fail = streamWith(streamLease(claim), "error", map[string]any{"code": "E_PARSE", "message": "bad row"})
		streamWant(t, w.streamCall("fail", fail), `{"ok":true,"ack":true,"requeued":true,"dlq":false}`)
		task = w.task(ids["fast"])
		if task.Error.Category != lifecycle.UserCode || task.Error.Code != "E_PARSE" || task.Error.Retryable != nil {
			t.Fatalf("error of a coded failure: %+v", task.Error)
		}
		again := w.streamClaimed("w-2", "fast")
		if again["attempt_id"] != 2.0 || again["job_id"] != ids["fast"] {
			t.Fatalf("retry claim: %v", again)
		}
	})
}

func TestStreamFailNonRetryableOrLastAttemptIsDeadLettered(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		for _, c := range []struct {
			name  string
			spec  lifecycle.TaskSpec
			error map[string]any
		}{
			{"non-retryable category", lifecycle.TaskSpec{}, map[string]any{"code": "DATA_QUALITY", "message": "bad input"}},
			{"explicit flag", lifecycle.TaskSpec{}, map[string]any{"code": "E_FATAL", "message": "no", "retryable": false}},
			{"last attempt", lifecycle.TaskSpec{MaxAttempts: streamPtr(1)}, map[string]any{"code": "INFRASTRUCTURE", "retryable": true}},
		} {
			t.Run(c.name, func(t *testing.T) {
				w := *w
				w.t = t
				spec := c.spec
				spec.Key, spec.Name = "t", "dlq-"+strings.ReplaceAll(c.name, " ", "-")
				_, ids := w.submit(spec)
				claim := w.streamClaimed("w-1", spec.Name)
				fail := streamWith(streamLease(claim), "error", c.error)
				streamWant(t, w.streamCall("fail", fail), `{"ok":true,"ack":true,"requeued":false,"dlq":true}`)
				task := w.task(ids["t"])
				if task.Status != lifecycle.Failed || task.DeadLetteredAt.IsZero() {
					t.Fatalf("task: %s, dead-lettered at %v", task.Status, task.DeadLetteredAt)
				}
				streamWant(t, w.streamCall("fail", fail), `{"ok":true,"ack":true,"requeued":false,"dlq":true}`)
				// The attempt is over: a heartbeat now hears that the job is terminal.
				hb := w.streamCall("heartbeat", map[string]any{"worker_id": "w-1", "job_id": claim["job_id"], "lease_token": claim["lease_token"]})
				streamRefused(t, hb, http.StatusConflict, true, "task_already_terminal")
			})
		}
	})
}

func TestStreamClaimHonoursStreamPriority(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		// Created first in the low-priority stream, so a claim that ignored the order would take
		// it.
		_, low := w.submit(lifecycle.TaskSpec{Key: "l", Name: "low"})
		_, high := w.submit(lifecycle.TaskSpec{Key: "h", Name: "high"})
		if got := w.streamClaimed("w-1", "high", "low"); got["job_id"] != high["h"] || got["stream"] != "high" {
			t.Fatalf("first claim took %v from %v, want the high stream's", got["job_id"], got["stream"])
		}
		if got := w.streamClaimed("w-1", "high", "low"); got["job_id"] != low["l"] || got["stream"] != "low" {
			t.Fatalf("second claim took %v from %v, want the low stream's", got["job_id"], got["stream"])
		}
		streamWant(t, w.streamCall("claim", map[string]any{"worker_id": "w-1", "streams": []string{"high", "low"}}), `{"claimed":false}`)

		// The order is the request's: the same two streams the other way round.
		_, a := w.submit(lifecycle.TaskSpec{Key: "a", Name: "high"})
		_, b := w.submit(lifecycle.TaskSpec{Key: "b", Name: "low"})
		if got := w.streamClaimed("w-1", "low", "high", "low"); got["job_id"] != b["b"] {
			t.Fatalf("claim took %v, want the low stream's %s", got["job_id"], b["b"])
		}
		if got := w.streamClaimed("w-1", "low", "high"); got["job_id"] != a["a"] {
			t.Fatalf("claim took %v, want the high stream's %s", got["job_id"], a["a"])
		}
		// A stream nobody serves yields nothing.
		streamWant(t, w.streamCall("claim", map[string]any{"worker_id": "w-1", "streams": []string{"nobody"}}), `{"claimed":false}`)
	})
}

func TestStreamStaleWorkerIsRefused(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		zero := streamPtr[int64](0)
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q", HeartbeatTimeoutSeconds: streamPtr(10), BackoffBaseMs: zero, BackoffMaxMs: zero})
		old := w.streamClaimed("w-old", "q")
		oldHB := map[string]any{"worker_id": "w-old", "job_id": old["job_id"], "lease_token": old["lease_token"]}

		// The lease runs out (no reaper runs here: the core applies the timeout on the heartbeat).
		clock.Advance(11 * time.Second)
		streamRefused(t, w.streamCall("heartbeat", oldHB), http.StatusGone, true, "task_expired")
		if task := w.task(ids["a"]); task.Status != lifecycle.Pending || task.Attempt != 1 {
			t.Fatalf("after the timeout: %s attempt %d", task.Status, task.Attempt)
		}

		// A new worker claims attempt 2; the old one's calls change nothing.
		cur := w.streamClaimed("w-new", "q")
		if cur["attempt_id"] != 2.0 {
			t.Fatalf("retry claim: %v", cur)
		}
		before := streamState(t, w, ids["a"])
		streamRefused(t, w.streamCall("heartbeat", oldHB), http.StatusConflict, true, "lease_mismatch")
		res := w.streamCall("complete", streamWith(streamLease(old), "result", map[string]any{"stale": true}))
		streamRefused(t, res, http.StatusConflict, true, "attempt_mismatch")
		if res.Body["current_attempt_id"] != 2.0 || res.Body["received_attempt_id"] != 1.0 {
			t.Fatalf("attempt_mismatch body: %s", res.Raw)
		}
		streamRefused(t, w.streamCall("fail", streamWith(streamLease(old), "error", map[string]any{"code": "E"})), http.StatusConflict, true, "attempt_mismatch")
		// The old attempt number with the new lease, or the new number with the old lease.
		streamRefused(t, w.streamCall("complete", streamWith(streamLease(old), "lease_token", cur["lease_token"])), http.StatusConflict, true, "attempt_mismatch")
		streamRefused(t, w.streamCall("complete", streamWith(streamLease(old), "attempt_id", 2)), http.StatusConflict, true, "lease_mismatch")
		if after := streamState(t, w, ids["a"]); after != before {
			t.Fatalf("stale calls changed state:\n%s\n%s", before, after)
		}

		// The current worker is unaffected.
		hb := w.streamCall("heartbeat", map[string]any{"worker_id": "w-new", "job_id": cur["job_id"], "lease_token": cur["lease_token"]})
		if hb.Status != http.StatusOK {
			t.Fatalf("current heartbeat: %d %s", hb.Status, hb.Raw)
		}
		streamWant(t, w.streamCall("complete", streamWith(streamLease(cur), "result", 42)), `{"ok":true,"ack":true}`)
		streamRefused(t, w.streamCall("complete", streamWith(streamLease(old), "result", 1)), http.StatusConflict, true, "attempt_mismatch")
		if task := w.task(ids["a"]); task.Status != lifecycle.Completed || string(task.Output) != "42" {
			t.Fatalf("task: %s %s", task.Status, task.Output)
		}

		// A late reply of a timed-out attempt, before any newer claim, is still accepted
		// (docs/lifecycle.md#late-replies).
		_, late := w.submit(lifecycle.TaskSpec{Key: "b", Name: "late", HeartbeatTimeoutSeconds: streamPtr(10)})
		lc := w.streamClaimed("w-late", "late")
		clock.Advance(11 * time.Second)
		if _, err := w.d.Reap(context.Background()); err != nil {
			t.Fatal(err)
		}
		streamWant(t, w.streamCall("complete", streamWith(streamLease(lc), "result", "late but fine")), `{"ok":true,"ack":true}`)
		if task := w.task(late["b"]); task.Status != lifecycle.Completed {
			t.Fatalf("late reply: task %s", task.Status)
		}

		// Timed out on its last attempt: dead-lettered by the reaper; the worker's report is too
		// late.
		_, last := w.submit(lifecycle.TaskSpec{Key: "c", Name: "last", HeartbeatTimeoutSeconds: streamPtr(10), MaxAttempts: streamPtr(1)})
		lc = w.streamClaimed("w-last", "last")
		clock.Advance(11 * time.Second)
		if _, err := w.d.Reap(context.Background()); err != nil {
			t.Fatal(err)
		}
		before = streamState(t, w, last["c"])
		streamRefused(t, w.streamCall("complete", streamWith(streamLease(lc), "result", 1)), http.StatusGone, true, "task_expired")
		streamRefused(t, w.streamCall("fail", streamWith(streamLease(lc), "error", map[string]any{"code": "E"})), http.StatusGone, true, "task_expired")
		if after := streamState(t, w, last["c"]); after != before {
			t.Fatalf("a report after the dead-letter changed state")
		}
	})
}

func TestStreamRejectsBadRequests(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q"})
		claim := w.streamClaimed("w-1", "q")
		lease := streamLease(claim)
		before := streamState(t, w, ids["a"])
		for _, c := range []struct {
			op    string
			body  any
			field string // the message must name it
		}{
			{"claim", `{"worker_id":"w","streams":["q"]`, "JSON"},
			{"claim", ``, "body"},
			{"claim", `[]`, "object"},
			{"claim", map[string]any{"streams": []string{"q"}}, "worker_id"},
			{"claim", map[string]any{"worker_id": 7, "streams": []string{"q"}}, "worker_id"},
			{"claim", map[string]any{"worker_id": strings.Repeat("w", 257), "streams": []string{"q"}}, "worker_id"},
			{"claim", map[string]any{"worker_id": "w"}, "streams"},
			{"claim", map[string]any{"worker_id": "w", "streams": []string{}}, "streams"},
			{"claim", map[string]any{"worker_id": "w", "streams": "q"}, "streams"},
			{"claim", map[string]any{"worker_id": "w", "streams": []string{"q", ""}}, "streams[1]"},
			{"claim", map[string]any{"worker_id": "w", "streams": []string{"q"}, "max_wait_ms": 60001}, "max_wait_ms"},
			{"claim", map[string]any{"worker_id": "w", "streams": []string{"q"}, "max_wait_ms": -1}, "max_wait_ms"},
			{"claim", map[string]any{"worker_id": "w", "streams": []string{"q"}, "max_wait_ms": 1.5}, "max_wait_ms"},
			{"claim", map[string]any{"worker_id": "w", "streams": []string{"q"}, "max_wait_ms": "500"}, "max_wait_ms"},
			{"heartbeat", map[string]any{"worker_id": "w", "lease_token": claim["lease_token"]}, "job_id"},
			{"heartbeat", map[string]any{"worker_id": "w", "job_id": claim["job_id"]}, "lease_token"},
			{"heartbeat", map[string]any{"worker_id": "w", "job_id": claim["job_id"], "lease_token": claim["lease_token"], "attempt_id": "1"}, "attempt_id"},
			{"complete", streamWith(lease, "attempt_id", nil), "attempt_id"},
			{"complete", streamWith(lease, "attempt_id", 0), "attempt_id"},
			{"complete", streamWith(lease, "attempt_id", "1"), "attempt_id"},
			{"complete", streamWith(lease, "lease_token", nil), "lease_token"},
			{"complete", streamWith(lease, "job_id", 5), "job_id"},
			{"complete", streamWith(lease, "message_id", 5), "message_id"},
			{"fail", lease, "error"},
			{"fail", streamWith(lease, "error", "boom"), "error"},
			{"fail", streamWith(lease, "error", map[string]any{"code": "E", "retryable": "yes"}), "retryable"},
			{"fail", streamWith(lease, "error", map[string]any{"code": "E", "stack": 5}), "stack"},
			{"fail", streamWith(lease, "error", map[string]any{"code": 3}), "code"},
		} {
			res := w.streamCall(c.op, c.body)
			streamRefused(t, res, http.StatusBadRequest, false, "invalid_request")
			if msg := res.Body["message"].(string); !strings.Contains(msg, c.field) {
				t.Errorf("%s %v: message %q does not name %q", c.op, c.body, msg, c.field)
			}
		}
		if after := streamState(t, w, ids["a"]); after != before {
			t.Fatalf("bad requests changed state:\n%s\n%s", before, after)
		}
		// An unknown job: nothing will ever need its message.
		streamRefused(t, w.streamCall("complete", streamWith(lease, "job_id", "no-such-job")), http.StatusNotFound, true, "task_not_found")
		streamRefused(t, w.streamCall("heartbeat", map[string]any{"worker_id": "w", "job_id": "no-such-job", "lease_token": "x"}), http.StatusNotFound, true, "task_not_found")
		// Only POST.
		if res := w.request("GET", w.internal.URL+"/internal/worker/claim", nil); res.Status != http.StatusNotFound && res.Status != http.StatusMethodNotAllowed {
			t.Fatalf("GET claim: %d", res.Status)
		}
	})
}

// streamSend posts from any goroutine and returns the decoded answer.
func streamSend(ctx context.Context, url string, body any) (response, error) {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(raw))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	out := response{Status: res.StatusCode, Header: res.Header, Raw: b}
	if err == nil && len(b) > 0 {
		err = json.Unmarshal(b, &out.Body)
	}
	return out, err
}

type streamPoll struct {
	res response
	err error
	at  time.Time
}

// streamLongPoll starts a claim that waits up to maxWait on streams.
func streamLongPoll(ctx context.Context, w *workerAPI, maxWait time.Duration, streams ...string) <-chan streamPoll {
	ch := make(chan streamPoll, 1)
	go func() {
		res, err := streamSend(ctx, w.internal.URL+"/internal/worker/claim",
			map[string]any{"worker_id": "poller", "streams": streams, "max_wait_ms": maxWait.Milliseconds()})
		ch <- streamPoll{res, err, time.Now()}
	}()
	return ch
}

func TestStreamClaimLongPollWakesWhenTaskBecomesReady(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		check := func(t *testing.T, ch <-chan streamPoll, readyAt time.Time, wantID string) {
			t.Helper()
			select {
			case p := <-ch:
				if p.err != nil {
					t.Fatal(p.err)
				}
				if p.res.Status != http.StatusOK || p.res.Body["claimed"] != true || p.res.Body["job_id"] != wantID {
					t.Fatalf("long poll: %d %s, want %s", p.res.Status, p.res.Raw, wantID)
				}
				if d := p.at.Sub(readyAt); d > 5*time.Second {
					t.Fatalf("long poll answered %v after the task became ready", d)
				}
			case <-time.After(9 * time.Second):
				t.Fatal("the long poll did not answer before its 10 s wait was nearly over")
			}
		}

		t.Run("created", func(t *testing.T) {
			w := *w
			w.t = t
			ch := streamLongPoll(context.Background(), &w, 10*time.Second, "lp-created")
			time.Sleep(200 * time.Millisecond) // let it find nothing and wait
			_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "lp-created"})
			check(t, ch, time.Now(), ids["a"])
		})

		t.Run("released by its parent", func(t *testing.T) {
			w := *w
			w.t = t
			_, ids := w.submit(lifecycle.TaskSpec{Key: "p", Name: "lp-parent"}, lifecycle.TaskSpec{Key: "c", Name: "lp-child", DependsOn: []string{"p"}})
			parent := w.streamClaimed("w-1", "lp-parent")
			ch := streamLongPoll(context.Background(), &w, 10*time.Second, "lp-child")
			time.Sleep(200 * time.Millisecond)
			streamWant(t, w.streamCall("complete", streamWith(streamLease(parent), "result", "p-out")), `{"ok":true,"ack":true}`)
			check(t, ch, time.Now(), ids["c"])
		})

		t.Run("times out empty", func(t *testing.T) {
			start := time.Now()
			p := <-streamLongPoll(context.Background(), w, 300*time.Millisecond, "lp-nothing")
			if p.err != nil || p.res.Status != http.StatusOK || string(p.res.Raw) != "{\"claimed\":false}\n" {
				t.Fatalf("empty long poll: %v %d %s", p.err, p.res.Status, p.res.Raw)
			}
			if d := p.at.Sub(start); d < 300*time.Millisecond || d > 5*time.Second {
				t.Fatalf("empty long poll answered after %v, want about 300ms", d)
			}
		})

		t.Run("abandoned by the worker", func(t *testing.T) {
			w := *w
			w.t = t
			ctx, cancel := context.WithCancel(context.Background())
			ch := streamLongPoll(ctx, &w, 10*time.Second, "lp-gone")
			time.Sleep(200 * time.Millisecond)
			cancel()
			if p := <-ch; p.err == nil {
				t.Fatalf("canceled poll answered: %d %s", p.res.Status, p.res.Raw)
			}
			time.Sleep(200 * time.Millisecond) // the server sees the hang-up
			_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "lp-gone"})
			time.Sleep(200 * time.Millisecond)
			if task := w.task(ids["a"]); task.Status != lifecycle.Pending {
				t.Fatalf("a task created after the worker hung up was claimed by its poll: %s", task.Status)
			}
		})
	})
}

// commitTimes records, for a transaction run with a context that carries a *time.Time under
// commitAtKey, when its commit returned.
type commitTimes struct{ store.Store }

type commitAtKey struct{}

func (s commitTimes) InTx(ctx context.Context, fn func(store.Tx) error) error {
	err := s.Store.InTx(ctx, fn)
	if at, ok := ctx.Value(commitAtKey{}).(*time.Time); ok && err == nil {
		*at = time.Now()
	}
	return err
}

// BenchmarkLongPollWakeup measures, per driver, the latency from the commit that makes a task
// ready (its creation, or its parent's completion) to the answer of a long-poll claim already
// waiting on its stream, as the worker receives it over HTTP. It reports the median and the 99th
// percentile in microseconds; ns/op includes a 5 ms pause per round that lets the poll start
// waiting.
func BenchmarkLongPollWakeup(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		b.Run(drv.Name, func(b *testing.B) {
			st := commitTimes{drv.Open(b)}
			quiet := slog.New(slog.DiscardHandler)
			d, err := dispatch.New(st, dispatch.Config{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), Dispatcher: d}), Logger: quiet})
			srv := httptest.NewServer(s.InternalHandler())
			b.Cleanup(srv.Close)
			ctx := context.Background()
			w := &workerAPI{internal: srv}

			round := func(b *testing.B, stream string, ready func(ctx context.Context) string) time.Duration {
				ch := streamLongPoll(ctx, w, 30*time.Second, stream)
				time.Sleep(5 * time.Millisecond)
				var commitAt time.Time
				id := ready(context.WithValue(ctx, commitAtKey{}, &commitAt))
				p := <-ch
				if p.err != nil || p.res.Body["claimed"] != true || p.res.Body["job_id"] != id {
					b.Fatalf("long poll: %v %s, want %s", p.err, p.res.Raw, id)
				}
				return max(p.at.Sub(commitAt), 0)
			}
			create := func(b *testing.B, ctx context.Context, specs ...lifecycle.TaskSpec) *dispatch.CreateJobResult {
				res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "bench", Tasks: specs})
				if err != nil {
					b.Fatal(err)
				}
				return res
			}

			b.Run("created", func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				for range b.N {
					lat = append(lat, round(b, "bench-created", func(ctx context.Context) string {
						res := create(b, ctx, lifecycle.TaskSpec{Key: "t", Name: "bench-created"})
						_, tasks, err := d.GetJob(context.Background(), "", res.Job.ID)
						if err != nil {
							b.Fatal(err)
						}
						return tasks[0].ID
					}))
				}
				streamReportPercentiles(b, lat)
			})

			b.Run("released", func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				for range b.N {
					res := create(b, ctx, lifecycle.TaskSpec{Key: "p", Name: "bench-parent"}, lifecycle.TaskSpec{Key: "c", Name: "bench-child", DependsOn: []string{"p"}})
					_, tasks, err := d.GetJob(ctx, "", res.Job.ID)
					if err != nil {
						b.Fatal(err)
					}
					ids := map[string]string{}
					for _, tk := range tasks {
						ids[tk.Key] = tk.ID
					}
					c, err := d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: ids["p"], WorkerID: "bench"})
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, round(b, "bench-child", func(ctx context.Context) string {
						if _, err := d.Complete(ctx, dispatch.CompleteParams{TaskID: ids["p"], Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
							Outcome: store.OutcomeSucceeded}); err != nil {
							b.Fatal(err)
						}
						return ids["c"]
					}))
				}
				streamReportPercentiles(b, lat)
			})
		})
	}
}

func streamReportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(p int) time.Duration { return lat[min(len(lat)-1, len(lat)*p/100)] }
	b.ReportMetric(float64(at(50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(at(99).Microseconds()), "p99-µs")
}

func TestStreamLongPollEndsWhenTheServerDrains(t *testing.T) {
	st := storetest.OpenSQLite(t)
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), Dispatcher: d}), Logger: quiet})
	srv := httptest.NewServer(s.InternalHandler())
	defer srv.Close()
	done := make(chan response, 1)
	w := &workerAPI{t: t}
	go func() {
		done <- w.post(srv.URL, "/internal/worker/claim", map[string]any{"worker_id": "w", "streams": []string{"q"}, "max_wait_ms": 60000})
	}()
	time.Sleep(100 * time.Millisecond) // let the poll start waiting; the assertion below does not depend on it
	start := time.Now()
	s.Drain()
	select {
	case r := <-done:
		if r.Status != 200 || r.Body["claimed"] != false {
			t.Errorf("drained poll: %d %s", r.Status, r.Raw)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("the poll ended %v after Drain", time.Since(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a long poll kept waiting after Drain")
	}
}
