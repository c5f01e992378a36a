package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/lifecycle"
)

const secretsPipelineDoc = `
name: vault
jobs:
  - {name: monitor, activation: source, runtime: ecs_platform, operator: monitor, outputs: 0, source: {kind: manual}, secrets: [api_key]}
  - {name: broken, activation: source, runtime: ecs_platform, operator: broken, outputs: 0, source: {kind: manual}, secrets: [api_key, missing_key]}
  - {name: userland, activation: source, runtime: ecs_udf, operator: userland, outputs: 0, source: {kind: manual}}
`

// POST /internal/task-secrets answers a trusted operator's declared secrets under its live
// lease; a declared secret the provider lacks fails the attempt for good; user code and
// submitted tasks get none.
func TestTaskSecrets(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		if _, err := w.dp.Deploy(ctx, "acme", []byte(secretsPipelineDoc), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		claim := func(job string) (string, string) {
			run, err := w.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "acme", Pipeline: "vault", Job: job})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := w.claim(run.TaskID)
			return run.TaskID, c.Task.LeaseToken
		}
		ask := func(task, lease string, attempt int) response {
			return w.post(w.internal.URL, "/internal/task-secrets", map[string]any{"task_id": task, "attempt": attempt, "lease_token": lease})
		}

		task, lease := claim("monitor")
		res := ask(task, lease, 1)
		wantStatus(t, res, http.StatusOK)
		if got := res.Body["secrets"].(map[string]any); len(got) != 1 || got["api_key"] != testSecrets["api_key"] {
			t.Errorf("monitor's secrets: %s", res.Raw)
		}
		res = ask(task, "not-the-lease", 1)
		if res.Status != http.StatusConflict || res.Body["error"] != "lease_mismatch" {
			t.Errorf("a stale lease: %d %s, want 409 lease_mismatch", res.Status, res.Raw)
		}

		task, lease = claim("userland")
		res = ask(task, lease, 1)
		wantStatus(t, res, http.StatusOK)
		if got := res.Body["secrets"].(map[string]any); len(got) != 0 {
			t.Errorf("user code's secrets: %s, want none", res.Raw)
		}
		_, ids := w.submit(callbackSpec("plain", "op"))
		c, _ := w.claim(ids["plain"])
		if res = ask(ids["plain"], c.Task.LeaseToken, 1); res.Status != http.StatusOK || len(res.Body["secrets"].(map[string]any)) != 0 {
			t.Errorf("a submitted task's secrets: %d %s", res.Status, res.Raw)
		}

		task, lease = claim("broken")
		res = ask(task, lease, 1)
		if res.Status != http.StatusConflict || res.Body["error"] != "secret_unavailable" {
			t.Fatalf("a missing secret: %d %s, want 409 secret_unavailable", res.Status, res.Raw)
		}
		tk := w.task(task)
		if tk.Status != lifecycle.Failed || tk.Error == nil || tk.Error.Category != lifecycle.Configuration ||
			tk.Error.Message != `secret "missing_key", which the job declares, is not set in the server's secret provider (env)` {
			t.Errorf("the task of a missing secret: %s %+v, want failed for good, CONFIGURATION naming it", tk.Status, tk.Error)
		}
	})
}
