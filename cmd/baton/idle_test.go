package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
)

// idle_timeout end to end, on a real `baton dev` (SQLite) and `baton server` (PostgreSQL): a
// `baton worker` that runs a task of a job with idle_timeout: 0 exits 0 by itself once its queue
// is empty, the task completed.
func TestIdleTimeoutEndToEnd(t *testing.T) {
	forEachRealServer(t, func(t *testing.T, s *metricsServer) {
		s.mustAPI(t, "POST", "/pipelines", pipelinetest.IdleDoc, 201)
		s.mustAPI(t, "POST", "/pipelines/idle/jobs/ingest/run", "", 201)
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
		_, view := s.api(t, "GET", "/pipelines/idle", "")
		counts := view["jobs"].([]any)[0].(map[string]any)["counts"].(map[string]any)
		if counts["completed"] != 1.0 {
			t.Errorf("the ingest job's tasks: %v, want 1 completed", counts)
		}
	})
}
