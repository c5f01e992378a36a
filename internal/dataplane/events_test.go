package dataplane_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestRecordEventsIsFencedIdempotentAndValidated(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		events := []report.Event{
			{DatasetUUID: ds, DatasetVersion: "v1", Cursor: i64(12345)},
			{DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "1000000-1010000", Start: i64(1000000), End: i64(1010000)},
		}
		n, err := e.dp.Intake().Record(e.Ctx, fence(c), events)
		if err != nil || n != 2 {
			t.Fatalf("record: %d, %v", n, err)
		}
		if n, err := e.dp.Intake().Record(e.Ctx, fence(c), events); err != nil || n != 0 {
			t.Fatalf("repeat: %d new, %v; want 0 new and no error", n, err)
		}
		stored, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID)
		if len(stored) != 2 || *stored[0].Cursor != 12345 || stored[1].PartitionKey != "1000000-1010000" || stored[0].Attempt != 1 {
			t.Errorf("stored events %+v", stored)
		}
		for _, bad := range [][]report.Event{
			{{DatasetVersion: "v1", Cursor: i64(1)}},
			{{DatasetUUID: ds, Cursor: i64(1)}},
			{{DatasetUUID: ds, DatasetVersion: "v1"}},
			{{DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "10-5"}},
			{{DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "1-5", Start: i64(2), End: i64(5)}},
			{{DatasetUUID: "ds", DatasetVersion: "v1", Cursor: i64(1)}}, // no dataset of the tenant
		} {
			_, err := e.dp.Intake().Record(e.Ctx, fence(c), bad)
			dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		}
		stale := fence(c)
		stale.LeaseToken = "not-it"
		if _, err := e.dp.Intake().Record(e.Ctx, stale, events[:1]); !errors.Is(err, dispatch.ErrLeaseMismatch) {
			t.Errorf("stale token: %v", err)
		}
		e.Succeed(c)
		if _, err := e.dp.Intake().Record(e.Ctx, fence(c), []report.Event{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(1)}}); err == nil {
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
		ev := []report.Event{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(1)}}
		if _, err := e.dp.Intake().Record(e.Ctx, fence(c), ev); err != nil {
			t.Fatalf("late events before the next claim: %v", err)
		}
		e.Clock.Advance(10 * time.Second)
		e.Claim(job, "a")
		_, err := e.dp.Intake().Record(e.Ctx, fence(c), ev)
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
			Events: []report.Event{{DatasetUUID: ds}}}
		_, err := e.D.Complete(e.Ctx, bad)
		dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		if s := e.Status(job, "a"); s != lifecycle.Running {
			t.Fatalf("an invalid completion changed the task to %s", s)
		}
		good := bad
		good.Events = []report.Event{{DatasetUUID: ds, DatasetVersion: "v", Cursor: i64(7)}}
		if _, err := e.D.Complete(e.Ctx, good); err != nil {
			t.Fatal(err)
		}
		if evs, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID); len(evs) != 1 || *evs[0].Cursor != 7 {
			t.Errorf("events %+v", evs)
		}
	})
}

// Rule: a partition event's start and end are its partition_key's bounds, given or not. The same
// partition reported by the same task with and without them is one event, stored with its
// bounds and routed once; bounds that contradict the key are refused.
func TestPartitionEventWithAndWithoutBoundsIsOneEvent(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		blocks, v := e.output("follower", 0)
		bare := func(key string) report.Event {
			return report.Event{DatasetUUID: blocks, DatasetVersion: v, PartitionKey: key}
		}
		record := func(events ...report.Event) int {
			t.Helper()
			n, err := e.dp.Intake().Record(e.Ctx, fence(e.emitter), events)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := record(partition(blocks, v, 100, 199)); n != 1 {
			t.Fatalf("the partition with its bounds: %d new, want 1", n)
		}
		if n := record(bare("100-199")); n != 0 {
			t.Errorf("the same partition without bounds: %d new, want 0", n)
		}
		// The other way round, and within one call.
		if n := record(bare("200-299"), partition(blocks, v, 200, 299)); n != 1 {
			t.Errorf("a partition without, then with its bounds: %d new, want 1", n)
		}
		onlyStart := bare("300-399")
		onlyStart.Start = i64(300)
		if n := record(onlyStart, bare("300-399"), partition(blocks, v, 300, 399)); n != 1 {
			t.Errorf("a partition with one bound, none and both: %d new, want 1", n)
		}
		stored, err := st.DatasetEventListByTask(e.Ctx, e.emitter.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) != 3 {
			t.Fatalf("stored %d events, want 3", len(stored))
		}
		for i, ev := range stored {
			if start := int64(100 * (i + 1)); ev.Start == nil || ev.End == nil || *ev.Start != start || *ev.End != start+99 {
				t.Errorf("event %s stored with start %v and end %v", ev.PartitionKey, ev.Start, ev.End)
			}
		}
		if got := e.route(); got != 9 {
			t.Errorf("routed %d tasks, want 9 (ranges, mainnet and testnets per partition)", got)
		}
		// Bounds that are not the key's are refused, and store nothing.
		for _, bad := range []report.Event{partition(blocks, v, 100, 200), func() report.Event {
			ev := bare("100-199")
			ev.End = i64(198)
			return ev
		}()} {
			bad.PartitionKey = "100-199"
			_, err := e.dp.Intake().Record(e.Ctx, fence(e.emitter), []report.Event{bad})
			dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		}
		if stored, _ := st.DatasetEventListByTask(e.Ctx, e.emitter.Task.ID); len(stored) != 3 {
			t.Errorf("refused events were stored: %d events", len(stored))
		}
	})
}
