package dispatch_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/metrics/metricstest"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// TestMetricsCountTransitions drives a dispatcher through claims, reports, refusals, a reaped
// lease and a dead letter, with group commit on and off, and checks every counter it moved.
func TestMetricsCountTransitions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		groupCommit bool
	}{{"GroupCommit", true}, {"OneTransactionEach", false}} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.New()
			e := newEnv(t, storetest.OpenSQLite(t), func(c *dispatch.Config) {
				c.Metrics = m
				c.GroupCommit.Off = !tc.groupCommit
			})
			reg := m.Registry()
			one := 1
			job := e.Submit(spec("a"), spec("b", "a"), spec("c"))
			e.Succeed(e.Claim(job, "a"))
			c := e.Claim(job, "c")
			if res := e.Fail(c, lifecycle.Infrastructure); !res.Requeued {
				t.Fatalf("c's failure: %+v, want a retry", res)
			}
			// Refusals: the failed attempt's heartbeat (it ended), a heartbeat with a lease
			// token that is not the task's, a claim of a task that completed.
			if _, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken}); !errors.Is(err, dispatch.ErrTaskExpired) {
				t.Fatalf("heartbeat of an ended attempt: %v", err)
			}
			if _, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: e.Task(job, "a").ID, LeaseToken: "not-the-lease"}); !errors.Is(err, dispatch.ErrLeaseMismatch) {
				t.Fatalf("heartbeat with a wrong lease: %v", err)
			}
			if _, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: e.Task(job, "a").ID, WorkerID: "w"}); err == nil {
				t.Fatal("claimed a completed task")
			}
			// b's lease runs out: the reaper times it out and schedules a retry.
			b := e.Claim(job, "b")
			if _, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: b.Task.ID, LeaseToken: b.Task.LeaseToken}); err != nil {
				t.Fatal(err)
			}
			e.Clock.Advance(2 * dispatch.DefaultDefaults.HeartbeatTimeout)
			if n := e.Reap(); n != 1 {
				t.Fatalf("reaped %d tasks, want 1", n)
			}
			// A task with one attempt fails for good: a dead letter.
			last := lifecycle.TaskSpec{Key: "d", Name: "work", MaxAttempts: &one}
			job2 := e.Submit(last)
			if res := e.Fail(e.Claim(job2, "d"), lifecycle.DataQuality); !res.DeadLettered {
				t.Fatalf("d's failure: %+v, want a dead letter", res)
			}
			if _, err := e.D.CancelJob(e.Ctx, tenant, job2.ID, ""); !errors.Is(err, dispatch.ErrJobFinished) {
				t.Fatalf("cancel of a finished job: %v", err)
			}
			// With nothing ready, ClaimNext claims nothing: no transition.
			if got, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"none"}, WorkerID: "w"}); err != nil || len(got) != 0 {
				t.Fatalf("ClaimNext of an empty queue: %v, %v", got, err)
			}

			for _, w := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"baton_transitions_total", []string{"kind", "create", "outcome", "ok"}, 2},
				{"baton_transitions_total", []string{"kind", "claim", "outcome", "ok"}, 4},
				{"baton_transitions_total", []string{"kind", "claim", "outcome", "refused"}, 1},
				{"baton_transitions_total", []string{"kind", "complete", "outcome", "ok"}, 1},
				{"baton_transitions_total", []string{"kind", "fail", "outcome", "ok"}, 2},
				{"baton_transitions_total", []string{"kind", "heartbeat", "outcome", "ok"}, 1},
				{"baton_transitions_total", []string{"kind", "heartbeat", "outcome", "refused"}, 2},
				{"baton_transitions_total", []string{"kind", "expire", "outcome", "ok"}, 1},
				{"baton_transitions_total", []string{"kind", "cancel", "outcome", "refused"}, 1},
				{"baton_transitions_total", []string{"outcome", "error"}, 0},
				{"baton_task_retries_total", []string{"category", "INFRASTRUCTURE"}, 1},
				{"baton_task_retries_total", []string{"category", "TIMEOUT"}, 1},
				{"baton_task_retries_total", nil, 2},
				{"baton_task_dead_letters_total", []string{"category", "DATA_QUALITY"}, 1},
				{"baton_task_dead_letters_total", nil, 1},
				{"baton_reaper_expiries_total", []string{"reason", "lease_expired"}, 1},
				{"baton_reaper_expiries_total", nil, 1},
				{"baton_task_handoff_seconds", nil, 4},
			} {
				if got := metricstest.Sample(t, reg, w.name, w.labels...); got != w.want {
					t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.want)
				}
			}
			// Each transition went through a group commit of its own here (one at a time).
			commits := metricstest.Sample(t, reg, "baton_commit_batch_transitions")
			if tc.groupCommit && commits < 12 {
				t.Errorf("group commits observed: %v, want one per transition at least (12)", commits)
			}
			if !tc.groupCommit && commits != 0 {
				t.Errorf("group commits observed with group commit off: %v", commits)
			}
		})
	}
}

// TestMetricsHandOff checks the hand-off latency: from a task's available time to its claim.
func TestMetricsHandOff(t *testing.T) {
	m := metrics.New()
	e := newEnv(t, storetest.OpenSQLite(t), func(c *dispatch.Config) { c.Metrics = m })
	job := e.Submit(spec("a"))
	e.Clock.Advance(3 * time.Second)
	e.Claim(job, "a")
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "baton_task_handoff_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
				t.Fatalf("hand-off: %d samples summing to %vs, want one of 3s", h.GetSampleCount(), h.GetSampleSum())
			}
			return
		}
	}
	t.Fatal("no baton_task_handoff_seconds")
}
