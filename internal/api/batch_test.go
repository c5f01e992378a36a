package api_test

import (
	"net/http"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// Tests of the batch endpoints of the stream-worker dialect (batch.go).

func TestClaimBatchClaimsUpToMaxTasks(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, _ *clockwork.FakeClock) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q"}, lifecycle.TaskSpec{Key: "b", Name: "q"},
			lifecycle.TaskSpec{Key: "c", Name: "q"}, lifecycle.TaskSpec{Key: "d", Name: "q", DependsOn: []string{"a"}})
		res := w.streamCall("claim-batch", map[string]any{"worker_id": "w-1", "streams": []string{"q"}, "max_wait_ms": 0, "max_tasks": 2})
		if res.Status != http.StatusOK {
			t.Fatalf("claim-batch: %d %s", res.Status, res.Raw)
		}
		claims, _ := res.Body["claims"].([]any)
		if len(claims) != 2 {
			t.Fatalf("claimed %d tasks, want 2: %s", len(claims), res.Raw)
		}
		seen := map[string]bool{}
		for _, raw := range claims {
			c := raw.(map[string]any)
			if c["claimed"] != true || c["attempt_id"] != float64(1) || c["lease_token"] == "" || c["capability_token"] == "" {
				t.Errorf("claim %v lacks what /claim answers", c)
			}
			seen[c["job_id"].(string)] = true
		}
		res = w.streamCall("claim-batch", map[string]any{"worker_id": "w-1", "streams": []string{"q"}, "max_wait_ms": 0, "max_tasks": 10})
		if claims, _ := res.Body["claims"].([]any); len(claims) != 1 {
			t.Fatalf("second claim-batch got %d tasks, want the 1 left ready (d waits for a): %s", len(claims), res.Raw)
		} else {
			seen[claims[0].(map[string]any)["job_id"].(string)] = true
		}
		if len(seen) != 3 || seen[ids["d"]] {
			t.Errorf("claimed %v; want a, b and c once each", seen)
		}
		res = w.streamCall("claim-batch", map[string]any{"worker_id": "w-1", "streams": []string{"q"}, "max_wait_ms": 0, "max_tasks": 10})
		if res.Status != http.StatusOK || len(res.Body["claims"].([]any)) != 0 {
			t.Fatalf("claim-batch with nothing ready: %d %s, want 200 {\"claims\": []}", res.Status, res.Raw)
		}
	})
}

func TestClaimBatchRefusesBadRequests(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, _ *clockwork.FakeClock) {
		for _, body := range []map[string]any{
			{"worker_id": "w", "streams": []string{"q"}},
			{"worker_id": "w", "streams": []string{"q"}, "max_tasks": 0},
			{"worker_id": "w", "streams": []string{"q"}, "max_tasks": 257},
			{"worker_id": "w", "streams": []string{"q"}, "max_tasks": "3"},
			{"worker_id": "w", "streams": []string{}, "max_tasks": 3},
			{"streams": []string{"q"}, "max_tasks": 3},
			{"worker_id": "w", "streams": []string{"q"}, "max_tasks": 3, "max_wait_ms": "100"},
			{"worker_id": "w", "streams": []string{"q"}, "max_tasks": 3, "max_wait_ms": 1.5},
			{"worker_id": "w", "streams": []string{"q"}, "max_tasks": 3, "max_wait_ms": true},
		} {
			if res := w.streamCall("claim-batch", body); res.Status != http.StatusBadRequest {
				t.Errorf("claim-batch %v: %d %s, want 400", body, res.Status, res.Raw)
			}
		}
	})
}

func TestReportBatchAppliesEachReportAsAlone(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, _ *clockwork.FakeClock) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q"}, lifecycle.TaskSpec{Key: "b", Name: "q", MaxAttempts: streamPtr(2)})
		_, other := w.submit(lifecycle.TaskSpec{Key: "c", Name: "q"}) // its own job: its events stay its own
		ids["c"] = other["c"]
		byID := map[string]map[string]any{}
		for range 3 {
			c := w.streamClaimed("w-1", "q")
			byID[c["job_id"].(string)] = c
		}
		a, b, c := byID[ids["a"]], byID[ids["b"]], byID[ids["c"]]
		batch := []any{
			streamWith(streamLease(a), "worker_id", nil, "type", "complete", "result", map[string]any{"n": 1}),
			streamWith(streamLease(b), "worker_id", nil, "type", "fail", "error", map[string]any{"code": "INFRASTRUCTURE", "message": "lost"}),
			streamWith(streamLease(c), "worker_id", nil, "type", "complete", "lease_token", "forged"),
		}
		before := streamState(t, w, ids["c"])
		res := w.streamCall("report-batch", map[string]any{"worker_id": "w-1", "reports": batch})
		if res.Status != http.StatusOK {
			t.Fatalf("report-batch: %d %s", res.Status, res.Raw)
		}
		results := res.Body["results"].([]any)
		if len(results) != 3 {
			t.Fatalf("%d results for 3 reports: %s", len(results), res.Raw)
		}
		r0, r1, r2 := results[0].(map[string]any), results[1].(map[string]any), results[2].(map[string]any)
		if r0["status"] != float64(200) || r0["ok"] != true || r0["ack"] != true {
			t.Errorf("complete a: %v", r0)
		}
		if r1["status"] != float64(200) || r1["requeued"] != true || r1["dlq"] != false {
			t.Errorf("fail b: %v, want requeued", r1)
		}
		if r2["status"] != float64(409) || r2["error"] != "lease_mismatch" || r2["ok"] != false {
			t.Errorf("forged c: %v, want 409 lease_mismatch", r2)
		}
		if got := streamState(t, w, ids["c"]); got != before {
			t.Errorf("the refused report changed c:\n%s\n%s", before, got)
		}
		if tk := w.task(ids["a"]); tk.Status != lifecycle.Completed || string(tk.Output) != `{"n":1}` {
			t.Errorf("a: %s %s", tk.Status, tk.Output)
		}
		if tk := w.task(ids["b"]); tk.Status != lifecycle.Pending {
			t.Errorf("b: %s, want pending (retry)", tk.Status)
		}
		// The same batch again: a is acknowledged again without a second effect.
		res = w.streamCall("report-batch", map[string]any{"worker_id": "w-1", "reports": batch[:1]})
		if r := res.Body["results"].([]any)[0].(map[string]any); r["status"] != float64(200) || r["ack"] != true {
			t.Errorf("repeated complete: %v", r)
		}
	})
}

func TestReportBatchRefusesBadRequests(t *testing.T) {
	forEachStreamClockedDriver(t, func(t *testing.T, w *workerAPI, _ *clockwork.FakeClock) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "a", Name: "q"})
		c := w.streamClaimed("w-1", "q")
		good := streamWith(streamLease(c), "worker_id", nil, "type", "complete")
		many := make([]any, 257)
		for i := range many {
			many[i] = good
		}
		for _, body := range []map[string]any{
			{"worker_id": "w"},
			{"worker_id": "w", "reports": []any{}},
			{"worker_id": "w", "reports": many},
			{"worker_id": "w", "reports": []any{good, "x"}},
			{"worker_id": "w", "reports": []any{good, streamWith(good, "type", "finish")}},
			{"worker_id": "w", "reports": []any{good, streamWith(good, "type", nil)}},
			{"reports": []any{good}},
			{"worker_id": "", "reports": []any{good}},
			{"worker_id": 5, "reports": []any{good}},
			{"worker_id": nil, "reports": []any{good}},
		} {
			res := w.streamCall("report-batch", body)
			if res.Status != http.StatusBadRequest {
				t.Errorf("report-batch %v: %d %s, want 400", body, res.Status, res.Raw)
			}
			// The dialect's refusal shape, as every other stream-worker endpoint answers it.
			if res.Body["ok"] != false || res.Body["ack"] != false || res.Body["error"] != "invalid_request" || res.Body["message"] == "" {
				t.Errorf("report-batch %v answered %s, want {ok:false, ack:false, error:invalid_request, message}", body, res.Raw)
			}
		}
		if tk := w.task(ids["a"]); tk.Status != lifecycle.Running {
			t.Errorf("a refused batch changed a: %s", tk.Status)
		}
	})
}
