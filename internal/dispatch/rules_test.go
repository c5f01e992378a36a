package dispatch_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestRule1_ClaimTakesPendingTaskIntoRunningUnderNewLease(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		tk := e.task(job, "a")
		if tk.Status != lifecycle.Running || tk.Attempt != 1 || tk.LeaseToken == "" || tk.LeaseToken != c.Task.LeaseToken {
			t.Fatalf("after claim: status %s attempt %d token %q (claim's %q)", tk.Status, tk.Attempt, tk.LeaseToken, c.Task.LeaseToken)
		}
		if tk.WorkerID != "w-a" || !tk.StartedAt.Equal(epoch) || !tk.LeaseExpiresAt.Equal(epoch.Add(90*time.Second)) {
			t.Errorf("worker %q started %v lease until %v", tk.WorkerID, tk.StartedAt, tk.LeaseExpiresAt)
		}
		if c.HeartbeatInterval != 30*time.Second {
			t.Errorf("heartbeat interval %v, want 30s", c.HeartbeatInterval)
		}
		// The running attempt is on the task row; the task's view lists it.
		detail, err := e.d.GetTask(e.ctx, tenant, tk.ID)
		if err != nil || len(detail.Attempts) != 1 {
			t.Fatalf("task view: %+v, %v; want one attempt", detail, err)
		}
		if a := detail.Attempts[0]; a.Attempt != 1 || a.WorkerID != "w-a" || a.LeaseToken != tk.LeaseToken || !a.StartedAt.Equal(epoch) || a.Outcome != "" {
			t.Errorf("running attempt %+v", a)
		}
		wantEvents(t, e.events(job, "a"), dispatch.EventTaskPending, dispatch.EventTaskStarted)
		// It is stored when it ends.
		e.succeed(c)
		a, err := st.GetAttempt(e.ctx, tk.ID, 1)
		if err != nil || a.WorkerID != "w-a" || a.LeaseToken != tk.LeaseToken || !a.StartedAt.Equal(epoch) || a.Outcome != store.OutcomeSucceeded {
			t.Errorf("attempt row %+v, %v", a, err)
		}
	})
}

func TestRule1_TwoClaimsRacing_ExactlyOneWins(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		specs := make([]lifecycle.TaskSpec, 25)
		for i := range specs {
			specs[i] = spec(string(rune('a' + i)))
		}
		job := e.submit(specs...)
		for _, s := range specs {
			id := e.task(job, s.Key).ID
			var wg sync.WaitGroup
			results := make([]error, 2)
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, results[i] = e.d.ClaimTask(e.ctx, dispatch.ClaimTaskParams{TaskID: id, WorkerID: "racer"})
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range results {
				var nc *dispatch.NotClaimedError
				switch {
				case err == nil:
					won++
				case errors.As(err, &nc) && nc.Reason == dispatch.NotClaimedAlreadyRunning:
				default:
					t.Fatalf("task %s: unexpected claim error %v", s.Key, err)
				}
			}
			if won != 1 {
				t.Fatalf("task %s: %d claims won, want exactly 1", s.Key, won)
			}
			if tk := e.task(job, s.Key); tk.Attempt != 1 {
				t.Fatalf("task %s: attempt %d after the race, want 1", s.Key, tk.Attempt)
			}
		}
	})
}

func TestRule1_ClaimOfUnclaimableTaskAnswersNotClaimedWithReason(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("running"), spec("done"), spec("canceled"), spec("failed"), spec("waiting", "failed"),
			spec("skipped", "failed"), spec("backoff"))
		e.claim(job, "running")
		e.run(job, "done")
		e.fail(e.claim(job, "failed"), lifecycle.DataQuality) // skips "waiting" and "skipped"
		e.fail(e.claim(job, "backoff"), lifecycle.UserCode)   // retry in 10 s
		if _, err := e.d.CancelTask(e.ctx, e.task(job, "canceled").ID, ""); err != nil {
			t.Fatal(err)
		}
		job2 := e.submit(spec("root"), spec("child", "root"))
		tests := []struct {
			id   string
			want dispatch.NotClaimedReason
		}{
			{e.task(job, "running").ID, dispatch.NotClaimedAlreadyRunning},
			{e.task(job, "done").ID, dispatch.NotClaimedCompleted},
			{e.task(job, "canceled").ID, dispatch.NotClaimedCanceled},
			{e.task(job, "failed").ID, dispatch.NotClaimedFailed},
			{e.task(job, "skipped").ID, dispatch.NotClaimedSkipped},
			{e.task(job, "backoff").ID, dispatch.NotClaimedNotReady},
			{e.task(job2, "child").ID, dispatch.NotClaimedNotReady},
			{"00000000-0000-0000-0000-000000000000", dispatch.NotClaimedNotFound},
		}
		before := len(e.events(job))
		for _, tc := range tests {
			_, err := e.d.ClaimTask(e.ctx, dispatch.ClaimTaskParams{TaskID: tc.id, WorkerID: "w"})
			if nc := wantErr[*dispatch.NotClaimedError](t, err); nc.Reason != tc.want {
				t.Errorf("claim %s: reason %s, want %s", tc.id, nc.Reason, tc.want)
			}
		}
		if after := len(e.events(job)); after != before {
			t.Errorf("refused claims wrote %d events", after-before)
		}
		if tk := e.task(job, "running"); tk.Attempt != 1 {
			t.Errorf("refused claim of a running task changed its attempt to %d", tk.Attempt)
		}
	})
}

func TestRule1_ClaimNextTakesQueuesInOrderAndHigherPriorityFirst(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(
			lifecycle.TaskSpec{Key: "low-urgent", Name: "x", Queue: "low", Priority: 9},
			lifecycle.TaskSpec{Key: "high-1", Name: "x", Queue: "high"},
			lifecycle.TaskSpec{Key: "high-2", Name: "x", Queue: "high", Priority: 5},
			lifecycle.TaskSpec{Key: "other", Name: "x", Queue: "other"},
		)
		claims, err := e.d.ClaimNext(e.ctx, dispatch.ClaimNextParams{Queues: []string{"high", "low"}, WorkerID: "w", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range claims {
			got = append(got, c.Task.Key)
		}
		wantEvents(t, got, "high-2", "high-1", "low-urgent")
		if s := e.status(job, "other"); s != lifecycle.Pending {
			t.Errorf("task of an unnamed queue is %s", s)
		}
		claims, err = e.d.ClaimNext(e.ctx, dispatch.ClaimNextParams{Queues: []string{"high", "low"}, WorkerID: "w", Limit: 10})
		if err != nil || len(claims) != 0 {
			t.Errorf("second claim: %d claims, %v; want none", len(claims), err)
		}
	})
}

// expire lets the lease of a claimed task run out and the reaper time it out.
func (e *env) expire() {
	e.t.Helper()
	e.clock.Advance(91 * time.Second)
	if n := e.reap(); n != 1 {
		e.t.Fatalf("reaped %d tasks, want 1", n)
	}
}

func TestRule2_Fencing_StaleAttemptRejectedWithNoEffect(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"))
		first := e.claim(job, "a")
		e.expire()
		e.clock.Advance(10 * time.Second) // the backoff after attempt 1
		second := e.claim(job, "a")
		before, eventsBefore := e.task(job, "a"), len(e.events(job))

		_, err := e.d.Heartbeat(e.ctx, dispatch.HeartbeatParams{TaskID: first.Task.ID, Attempt: 1, LeaseToken: first.Task.LeaseToken})
		if m := wantErr[*dispatch.AttemptMismatchError](t, err); m.Expected != 2 || m.Received != 1 {
			t.Errorf("heartbeat mismatch %+v", m)
		}
		_, err = e.report(first, store.OutcomeSucceeded, nil)
		wantErr[*dispatch.AttemptMismatchError](t, err)
		_, err = e.report(first, store.OutcomeFailed, &store.TaskError{Category: lifecycle.UserCode})
		wantErr[*dispatch.AttemptMismatchError](t, err)

		after := e.task(job, "a")
		if after.Status != lifecycle.Running || after.Attempt != 2 || after.Output != nil || !after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) {
			t.Errorf("stale calls changed the task: %s attempt %d output %s", after.Status, after.Attempt, after.Output)
		}
		if n := len(e.events(job)); n != eventsBefore {
			t.Errorf("stale calls wrote %d events", n-eventsBefore)
		}
		if s := e.status(job, "b"); s != lifecycle.Waiting {
			t.Errorf("child released by a stale completion: %s", s)
		}
		e.succeed(second)
	})
}

func TestRule2_Fencing_StaleTokenRejectedWithNoEffect(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		eventsBefore := len(e.events(job))
		for _, token := range []string{"", "not-the-token", "00000000-0000-0000-0000-000000000000"} {
			for _, attempt := range []int{1, 0} {
				_, err := e.d.Heartbeat(e.ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: attempt, LeaseToken: token})
				if !errors.Is(err, dispatch.ErrLeaseMismatch) {
					t.Errorf("heartbeat with token %q: %v, want ErrLeaseMismatch", token, err)
				}
				_, err = e.d.Complete(e.ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: attempt, LeaseToken: token, Outcome: store.OutcomeSucceeded})
				if !errors.Is(err, dispatch.ErrLeaseMismatch) {
					t.Errorf("complete with token %q: %v, want ErrLeaseMismatch", token, err)
				}
			}
		}
		if tk := e.task(job, "a"); tk.Status != lifecycle.Running || tk.Output != nil {
			t.Errorf("stale tokens changed the task: %s %s", tk.Status, tk.Output)
		}
		if n := len(e.events(job)); n != eventsBefore {
			t.Errorf("stale tokens wrote %d events", n-eventsBefore)
		}
		// The attempt may also be named by its token alone (the stream-worker dialect sends no
		// attempt).
		if _, err := e.d.Complete(e.ctx, dispatch.CompleteParams{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken, Outcome: store.OutcomeSucceeded}); err != nil {
			t.Errorf("complete by token alone: %v", err)
		}
	})
}

func TestRule3_RepeatedCompletionIsIdempotent(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"), spec("c"))
		c := e.claim(job, "a")
		first := e.succeed(c)
		second := e.succeed(c)
		if first.Duplicate || !second.Duplicate || second.Status != lifecycle.Completed {
			t.Errorf("first %+v, second %+v", first, second)
		}
		if n := count(e.events(job, "a"), dispatch.EventTaskCompleted); n != 1 {
			t.Errorf("%d Task Completed events, want 1", n)
		}
		if n := count(e.events(job, "b"), dispatch.EventTaskPending); n != 1 {
			t.Errorf("child released %d times, want once", n)
		}
		if j := e.job(job.ID); j.UnfinishedTasks != 2 {
			t.Errorf("job has %d unfinished tasks, want 2", j.UnfinishedTasks)
		}
		// A different outcome for the same attempt is a conflict, not a second effect.
		if _, err := e.report(c, store.OutcomeFailed, &store.TaskError{Category: lifecycle.UserCode}); !errors.Is(err, dispatch.ErrOutcomeConflict) {
			t.Errorf("conflicting outcome: %v", err)
		}
		// A repeated failure answers the same retry decision again.
		f := e.claim(job, "c")
		r1, r2 := e.fail(f, lifecycle.Infrastructure), e.fail(f, lifecycle.Infrastructure)
		if !r1.Requeued || !r2.Requeued || !r2.Duplicate || r2.Status != lifecycle.Pending {
			t.Errorf("repeated failure: %+v then %+v", r1, r2)
		}
		if n := count(e.events(job, "c"), dispatch.EventTaskRetrying); n != 1 {
			t.Errorf("%d retry events, want 1", n)
		}
	})
}

func TestRule3_DuplicateClaimIsHarmless(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		_, err := e.d.ClaimTask(e.ctx, dispatch.ClaimTaskParams{TaskID: c.Task.ID, WorkerID: "again"})
		wantErr[*dispatch.NotClaimedError](t, err)
		if tk := e.task(job, "a"); tk.Attempt != 1 || tk.LeaseToken != c.Task.LeaseToken || tk.WorkerID != "w-a" {
			t.Errorf("duplicate claim changed the lease: attempt %d worker %s", tk.Attempt, tk.WorkerID)
		}
		e.succeed(c)
	})
}

func TestRule4_HeartbeatExtendsTheLease(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		for i := 0; i < 6; i++ {
			e.clock.Advance(60 * time.Second)
			res, err := e.d.Heartbeat(e.ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken})
			if err != nil {
				t.Fatalf("heartbeat %d: %v", i, err)
			}
			if want := e.clock.Now().Add(90 * time.Second); !res.LeaseExpiresAt.Equal(want) || res.ShouldCancel {
				t.Fatalf("heartbeat %d: lease until %v (want %v), shouldCancel %v", i, res.LeaseExpiresAt, want, res.ShouldCancel)
			}
			if n := e.reap(); n != 0 {
				t.Fatalf("reaped a task that heartbeats")
			}
		}
		// Heartbeat events are sampled: one at the first beat (60 s), the next five minutes later.
		if n := count(e.events(job, "a"), dispatch.EventTaskHeartbeat); n != 2 {
			t.Errorf("%d heartbeat events over 6 minutes of beats, want 2", n)
		}
	})
}

func TestRule4_HeartbeatAnswersShouldCancelWhenCancelRequested(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		if _, err := e.d.CancelJob(e.ctx, tenant, job.ID, ""); err != nil {
			t.Fatal(err)
		}
		res, err := e.d.Heartbeat(e.ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken})
		if err != nil || !res.ShouldCancel || res.CancelReason != "user_requested" {
			t.Fatalf("heartbeat after cancel: %+v, %v", res, err)
		}
	})
}

func TestRule4_HeartbeatAfterTimeoutAnswersTaskExpired(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		for _, reaped := range []bool{true, false} {
			e := newEnv(t, st)
			job := e.submit(spec("a"))
			c := e.claim(job, "a")
			e.clock.Advance(91 * time.Second)
			if reaped {
				e.reap()
			}
			_, err := e.d.Heartbeat(e.ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken})
			if !errors.Is(err, dispatch.ErrTaskExpired) {
				t.Fatalf("reaped=%v: heartbeat after timeout: %v, want ErrTaskExpired", reaped, err)
			}
			// Either way the timeout is applied exactly once.
			tk := e.task(job, "a")
			if tk.Status != lifecycle.Pending || count(e.events(job, "a"), dispatch.EventTaskTimeout) != 1 {
				t.Errorf("reaped=%v: task %s, events %q", reaped, tk.Status, e.events(job, "a"))
			}
		}
	})
}

func TestRule5_ReaperTimesOutExpiredLeaseAndRetries(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		e.claim(job, "a")
		e.clock.Advance(89 * time.Second)
		if n := e.reap(); n != 0 {
			t.Fatalf("reaped %d tasks before the lease expired", n)
		}
		e.clock.Advance(2 * time.Second)
		if n := e.reap(); n != 1 {
			t.Fatalf("reaped %d tasks after the lease expired, want 1", n)
		}
		tk := e.task(job, "a")
		if tk.Status != lifecycle.Pending || tk.Error == nil || tk.Error.Category != lifecycle.Timeout || tk.Error.Reason != lifecycle.ReasonHeartbeatTimeout {
			t.Fatalf("after timeout: %s, error %+v", tk.Status, tk.Error)
		}
		if want := e.clock.Now().Truncate(time.Millisecond).Add(10 * time.Second); !tk.AvailableAt.Equal(want) {
			t.Errorf("retry at %v, want %v", tk.AvailableAt, want)
		}
		a, _ := st.GetAttempt(e.ctx, tk.ID, 1)
		if a.Outcome != store.OutcomeTimedOut || a.Result != lifecycle.Pending {
			t.Errorf("attempt outcome %s result %s", a.Outcome, a.Result)
		}
		wantEvents(t, e.events(job, "a"), dispatch.EventTaskPending, dispatch.EventTaskStarted, dispatch.EventTaskTimeout, dispatch.EventTaskRetrying)
	})
}

func TestRule5_ReaperEnforcesTheExecutionDeadline(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(lifecycle.TaskSpec{Key: "a", Name: "work", TimeoutSeconds: new(45)})
		c := e.claim(job, "a")
		for i := 0; i < 2; i++ {
			e.clock.Advance(20 * time.Second)
			if _, err := e.d.Heartbeat(e.ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken}); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(6 * time.Second) // 46 s after the claim, lease still good
		if n := e.reap(); n != 1 {
			t.Fatalf("reaped %d, want the task past its deadline", n)
		}
		if tk := e.task(job, "a"); tk.Error == nil || tk.Error.Reason != lifecycle.ReasonExecutionTimeout {
			t.Errorf("error %+v, want EXECUTION_TIMEOUT", tk.Error)
		}
	})
}

func TestRule5_ReaperLoopActsWithinASecondOfExpiry(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(lifecycle.TaskSpec{Key: "a", Name: "work", HeartbeatTimeoutSeconds: new(5)})
		e.claim(job, "a")
		r := e.d.NewReaper()
		r.Start(e.ctx)
		defer r.Stop()
		// Each time the reaper sleeps, move the clock by its longest sleep, one second.
		for i := 0; i < 5; i++ {
			if err := e.clock.BlockUntilContext(e.ctx, 1); err != nil {
				t.Fatal(err)
			}
			if e.status(job, "a") != lifecycle.Running {
				t.Fatalf("timed out after %d s, before its 5 s lease expired", i)
			}
			e.clock.Advance(time.Second)
		}
		if err := e.clock.BlockUntilContext(e.ctx, 1); err != nil {
			t.Fatal(err)
		}
		if s := e.status(job, "a"); s != lifecycle.Pending {
			t.Fatalf("when its 5 s lease expired the task is %s, want pending (timed out)", s)
		}
		r.Stop()
		r.Stop() // idempotent
	})
}

func TestRule6_LateReplyAcceptedBeforeNextClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"))
		c := e.claim(job, "a")
		e.expire()
		res := e.succeed(c)
		if res.Status != lifecycle.Completed || res.Duplicate {
			t.Fatalf("late reply: %+v", res)
		}
		// The scheduled retry is gone: nothing of "a" is claimable after the backoff.
		e.clock.Advance(time.Minute)
		_, err := e.d.ClaimTask(e.ctx, dispatch.ClaimTaskParams{TaskID: c.Task.ID, WorkerID: "w"})
		if nc := wantErr[*dispatch.NotClaimedError](t, err); nc.Reason != dispatch.NotClaimedCompleted {
			t.Errorf("claim after late reply: %s", nc.Reason)
		}
		if s := e.status(job, "b"); s != lifecycle.Pending {
			t.Errorf("child is %s after the late reply, want pending", s)
		}
	})
}

func TestRule6_LateReplyRejectedAfterNextClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		first := e.claim(job, "a")
		e.expire()
		e.clock.Advance(10 * time.Second)
		second := e.claim(job, "a")
		_, err := e.report(first, store.OutcomeSucceeded, nil)
		if m := wantErr[*dispatch.AttemptMismatchError](t, err); m.Expected != 2 {
			t.Errorf("late reply after the next claim: %+v", m)
		}
		if tk := e.task(job, "a"); tk.Status != lifecycle.Running || tk.Output != nil {
			t.Errorf("late reply had an effect: %s %s", tk.Status, tk.Output)
		}
		if res := e.succeed(second); res.Status != lifecycle.Completed {
			t.Errorf("current attempt: %+v", res)
		}
	})
}

func TestRule7_RetryDecisionForEachErrorCategory(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		yes, no := true, false
		tests := []struct {
			category  lifecycle.Category
			retryable *bool
			want      bool
		}{
			{lifecycle.UserCode, nil, true},
			{lifecycle.Infrastructure, nil, true},
			{lifecycle.Timeout, nil, true},
			{lifecycle.DataQuality, nil, false},
			{lifecycle.Configuration, nil, false},
			{lifecycle.Cancelled, nil, false},
			{lifecycle.DataQuality, &yes, true},
			{lifecycle.UserCode, &no, false},
			{"", nil, true}, // no category: USER_CODE
		}
		e := newEnv(t, st)
		for _, tc := range tests {
			job := e.submit(spec("a"))
			c := e.claim(job, "a")
			res, err := e.report(c, store.OutcomeFailed, &store.TaskError{Category: tc.category, Retryable: tc.retryable, Message: "x"})
			if err != nil {
				t.Fatal(err)
			}
			wantStatus := lifecycle.Failed
			if tc.want {
				wantStatus = lifecycle.Pending
			}
			if res.Requeued != tc.want || res.DeadLettered == tc.want || res.Status != wantStatus {
				t.Errorf("%q retryable=%v: %+v, want requeued=%v", tc.category, tc.retryable, res, tc.want)
			}
			if s := e.status(job, "a"); s != wantStatus {
				t.Errorf("%q: task %s, want %s", tc.category, s, wantStatus)
			}
		}
		_, err := e.d.Complete(e.ctx, dispatch.CompleteParams{TaskID: "x", LeaseToken: "y", Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: "OOPS"}})
		wantErr[*dispatch.InvalidError](t, err)
	})
}

func TestRule7_BackoffGrowsExponentiallyUpToItsCap(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(lifecycle.TaskSpec{Key: "a", Name: "work", MaxAttempts: new(6), BackoffBaseMs: new(int64(1000)), BackoffMaxMs: new(int64(5000))})
		for _, want := range []time.Duration{1, 2, 4, 5, 5} {
			c := e.claim(job, "a")
			e.fail(c, lifecycle.UserCode)
			tk := e.task(job, "a")
			if got := tk.AvailableAt.Sub(e.clock.Now()); got != want*time.Second {
				t.Errorf("after attempt %d: backoff %v, want %v", c.Task.Attempt, got, want*time.Second)
			}
			// Not claimable until the backoff has passed.
			e.clock.Advance(want*time.Second - time.Millisecond)
			_, err := e.d.ClaimTask(e.ctx, dispatch.ClaimTaskParams{TaskID: tk.ID, WorkerID: "w"})
			wantErr[*dispatch.NotClaimedError](t, err)
			e.clock.Advance(time.Millisecond)
		}
	})
}

func TestRule7_BackoffJitterStaysWithinBounds(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		d, err := dispatch.New(st, dispatch.Config{}) // real clock, real jitter
		if err != nil {
			t.Fatal(err)
		}
		e := &env{t: t, ctx: t.Context(), st: st, d: d}
		for i := 0; i < 20; i++ {
			job := e.submit(lifecycle.TaskSpec{Key: "a", Name: "work", BackoffBaseMs: new(int64(10_000))})
			before := time.Now()
			e.fail(e.claim(job, "a"), lifecycle.UserCode)
			after := time.Now()
			at := e.task(job, "a").AvailableAt
			lo, hi := before.Add(5*time.Second).Add(-time.Millisecond), after.Add(15*time.Second)
			if at.Before(lo) || !at.Before(hi) {
				t.Fatalf("retry at %v, want within [%v, %v)", at, lo, hi)
			}
		}
	})
}

func TestRule7_DeadLetteredAfterMaxAttempts(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("other"))
		id := e.task(job, "a").ID
		for attempt := 1; attempt <= 3; attempt++ {
			res := e.fail(e.claim(job, "a"), lifecycle.Infrastructure)
			if attempt < 3 && !res.Requeued {
				t.Fatalf("attempt %d not retried: %+v", attempt, res)
			}
			if attempt == 3 && (!res.DeadLettered || res.Status != lifecycle.Failed) {
				t.Fatalf("attempt 3 not dead-lettered: %+v", res)
			}
			e.clock.Advance(time.Hour)
		}
		tk := e.task(job, "a")
		if tk.ID != id || tk.Attempt != 3 || tk.DeadLetteredAt.IsZero() || tk.Error == nil || tk.Error.Category != lifecycle.Infrastructure {
			t.Errorf("dead-lettered task: id %s attempt %d dead %v error %+v", tk.ID, tk.Attempt, tk.DeadLetteredAt, tk.Error)
		}
		dead, err := e.d.DeadLetters(e.ctx, tenant, 0, 10)
		if err != nil || len(dead) != 1 || dead[0].ID != id {
			t.Errorf("dead letters: %v, %v", dead, err)
		}
		if others, _ := e.d.DeadLetters(e.ctx, "someone-else", 0, 10); len(others) != 0 {
			t.Errorf("another tenant sees %d dead letters", len(others))
		}
		if _, tasks, _ := e.d.GetJob(e.ctx, tenant, job.ID); len(tasks) != 2 {
			t.Errorf("retries created task rows: %d tasks", len(tasks))
		}
		wantEvents(t, e.events(job, "a"), "Task Pending",
			"Task Processing Started", "Task Processing Failed",
			"Task Processing Started", "Task Processing Failed",
			"Task Processing Started", "Task Failed")
	})
}

func TestRule8_CancelCancelsWaitingAndPendingTasksAtOnce(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"), spec("c"))
		j, err := e.d.CancelJob(e.ctx, tenant, job.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Canceled, "b": lifecycle.Canceled, "c": lifecycle.Canceled})
		if j.Status != lifecycle.JobCanceled || j.FinishedAt.IsZero() || e.job(job.ID).Status != lifecycle.JobCanceled {
			t.Errorf("job %s finished %v", j.Status, j.FinishedAt)
		}
		evs := e.events(job)
		if count(evs, dispatch.EventTaskCanceled) != 3 || count(evs, dispatch.EventJobCanceled) != 1 {
			t.Errorf("events %q", evs)
		}
		if _, err := e.d.CancelJob(e.ctx, tenant, job.ID, ""); !errors.Is(err, dispatch.ErrJobFinished) {
			t.Errorf("cancel of a finished job: %v", err)
		}
		if _, err := e.d.CancelJob(e.ctx, "other-tenant", job.ID, ""); !errors.Is(err, dispatch.ErrJobNotFound) {
			t.Errorf("cancel by another tenant: %v", err)
		}
	})
}

func TestRule8_RunningTaskIsAskedToCancelAndReportsCancelled(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"), spec("c"))
		c := e.claim(job, "a")
		j, err := e.d.CancelJob(e.ctx, tenant, job.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != lifecycle.JobProcessing {
			t.Fatalf("job %s while a task still runs", j.Status)
		}
		wantStatus(t, e, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Running, "b": lifecycle.Canceled, "c": lifecycle.Canceled})
		if _, err := e.d.CancelJob(e.ctx, tenant, job.ID, ""); err != nil {
			t.Errorf("second cancel: %v", err)
		}
		res, err := e.report(c, store.OutcomeCanceled, nil)
		if err != nil || res.Status != lifecycle.Canceled {
			t.Fatalf("report cancelled: %+v %v", res, err)
		}
		if j := e.job(job.ID); j.Status != lifecycle.JobCanceled {
			t.Errorf("job %s, want canceled", j.Status)
		}
		if n := count(e.events(job), dispatch.EventJobFailure); n != 0 {
			t.Errorf("a canceled job reported %d failures", n)
		}
	})
}

func TestRule8_CancelGraceTimeoutFailsTheTask(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		if _, err := e.d.CancelJob(e.ctx, tenant, job.ID, ""); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(29 * time.Second)
		if _, err := e.d.Heartbeat(e.ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		if n := e.reap(); n != 0 {
			t.Fatalf("reaped within the grace period")
		}
		e.clock.Advance(2 * time.Second) // heartbeats do not extend the grace
		if n := e.reap(); n != 1 {
			t.Fatalf("reaped %d after the grace period, want 1", n)
		}
		tk := e.task(job, "a")
		if tk.Status != lifecycle.Failed || tk.Error == nil || tk.Error.Reason != lifecycle.ReasonCancelTimeout {
			t.Errorf("after grace: %s %+v, want failed CANCEL_TIMEOUT", tk.Status, tk.Error)
		}
		if j := e.job(job.ID); j.Status != lifecycle.JobCanceled {
			t.Errorf("job %s, want canceled", j.Status)
		}
		if _, err := e.report(c, store.OutcomeCanceled, nil); !errors.Is(err, dispatch.ErrTaskExpired) {
			t.Errorf("report after the grace period: %v, want ErrTaskExpired", err)
		}
	})
}

func TestRule8_CancelOneTaskSkipsItsDescendantsOnly(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"), spec("c"))
		if _, err := e.d.CancelTask(e.ctx, e.task(job, "a").ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.CancelTask(e.ctx, e.task(job, "a").ID, ""); err != nil {
			t.Errorf("second cancel: %v", err)
		}
		wantStatus(t, e, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Canceled, "b": lifecycle.Skipped, "c": lifecycle.Pending})
		e.run(job, "c")
		if j := e.job(job.ID); j.Status != lifecycle.JobPartialFailure {
			t.Errorf("job %s, want partial_failure", j.Status)
		}
		_, err := e.d.CancelTask(e.ctx, e.task(job, "c").ID, "")
		if te := wantErr[*dispatch.TerminalError](t, err); te.State != lifecycle.Completed {
			t.Errorf("cancel of a completed task: %v", te)
		}
	})
}

func TestRule9_ChildBecomesPendingWhenItsLastParentCompletes(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"), spec("c", "a"), spec("d", "b", "c"))
		e.run(job, "a", "b")
		if s := e.status(job, "d"); s != lifecycle.Waiting {
			t.Fatalf("d is %s with one parent unfinished", s)
		}
		e.run(job, "c")
		if s := e.status(job, "d"); s != lifecycle.Pending {
			t.Fatalf("d is %s after both parents completed", s)
		}
		c := e.claim(job, "d")
		want := map[string]string{"b": `{"by":"b"}`, "c": `{"by":"c"}`}
		if len(c.DependencyOutputs) != 2 || string(c.DependencyOutputs["b"]) != want["b"] || string(c.DependencyOutputs["c"]) != want["c"] {
			t.Errorf("dependency outputs %s", c.DependencyOutputs)
		}
		msgs, err := st.OutboxAfter(e.ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		woken := map[string]int{}
		for _, m := range msgs {
			var p struct {
				TaskID string `json:"task_id"`
			}
			if err := json.Unmarshal(m.Payload, &p); err != nil || m.Topic != store.TopicTaskReady {
				t.Fatalf("outbox message %s %s: %v", m.Topic, m.Payload, err)
			}
			woken[p.TaskID]++
		}
		for _, k := range []string{"a", "b", "c", "d"} {
			if woken[e.task(job, k).ID] != 1 {
				t.Errorf("task %s has %d wake-ups in the outbox, want 1", k, woken[e.task(job, k).ID])
			}
		}
	})
}

func TestRule9_DescendantsOfFailedTaskSkippedWhileOtherBranchesFinish(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"), spec("c", "b"), spec("x"), spec("y", "x"), spec("join", "c", "y"))
		e.fail(e.claim(job, "a"), lifecycle.DataQuality)
		wantStatus(t, e, job, map[string]lifecycle.TaskStatus{
			"a": lifecycle.Failed, "b": lifecycle.Skipped, "c": lifecycle.Skipped, "join": lifecycle.Skipped, "x": lifecycle.Pending})
		if j := e.job(job.ID); j.Status != lifecycle.JobProcessing || j.FailureDetectedAt.IsZero() {
			t.Fatalf("job %s failure detected %v while x and y still run", j.Status, j.FailureDetectedAt)
		}
		e.run(job, "x", "y")
		if j := e.job(job.ID); j.Status != lifecycle.JobPartialFailure || j.FinishedAt.IsZero() {
			t.Errorf("job %s, want partial_failure", j.Status)
		}
		evs := e.events(job)
		if count(evs, dispatch.EventJobFailure) != 1 || count(evs, dispatch.EventTaskSkipped) != 3 || count(evs, dispatch.EventJobCompleted) != 0 {
			t.Errorf("events %q", evs)
		}
	})
}

func TestRule10_JobStatusAndEventsOfACompletedJob(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b", "a"))
		e.clock.Advance(time.Second)
		e.run(job, "a")
		if j := e.job(job.ID); j.Status != lifecycle.JobProcessing || !j.FinishedAt.IsZero() {
			t.Fatalf("job %s before its last task", j.Status)
		}
		e.run(job, "b")
		j := e.job(job.ID)
		if j.Status != lifecycle.JobCompleted || !j.FinishedAt.Equal(epoch.Add(time.Second)) || j.UnfinishedTasks != 0 {
			t.Errorf("job %s finished %v unfinished %d", j.Status, j.FinishedAt, j.UnfinishedTasks)
		}
		wantEvents(t, e.events(job),
			"Job Created", "Task Pending",
			"Task Processing Started", "Task Completed", "Task Pending",
			"Task Processing Started", "Task Completed", "Job Completed")
	})
}

func TestRule10_JobFailureDetectedOnceAtTheFirstFailure(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b"), spec("c"))
		e.fail(e.claim(job, "a"), lifecycle.Configuration)
		e.fail(e.claim(job, "b"), lifecycle.Configuration)
		if n := count(e.events(job), dispatch.EventJobFailure); n != 1 {
			t.Errorf("%d Job Failure Detected events, want 1", n)
		}
		if j := e.job(job.ID); j.Status != lifecycle.JobProcessing {
			t.Errorf("job %s while c is pending", j.Status)
		}
		e.run(job, "c")
		if j := e.job(job.ID); j.Status != lifecycle.JobPartialFailure {
			t.Errorf("job %s, want partial_failure", j.Status)
		}
	})
}

func TestRule10_ResumeRerunsFailedAndSkippedTasksWithFreshRetryBudget(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(lifecycle.TaskSpec{Key: "a", Name: "work", MaxAttempts: new(2)}, spec("b", "a"), spec("c"))
		if _, err := e.d.ResumeJob(e.ctx, tenant, job.ID); !errors.Is(err, dispatch.ErrJobNotFinished) {
			t.Fatalf("resume while processing: %v", err)
		}
		e.run(job, "c")
		first := e.claim(job, "a")
		e.fail(first, lifecycle.UserCode)
		e.clock.Advance(time.Minute)
		second := e.claim(job, "a")
		e.fail(second, lifecycle.UserCode) // attempts exhausted
		if j := e.job(job.ID); j.Status != lifecycle.JobPartialFailure {
			t.Fatalf("job %s before resume", j.Status)
		}

		res, err := e.d.ResumeJob(e.ctx, tenant, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantEvents(t, res.Resumed, "a", "b")
		if j := e.job(job.ID); j.Status != lifecycle.JobProcessing || !j.FinishedAt.IsZero() || j.UnfinishedTasks != 2 {
			t.Fatalf("job after resume: %s unfinished %d", j.Status, j.UnfinishedTasks)
		}
		wantStatus(t, e, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Pending, "b": lifecycle.Waiting, "c": lifecycle.Completed})

		third := e.claim(job, "a")
		if third.Task.Attempt != 3 {
			t.Errorf("attempt after resume %d, want 3 (numbers are never reused)", third.Task.Attempt)
		}
		// Old tokens can never match again.
		for _, old := range []*dispatch.Claim{first, second} {
			if _, err := e.report(old, store.OutcomeSucceeded, nil); err == nil {
				t.Errorf("attempt %d's report accepted after resume", old.Task.Attempt)
			}
		}
		// A fresh budget: one more failure is retried, though the task already used two attempts.
		if res := e.fail(third, lifecycle.UserCode); !res.Requeued {
			t.Errorf("first failure after resume not retried: %+v", res)
		}
		e.clock.Advance(time.Minute)
		e.run(job, "a", "b")
		if j := e.job(job.ID); j.Status != lifecycle.JobCompleted {
			t.Errorf("job %s after the resumed run", j.Status)
		}
		if n := count(e.events(job), dispatch.EventJobFailure); n != 1 {
			t.Errorf("%d failure events", n)
		}
		if _, err := e.d.ResumeJob(e.ctx, tenant, job.ID); !errors.Is(err, dispatch.ErrNothingToResume) {
			t.Errorf("resume of a completed job: %v", err)
		}
	})
}
