package api_test

// Fuzz targets, one per wire dialect, each sending fuzzed requests through the real handler of its
// listener (fuzz_harness_test.go). The property is the same for all: the handler does not panic,
// answers in bounded time, never answers a 5xx, and every answer from 400 on is a JSON object
// with an "error". Run one with, e.g.:
//
//	go test -run '^$' -fuzz '^FuzzProducerAPI$' -fuzztime 60s ./internal/api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// routeOf is the index of the route with method and path, for the seed corpus.
func routeOf(tb testing.TB, routes []fuzzRoute, method, path string) uint8 {
	for i, rt := range routes {
		if rt.method == method && rt.path == path {
			return uint8(i)
		}
	}
	tb.Fatalf("no route %s %s", method, path)
	return 0
}

func mustMarshal(tb testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// withDefaults is the fuzzed headers followed by the defaults they do not set themselves.
func withDefaults(fuzzed [][2]string, defaults ...string) [][2]string {
	out := fuzzed
	for i := 0; i+1 < len(defaults); i += 2 {
		set := false
		for _, kv := range fuzzed {
			set = set || strings.EqualFold(kv[0], defaults[i])
		}
		if !set {
			out = append(out, [2]string{defaults[i], defaults[i+1]})
		}
	}
	return out
}

// producerRoutes are the public listener's producer, pipeline and dataset routes, plus the
// health checks, a CORS preflight, a method no route serves and any path. Committed corpus
// entries name a route by its index in its list: add routes at the end of a list.
var producerRoutes = []fuzzRoute{
	{"POST", "/jobs", nil},
	{"GET", "/jobs", nil},
	{"GET", "/jobs/{jobId}", []string{"$JOB"}},
	{"POST", "/jobs/{jobId}/tasks", []string{"$JOB"}},
	{"GET", "/jobs/{jobId}/tasks/{taskId}", []string{"$JOB", "run"}},
	{"POST", "/jobs/{jobId}/cancel", []string{"$JOB"}},
	{"POST", "/jobs/{jobId}/resume", []string{"$DONE"}},
	{"GET", "/jobs/{jobId}/events", []string{"$JOB"}},
	{"GET", "/jobs/{jobId}/tasks/{taskId}/events", []string{"$JOB", "run"}},
	{"POST", "/pipelines", nil},
	{"GET", "/pipelines", nil},
	{"GET", "/pipelines/{name}", []string{"blocks_demo"}},
	{"GET", "/pipelines/{name}/versions", []string{"blocks_demo"}},
	{"GET", "/pipelines/{name}/versions/{version}", []string{"blocks_demo", "$VERSION"}},
	{"POST", "/pipelines/{name}/rollback", []string{"blocks_demo"}},
	{"POST", "/pipelines/{name}/versions/{version}/activate", []string{"blocks_demo", "$VERSION"}},
	{"DELETE", "/pipelines/{name}/versions/{version}", []string{"blocks_demo", "$VERSION"}},
	{"POST", "/pipelines/{name}/jobs/{job}/run", []string{"hooks", "backfill"}},
	{"POST", "/webhooks/{path...}", []string{"github/push"}},
	{"GET", "/datasets", nil},
	{"GET", "/datasets/{name}", []string{"alert_events"}},
	{"POST", "/datasets/{name}/current", []string{"blocks"}},
	{"GET", "/datasets/{name}/rows", []string{"alert_events"}},
	{"GET", "/datasets/{name}/dead-letters", []string{"alert_events"}},
	{"POST", "/datasets/{name}/dead-letters/{id}/retry", []string{"alert_events", "1"}},
	{"GET", "/healthz", nil},
	{"GET", "/readyz", nil},
	{"GET", "/openapi.json", nil},
	{"OPTIONS", "/jobs", nil},
	{"DELETE", "/jobs/{jobId}", []string{"$JOB"}},
	{"POST", "/{path...}", []string{"no/such/endpoint"}},
	{"GET", "/docs/api", nil},
	{"GET", "/docs/api/redoc.standalone.js", nil},
	{"POST", "/v1/query", nil},
	{"GET", "/v1/query/audit", nil},
	{"POST", "/v1/udf/bundles", nil},
	{"GET", "/v1/udf/bundles", nil},
	{"GET", "/v1/udf/bundles/{bundle_id}", []string{"bndl_0000"}},
	{"POST", "/v1/udf/bundles/{bundle_id}/finalize", []string{"bndl_0000"}},
	{"POST", "/v1/udf/bundles/{bundle_id}/disable", []string{"bndl_0000"}},
}

// fuzzCronPipeline is a pipeline of cron sources, in the three spellings of a schedule.
const fuzzCronPipeline = `
name: nightly
defaults: {max_attempts: 2, priority: high, max_queue_age: 10m, backpressure_mode: pause}
jobs:
  - {name: weekdays, activation: source, runtime: lambda, operator: tick, outputs: 1, source: {kind: cron, schedule: "cron(0 12 ? * MON-FRI 2025/2)"}}
  - {name: hourly, activation: source, runtime: lambda, operator: tick, outputs: 0, source: {kind: cron, schedule: "rate(1 hour)"}}
  - {name: nightly, activation: source, runtime: lambda, operator: tick, outputs: 0, source: {kind: cron, schedule: "30 2 * * 1-5"}}
  - {name: r, activation: reactive, runtime: lambda, operator: op, outputs: 0, inputs: [{from: {job: weekdays, output: 0}}]}
`

// FuzzProducerAPI sends fuzzed producer requests with tenant acme's API key: the route, its path
// parameters ("/"-separated, placeholders allowed), the query string, extra header lines
// ("Name: value", which override the API key and Content-Type) and the body.
func FuzzProducerAPI(f *testing.F) {
	h := newFuzzHarness(f)
	add := func(method, path, params, query, header string, body []byte) {
		f.Add(routeOf(f, producerRoutes, method, path), params, query, header, body)
	}
	for _, b := range exampleBodies(f) {
		add("POST", "/jobs", "", "", "Idempotency-Key: example-1", b)
	}
	add("POST", "/jobs", "", "", "", []byte(exampleJob))
	add("POST", "/jobs", "", "", "", []byte(`{"name":"nightly","tasks":[{"taskId":"a","name":"x","queue":"jobs:stream:high","priority":5,"runtime":"pull","maxAttempts":2,"backoffBaseMs":0,"backoffMaxMs":10,"timeoutSeconds":60,"heartbeatTimeoutSeconds":10,"cancelGraceSeconds":5}]}`))
	add("POST", "/jobs", "", "", "", []byte(`{"tasks":[{"taskId":"a","name":"x","dependsOn":["b"]},{"taskId":"b","name":"x","dependsOn":["a"]}]}`))
	add("POST", "/jobs", "", "", "", []byte(`{"tasks":[{"taskId":"a","name":"x","depends_on":[]}]}`))
	add("POST", "/jobs/{jobId}/tasks", "", "", "", []byte(`{"tasks":[{"taskId":"late","name":"fuzz","dependsOn":["run","child"],"input":{"k":[1,2.5e3,null]}}]}`))
	add("POST", "/jobs/{jobId}/tasks", "$DONE", "", "", []byte(addTasksExample))
	add("GET", "/jobs", "", "limit=2&status=processing", "", nil)
	add("GET", "/jobs", "", "cursor=not-a-cursor&limit=-4", "", nil)
	add("GET", "/jobs/{jobId}", "", "", "", nil)
	add("GET", "/jobs/{jobId}", "job-00000000-0000-0000-0000-000000000000", "", "x-api-key: wrong", nil)
	add("GET", "/jobs/{jobId}/tasks/{taskId}", "$JOB/$TASK", "", "", nil)
	add("POST", "/jobs/{jobId}/cancel", "", "", "", []byte(`{}`))
	add("POST", "/jobs/{jobId}/resume", "", "", "", []byte(`null`))
	add("GET", "/jobs/{jobId}/events", "", "after=0&limit=5", "", nil)
	add("GET", "/jobs/{jobId}/events", "$DONE", "", "Accept: text/event-stream\nLast-Event-ID: 1", nil)
	add("GET", "/jobs/{jobId}/tasks/{taskId}/events", "", "after=1&limit=1000", "", nil)
	add("POST", "/pipelines", "", "", "Content-Type: application/yaml", fuzzPipeline(f))
	add("POST", "/pipelines", "", "", "Content-Type: application/yaml", []byte(apiPipeline))
	add("POST", "/pipelines", "", "", "Content-Type: application/json", []byte(apiPipelineJSON))
	add("POST", "/pipelines", "", "", "Content-Type: text/yaml; charset=utf-8", []byte(sourcesPipeline))
	add("POST", "/pipelines", "", "", "Content-Type: application/x-yaml", []byte(fuzzCronPipeline))
	add("GET", "/pipelines", "", "", "", nil)
	add("GET", "/pipelines/{name}", "chain", "", "", nil)
	add("GET", "/pipelines/{name}/versions", "", "", "", nil)
	add("GET", "/pipelines/{name}/versions/{version}", "", "", "", nil)
	add("POST", "/pipelines/{name}/rollback", "", "", "", []byte(`{"version":"$VERSION"}`))
	add("POST", "/pipelines/{name}/versions/{version}/activate", "", "", "", []byte(`{"force":true}`))
	add("DELETE", "/pipelines/{name}/versions/{version}", "", "", "", nil)
	add("POST", "/pipelines/{name}/jobs/{job}/run", "", "", "Idempotency-Key: run-1", []byte(`{"from":1,"to":10}`))
	add("POST", "/webhooks/{path...}", "", "", "Content-Type: text/plain", []byte("ref=refs/heads/main"))
	add("POST", "/webhooks/{path...}", "github/push", "", "", []byte(`{"ref":"refs/heads/main","commits":[]}`))
	add("GET", "/datasets", "", "", "", nil)
	add("GET", "/datasets/{name}", "$DS_A", "", "", nil)
	add("POST", "/datasets/{name}/current", "", "", "", []byte(`{"dataset_version":"$VER_A"}`))
	add("GET", "/datasets/{name}/rows", "", `limit=2&where={"severity":"high"}`, "", nil)
	add("GET", "/datasets/{name}/rows", "", `where={"chain":["mainnet","sepolia"],"block":1000001}&after=0&cursor=0`, "", nil)
	add("GET", "/datasets/{name}/rows", "", `where={"seen_at":"2025-01-15T10:00:00Z"}`, "", nil)
	add("GET", "/datasets/{name}/rows", "", `where={"block":9223372036854775807,"dedupe_key":"a1"}`, "", nil)
	add("GET", "/datasets/{name}/dead-letters", "", "after=0&limit=10", "", nil)
	add("POST", "/datasets/{name}/dead-letters/{id}/retry", "", "", "", nil)
	add("GET", "/healthz", "", "", "", nil)
	add("GET", "/readyz", "", "", "", nil)
	add("GET", "/openapi.json", "", "", "", nil)
	add("OPTIONS", "/jobs", "", "", "Origin: https://app.example.com\nAccess-Control-Request-Method: POST\nAccess-Control-Request-Headers: x-api-key", nil)
	add("OPTIONS", "/jobs", "", "", "Origin: https://evil.example\nAccess-Control-Request-Method: POST", nil)
	add("GET", "/jobs", "", "", "Origin: https://APP.example.com", nil)
	add("DELETE", "/jobs/{jobId}", "", "", "", nil)
	add("POST", "/v1/udf/bundles", "", "", "Content-Type: application/zip", []byte("PK\x03\x04 not a zip"))
	add("POST", "/v1/udf/bundles", "", "", "Content-Type: application/json", []byte(`{}`))
	add("GET", "/v1/udf/bundles", "", "limit=2&cursor=eA", "", nil)
	add("GET", "/v1/udf/bundles/{bundle_id}", "", "", "", nil)
	add("POST", "/v1/udf/bundles/{bundle_id}/disable", "", "", "", nil)
	add("POST", "/{path...}", "", "", "", nil)
	add("POST", "/{path...}", "v1/task/heartbeat", "", "", []byte(`{}`))
	add("GET", "/docs/api", "", "", "", nil)
	add("GET", "/docs/api/redoc.standalone.js", "", "v=0", "If-None-Match: W/\"x\", *\nRange: bytes=9999999-", nil)
	add("POST", "/v1/query", "", "", "", []byte(`{"sql":"SELECT severity, count(*) FROM alert_events GROUP BY ALL","limit":10}`))
	add("POST", "/v1/query", "", "", "", []byte(`{"sql":"WITH t AS (SELECT * FROM '/etc/passwd') SELECT * FROM t"}`))
	add("POST", "/v1/query", "", "", "", []byte(`{"sql":"SELECT 1; SELECT 2","limit":0}`))
	add("GET", "/v1/query/audit", "", "before=9&limit=2", "", nil)
	f.Fuzz(func(t *testing.T, route uint8, params, query, header string, body []byte) {
		e := &expander{h: h, t: t}
		hdr := withDefaults(headerLines(e, header), "x-api-key", h.key, "Content-Type", "application/json")
		h.send(t, h.public, e, pickRoute(producerRoutes, route), params, query, hdr, body)
	})
}

// internalRoutes are the internal listener's worker and sink routes, plus any path under
// /internal/.
var internalRoutes = []fuzzRoute{
	{"POST", "/internal/task-claim", nil},
	{"GET", "/internal/task-fetch", nil},
	{"POST", "/internal/heartbeat", nil},
	{"POST", "/internal/task-complete", nil},
	{"POST", "/internal/events", nil},
	{"POST", "/internal/buffer-publish", nil},
	{"POST", "/internal/sink/claim", nil},
	{"POST", "/internal/sink/commit", nil},
	{"POST", "/internal/sink/fail", nil},
	{"GET", "/healthz", nil},
	{"GET", "/internal/{path...}", []string{"task-claim"}},
	{"POST", "/internal/task-credentials", nil},
	{"POST", "/internal/sink/extend", nil},
	{"GET", "/internal/task-datasets/{dataset}/rows", []string{"alert_events"}},
	{"POST", "/internal/task-query", nil},
	{"POST", "/internal/task-secrets", nil},
}

// FuzzInternalDialect sends fuzzed requests of the worker dialect and the sink's to the internal
// listener's handler (whose mTLS is the listener's, not the handler's): the route, path
// parameters, query, extra header lines and body.
func FuzzInternalDialect(f *testing.F) {
	h := newFuzzHarness(f)
	add := func(method, path, query, header, body string) {
		f.Add(routeOf(f, internalRoutes, method, path), "", query, header, []byte(body))
	}
	add("POST", "/internal/task-claim", "", "", exampleClaim)
	add("POST", "/internal/task-claim", "", "", `{"task_id":"$IDLE"}`)
	add("POST", "/internal/task-claim", "", "", `{"task_id":"$IDLE","worker_id":"w-1","attemptId":"ignored"}`)
	add("GET", "/internal/task-fetch", "task_id=$TASK", "", "")
	add("GET", "/internal/task-fetch", "task_id=$IDLE&task_id=$TASK", "", "")
	add("POST", "/internal/heartbeat", "", "", exampleHeartbeat)
	add("POST", "/internal/heartbeat", "", "", `{"task_id":"$TASK","attempt":2,"lease_token":"$LEASE"}`)
	add("POST", "/internal/task-complete", "", "", exampleComplete)
	add("POST", "/internal/task-complete", "", "", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","status":"Failed","error":{"category":"DATA_QUALITY","message":"bad input","stack_trace":"at x","retryable":false},"error_message":"boom"}`)
	add("POST", "/internal/task-complete", "", "", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","status":"Canceled"}`)
	add("POST", "/internal/events", "", "", exampleEventsSingle)
	add("POST", "/internal/events", "", "", exampleEventsPartitioned)
	add("POST", "/internal/events", "", "", exampleEventsBatch)
	add("POST", "/internal/buffer-publish", "", "", exampleBufferPublish)
	add("POST", "/internal/sink/claim", "", "", `{"max":5,"visibility_seconds":30,"wait_seconds":2}`)
	add("POST", "/internal/sink/claim", "", "", `{"id":1}`)
	add("POST", "/internal/sink/extend", "", "", `{"id":1,"receive_count":1,"visibility_seconds":60}`)
	add("POST", "/internal/sink/commit", "", "", `{"id":1,"cursor":5,"inserted":3,"facets":{"severity":["high","low"],"chain":["mainnet"]}}`)
	add("POST", "/internal/sink/fail", "", "", `{"id":1,"receive_count":1,"error":"row 2: column \"block\" must be an integer"}`)
	add("GET", "/healthz", "", "", "")
	add("GET", "/internal/{path...}", "", "", "")
	add("POST", "/internal/task-credentials", "", "X-Trace-Task-Capability: $TOKEN", exampleHeartbeat)
	add("POST", "/internal/task-secrets", "", "", exampleHeartbeat)
	add("POST", "/internal/task-credentials", "", "X-Trace-Task-Capability: $TOKEN2", exampleHeartbeat)
	add("POST", "/internal/task-credentials", "", "", exampleHeartbeat)
	add("GET", "/internal/task-datasets/{dataset}/rows", `limit=2&where={"severity":"high"}`, "X-Trace-Task-Capability: $TOKEN", "")
	add("GET", "/internal/task-datasets/{dataset}/rows", "cursor=0&after=5", "X-Trace-Task-Capability: $TOKEN2", "")
	add("GET", "/internal/task-datasets/{dataset}/rows", `where={"severity":["high","low"],"block":1}`, "", "")
	add("POST", "/internal/task-query", "", "X-Trace-Task-Capability: $TOKEN", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","sql":"SELECT count(*) FROM alert_events"}`)
	add("POST", "/internal/task-query", "", "X-Trace-Task-Capability: $TOKEN2", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","sql":"SELECT 1"}`)
	f.Fuzz(func(t *testing.T, route uint8, params, query, header string, body []byte) {
		e := &expander{h: h, t: t}
		hdr := withDefaults(headerLines(e, header), "Content-Type", "application/json")
		h.send(t, h.internal, e, pickRoute(internalRoutes, route), params, query, hdr, body)
	})
}

var streamRoutes = []fuzzRoute{
	{"POST", "/internal/worker/claim", nil},
	{"POST", "/internal/worker/heartbeat", nil},
	{"POST", "/internal/worker/complete", nil},
	{"POST", "/internal/worker/fail", nil},
	{"POST", "/internal/worker/claim-batch", nil},
	{"POST", "/internal/worker/report-batch", nil},
}

// FuzzStreamDialect sends fuzzed bodies of the stream-worker dialect (and its batch endpoints)
// to the internal listener's handler. Every result of a report-batch must be below 500 too.
func FuzzStreamDialect(f *testing.F) {
	h := newFuzzHarness(f)
	add := func(path, body string) { f.Add(routeOf(f, streamRoutes, "POST", path), []byte(body)) }
	const fence = `"worker_id":"w-1","job_id":"$TASK","attempt_id":$ATTEMPT,"lease_token":"$LEASE","stream":"fuzz","message_id":"1700000000000-0"`
	add("/internal/worker/claim", `{"worker_id":"w-1","streams":["fuzz"],"max_wait_ms":0}`)
	add("/internal/worker/claim", `{"worker_id":"w-1","streams":["nobody","jobs:stream:high","nobody"],"max_wait_ms":60000}`)
	add("/internal/worker/heartbeat", `{"worker_id":"w-1","job_id":"$TASK","lease_token":"$LEASE"}`)
	add("/internal/worker/heartbeat", `{"worker_id":"w-1","job_id":"$TASK","lease_token":"$LEASE","attempt_id":$ATTEMPT}`)
	add("/internal/worker/complete", `{`+fence+`,"result":{"timings":{"ms":12},"uri":"s3://frames/7.png"}}`)
	add("/internal/worker/complete", `{"worker_id":"w-1","job_id":"$TASK","attempt_id":2,"lease_token":"$LEASE","result":42}`)
	add("/internal/worker/fail", `{`+fence+`,"error":{"code":"RENDER_OOM","message":"out of memory","stack":"at render","retryable":true}}`)
	add("/internal/worker/fail", `{`+fence+`,"error":{"code":"DATA_QUALITY","message":"bad frame","retryable":false}}`)
	add("/internal/worker/claim-batch", `{"worker_id":"w-1","streams":["fuzz"],"max_wait_ms":0,"max_tasks":4}`)
	add("/internal/worker/claim-batch", `{"worker_id":"w-1","streams":["nobody"],"max_wait_ms":1500,"max_tasks":256}`)
	add("/internal/worker/report-batch", `{"worker_id":"w-1","reports":[`+
		`{"type":"complete","job_id":"$TASK","attempt_id":1,"lease_token":"$LEASE","stream":"fuzz","message_id":"1-0","result":{"n":1}},`+
		`{"type":"fail","job_id":"$TASK2","attempt_id":1,"lease_token":"$LEASE2","error":{"code":"X","message":"m"}},`+
		`{"type":"complete","job_id":"$TASK","attempt_id":1,"lease_token":"$LEASE2"}]}`)
	add("/internal/worker/report-batch", `{"worker_id":"w-1","reports":[{"type":"complete","job_id":"$TASK2","attempt_id":1,"lease_token":"$LEASE2"},{"type":"complete","job_id":"$TASK2","attempt_id":1,"lease_token":"$LEASE2","result":"other"}]}`)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		e := &expander{h: h, t: t}
		rt := pickRoute(streamRoutes, route)
		res := h.send(t, h.internal, e, rt, "", "", [][2]string{{"Content-Type", "application/json"}}, body)
		results, _ := res["results"].([]any)
		for i, r := range results {
			if m, _ := r.(map[string]any); m == nil || statusOf(m["status"]) >= 500 || statusOf(m["status"]) < 200 {
				t.Fatalf("%s: results[%d] is %v\nserver log:\n%s", rt.path, i, r, h.log.String())
			}
		}
	})
}

var taskScopedRoutes = []fuzzRoute{
	{"POST", "/v1/task/heartbeat", nil},
	{"POST", "/v1/task/complete", nil},
	{"POST", "/v1/task/events", nil},
	{"POST", "/v1/task/buffer-publish", nil},
	{"POST", "/v1/task/credentials", nil},
	{"GET", "/v1/task/datasets/{dataset}/rows", []string{"alert_events"}},
	{"POST", "/v1/task/query", nil},
	{"GET", "/v1/task/bundle", nil},
}

// FuzzTaskScopedDialect sends fuzzed task-scoped requests to the public listener: the route, the
// X-Trace-Task-Capability value ("$TOKEN" is a valid token of the attempt $TASK/$ATTEMPT/$LEASE)
// and the body.
func FuzzTaskScopedDialect(f *testing.F) {
	h := newFuzzHarness(f)
	add := func(path, token, body string) {
		method := http.MethodPost
		if strings.HasSuffix(path, "/rows") || strings.HasSuffix(path, "/bundle") {
			method = http.MethodGet
		}
		f.Add(routeOf(f, taskScopedRoutes, method, path), token, []byte(body))
	}
	add("/v1/task/heartbeat", "$TOKEN", exampleHeartbeat)
	add("/v1/task/heartbeat", "$EXPIRED", exampleHeartbeat)
	add("/v1/task/heartbeat", "$TOKEN2", exampleHeartbeat)
	add("/v1/task/heartbeat", "$TOKEN", `{"task_id":"$TASK","attempt":2,"lease_token":"$LEASE"}`)
	add("/v1/task/heartbeat", "", exampleHeartbeat)
	add("/v1/task/complete", "$TOKEN", exampleComplete)
	add("/v1/task/complete", "$TOKEN", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","status":"Completed","datasets_published":[{"dataset_uuid":"$DS_A","dataset_version":"$VER_A","storage_ref":{"scheme":"s3","bucket":"bucket","prefix":"cold/"},"range_start":100,"range_end":200}]}`)
	add("/v1/task/complete", "$TOKEN2", `{"task_id":"$TASK2","attempt":1,"lease_token":"$LEASE2","status":"Failed","error":{"category":"TIMEOUT","message":"slow"}}`)
	add("/v1/task/events", "$TOKEN", exampleEventsBatch)
	add("/v1/task/events", "$TOKEN", exampleEventsPartitioned)
	add("/v1/task/buffer-publish", "$TOKEN", exampleBufferPublish)
	add("/v1/task/buffer-publish", "$TOKEN", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","batch_uri":"s3://trace-scratch/buffers/$TASK/$ATTEMPT/batch.jsonl","content_type":"application/jsonl","batch_size_bytes":123456,"dedupe_scope":"alert_events"}`)
	add("/v1/task/credentials", "$TOKEN", exampleHeartbeat)
	add("/v1/task/credentials", "$EXPIRED", exampleHeartbeat)
	add("/v1/task/credentials", "$TOKEN2", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE"}`)
	add("/v1/task/datasets/{dataset}/rows", "$TOKEN", "")
	add("/v1/task/datasets/{dataset}/rows", "$EXPIRED", "")
	add("/v1/task/query", "$TOKEN", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","sql":"SELECT * FROM read_csv('/etc/passwd')"}`)
	add("/v1/task/query", "$TOKEN", `{"task_id":"$TASK","attempt":$ATTEMPT,"lease_token":"$LEASE","sql":"SELECT count(*) FROM alert_events","limit":1}`)
	add("/v1/task/bundle", "$TOKEN", "")
	add("/v1/task/bundle", "$EXPIRED", "")
	f.Fuzz(func(t *testing.T, route uint8, token string, body []byte) {
		e := &expander{h: h, t: t}
		hdr := [][2]string{{"Content-Type", "application/json"}}
		if tok := strings.TrimSpace(e.expand(token)); tok != "" && validHeaderValue(tok) {
			hdr = append(hdr, [2]string{"X-Trace-Task-Capability", tok})
		}
		h.send(t, h.public, e, pickRoute(taskScopedRoutes, route), "", "", hdr, body)
	})
}

var callbackRoutes = []fuzzRoute{
	{"POST", "/v1/tasks/{task_id}/started", []string{"$TASK"}},
	{"POST", "/v1/tasks/{task_id}/heartbeat", []string{"$TASK"}},
	{"POST", "/v1/tasks/{task_id}/completed", []string{"$TASK"}},
	{"POST", "/api/v1/tasks/{task_id}/started", []string{"$TASK"}},
	{"POST", "/api/v1/tasks/{task_id}/heartbeat", []string{"$TASK"}},
	{"POST", "/api/v1/tasks/{task_id}/completed", []string{"$TASK"}},
}

// FuzzCallbackDialect sends fuzzed callbacks to the public listener: the route, the task id of
// the path (empty: $TASK), the Authorization value ("Bearer $TOKEN" is the attempt's valid task
// token) and the body.
func FuzzCallbackDialect(f *testing.F) {
	h := newFuzzHarness(f)
	add := func(path, taskID, authorization string, body []byte) {
		f.Add(routeOf(f, callbackRoutes, "POST", path), taskID, authorization, body)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	add("/v1/tasks/{task_id}/started", "", "Bearer $TOKEN", mustMarshal(f, callbackStart(1)))
	add("/v1/tasks/{task_id}/started", "", "Bearer $TOKEN", []byte(`{"attempt":1,"workerId":"w","attemptId":"$LEASE","traceparent":"`+tp+`"}`))
	add("/v1/tasks/{task_id}/heartbeat", "", "Bearer $TOKEN", mustMarshal(f, callbackBeat(1)))
	add("/v1/tasks/{task_id}/completed", "", "Bearer $TOKEN", mustMarshal(f, callbackSucceeded(1)))
	add("/v1/tasks/{task_id}/completed", "", "bearer $TOKEN", []byte(`{"attempt":1,"workerId":"w","outcome":"FAILED","error":{"category":"USER_CODE","message":"boom","stackTrace":"at x","retryable":true}}`))
	add("/v1/tasks/{task_id}/completed", "", "Bearer $TOKEN", []byte(`{"attempt":1,"workerId":"w","outcome":"CANCELLED","cancelledDuringPhase":"upload","partialProgress":{"rows":10},"metrics":{"cpuTimeMs":5}}`))
	add("/api/v1/tasks/{task_id}/started", "", "Bearer $TOKEN", mustMarshal(f, callbackStart(2)))
	add("/api/v1/tasks/{task_id}/heartbeat", "$TASK2", "Bearer $TOKEN", mustMarshal(f, callbackBeat(1)))
	add("/api/v1/tasks/{task_id}/completed", "", "Bearer $EXPIRED", mustMarshal(f, callbackSucceeded(1)))
	add("/api/v1/tasks/{task_id}/completed", "", "Basic $TOKEN", mustMarshal(f, callbackSucceeded(1)))
	f.Fuzz(func(t *testing.T, route uint8, taskID, authorization string, body []byte) {
		e := &expander{h: h, t: t}
		hdr := [][2]string{{"Content-Type", "application/json"}}
		if a := strings.TrimSpace(e.expand(authorization)); a != "" && validHeaderValue(a) {
			hdr = append(hdr, [2]string{"Authorization", a})
		}
		h.send(t, h.public, e, pickRoute(callbackRoutes, route), taskID, "", hdr, body)
	})
}

// TestFuzzTargetsCoverEveryRoute fails when a route of the route table is fuzzed by no target:
// add a route to the list of its dialect (at the end) along with it.
func TestFuzzTargetsCoverEveryRoute(t *testing.T) {
	fuzzed := map[string]bool{}
	for _, list := range [][]fuzzRoute{producerRoutes, internalRoutes, streamRoutes, taskScopedRoutes, callbackRoutes} {
		for _, r := range list {
			fuzzed[r.method+" "+r.path] = true
		}
	}
	for _, r := range openAPIServer().Routes() {
		if !fuzzed[r.Method+" "+r.Pattern] {
			t.Errorf("%s %s (%s listener) is in no fuzz target's route list", r.Method, r.Pattern, r.Listener)
		}
	}
}
