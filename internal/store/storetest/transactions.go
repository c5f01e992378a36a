// Contract of transactions: rollback on error and commits visible to readers.

package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

func testInTxRollsBackOnError(t *testing.T, st store.Store) {
	ctx := t.Context()
	existing := newJob("tenant")
	ets := seed(t, st, existing, newTask(existing.ID, "a"), newTask(existing.ID, "b", "a"))
	jobBefore := getJob(t, st, existing.ID)
	tasksBefore := snapshot(t, st, ets["a"], ets["b"])

	boom := errors.New("boom")
	fresh := newJob("tenant")
	fresh.IdempotencyKey = "once"
	freshTask := newTask(fresh.ID, "x")
	var claimed bool
	err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.JobInsert(ctx, fresh); err != nil {
			return err
		}
		if err := tx.TaskInsertMany(ctx, []*store.Task{freshTask}); err != nil {
			return err
		}
		if err := tx.DepInsertMany(ctx, []store.Dep{{JobID: existing.ID, ParentID: ets["b"].ID, ChildID: ets["a"].ID}}); err != nil {
			return err
		}
		if err := tx.AttemptInsert(ctx, &store.Attempt{TaskID: ets["a"].ID, Attempt: 1, WorkerID: "w", LeaseToken: "t", StartedAt: t0}); err != nil {
			return err
		}
		if err := tx.EventInsertMany(ctx, []*store.Event{{JobID: existing.ID, Type: "Job Canceled", At: t0, Data: json.RawMessage(`{}`)}}); err != nil {
			return err
		}
		if err := tx.OutboxInsertMany(ctx, []*store.OutboxMessage{{Topic: "x", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0}}); err != nil {
			return err
		}
		j := *jobBefore
		j.Status, j.FinishedAt = lifecycle.JobCanceled, t0
		if err := tx.JobUpdate(ctx, &j); err != nil {
			return err
		}
		if _, err := tx.JobAddUnfinished(ctx, existing.ID, -1); err != nil {
			return err
		}
		var err error
		if _, claimed, err = tx.TaskClaim(ctx, store.ClaimTaskParams{ID: ets["a"].ID, Now: t0, WorkerID: "w", LeaseToken: "t"}); err != nil {
			return err
		}
		if _, err := tx.TaskCancelIdle(ctx, store.CancelParams{JobID: existing.ID, Now: t0, Reason: "r"}); err != nil {
			return err
		}
		// The transaction sees its own writes.
		if _, err := tx.JobGet(ctx, fresh.ID); err != nil {
			return fmt.Errorf("own job not visible in the transaction: %w", err)
		}
		if _, err := tx.TaskGet(ctx, freshTask.ID); err != nil {
			return fmt.Errorf("own task not visible in the transaction: %w", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx returned %v, want fn's error", err)
	}
	if !claimed {
		t.Errorf("claim inside the rolled-back transaction did not succeed")
	}
	if _, err := st.JobGet(ctx, fresh.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob(rolled-back job): %v, want ErrNotFound", err)
	}
	if _, err := st.JobGetByIdempotencyKey(ctx, "tenant", "once"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("JobByIdempotencyKey(rolled-back job): %v, want ErrNotFound", err)
	}
	if _, err := st.TaskGet(ctx, freshTask.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTask(rolled-back task): %v, want ErrNotFound", err)
	}
	if _, err := st.AttemptGet(ctx, ets["a"].ID, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAttempt(rolled-back attempt): %v, want ErrNotFound", err)
	}
	if evs := listEvents(t, st, existing.ID, 0, 10); len(evs) != 0 {
		t.Errorf("rolled-back events are listed: %d", len(evs))
	}
	if msgs := outboxAfter(t, st, 0, 10); len(msgs) != 0 {
		t.Errorf("rolled-back outbox messages are listed: %d", len(msgs))
	}
	if outs, err := st.TaskParentOutputs(ctx, ets["a"].ID); err != nil || len(outs) != 0 {
		t.Errorf("rolled-back dep is visible: ParentOutputs(a) = %q, %v", outs, err)
	}
	checkSame(t, "job after rollback", jobBefore, getJob(t, st, existing.ID))
	checkUnchanged(t, st, "after rollback", tasksBefore)

	// The idempotency key and the ids are free again.
	seed(t, st, fresh, freshTask)
}

func testInTxCommitIsVisibleToReaders(t *testing.T, st store.Store) {
	ctx := t.Context()
	for i := 0; i < 20; i++ {
		job := newJob("tenant")
		job.IdempotencyKey = fmt.Sprintf("k%d", i)
		tk := newTask(job.ID, "a")
		inTx(t, st, func(tx store.Tx) error {
			if err := tx.JobInsert(ctx, job); err != nil {
				return err
			}
			if err := tx.TaskInsertMany(ctx, []*store.Task{tk}); err != nil {
				return err
			}
			return tx.EventInsertMany(ctx, []*store.Event{{JobID: job.ID, Type: "Job Created", At: t0, Data: json.RawMessage(`{}`)}})
		})
		if _, err := st.JobGet(ctx, job.ID); err != nil {
			t.Fatalf("round %d: GetJob right after commit: %v", i, err)
		}
		if _, err := st.JobGetByIdempotencyKey(ctx, "tenant", job.IdempotencyKey); err != nil {
			t.Fatalf("round %d: JobByIdempotencyKey right after commit: %v", i, err)
		}
		if _, err := st.TaskGet(ctx, tk.ID); err != nil {
			t.Fatalf("round %d: GetTask right after commit: %v", i, err)
		}
		if jobs := listJobs(t, st, store.ListJobsParams{Tenant: "tenant", Limit: 1}); len(jobs) != 1 || jobs[0].ID != job.ID {
			t.Fatalf("round %d: ListJobs right after commit does not start with the new job", i)
		}
		if evs := listEvents(t, st, job.ID, 0, 10); len(evs) != 1 {
			t.Fatalf("round %d: ListEvents right after commit: %d events", i, len(evs))
		}

		mustClaim(t, st, tk.ID, t0)
		if got := getTask(t, st, tk.ID); got.Status != lifecycle.Running {
			t.Fatalf("round %d: GetTask right after the claim committed: status %s", i, got.Status)
		}
		if _, ok, err := st.TaskNextReapAt(ctx); err != nil || !ok {
			t.Fatalf("round %d: NextReapAt right after the claim committed: %v, %v", i, ok, err)
		}
		j := *job
		j.Status = lifecycle.JobCompleted
		inTx(t, st, func(tx store.Tx) error { return tx.JobUpdate(ctx, &j) })
		if got := getJob(t, st, job.ID); got.Status != lifecycle.JobCompleted {
			t.Fatalf("round %d: GetJob right after UpdateJob committed: status %s", i, got.Status)
		}
		setStatus(t, st, tk.ID, lifecycle.Completed, t0)
	}
}
