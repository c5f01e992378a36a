package dataplane_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// resetAlertsDoc is pipelinetest.AlertsDoc whose source job scan resets its outputs.
var resetAlertsDoc = strings.Replace(pipelinetest.AlertsDoc, "    source: {kind: manual}\n",
	"    source: {kind: manual}\n    bootstrap: {reset_outputs: true}\n", 1)

// resetAlerts deploys resetAlertsDoc, which resets alert_events, and returns the dataset's fresh
// current version.
func (e *bufferEnv) resetAlerts() string {
	e.T.Helper()
	before := e.currentVersion()
	if res, err := e.dp.Deploy(e.Ctx, tenant, []byte(resetAlertsDoc), "application/yaml"); err != nil || !res.Activated {
		e.T.Fatalf("deploy the reset: %+v %v", res, err)
	}
	fresh := e.currentVersion()
	if fresh == before {
		e.T.Fatalf("the reset left the current version at %s", fresh)
	}
	return fresh
}

func (e *bufferEnv) currentVersion() string {
	e.T.Helper()
	ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alert_events")
	if err != nil {
		e.T.Fatal(err)
	}
	return ds.CurrentVersion
}

// Rule: a batch is of the dataset version its attempt was pinned to when its task was created. A
// task claimed before a reset_outputs deploy publishes after it: refused with 409
// dataset_version_not_current, naming its old version or none, and nothing is recorded or
// queued; naming any other version than its pinned one is 409 dataset_version_conflict. A task
// created after the reset publishes at the fresh version.
func TestBufferPublishOfAVersionNoLongerCurrentIsRefused(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		before, old := e.writer, e.dataset.CurrentVersion
		fresh := e.resetAlerts()
		queued := e.outboxTopic(store.TopicBufferBatch)

		publish := func(c *dispatch.Claim, version string) error {
			_, err := e.dp.Buffers().Publish(e.Ctx, bufferqueue.PublishParams{Fence: fence(c),
				BatchURI: e.uri(c, e.dataset.UUID, "b-"+version+".jsonl"), DatasetVersion: version})
			return err
		}
		notCurrent := fmt.Sprintf(`this task writes version %s of dataset "alert_events", which is no longer its current version (%s: `+
			`its outputs were reset, or its current version was switched, since the task was created); nothing was recorded`, old, fresh)
		for _, version := range []string{"", old} {
			c := dispatchtest.WantErr[*dispatch.ConflictError](t, publish(before, version))
			if c.Code != "dataset_version_not_current" || c.Message != notCurrent {
				t.Errorf("a publish naming version %q after the reset: %s %q, want dataset_version_not_current %q", version, c.Code, c.Message, notCurrent)
			}
		}
		for _, version := range []string{fresh, "nope"} {
			c := dispatchtest.WantErr[*dispatch.ConflictError](t, publish(before, version))
			want := fmt.Sprintf(`dataset_version %q is not the version of dataset "alert_events" this task writes (%s, current when the task was created); `+
				`nothing was recorded`, version, old)
			if c.Code != "dataset_version_conflict" || c.Message != want {
				t.Errorf("a publish naming version %q: %s %q, want dataset_version_conflict %q", version, c.Code, c.Message, want)
			}
		}
		if recs, _ := st.BufferPublishListByTask(e.Ctx, before.Task.ID); len(recs) != 0 {
			t.Fatalf("refused publishes were recorded: %+v", recs)
		}
		if n := e.outboxTopic(store.TopicBufferBatch); n != queued {
			t.Fatalf("refused publishes queued %d sink messages", n-queued)
		}

		// A task created after the reset writes the fresh version, and only it.
		after := e.runScan()
		for _, version := range []string{old, "nope"} {
			if c := dispatchtest.WantErr[*dispatch.ConflictError](t, publish(after, version)); c.Code != "dataset_version_conflict" {
				t.Errorf("a publish of the fresh task naming version %q: %s %q", version, c.Code, c.Message)
			}
		}
		for _, version := range []string{"", fresh} {
			if err := publish(after, version); err != nil {
				t.Fatalf("a publish of the fresh task naming version %q: %v", version, err)
			}
		}
		recs, _ := st.BufferPublishListByTask(e.Ctx, after.Task.ID)
		if len(recs) != 2 || recs[0].DatasetVersion != fresh || recs[1].DatasetVersion != fresh {
			t.Fatalf("the fresh task's records %+v, want 2 of version %s", recs, fresh)
		}
	})
}

// Rule: the dataset event of a committed batch is of the batch's version, not of the dataset's
// current one: a batch a sink held when a reset ran, and commits after it, makes an event of the
// version the reset replaced, which is never routed.
func TestACommittedBatchsEventIsOfTheBatchsVersion(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		old := e.dataset.CurrentVersion
		e.publish(e.writer, e.uri(e.writer, e.dataset.UUID, "held.jsonl"))
		msgs := e.claimBatches(bufferqueue.ClaimParams{})
		if len(msgs) != 1 {
			t.Fatalf("claimed %d batches, want 1", len(msgs))
		}
		e.resetAlerts()
		if err := e.dp.Buffers().Commit(e.Ctx, msgs[0].ID, bufferqueue.Loaded{Cursor: 1, Inserted: 2,
			Facets: map[string][]any{"severity": {"high", "low"}}}); err != nil {
			t.Fatal(err)
		}
		events, err := st.DatasetEventListByTask(e.Ctx, e.writer.Task.ID)
		if err != nil || len(events) != 1 || events[0].DatasetVersion != old {
			t.Fatalf("events %v %+v, want one of version %s", err, events, old)
		}
		if _, tasks, err := e.dp.NewRouter(dataplane.RouteConfig{}).RunOnce(e.Ctx); err != nil || tasks != 0 {
			t.Fatalf("routing: %d tasks %v, want none for an event of a version no longer current", tasks, err)
		}
	})
}

// Rule: a batch whose version is no longer current when a sink would receive it is dead-lettered
// at the claim, with a last_error that says so, and never handed out; one a sink holds already is
// dead-lettered at once when the sink fails it; a dead letter of such a version cannot be put back
// on the queue (409), since it could no longer be loaded. Here the current version is switched
// (POST /datasets/{name}/current) between the publish and the claim.
func TestABatchOfAVersionNoLongerCurrentIsNeverHandedOut(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		old := e.dataset.CurrentVersion
		fresh := e.resetAlerts() // registers a second version to switch between
		if _, err := e.dp.SetCurrentVersion(e.Ctx, tenant, "alert_events", old); err != nil {
			t.Fatal(err)
		}
		w := e.runScan() // pinned to old
		e.publish(w, e.uri(w, e.dataset.UUID, "a.jsonl"))
		e.publish(w, e.uri(w, e.dataset.UUID, "b.jsonl"))
		held := e.claimBatches(bufferqueue.ClaimParams{})
		if len(held) != 1 {
			t.Fatalf("claimed %d batches, want 1", len(held))
		}
		if _, err := e.dp.SetCurrentVersion(e.Ctx, tenant, "alert_events", fresh); err != nil {
			t.Fatal(err)
		}
		if msgs := e.claimBatches(bufferqueue.ClaimParams{Max: 10}); len(msgs) != 0 {
			t.Fatalf("handed out %d batches of a version no longer current", len(msgs))
		}
		if dead, err := e.dp.Buffers().Fail(e.Ctx, held[0].ID, 1, "the artifact could not be read"); err != nil || !dead {
			t.Fatalf("the held batch's first failure: dead=%v %v, want it dead-lettered at once", dead, err)
		}
		recs, _ := st.BufferPublishListByTask(e.Ctx, w.Task.ID)
		if len(recs) != 2 {
			t.Fatalf("records %+v", recs)
		}
		stale := fmt.Sprintf("discarded, not loaded: the batch is of dataset version %s, which is no longer the dataset's current version (%s)", old, fresh)
		for _, r := range recs {
			want := map[int64]string{held[0].ID: "the artifact could not be read"}[r.ID]
			if want == "" {
				want = stale
			}
			if r.State != store.BufferDead || r.LastError != want {
				t.Errorf("batch %d: %s %q, want dead with %q", r.ID, r.State, r.LastError, want)
			}
			_, err := e.dp.Buffers().Retry(e.Ctx, tenant, "alert_events", r.ID)
			c := dispatchtest.WantErr[*dispatch.ConflictError](t, err)
			wantRetry := fmt.Sprintf("batch %d is of dataset version %s, which is no longer the dataset's current version (%s): it can no longer be loaded; "+
				"publish its rows again from a task of the current version", r.ID, old, fresh)
			if c.Code != "dataset_version_not_current" || c.Message != wantRetry {
				t.Errorf("retry of batch %d: %s %q, want %q", r.ID, c.Code, c.Message, wantRetry)
			}
		}
		if recs, _ := st.BufferPublishListByTask(e.Ctx, w.Task.ID); recs[0].State != store.BufferDead || recs[1].State != store.BufferDead {
			t.Fatalf("a refused retry changed the batches: %+v", recs)
		}
		if events, _ := st.DatasetEventListByTask(e.Ctx, w.Task.ID); len(events) != 0 {
			t.Fatalf("events %+v", events)
		}
	})
}
