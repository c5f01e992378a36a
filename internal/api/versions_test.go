package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// Rule: a completion whose datasets_published registers a config_hash and range already
// registered under another dataset_version, or a registered version with other values, is a 409
// dataset_version_conflict in both worker dialects, naming both versions; nothing of it is
// applied, and the attempt can complete again with what agrees with the registered versions.
func TestCompletionWithAConflictingDatasetVersionIs409(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		ds := w.buffered()
		_, ids := w.submit(lifecycle.TaskSpec{Key: "first", Name: "op"}, lifecycle.TaskSpec{Key: "second", Name: "op"})
		entry := func(version, hash string) map[string]any {
			return map[string]any{"dataset_uuid": ds, "dataset_version": version, "config_hash": hash, "range_start": 0, "range_end": 99,
				"storage_ref": map[string]any{"scheme": "s3", "bucket": "trace-scratch", "prefix": "datasets/" + ds + "/" + version + "/"}}
		}
		complete := func(id string, c map[string]any, entries ...map[string]any) map[string]any {
			return map[string]any{"task_id": id, "attempt": c["attempt"], "lease_token": c["lease_token"], "status": "Completed",
				"events": []any{map[string]any{"dataset_uuid": ds, "dataset_version": "v1", "cursor": 7}}, "datasets_published": entries}
		}
		first := claimInternal(t, w, ids["first"])
		wantOK(t, w.post(w.internal.URL, "/internal/task-complete", complete(ids["first"], first, entry("v1", "h1"))))

		second := claimInternal(t, w, ids["second"])
		sameRange := "dataset version conflict: datasets_published[0] registers version \"v2\" of dataset " + ds +
			" for (config_hash \"h1\", range_start 0, range_end 99), which is registered as version \"v1\" by task " + ids["first"]
		otherHash := "dataset version conflict: datasets_published[0] registers version \"v1\" of dataset " + ds +
			" with (config_hash \"h2\", range_start 0, range_end 99, storage_ref {\"bucket\":\"trace-scratch\",\"prefix\":\"datasets/" + ds +
			"/v1/\",\"scheme\":\"s3\"}), but it is registered with (config_hash \"h1\", range_start 0, range_end 99, storage_ref " +
			"{\"bucket\":\"trace-scratch\",\"prefix\":\"datasets/" + ds + "/v1/\",\"scheme\":\"s3\"}) by task " + ids["first"]
		for _, tc := range []struct {
			entry map[string]any
			want  string
		}{{entry("v2", "h1"), sameRange}, {entry("v1", "h2"), otherHash}} {
			body := complete(ids["second"], second, tc.entry)
			for _, res := range []response{
				w.post(w.internal.URL, "/internal/task-complete", body),
				scoped(w, "/v1/task/complete", body, second["capability_token"].(string)),
			} {
				if res.Status != http.StatusConflict || len(res.Body) != 2 || res.Body["error"] != "dataset_version_conflict" || res.Body["message"] != tc.want {
					t.Errorf("got %d %s,\nwant 409 {\"error\":\"dataset_version_conflict\",\"message\":%q}", res.Status, res.Raw, tc.want)
				}
			}
		}
		if tk := w.task(ids["second"]); tk.Status != lifecycle.Running {
			t.Fatalf("after refused completions the task is %s", tk.Status)
		}
		if vs, _ := w.st.DatasetVersionList(ctx, ds); len(vs) != 2 {
			t.Fatalf("refused completions left %d versions, want the deployed one and v1", len(vs))
		}
		if evs, _ := w.st.DatasetEventListByTask(ctx, ids["second"]); len(evs) != 0 {
			t.Fatalf("refused completions stored events: %+v", evs)
		}
		// The same version with the same values: registered already, the completion succeeds.
		if r := wantOK(t, w.post(w.internal.URL, "/internal/task-complete", complete(ids["second"], second, entry("v1", "h1")))); r["status"] != "Completed" {
			t.Fatalf("complete: %v", r)
		}
		if vs, _ := w.st.DatasetVersionList(ctx, ds); len(vs) != 2 || vs[1].TaskID != ids["first"] {
			t.Fatalf("versions after the repeat: %+v", vs)
		}
	})
}
