package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/baton-dev/baton/internal/store"
)

// A claim may say how contained the worker's untrusted children are; the server records it for
// the dashboard's worker list. A claim that says nothing records nothing.
func TestClaimsRecordTheWorkersIsolation(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		_, ids := w.submit(callbackSpec("a", "op"))
		wantOK(t, w.post(w.internal.URL, "/internal/worker/claim", map[string]any{"worker_id": "w-1", "streams": []string{"default"},
			"max_wait_ms": 0, "isolation": "landlock"}))
		wantOK(t, w.post(w.internal.URL, "/internal/task-claim", map[string]any{"task_id": ids["a"], "worker_id": "w-2", "isolation": "namespaces"}))
		wantOK(t, w.post(w.internal.URL, "/internal/worker/claim", map[string]any{"worker_id": "w-3", "streams": []string{"default"}, "max_wait_ms": 0}))
		got, err := w.st.WorkerInfoList(ctx, []string{"w-1", "w-2", "w-3"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Isolation != "landlock" || got[1].Isolation != "namespaces" {
			t.Errorf("recorded %+v, want w-1 landlock and w-2 namespaces", infoText(got))
		}
		res := w.post(w.internal.URL, "/internal/worker/claim", map[string]any{"worker_id": "w-1", "streams": []string{"default"},
			"max_wait_ms": 0, "isolation": "a level whose name is far longer than any"})
		wantStatus(t, res, http.StatusBadRequest)
	})
}

func infoText(ws []*store.WorkerInfo) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.WorkerID+"="+w.Isolation)
	}
	return out
}
