package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// replacePipeline: a manual source that rewrites partitions of the dataset days, and a job that
// reads each partition.
const replacePipeline = `
name: daily
jobs:
  - {name: build, activation: source, runtime: ecs_platform, operator: build_days, outputs: 1, update_strategy: replace, source: {kind: manual}}
  - {name: report, activation: reactive, runtime: ecs_platform, operator: report, outputs: 0, execution_strategy: PerPartition,
     inputs: [{from: {dataset: days}}]}
publish:
  days: {from: {job: build, output: 0}}
`

// update_strategy replace end to end, on a real `baton dev` (SQLite) and `baton server`
// (PostgreSQL), with a directory as object storage: a partition event without its _SUCCESS marker
// is refused and changes nothing; with the marker, the completion commits the partition (listed
// by GET /datasets/{name}) and its consumer runs; a second run's commit of the same partition
// swaps the pointer and runs the consumer again.
func TestReplaceEndToEnd(t *testing.T) {
	forEachRealServerWithBlobs(t, func(t *testing.T, s *metricsServer, blobDir string) {
		s.mustAPI(t, "POST", "/pipelines", replacePipeline, 201)
		fence := func(c map[string]any) map[string]any {
			return map[string]any{"task_id": c["task_id"], "attempt": c["attempt_id"], "lease_token": c["lease_token"]}
		}

		// build runs the source once and commits partition 0-9 with n bytes of data.
		build := func(n int) string {
			t.Helper()
			s.mustAPI(t, "POST", "/pipelines/daily/jobs/build/run", "", 201)
			c := s.claim(t, "build_days")
			out := c["outputs"].([]any)[0].(map[string]any)
			event := map[string]any{"dataset_uuid": out["dataset_uuid"], "dataset_version": out["dataset_version"], "partition_key": "0-9", "start": 0, "end": 9}
			folder := filepath.Join(blobDir, "datasets", out["dataset_uuid"].(string), c["task_id"].(string), "1", "0-9")

			// The event before the marker: refused, naming the marker.
			body := fence(c)
			body["events"] = []any{event}
			code, res := postJSONTo(t, s.internal+"/internal/events", body)
			if msg, _ := res["message"].(string); code != 400 || !strings.Contains(msg, "no _SUCCESS marker at file://"+folder+"/_SUCCESS") {
				t.Fatalf("an event without its marker: %d %v", code, res)
			}

			if err := os.MkdirAll(folder, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(folder, "part-0.parquet"), []byte(strings.Repeat("x", n)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(folder, "_SUCCESS"), []byte(`{"row_count": 7}`), 0o644); err != nil {
				t.Fatal(err)
			}
			body["status"] = "Completed"
			if code, res := postJSONTo(t, s.internal+"/internal/task-complete", body); code != 200 {
				t.Fatalf("complete with the commit: %d %v", code, res)
			}
			return c["task_id"].(string)
		}
		// report claims the consumer's task, checks it reads partition 0-9, and completes it.
		report := func() {
			t.Helper()
			c := s.claim(t, "report")
			if in := c["inputs"].([]any)[0].(map[string]any); in["partition_key"] != "0-9" {
				t.Fatalf("the consumer's input: %v, want partition 0-9", in)
			}
			body := fence(c)
			body["status"] = "Completed"
			if code, res := postJSONTo(t, s.internal+"/internal/task-complete", body); code != 200 {
				t.Fatalf("complete the consumer: %d %v", code, res)
			}
		}
		partition := func() map[string]any {
			t.Helper()
			_, ds := s.api(t, "GET", "/datasets/days", "")
			ps, _ := ds["partitions"].([]any)
			if len(ps) != 1 {
				t.Fatalf("partitions of days: %v, want one", ds["partitions"])
			}
			return ps[0].(map[string]any)
		}

		first := build(10)
		if p := partition(); p["task_id"] != first || p["bytes"] != 10.0 || p["row_count"] != 7.0 || !strings.HasSuffix(p["location"].(string), "/0-9/") {
			t.Fatalf("the committed partition: %v", p)
		}
		report()
		second := build(25)
		if p := partition(); p["task_id"] != second || p["bytes"] != 25.0 {
			t.Fatalf("after the second commit: %v, want the second run's", p)
		}
		report() // the rewritten partition's consumer runs again
		code, c := postJSONTo(t, s.internal+"/internal/worker/claim", map[string]any{"worker_id": "w", "streams": []string{"report"}, "max_wait_ms": 300})
		if code != 200 || c["claimed"] == true {
			t.Fatalf("a third consumer task: %d %v; want none", code, c)
		}
	})
}
