package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func newFaulty(t *testing.T, cfg dispatch.Config) (*storetest.Faulty, *dispatch.Dispatcher) {
	t.Helper()
	st := &storetest.Faulty{Store: storetest.OpenSQLite(t)}
	cfg.Logger = quiet
	d, err := dispatch.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st, d
}

func TestTransientFailureIsRetried(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group commit %v", group), func(t *testing.T) {
			st, d := newFaulty(t, dispatch.Config{GroupCommit: dispatch.GroupCommit{Off: !group}})
			ctx := context.Background()
			st.FailBegin.Store(3)
			res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: tenant, Tasks: []lifecycle.TaskSpec{spec("a")}})
			if err != nil {
				t.Fatalf("create job after 3 transient failures: %v", err)
			}
			if n := st.Txs.Load(); n != 4 {
				t.Errorf("%d transactions, want 4 (3 failed, 1 committed)", n)
			}
			claims, err := d.ClaimNext(ctx, dispatch.ClaimNextParams{WorkerID: "w", Queues: []string{"work"}})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %v, %v", claims, err)
			}
			tk := claims[0].Task
			st.FailBegin.Store(2)
			got, err := d.Complete(ctx, dispatch.CompleteParams{TaskID: tk.ID, Attempt: tk.Attempt, LeaseToken: tk.LeaseToken,
				Outcome: store.OutcomeSucceeded, Output: []byte(`1`)})
			if err != nil || got.Status != lifecycle.Completed {
				t.Fatalf("complete after 2 transient failures: %+v, %v", got, err)
			}
			if j, _ := st.JobGet(ctx, res.Job.ID); j.Status != lifecycle.JobCompleted {
				t.Errorf("job %s, want completed", j.Status)
			}
		})
	}
}

// A creation whose commit answer was lost is found on the next try, not made twice.
func TestCreateJobWhoseCommitAnswerWasLost(t *testing.T) {
	for _, key := range []string{"", "key-1"} {
		t.Run("idempotency key "+key, func(t *testing.T) {
			st, d := newFaulty(t, dispatch.Config{})
			ctx := context.Background()
			st.FailCommit.Store(1)
			res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: tenant, IdempotencyKey: key, RequestHash: "h",
				Tasks: []lifecycle.TaskSpec{spec("a")}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Replayed {
				t.Error("the job this very call created is answered as a replay")
			}
			jobs, err := st.JobList(ctx, store.ListJobsParams{Tenant: tenant, Limit: 10})
			if err != nil || len(jobs) != 1 || jobs[0].ID != res.Job.ID {
				t.Fatalf("jobs stored: %d (%v), want only %s", len(jobs), err, res.Job.ID)
			}
		})
	}
}

// A database that keeps failing is reported as unavailable once RetryFor has passed.
func TestLastingFailureIsUnavailable(t *testing.T) {
	st, d := newFaulty(t, dispatch.Config{RetryFor: 30 * time.Millisecond, GroupCommit: dispatch.GroupCommit{Off: true}})
	st.FailBegin.Store(1 << 30)
	_, err := d.CreateJob(context.Background(), dispatch.CreateJobParams{Tenant: tenant, Tasks: []lifecycle.TaskSpec{spec("a")}})
	if !errors.Is(err, dispatch.ErrUnavailable) || !d.Unavailable(err) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := st.Txs.Load(); n < 2 {
		t.Errorf("%d transactions: it was not retried", n)
	}
}

// A group commit that fails transiently is redone transition by transition: every caller gets
// its own result.
func TestFailedGroupIsRedoneAlone(t *testing.T) {
	st, d := newFaulty(t, dispatch.Config{})
	ctx := context.Background()
	st.FailBegin.Store(1)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: tenant, Tasks: []lifecycle.TaskSpec{spec("a")}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("create %d: %v", i, err)
		}
	}
	jobs, err := st.JobList(ctx, store.ListJobsParams{Tenant: tenant, Limit: 100})
	if err != nil || len(jobs) != len(errs) {
		t.Fatalf("%d jobs (%v), want %d", len(jobs), err, len(errs))
	}
}
