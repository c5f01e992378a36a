package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
)

// bootstrap.reset_outputs end to end, on a real `baton dev` (SQLite) and `baton server`
// (PostgreSQL), each with its sink: rows a task published are loaded; the deploy that activates
// a version with reset_outputs removes them, starts the dataset at a fresh version and says so
// in the dataset's invalidations and the version's history; deploying that version again resets
// nothing.
func TestResetOutputsEndToEnd(t *testing.T) {
	forEachRealServerWithBlobs(t, func(t *testing.T, s *metricsServer, blobDir string) {
		deploy := func(doc string) bool {
			t.Helper()
			code, body := s.api(t, "POST", "/pipelines", doc)
			if code != 201 && code != 200 {
				t.Fatalf("deploy: %d %v", code, body)
			}
			return body["activated"] == true
		}
		rows := func() int {
			t.Helper()
			_, page := s.api(t, "GET", "/datasets/alert_events/rows?limit=100", "")
			rs, _ := page["rows"].([]any)
			return len(rs)
		}
		deploy(pipelinetest.AlertsDoc)
		_, ds := s.api(t, "GET", "/datasets/alert_events", "")
		before := ds["current_version"]

		// A run of scan publishes a batch of 3 rows, which the sink loads.
		s.mustAPI(t, "POST", "/pipelines/alerts/jobs/scan/run", "", 201)
		code, c := postJSONTo(t, s.internal+"/internal/worker/claim", map[string]any{"worker_id": "w", "streams": []string{"scan"}, "max_wait_ms": 5000})
		if code != 200 || c["claimed"] != true {
			t.Fatalf("claim scan: %d %v", code, c)
		}
		key := blob.BatchPrefix(ds["dataset_uuid"].(string), c["task_id"].(string), 1) + "a.jsonl"
		path := filepath.Join(blobDir, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		batch := `{"dedupe_key":"k1","severity":"high"}` + "\n" + `{"dedupe_key":"k2","severity":"low"}` + "\n" + `{"dedupe_key":"k3","severity":"low"}` + "\n"
		if err := os.WriteFile(path, []byte(batch), 0o644); err != nil {
			t.Fatal(err)
		}
		fence := map[string]any{"task_id": c["task_id"], "attempt": c["attempt_id"], "lease_token": c["lease_token"],
			"batch_uri": "file://" + blobDir + "/" + key, "record_count": 3}
		if code, res := postJSONTo(t, s.internal+"/internal/buffer-publish", fence); code != 200 {
			t.Fatalf("buffer-publish: %d %v", code, res)
		}
		delete(fence, "batch_uri")
		delete(fence, "record_count")
		fence["status"] = "Completed"
		if code, res := postJSONTo(t, s.internal+"/internal/task-complete", fence); code != 200 {
			t.Fatalf("complete scan: %d %v", code, res)
		}
		for deadline := time.Now().Add(30 * time.Second); rows() != 3; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the sink did not load the batch: %d rows", rows())
			}
		}

		// The deploy that activates a version with reset_outputs resets the outputs, once.
		doc := strings.Replace(pipelinetest.AlertsDoc, "    source: {kind: manual}\n",
			"    source: {kind: manual}\n    bootstrap: {reset_outputs: true}\n", 1)
		if !deploy(doc) {
			t.Fatal("the version with reset_outputs was not activated")
		}
		if n := rows(); n != 0 {
			t.Fatalf("%d rows after the reset, want none", n)
		}
		_, ds = s.api(t, "GET", "/datasets/alert_events", "")
		inv, _ := ds["invalidations"].([]any)
		if len(inv) != 1 || ds["current_version"] == before {
			t.Fatalf("after the reset: current version %v (was %v), invalidations %v", ds["current_version"], before, inv)
		}
		if i := inv[0].(map[string]any); i["kind"] != "reset" || i["rows_removed"] != 3.0 || i["previous_version"] != before ||
			i["dataset_version"] != ds["current_version"] || i["job"] != "scan" {
			t.Errorf("the invalidation: %v", i)
		}
		_, vs := s.api(t, "GET", "/pipelines/alerts/versions", "")
		newest := vs["versions"].([]any)[0].(map[string]any)
		if resets, _ := newest["resets"].([]any); len(resets) != 1 {
			t.Errorf("the reset version's history: %v, want one reset", newest)
		}
		if deploy(doc) {
			t.Error("deploying the active version again activated it again")
		}
		_, ds = s.api(t, "GET", "/datasets/alert_events", "")
		if inv, _ := ds["invalidations"].([]any); len(inv) != 1 {
			t.Errorf("after deploying the active version again: %d invalidations, want still 1", len(inv))
		}
	}, "--sink=true")
}
