package dataplane_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/staging"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// replaceDoc is a pipeline whose manual source build rewrites the partitions of its two outputs
// (days, published, and an unpublished one), and a PerPartition job that reads days.
const replaceDoc = `
name: daily
jobs:
  - name: build
    activation: source
    runtime: ecs_platform
    operator: build_days
    outputs: 2
    update_strategy: replace
    source: {kind: manual}
  - name: report
    activation: reactive
    runtime: ecs_platform
    operator: report
    outputs: 0
    execution_strategy: PerPartition
    inputs:
      - from: {dataset: days}
publish:
  days:
    from: {job: build, output: 0}
`

// replaceEnv is an env with object storage (a directory) and replaceDoc deployed.
type replaceEnv struct {
	*env
	blob    *blob.Store
	days    *store.Dataset
	router  *dataplane.Router
	version string // the pipeline version
}

func newReplaceEnv(t *testing.T, st store.Store) *replaceEnv {
	t.Helper()
	return newReplaceEnvOn(t, st, blobtest.File(t), blob.Options{})
}

// newReplaceEnvOn is newReplaceEnv with the object storage at url.
func newReplaceEnvOn(t *testing.T, st store.Store, url string, opts blob.Options) *replaceEnv {
	t.Helper()
	bs, err := blob.Open(t.Context(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	e := &replaceEnv{env: newEnv(t, st, func(c *dataplane.Config) { c.Blob = bs }), blob: bs}
	res, err := e.dp.Deploy(e.Ctx, tenant, []byte(replaceDoc), "application/yaml")
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	e.version = res.Version
	if e.days, err = st.DatasetGetByName(e.Ctx, tenant, "days"); err != nil {
		t.Fatal(err)
	}
	e.router = e.dp.NewRouter(dataplane.RouteConfig{})
	return e
}

// collector returns a stopped staging collector of the env's staging folders, as a server builds
// it.
func (e *replaceEnv) collector(cfg staging.Config) *staging.Collector {
	return staging.New(cfg, staging.Deps{
		Store:          e.Store,
		Blob:           e.blob,
		Env:            service.Env{Clock: e.Clock, Logger: dispatchtest.Quiet, Transient: e.D.Unavailable},
		ReplaceOutputs: e.dp.ReplaceOutputDatasets,
	})
}

// runBuild starts a task of build and claims it.
func (e *replaceEnv) runBuild() *dispatch.Claim {
	e.T.Helper()
	run, err := e.dp.RunSource(e.Ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: "daily", Job: "build"})
	if err != nil {
		e.T.Fatalf("run build: %v", err)
	}
	c, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: run.TaskID, WorkerID: "w"})
	if err != nil {
		e.T.Fatalf("claim %s: %v", run.TaskID, err)
	}
	return c
}

// folder is the staging folder of c's attempt for partition key of days.
func (e *replaceEnv) folder(c *dispatch.Claim, key string) string {
	return intake.StagingDir(e.days.UUID, c.Task.ID, c.Task.Attempt, key)
}

// stage writes files into c's staging folder of partition key, and then the marker with the
// given content unless it is nil.
func (e *replaceEnv) stage(c *dispatch.Claim, key string, files map[string]string, marker *string) {
	e.T.Helper()
	for name, data := range files {
		e.put(e.folder(c, key)+name, data)
	}
	if marker != nil {
		e.put(e.folder(c, key)+intake.MarkerName, *marker)
	}
}

func (e *replaceEnv) put(key, data string) {
	e.T.Helper()
	if err := e.blob.Put(e.Ctx, key, []byte(data), ""); err != nil {
		e.T.Fatal(err)
	}
}

// day is the partition event of key on days' current version.
func (e *replaceEnv) day(key string) report.Event {
	return report.Event{DatasetUUID: e.days.UUID, DatasetVersion: e.days.CurrentVersion, PartitionKey: key}
}

func (e *replaceEnv) record(c *dispatch.Claim, events ...report.Event) (int, error) {
	return e.dp.Intake().Record(e.Ctx, fence(c), events)
}

// partitions is the dataset view's partitions of days.
func (e *replaceEnv) partitions() []*store.PartitionCommit {
	e.T.Helper()
	v, err := e.dp.GetDataset(e.Ctx, tenant, "days", 0)
	if err != nil {
		e.T.Fatal(err)
	}
	if v.Dataset.CurrentVersion != e.days.CurrentVersion || len(v.Versions) != 1 {
		e.T.Errorf("days has versions %d, current %s: want the deploy's one version still current", len(v.Versions), v.Dataset.CurrentVersion)
	}
	return v.Partitions
}

func (e *replaceEnv) history(key string) []*store.PartitionCommit {
	e.T.Helper()
	h, err := e.Store.PartitionCommitHistory(e.Ctx, store.PartitionRef{Tenant: tenant, DatasetUUID: e.days.UUID,
		DatasetVersion: e.days.CurrentVersion, PartitionKey: key}, 100)
	if err != nil {
		e.T.Fatal(err)
	}
	return h
}

// route runs the router until the outbox holds no event and returns the tasks it created.
func (e *replaceEnv) route() int {
	e.T.Helper()
	total := 0
	for {
		n, tasks, err := e.router.RunOnce(e.Ctx)
		if err != nil {
			e.T.Fatalf("route: %v", err)
		}
		total += tasks
		if n == 0 {
			return total
		}
	}
}

func str(s string) *string { return &s }

// Rule: a partition whose files and marker are in the attempt's staging folder is committed by
// its event: the dataset version's partition points at the folder, with the marker's row count
// and the files' bytes, in the same version, and the event is routed. Through the events call and
// through a completion alike.
func TestReplaceCommitsAStagedPartitionAndRoutesItsEvent(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newReplaceEnv(t, st)
		c := e.runBuild()
		e.stage(c, "20261101-20261101", map[string]string{"part-0.parquet": "0123456789", "sub/part-1.parquet": "abcde"}, str(`{"row_count": 42}`))
		if n, err := e.record(c, e.day("20261101-20261101")); err != nil || n != 1 {
			t.Fatalf("record: %d, %v", n, err)
		}
		ps := e.partitions()
		if len(ps) != 1 {
			t.Fatalf("partitions %+v, want one", ps)
		}
		p := ps[0]
		if p.PartitionKey != "20261101-20261101" || p.Location != e.blob.URI(e.folder(c, "20261101-20261101")) ||
			p.RowCount == nil || *p.RowCount != 42 || p.Bytes != 15 || p.TaskID != c.Task.ID || p.Attempt != 1 ||
			!p.CommittedAt.Equal(e.Clock.Now()) || p.DatasetVersion != e.days.CurrentVersion {
			t.Errorf("partition %+v", p)
		}
		if !strings.HasSuffix(p.Location, "/datasets/"+e.days.UUID+"/"+c.Task.ID+"/1/20261101-20261101/") {
			t.Errorf("location %s is not the attempt's staging folder of the partition", p.Location)
		}
		if n := e.route(); n != 1 {
			t.Errorf("routing created %d tasks, want 1 (report's task of the partition)", n)
		}

		// The final events of a completion commit the same way; an empty marker declares no
		// row count.
		e.stage(c, "20261102-20261102", map[string]string{"part-0.parquet": "xyz"}, str(""))
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{e.day("20261102-20261102")}}); err != nil {
			t.Fatal(err)
		}
		ps = e.partitions()
		if len(ps) != 2 || ps[1].PartitionKey != "20261102-20261102" || ps[1].RowCount != nil || ps[1].Bytes != 3 {
			t.Errorf("after the completion: partitions %+v", ps)
		}
		if n := e.route(); n != 1 {
			t.Errorf("routing the completion's event created %d tasks, want 1", n)
		}
	})
}

// The same commit on S3-compatible object storage: the marker is found and the bytes added up
// through the bucket's listing.
func TestReplaceCommitsAStagedPartitionOnS3(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		url, opts := blobtest.S3(t)
		e := newReplaceEnvOn(t, st, url, opts)
		c := e.runBuild()
		e.stage(c, "0-9", map[string]string{"a/part-0": "0123456789", "part-1": "xy"}, nil)
		_, err := e.record(c, e.day("0-9"))
		inv := dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		if !strings.Contains(inv.Message, e.blob.URI(e.folder(c, "0-9")+intake.MarkerName)) || !strings.HasPrefix(e.blob.Root(), "s3://") {
			t.Errorf("refusal %q does not name the marker in the bucket", inv.Message)
		}
		e.put(e.folder(c, "0-9")+intake.MarkerName, `{"row_count": 12}`)
		if _, err := e.record(c, e.day("0-9")); err != nil {
			t.Fatal(err)
		}
		if ps := e.partitions(); len(ps) != 1 || ps[0].Bytes != 12 || *ps[0].RowCount != 12 || ps[0].Location != e.blob.URI(e.folder(c, "0-9")) {
			t.Errorf("partitions %+v", ps)
		}
	})
}

// Rule: an event of a partition whose marker is missing (or is not a marker) refuses the whole
// report with a message that names the partition and the marker's key; nothing is stored, and the
// attempt can still report once the marker is written. Events that commit nothing are not
// checked: a cursor event, and a partition of an append job's output.
func TestReplaceRefusesAPartitionWithoutItsMarker(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newReplaceEnv(t, st)
		c := e.runBuild()
		e.stage(c, "0-9", map[string]string{"part-0": "data"}, nil)
		marker := e.blob.URI(e.folder(c, "0-9") + intake.MarkerName)
		_, err := e.record(c, e.day("0-9"))
		inv := dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		if !strings.Contains(inv.Message, `partition "0-9" of dataset "days"`) || !strings.Contains(inv.Message, marker) ||
			!strings.HasPrefix(inv.Message, "events[0]: ") {
			t.Errorf("refusal %q does not name the partition and the marker %s", inv.Message, marker)
		}
		_, err = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{e.day("0-9")}})
		dispatchtest.WantErr[*dispatch.InvalidError](t, err)

		for _, bad := range []string{`garbage`, `{"row_count": -1}`, `{"row_count": 1.5}`, `{"row_count": "3"}`, `{"rows": 1}`,
			`{}`, `[1]`, `null`, `{"row_count": 1} {}`, `{"row_count": 1, "extra": true}`, strings.Repeat(" ", 5000)} {
			e.put(e.folder(c, "0-9")+intake.MarkerName, bad)
			_, err := e.record(c, e.day("0-9"))
			inv := dispatchtest.WantErr[*dispatch.InvalidError](t, err)
			if !strings.Contains(inv.Message, "must be empty or hold {\"row_count\": N}") || !strings.Contains(inv.Message, marker) {
				t.Errorf("marker %.20q: refusal %q", bad, inv.Message)
			}
		}
		if evs, _ := st.DatasetEventListByTask(e.Ctx, c.Task.ID); len(evs) != 0 {
			t.Errorf("refused reports stored events %+v", evs)
		}
		if ps := e.partitions(); len(ps) != 0 {
			t.Errorf("refused reports committed %+v", ps)
		}
		if n := e.route(); n != 0 {
			t.Errorf("refused reports routed %d tasks", n)
		}
		if task, _ := st.TaskGet(e.Ctx, c.Task.ID); task.Status != lifecycle.Running {
			t.Fatalf("after the refusals the task is %s, want running", task.Status)
		}

		// Not checked: a cursor event on the replace output.
		if n, err := e.record(c, report.Event{DatasetUUID: e.days.UUID, DatasetVersion: e.days.CurrentVersion, Cursor: i64(7)}); err != nil || n != 1 {
			t.Errorf("a cursor event: %d, %v", n, err)
		}

		// With the marker, the attempt completes with the same event.
		e.put(e.folder(c, "0-9")+intake.MarkerName, `{"row_count":3}`+"\n")
		res, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: 1, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{e.day("0-9")}})
		if err != nil || res.Status != lifecycle.Completed {
			t.Fatalf("complete with the marker: %+v, %v", res, err)
		}
		if ps := e.partitions(); len(ps) != 1 || *ps[0].RowCount != 3 || ps[0].Bytes != 4 {
			t.Errorf("partitions %+v", ps)
		}
	})
}

// Rule: only the current attempt under its lease commits: a stale attempt's report commits
// nothing, even with its own folder staged, and the current attempt's commit needs its own
// folder, never the stale one's.
func TestReplaceStaleAttemptCommitsNothing(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newReplaceEnv(t, st)
		first := e.runBuild()
		e.stage(first, "0-9", map[string]string{"part-0": "first"}, str(""))
		e.Expire()
		e.Clock.Advance(time.Minute)
		second, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: first.Task.ID, WorkerID: "w2"})
		if err != nil || second.Task.Attempt != 2 {
			t.Fatalf("claim attempt 2: %+v, %v", second, err)
		}
		_, err = e.record(first, e.day("0-9"))
		dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err)
		_, err = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: first.Task.ID, Attempt: 1, LeaseToken: first.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{e.day("0-9")}})
		dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, err)
		if ps := e.partitions(); len(ps) != 0 {
			t.Fatalf("a stale attempt committed %+v", ps)
		}

		// Attempt 2 has not staged the partition: attempt 1's folder is not its own.
		_, err = e.record(second, e.day("0-9"))
		inv := dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		if !strings.Contains(inv.Message, e.folder(second, "0-9")+intake.MarkerName) {
			t.Errorf("refusal %q does not name attempt 2's marker", inv.Message)
		}
		e.stage(second, "0-9", map[string]string{"part-0": "second!"}, str(""))
		if _, err := e.record(second, e.day("0-9")); err != nil {
			t.Fatal(err)
		}
		if ps := e.partitions(); len(ps) != 1 || ps[0].Attempt != 2 || ps[0].Bytes != 7 || ps[0].Location != e.blob.URI(e.folder(second, "0-9")) {
			t.Errorf("partitions %+v, want attempt 2's folder", ps)
		}
	})
}

// Rule: a later commit of a partition swaps its pointer within the same dataset version and
// keeps the earlier commit in its history, and its consumers run again; the same attempt
// reporting again changes nothing. The view lists each partition once, by start.
func TestReplaceSwapsThePartitionAndKeepsItsHistory(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newReplaceEnv(t, st)
		a := e.runBuild()
		for _, key := range []string{"100-199", "0-9", "20-29"} {
			e.stage(a, key, map[string]string{"f": "0123456789"}, str(`{"row_count":10}`))
		}
		if _, err := e.record(a, e.day("100-199"), e.day("0-9"), e.day("20-29")); err != nil {
			t.Fatal(err)
		}
		e.Succeed(a)
		if n := e.route(); n != 3 {
			t.Fatalf("routed %d tasks, want 3", n)
		}
		e.Clock.Advance(time.Minute)
		b := e.runBuild()
		e.stage(b, "0-9", map[string]string{"f": strings.Repeat("x", 20)}, str(`{"row_count":20}`))
		if n, err := e.record(b, e.day("0-9")); err != nil || n != 1 {
			t.Fatalf("record b: %d, %v", n, err)
		}
		if n, err := e.record(b, e.day("0-9")); err != nil || n != 0 {
			t.Fatalf("record b again: %d, %v; want a repeat", n, err)
		}
		ps := e.partitions()
		var keys []string
		for _, p := range ps {
			keys = append(keys, p.PartitionKey)
		}
		if !slices.Equal(keys, []string{"0-9", "20-29", "100-199"}) {
			t.Fatalf("partitions %q, want one per key, by start", keys)
		}
		if p := ps[0]; p.TaskID != b.Task.ID || p.Bytes != 20 || *p.RowCount != 20 || p.Location != e.blob.URI(e.folder(b, "0-9")) {
			t.Errorf("0-9 points at %+v, want b's folder", p)
		}
		h := e.history("0-9")
		if len(h) != 2 || h[0].TaskID != b.Task.ID || h[1].TaskID != a.Task.ID || h[1].Location != e.blob.URI(e.folder(a, "0-9")) {
			t.Errorf("history of 0-9: %+v, want b's commit, then a's", h)
		}
		// The new commit is a new update of the partition: its consumer runs again, once.
		if n := e.route(); n != 1 {
			t.Errorf("the replaced partition's event created %d tasks, want 1 (its consumer runs again)", n)
		}
		if _, err := e.record(b, e.day("0-9")); err != nil {
			t.Fatal(err)
		}
		if n := e.route(); n != 0 {
			t.Errorf("b's report again created %d tasks, want none (the same commit)", n)
		}
	})
}

// Rule: a replace job whose output is published as a buffered dataset is refused at deploy,
// at its update_strategy with the line, and nothing is stored.
func TestDeployRefusesAReplaceJobWithABufferedOutput(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		doc := `name: alerts
jobs:
  - name: scan
    activation: source
    runtime: ecs_platform
    operator: scan
    outputs: 1
    update_strategy: replace
    source: {kind: manual}
publish:
  alerts: {from: {job: scan, output: 0}, write_mode: buffered, schema: {columns: [{name: k, type: string}], unique: [k]}}
`
		_, err := e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml")
		var v *dispatch.ValidationError
		if !errors.As(err, &v) {
			t.Fatalf("deploy: %v, want a ValidationError", err)
		}
		want := `jobs[0].update_strategy: replace rewrites whole partitions of the job's outputs, but output 0 is buffered dataset "alerts" (publish.alerts.write_mode), whose rows its sink appends: use update_strategy append, or publish the output with write_mode direct (line 8)`
		if !slices.Equal(v.Errors, []string{want}) {
			t.Errorf("problems %q, want %q", v.Errors, want)
		}
		if _, err := st.PipelineGet(e.Ctx, tenant, "alerts"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the refused pipeline: %v", err)
		}
	})
}
