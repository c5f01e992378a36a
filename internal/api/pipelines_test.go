package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/push"
)

const apiPipeline = `
name: chain
jobs:
  - name: follower
    activation: source
    runtime: ecs_platform
    operator: block_follower
    outputs: 1
    source: {kind: always_on}
  - name: mainnet
    activation: reactive
    runtime: ecs_platform
    operator: alerts
    outputs: 1
    config: {level: high}
    inputs:
      - from: {dataset: blocks}
        where: {chain: mainnet}
publish:
  blocks:
    from: {job: follower, output: 0}
    filter_fields: [chain]
`

// The same content as JSON: the same version.
const apiPipelineJSON = `{"publish": {"blocks": {"filter_fields": ["chain"], "from": {"output": 0, "job": "follower"}}},
 "name": "chain", "jobs": [
  {"name": "follower", "activation": "source", "runtime": "ecs_platform", "operator": "block_follower", "outputs": 1, "source": {"kind": "always_on"}},
  {"name": "mainnet", "activation": "reactive", "runtime": "ecs_platform", "operator": "alerts", "outputs": 1,
   "config": {"level": "high"}, "inputs": [{"from": {"dataset": "blocks"}, "where": {"chain": "mainnet"}}]}]}`

func TestPipelineEndpoints(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		key := w.apiKey("acme")
		yaml := []string{"x-api-key", key, "Content-Type", "application/yaml"}
		res := w.request("POST", w.public.URL+"/pipelines", apiPipeline, yaml...)
		wantStatus(t, res, http.StatusCreated)
		version, _ := res.Body["version"].(string)
		if res.Body["created"] != true || res.Body["active_version"] != version || len(version) != 16 {
			t.Fatalf("deploy: %s", res.Raw)
		}
		jobs := res.Body["jobs"].([]any)
		follower := jobs[0].(map[string]any)
		blocks := follower["outputs"].([]any)[0].(map[string]any)
		if blocks["dataset_name"] != "blocks" || blocks["dataset_uuid"] == "" {
			t.Errorf("follower outputs: %v", follower["outputs"])
		}
		// The same content as JSON creates nothing.
		res = w.request("POST", w.public.URL+"/pipelines", apiPipelineJSON, "x-api-key", key)
		wantStatus(t, res, http.StatusOK)
		if res.Body["created"] != false || res.Body["version"] != version {
			t.Errorf("redeploy as JSON: %s", res.Raw)
		}
		// Every problem at once, nothing stored.
		bad := strings.Replace(apiPipeline, "name: chain", "name: Bad-Name", 1)
		bad = strings.Replace(bad, "outputs: 1\n    config", "outputs: many\n    config", 1)
		res = w.request("POST", w.public.URL+"/pipelines", bad, yaml...)
		wantStatus(t, res, http.StatusBadRequest)
		if errs, _ := res.Body["errors"].([]any); len(errs) < 2 {
			t.Errorf("bad document: %s", res.Raw)
		}
		res = w.request("POST", w.public.URL+"/pipelines", "name: x", "x-api-key", key, "Content-Type", "image/png")
		wantStatus(t, res, http.StatusUnsupportedMediaType)

		res = w.request("GET", w.public.URL+"/pipelines", nil, "x-api-key", key)
		if ps := res.Body["pipelines"].([]any); len(ps) != 1 {
			t.Errorf("list: %s", res.Raw)
		}
		res = w.request("GET", w.public.URL+"/pipelines/chain/versions", nil, "x-api-key", key)
		if vs := res.Body["versions"].([]any); len(vs) != 1 || vs[0].(map[string]any)["active"] != true {
			t.Errorf("versions: %s", res.Raw)
		}
		res = w.request("GET", w.public.URL+"/pipelines/chain/versions/"+version, nil, "x-api-key", key)
		if res.Body["document"] != apiPipeline {
			t.Errorf("the version's document: %s", res.Raw)
		}
		wantError(t, w.request("GET", w.public.URL+"/pipelines/nope", nil, "x-api-key", key), http.StatusNotFound, "Pipeline not found")
		wantStatus(t, w.request("POST", w.public.URL+"/pipelines/chain/rollback", nil, "x-api-key", key), http.StatusBadRequest)
		// Another tenant sees none of it.
		other := w.apiKey("other")
		wantStatus(t, w.request("GET", w.public.URL+"/pipelines/chain", nil, "x-api-key", other), http.StatusNotFound)
		wantStatus(t, w.request("GET", w.public.URL+"/datasets/blocks", nil, "x-api-key", other), http.StatusNotFound)

		// An event on blocks, reported over the internal dialect, routes a task whose claim
		// answer carries its data plane.
		_, ids := w.submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"})
		c := claimInternal(t, w, ids["emit"])
		res = w.post(w.internal.URL, "/internal/events", map[string]any{"task_id": ids["emit"], "attempt": c["attempt"],
			"lease_token": c["lease_token"], "events": []map[string]any{{"dataset_uuid": blocks["dataset_uuid"],
				"dataset_version": w.currentVersion(key, "blocks"), "partition_key": "100-199", "start": 100, "end": 199}}})
		wantOK(t, res)
		if _, n, err := w.dp.NewRouter(dataplane.RouteConfig{}).RunOnce(context.Background()); err != nil || n != 1 {
			t.Fatalf("route: %d tasks, %v", n, err)
		}
		claim := w.streamClaimed("w-1", "alerts")
		job := claim["job"].(map[string]any)
		if job["dag_name"] != "chain" || job["name"] != "mainnet" || claim["operator"] != "alerts" {
			t.Errorf("claim job %v operator %v", job, claim["operator"])
		}
		if !sameJSON(claim["config"], `{"level":"high"}`) || !sameJSON(claim["payload"], `{"level":"high"}`) {
			t.Errorf("config %v", claim["config"])
		}
		in := claim["inputs"].([]any)[0].(map[string]any)
		if in["dataset_uuid"] != blocks["dataset_uuid"] || in["partition_key"] != "100-199" || !sameJSON(in["where"], `{"chain":"mainnet"}`) {
			t.Errorf("inputs %v", claim["inputs"])
		}
		if outs := claim["outputs"].([]any); len(outs) != 1 || outs[0].(map[string]any)["output_index"] != float64(0) {
			t.Errorf("outputs %v", claim["outputs"])
		}
		tok, err := w.tokens.Verify(context.Background(), claim["capability_token"].(string))
		// The token lists what the attempt's scope allows: its input, read at the pinned version,
		// then its output, written.
		out := claim["outputs"].([]any)[0].(map[string]any)
		if err != nil || len(tok.Datasets) != 2 || tok.Datasets[0].DatasetUUID != blocks["dataset_uuid"] || tok.Datasets[0].DatasetVersion != in["dataset_version"] ||
			tok.Datasets[0].Access != "read" || tok.Datasets[1].DatasetUUID != out["dataset_uuid"] || tok.Datasets[1].DatasetVersion != out["dataset_version"] ||
			tok.Datasets[1].Access != "write" || tok.Datasets[1].Buffered {
			t.Errorf("the capability token's datasets: %+v, %v", tok, err)
		}
		fetched := fetchInternal(w, claim["task_id"].(string))
		inputs, _ := json.Marshal(claim["inputs"])
		if !sameJSON(fetched.Body["inputs"], string(inputs)) || fetched.Body["job"].(map[string]any)["name"] != "mainnet" {
			t.Errorf("task-fetch: %s", fetched.Raw)
		}
		res = w.request("GET", w.public.URL+"/pipelines/chain", nil, "x-api-key", key)
		counts := res.Body["jobs"].([]any)[1].(map[string]any)["counts"].(map[string]any)
		if counts["routed"] != float64(1) || counts["running"] != float64(1) {
			t.Errorf("counts %v", counts)
		}
		res = w.request("GET", w.public.URL+"/datasets/blocks", nil, "x-api-key", key)
		if evs := res.Body["recent_events"].([]any); len(evs) != 1 || !sameJSON(res.Body["filter_fields"], `["chain"]`) {
			t.Errorf("dataset: %s", res.Raw)
		}
		wantStatus(t, w.request("POST", w.public.URL+"/datasets/blocks/current", map[string]any{"dataset_version": "v9"}, "x-api-key", key), http.StatusBadRequest)
	})
}

// TestCompletionRegistersPublishedVersions completes a task over the internal dialect with
// datasets_published: the version it names is registered on the dataset (so it can become the
// current one), and a malformed entry is refused whole, with nothing registered.
// A document beyond a limit of its size is a 400 naming the field, on either store; one at every
// limit deploys.
func TestDeployLimits(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		key := w.apiKey("acme")
		deploy := func(size pipelinetest.Size) response {
			return w.request("POST", w.public.URL+"/pipelines", pipelinetest.SizedDoc("big", size), "x-api-key", key,
				"Content-Type", "application/yaml")
		}
		max := pipelinetest.Size{Buffered: pipeline.MaxBufferedDatasets, Columns: pipeline.MaxColumns, Indexes: pipeline.MaxIndexes,
			KeyColumns: pipeline.MaxKeyColumns, Outputs: pipeline.MaxOutputs, Datasets: pipeline.MaxDatasets}
		one := max
		one.Buffered, one.Datasets = 1, 2*pipeline.MaxOutputs+1 // two jobs, b0 on line 6
		with := func(s pipelinetest.Size, edit func(*pipelinetest.Size)) pipelinetest.Size {
			edit(&s)
			return s
		}
		wantErrors(t, deploy(with(one, func(s *pipelinetest.Size) { s.Indexes++ })),
			"publish.b0.schema.indexes: must list at most 32 indexes, not 33 (line 6)")
		wantErrors(t, deploy(with(one, func(s *pipelinetest.Size) { s.Columns++ })),
			"publish.b0.schema.columns: must list at most 256 columns, not 257 (line 6)")
		wantErrors(t, deploy(with(one, func(s *pipelinetest.Size) { s.KeyColumns++; s.Indexes = 1 })),
			"publish.b0.schema.indexes[0]: must list at most 16 columns, not 17 (line 6)")
		wantErrors(t, deploy(with(one, func(s *pipelinetest.Size) { s.Outputs++ })),
			"jobs[0].outputs: must be between 0 and 64 (line 3)")
		wantErrors(t, deploy(with(max, func(s *pipelinetest.Size) { s.Buffered++ })),
			"publish: a document may publish at most 16 buffered datasets, not 17 (line 19)")
		wantErrors(t, deploy(with(max, func(s *pipelinetest.Size) { s.Datasets++ })),
			"a document may create or name at most 1000 datasets, not 1001: 985 job outputs, 16 buffered datasets and no datasets of other pipelines read by its inputs")
		inputs := "name: wide\njobs:\n  - {name: s, activation: source, runtime: ecs_platform, operator: op, outputs: 1, source: {kind: manual}}\n" +
			"  - {name: r, activation: reactive, runtime: ecs_platform, operator: op, outputs: 0, inputs: [" +
			strings.Repeat("{from: {job: s, output: 0}}, ", pipeline.MaxInputs) + "{from: {job: s, output: 0}}]}\n"
		wantErrors(t, w.request("POST", w.public.URL+"/pipelines", inputs, "x-api-key", key, "Content-Type", "application/yaml"),
			"jobs[1].inputs[1000]: a document may have at most 1000 inputs in all (line 4)")
		// 33 jobs of 1,000 outputs each: every job's outputs is named.
		res := deploy(pipelinetest.Size{Outputs: 1000, Datasets: 33 * 1000})
		wantStatus(t, res, http.StatusBadRequest)
		if errs, _ := res.Body["errors"].([]any); len(errs) != 33 || errs[32] != "jobs[32].outputs: must be between 0 and 64 (line 35)" {
			t.Fatalf("33 jobs of 1000 outputs: %s", res.Raw)
		}
		wantStatus(t, w.request("GET", w.public.URL+"/pipelines/big", nil, "x-api-key", key), http.StatusNotFound)
		// At every limit, the document deploys and its datasets are listed.
		wantStatus(t, deploy(max), http.StatusCreated)
		res = w.request("GET", w.public.URL+"/datasets", nil, "x-api-key", key)
		if ds, _ := res.Body["datasets"].([]any); len(ds) != pipeline.MaxDatasets {
			t.Fatalf("%d datasets, want %d", len(ds), pipeline.MaxDatasets)
		}
	})
}

func TestCompletionRegistersPublishedVersions(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		key := w.apiKey("acme")
		res := w.request("POST", w.public.URL+"/pipelines", apiPipeline, "x-api-key", key, "Content-Type", "application/yaml")
		wantStatus(t, res, http.StatusCreated)
		blocks := res.Body["jobs"].([]any)[0].(map[string]any)["outputs"].([]any)[0].(map[string]any)["dataset_uuid"]
		current := func(version string) response {
			return w.request("POST", w.public.URL+"/datasets/blocks/current", map[string]any{"dataset_version": version}, "x-api-key", key)
		}
		wantStatus(t, current("v2"), http.StatusBadRequest) // not registered yet

		_, ids := w.submit(lifecycle.TaskSpec{Key: "write", Name: "write"})
		c := claimInternal(t, w, ids["write"])
		complete := func(published any) response {
			return w.post(w.internal.URL, "/internal/task-complete", map[string]any{"task_id": ids["write"], "attempt": c["attempt"],
				"lease_token": c["lease_token"], "status": "Completed", "datasets_published": published})
		}
		for _, bad := range []any{
			[]map[string]any{{"dataset_version": "v2"}},
			[]map[string]any{{"dataset_uuid": blocks, "dataset_version": 2}},
			[]map[string]any{{"dataset_uuid": blocks, "dataset_version": strings.Repeat("v", 256)}},
			[]map[string]any{{"dataset_uuid": blocks, "dataset_version": "v2", "range_start": "zero"}},
		} {
			wantStatus(t, complete(bad), http.StatusBadRequest)
		}
		wantStatus(t, current("v2"), http.StatusBadRequest)
		wantOK(t, complete([]map[string]any{{"dataset_uuid": blocks, "dataset_version": "v2",
			"storage_ref": map[string]any{"scheme": "s3", "bucket": "trace-scratch", "prefix": "datasets/" + blocks.(string) + "/v2/"},
			"range_start": 0, "range_end": 99}}))
		wantStatus(t, current("v2"), http.StatusOK)
		if v := w.currentVersion(key, "blocks"); v != "v2" {
			t.Fatalf("current version %q, want v2", v)
		}
	})
}

// apiKey creates a key of tenant.
func (w *workerAPI) apiKey(tenant string) string {
	w.t.Helper()
	_, secret, err := auth.CreateKey(context.Background(), w.st, "test-"+tenant, tenant, "", time.Now())
	if err != nil {
		w.t.Fatal(err)
	}
	return secret
}

// currentVersion reads a dataset's current version over the API.
func (w *workerAPI) currentVersion(key, name string) string {
	w.t.Helper()
	res := w.request("GET", w.public.URL+"/datasets/"+name, nil, "x-api-key", key)
	v, _ := res.Body["current_version"].(string)
	return v
}

const sourcesPipeline = `
name: hooks
jobs:
  - name: backfill
    activation: source
    runtime: ecs_platform
    operator: backfill
    outputs: 1
    source: {kind: manual}
  - name: on_push
    activation: source
    runtime: lambda
    operator: on_push
    outputs: 1
    source: {kind: webhook, webhook_path: /github/push}
  - name: react
    activation: reactive
    runtime: ecs_platform
    operator: react
    outputs: 0
    inputs:
      - from: {job: backfill, output: 0}
`

func TestManualAndWebhookSources(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		key := w.apiKey("acme")
		wantStatus(t, w.request("POST", w.public.URL+"/pipelines", sourcesPipeline, "x-api-key", key, "Content-Type", "application/yaml"), http.StatusCreated)
		run := w.request("POST", w.public.URL+"/pipelines/hooks/jobs/backfill/run", `{"from": 100}`, "x-api-key", key, "Idempotency-Key", "k1")
		wantStatus(t, run, http.StatusCreated)
		again := w.request("POST", w.public.URL+"/pipelines/hooks/jobs/backfill/run", `{"from": 100}`, "x-api-key", key, "Idempotency-Key", "k1")
		wantStatus(t, again, http.StatusOK)
		if again.Body["task_id"] != run.Body["task_id"] || again.Body["created"] != false {
			t.Errorf("repeat with the same key: %s, first %s", again.Raw, run.Raw)
		}
		wantStatus(t, w.request("POST", w.public.URL+"/pipelines/hooks/jobs/react/run", nil, "x-api-key", key), http.StatusBadRequest)
		wantError(t, w.request("POST", w.public.URL+"/pipelines/hooks/jobs/nope/run", nil, "x-api-key", key), http.StatusNotFound, "Pipeline job not found")
		claim := w.streamClaimed("w-1", "backfill")
		if !sameJSON(claim["trigger"], `{"kind":"manual","input":{"from":100}}`) || claim["job"].(map[string]any)["name"] != "backfill" {
			t.Errorf("manual task: trigger %v job %v", claim["trigger"], claim["job"])
		}
		hook := w.request("POST", w.public.URL+"/webhooks/github/push", `{"ref": "main"}`, "x-api-key", key)
		wantStatus(t, hook, http.StatusCreated)
		task := w.task(hook.Body["task_id"].(string))
		if task.Runtime != "push" || !strings.Contains(string(task.Route), `"body":{"ref":"main"}`) {
			t.Errorf("webhook task: runtime %s route %s", task.Runtime, task.Route)
		}
		wantStatus(t, w.request("POST", w.public.URL+"/webhooks/github/pull", `{}`, "x-api-key", key), http.StatusNotFound)
		wantStatus(t, w.request("POST", w.public.URL+"/webhooks/github/push", `{}`), http.StatusUnauthorized)
		wantStatus(t, w.request("POST", w.public.URL+"/webhooks/github/push", `{}`, "x-api-key", w.apiKey("other")), http.StatusNotFound)

		// An Idempotency-Key is at most 255 characters here too, as for POST /jobs: a longer one
		// (a few thousand random characters) failed PostgreSQL's unique index with a 500.
		long := strings.Repeat("k", 255)
		wantStatus(t, w.request("POST", w.public.URL+"/pipelines/hooks/jobs/backfill/run", nil, "x-api-key", key, "Idempotency-Key", long), http.StatusCreated)
		wantStatus(t, w.request("POST", w.public.URL+"/webhooks/github/push", `{}`, "x-api-key", key, "Idempotency-Key", long), http.StatusCreated)
		tooLong := long + "k"
		wantError(t, w.request("POST", w.public.URL+"/pipelines/hooks/jobs/backfill/run", nil, "x-api-key", key, "Idempotency-Key", tooLong),
			http.StatusBadRequest, "Idempotency-Key must be at most 255 characters")
		wantError(t, w.request("POST", w.public.URL+"/webhooks/github/push", `{}`, "x-api-key", key, "Idempotency-Key", tooLong),
			http.StatusBadRequest, "Idempotency-Key must be at most 255 characters")
	})
}

// A lambda job's tasks go to the push target of its operator, with their data plane in the
// envelope.
func TestLambdaJobsArePushed(t *testing.T) {
	target := newTestTarget(t, func(d delivery, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	forEachPushDriver(t, map[string]string{"on_push": target.url}, func(t *testing.T, a *pushAPI) {
		yaml := []string{"x-api-key", a.key, "Content-Type", "application/yaml"}
		wantStatus(t, a.request("POST", a.public.URL+"/pipelines?activate=immediate", sourcesPipeline, yaml...), http.StatusCreated)
		a.startPusher(push.Config{Targets: map[string]string{"on_push": target.url}})
		hook := a.request("POST", a.public.URL+"/webhooks/github/push", `{"ref": "main"}`, "x-api-key", a.key)
		wantStatus(t, hook, http.StatusCreated)
		var env map[string]any
		eventually(t, "the webhook task is pushed", func() bool {
			for _, d := range target.deliveries() {
				if d.str("taskId") == hook.Body["task_id"] {
					env = d.env
					return true
				}
			}
			return false
		})
		job, _ := env["job"].(map[string]any)
		if job["dag_name"] != "hooks" || job["name"] != "on_push" || job["pipeline_version"] == "" || env["operator"] != "on_push" {
			t.Errorf("envelope job %v operator %v", env["job"], env["operator"])
		}
		if !sameJSON(env["trigger"], `{"kind":"webhook","path":"/github/push","content_type":"application/json","body":{"ref":"main"}}`) {
			t.Errorf("trigger %v", env["trigger"])
		}
		if outs, _ := env["outputs"].([]any); len(outs) != 1 {
			t.Errorf("outputs %v", env["outputs"])
		}
	})
}

// A lambda job whose operator has no push target deploys, with a warning: whether a document is
// valid never depends on the flags of the replica that answers. Its tasks wait, pending, with the
// reason in the task and pipeline views, while the deliverer delivers the tasks it has targets
// for; a deliverer with a target for the operator then delivers them.
func TestLambdaJobsWithoutATargetWaitForOne(t *testing.T) {
	target := newTestTarget(t, func(d delivery, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	forEachPushDriver(t, map[string]string{"on_push": target.url}, func(t *testing.T, a *pushAPI) {
		yaml := []string{"x-api-key", a.key, "Content-Type", "application/yaml"}
		noTarget := strings.Replace(sourcesPipeline, "operator: on_push", "operator: on_pull", 1)
		res := a.request("POST", a.public.URL+"/pipelines", noTarget, yaml...)
		wantStatus(t, res, http.StatusCreated)
		want := `job on_push: no push target for operator "on_pull" on this server: its tasks wait, pending, until one is configured (baton server --push-target on_pull=URL)`
		if ws, _ := res.Body["warnings"].([]any); len(ws) != 1 || ws[0] != want {
			t.Fatalf("deploy warnings %v, want [%s]", res.Body["warnings"], want)
		}
		waitingFor := `a push target for operator "on_pull" (baton server --push-target on_pull=URL)`
		view := a.request("GET", a.public.URL+"/pipelines/hooks", nil, "x-api-key", a.key)
		jobs, _ := view.Body["jobs"].([]any)
		if len(jobs) != 3 || jobs[1].(map[string]any)["waiting_for"] != waitingFor || jobs[0].(map[string]any)["waiting_for"] != nil {
			t.Fatalf("pipeline jobs %v: want jobs[1].waiting_for %q and no other", jobs, waitingFor)
		}

		pusher := a.startPusher(push.Config{Targets: map[string]string{"on_push": target.url}})
		waiting := a.request("POST", a.public.URL+"/webhooks/github/push", `{"n": 1}`, "x-api-key", a.key)
		wantStatus(t, waiting, http.StatusCreated)
		// The next version's on_push job has a target: its task, created later, is delivered
		// while the first waits.
		wantStatus(t, a.request("POST", a.public.URL+"/pipelines?activate=immediate", sourcesPipeline, yaml...), http.StatusCreated)
		pushed := a.request("POST", a.public.URL+"/webhooks/github/push", `{"n": 2}`, "x-api-key", a.key)
		wantStatus(t, pushed, http.StatusCreated)
		delivered := func(id any) func() bool {
			return func() bool {
				return slices.ContainsFunc(target.deliveries(), func(d delivery) bool { return d.str("taskId") == id })
			}
		}
		eventually(t, "the task with a target is delivered", delivered(pushed.Body["task_id"]))
		if delivered(waiting.Body["task_id"])() {
			t.Fatal("the task without a target was delivered")
		}
		tk := a.request("GET", fmt.Sprintf("%s/jobs/%s/tasks/%s", a.public.URL, waiting.Body["job_id"], waiting.Body["task_id"]), nil, "x-api-key", a.key)
		if tk.Body["status"] != "pending" || tk.Body["waitingFor"] != waitingFor {
			t.Fatalf("the waiting task: %s", tk.Raw)
		}

		pusher.Stop()
		a.startPusher(push.Config{Targets: map[string]string{"on_push": target.url, "on_pull": target.url}})
		eventually(t, "the waiting task is delivered once its operator has a target", delivered(waiting.Body["task_id"]))
	})
}
