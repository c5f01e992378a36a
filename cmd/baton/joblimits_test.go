package main

import (
	"testing"
)

// limitsPipeline: two manual sources on one queue, one high priority with its own lease,
// timeout and attempts, the other low priority with the defaults' limits.
const limitsPipeline = `
name: limits
defaults: {max_attempts: 5, priority: low}
jobs:
  - {name: urgent, activation: source, runtime: ecs_platform, operator: work, outputs: 0, source: {kind: manual},
     priority: high, max_attempts: 2, heartbeat_timeout_seconds: 30, timeout_seconds: 60}
  - {name: routine, activation: source, runtime: ecs_platform, operator: work, outputs: 0, source: {kind: manual}}
`

// Per-job heartbeat_timeout_seconds, timeout_seconds, max_attempts and priority end to end, on a
// real `baton dev` (SQLite) and `baton server` (PostgreSQL): of two tasks waiting on one queue the
// high-priority job's is claimed first, its claim carries the job's lease and timeout, and its
// second failure dead-letters it (max_attempts 2); the other job's task carries the defaults.
func TestJobLimitsEndToEnd(t *testing.T) {
	forEachRealServer(t, func(t *testing.T, s *metricsServer) {
		s.mustAPI(t, "POST", "/pipelines", limitsPipeline, 201)
		for _, job := range []string{"routine", "urgent"} { // the low one first: older
			s.mustAPI(t, "POST", "/pipelines/limits/jobs/"+job+"/run", "", 201)
		}
		fail := func(c map[string]any) map[string]any {
			t.Helper()
			code, res := postJSONTo(t, s.internal+"/internal/worker/fail", map[string]any{"worker_id": "w", "job_id": c["job_id"],
				"attempt_id": c["attempt_id"], "lease_token": c["lease_token"],
				"error": map[string]any{"code": "INFRASTRUCTURE", "message": "flaky", "retryable": true}})
			if code != 200 {
				t.Fatalf("fail: %d %v", code, res)
			}
			return res
		}
		first := s.claim(t, "work")
		job, _ := first["job"].(map[string]any)
		if job["name"] != "urgent" || first["lease_ttl_seconds"] != 30.0 || first["timeout_seconds"] != 60.0 {
			t.Fatalf("the first claim: job %v, lease %v s, timeout %v s; want urgent, 30, 60", job["name"], first["lease_ttl_seconds"], first["timeout_seconds"])
		}
		if res := fail(first); res["requeued"] != true {
			t.Fatalf("the first failure: %v, want a retry", res)
		}
		// The retry backs off; meanwhile the routine task is claimed, with the defaults.
		second := s.claim(t, "work")
		if j, _ := second["job"].(map[string]any); j["name"] == "urgent" {
			if res := fail(second); res["dlq"] != true || res["requeued"] != false {
				t.Fatalf("urgent's second failure: %v, want it dead-lettered (max_attempts 2)", res)
			}
			second = s.claim(t, "work")
		} else {
			third := s.claim(t, "work")
			if res := fail(third); res["dlq"] != true {
				t.Fatalf("urgent's second failure: %v, want it dead-lettered (max_attempts 2)", res)
			}
		}
		if j, _ := second["job"].(map[string]any); j["name"] != "routine" || second["lease_ttl_seconds"] != 90.0 {
			t.Fatalf("the routine claim: job %v, lease %v s; want routine with the default lease of 90 s", j["name"], second["lease_ttl_seconds"])
		}
	})
}
