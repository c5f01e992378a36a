package dispatch_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestRule1_ClaimTakesPendingTaskIntoRunningUnderNewLease(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		tk := e.Task(job, "a")
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
		detail, err := e.D.GetTask(e.Ctx, tenant, tk.ID)
		if err != nil || len(detail.Attempts) != 1 {
			t.Fatalf("task view: %+v, %v; want one attempt", detail, err)
		}
		if a := detail.Attempts[0]; a.Attempt != 1 || a.WorkerID != "w-a" || a.LeaseToken != tk.LeaseToken || !a.StartedAt.Equal(epoch) || a.Outcome != "" {
			t.Errorf("running attempt %+v", a)
		}
		wantEvents(t, e.Events(job, "a"), dispatch.EventTaskPending, dispatch.EventTaskStarted)
		// It is stored when it ends.
		e.Succeed(c)
		a, err := st.AttemptGet(e.Ctx, tk.ID, 1)
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
		job := e.Submit(specs...)
		for _, s := range specs {
			id := e.Task(job, s.Key).ID
			var wg sync.WaitGroup
			results := make([]error, 2)
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, results[i] = e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: id, WorkerID: "racer"})
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
			if tk := e.Task(job, s.Key); tk.Attempt != 1 {
				t.Fatalf("task %s: attempt %d after the race, want 1", s.Key, tk.Attempt)
			}
		}
	})
}

func TestRule1_ClaimOfUnclaimableTaskAnswersNotClaimedWithReason(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("running"), spec("done"), spec("canceled"), spec("failed"), spec("waiting", "failed"),
			spec("skipped", "failed"), spec("backoff"))
		e.Claim(job, "running")
		e.Run(job, "done")
		e.Fail(e.Claim(job, "failed"), lifecycle.DataQuality) // skips "waiting" and "skipped"
		e.Fail(e.Claim(job, "backoff"), lifecycle.UserCode)   // retry in 10 s
		if _, err := e.D.CancelTask(e.Ctx, e.Task(job, "canceled").ID, ""); err != nil {
			t.Fatal(err)
		}
		job2 := e.Submit(spec("root"), spec("child", "root"))
		tests := []struct {
			id   string
			want dispatch.NotClaimedReason
		}{
			{e.Task(job, "running").ID, dispatch.NotClaimedAlreadyRunning},
			{e.Task(job, "done").ID, dispatch.NotClaimedCompleted},
			{e.Task(job, "canceled").ID, dispatch.NotClaimedCanceled},
			{e.Task(job, "failed").ID, dispatch.NotClaimedFailed},
			{e.Task(job, "skipped").ID, dispatch.NotClaimedSkipped},
			{e.Task(job, "backoff").ID, dispatch.NotClaimedNotReady},
			{e.Task(job2, "child").ID, dispatch.NotClaimedNotReady},
			{"00000000-0000-0000-0000-000000000000", dispatch.NotClaimedNotFound},
		}
		before := len(e.Events(job))
		for _, tc := range tests {
			_, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: tc.id, WorkerID: "w"})
			if nc := dispatchtest.WantErr[*dispatch.NotClaimedError](t, err); nc.Reason != tc.want {
				t.Errorf("claim %s: reason %s, want %s", tc.id, nc.Reason, tc.want)
			}
		}
		if after := len(e.Events(job)); after != before {
			t.Errorf("refused claims wrote %d events", after-before)
		}
		if tk := e.Task(job, "running"); tk.Attempt != 1 {
			t.Errorf("refused claim of a running task changed its attempt to %d", tk.Attempt)
		}
	})
}

func TestRule1_ClaimNextTakesQueuesInOrderAndHigherPriorityFirst(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(
			lifecycle.TaskSpec{Key: "low-urgent", Name: "x", Queue: "low", Priority: 9},
			lifecycle.TaskSpec{Key: "high-1", Name: "x", Queue: "high"},
			lifecycle.TaskSpec{Key: "high-2", Name: "x", Queue: "high", Priority: 5},
			lifecycle.TaskSpec{Key: "other", Name: "x", Queue: "other"},
		)
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"high", "low"}, WorkerID: "w", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range claims {
			got = append(got, c.Task.Key)
		}
		wantEvents(t, got, "high-2", "high-1", "low-urgent")
		if s := e.Status(job, "other"); s != lifecycle.Pending {
			t.Errorf("task of an unnamed queue is %s", s)
		}
		claims, err = e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"high", "low"}, WorkerID: "w", Limit: 10})
		if err != nil || len(claims) != 0 {
			t.Errorf("second claim: %d claims, %v; want none", len(claims), err)
		}
	})
}

func TestRule2_Fencing_StaleAttemptRejectedWithNoEffect(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"))
		first := e.Claim(job, "a")
		e.Expire()
		e.Clock.Advance(10 * time.Second) // the backoff after attempt 1
		second := e.Claim(job, "a")
		before, eventsBefore := e.Task(job, "a"), len(e.Events(job))

		_, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: first.Task.ID, Attempt: 1, LeaseToken: first.Task.LeaseToken})
		if m := dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err); m.Expected != 2 || m.Received != 1 {
			t.Errorf("heartbeat mismatch %+v", m)
		}
		_, err = e.Report(first, store.OutcomeSucceeded, nil)
		dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err)
		_, err = e.Report(first, store.OutcomeFailed, &store.TaskError{Category: lifecycle.UserCode})
		dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err)

		after := e.Task(job, "a")
		if after.Status != lifecycle.Running || after.Attempt != 2 || after.Output != nil || !after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) {
			t.Errorf("stale calls changed the task: %s attempt %d output %s", after.Status, after.Attempt, after.Output)
		}
		if n := len(e.Events(job)); n != eventsBefore {
			t.Errorf("stale calls wrote %d events", n-eventsBefore)
		}
		if s := e.Status(job, "b"); s != lifecycle.Waiting {
			t.Errorf("child released by a stale completion: %s", s)
		}
		e.Succeed(second)
	})
}

func TestRule2_Fencing_StaleTokenRejectedWithNoEffect(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		eventsBefore := len(e.Events(job))
		for _, token := range []string{"", "not-the-token", "00000000-0000-0000-0000-000000000000"} {
			for _, attempt := range []int{1, 0} {
				_, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: attempt, LeaseToken: token})
				if !errors.Is(err, dispatch.ErrLeaseMismatch) {
					t.Errorf("heartbeat with token %q: %v, want ErrLeaseMismatch", token, err)
				}
				_, err = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: attempt, LeaseToken: token, Outcome: store.OutcomeSucceeded})
				if !errors.Is(err, dispatch.ErrLeaseMismatch) {
					t.Errorf("complete with token %q: %v, want ErrLeaseMismatch", token, err)
				}
			}
		}
		if tk := e.Task(job, "a"); tk.Status != lifecycle.Running || tk.Output != nil {
			t.Errorf("stale tokens changed the task: %s %s", tk.Status, tk.Output)
		}
		if n := len(e.Events(job)); n != eventsBefore {
			t.Errorf("stale tokens wrote %d events", n-eventsBefore)
		}
		// The attempt may also be named by its token alone (the stream-worker dialect sends no
		// attempt).
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken, Outcome: store.OutcomeSucceeded}); err != nil {
			t.Errorf("complete by token alone: %v", err)
		}
	})
}

func TestRule3_RepeatedCompletionIsIdempotent(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"), spec("c"))
		c := e.Claim(job, "a")
		first := e.Succeed(c)
		second := e.Succeed(c)
		if first.Duplicate || !second.Duplicate || second.Status != lifecycle.Completed {
			t.Errorf("first %+v, second %+v", first, second)
		}
		if n := count(e.Events(job, "a"), dispatch.EventTaskCompleted); n != 1 {
			t.Errorf("%d Task Completed events, want 1", n)
		}
		if n := count(e.Events(job, "b"), dispatch.EventTaskPending); n != 1 {
			t.Errorf("child released %d times, want once", n)
		}
		if j := e.Job(job.ID); j.UnfinishedTasks != 2 {
			t.Errorf("job has %d unfinished tasks, want 2", j.UnfinishedTasks)
		}
		// A different outcome for the same attempt is a conflict, not a second effect.
		if _, err := e.Report(c, store.OutcomeFailed, &store.TaskError{Category: lifecycle.UserCode}); !errors.Is(err, dispatch.ErrOutcomeConflict) {
			t.Errorf("conflicting outcome: %v", err)
		}
		// A repeated failure answers the same retry decision again.
		f := e.Claim(job, "c")
		r1, r2 := e.Fail(f, lifecycle.Infrastructure), e.Fail(f, lifecycle.Infrastructure)
		if !r1.Requeued || !r2.Requeued || !r2.Duplicate || r2.Status != lifecycle.Pending {
			t.Errorf("repeated failure: %+v then %+v", r1, r2)
		}
		if n := count(e.Events(job, "c"), dispatch.EventTaskRetrying); n != 1 {
			t.Errorf("%d retry events, want 1", n)
		}
	})
}

func TestRule3_DuplicateClaimIsHarmless(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		_, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: c.Task.ID, WorkerID: "again"})
		dispatchtest.WantErr[*dispatch.NotClaimedError](t, err)
		if tk := e.Task(job, "a"); tk.Attempt != 1 || tk.LeaseToken != c.Task.LeaseToken || tk.WorkerID != "w-a" {
			t.Errorf("duplicate claim changed the lease: attempt %d worker %s", tk.Attempt, tk.WorkerID)
		}
		e.Succeed(c)
	})
}

func TestRule4_HeartbeatExtendsTheLease(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		for i := 0; i < 6; i++ {
			e.Clock.Advance(60 * time.Second)
			res, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken})
			if err != nil {
				t.Fatalf("heartbeat %d: %v", i, err)
			}
			if want := e.Clock.Now().Add(90 * time.Second); !res.LeaseExpiresAt.Equal(want) || res.ShouldCancel {
				t.Fatalf("heartbeat %d: lease until %v (want %v), shouldCancel %v", i, res.LeaseExpiresAt, want, res.ShouldCancel)
			}
			if n := e.Reap(); n != 0 {
				t.Fatalf("reaped a task that heartbeats")
			}
		}
		// Heartbeat events are sampled: one at the first beat (60 s), the next five minutes later.
		if n := count(e.Events(job, "a"), dispatch.EventTaskHeartbeat); n != 2 {
			t.Errorf("%d heartbeat events over 6 minutes of beats, want 2", n)
		}
	})
}

func TestRule4_HeartbeatAnswersShouldCancelWhenCancelRequested(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		if _, err := e.D.CancelJob(e.Ctx, tenant, job.ID, ""); err != nil {
			t.Fatal(err)
		}
		res, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken})
		if err != nil || !res.ShouldCancel || res.CancelReason != "user_requested" {
			t.Fatalf("heartbeat after cancel: %+v, %v", res, err)
		}
	})
}

func TestRule4_HeartbeatAfterTimeoutAnswersTaskExpired(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		for _, reaped := range []bool{true, false} {
			e := newEnv(t, st)
			job := e.Submit(spec("a"))
			c := e.Claim(job, "a")
			e.Clock.Advance(91 * time.Second)
			if reaped {
				e.Reap()
			}
			_, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken})
			if !errors.Is(err, dispatch.ErrTaskExpired) {
				t.Fatalf("reaped=%v: heartbeat after timeout: %v, want ErrTaskExpired", reaped, err)
			}
			// Either way the timeout is applied exactly once.
			tk := e.Task(job, "a")
			if tk.Status != lifecycle.Pending || count(e.Events(job, "a"), dispatch.EventTaskTimeout) != 1 {
				t.Errorf("reaped=%v: task %s, events %q", reaped, tk.Status, e.Events(job, "a"))
			}
		}
	})
}

func TestRule5_ReaperTimesOutExpiredLeaseAndRetries(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		e.Claim(job, "a")
		e.Clock.Advance(89 * time.Second)
		if n := e.Reap(); n != 0 {
			t.Fatalf("reaped %d tasks before the lease expired", n)
		}
		e.Clock.Advance(2 * time.Second)
		if n := e.Reap(); n != 1 {
			t.Fatalf("reaped %d tasks after the lease expired, want 1", n)
		}
		tk := e.Task(job, "a")
		if tk.Status != lifecycle.Pending || tk.Error == nil || tk.Error.Category != lifecycle.Timeout || tk.Error.Reason != lifecycle.ReasonHeartbeatTimeout {
			t.Fatalf("after timeout: %s, error %+v", tk.Status, tk.Error)
		}
		if want := e.Clock.Now().Truncate(time.Millisecond).Add(10 * time.Second); !tk.AvailableAt.Equal(want) {
			t.Errorf("retry at %v, want %v", tk.AvailableAt, want)
		}
		a, _ := st.AttemptGet(e.Ctx, tk.ID, 1)
		if a.Outcome != store.OutcomeTimedOut || a.Result != lifecycle.Pending {
			t.Errorf("attempt outcome %s result %s", a.Outcome, a.Result)
		}
		wantEvents(t, e.Events(job, "a"), dispatch.EventTaskPending, dispatch.EventTaskStarted, dispatch.EventTaskTimeout, dispatch.EventTaskRetrying)
	})
}

func TestRule5_ReaperEnforcesTheExecutionDeadline(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(lifecycle.TaskSpec{Key: "a", Name: "work", TimeoutSeconds: new(45)})
		c := e.Claim(job, "a")
		for i := 0; i < 2; i++ {
			e.Clock.Advance(20 * time.Second)
			if _, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken}); err != nil {
				t.Fatal(err)
			}
		}
		e.Clock.Advance(6 * time.Second) // 46 s after the claim, lease still good
		if n := e.Reap(); n != 1 {
			t.Fatalf("reaped %d, want the task past its deadline", n)
		}
		if tk := e.Task(job, "a"); tk.Error == nil || tk.Error.Reason != lifecycle.ReasonExecutionTimeout {
			t.Errorf("error %+v, want EXECUTION_TIMEOUT", tk.Error)
		}
	})
}

func TestRule5_ReaperLoopActsWithinASecondOfExpiry(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(lifecycle.TaskSpec{Key: "a", Name: "work", HeartbeatTimeoutSeconds: new(5)})
		e.Claim(job, "a")
		r := e.D.NewReaper()
		r.Start(e.Ctx)
		defer r.Stop()
		// Each time the reaper sleeps, move the clock by its longest sleep, one second.
		for i := 0; i < 5; i++ {
			if err := e.Clock.BlockUntilContext(e.Ctx, 1); err != nil {
				t.Fatal(err)
			}
			if e.Status(job, "a") != lifecycle.Running {
				t.Fatalf("timed out after %d s, before its 5 s lease expired", i)
			}
			e.Clock.Advance(time.Second)
		}
		if err := e.Clock.BlockUntilContext(e.Ctx, 1); err != nil {
			t.Fatal(err)
		}
		if s := e.Status(job, "a"); s != lifecycle.Pending {
			t.Fatalf("when its 5 s lease expired the task is %s, want pending (timed out)", s)
		}
		r.Stop()
		r.Stop() // idempotent
	})
}

func TestRule6_LateReplyAcceptedBeforeNextClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"))
		c := e.Claim(job, "a")
		e.Expire()
		res := e.Succeed(c)
		if res.Status != lifecycle.Completed || res.Duplicate {
			t.Fatalf("late reply: %+v", res)
		}
		// The scheduled retry is gone: nothing of "a" is claimable after the backoff.
		e.Clock.Advance(time.Minute)
		_, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: c.Task.ID, WorkerID: "w"})
		if nc := dispatchtest.WantErr[*dispatch.NotClaimedError](t, err); nc.Reason != dispatch.NotClaimedCompleted {
			t.Errorf("claim after late reply: %s", nc.Reason)
		}
		if s := e.Status(job, "b"); s != lifecycle.Pending {
			t.Errorf("child is %s after the late reply, want pending", s)
		}
	})
}

func TestRule6_LateReplyRejectedAfterNextClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		first := e.Claim(job, "a")
		e.Expire()
		e.Clock.Advance(10 * time.Second)
		second := e.Claim(job, "a")
		_, err := e.Report(first, store.OutcomeSucceeded, nil)
		if m := dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err); m.Expected != 2 {
			t.Errorf("late reply after the next claim: %+v", m)
		}
		if tk := e.Task(job, "a"); tk.Status != lifecycle.Running || tk.Output != nil {
			t.Errorf("late reply had an effect: %s %s", tk.Status, tk.Output)
		}
		if res := e.Succeed(second); res.Status != lifecycle.Completed {
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
			job := e.Submit(spec("a"))
			c := e.Claim(job, "a")
			res, err := e.Report(c, store.OutcomeFailed, &store.TaskError{Category: tc.category, Retryable: tc.retryable, Message: "x"})
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
			if s := e.Status(job, "a"); s != wantStatus {
				t.Errorf("%q: task %s, want %s", tc.category, s, wantStatus)
			}
		}
		_, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: "x", LeaseToken: "y", Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: "OOPS"}})
		dispatchtest.WantErr[*dispatch.InvalidError](t, err)
	})
}

func TestRule7_BackoffGrowsExponentiallyUpToItsCap(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(lifecycle.TaskSpec{Key: "a", Name: "work", MaxAttempts: new(6), BackoffBaseMs: new(int64(1000)), BackoffMaxMs: new(int64(5000))})
		for _, want := range []time.Duration{1, 2, 4, 5, 5} {
			c := e.Claim(job, "a")
			e.Fail(c, lifecycle.UserCode)
			tk := e.Task(job, "a")
			if got := tk.AvailableAt.Sub(e.Clock.Now()); got != want*time.Second {
				t.Errorf("after attempt %d: backoff %v, want %v", c.Task.Attempt, got, want*time.Second)
			}
			// Not claimable until the backoff has passed.
			e.Clock.Advance(want*time.Second - time.Millisecond)
			_, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: tk.ID, WorkerID: "w"})
			dispatchtest.WantErr[*dispatch.NotClaimedError](t, err)
			e.Clock.Advance(time.Millisecond)
		}
	})
}

func TestRule7_BackoffJitterStaysWithinBounds(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		d, err := dispatch.New(st, dispatch.Config{}) // real clock, real jitter
		if err != nil {
			t.Fatal(err)
		}
		e := &env{&dispatchtest.Env{T: t, Ctx: t.Context(), Store: st, D: d}}
		for i := 0; i < 20; i++ {
			job := e.Submit(lifecycle.TaskSpec{Key: "a", Name: "work", BackoffBaseMs: new(int64(10_000))})
			before := time.Now()
			e.Fail(e.Claim(job, "a"), lifecycle.UserCode)
			after := time.Now()
			at := e.Task(job, "a").AvailableAt
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
		job := e.Submit(spec("a"), spec("other"))
		id := e.Task(job, "a").ID
		for attempt := 1; attempt <= 3; attempt++ {
			res := e.Fail(e.Claim(job, "a"), lifecycle.Infrastructure)
			if attempt < 3 && !res.Requeued {
				t.Fatalf("attempt %d not retried: %+v", attempt, res)
			}
			if attempt == 3 && (!res.DeadLettered || res.Status != lifecycle.Failed) {
				t.Fatalf("attempt 3 not dead-lettered: %+v", res)
			}
			e.Clock.Advance(time.Hour)
		}
		tk := e.Task(job, "a")
		if tk.ID != id || tk.Attempt != 3 || tk.DeadLetteredAt.IsZero() || tk.Error == nil || tk.Error.Category != lifecycle.Infrastructure {
			t.Errorf("dead-lettered task: id %s attempt %d dead %v error %+v", tk.ID, tk.Attempt, tk.DeadLetteredAt, tk.Error)
		}
		dead, err := e.D.DeadLetters(e.Ctx, tenant, 0, 10)
		if err != nil || len(dead) != 1 || dead[0].ID != id {
			t.Errorf("dead letters: %v, %v", dead, err)
		}
		if others, _ := e.D.DeadLetters(e.Ctx, "someone-else", 0, 10); len(others) != 0 {
			t.Errorf("another tenant sees %d dead letters", len(others))
		}
		if _, tasks, _ := e.D.GetJob(e.Ctx, tenant, job.ID); len(tasks) != 2 {
			t.Errorf("retries created task rows: %d tasks", len(tasks))
		}
		wantEvents(t, e.Events(job, "a"), "Task Pending",
			"Task Processing Started", "Task Processing Failed",
			"Task Processing Started", "Task Processing Failed",
			"Task Processing Started", "Task Failed")
	})
}

func TestRule8_CancelCancelsWaitingAndPendingTasksAtOnce(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"), spec("c"))
		j, err := e.D.CancelJob(e.Ctx, tenant, job.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Canceled, "b": lifecycle.Canceled, "c": lifecycle.Canceled})
		if j.Status != lifecycle.JobCanceled || j.FinishedAt.IsZero() || e.Job(job.ID).Status != lifecycle.JobCanceled {
			t.Errorf("job %s finished %v", j.Status, j.FinishedAt)
		}
		evs := e.Events(job)
		if count(evs, dispatch.EventTaskCanceled) != 3 || count(evs, dispatch.EventJobCanceled) != 1 {
			t.Errorf("events %q", evs)
		}
		if _, err := e.D.CancelJob(e.Ctx, tenant, job.ID, ""); !errors.Is(err, dispatch.ErrJobFinished) {
			t.Errorf("cancel of a finished job: %v", err)
		}
		if _, err := e.D.CancelJob(e.Ctx, "other-tenant", job.ID, ""); !errors.Is(err, dispatch.ErrJobNotFound) {
			t.Errorf("cancel by another tenant: %v", err)
		}
	})
}

func TestRule8_RunningTaskIsAskedToCancelAndReportsCancelled(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"), spec("c"))
		c := e.Claim(job, "a")
		j, err := e.D.CancelJob(e.Ctx, tenant, job.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != lifecycle.JobProcessing {
			t.Fatalf("job %s while a task still runs", j.Status)
		}
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Running, "b": lifecycle.Canceled, "c": lifecycle.Canceled})
		if _, err := e.D.CancelJob(e.Ctx, tenant, job.ID, ""); err != nil {
			t.Errorf("second cancel: %v", err)
		}
		res, err := e.Report(c, store.OutcomeCanceled, nil)
		if err != nil || res.Status != lifecycle.Canceled {
			t.Fatalf("report cancelled: %+v %v", res, err)
		}
		if j := e.Job(job.ID); j.Status != lifecycle.JobCanceled {
			t.Errorf("job %s, want canceled", j.Status)
		}
		if n := count(e.Events(job), dispatch.EventJobFailure); n != 0 {
			t.Errorf("a canceled job reported %d failures", n)
		}
	})
}

func TestRule8_CancelGraceTimeoutFailsTheTask(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		if _, err := e.D.CancelJob(e.Ctx, tenant, job.ID, ""); err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(29 * time.Second)
		if _, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		if n := e.Reap(); n != 0 {
			t.Fatalf("reaped within the grace period")
		}
		e.Clock.Advance(2 * time.Second) // heartbeats do not extend the grace
		if n := e.Reap(); n != 1 {
			t.Fatalf("reaped %d after the grace period, want 1", n)
		}
		tk := e.Task(job, "a")
		if tk.Status != lifecycle.Failed || tk.Error == nil || tk.Error.Reason != lifecycle.ReasonCancelTimeout {
			t.Errorf("after grace: %s %+v, want failed CANCEL_TIMEOUT", tk.Status, tk.Error)
		}
		if j := e.Job(job.ID); j.Status != lifecycle.JobCanceled {
			t.Errorf("job %s, want canceled", j.Status)
		}
		if _, err := e.Report(c, store.OutcomeCanceled, nil); !errors.Is(err, dispatch.ErrTaskExpired) {
			t.Errorf("report after the grace period: %v, want ErrTaskExpired", err)
		}
	})
}

func TestRule8_CancelOneTaskSkipsItsDescendantsOnly(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"), spec("c"))
		if _, err := e.D.CancelTask(e.Ctx, e.Task(job, "a").ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := e.D.CancelTask(e.Ctx, e.Task(job, "a").ID, ""); err != nil {
			t.Errorf("second cancel: %v", err)
		}
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Canceled, "b": lifecycle.Skipped, "c": lifecycle.Pending})
		e.Run(job, "c")
		if j := e.Job(job.ID); j.Status != lifecycle.JobPartialFailure {
			t.Errorf("job %s, want partial_failure", j.Status)
		}
		_, err := e.D.CancelTask(e.Ctx, e.Task(job, "c").ID, "")
		if te := dispatchtest.WantErr[*dispatch.TerminalError](t, err); te.State != lifecycle.Completed {
			t.Errorf("cancel of a completed task: %v", te)
		}
	})
}

func TestRule9_ChildBecomesPendingWhenItsLastParentCompletes(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"), spec("c", "a"), spec("d", "b", "c"))
		e.Run(job, "a", "b")
		if s := e.Status(job, "d"); s != lifecycle.Waiting {
			t.Fatalf("d is %s with one parent unfinished", s)
		}
		e.Run(job, "c")
		if s := e.Status(job, "d"); s != lifecycle.Pending {
			t.Fatalf("d is %s after both parents completed", s)
		}
		c := e.Claim(job, "d")
		want := map[string]string{"b": `{"by":"b"}`, "c": `{"by":"c"}`}
		if len(c.DependencyOutputs) != 2 || string(c.DependencyOutputs["b"]) != want["b"] || string(c.DependencyOutputs["c"]) != want["c"] {
			t.Errorf("dependency outputs %s", c.DependencyOutputs)
		}
		msgs, err := st.OutboxListAfter(e.Ctx, 0, 100)
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
			if woken[e.Task(job, k).ID] != 1 {
				t.Errorf("task %s has %d wake-ups in the outbox, want 1", k, woken[e.Task(job, k).ID])
			}
		}
	})
}

func TestRule9_DescendantsOfFailedTaskSkippedWhileOtherBranchesFinish(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"), spec("c", "b"), spec("x"), spec("y", "x"), spec("join", "c", "y"))
		e.Fail(e.Claim(job, "a"), lifecycle.DataQuality)
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{
			"a": lifecycle.Failed, "b": lifecycle.Skipped, "c": lifecycle.Skipped, "join": lifecycle.Skipped, "x": lifecycle.Pending})
		if j := e.Job(job.ID); j.Status != lifecycle.JobProcessing || j.FailureDetectedAt.IsZero() {
			t.Fatalf("job %s failure detected %v while x and y still run", j.Status, j.FailureDetectedAt)
		}
		e.Run(job, "x", "y")
		if j := e.Job(job.ID); j.Status != lifecycle.JobPartialFailure || j.FinishedAt.IsZero() {
			t.Errorf("job %s, want partial_failure", j.Status)
		}
		evs := e.Events(job)
		if count(evs, dispatch.EventJobFailure) != 1 || count(evs, dispatch.EventTaskSkipped) != 3 || count(evs, dispatch.EventJobCompleted) != 0 {
			t.Errorf("events %q", evs)
		}
	})
}

func TestRule10_JobStatusAndEventsOfACompletedJob(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"))
		e.Clock.Advance(time.Second)
		e.Run(job, "a")
		if j := e.Job(job.ID); j.Status != lifecycle.JobProcessing || !j.FinishedAt.IsZero() {
			t.Fatalf("job %s before its last task", j.Status)
		}
		e.Run(job, "b")
		j := e.Job(job.ID)
		if j.Status != lifecycle.JobCompleted || !j.FinishedAt.Equal(epoch.Add(time.Second)) || j.UnfinishedTasks != 0 {
			t.Errorf("job %s finished %v unfinished %d", j.Status, j.FinishedAt, j.UnfinishedTasks)
		}
		wantEvents(t, e.Events(job),
			"Job Created", "Task Pending",
			"Task Processing Started", "Task Completed", "Task Pending",
			"Task Processing Started", "Task Completed", "Job Completed")
	})
}

func TestRule10_JobFailureDetectedOnceAtTheFirstFailure(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b"), spec("c"))
		e.Fail(e.Claim(job, "a"), lifecycle.Configuration)
		e.Fail(e.Claim(job, "b"), lifecycle.Configuration)
		if n := count(e.Events(job), dispatch.EventJobFailure); n != 1 {
			t.Errorf("%d Job Failure Detected events, want 1", n)
		}
		if j := e.Job(job.ID); j.Status != lifecycle.JobProcessing {
			t.Errorf("job %s while c is pending", j.Status)
		}
		e.Run(job, "c")
		if j := e.Job(job.ID); j.Status != lifecycle.JobPartialFailure {
			t.Errorf("job %s, want partial_failure", j.Status)
		}
	})
}

func TestRule10_ResumeRerunsFailedAndSkippedTasksWithFreshRetryBudget(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(lifecycle.TaskSpec{Key: "a", Name: "work", MaxAttempts: new(2)}, spec("b", "a"), spec("c"))
		if _, err := e.D.ResumeJob(e.Ctx, tenant, job.ID); !errors.Is(err, dispatch.ErrJobNotFinished) {
			t.Fatalf("resume while processing: %v", err)
		}
		e.Run(job, "c")
		first := e.Claim(job, "a")
		e.Fail(first, lifecycle.UserCode)
		e.Clock.Advance(time.Minute)
		second := e.Claim(job, "a")
		e.Fail(second, lifecycle.UserCode) // attempts exhausted
		if j := e.Job(job.ID); j.Status != lifecycle.JobPartialFailure {
			t.Fatalf("job %s before resume", j.Status)
		}

		res, err := e.D.ResumeJob(e.Ctx, tenant, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantEvents(t, res.Resumed, "a", "b")
		if j := e.Job(job.ID); j.Status != lifecycle.JobProcessing || !j.FinishedAt.IsZero() || j.UnfinishedTasks != 2 {
			t.Fatalf("job after resume: %s unfinished %d", j.Status, j.UnfinishedTasks)
		}
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Pending, "b": lifecycle.Waiting, "c": lifecycle.Completed})

		third := e.Claim(job, "a")
		if third.Task.Attempt != 3 {
			t.Errorf("attempt after resume %d, want 3 (numbers are never reused)", third.Task.Attempt)
		}
		// Old tokens can never match again.
		for _, old := range []*dispatch.Claim{first, second} {
			if _, err := e.Report(old, store.OutcomeSucceeded, nil); err == nil {
				t.Errorf("attempt %d's report accepted after resume", old.Task.Attempt)
			}
		}
		// A fresh budget: one more failure is retried, though the task already used two attempts.
		if res := e.Fail(third, lifecycle.UserCode); !res.Requeued {
			t.Errorf("first failure after resume not retried: %+v", res)
		}
		e.Clock.Advance(time.Minute)
		e.Run(job, "a", "b")
		if j := e.Job(job.ID); j.Status != lifecycle.JobCompleted {
			t.Errorf("job %s after the resumed run", j.Status)
		}
		if n := count(e.Events(job), dispatch.EventJobFailure); n != 1 {
			t.Errorf("%d failure events", n)
		}
		if _, err := e.D.ResumeJob(e.Ctx, tenant, job.ID); !errors.Is(err, dispatch.ErrNothingToResume) {
			t.Errorf("resume of a completed job: %v", err)
		}
	})
}
