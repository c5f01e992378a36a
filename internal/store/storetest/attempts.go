// Contract of attempts: the record of each run of a task.

package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

func testAttempts(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"))
	yes := true
	a1 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 1, WorkerID: "w1", LeaseToken: "tok-1", StartedAt: at(time.Second)}
	a2 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 2, WorkerID: "w2", LeaseToken: "tok-2", StartedAt: at(2 * time.Second),
		FinishedAt: at(3 * time.Second), Outcome: store.OutcomeFailed, Result: lifecycle.Pending,
		Error:   &store.TaskError{Category: lifecycle.Timeout, Message: "lease", Reason: "HEARTBEAT_TIMEOUT", Retryable: &yes},
		Metrics: json.RawMessage("{\"cpu\":  0.5}")}
	a3 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 3, WorkerID: "w3", LeaseToken: "tok-3", StartedAt: at(4 * time.Second)}
	b1 := &store.Attempt{TaskID: ts["b"].ID, Attempt: 1, WorkerID: "w1", LeaseToken: "tok-b", StartedAt: at(time.Second)}
	inTx(t, st, func(tx store.Tx) error {
		for _, a := range []*store.Attempt{a3, b1, a1, a2} { // out of order
			if err := tx.AttemptInsert(ctx, a); err != nil {
				return err
			}
		}
		return nil
	})
	for _, want := range []*store.Attempt{a1, a2, a3, b1} {
		got, err := st.AttemptGet(ctx, want.TaskID, want.Attempt)
		if err != nil {
			t.Errorf("GetAttempt(%d): %v", want.Attempt, err)
			continue
		}
		checkSame(t, fmt.Sprintf("GetAttempt(%d)", want.Attempt), want, got)
	}

	list, err := st.AttemptList(ctx, ts["a"].ID)
	if err != nil {
		t.Fatalf("ListAttempts: %v", err)
	}
	if len(list) != 3 {
		t.Fatalf("ListAttempts returned %d attempts, want 3", len(list))
	}
	for i, want := range []*store.Attempt{a1, a2, a3} {
		checkSame(t, fmt.Sprintf("ListAttempts[%d]", i), want, list[i])
	}

	// Finish attempt 1.
	u := *a1
	u.FinishedAt = at(90 * time.Second)
	u.Outcome = store.OutcomeSucceeded
	u.Result = lifecycle.Completed
	u.Metrics = json.RawMessage(`{"rows":3}`)
	u.Error = &store.TaskError{Category: lifecycle.DataQuality, Message: "warn", StackTrace: "s", Code: "C"}
	inTx(t, st, func(tx store.Tx) error { return tx.AttemptPutMany(ctx, []*store.Attempt{&u}) })
	got, err := st.AttemptGet(ctx, a1.TaskID, 1)
	if err != nil {
		t.Fatalf("GetAttempt after PutAttempts: %v", err)
	}
	checkSame(t, "after PutAttempts", &u, got)
	checkSame(t, "attempt 2 after updating 1", a2, mustAttempt(t, st, a2.TaskID, 2))
	checkSame(t, "other task's attempt 1", b1, mustAttempt(t, st, b1.TaskID, 1))

	inTx(t, st, func(tx store.Tx) error {
		list, err := tx.AttemptList(ctx, ts["b"].ID)
		if err != nil {
			return err
		}
		if len(list) != 1 {
			t.Errorf("Tx.ListAttempts(b) = %d attempts, want 1", len(list))
		}
		return nil
	})
	if list, err := st.AttemptList(ctx, uuid.NewString()); err != nil || len(list) != 0 {
		t.Errorf("ListAttempts(unknown) = %d, %v; want none", len(list), err)
	}
}

func mustAttempt(t *testing.T, st store.Store, taskID string, n int) *store.Attempt {
	t.Helper()
	a, err := st.AttemptGet(t.Context(), taskID, n)
	if err != nil {
		t.Fatalf("GetAttempt(%s, %d): %v", taskID, n, err)
	}
	return a
}

func testPutAttemptsInsertsOrReplaces(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"))
	// Attempt 1 of a was stored while it ran, with the worker's trace context.
	a1 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 1, WorkerID: "w", LeaseToken: "tok", StartedAt: t0,
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	inTx(t, st, func(tx store.Tx) error { return tx.AttemptInsert(ctx, a1) })

	ended := *a1
	ended.Traceparent = "" // the end carries none: the stored one stays
	ended.FinishedAt, ended.Outcome, ended.Result = at(time.Second), store.OutcomeSucceeded, lifecycle.Completed
	ended.Metrics = json.RawMessage(`{"rows":1}`)
	b1 := &store.Attempt{TaskID: ts["b"].ID, Attempt: 1, WorkerID: "w2", LeaseToken: "tok-b", StartedAt: t0,
		FinishedAt: at(2 * time.Second), Outcome: store.OutcomeFailed, Result: lifecycle.Pending,
		Error: &store.TaskError{Category: lifecycle.Timeout, Message: "lease"}}
	a2 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 2, WorkerID: "w3", LeaseToken: "tok-2", StartedAt: at(3 * time.Second),
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	inTx(t, st, func(tx store.Tx) error { return tx.AttemptPutMany(ctx, []*store.Attempt{&ended, b1, a2}) })

	want := ended
	want.Traceparent = a1.Traceparent
	checkSame(t, "a's attempt 1, replaced", &want, mustAttempt(t, st, a1.TaskID, 1))
	checkSame(t, "b's attempt 1, new", b1, mustAttempt(t, st, b1.TaskID, 1))
	checkSame(t, "a's attempt 2, new", a2, mustAttempt(t, st, a2.TaskID, 2))

	// A new trace context replaces the stored one.
	again := want
	again.Traceparent = "00-11111111111111111111111111111111-2222222222222222-01"
	inTx(t, st, func(tx store.Tx) error { return tx.AttemptPutMany(ctx, []*store.Attempt{&again}) })
	checkSame(t, "a's attempt 1, new trace context", &again, mustAttempt(t, st, a1.TaskID, 1))

	// Rolled back with its transaction, like any write.
	err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.AttemptPutMany(ctx, []*store.Attempt{{TaskID: ts["b"].ID, Attempt: 2, WorkerID: "w", LeaseToken: "t", StartedAt: t0}}); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("the transaction did not fail")
	}
	if _, err := st.AttemptGet(ctx, ts["b"].ID, 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAttempt(rolled back): %v, want ErrNotFound", err)
	}
}
