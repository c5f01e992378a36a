package main

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/metrics/metricstest"
)

// cappedPipeline feeds the cursor events of a manual source to a job capped at 3 tasks that
// coalesces what it holds.
const cappedPipeline = `
name: capped
jobs:
  - {name: feed, activation: source, runtime: ecs_platform, operator: feed, outputs: 1, source: {kind: manual}}
  - name: sink
    activation: reactive
    runtime: ecs_platform
    operator: sink
    outputs: 0
    max_queue_depth: 3
    backpressure_mode: coalesce
    inputs: [{from: {job: feed, output: 0}}]
`

// Backpressure end to end, on a real `baton dev` (SQLite) and `baton server` (PostgreSQL): a
// source reports 20 cursor events into a job capped at 3; the job gets 3 tasks, the other 17
// events are held in one coalesced routing, visible in GET /pipelines/{name} and in /metrics;
// once the 3 tasks are done, one task reads cursors 4 to 20, and nothing is left held.
func TestBackpressureEndToEnd(t *testing.T) {
	forEachRealServer(t, func(t *testing.T, s *metricsServer) {
		s.mustAPI(t, "POST", "/pipelines", cappedPipeline, 201)
		s.mustAPI(t, "POST", "/pipelines/capped/jobs/feed/run", "", 201)
		before := scrape(t, s.metrics)

		// claim claims one task of queue, waiting up to 5 s, and returns the claim.
		complete := func(c map[string]any, events []map[string]any) {
			t.Helper()
			body := map[string]any{"task_id": c["task_id"], "attempt": c["attempt_id"], "lease_token": c["lease_token"], "status": "Completed"}
			if events != nil {
				body["events"] = events
			}
			if code, res := postJSONTo(t, s.internal+"/internal/task-complete", body); code != 200 {
				t.Fatalf("complete %v: %d %v", c["task_id"], code, res)
			}
		}
		feed := s.claim(t, "feed")
		out := feed["outputs"].([]any)[0].(map[string]any)
		var events []map[string]any
		for c := 1; c <= 20; c++ {
			events = append(events, map[string]any{"dataset_uuid": out["dataset_uuid"], "dataset_version": out["dataset_version"], "cursor": c})
		}
		complete(feed, events)

		// The router holds what the job cannot take: wait for it to have routed all 20.
		var bp map[string]any
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, view := s.api(t, "GET", "/pipelines/capped", "")
			for _, j := range view["jobs"].([]any) {
				if j := j.(map[string]any); j["name"] == "sink" {
					bp, _ = j["backpressure"].(map[string]any)
				}
			}
			if bp != nil && bp["held_events"] == float64(17) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if bp["state"] != "paused" || bp["mode"] != "coalesce" || bp["depth"] != float64(3) || bp["held"] != float64(1) || bp["held_events"] != float64(17) {
			t.Fatalf("the capped job's backpressure: %v; want paused, 3 queued, 1 routing holding 17 events", bp)
		}

		var ranges [][2]float64
		read := func(c map[string]any) {
			in := c["inputs"].([]any)[0].(map[string]any)
			first, _ := in["cursor"].(float64)
			last, ok := in["cursor_end"].(float64)
			if !ok {
				last = first
			}
			ranges = append(ranges, [2]float64{first, last})
		}
		for range 3 {
			c := s.claim(t, "sink")
			read(c)
			complete(c, nil)
		}
		c := s.claim(t, "sink") // released once the backlog drained
		read(c)
		complete(c, nil)
		if want := [][2]float64{{1, 1}, {2, 2}, {3, 3}, {4, 20}}; len(ranges) != 4 || ranges[3] != want[3] || ranges[0] != want[0] {
			t.Fatalf("the tasks read cursors %v, want %v", ranges, want)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, view := s.api(t, "GET", "/pipelines/capped", "")
			for _, j := range view["jobs"].([]any) {
				if j := j.(map[string]any); j["name"] == "sink" {
					bp, _ = j["backpressure"].(map[string]any)
				}
			}
			if bp["state"] == "open" || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if bp["state"] != "open" || bp["held"] != float64(0) || bp["held_events"] != float64(0) || bp["paused_since"] != nil {
			t.Errorf("after draining: %v; want open, nothing held", bp)
		}

		after := scrape(t, s.metrics)
		for _, w := range []struct {
			name string
			want float64
		}{
			{"baton_backpressure_events_held_total", 17},
			{"baton_backpressure_events_coalesced_total", 16},
			{"baton_backpressure_events_released_total", 17},
			{"baton_backpressure_pause_duration_seconds", 1}, // the histogram's count: one pause ended
		} {
			if got := metricstest.Sum(after[w.name]) - metricstest.Sum(before[w.name]); got != w.want {
				t.Errorf("%s moved by %v, want %v", w.name, got, w.want)
			}
		}
	})
}
