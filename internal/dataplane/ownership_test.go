package dataplane_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// ownDataset deploys pipelinetest.AlertsDoc for tenant and returns the uuid of its dataset
// alert_events: a dataset of the tenant that its tasks' events may name.
func (e *env) ownDatasetOf(tenant string) string {
	e.T.Helper()
	if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		e.T.Fatalf("deploy for %s: %v", tenant, err)
	}
	ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alert_events")
	if err != nil {
		e.T.Fatal(err)
	}
	return ds.UUID
}

func (e *env) ownDataset() string { return e.ownDatasetOf(tenant) }

// outboxTopics counts the outbox messages of topic.
func (e *env) outboxTopic(topic string) int {
	e.T.Helper()
	msgs, err := e.Store.OutboxListAfter(e.Ctx, 0, 10000)
	if err != nil {
		e.T.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		if m.Topic == topic {
			n++
		}
	}
	return n
}

// Rule: a task's events may name only datasets of its own tenant. An event naming another
// tenant's dataset — or a dataset that does not exist, which gets the same answer — is refused
// with the whole call: nothing is stored or routed, mid-task or with the completion, and the
// attempt can still report correctly afterwards.
func TestEventsNameOnlyTheTenantsOwnDatasets(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		own, foreign := e.ownDataset(), e.ownDatasetOf("victim")
		const unknown = "0b2f5c8e-1d3a-4b6c-9e7f-8a9b0c1d2e3f"
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		ev := func(ds string) report.Event {
			return report.Event{DatasetUUID: ds, DatasetVersion: "v1", Cursor: i64(1)}
		}
		for _, tc := range []struct {
			events []report.Event
			want   string
		}{
			{[]report.Event{ev(foreign)}, fmt.Sprintf(`events[0]: dataset_uuid %q: this tenant has no such dataset`, foreign)},
			{[]report.Event{ev(unknown)}, fmt.Sprintf(`events[0]: dataset_uuid %q: this tenant has no such dataset`, unknown)},
			{[]report.Event{ev(own), ev(foreign)}, fmt.Sprintf(`events[1]: dataset_uuid %q: this tenant has no such dataset`, foreign)},
		} {
			_, err := e.dp.Intake().Record(e.Ctx, fence(c), tc.events)
			if bad := dispatchtest.WantErr[*dispatch.InvalidError](t, err); bad.Message != tc.want {
				t.Errorf("refusal %q, want %q", bad.Message, tc.want)
			}
			_, err = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
				Outcome: store.OutcomeSucceeded, Events: tc.events})
			if bad := dispatchtest.WantErr[*dispatch.InvalidError](t, err); bad.Message != tc.want {
				t.Errorf("completion's refusal %q, want %q", bad.Message, tc.want)
			}
		}
		if evs, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID); len(evs) != 0 {
			t.Fatalf("refused events were stored: %+v", evs)
		}
		if n := e.outboxTopic(store.TopicDatasetEvent); n != 0 {
			t.Fatalf("refused events were queued for routing: %d", n)
		}
		if s := e.Status(job, "a"); s != lifecycle.Running {
			t.Fatalf("a refused completion changed the task to %s", s)
		}
		// The victim sees nothing of it.
		v, err := e.dp.GetDataset(e.Ctx, "victim", foreign, 20)
		if err != nil || len(v.Events) != 0 {
			t.Fatalf("the victim's dataset: %v, recent events %+v", err, v.Events)
		}
		// The attempt still reports its own dataset's events, and completes.
		if n, err := e.dp.Intake().Record(e.Ctx, fence(c), []report.Event{ev(own)}); err != nil || n != 1 {
			t.Fatalf("own event: %d %v", n, err)
		}
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{{DatasetUUID: own, DatasetVersion: "v1", Cursor: i64(2)}}}); err != nil {
			t.Fatal(err)
		}
		if evs, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID); len(evs) != 2 {
			t.Fatalf("stored %d events, want the two of the own dataset", len(evs))
		}
	})
}

// Rule: a dataset's recent events are those its own tenant's tasks reported. An event of another
// tenant's task that is already stored (written before events were checked) never shows.
func TestRecentEventsAreTheTenantsOwn(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		victims := e.ownDatasetOf("victim")
		// The victim's own task reports an event.
		res, err := e.D.CreateJob(e.Ctx, dispatch.CreateJobParams{Tenant: "victim", Tasks: []lifecycle.TaskSpec{{Key: "v", Name: "v"}}})
		if err != nil {
			t.Fatal(err)
		}
		tasks, _ := st.TaskListByJob(e.Ctx, res.Job.ID)
		vc, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: tasks[0].ID, WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.dp.Intake().Record(e.Ctx, fence(vc), []report.Event{{DatasetUUID: victims, DatasetVersion: "v1", Cursor: i64(1)}}); err != nil {
			t.Fatal(err)
		}
		// An intruder's event on it, stored directly, as it could be before the check.
		job := e.Submit(spec("x"))
		ic := e.Claim(job, "x")
		if err := st.InTx(e.Ctx, func(tx store.Tx) error {
			_, err := tx.DatasetEventInsertMany(e.Ctx, []*store.DatasetEvent{{DedupeKey: "intruder", JobID: job.ID, TaskID: ic.Task.ID,
				Attempt: 1, DatasetUUID: victims, DatasetVersion: "v1", Cursor: i64(99), CreatedAt: e.Clock.Now()}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		v, err := e.dp.GetDataset(e.Ctx, "victim", "alert_events", 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Events) != 1 || v.Events[0].TaskID != vc.Task.ID {
			var by []string
			for _, ev := range v.Events {
				by = append(by, ev.TaskID)
			}
			t.Fatalf("recent events by %q, want only the victim's task %s (not %s)", by, vc.Task.ID, ic.Task.ID)
		}
	})
}

// Rule: with object storage, a published version's storage_ref, when it names a prefix, must lie
// under its dataset's own prefix (datasets/{dataset_uuid}/...); otherwise the completion is refused
// naming the entry, nothing is registered, and the attempt can still complete correctly.
func TestPublishedVersionLiesUnderItsDatasetsPrefix(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		bs, err := blob.Open(t.Context(), blobtest.File(t), blob.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, st, func(c *dataplane.Config) { c.Blob = bs })
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(chainDoc), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		blocks, err := st.DatasetGetByName(e.Ctx, tenant, "blocks")
		if err != nil {
			t.Fatal(err)
		}
		other := e.ownDatasetOf("victim")
		root, own := bs.Root(), bs.Root()+"datasets/"+blocks.UUID+"/"
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		complete := func(ref string) error {
			_, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
				Outcome: store.OutcomeSucceeded, Published: []report.Published{
					{DatasetUUID: blocks.UUID, DatasetVersion: "v0", StorageRef: json.RawMessage(`{"table":"blocks_v0"}`)},
					{DatasetUUID: blocks.UUID, DatasetVersion: "v2", StorageRef: json.RawMessage(ref)}}})
			return err
		}
		for ref, want := range map[string]string{
			`"` + root + `buffers/"`: fmt.Sprintf(`datasets_published[1].storage_ref: %q is not under the dataset's own prefix %s`, root+"buffers/", own),
			`{"scheme":"file","prefix":"` + strings.TrimPrefix(root, "file://") + `buffers/` + other + `/t/1/"}`: fmt.Sprintf(
				`datasets_published[1].storage_ref: %q is not under the dataset's own prefix %s`, root+"buffers/"+other+"/t/1/", own),
			`"` + root + `datasets/` + other + `/t/1/"`: "is not under the dataset's own prefix",
			`"` + own + `"`:                "is the dataset's own prefix itself",
			`"` + own + `../../scratch/"`:  `".." segment`,
			`"s3://elsewhere/datasets/x/"`: `has scheme "s3"`,
			`"/etc/"`:                      "is not a URI",
		} {
			err := complete(ref)
			if bad := dispatchtest.WantErr[*dispatch.InvalidError](t, err); !strings.Contains(bad.Message, want) ||
				!strings.HasPrefix(bad.Message, "datasets_published[1].storage_ref: ") {
				t.Errorf("storage_ref %s: refusal %q, want it to say %q", ref, bad.Message, want)
			}
		}
		// Too many entries at once.
		many := make([]report.Published, report.MaxPublished+1)
		for i := range many {
			many[i] = report.Published{DatasetUUID: blocks.UUID, DatasetVersion: fmt.Sprintf("m%d", i)}
		}
		_, err = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Published: many})
		if bad := dispatchtest.WantErr[*dispatch.InvalidError](t, err); bad.Message != "datasets_published holds 1001 entries; at most 1000 per completion" {
			t.Errorf("refusal %q", bad.Message)
		}
		if vs, _ := st.DatasetVersionList(e.Ctx, blocks.UUID); len(vs) != 1 {
			t.Fatalf("refused completions registered versions: %+v", vs)
		}
		if s := e.Status(job, "a"); s != lifecycle.Running {
			t.Fatalf("a refused completion changed the task to %s", s)
		}
		// A version under the dataset's own prefix, by the attempt that was refused.
		if err := complete(`"` + own + c.Task.ID + `/1/"`); err != nil {
			t.Fatal(err)
		}
		vs, _ := st.DatasetVersionList(e.Ctx, blocks.UUID)
		if len(vs) != 3 || string(vs[2].StorageRef) != `"`+own+c.Task.ID+`/1/"` {
			t.Fatalf("versions %+v", vs)
		}
	})
}

// Without object storage no capability token carries a storage grant, so a storage_ref is
// registered as the task gave it (a grant derived later, with object storage, checks it again).
func TestPublishedVersionWithoutObjectStorageIsKeptAsGiven(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		job := e.Submit(spec("a"))
		c := e.Claim(job, "a")
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Published: []report.Published{
				{DatasetUUID: ds, DatasetVersion: "v2", StorageRef: json.RawMessage(`{"scheme":"s3","bucket":"b","prefix":"blocks/v2/"}`)}}}); err != nil {
			t.Fatal(err)
		}
		if vs, _ := st.DatasetVersionList(e.Ctx, ds); len(vs) != 2 || string(vs[1].StorageRef) != `{"scheme":"s3","bucket":"b","prefix":"blocks/v2/"}` {
			t.Fatalf("versions %+v", vs)
		}
	})
}
