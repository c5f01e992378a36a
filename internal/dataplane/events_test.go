package dataplane_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestRecordEventsIsFencedIdempotentAndValidated(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		events := []dispatch.DatasetEvent{
			{DatasetUUID: ds, DatasetVersion: "v1", Cursor: i64(12345)},
			{DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "1000000-1010000", Start: i64(1000000), End: i64(1010000)},
		}
		n, err := e.D.RecordEvents(e.Ctx, fence(c), events)
		if err != nil || n != 2 {
			t.Fatalf("record: %d, %v", n, err)
		}
		if n, err := e.D.RecordEvents(e.Ctx, fence(c), events); err != nil || n != 0 {
			t.Fatalf("repeat: %d new, %v; want 0 new and no error", n, err)
		}
		stored, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID)
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
			_, err := e.D.RecordEvents(e.Ctx, fence(c), bad)
			dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		}
		stale := fence(c)
		stale.LeaseToken = "not-it"
		if _, err := e.D.RecordEvents(e.Ctx, stale, events[:1]); !errors.Is(err, dispatch.ErrLeaseMismatch) {
			t.Errorf("stale token: %v", err)
		}
		e.Succeed(c)
		if _, err := e.D.RecordEvents(e.Ctx, fence(c), []dispatch.DatasetEvent{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(1)}}); err == nil {
			t.Error("events accepted after the attempt completed")
		}
		if stored, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID); len(stored) != 2 {
			t.Errorf("refused calls stored events: %d", len(stored))
		}
	})
}

func TestEventsOfATimedOutAttemptAreAcceptedUntilTheNextClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		e.Expire()
		ev := []dispatch.DatasetEvent{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(1)}}
		if _, err := e.D.RecordEvents(e.Ctx, fence(c), ev); err != nil {
			t.Fatalf("late events before the next claim: %v", err)
		}
		e.Clock.Advance(10 * time.Second)
		e.Claim(job, "a")
		_, err := e.D.RecordEvents(e.Ctx, fence(c), ev)
		dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err)
	})
}

func TestCompletionStoresItsFinalEventsWithTheOutcome(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		bad := dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken, Outcome: store.OutcomeSucceeded,
			Events: []dispatch.DatasetEvent{{DatasetUUID: ds}}}
		_, err := e.D.Complete(e.Ctx, bad)
		dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		if s := e.Status(job, "a"); s != lifecycle.Running {
			t.Fatalf("an invalid completion changed the task to %s", s)
		}
		good := bad
		good.Events = []dispatch.DatasetEvent{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(7)}}
		if _, err := e.D.Complete(e.Ctx, good); err != nil {
			t.Fatal(err)
		}
		if evs, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID); len(evs) != 1 || *evs[0].Cursor != 7 {
			t.Errorf("events %+v", evs)
		}
	})
}
