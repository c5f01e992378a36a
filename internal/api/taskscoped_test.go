package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
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

// scoped calls a task-scoped endpoint on the public listener with a capability token ("" sends
// none). No API key is sent: these routes are not behind it.
func scoped(w *workerAPI, path string, body any, token string) response {
	w.t.Helper()
	if token == "" {
		return w.post(w.public.URL, path, body)
	}
	return w.post(w.public.URL, path, body, "X-Trace-Task-Capability", token)
}

// The task-scoped dialect's example bodies that differ from the internal dialect's, with "$..."
// placeholders for ids.
const (
	scopedComplete = `{
  "task_id": "$TASK",
  "attempt": $ATTEMPT,
  "lease_token": "$LEASE",
  "status": "Completed",
  "events": [
    { "dataset_uuid": "$DS_C", "dataset_version": "$VER_C", "cursor": 12345 }
  ],
  "outputs": [
    { "output_index": 0, "dataset_uuid": "$DS_A", "dataset_version": "$VER_A", "location": "postgres_table:dataset_$DS_A", "cursor": 12345, "row_count": 1000 },
    { "output_index": 1, "dataset_uuid": "$DS_B", "dataset_version": "$VER_B", "location": "postgres_table:dataset_$DS_B", "cursor": 12345, "row_count": 20000 }
  ],
  "datasets_published": [
    {
      "dataset_uuid": "$DS_A",
      "dataset_version": "$VER_A",
      "storage_ref": {
        "scheme": "s3",
        "bucket": "trace-scratch",
        "prefix": "datasets/$DS_A/$VER_A/",
        "glob": "*.parquet"
      },
      "config_hash": "string",
      "range_start": 100,
      "range_end": 200
    }
  ],
  "error_message": null
}`
	scopedBufferPublish = `{
  "task_id": "$TASK",
  "attempt": $ATTEMPT,
  "lease_token": "$LEASE",
  "batch_uri": "s3://trace-scratch/buffers/$TASK/$ATTEMPT/batch.jsonl",
  "content_type": "application/jsonl",
  "batch_size_bytes": 123456,
  "dedupe_scope": "alert_events"
}`
)

func TestTaskScopedConformance(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		_, ids := submitNamedJob(w, "monad", lifecycle.TaskSpec{Key: "udf", Name: "udf"})
		id := ids["udf"]
		// The token handed out by the internal claim serves the task-scoped dialect.
		claim := claimInternal(t, w, id)
		token, lease := claim["capability_token"].(string), claim["lease_token"].(string)
		datasets := exampleIDs(w)
		ds := map[string]string{}
		for i := 0; i < len(datasets); i += 2 {
			ds[datasets[i]] = datasets[i+1]
		}
		pairs := attemptPairs(id, 1, lease, datasets)

		hb := wantOK(t, scoped(w, "/v1/task/heartbeat", fillExample(exampleHeartbeat, pairs...), token))
		wantKeys(t, "heartbeat", hb, "ok", "lease_expires_at", "should_cancel", "cancel_reason")
		if hb["ok"] != true || hb["should_cancel"] != false || hb["cancel_reason"] != nil {
			t.Errorf("heartbeat: %v", hb)
		}
		wantTime(t, hb, "lease_expires_at")

		for _, c := range []struct {
			name, body       string
			received, stored float64
		}{{"single", exampleEventsSingle, 1, 1}, {"partitioned", exampleEventsPartitioned, 1, 1}, {"batch", exampleEventsBatch, 2, 1}} {
			ev := wantOK(t, scoped(w, "/v1/task/events", fillExample(c.body, pairs...), token))
			wantKeys(t, c.name, ev, "ok", "received", "stored")
			if ev["ok"] != true || ev["received"] != c.received || ev["stored"] != c.stored {
				t.Errorf("%s events: %v", c.name, ev)
			}
		}

		// The task-scoped buffer-publish body, its repeat, and the internal dialect's body on the
		// same endpoint, by a task of the job that writes the buffered dataset.
		_, writers := w.submitWriters(lifecycle.TaskSpec{Key: "writer", Name: "op"})
		wid := writers["writer"]
		wclaim := claimInternal(t, w, wid)
		wtoken, wpairs := wclaim["capability_token"].(string), attemptPairs(wid, 1, wclaim["lease_token"].(string), datasets)
		for i, dup := range []bool{false, true} {
			bp := wantOK(t, scoped(w, "/v1/task/buffer-publish", fillExample(scopedBufferPublish, wpairs...), wtoken))
			wantKeys(t, "buffer-publish", bp, "ok", "duplicate")
			if bp["ok"] != true || bp["duplicate"] != dup {
				t.Errorf("buffer-publish #%d: %v", i+1, bp)
			}
		}
		if bp := wantOK(t, scoped(w, "/v1/task/buffer-publish", fillExample(exampleBufferPublish, wpairs...), wtoken)); bp["duplicate"] != false {
			t.Errorf("internal dialect body: %v", bp)
		}
		pubs, err := w.st.BufferPublishListByTask(ctx, wid)
		if err != nil || len(pubs) != 2 {
			t.Fatalf("publishes: %v %d", err, len(pubs))
		}
		if p := pubs[0]; p.BatchURI != "s3://trace-scratch/buffers/"+wid+"/1/batch.jsonl" || p.ContentType != "application/jsonl" ||
			p.BatchSizeBytes == nil || *p.BatchSizeBytes != 123456 || p.DedupeScope != "alert_events" || p.Tenant != "acme" || p.Attempt != 1 {
			t.Errorf("task-scoped publish stored as %+v", p)
		}
		if p := pubs[1]; p.DatasetUUID != ds["$DS_A"] || p.RecordCount == nil || *p.RecordCount != 1000 {
			t.Errorf("internal dialect publish stored as %+v", p)
		}

		for i, dup := range []bool{false, true} {
			done := wantOK(t, scoped(w, "/v1/task/complete", fillExample(scopedComplete, pairs...), token))
			wantKeys(t, "complete", done, "ok", "ack", "status", "requeued", "dead_lettered", "duplicate")
			if done["ok"] != true || done["ack"] != true || done["status"] != "Completed" || done["requeued"] != false ||
				done["dead_lettered"] != false || done["duplicate"] != dup {
				t.Errorf("complete #%d: %v", i+1, done)
			}
		}
		var sent map[string]json.RawMessage
		if err := json.Unmarshal([]byte(fillExample(scopedComplete, pairs...)), &sent); err != nil {
			t.Fatal(err)
		}
		want := `{"outputs":` + string(sent["outputs"]) + `,"datasets_published":` + string(sent["datasets_published"]) + `}`
		if tk := w.task(id); tk.Status != lifecycle.Completed || !jsonBytesEqual(tk.Output, want) {
			t.Errorf("completed task: %s %s", tk.Status, tk.Output)
		}
		if events, _ := w.st.DatasetEventListByTask(ctx, id); len(events) != 4 {
			t.Errorf("%d upstream events, want 4", len(events))
		}
	})
}

func TestTaskScopedRoutesLiveOnThePublicListenerOnly(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		w.buffered() // the dataset of the buffer-publish calls
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		c, token := w.claim(ids["t"])
		body := fencedCalls[0].body(w, c.Task.ID, 1, c.Task.LeaseToken)
		if res := w.post(w.internal.URL, "/v1/task/heartbeat", body, "X-Trace-Task-Capability", token); res.Status != http.StatusNotFound {
			t.Errorf("task-scoped route on the internal listener: %d", res.Status)
		}
		if res := w.post(w.public.URL, "/internal/heartbeat", body); res.Status != http.StatusNotFound {
			t.Errorf("internal route on the public listener: %d", res.Status)
		}
		wantOK(t, scoped(w, "/v1/task/heartbeat", body, token))
	})
}

// issuedAgo is a token for t's current attempt issued age ago with a lifetime of ttl.
func issuedAgo(t *testing.T, w *workerAPI, task *store.Task, age, ttl time.Duration) string {
	t.Helper()
	old := auth.NewTokens(w.st, func() time.Time { return time.Now().Add(-age) })
	tok, _, err := old.Issue(context.Background(), auth.TaskClaims{Tenant: "acme", JobID: task.JobID, TaskID: task.ID,
		Attempt: task.Attempt, LeaseToken: task.LeaseToken}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTaskScopedHeartbeatRefreshesAnAgingToken(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		w.buffered() // the dataset of the buffer-publish calls
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		c, fresh := w.claim(ids["t"])
		body := fencedCalls[0].body(w, c.Task.ID, 1, c.Task.LeaseToken)
		if hb := wantOK(t, scoped(w, "/v1/task/heartbeat", body, fresh)); hb["capability_token"] != nil || hb["capability_token_expires_at"] != nil {
			t.Errorf("a fresh token was refreshed: %v", hb)
		}
		aging := issuedAgo(t, w, c.Task, 40*time.Minute, time.Hour)
		hb := wantOK(t, scoped(w, "/v1/task/heartbeat", body, aging))
		wantKeys(t, "heartbeat", hb, "ok", "lease_expires_at", "should_cancel", "cancel_reason", "capability_token", "capability_token_expires_at")
		next, _ := hb["capability_token"].(string)
		claims, err := w.tokens.Verify(context.Background(), next)
		if err != nil || claims.TaskID != c.Task.ID || claims.Attempt != 1 || claims.LeaseToken != c.Task.LeaseToken {
			t.Fatalf("refreshed token: %v %+v", err, claims)
		}
		if exp := wantTime(t, hb, "capability_token_expires_at"); exp.Before(time.Now().Add(55 * time.Minute)) {
			t.Errorf("refreshed token expires at %v", exp)
		}
		if hb := wantOK(t, scoped(w, "/v1/task/heartbeat", body, next)); hb["capability_token"] != nil {
			t.Errorf("the refreshed token was refreshed again: %v", hb)
		}
	})
}

// claimAgain claims a task whose retry is due within moments.
func claimAgain(t *testing.T, w *workerAPI, id string) *dispatch.Claim {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := w.d.ClaimTask(context.Background(), dispatch.ClaimTaskParams{TaskID: id, WorkerID: "harness"})
		var nc *dispatch.NotClaimedError
		switch {
		case err == nil:
			return c
		case !errors.As(err, &nc) || time.Now().After(deadline):
			t.Fatalf("claim %s again: %v", id, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tamperSignature changes one character in the middle of a token's signature.
func tamperSignature(tok string) string {
	parts := strings.Split(tok, ".")
	sig := []byte(parts[2])
	i := len(sig) / 2
	if sig[i] == 'A' {
		sig[i] = 'B'
	} else {
		sig[i] = 'A'
	}
	return parts[0] + "." + parts[1] + "." + string(sig)
}

func tokenPart(t *testing.T, tok string, i int) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[i])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func encodePart(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// tamperClaims rewrites a token's claims and keeps its (now wrong) signature.
func tamperClaims(t *testing.T, tok string, change func(map[string]any)) string {
	t.Helper()
	claims := tokenPart(t, tok, 1)
	change(claims)
	parts := strings.Split(tok, ".")
	return parts[0] + "." + encodePart(claims) + "." + parts[2]
}

// unsigned re-encodes a token's claims, changed, with "alg": "none" and no signature.
func unsigned(t *testing.T, tok string, change func(map[string]any)) string {
	t.Helper()
	header := tokenPart(t, tok, 0)
	header["alg"] = "none"
	claims := tokenPart(t, tok, 1)
	change(claims)
	return encodePart(header) + "." + encodePart(claims) + "."
}

func kidOf(t *testing.T, tok string) string {
	t.Helper()
	kid, _ := tokenPart(t, tok, 0)["kid"].(string)
	if kid == "" {
		t.Fatalf("token without kid: %s", tok)
	}
	return kid
}

func TestTaskScopedAuthMatrix(t *testing.T) {
	for _, call := range fencedCalls {
		t.Run(call.name, func(t *testing.T) {
			forEachClockedWorkerDriver(t, time.Now(), func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
				ctx := context.Background()
				// target may make every fenced call, its buffer-publish included.
				jobIDs, writers := w.submitWriters(lifecycle.TaskSpec{Key: "target", Name: "op"})
				jobID, target := jobIDs["target"], writers["target"]
				_, ids := w.submit(lifecycle.TaskSpec{Key: "other", Name: "op"})
				other := ids["other"]

				// Attempt 1 of target fails and is retried (after the server's backoff); attempt 2
				// runs.
				c1, tok1 := w.claim(target)
				if _, err := w.d.Complete(ctx, dispatch.CompleteParams{TaskID: target, Attempt: 1, LeaseToken: c1.Task.LeaseToken,
					Outcome: store.OutcomeFailed, Error: &store.TaskError{Message: "flaky"}}); err != nil {
					t.Fatal(err)
				}
				clock.Advance(16 * time.Second)
				c2 := claimAgain(t, w, target)
				tok2 := w.token(c2.Task, time.Hour)
				_, tokOther := w.claim(other)
				lease1, lease2 := c1.Task.LeaseToken, c2.Task.LeaseToken
				body1, body2 := call.body(w, target, 1, lease1), call.body(w, target, 2, lease2)
				forge := func(c map[string]any) { c["attempt"], c["lease_token"] = 2, lease2 }
				// Expired an hour ago. (Not w.token(task, -ttl): its issuer's clock closure reads
				// ttl after it was negated, so that token is issued two hours in the future and is
				// valid.)
				expired := issuedAgo(t, w, c2.Task, 2*time.Hour, time.Hour)

				refusals := []struct {
					name    string
					token   string
					body    map[string]any
					headers []string
					status  int
					code    string
					field   string
				}{
					{"no token", "", body2, nil, 401, "unauthorized", "missing"},
					{"token in the Authorization header", "", body2, []string{"Authorization", "Bearer " + tok2}, 401, "unauthorized", "missing"},
					{"another task's token", tokOther, body2, nil, 403, "forbidden", "token"},
					// The previous attempt's token does not cover the attempt the body names:
					// refused before the core is asked (403).
					{"previous attempt's token", tok1, body2, nil, 403, "forbidden", "token"},
					// A stale worker whose token and body agree on its own attempt passes the token
					// check (the token is authentic and covers what it asks) and is fenced by the
					// core: 409 attempt_mismatch.
					{"previous attempt's token and body", tok1, body1, nil, 409, "attempt_mismatch", "attempt"},
					// A valid token for the task whose body names a stale lease: a conflict, not a
					// permission problem (409, as the core answers a stale lease).
					{"body's lease token is a stale one", tok2, call.body(w, target, 2, lease1), nil, 409, "lease_mismatch", "lease"},
					{"current token, previous attempt's body", tok2, body1, nil, 409, "attempt_mismatch", "attempt"},
					{"expired token", expired, body2, nil, 401, "unauthorized", "expired"},
					{"signature altered", tamperSignature(tok2), body2, nil, 401, "unauthorized", "invalid"},
					{"claims altered", tamperClaims(t, tok1, forge), body2, nil, 401, "unauthorized", "invalid"},
					{"expiry extended", tamperClaims(t, expired, func(c map[string]any) { c["exp"] = time.Now().Add(time.Hour).Unix() }), body2, nil, 401, "unauthorized", "invalid"},
					{"unsigned (alg none)", unsigned(t, tok1, forge), body2, nil, 401, "unauthorized", "invalid"},
					{"garbage", "not.a.token", body2, nil, 401, "unauthorized", "invalid"},
				}
				before := fencedState(t, w, jobID, target, other)
				for _, r := range refusals {
					headers := r.headers
					if r.token != "" {
						headers = append(headers, "X-Trace-Task-Capability", r.token)
					}
					res := w.post(w.public.URL, call.scopedPath, r.body, headers...)
					if res.Status != r.status || res.Body["error"] != r.code {
						t.Errorf("%s: %d %s, want %d %s", r.name, res.Status, res.Raw, r.status, r.code)
						continue
					}
					if msg, _ := res.Body["message"].(string); !strings.Contains(msg, r.field) {
						t.Errorf("%s: message %q, want it to mention %q", r.name, msg, r.field)
					}
				}
				if after := fencedState(t, w, jobID, target, other); after != before {
					t.Fatal("a refused call changed state")
				}
				if res := scoped(w, call.scopedPath, body2, tok2); res.Status != http.StatusOK {
					t.Fatalf("valid call: %d %s", res.Status, res.Raw)
				}
				if fencedState(t, w, jobID, target, other) == before && call.name != "heartbeat" {
					t.Error("the valid call changed nothing")
				}
			})
		})
	}
}

func TestTaskScopedKeyRotation(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		w.buffered() // the dataset of the buffer-publish calls
		ctx := context.Background()
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		c, tokA := w.claim(ids["t"])
		body := fencedCalls[0].body(w, c.Task.ID, 1, c.Task.LeaseToken)
		kidA := kidOf(t, tokA)
		wantOK(t, scoped(w, "/v1/task/heartbeat", body, tokA))

		kidB, err := w.tokens.Rotate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tokB := w.token(c.Task, time.Hour)
		if kidOf(t, tokB) != kidB || kidB == kidA {
			t.Fatalf("after the rotation tokens are signed by %s, want the new key %s", kidOf(t, tokB), kidB)
		}
		// A token signed before the rotation still verifies.
		wantOK(t, scoped(w, "/v1/task/heartbeat", body, tokA))
		wantOK(t, scoped(w, "/v1/task/heartbeat", body, tokB))

		if err := w.tokens.Retire(ctx, kidA); err != nil {
			t.Fatal(err)
		}
		wantFencedError(t, scoped(w, "/v1/task/heartbeat", body, tokA), http.StatusUnauthorized, "unauthorized", "invalid")
		wantOK(t, scoped(w, "/v1/task/heartbeat", body, tokB))
		// Another replica sharing the store agrees.
		replica := auth.NewTokens(w.st, nil)
		if _, err := replica.Verify(ctx, tokA); !errors.Is(err, auth.ErrTokenInvalid) {
			t.Errorf("another replica verifies a retired key's token: %v", err)
		}
		if _, err := replica.Verify(ctx, tokB); err != nil {
			t.Errorf("another replica refuses the current key's token: %v", err)
		}
	})
}

func TestTaskScopedStaleWorkerIsFenced(t *testing.T) {
	forEachClockedWorkerDriver(t, time.Now(), func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		ctx := context.Background()
		// A task that may make every fenced call, its buffer-publish included.
		jobIDs, ids := w.submitWriters(lifecycle.TaskSpec{Key: "flaky", Name: "op", HeartbeatTimeoutSeconds: refOf(10)})
		jobID, id := jobIDs["flaky"], ids["flaky"]
		claim1 := claimInternal(t, w, id)
		tok1, lease1 := claim1["capability_token"].(string), claim1["lease_token"].(string)

		clock.Advance(11 * time.Second)
		if n, err := w.d.Reap(ctx); err != nil || n != 1 {
			t.Fatalf("reap: %d %v", n, err)
		}
		before := fencedState(t, w, jobID, id)
		wantFencedError(t, scoped(w, "/v1/task/heartbeat", fencedCalls[0].body(w, id, 1, lease1), tok1), http.StatusGone, "task_expired", "")
		if fencedState(t, w, jobID, id) != before {
			t.Fatal("a heartbeat of a timed-out attempt changed state")
		}

		clock.Advance(16 * time.Second) // past the retry's backoff: the server's base of 10 s, with its jitter at most 15 s
		claim2 := claimInternal(t, w, id)
		tok2, lease2 := claim2["capability_token"].(string), claim2["lease_token"].(string)
		before = fencedState(t, w, jobID, id)
		for _, c := range fencedCalls {
			res := scoped(w, c.scopedPath, c.body(w, id, 1, lease1), tok1)
			wantFencedError(t, res, http.StatusConflict, "attempt_mismatch", "attempt")
			if res.Body["expected_attempt"] != 2.0 || res.Body["received_attempt"] != 1.0 {
				t.Errorf("%s: %s", c.name, res.Raw)
			}
			wantFencedError(t, scoped(w, c.scopedPath, c.body(w, id, 2, lease2), tok1), http.StatusForbidden, "forbidden", "token")
			// The current token with a stale lease in the body: a conflict (the worker aborts), not
			// a permission problem.
			wantFencedError(t, scoped(w, c.scopedPath, c.body(w, id, 2, lease1), tok2), http.StatusConflict, "lease_mismatch", "lease")
			if fencedState(t, w, jobID, id) != before {
				t.Fatalf("%s: a stale call changed state", c.name)
			}
		}
		for _, c := range fencedCalls {
			wantOK(t, scoped(w, c.scopedPath, c.body(w, id, 2, lease2), tok2))
		}
		if tk := w.task(id); tk.Status != lifecycle.Completed || tk.Attempt != 2 {
			t.Errorf("task: %s attempt %d", tk.Status, tk.Attempt)
		}
	})
}

func TestTaskScopedBadBodiesAreRejected(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		jobID, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		c, token := w.claim(ids["t"])
		id, lease := c.Task.ID, c.Task.LeaseToken
		fence := `"task_id":"` + id + `","attempt":1,"lease_token":"` + lease + `"`
		cases := []struct{ path, body, field string }{
			{"/v1/task/heartbeat", `{"task_id":"` + id + `","lease_token":"` + lease + `"}`, "attempt"},
			{"/v1/task/heartbeat", `{"task_id":"` + id + `","attempt":1}`, "lease_token"},
			{"/v1/task/heartbeat", `{"attempt":1,"lease_token":"` + lease + `"}`, "task_id"},
			{"/v1/task/heartbeat", `{"task_id":"` + id + `","attempt":"1","lease_token":"` + lease + `"}`, "attempt"},
			{"/v1/task/heartbeat", `{"task_id":"` + id + `","attempt":1,"lease_token":7}`, "lease_token"},
			{"/v1/task/heartbeat", `{` + fence, "JSON"},
			{"/v1/task/complete", `{` + fence + `,"status":"SUCCEEDED"}`, "status"},
			{"/v1/task/complete", `{` + fence + `,"status":"Completed","datasets_published":[[]]}`, "datasets_published[0]"},
			{"/v1/task/complete", `{` + fence + `,"status":"Failed","output":{"n":1}}`, "output"},
			{"/v1/task/complete", `{` + fence + `,"status":"Completed","output":{"n":1},"outputs":[]}`, "output"},
			{"/v1/task/events", `{` + fence + `,"events":[{"dataset_uuid":"d","dataset_version":"v","partition_key":"a-b"}]}`, "partition_key"},
			{"/v1/task/buffer-publish", `{` + fence + `,"content_type":"application/jsonl"}`, "batch_uri"},
			{"/v1/task/buffer-publish", `{` + fence + `,"batch_uri":"s3://b/x","batch_size_bytes":-5}`, "batch_size_bytes"},
			{"/v1/task/buffer-publish", `{` + fence + `,"batch_uri":"s3://b/x","dedupe_scope":7}`, "dedupe_scope"},
		}
		before := fencedState(t, w, jobID, id)
		for _, c := range cases {
			res := scoped(w, c.path, c.body, token)
			if res.Status != http.StatusBadRequest || res.Body["error"] != "invalid_request" {
				t.Errorf("%s %s: %d %s, want 400 invalid_request", c.path, c.body, res.Status, res.Raw)
				continue
			}
			if msg, _ := res.Body["message"].(string); !strings.Contains(msg, c.field) {
				t.Errorf("%s %s: message %q does not name %q", c.path, c.body, msg, c.field)
			}
		}
		if fencedState(t, w, jobID, id) != before {
			t.Error("a rejected body changed state")
		}
	})
}

// A completion's output member is kept as the task's output as it is: what a push target's
// handler returned, reported through the task-scoped dialect.
func TestTaskScopedCompleteKeepsTheOutputAsItIs(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		c, token := w.claim(ids["t"])
		body := map[string]any{"task_id": c.Task.ID, "attempt": 1, "lease_token": c.Task.LeaseToken, "status": "Completed",
			"output": map[string]any{"alerts": 2, "ids": []string{"a", "b"}}}
		if done := wantOK(t, scoped(w, "/v1/task/complete", body, token)); done["status"] != "Completed" {
			t.Fatalf("complete: %v", done)
		}
		if tk := w.task(c.Task.ID); tk.Status != lifecycle.Completed || !jsonBytesEqual(tk.Output, `{"alerts":2,"ids":["a","b"]}`) {
			t.Errorf("completed task: %s %s", tk.Status, tk.Output)
		}
	})
}
