package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// ---- harness additions for the internal (000) and task-scoped (003) dialects ----

// submitNamedJob creates a job with a name (the internal dialect's dag_name) through the core and
// returns the global id of each task by its key.
func submitNamedJob(w *workerAPI, name string, specs ...lifecycle.TaskSpec) (string, map[string]string) {
	w.t.Helper()
	ctx := context.Background()
	res, err := w.d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Name: name, Tasks: specs})
	if err != nil {
		w.t.Fatal(err)
	}
	_, tasks, err := w.d.GetJob(ctx, "", res.Job.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	ids := map[string]string{}
	for _, tk := range tasks {
		ids[tk.Key] = tk.ID
	}
	return res.Job.ID, ids
}

// fencedState is everything a worker call could change, as one comparable string: the tasks'
// rows, attempts, upstream events and buffered publishes, the job's audit log and the outbox.
func fencedState(t *testing.T, w *workerAPI, jobID string, taskIDs ...string) string {
	t.Helper()
	ctx := context.Background()
	var parts []any
	for _, id := range taskIDs {
		task, err := w.st.TaskGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		attempts, err := w.st.AttemptList(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		events, err := w.st.DatasetEventListByTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		pubs, err := w.st.BufferPublishListByTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, task, attempts, events, pubs)
	}
	audit, err := w.st.EventList(ctx, store.EventListParams{JobID: jobID, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	outbox, err := w.st.OutboxListAfter(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(append(parts, audit, outbox))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantFencedError fails unless res answered status with the error code and, for 400, a message
// naming field.
func wantFencedError(t *testing.T, res response, status int, code, field string) {
	t.Helper()
	if res.Status != status || res.Body["error"] != code {
		t.Fatalf("got %d %s, want %d with error %q", res.Status, res.Raw, status, code)
	}
	if code != "task_not_found" {
		if msg, _ := res.Body["message"].(string); msg == "" || !strings.Contains(msg, field) {
			t.Fatalf("message %q should name %q; body %s", msg, field, res.Raw)
		}
	}
}

// wantOK fails unless res is a 200.
func wantOK(t *testing.T, res response) map[string]any {
	t.Helper()
	if res.Status != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", res.Status, res.Raw)
	}
	return res.Body
}

// wantKeys fails unless obj has exactly keys.
func wantKeys(t *testing.T, what string, obj map[string]any, keys ...string) {
	t.Helper()
	if len(obj) != len(keys) {
		t.Errorf("%s has %d members, want %d (%v): %v", what, len(obj), len(keys), keys, obj)
	}
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			t.Errorf("%s lacks %q: %v", what, k, obj)
		}
	}
}

// wantTime parses an RFC 3339 UTC member.
func wantTime(t *testing.T, obj map[string]any, key string) time.Time {
	t.Helper()
	s, _ := obj[key].(string)
	at, err := time.Parse(time.RFC3339, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("%s = %v, want an RFC 3339 UTC time", key, obj[key])
	}
	return at
}

// fillExample replaces $NAME placeholders in an example body.
func fillExample(tmpl string, pairs ...string) string {
	return strings.NewReplacer(pairs...).Replace(tmpl)
}

// claimInternal claims a task over the internal dialect and returns the answer.
func claimInternal(t *testing.T, w *workerAPI, taskID string) map[string]any {
	t.Helper()
	res := w.post(w.internal.URL, "/internal/task-claim", map[string]any{"task_id": taskID, "worker_id": "ecs:cluster/service/task"})
	body := wantOK(t, res)
	if body["status"] != "Claimed" {
		t.Fatalf("claim %s: %s", taskID, res.Raw)
	}
	return body
}

func fetchInternal(w *workerAPI, taskID string) response {
	return w.request("GET", w.internal.URL+"/internal/task-fetch?task_id="+taskID, nil)
}

// The internal dialect's example bodies, with "$..." placeholders for ids.
const (
	exampleClaim     = `{ "task_id": "$TASK", "worker_id": "ecs:cluster/service/task" }`
	exampleHeartbeat = `{ "task_id": "$TASK", "attempt": $ATTEMPT, "lease_token": "$LEASE" }`
	exampleComplete  = `{
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
  "error_message": null
}`
	exampleEventsSingle = `{
  "task_id": "$TASK",
  "attempt": $ATTEMPT,
  "lease_token": "$LEASE",
  "events": [{ "dataset_uuid": "$DS_A", "dataset_version": "$VER_A", "cursor": 12345 }]
}`
	exampleEventsPartitioned = `{
  "task_id": "$TASK",
  "attempt": $ATTEMPT,
  "lease_token": "$LEASE",
  "events": [{ "dataset_uuid": "$DS_A", "dataset_version": "$VER_A", "partition_key": "1000000-1010000", "start": 1000000, "end": 1010000 }]
}`
	exampleEventsBatch = `{
  "task_id": "$TASK",
  "attempt": $ATTEMPT,
  "lease_token": "$LEASE",
  "events": [
    { "dataset_uuid": "$DS_A", "dataset_version": "$VER_A", "cursor": 12345 },
    { "dataset_uuid": "$DS_B", "dataset_version": "$VER_B", "cursor": 12345 }
  ]
}`
	exampleBufferPublish = `{
  "task_id": "$TASK",
  "attempt": $ATTEMPT,
  "lease_token": "$LEASE",
  "dataset_uuid": "$DS_A",
  "dataset_version": "$VER_BUF",
  "batch_uri": "s3://trace-scratch/buffers/$DS_A/$TASK/$ATTEMPT/batch.jsonl",
  "record_count": 1000
}`
)

// exampleIDs are the dataset ids the examples use, all datasets of acme (events may name no
// other): $DS_A, the dataset of the buffered publish, is the buffered dataset of w, and $VER_BUF
// its current version, which the batches of its writers are of; $DS_B and $DS_C are the two
// outputs of a job of another pipeline.
func exampleIDs(w *workerAPI) []string {
	pairs := []string{"$DS_A", w.buffered(), "$VER_BUF", w.bufferedVersion()}
	ctx := context.Background()
	if _, err := w.dp.Deploy(ctx, "acme", []byte(`name: examples
jobs:
  - {name: produce, activation: source, runtime: ecs_platform, operator: produce, outputs: 2, source: {kind: manual}}
`), "application/yaml"); err != nil {
		w.t.Fatal(err)
	}
	v, err := w.dp.GetPipeline(ctx, "acme", "examples")
	if err != nil {
		w.t.Fatal(err)
	}
	outs := v.Jobs()[0].Outputs
	pairs = append(pairs, "$DS_B", outs[0].DatasetUUID, "$DS_C", outs[1].DatasetUUID)
	for _, k := range []string{"$VER_A", "$VER_B", "$VER_C"} {
		pairs = append(pairs, k, uuid.NewString())
	}
	return pairs
}

// attemptPairs are the placeholders of one attempt.
func attemptPairs(taskID string, attempt int, lease string, datasets []string) []string {
	return append([]string{"$TASK", taskID, "$ATTEMPT", strconv.Itoa(attempt), "$LEASE", lease}, datasets...)
}

func TestInternalConformance(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		jobID, ids := submitNamedJob(w, "monad",
			lifecycle.TaskSpec{Key: "block_follower", Name: "block_follower", Input: json.RawMessage(`{"chain":"monad","from":1}`), TimeoutSeconds: refOf(600)},
			lifecycle.TaskSpec{Key: "enrich", Name: "enrich", DependsOn: []string{"block_follower"}, Input: json.RawMessage(`{"mode":"full"}`)})
		id := ids["block_follower"]
		datasets := exampleIDs(w)
		ds := map[string]string{}
		for i := 0; i < len(datasets); i += 2 {
			ds[datasets[i]] = datasets[i+1]
		}

		// Claim (the example request, verbatim but for the id).
		before := time.Now()
		res := w.post(w.internal.URL, "/internal/task-claim", fillExample(exampleClaim, "$TASK", id))
		claim := wantOK(t, res)
		wantKeys(t, "claim", claim, "status", "task_id", "attempt", "lease_token", "lease_expires_at", "capability_token",
			"capability_token_expires_at", "heartbeat_interval_seconds", "lease_ttl_seconds", "task")
		if claim["task_id"] != id {
			t.Fatalf("claim task_id %v, want %s", claim["task_id"], id)
		}
		stored := w.task(id)
		if claim["status"] != "Claimed" || claim["attempt"] != 1.0 || claim["lease_token"] != stored.LeaseToken || stored.Status != lifecycle.Running {
			t.Fatalf("claim answer %s; task %+v", res.Raw, stored)
		}
		if got := wantTime(t, claim, "lease_expires_at"); !got.Equal(stored.LeaseExpiresAt.Truncate(time.Second)) {
			t.Errorf("lease_expires_at %v, want %v", got, stored.LeaseExpiresAt)
		}
		if claim["heartbeat_interval_seconds"] != 30.0 || claim["lease_ttl_seconds"] != 90.0 {
			t.Errorf("timing: %s", res.Raw)
		}
		tokenExp := wantTime(t, claim, "capability_token_expires_at")
		if want := before.Add(auth.TokenTTL(600 * time.Second)); tokenExp.Before(want.Add(-2*time.Second)) || tokenExp.After(want.Add(time.Minute)) {
			t.Errorf("capability_token_expires_at %v, want about %v (timeout + 5 min)", tokenExp, want)
		}
		c, err := w.tokens.Verify(ctx, claim["capability_token"].(string))
		if err != nil || c.TaskID != id || c.Attempt != 1 || c.LeaseToken != stored.LeaseToken || c.JobID != jobID || c.Tenant != "acme" {
			t.Fatalf("capability token: %v %+v", err, c)
		}
		task, _ := claim["task"].(map[string]any)
		wantKeys(t, "task", task, "task_id", "attempt", "task_key", "job", "operator", "config", "inputs", "dependency_outputs", "queue", "timeout_seconds")
		if !sameJSON(task, `{"task_id":"`+id+`","attempt":1,"task_key":"block_follower",
			"job":{"job_id":"`+jobID+`","dag_name":"monad","name":"block_follower"},"operator":"block_follower",
			"config":{"chain":"monad","from":1},"inputs":[],"dependency_outputs":{},"queue":"block_follower","timeout_seconds":600}`) {
			t.Errorf("task payload %v", task)
		}
		lease := stored.LeaseToken
		pairs := attemptPairs(id, 1, lease, datasets)

		// Fetch while running: read-only, no lease token.
		fetched := wantOK(t, fetchInternal(w, id))
		if fetched["status"] != "Running" || fetched["cancel_requested"] != false || fetched["lease_expires_at"] == nil || fetched["lease_token"] != nil {
			t.Errorf("fetch while running: %v", fetched)
		}
		wantKeys(t, "fetch", fetched, "status", "task_id", "attempt", "task_key", "job", "operator", "config", "inputs",
			"dependency_outputs", "queue", "timeout_seconds", "lease_expires_at", "cancel_requested")

		// Heartbeat.
		hb := wantOK(t, w.post(w.internal.URL, "/internal/heartbeat", fillExample(exampleHeartbeat, pairs...)))
		wantKeys(t, "heartbeat", hb, "ok", "lease_expires_at", "should_cancel", "cancel_reason")
		if hb["ok"] != true || hb["should_cancel"] != false || hb["cancel_reason"] != nil {
			t.Errorf("heartbeat: %v", hb)
		}
		wantTime(t, hb, "lease_expires_at")

		// Upstream events in their three shapes; the batch repeats the single event.
		for _, c := range []struct {
			name, body       string
			received, stored float64
		}{{"single", exampleEventsSingle, 1, 1}, {"partitioned", exampleEventsPartitioned, 1, 1}, {"batch", exampleEventsBatch, 2, 1}} {
			ev := wantOK(t, w.post(w.internal.URL, "/internal/events", fillExample(c.body, pairs...)))
			wantKeys(t, c.name, ev, "ok", "received", "stored")
			if ev["ok"] != true || ev["received"] != c.received || ev["stored"] != c.stored {
				t.Errorf("%s events: %v", c.name, ev)
			}
		}
		events, err := w.st.DatasetEventListByTask(ctx, id)
		if err != nil || len(events) != 3 {
			t.Fatalf("stored events: %v %d", err, len(events))
		}
		if p := events[1]; p.PartitionKey != "1000000-1010000" || *p.Start != 1000000 || *p.End != 1010000 || p.DatasetUUID != ds["$DS_A"] || p.Attempt != 1 {
			t.Errorf("partitioned event stored as %+v", p)
		}

		// Buffered publish, then its idempotent repeat, by a task of the job that writes the
		// buffered dataset.
		_, writers := w.submitWriters(lifecycle.TaskSpec{Key: "writer", Name: "op"})
		wid := writers["writer"]
		wpairs := attemptPairs(wid, 1, claimInternal(t, w, wid)["lease_token"].(string), datasets)
		for i, dup := range []bool{false, true} {
			bp := wantOK(t, w.post(w.internal.URL, "/internal/buffer-publish", fillExample(exampleBufferPublish, wpairs...)))
			wantKeys(t, "buffer-publish", bp, "ok", "duplicate")
			if bp["ok"] != true || bp["duplicate"] != dup {
				t.Errorf("buffer-publish #%d: %v", i+1, bp)
			}
		}
		pubs, err := w.st.BufferPublishListByTask(ctx, wid)
		if err != nil || len(pubs) != 1 {
			t.Fatalf("publishes: %v %d", err, len(pubs))
		}
		if p := pubs[0]; p.DatasetUUID != ds["$DS_A"] || p.DatasetVersion != ds["$VER_BUF"] || *p.RecordCount != 1000 || p.Tenant != "acme" ||
			p.BatchURI != "s3://trace-scratch/buffers/"+ds["$DS_A"]+"/"+wid+"/1/batch.jsonl" {
			t.Errorf("publish stored as %+v", p)
		}
		if n := outboxTopic(t, w, store.TopicBufferBatch); n != 1 {
			t.Errorf("%d buffer.batch outbox messages, want 1", n)
		}

		// Completion with final events and outputs; then its idempotent repeat.
		for i, dup := range []bool{false, true} {
			done := wantOK(t, w.post(w.internal.URL, "/internal/task-complete", fillExample(exampleComplete, pairs...)))
			wantKeys(t, "complete", done, "ok", "ack", "status", "requeued", "dead_lettered", "duplicate")
			if done["ok"] != true || done["ack"] != true || done["status"] != "Completed" || done["requeued"] != false ||
				done["dead_lettered"] != false || done["duplicate"] != dup {
				t.Errorf("complete #%d: %v", i+1, done)
			}
		}
		final := w.task(id)
		wantOutput := fillExample(`{"outputs":[{"output_index":0,"dataset_uuid":"$DS_A","dataset_version":"$VER_A","location":"postgres_table:dataset_$DS_A","cursor":12345,"row_count":1000},{"output_index":1,"dataset_uuid":"$DS_B","dataset_version":"$VER_B","location":"postgres_table:dataset_$DS_B","cursor":12345,"row_count":20000}]}`, datasets...)
		if final.Status != lifecycle.Completed || !jsonBytesEqual(final.Output, wantOutput) {
			t.Errorf("completed task: %s %s", final.Status, final.Output)
		}
		if events, _ := w.st.DatasetEventListByTask(ctx, id); len(events) != 4 || events[3].DatasetUUID != ds["$DS_C"] {
			t.Errorf("final events not stored once: %d", len(events))
		}

		// Fetch after completion, and the child's claim carries the parent's output.
		fetched = wantOK(t, fetchInternal(w, id))
		if fetched["status"] != "Completed" || fetched["lease_expires_at"] != nil {
			t.Errorf("fetch after completion: %v", fetched)
		}
		child := claimInternal(t, w, ids["enrich"])["task"].(map[string]any)
		if !sameJSON(child["inputs"], `[{"task_id":"block_follower","output":`+wantOutput+`}]`) ||
			!sameJSON(child["dependency_outputs"], `{"block_follower":`+wantOutput+`}`) ||
			child["timeout_seconds"] != nil || !sameJSON(child["config"], `{"mode":"full"}`) {
			t.Errorf("child payload: %v", child)
		}
	})
}

func refOf[T any](v T) *T { return &v }

// sameJSON compares a decoded JSON value with a JSON text by value.
func sameJSON(got any, want string) bool {
	b, err := json.Marshal(got)
	return err == nil && jsonBytesEqual(b, want)
}

// jsonBytesEqual compares two JSON texts by value.
func jsonBytesEqual(got []byte, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// outboxTopic counts outbox messages of a topic.
func outboxTopic(t *testing.T, w *workerAPI, topic string) int {
	t.Helper()
	msgs, err := w.st.OutboxListAfter(context.Background(), 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		if m.Topic == topic {
			n++
		}
	}
	return n
}

func TestInternalFetchStatuses(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		_, ids := w.submit(
			lifecycle.TaskSpec{Key: "run", Name: "op"},
			lifecycle.TaskSpec{Key: "child", Name: "op", DependsOn: []string{"run"}},
			lifecycle.TaskSpec{Key: "idle", Name: "op"})
		status := func(id string) (string, any) {
			t.Helper()
			b := wantOK(t, fetchInternal(w, id))
			return b["status"].(string), b["cancel_requested"]
		}
		if s, _ := status(ids["child"]); s != "Waiting" {
			t.Errorf("child: %s", s)
		}
		if s, _ := status(ids["run"]); s != "Pending" {
			t.Errorf("run before claim: %s", s)
		}
		claim := claimInternal(t, w, ids["run"])
		if s, _ := status(ids["run"]); s != "Running" {
			t.Errorf("run: %s", s)
		}

		// A running task whose cancellation was requested reads as Canceled; the wrapper
		// reports Canceled.
		if _, err := w.d.CancelTask(ctx, ids["run"], ""); err != nil {
			t.Fatal(err)
		}
		if s, cr := status(ids["run"]); s != "Canceled" || cr != true {
			t.Errorf("cancel-requested running task: %s %v", s, cr)
		}
		lease := claim["lease_token"].(string)
		hb := wantOK(t, w.post(w.internal.URL, "/internal/heartbeat", map[string]any{"task_id": ids["run"], "attempt": 1, "lease_token": lease}))
		if hb["should_cancel"] != true || hb["cancel_reason"] != "user_requested" {
			t.Errorf("heartbeat after cancel: %v", hb)
		}
		done := wantOK(t, w.post(w.internal.URL, "/internal/task-complete", map[string]any{"task_id": ids["run"], "attempt": 1, "lease_token": lease, "status": "Canceled"}))
		if done["status"] != "Canceled" || done["dead_lettered"] != false {
			t.Errorf("canceled completion: %v", done)
		}
		if s, _ := status(ids["run"]); s != "Canceled" {
			t.Errorf("run after its cancellation: %s", s)
		}
		if s, _ := status(ids["child"]); s != "Skipped" {
			t.Errorf("child of a canceled task: %s", s)
		}
		if _, err := w.d.CancelTask(ctx, ids["idle"], ""); err != nil {
			t.Fatal(err)
		}
		if s, _ := status(ids["idle"]); s != "Canceled" {
			t.Errorf("canceled pending task: %s", s)
		}

		// Unknown and malformed ids.
		wantFencedError(t, fetchInternal(w, uuid.NewString()), http.StatusNotFound, "task_not_found", "")
		wantFencedError(t, w.request("GET", w.internal.URL+"/internal/task-fetch", nil), http.StatusBadRequest, "invalid_request", "task_id")
		wantFencedError(t, fetchInternal(w, "not-a-uuid"), http.StatusBadRequest, "invalid_request", "task_id")
		wantFencedError(t, fetchInternal(w, ids["run"]+"&task_id="+ids["idle"]), http.StatusBadRequest, "invalid_request", "task_id")
	})
}

func TestInternalNotClaimedReasons(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		w.buffered() // the dataset of the buffer-publish calls
		ctx := context.Background()
		jobID, ids := w.submit(
			lifecycle.TaskSpec{Key: "done", Name: "op"},
			lifecycle.TaskSpec{Key: "bad", Name: "op"},
			lifecycle.TaskSpec{Key: "after-bad", Name: "op", DependsOn: []string{"bad"}},
			lifecycle.TaskSpec{Key: "running", Name: "op"},
			lifecycle.TaskSpec{Key: "after-running", Name: "op", DependsOn: []string{"running"}},
			lifecycle.TaskSpec{Key: "backing-off", Name: "op"},
			lifecycle.TaskSpec{Key: "canceled", Name: "op"})
		complete := func(key string, p dispatch.CompleteParams) {
			t.Helper()
			c, _ := w.claim(ids[key])
			p.TaskID, p.Attempt, p.LeaseToken = c.Task.ID, c.Task.Attempt, c.Task.LeaseToken
			if _, err := w.d.Complete(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		complete("done", dispatch.CompleteParams{Outcome: store.OutcomeSucceeded})
		complete("bad", dispatch.CompleteParams{Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: lifecycle.DataQuality}})
		complete("backing-off", dispatch.CompleteParams{Outcome: store.OutcomeFailed}) // USER_CODE: retried after 10 s or so
		w.claim(ids["running"])
		if _, err := w.d.CancelTask(ctx, ids["canceled"], ""); err != nil {
			t.Fatal(err)
		}
		ids["unknown"] = uuid.NewString()
		for _, c := range []struct{ key, reason, detail string }{
			{"unknown", "NotFound", "NotFound"},
			{"running", "AlreadyRunning", "AlreadyRunning"},
			{"done", "Completed", "Completed"},
			{"canceled", "Canceled", "Canceled"},
			{"bad", "Completed", "Failed"},
			{"after-bad", "Canceled", "Skipped"},
			{"after-running", "AlreadyRunning", "NotReady"},
			{"backing-off", "AlreadyRunning", "NotReady"},
		} {
			var keys []string
			if c.key != "unknown" {
				keys = []string{ids[c.key]}
			}
			before := fencedState(t, w, jobID, keys...)
			res := w.post(w.internal.URL, "/internal/task-claim", map[string]any{"task_id": ids[c.key], "worker_id": "w-2"})
			body := wantOK(t, res)
			wantKeys(t, c.key, body, "status", "reason", "detail")
			if body["status"] != "NotClaimed" || body["reason"] != c.reason || body["detail"] != c.detail {
				t.Errorf("%s: %s, want reason %s detail %s", c.key, res.Raw, c.reason, c.detail)
			}
			if after := fencedState(t, w, jobID, keys...); after != before {
				t.Errorf("%s: a refused claim changed state", c.key)
			}
		}
	})
}

// The four fenced calls of an attempt, with the bodies a worker of that attempt would send, in an
// order it could send them (complete last). Their events name, and their batches are of, w's
// buffered dataset alert_events (w.buffered); only a task of a job that writes it
// (w.submitWriters) may publish a batch.
type fencedCall struct {
	name, internalPath, scopedPath string
	body                           func(w *workerAPI, taskID string, attempt int, lease string) map[string]any
}

var fencedCalls = []fencedCall{
	{"heartbeat", "/internal/heartbeat", "/v1/task/heartbeat", func(w *workerAPI, id string, a int, l string) map[string]any {
		return map[string]any{"task_id": id, "attempt": a, "lease_token": l}
	}},
	{"events", "/internal/events", "/v1/task/events", func(w *workerAPI, id string, a int, l string) map[string]any {
		return map[string]any{"task_id": id, "attempt": a, "lease_token": l,
			"events": []any{map[string]any{"dataset_uuid": w.bufferedUUID(), "dataset_version": "v1", "cursor": 3}}}
	}},
	{"buffer-publish", "/internal/buffer-publish", "/v1/task/buffer-publish", func(w *workerAPI, id string, a int, l string) map[string]any {
		return map[string]any{"task_id": id, "attempt": a, "lease_token": l, "dataset_version": w.bufferedVersion(),
			"batch_uri": "s3://trace-scratch/buffers/alert_events/" + id + "/" + strconv.Itoa(a) + "/batch.jsonl", "record_count": 10}
	}},
	{"complete", "/internal/task-complete", "/v1/task/complete", func(w *workerAPI, id string, a int, l string) map[string]any {
		return map[string]any{"task_id": id, "attempt": a, "lease_token": l, "status": "Completed",
			"events":  []any{map[string]any{"dataset_uuid": w.bufferedUUID(), "dataset_version": "v1", "cursor": 7}},
			"outputs": []any{map[string]any{"output_index": 0, "dataset_uuid": w.bufferedUUID(), "row_count": 1}}}
	}},
}

// staleSetup is a task whose attempt 1 timed out (reaped after time moved past its lease) and
// whose attempt 2 now runs.
type staleSetup struct {
	jobID, id      string
	lease1, lease2 string
	claim1, claim2 map[string]any
}

func newStaleSetup(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) staleSetup {
	t.Helper()
	ctx := context.Background()
	// A task that may make every fenced call, its buffer-publish included.
	jobIDs, ids := w.submitWriters(lifecycle.TaskSpec{Key: "flaky", Name: "op", HeartbeatTimeoutSeconds: refOf(10)})
	jobID := jobIDs["flaky"]
	s := staleSetup{jobID: jobID, id: ids["flaky"]}
	s.claim1 = claimInternal(t, w, s.id)
	s.lease1 = s.claim1["lease_token"].(string)

	clock.Advance(11 * time.Second)
	if n, err := w.d.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	if tk := w.task(s.id); tk.Status != lifecycle.Pending || tk.Attempt != 1 {
		t.Fatalf("after the reap: %s attempt %d", tk.Status, tk.Attempt)
	}
	// docs/lifecycle.md#heartbeats-and-expiry: the timed-out attempt's heartbeat answers 410, and
	// changes nothing.
	before := fencedState(t, w, jobID, s.id)
	wantFencedError(t, w.post(w.internal.URL, "/internal/heartbeat", fencedCalls[0].body(w, s.id, 1, s.lease1)), http.StatusGone, "task_expired", "")
	if fencedState(t, w, jobID, s.id) != before {
		t.Fatal("a heartbeat of a timed-out attempt changed state")
	}

	clock.Advance(16 * time.Second) // past the retry's backoff: the server's base of 10 s, with its jitter at most 15 s
	s.claim2 = claimInternal(t, w, s.id)
	s.lease2 = s.claim2["lease_token"].(string)
	if s.claim2["attempt"] != 2.0 {
		t.Fatalf("second claim: %v", s.claim2)
	}
	return s
}

func TestInternalStaleWorkerIsFenced(t *testing.T) {
	forEachClockedWorkerDriver(t, time.Now(), func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		w.buffered() // the dataset of the buffer-publish calls
		s := newStaleSetup(t, w, clock)
		before := fencedState(t, w, s.jobID, s.id)
		for _, c := range fencedCalls {
			// The stale worker of attempt 1 ...
			res := w.post(w.internal.URL, c.internalPath, c.body(w, s.id, 1, s.lease1))
			wantFencedError(t, res, http.StatusConflict, "attempt_mismatch", "attempt")
			if res.Body["expected_attempt"] != 2.0 || res.Body["received_attempt"] != 1.0 {
				t.Errorf("%s: %s", c.name, res.Raw)
			}
			// ... and its lease token under the new attempt's number.
			wantFencedError(t, w.post(w.internal.URL, c.internalPath, c.body(w, s.id, 2, s.lease1)), http.StatusConflict, "lease_mismatch", "lease")
			if after := fencedState(t, w, s.jobID, s.id); after != before {
				t.Fatalf("%s: a stale call changed state", c.name)
			}
		}
		// The stale failure report is refused as well.
		res := w.post(w.internal.URL, "/internal/task-complete", map[string]any{"task_id": s.id, "attempt": 1, "lease_token": s.lease1,
			"status": "Failed", "error_message": "boom"})
		wantFencedError(t, res, http.StatusConflict, "attempt_mismatch", "attempt")
		if fencedState(t, w, s.jobID, s.id) != before {
			t.Fatal("a stale failure changed state")
		}
		// The current attempt is unaffected.
		for _, c := range fencedCalls {
			if res := w.post(w.internal.URL, c.internalPath, c.body(w, s.id, 2, s.lease2)); res.Status != http.StatusOK {
				t.Errorf("%s of the current attempt: %d %s", c.name, res.Status, res.Raw)
			}
		}
		if tk := w.task(s.id); tk.Status != lifecycle.Completed || tk.Attempt != 2 {
			t.Errorf("task: %s attempt %d", tk.Status, tk.Attempt)
		}
	})
}

// Late replies (docs/lifecycle.md#late-replies) through the dialect: attempt 1's late report is
// accepted while no newer attempt runs.
func TestInternalLateReplyIsAccepted(t *testing.T) {
	forEachClockedWorkerDriver(t, time.Now(), func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		_, ids := w.submitWriters(lifecycle.TaskSpec{Key: "slow", Name: "op", HeartbeatTimeoutSeconds: refOf(10)})
		id := ids["slow"]
		lease := claimInternal(t, w, id)["lease_token"].(string)
		clock.Advance(11 * time.Second)
		// No reaper ran: the heartbeat itself applies the timeout (410), and the task awaits its
		// retry.
		wantFencedError(t, w.post(w.internal.URL, "/internal/heartbeat", fencedCalls[0].body(w, id, 1, lease)), http.StatusGone, "task_expired", "")
		if tk := w.task(id); tk.Status != lifecycle.Pending {
			t.Fatalf("after an expired heartbeat: %s", tk.Status)
		}
		for _, c := range fencedCalls[1:] {
			if c.name == "complete" {
				continue
			}
			wantOK(t, w.post(w.internal.URL, c.internalPath, c.body(w, id, 1, lease)))
		}
		done := wantOK(t, w.post(w.internal.URL, "/internal/task-complete", fencedCalls[3].body(w, id, 1, lease)))
		if done["status"] != "Completed" || done["duplicate"] != false {
			t.Errorf("late completion: %v", done)
		}
		if tk := w.task(id); tk.Status != lifecycle.Completed || tk.Attempt != 1 {
			t.Errorf("task after the late completion: %s attempt %d", tk.Status, tk.Attempt)
		}
	})
}

func TestInternalRepeatsAreIdempotent(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		w.buffered() // the dataset of the buffer-publish calls
		jobID, ids := w.submit(
			lifecycle.TaskSpec{Key: "ok", Name: "op"},
			lifecycle.TaskSpec{Key: "retry", Name: "op"},
			lifecycle.TaskSpec{Key: "fatal", Name: "op"})
		lease := map[string]string{}
		for k, id := range ids {
			lease[k] = claimInternal(t, w, id)["lease_token"].(string)
		}
		post := func(path string, body map[string]any) response { return w.post(w.internal.URL, path, body) }
		complete := fencedCalls[3].body(w, ids["ok"], 1, lease["ok"])

		first := wantOK(t, post("/internal/task-complete", complete))
		state := fencedState(t, w, jobID, ids["ok"])
		second := wantOK(t, post("/internal/task-complete", complete))
		if first["duplicate"] != false || second["duplicate"] != true || second["status"] != "Completed" || second["ack"] != true {
			t.Errorf("repeat: %v then %v", first, second)
		}
		if fencedState(t, w, jobID, ids["ok"]) != state {
			t.Error("a repeated completion changed state")
		}
		wantFencedError(t, post("/internal/task-complete", map[string]any{"task_id": ids["ok"], "attempt": 1, "lease_token": lease["ok"], "status": "Failed"}),
			http.StatusConflict, "outcome_conflict", "outcome")
		res := post("/internal/heartbeat", fencedCalls[0].body(w, ids["ok"], 1, lease["ok"]))
		wantFencedError(t, res, http.StatusConflict, "task_already_terminal", "completed")
		if res.Body["state"] != "Completed" {
			t.Errorf("terminal state: %s", res.Raw)
		}
		for _, c := range fencedCalls[1:3] {
			wantFencedError(t, post(c.internalPath, c.body(w, ids["ok"], 1, lease["ok"])), http.StatusConflict, "task_already_terminal", "completed")
		}
		if fencedState(t, w, jobID, ids["ok"]) != state {
			t.Error("calls after the completion changed state")
		}

		// A retryable failure (only error_message: USER_CODE) schedules a retry; its repeat says so
		// again.
		failed := map[string]any{"task_id": ids["retry"], "attempt": 1, "lease_token": lease["retry"], "status": "Failed", "error_message": "flaky upstream"}
		for i, dup := range []bool{false, true} {
			r := wantOK(t, post("/internal/task-complete", failed))
			if r["status"] != "RetryScheduled" || r["requeued"] != true || r["dead_lettered"] != false || r["duplicate"] != dup {
				t.Errorf("retryable failure #%d: %v", i+1, r)
			}
		}
		if tk := w.task(ids["retry"]); tk.Error == nil || tk.Error.Category != lifecycle.UserCode || tk.Error.Message != "flaky upstream" {
			t.Errorf("retry error: %+v", tk.Error)
		}

		// The error object wins over error_message, and retryable:false dead-letters.
		fatal := map[string]any{"task_id": ids["fatal"], "attempt": 1, "lease_token": lease["fatal"], "status": "Failed", "error_message": "ignored",
			"error": map[string]any{"category": "INFRASTRUCTURE", "message": "disk full", "stack_trace": "at main()", "retryable": false}}
		for i, dup := range []bool{false, true} {
			r := wantOK(t, post("/internal/task-complete", fatal))
			if r["status"] != "Failed" || r["requeued"] != false || r["dead_lettered"] != true || r["duplicate"] != dup {
				t.Errorf("fatal failure #%d: %v", i+1, r)
			}
		}
		if e := w.task(ids["fatal"]).Error; e == nil || e.Category != lifecycle.Infrastructure || e.Message != "disk full" || e.StackTrace != "at main()" {
			t.Errorf("fatal error: %+v", e)
		}
	})
}

func TestInternalBufferPublishRepeatIsIdempotent(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submitWriters(lifecycle.TaskSpec{Key: "sink", Name: "op"})
		id := ids["sink"]
		lease := claimInternal(t, w, id)["lease_token"].(string)
		body := fencedCalls[2].body(w, id, 1, lease)
		for i, dup := range []bool{false, true, true} {
			if r := wantOK(t, w.post(w.internal.URL, "/internal/buffer-publish", body)); r["duplicate"] != dup {
				t.Errorf("publish #%d: %v", i+1, r)
			}
		}
		body["batch_uri"] = "s3://trace-scratch/buffers/alert_events/" + id + "/1/batch-2.jsonl"
		if r := wantOK(t, w.post(w.internal.URL, "/internal/buffer-publish", body)); r["duplicate"] != false {
			t.Errorf("another batch: %v", r)
		}
		if pubs, _ := w.st.BufferPublishListByTask(context.Background(), id); len(pubs) != 2 {
			t.Errorf("%d publish records, want 2", len(pubs))
		}
		msgs, err := w.st.OutboxListAfter(context.Background(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range msgs {
			if m.Topic != store.TopicBufferBatch {
				continue
			}
			n++
			var msg map[string]any
			if json.Unmarshal(m.Payload, &msg) != nil || msg["kind"] != "buffer_batch" || msg["org_id"] != "acme" || msg["record_count"] != 10.0 ||
				!sameJSON(msg["producer"], `{"task_id":"`+id+`","attempt":1}`) {
				t.Errorf("sink message: %s", m.Payload)
			}
		}
		if n != 2 {
			t.Errorf("%d sink messages, want 2", n)
		}
	})
}

func TestInternalBadBodiesAreRejected(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		jobID, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"}, lifecycle.TaskSpec{Key: "idle", Name: "op"})
		id := ids["t"]
		lease := claimInternal(t, w, id)["lease_token"].(string)
		fence := `"task_id":"` + id + `","attempt":1,"lease_token":"` + lease + `"`
		cases := []struct{ path, body, field string }{
			{"/internal/task-claim", ``, "empty"},
			{"/internal/task-claim", `{"task_id":`, "JSON"},
			{"/internal/task-claim", `[]`, "object"},
			{"/internal/task-claim", `{}`, "task_id"},
			{"/internal/task-claim", `{"task_id":1,"worker_id":"w"}`, "task_id"},
			{"/internal/task-claim", `{"task_id":"` + ids["idle"] + `","worker_id":5}`, "worker_id"},
			{"/internal/task-claim", `{"task_id":"abc","worker_id":"w"}`, "task_id"},
			{"/internal/task-claim", `{"task_id":"` + ids["idle"] + `","worker_id":"` + strings.Repeat("w", 300) + `"}`, "worker_id"},
			{"/internal/heartbeat", `{"task_id":"` + id + `","lease_token":"` + lease + `"}`, "attempt"},
			{"/internal/heartbeat", `{"task_id":"` + id + `","attempt":"1","lease_token":"` + lease + `"}`, "attempt"},
			{"/internal/heartbeat", `{"task_id":"` + id + `","attempt":1.5,"lease_token":"` + lease + `"}`, "attempt"},
			{"/internal/heartbeat", `{"task_id":"` + id + `","attempt":0,"lease_token":"` + lease + `"}`, "attempt"},
			{"/internal/heartbeat", `{"task_id":"` + id + `","attempt":1}`, "lease_token"},
			{"/internal/heartbeat", `{"attempt":1,"lease_token":"` + lease + `"}`, "task_id"},
			{"/internal/heartbeat", `{` + fence + `} {}`, "after"},
			{"/internal/task-complete", `{` + fence + `}`, "status"},
			{"/internal/task-complete", `{` + fence + `,"status":"Succeeded"}`, "status"},
			{"/internal/task-complete", `{` + fence + `,"status":"Completed","outputs":{}}`, "outputs"},
			{"/internal/task-complete", `{` + fence + `,"status":"Completed","outputs":[1]}`, "outputs[0]"},
			{"/internal/task-complete", `{` + fence + `,"status":"Completed","datasets_published":"x"}`, "datasets_published"},
			{"/internal/task-complete", `{` + fence + `,"status":"Completed","events":{}}`, "events"},
			{"/internal/task-complete", `{` + fence + `,"status":"Completed","events":[{"dataset_uuid":"d","dataset_version":"v","partition_key":"5-1"}]}`, "events[0]"},
			{"/internal/task-complete", `{` + fence + `,"status":"Failed","error":"boom"}`, "error"},
			{"/internal/task-complete", `{` + fence + `,"status":"Failed","error":{"category":"NOPE"}}`, "NOPE"},
			{"/internal/task-complete", `{` + fence + `,"status":"Failed","error":{"retryable":"yes"}}`, "retryable"},
			{"/internal/task-complete", `{` + fence + `,"status":"Failed","error_message":42}`, "error_message"},
			{"/internal/events", `{` + fence + `}`, "events"},
			{"/internal/events", `{` + fence + `,"events":[]}`, "events"},
			{"/internal/events", `{` + fence + `,"events":[{"dataset_uuid":"d","dataset_version":"v"}]}`, "cursor"},
			{"/internal/events", `{` + fence + `,"events":[{"dataset_uuid":"d","dataset_version":"v","cursor":"12"}]}`, "cursor"},
			{"/internal/events", `{` + fence + `,"events":[{"dataset_uuid":"d","dataset_version":"v","cursor":1,"start":1}]}`, "start"},
			{"/internal/events", `{` + fence + `,"events":[{"dataset_version":"v","cursor":1}]}`, "dataset_uuid"},
			{"/internal/buffer-publish", `{` + fence + `,"dataset_uuid":"d"}`, "batch_uri"},
			{"/internal/buffer-publish", `{` + fence + `,"batch_uri":"s3://b/x","record_count":-1}`, "record_count"},
			{"/internal/buffer-publish", `{` + fence + `,"batch_uri":"s3://b/x","record_count":"10"}`, "record_count"},
		}
		before := fencedState(t, w, jobID, id, ids["idle"])
		for _, c := range cases {
			res := w.post(w.internal.URL, c.path, c.body)
			if res.Status != http.StatusBadRequest || res.Body["error"] != "invalid_request" {
				t.Errorf("%s %s: %d %s, want 400 invalid_request", c.path, c.body, res.Status, res.Raw)
				continue
			}
			if msg, _ := res.Body["message"].(string); !strings.Contains(msg, c.field) {
				t.Errorf("%s %s: message %q does not name %q", c.path, c.body, msg, c.field)
			}
		}
		if fencedState(t, w, jobID, id, ids["idle"]) != before {
			t.Error("a rejected body changed state")
		}
		// An unknown task is a 404 for the fenced calls.
		res := w.post(w.internal.URL, "/internal/heartbeat", fencedCalls[0].body(w, uuid.NewString(), 1, lease))
		wantFencedError(t, res, http.StatusNotFound, "task_not_found", "")
	})
}

// The internal dialect has no token to present, so a heartbeat is judged by the token its claim
// handed out: past half of its life the answer carries a fresh one.
func TestInternalHeartbeatRefreshesTheClaimToken(t *testing.T) {
	for _, c := range []struct {
		name    string
		started time.Duration // how long ago the attempt started
		fresh   bool
	}{{"young", 0, false}, {"past half-life", 40 * time.Minute, true}} {
		t.Run(c.name, func(t *testing.T) {
			forEachClockedWorkerDriver(t, time.Now().Add(-c.started), func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
				_, ids := w.submit(lifecycle.TaskSpec{Key: "long", Name: "op"})
				id := ids["long"]
				lease := claimInternal(t, w, id)["lease_token"].(string)
				hb := wantOK(t, w.post(w.internal.URL, "/internal/heartbeat", fencedCalls[0].body(w, id, 1, lease)))
				tok, ok := hb["capability_token"].(string)
				if ok != c.fresh {
					t.Fatalf("heartbeat answer %v; want a fresh token: %v", hb, c.fresh)
				}
				if !c.fresh {
					return
				}
				wantTime(t, hb, "capability_token_expires_at")
				claims, err := w.tokens.Verify(context.Background(), tok)
				if err != nil || claims.TaskID != id || claims.Attempt != 1 || claims.LeaseToken != lease {
					t.Fatalf("fresh token: %v %+v", err, claims)
				}
			})
		})
	}
}
