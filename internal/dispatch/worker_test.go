package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func fence(c *dispatch.Claim) dispatch.Fence {
	return dispatch.Fence{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken}
}

func i64(v int64) *int64 { return &v }

func TestClaimWaitReturnsAsSoonAsATaskBecomesReady(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		d, err := dispatch.New(st, dispatch.Config{Logger: quiet}) // real clock: this waits for real
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: tenant, Tasks: []lifecycle.TaskSpec{
			{Key: "parent", Name: "p"}, {Key: "child", Name: "c", DependsOn: []string{"parent"}}}})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []*dispatch.Claim, 1)
		go func() {
			claims, err := d.ClaimWait(ctx, dispatch.ClaimNextParams{Queues: []string{"c"}, WorkerID: "w"}, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- claims
		}()
		parent, err := d.ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{"p"}, WorkerID: "w"})
		if err != nil || len(parent) != 1 {
			t.Fatalf("claim parent: %v", err)
		}
		start := time.Now()
		if _, err := d.Complete(ctx, dispatch.CompleteParams{TaskID: parent[0].Task.ID, LeaseToken: parent[0].Task.LeaseToken, Outcome: store.OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
		select {
		case claims := <-got:
			if len(claims) != 1 || claims[0].Task.Key != "child" || claims[0].Task.JobID != res.Job.ID {
				t.Fatalf("long poll returned %v", claims)
			}
			if waited := time.Since(start); waited > 5*time.Second {
				t.Errorf("long poll answered %v after the child became ready", waited)
			}
		case <-time.After(9 * time.Second):
			t.Fatal("long poll did not return when the task became ready")
		}
	})
}

func TestClaimWaitWakesWhenABackoffEnds(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		e.Fail(e.Claim(job, "a"), lifecycle.UserCode) // retry in 10 s
		got := make(chan int, 1)
		go func() {
			claims, err := e.D.ClaimWait(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w"}, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- len(claims)
		}()
		if err := e.Clock.BlockUntilContext(e.Ctx, 1); err != nil { // the poll sleeps until the retry time
			t.Fatal(err)
		}
		e.Clock.Advance(10*time.Second + time.Millisecond)
		if n := <-got; n != 1 {
			t.Fatalf("claimed %d tasks when the backoff ended, want 1", n)
		}
	})
}

func TestClaimWaitGivesUpAfterMaxWait(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		got := make(chan int, 1)
		go func() {
			claims, err := e.D.ClaimWait(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"empty"}, WorkerID: "w"}, 5*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- len(claims)
		}()
		if err := e.Clock.BlockUntilContext(e.Ctx, 1); err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(5 * time.Second)
		if n := <-got; n != 0 {
			t.Fatalf("claimed %d tasks from an empty queue", n)
		}
	})
}

func TestClaimWaitNoticesARetryScheduledWhileItWaits(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		got := make(chan int, 1)
		go func() {
			claims, err := e.D.ClaimWait(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w"}, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- len(claims)
		}()
		if err := e.Clock.BlockUntilContext(e.Ctx, 1); err != nil { // waiting, with nothing scheduled
			t.Fatal(err)
		}
		e.Fail(c, lifecycle.UserCode) // retry in 10 s: the poll must now sleep 10 s, not a minute
		if err := e.Clock.BlockUntilContext(e.Ctx, 1); err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(10*time.Second + time.Millisecond)
		if n := <-got; n != 1 {
			t.Fatalf("claimed %d tasks when the retry came due, want 1", n)
		}
	})
}

func TestStartAttemptSaysWhetherAWorkerMayRunTheAttempt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b"), spec("c"))
		a := e.Claim(job, "a")
		if _, err := e.D.StartAttempt(e.Ctx, fence(a)); err != nil {
			t.Errorf("running attempt: %v", err)
		}
		bad := fence(a)
		bad.LeaseToken = "x"
		if _, err := e.D.StartAttempt(e.Ctx, bad); !errors.Is(err, dispatch.ErrLeaseMismatch) {
			t.Errorf("wrong token: %v", err)
		}
		bad = fence(a)
		bad.Attempt = 2
		_, err := e.D.StartAttempt(e.Ctx, bad)
		dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err)

		b := e.Claim(job, "b")
		if _, err := e.D.CancelTask(e.Ctx, b.Task.ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := e.D.StartAttempt(e.Ctx, fence(b)); !errors.Is(err, dispatch.ErrCancelRequested) {
			t.Errorf("cancel requested: %v", err)
		}

		c := e.Claim(job, "c")
		e.Succeed(a)
		_, err = e.D.StartAttempt(e.Ctx, fence(a))
		dispatchtest.WantErr[*dispatch.TerminalError](t, err)
		e.Clock.Advance(91 * time.Second) // c's lease ran out; nothing reaped it yet
		if _, err := e.D.StartAttempt(e.Ctx, fence(c)); !errors.Is(err, dispatch.ErrTaskExpired) {
			t.Errorf("expired lease: %v", err)
		}
		if s := e.Status(job, "c"); s != lifecycle.Running {
			t.Errorf("StartAttempt changed the task to %s", s)
		}
		if _, err := e.D.StartAttempt(e.Ctx, dispatch.Fence{TaskID: "00000000-0000-0000-0000-000000000000", LeaseToken: "x"}); !errors.Is(err, dispatch.ErrTaskNotFound) {
			t.Errorf("unknown task: %v", err)
		}
	})
}

func TestStoreWakeupsWriteNoOutboxMessageYetWakeWaitingClaimers(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, func(c *dispatch.Config) { c.StoreWakeups = true })
		job := e.Submit(spec("a"), spec("b", "a"))
		c := e.Claim(job, "a")
		got := make(chan []*dispatch.Claim, 1)
		go func() {
			claims, err := e.D.ClaimWait(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w"}, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- claims
		}()
		if err := e.Clock.BlockUntilContext(e.Ctx, 1); err != nil { // waiting: nothing is ready
			t.Fatal(err)
		}
		e.Succeed(c)
		select {
		case claims := <-got:
			if len(claims) != 1 || claims[0].Task.Key != "b" {
				t.Fatalf("claimed %v, want b", claims)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting claimer was not woken when b became ready")
		}
		msgs, err := st.OutboxListAfter(e.Ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Topic == store.TopicTaskReady {
				t.Errorf("outbox holds a wake-up (%s) that nothing reads", m.Payload)
			}
		}
	})
}

// Dataset events and published versions are the data plane's (dispatch.Hook): a dispatcher
// without one refuses a report that carries them, and the report changes nothing, so the
// attempt can still report without them.
func TestReportsWithDatasetEventsNeedADataPlane(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		ev := []report.Event{{DatasetUUID: "d", DatasetVersion: "v", Cursor: i64(1)}}
		for _, p := range []dispatch.CompleteParams{
			{Events: ev},
			{Published: []report.Published{{DatasetUUID: "d", DatasetVersion: "v"}}},
		} {
			p.TaskID, p.Attempt, p.LeaseToken, p.Outcome = c.Task.ID, c.Task.Attempt, c.Task.LeaseToken, store.OutcomeSucceeded
			_, err := e.D.Complete(e.Ctx, p)
			if ie := dispatchtest.WantErr[*dispatch.InvalidError](t, err); !strings.Contains(ie.Message, "no data plane") {
				t.Errorf("refusal %q does not say why", ie.Message)
			}
		}
		if got := e.Status(job, "a"); got != lifecycle.Running {
			t.Fatalf("after the refusals the task is %s, want running", got)
		}
		e.Succeed(c)
	})
}

// Config.Redact rewrites what a worker reports before it is stored: the output, on the fast path
// of plain successes and in a batch too, and a failure's message.
func TestReportsAreRedactedBeforeTheyAreStored(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		redact := func(b []byte) []byte {
			if !bytes.Contains(b, []byte("hunter2")) {
				return b
			}
			return bytes.ReplaceAll(b, []byte("hunter2"), []byte("[REDACTED]"))
		}
		e := newEnv(t, st, func(c *dispatch.Config) { c.Redact = redact })
		job := e.Submit(spec("a"), spec("b"), spec("c"))
		a, b, c := e.Claim(job, "a"), e.Claim(job, "b"), e.Claim(job, "c")
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: a.Task.ID, Attempt: 1, LeaseToken: a.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Output: json.RawMessage(`{"key":"hunter2"}`)}); err != nil {
			t.Fatal(err)
		}
		_, errs := e.D.CompleteMany(e.Ctx, []dispatch.CompleteParams{{TaskID: b.Task.ID, Attempt: 1, LeaseToken: b.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Output: json.RawMessage(`"hunter2 and more"`)}})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		no := false
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: lifecycle.UserCode, Message: "bad password hunter2", Retryable: &no}}); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{"a": `{"key":"[REDACTED]"}`, "b": `"[REDACTED] and more"`} {
			if got := string(e.Task(job, key).Output); got != want {
				t.Errorf("%s's output = %s, want %s", key, got, want)
			}
		}
		if got := e.Task(job, "c").Error; got == nil || got.Message != "bad password [REDACTED]" {
			t.Errorf("c's error = %+v, want its message redacted", got)
		}
	})
}
