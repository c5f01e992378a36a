package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
)

// idle_timeout end to end, on a real `baton dev` (SQLite) and `baton server` (PostgreSQL): a
// `baton worker` that runs a task of a job with idle_timeout: 0 exits 0 by itself once its queue
// is empty, the task completed.
func TestIdleTimeoutEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, extra ...string) *metricsServer
	}{
		{"dev", startMetricsDev},
		{"server", startMetricsServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			api := func(method, path, body string) (int, map[string]any) {
				t.Helper()
				req, _ := http.NewRequest(method, s.public+path, strings.NewReader(body))
				req.Header.Set("x-api-key", s.key)
				req.Header.Set("Content-Type", "application/yaml")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				var v map[string]any
				_ = json.NewDecoder(res.Body).Decode(&v)
				return res.StatusCode, v
			}
			if code, body := api("POST", "/pipelines", pipelinetest.IdleDoc); code != 201 {
				t.Fatalf("deploy: %d %v", code, body)
			}
			if code, body := api("POST", "/pipelines/idle/jobs/ingest/run", ""); code != 201 {
				t.Fatalf("run ingest: %d %v", code, body)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"worker", "--exec", `echo '{"ok":true}'`, "--task", "ingest", "--internal-url", s.internal,
					"--url", s.public, "--poll-wait", "200ms", "--shutdown-timeout", "5s"}, io.Discard, &stderr)
			}()
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("baton worker exited %d; stderr:\n%s", code, stderr.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("baton worker of a job with idle_timeout: 0 did not exit by itself; stderr:\n%s", stderr.String())
			}
			_, view := api("GET", "/pipelines/idle", "")
			counts := view["jobs"].([]any)[0].(map[string]any)["counts"].(map[string]any)
			if counts["completed"] != 1.0 {
				t.Errorf("the ingest job's tasks: %v, want 1 completed", counts)
			}
		})
	}
}
