package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
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
		job := e.submit(spec("a"))
		e.fail(e.claim(job, "a"), lifecycle.UserCode) // retry in 10 s
		got := make(chan int, 1)
		go func() {
			claims, err := e.d.ClaimWait(e.ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w"}, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- len(claims)
		}()
		if err := e.clock.BlockUntilContext(e.ctx, 1); err != nil { // the poll sleeps until the retry time
			t.Fatal(err)
		}
		e.clock.Advance(10*time.Second + time.Millisecond)
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
			claims, err := e.d.ClaimWait(e.ctx, dispatch.ClaimNextParams{Queues: []string{"empty"}, WorkerID: "w"}, 5*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- len(claims)
		}()
		if err := e.clock.BlockUntilContext(e.ctx, 1); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(5 * time.Second)
		if n := <-got; n != 0 {
			t.Fatalf("claimed %d tasks from an empty queue", n)
		}
	})
}

func TestRecordEventsIsFencedIdempotentAndValidated(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		events := []dispatch.DatasetEvent{
			{DatasetUUID: ds, DatasetVersion: "v1", Cursor: i64(12345)},
			{DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "1000000-1010000", Start: i64(1000000), End: i64(1010000)},
		}
		n, err := e.d.RecordEvents(e.ctx, fence(c), events)
		if err != nil || n != 2 {
			t.Fatalf("record: %d, %v", n, err)
		}
		if n, err := e.d.RecordEvents(e.ctx, fence(c), events); err != nil || n != 0 {
			t.Fatalf("repeat: %d new, %v; want 0 new and no error", n, err)
		}
		stored, _ := st.ListDatasetEvents(e.ctx, c.Task.ID)
		if len(stored) != 2 || *stored[0].Cursor != 12345 || stored[1].PartitionKey != "1000000-1010000" || stored[0].Attempt != 1 {
			t.Errorf("stored events %+v", stored)
		}
		for _, bad := range [][]dispatch.DatasetEvent{
			{{DatasetVersion: "v1", Cursor: i64(1)}},
			{{DatasetUUID: ds, Cursor: i64(1)}},
			{{DatasetUUID: ds, DatasetVersion: "v1"}},
			{{DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "10-5"}},
			{{DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "1-5", Start: i64(2), End: i64(5)}},
			{{DatasetUUID: "ds", DatasetVersion: "v1", Cursor: i64(1)}}, // no dataset of the tenant
		} {
			_, err := e.d.RecordEvents(e.ctx, fence(c), bad)
			wantErr[*dispatch.InvalidError](t, err)
		}
		stale := fence(c)
		stale.LeaseToken = "not-it"
		if _, err := e.d.RecordEvents(e.ctx, stale, events[:1]); !errors.Is(err, dispatch.ErrLeaseMismatch) {
			t.Errorf("stale token: %v", err)
		}
		e.succeed(c)
		if _, err := e.d.RecordEvents(e.ctx, fence(c), []dispatch.DatasetEvent{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(1)}}); err == nil {
			t.Error("events accepted after the attempt completed")
		}
		if stored, _ := st.ListDatasetEvents(e.ctx, c.Task.ID); len(stored) != 2 {
			t.Errorf("refused calls stored events: %d", len(stored))
		}
	})
}

func TestEventsOfATimedOutAttemptAreAcceptedUntilTheNextClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		e.expire()
		ev := []dispatch.DatasetEvent{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(1)}}
		if _, err := e.d.RecordEvents(e.ctx, fence(c), ev); err != nil {
			t.Fatalf("late events before the next claim: %v", err)
		}
		e.clock.Advance(10 * time.Second)
		e.claim(job, "a")
		_, err := e.d.RecordEvents(e.ctx, fence(c), ev)
		wantErr[*dispatch.AttemptMismatchError](t, err)
	})
}

func TestCompletionStoresItsFinalEventsWithTheOutcome(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		bad := dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken, Outcome: store.OutcomeSucceeded,
			Events: []dispatch.DatasetEvent{{DatasetUUID: ds}}}
		_, err := e.d.Complete(e.ctx, bad)
		wantErr[*dispatch.InvalidError](t, err)
		if s := e.status(job, "a"); s != lifecycle.Running {
			t.Fatalf("an invalid completion changed the task to %s", s)
		}
		good := bad
		good.Events = []dispatch.DatasetEvent{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(7)}}
		if _, err := e.d.Complete(e.ctx, good); err != nil {
			t.Fatal(err)
		}
		if evs, _ := st.ListDatasetEvents(e.ctx, c.Task.ID); len(evs) != 1 || *evs[0].Cursor != 7 {
			t.Errorf("events %+v", evs)
		}
	})
}

func TestClaimWaitNoticesARetryScheduledWhileItWaits(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"))
		c := e.claim(job, "a")
		got := make(chan int, 1)
		go func() {
			claims, err := e.d.ClaimWait(e.ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w"}, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- len(claims)
		}()
		if err := e.clock.BlockUntilContext(e.ctx, 1); err != nil { // waiting, with nothing scheduled
			t.Fatal(err)
		}
		e.fail(c, lifecycle.UserCode) // retry in 10 s: the poll must now sleep 10 s, not a minute
		if err := e.clock.BlockUntilContext(e.ctx, 1); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10*time.Second + time.Millisecond)
		if n := <-got; n != 1 {
			t.Fatalf("claimed %d tasks when the retry came due, want 1", n)
		}
	})
}

func TestStartAttemptSaysWhetherAWorkerMayRunTheAttempt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.submit(spec("a"), spec("b"), spec("c"))
		a := e.claim(job, "a")
		if _, err := e.d.StartAttempt(e.ctx, fence(a)); err != nil {
			t.Errorf("running attempt: %v", err)
		}
		bad := fence(a)
		bad.LeaseToken = "x"
		if _, err := e.d.StartAttempt(e.ctx, bad); !errors.Is(err, dispatch.ErrLeaseMismatch) {
			t.Errorf("wrong token: %v", err)
		}
		bad = fence(a)
		bad.Attempt = 2
		_, err := e.d.StartAttempt(e.ctx, bad)
		wantErr[*dispatch.AttemptMismatchError](t, err)

		b := e.claim(job, "b")
		if _, err := e.d.CancelTask(e.ctx, b.Task.ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.StartAttempt(e.ctx, fence(b)); !errors.Is(err, dispatch.ErrCancelRequested) {
			t.Errorf("cancel requested: %v", err)
		}

		c := e.claim(job, "c")
		e.succeed(a)
		_, err = e.d.StartAttempt(e.ctx, fence(a))
		wantErr[*dispatch.TerminalError](t, err)
		e.clock.Advance(91 * time.Second) // c's lease ran out; nothing reaped it yet
		if _, err := e.d.StartAttempt(e.ctx, fence(c)); !errors.Is(err, dispatch.ErrTaskExpired) {
			t.Errorf("expired lease: %v", err)
		}
		if s := e.status(job, "c"); s != lifecycle.Running {
			t.Errorf("StartAttempt changed the task to %s", s)
		}
		if _, err := e.d.StartAttempt(e.ctx, dispatch.Fence{TaskID: "00000000-0000-0000-0000-000000000000", LeaseToken: "x"}); !errors.Is(err, dispatch.ErrTaskNotFound) {
			t.Errorf("unknown task: %v", err)
		}
	})
}

func TestStoreWakeupsWriteNoOutboxMessageYetWakeWaitingClaimers(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, func(c *dispatch.Config) { c.StoreWakeups = true })
		job := e.submit(spec("a"), spec("b", "a"))
		c := e.claim(job, "a")
		got := make(chan []*dispatch.Claim, 1)
		go func() {
			claims, err := e.d.ClaimWait(e.ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w"}, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- claims
		}()
		if err := e.clock.BlockUntilContext(e.ctx, 1); err != nil { // waiting: nothing is ready
			t.Fatal(err)
		}
		e.succeed(c)
		select {
		case claims := <-got:
			if len(claims) != 1 || claims[0].Task.Key != "b" {
				t.Fatalf("claimed %v, want b", claims)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting claimer was not woken when b became ready")
		}
		msgs, err := st.OutboxAfter(e.ctx, 0, 100)
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
