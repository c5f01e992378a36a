package sink_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// A routed consumer of a buffered dataset reads, with nothing but its capability token, exactly
// the rows its event brought that match its input's where; its own where narrows that and cannot
// widen it. A task reads only its job's datasets, a stale attempt's token reads nothing, and the
// internal listener answers the same with the token.
func TestConsumersReadTheRowsTheirEventBrought(t *testing.T) {
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			testTaskRows(t, newFixture(t, drv, "file", "local"))
		})
	}
}

func testTaskRows(t *testing.T, f *fixture) {
	s := api.New(api.Config{Dispatcher: f.d, DataPlane: f.dp, Auth: auth.NewAuthenticator(f.st, auth.Limits{}, nil),
		Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(f.st, nil), Dispatcher: f.d}), Logger: quiet})
	public, internal := httptest.NewServer(s.ProducerHandler()), httptest.NewServer(s.InternalHandler())
	t.Cleanup(public.Close)
	t.Cleanup(internal.Close)

	// Two batches, each routed to pager (severity high) and digest (low or medium).
	f.publish(f.writer("a"), "a.jsonl", `{"dedupe_key":"k1","severity":"high","block":1}`,
		`{"dedupe_key":"k2","severity":"low","block":2}`, `{"dedupe_key":"k3","severity":"medium","block":3}`)
	f.process()
	f.route()
	f.publish(f.writer("b"), "b.jsonl", `{"dedupe_key":"k4","severity":"high","block":4}`, `{"dedupe_key":"k5","severity":"low","block":5}`)
	f.process()
	f.route()
	consumers := map[string][]string{} // pipeline job → its tasks, oldest first
	jobs, err := f.st.JobList(f.ctx, store.ListJobsParams{Tenant: tenant, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(jobs)
	for _, j := range jobs {
		if j.PipelineJob == "pager" || j.PipelineJob == "digest" {
			tasks, err := f.st.TaskListByJob(f.ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			consumers[j.PipelineJob] = append(consumers[j.PipelineJob], tasks[0].ID)
		}
	}
	if len(consumers["pager"]) != 2 || len(consumers["digest"]) != 2 {
		t.Fatalf("consumers %v, want two tasks each of pager and digest", consumers)
	}

	// claim claims a task through the internal dialect and returns its capability token.
	claim := func(taskID string) string {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"task_id": taskID, "worker_id": "w"})
		res, err := http.Post(internal.URL+"/internal/task-claim", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var ans struct {
			Status string `json:"status"`
			Token  string `json:"capability_token"`
		}
		if err := json.NewDecoder(res.Body).Decode(&ans); err != nil || ans.Status != "Claimed" {
			t.Fatalf("claim %s: %d %+v %v", taskID, res.StatusCode, ans, err)
		}
		return ans.Token
	}
	read := func(base, path, token string) (int, map[string]any) {
		t.Helper()
		var h []string
		if token != "" {
			h = []string{"X-Trace-Task-Capability", token}
		}
		code, v, _ := httpDo(t, "GET", base+path, nil, h...)
		return code, v
	}
	rowKeys := func(page map[string]any) []string {
		var out []string
		rows, _ := page["rows"].([]any)
		for _, r := range rows {
			out = append(out, fmt.Sprint(r.(map[string]any)["dedupe_key"]))
		}
		return out
	}
	pager1, digest1, pager2 := claim(consumers["pager"][0]), claim(consumers["digest"][0]), claim(consumers["pager"][1])
	uuid := f.dataset.UUID
	for _, c := range []struct {
		name, token, query string
		want               []string
	}{
		{"pager's first task: the high rows of the first batch", pager1, "", []string{"k1"}},
		{"digest's first task: its low and medium rows", digest1, "", []string{"k2", "k3"}},
		{"narrowed by the caller's where", digest1, `?where={"severity":"low"}`, []string{"k2"}},
		{"never widened: the edge allows no high row", digest1, `?where={"severity":"high"}`, nil},
		{"a column of the caller's own", digest1, `?where={"block":[3,5]}`, []string{"k3"}},
		{"every batch, still through the edge's where", pager1, "?cursor=0", []string{"k1", "k4"}},
		{"the second batch's task", pager2, "", []string{"k4"}},
		{"paged", digest1, "?limit=1", []string{"k2"}},
	} {
		for _, name := range []string{"alert_events", uuid} {
			for _, l := range []struct{ base, path string }{
				{public.URL, "/v1/task/datasets/" + name + "/rows"},
				{internal.URL, "/internal/task-datasets/" + name + "/rows"},
			} {
				code, page := read(l.base, l.path+c.query, c.token)
				if code != http.StatusOK || !slices.Equal(rowKeys(page), c.want) {
					t.Errorf("%s (%s%s): %d %v, want rows %v", c.name, l.path, c.query, code, page, c.want)
				}
			}
		}
	}
	if _, page := read(public.URL, "/v1/task/datasets/alert_events/rows?limit=1", digest1); page["next_after"] == nil {
		t.Errorf("a first page of one of two rows has no next_after: %v", page)
	}

	// A task of a job that does not read the dataset, a task of another tenant naming acme's
	// dataset, and no token at all.
	job, err := f.d.CreateJob(f.ctx, dispatch.CreateJobParams{Tenant: tenant, Tasks: []lifecycle.TaskSpec{{Key: "plain", Name: "plain"}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := f.st.TaskListByJob(f.ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.dp.Deploy(f.ctx, "other", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	run, err := f.dp.RunSource(f.ctx, dataplane.RunSourceParams{Tenant: "other", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	forbidden := fmt.Sprintf(`dataset %q is not one this task reads or writes: a task reads only its job's inputs and outputs`, uuid)
	for name, token := range map[string]string{"a task of a plain job": claim(plain[0].ID), "another tenant's task": claim(run.TaskID)} {
		code, body := read(public.URL, "/v1/task/datasets/"+uuid+"/rows", token)
		if code != http.StatusForbidden || body["error"] != "forbidden" || body["message"] != forbidden {
			t.Errorf("%s: %d %v, want 403 %q", name, code, body, forbidden)
		}
	}
	if code, body := read(public.URL, "/v1/task/datasets/alert_events/rows", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %v", code, body)
	}

	// The writer reads its own output, every batch of it.
	if code, page := read(public.URL, "/v1/task/datasets/alert_events/rows", claimWriter(t, f, claim)); code != http.StatusOK ||
		!slices.Equal(rowKeys(page), []string{"k1", "k2", "k3", "k4", "k5"}) {
		t.Errorf("the writer's own output: %d %v", code, page)
	}

	// The first pager task's lease runs out and it is claimed again: its first token is stale.
	f.clock.Advance(2 * time.Minute)
	if _, err := f.d.Reap(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute) // past the retry's backoff
	claim(consumers["pager"][0])
	code, body := read(public.URL, "/v1/task/datasets/alert_events/rows", pager1)
	if code != http.StatusConflict || body["error"] != "attempt_mismatch" {
		t.Errorf("a stale attempt's token: %d %v, want 409 attempt_mismatch", code, body)
	}
}

// claimWriter starts a task of the writer job scan and returns its token.
func claimWriter(t *testing.T, f *fixture, claim func(string) string) string {
	t.Helper()
	run, err := f.dp.RunSource(f.ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: "alerts", Job: "scan",
		Trigger: map[string]any{"key": "reader"}})
	if err != nil {
		t.Fatal(err)
	}
	return claim(run.TaskID)
}
