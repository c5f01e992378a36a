package dataplane_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/wire"
)

// bufferEnv is an env with object storage, pipelinetest.AlertsDoc deployed and a running task that
// publishes.
type bufferEnv struct {
	*env
	blob    *blob.Store
	dataset *store.Dataset
	writer  *dispatch.Claim
}

func newBufferEnv(t *testing.T, st store.Store) *bufferEnv {
	t.Helper()
	bs, err := blob.Open(t.Context(), blobtest.File(t), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &bufferEnv{env: newEnv(t, st, func(c *dataplane.Config) { c.Blob = bs }), blob: bs}
	if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if e.dataset, err = st.DatasetGetByName(e.Ctx, tenant, "alert_events"); err != nil {
		t.Fatal(err)
	}
	e.writer = e.runScan()
	return e
}

// runScan starts a task of the job scan, whose output alert_events is, and claims it: a running
// attempt that may publish into the dataset.
func (e *bufferEnv) runScan() *dispatch.Claim {
	e.T.Helper()
	run, err := e.dp.RunSource(e.Ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: "alerts", Job: "scan"})
	if err != nil {
		e.T.Fatalf("run scan: %v", err)
	}
	return e.claimID(run.TaskID)
}

func (e *bufferEnv) claimID(taskID string) *dispatch.Claim {
	e.T.Helper()
	c, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: taskID, WorkerID: "w"})
	if err != nil {
		e.T.Fatalf("claim %s: %v", taskID, err)
	}
	return c
}

// uri is a batch URI under c's own prefix for the dataset named by segment.
func (e *bufferEnv) uri(c *dispatch.Claim, segment, name string) string {
	return e.blob.URI(blob.BatchPrefix(segment, c.Task.ID, c.Task.Attempt) + name)
}

func (e *bufferEnv) publish(c *dispatch.Claim, uri string) {
	e.T.Helper()
	if _, err := e.dp.Buffers().Publish(e.Ctx, bufferqueue.PublishParams{Fence: fence(c), BatchURI: uri}); err != nil {
		e.T.Fatalf("publish %s: %v", uri, err)
	}
}

func (e *bufferEnv) claimBatches(p bufferqueue.ClaimParams) []*bufferqueue.Message {
	e.T.Helper()
	msgs, err := e.dp.Buffers().Claim(e.Ctx, p)
	if err != nil {
		e.T.Fatalf("claim batches: %v", err)
	}
	return msgs
}

func TestBufferPublishRecordsOnceAndQueuesTheSinkMessage(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		c := e.writer
		p := bufferqueue.PublishParams{Fence: fence(c), BatchURI: e.uri(c, e.dataset.UUID, "batch.jsonl"),
			DatasetUUID: e.dataset.UUID, RecordCount: i64(1000)}
		dup, err := e.dp.Buffers().Publish(e.Ctx, p)
		if err != nil || dup {
			t.Fatalf("publish: dup=%v %v", dup, err)
		}
		if dup, err := e.dp.Buffers().Publish(e.Ctx, p); err != nil || !dup {
			t.Fatalf("repeat: dup=%v %v", dup, err)
		}
		recs, _ := st.BufferPublishListByTask(e.Ctx, c.Task.ID)
		if len(recs) != 1 || recs[0].Tenant != tenant || *recs[0].RecordCount != 1000 || recs[0].State != store.BufferQueued ||
			recs[0].DatasetVersion != e.dataset.CurrentVersion {
			t.Fatalf("records %+v", recs)
		}
		msgs, _ := st.OutboxListAfter(e.Ctx, 0, 100)
		var sink []map[string]any
		for _, m := range msgs {
			if m.Topic == store.TopicBufferBatch {
				var v map[string]any
				if err := json.Unmarshal(m.Payload, &v); err != nil {
					t.Fatal(err)
				}
				sink = append(sink, v)
			}
		}
		if len(sink) != 1 || sink[0]["org_id"] != tenant || sink[0]["kind"] != "buffer_batch" || sink[0]["batch_uri"] != p.BatchURI ||
			sink[0]["dataset_uuid"] != e.dataset.UUID {
			t.Errorf("sink messages %v", sink)
		}
		if len(msgs[len(msgs)-1].Payload) > 256<<10 {
			t.Error("a queue message above 256 KB")
		}
	})
}

// Rule: a task can make the sink read only its own attempt's artifacts, for a buffered dataset of
// its tenant; everything else is refused and records nothing.
func TestBufferPublishRefusesURIsOutsideTheAttemptsPrefix(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		c := e.writer
		other := e.Claim(e.Submit(spec("other")), "other")
		id, ds := c.Task.ID, e.dataset.UUID
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(chainDoc), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			p    bufferqueue.PublishParams
			want string
		}{
			{"a file of the server", bufferqueue.PublishParams{BatchURI: "file:///etc/passwd"}, "batch_uri"},
			{"another store", bufferqueue.PublishParams{BatchURI: "s3://elsewhere/buffers/" + ds + "/" + id + "/1/b.jsonl"}, "batch_uri"},
			{"outside the buffer location", bufferqueue.PublishParams{BatchURI: e.blob.URI("data/" + ds + "/" + id + "/1/b.jsonl")}, "own prefix"},
			{"another task's prefix", bufferqueue.PublishParams{BatchURI: e.uri(other, ds, "b.jsonl")}, "own prefix"},
			{"another attempt's prefix", bufferqueue.PublishParams{BatchURI: e.blob.URI("buffers/" + ds + "/" + id + "/2/b.jsonl")}, "own prefix"},
			{"a climb out", bufferqueue.PublishParams{BatchURI: e.blob.URI("buffers/" + ds + "/" + id + "/1/../../x/1/b.jsonl")}, "batch_uri"},
			{"the prefix itself", bufferqueue.PublishParams{BatchURI: e.uri(c, ds, "")}, "batch_uri"},
			{"an unknown dataset", bufferqueue.PublishParams{BatchURI: e.uri(c, "nope", "b.jsonl")}, "no such dataset"},
			{"a direct dataset", bufferqueue.PublishParams{BatchURI: e.uri(c, "blocks", "b.jsonl")}, "not a buffered dataset"},
			{"a dataset_uuid that is not the path's", bufferqueue.PublishParams{BatchURI: e.uri(c, ds, "b.jsonl"), DatasetUUID: "x"}, "not the dataset"},
			{"no dataset at all", bufferqueue.PublishParams{BatchURI: e.blob.URI("buffers/" + id + "/1/b.jsonl")}, "dataset_uuid is required"},
		}
		for _, tt := range tests {
			tt.p.Fence = fence(c)
			_, err := e.dp.Buffers().Publish(e.Ctx, tt.p)
			bad := dispatchtest.WantErr[*dispatch.InvalidError](t, err)
			if !strings.Contains(bad.Message, tt.want) {
				t.Errorf("%s: %q, want it to mention %q", tt.name, bad.Message, tt.want)
			}
		}
		if recs, _ := st.BufferPublishListByTask(e.Ctx, id); len(recs) != 0 {
			t.Fatalf("refused publishes recorded %+v", recs)
		}
		// Accepted: the dataset by uuid or by name, and the shorter prefix with the dataset in the
		// body.
		e.publish(c, e.uri(c, ds, "a.jsonl"))
		e.publish(c, e.uri(c, "alert_events", "b.jsonl"))
		if _, err := e.dp.Buffers().Publish(e.Ctx, bufferqueue.PublishParams{Fence: fence(c), DedupeScope: "alert_events",
			BatchURI: e.blob.URI("buffers/" + id + "/1/c.jsonl")}); err != nil {
			t.Fatal(err)
		}
		if recs, _ := st.BufferPublishListByTask(e.Ctx, id); len(recs) != 3 || recs[1].DatasetUUID != ds || recs[2].DatasetUUID != ds {
			t.Fatalf("records %+v", recs)
		}
	})
}

// Rule: only a task whose job declares the buffered dataset among its outputs may publish into
// it, the same outputs its capability token grants write prefixes for: a task of a plain job, or
// of another job of the pipeline (one that reads the dataset), is refused and records nothing.
func TestBufferPublishOnlyIntoTheJobsOwnBufferedOutputs(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		ds := e.dataset.UUID
		plain := e.Claim(e.Submit(spec("plain")), "plain")
		// pager reads alert_events: a task of it, made by a committed batch's event.
		e.publish(e.writer, e.uri(e.writer, ds, "seed.jsonl"))
		msgs := e.claimBatches(bufferqueue.ClaimParams{Max: 1})
		if len(msgs) != 1 {
			t.Fatalf("claimed %d batches", len(msgs))
		}
		if err := e.dp.Buffers().Commit(e.Ctx, msgs[0].ID, bufferqueue.Loaded{Cursor: 1, Inserted: 1,
			Facets: map[string][]any{"severity": {"high"}}}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.dp.NewRouter(dataplane.RouteConfig{}).RunOnce(e.Ctx); err != nil {
			t.Fatal(err)
		}
		pager := e.pipelineTask(t, "pager")
		for _, c := range []*dispatch.Claim{plain, pager} {
			for _, uri := range []string{e.uri(c, ds, "b.jsonl"), e.uri(c, "alert_events", "b.jsonl")} {
				_, err := e.dp.Buffers().Publish(e.Ctx, bufferqueue.PublishParams{Fence: fence(c), BatchURI: uri})
				denied := dispatchtest.WantErr[*dispatch.ForbiddenError](t, err)
				if want := `dataset "alert_events" is not an output of this task's job: only tasks of the pipeline job that publishes a buffered dataset may publish batches into it`; denied.Message != want {
					t.Errorf("refusal %q, want %q", denied.Message, want)
				}
			}
			if recs, _ := st.BufferPublishListByTask(e.Ctx, c.Task.ID); len(recs) != 0 {
				t.Fatalf("a refused publish was recorded: %+v", recs)
			}
		}
		if msgs := e.claimBatches(bufferqueue.ClaimParams{Max: 10}); len(msgs) != 0 {
			t.Fatalf("a refused publish reached the queue: %+v", msgs)
		}
	})
}

// pipelineTask claims the pending task of the pipeline job named job.
func (e *bufferEnv) pipelineTask(t *testing.T, job string) *dispatch.Claim {
	t.Helper()
	jobs, err := e.Store.JobList(e.Ctx, store.ListJobsParams{Tenant: tenant, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.PipelineJob != job {
			continue
		}
		tasks, err := e.Store.TaskListByJob(e.Ctx, j.ID)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("tasks of %s: %v %d", job, err, len(tasks))
		}
		return e.claimID(tasks[0].ID)
	}
	t.Fatalf("no task of the pipeline job %s", job)
	return nil
}

// Fencing (docs/lifecycle.md#fencing) for buffered publishes: a stale attempt's publish is
// refused, so its batch never reaches the sink.
func TestStaleAttemptsBufferPublishIsRefused(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		c := e.writer
		e.Expire()
		e.Clock.Advance(10 * time.Second)
		e.claimID(c.Task.ID)
		_, err := e.dp.Buffers().Publish(e.Ctx, bufferqueue.PublishParams{Fence: fence(c), BatchURI: e.uri(c, e.dataset.UUID, "b.jsonl")})
		dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err)
		if msgs := e.claimBatches(bufferqueue.ClaimParams{Max: 10}); len(msgs) != 0 {
			t.Fatalf("a stale publish reached the queue: %+v", msgs)
		}
	})
}

// The Buffer Queue: a claim counts a receive and hides the message for its visibility; a failure
// makes it visible again after a doubling delay; the tenth failed receive dead-letters it; a
// retry from the dead letters queues it again with a fresh budget.
func TestBufferQueueReceivesFailuresAndDeadLetters(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		e.publish(e.writer, e.uri(e.writer, e.dataset.UUID, "b.jsonl"))
		msgs := e.claimBatches(bufferqueue.ClaimParams{Max: 5, Visibility: 30 * time.Second})
		if len(msgs) != 1 || msgs[0].ReceiveCount != 1 || msgs[0].Tenant != tenant || msgs[0].Dataset.Name != "alert_events" ||
			msgs[0].Dataset.Schema == nil || !slices.Equal(msgs[0].Dataset.FilterFields, []string{"severity"}) {
			t.Fatalf("first claim %+v", msgs)
		}
		m := msgs[0]
		if again := e.claimBatches(bufferqueue.ClaimParams{Max: 5}); len(again) != 0 {
			t.Fatalf("a claimed message was delivered again within its visibility: %+v", again)
		}
		e.Clock.Advance(31 * time.Second)
		second := e.claimBatches(bufferqueue.ClaimParams{})
		if len(second) != 1 || second[0].ReceiveCount != 2 {
			t.Fatalf("after the visibility: %+v", second)
		}
		// The first receive's failure is stale: the message is the second receive's now.
		if _, err := e.dp.Buffers().Fail(e.Ctx, m.ID, 1, "row 3: bad"); !errors.Is(err, bufferqueue.ErrNotClaimed) {
			t.Fatalf("stale fail: %v", err)
		}
		receipt := 2
		for receipt < 10 {
			dead, err := e.dp.Buffers().Fail(e.Ctx, m.ID, receipt, "row 3: severity: must be a string")
			if err != nil || dead {
				t.Fatalf("fail receive %d: dead=%v %v", receipt, dead, err)
			}
			// Visible again after 1 s · 2^(receive-1), capped at a minute.
			delay := min(time.Second<<(receipt-1), time.Minute)
			e.Clock.Advance(delay - time.Millisecond)
			if got := e.claimBatches(bufferqueue.ClaimParams{}); len(got) != 0 {
				t.Fatalf("visible %v early after receive %d", time.Millisecond, receipt)
			}
			e.Clock.Advance(time.Millisecond)
			got := e.claimBatches(bufferqueue.ClaimParams{})
			if len(got) != 1 || got[0].ReceiveCount != receipt+1 {
				t.Fatalf("after receive %d's failure: %+v", receipt, got)
			}
			receipt++
		}
		dead, err := e.dp.Buffers().Fail(e.Ctx, m.ID, 10, "row 3: severity: must be a string")
		if err != nil || !dead {
			t.Fatalf("the tenth failure: dead=%v %v", dead, err)
		}
		e.Clock.Advance(time.Hour)
		if got := e.claimBatches(bufferqueue.ClaimParams{}); len(got) != 0 {
			t.Fatalf("a dead letter was delivered: %+v", got)
		}
		dl, err := e.dp.Buffers().DeadLetters(e.Ctx, tenant, "alert_events", 0, 10)
		if err != nil || len(dl) != 1 || dl[0].ReceiveCount != 10 || dl[0].LastError != "row 3: severity: must be a string" {
			t.Fatalf("dead letters %+v %v", dl, err)
		}
		if _, err := e.dp.Buffers().DeadLetters(e.Ctx, "other-tenant", "alert_events", 0, 10); !errors.Is(err, reads.ErrDatasetNotFound) {
			t.Errorf("another tenant's dead letters: %v", err)
		}
		if _, err := e.dp.Buffers().Retry(e.Ctx, "other-tenant", "alert_events", m.ID); !errors.Is(err, reads.ErrDatasetNotFound) {
			t.Errorf("another tenant's retry: %v", err)
		}
		if _, err := e.dp.Buffers().Retry(e.Ctx, tenant, "alert_events", m.ID); err != nil {
			t.Fatal(err)
		}
		got := e.claimBatches(bufferqueue.ClaimParams{})
		if len(got) != 1 || got[0].ReceiveCount != 1 {
			t.Fatalf("after the retry: %+v", got)
		}
		if _, err := e.dp.Buffers().Retry(e.Ctx, tenant, "alert_events", m.ID); err == nil {
			t.Error("retried a batch that is not dead")
		}
	})
}

// A message whose sinks keep dying (never failing it) is dead-lettered at its eleventh claim.
func TestBufferQueueDeadLettersAMessageNoSinkSettles(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		e.publish(e.writer, e.uri(e.writer, e.dataset.UUID, "b.jsonl"))
		for i := 1; i <= 10; i++ {
			if got := e.claimBatches(bufferqueue.ClaimParams{Visibility: time.Second}); len(got) != 1 || got[0].ReceiveCount != i {
				t.Fatalf("claim %d: %+v", i, got)
			}
			e.Clock.Advance(time.Second)
		}
		if got := e.claimBatches(bufferqueue.ClaimParams{}); len(got) != 0 {
			t.Fatalf("an eleventh receive: %+v", got)
		}
		dl, _ := e.dp.Buffers().DeadLetters(e.Ctx, tenant, "alert_events", 0, 10)
		if len(dl) != 1 || !strings.Contains(dl[0].LastError, "after 10 receives") {
			t.Fatalf("dead letters %+v", dl)
		}
	})
}

// A commit that added rows emits the dataset event of its cursor, once however often it is
// reported, and routing gives a task only to the consumers whose where some new row matches.
func TestCommittedBatchRoutesToConsumersWhoseWhereMatches(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		router := e.dp.NewRouter(dataplane.RouteConfig{})
		route := func() int {
			total := 0
			for {
				n, tasks, err := router.RunOnce(e.Ctx)
				if err != nil {
					t.Fatal(err)
				}
				total += tasks
				if n == 0 {
					return total
				}
			}
		}
		for i, facets := range []map[string][]any{{"severity": {"high"}}, {"severity": {"low", "high"}}, {"severity": {"info"}}} {
			name := []string{"a", "b", "c"}[i]
			e.publish(e.writer, e.uri(e.writer, e.dataset.UUID, name+".jsonl"))
			m := e.claimBatches(bufferqueue.ClaimParams{})[0]
			res := bufferqueue.Loaded{Cursor: int64(i + 1), Inserted: 3, Facets: facets}
			for range 2 {
				if err := e.dp.Buffers().Commit(e.Ctx, m.ID, res); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n := route(); n != 3 {
			t.Fatalf("routed %d tasks, want 3: pager for batches 1 and 2, digest for batch 2", n)
		}
		got := map[string][]int64{}
		jobs, err := st.JobList(e.Ctx, store.ListJobsParams{Tenant: tenant, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, job := range jobs {
			if job.PipelineJob != "pager" && job.PipelineJob != "digest" {
				continue
			}
			summaries, err := st.TaskListByJob(e.Ctx, job.ID)
			if err != nil || len(summaries) != 1 {
				t.Fatalf("tasks of %s: %v %v", job.ID, summaries, err)
			}
			task, err := st.TaskGet(e.Ctx, summaries[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			var route wire.Route
			if err := json.Unmarshal(task.Route, &route); err != nil {
				t.Fatal(err)
			}
			got[job.PipelineJob] = append(got[job.PipelineJob], *route.Inputs[0].Cursor)
		}
		for _, cursors := range got {
			slices.Sort(cursors)
		}
		if !slices.Equal(got["pager"], []int64{1, 2}) || !slices.Equal(got["digest"], []int64{2}) {
			t.Errorf("routed cursors %v", got)
		}
		// Committed messages are done: nothing is delivered again, and a commit of no rows emits
		// nothing.
		e.publish(e.writer, e.uri(e.writer, e.dataset.UUID, "d.jsonl"))
		m := e.claimBatches(bufferqueue.ClaimParams{})[0]
		if err := e.dp.Buffers().Commit(e.Ctx, m.ID, bufferqueue.Loaded{}); err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(time.Hour)
		if got := e.claimBatches(bufferqueue.ClaimParams{Max: 10}); len(got) != 0 {
			t.Fatalf("committed messages delivered again: %+v", got)
		}
		if n := route(); n != 0 {
			t.Errorf("a batch of no new rows routed %d tasks", n)
		}
		for _, bad := range []bufferqueue.Loaded{{Cursor: 1}, {Inserted: 1}, {Cursor: -1, Inserted: 1}} {
			if err := e.dp.Buffers().Commit(e.Ctx, m.ID, bad); err == nil {
				t.Errorf("commit %+v accepted", bad)
			}
		}
		if err := e.dp.Buffers().Commit(e.Ctx, 999999, bufferqueue.Loaded{}); !errors.Is(err, bufferqueue.ErrNotFound) {
			t.Errorf("commit of an unknown message: %v", err)
		}
	})
}

// A sink's error longer than what is kept is cut between characters, so the record stays valid
// UTF-8 (PostgreSQL refuses anything else) and the failure is recorded.
func TestBufferFailureKeepsLongErrorsValid(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		e.publish(e.writer, e.uri(e.writer, e.dataset.UUID, "b.jsonl"))
		m := e.claimBatches(bufferqueue.ClaimParams{})[0]
		reason := "x" + strings.Repeat("é", 3000) // 6,001 bytes; byte 4,000 is inside a character
		if _, err := e.dp.Buffers().Fail(e.Ctx, m.ID, m.ReceiveCount, reason); err != nil {
			t.Fatalf("fail with a long error: %v", err)
		}
		recs, _ := st.BufferPublishListByTask(e.Ctx, e.writer.Task.ID)
		if got := recs[0].LastError; !utf8.ValidString(got) || len(got) > 4000 || !strings.HasPrefix(reason, got) {
			t.Errorf("stored error of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
		}
	})
}
