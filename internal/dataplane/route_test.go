package dataplane_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/wire"
)

// chainDoc is a pipeline: a source emits block ranges on output 0 (published as "blocks"), a
// PerUpdate job turns them into a second dataset, a PerPartition job consumes that, and two jobs
// read "blocks" with different filters.
const chainDoc = `
name: chain
defaults:
  max_attempts: 2
jobs:
  - name: follower
    activation: source
    runtime: ecs_platform
    operator: block_follower
    outputs: 1
    source: {kind: always_on}
  - name: ranges
    activation: reactive
    runtime: ecs_platform
    operator: range_builder
    outputs: 1
    execution_strategy: PerUpdate
    inputs:
      - from: {job: follower, output: 0}
  - name: totals
    activation: reactive
    runtime: ecs_platform
    operator: totals
    outputs: 0
    execution_strategy: PerPartition
    config: {unit: blocks}
    inputs:
      - from: {job: ranges, output: 0}
  - name: mainnet
    activation: reactive
    runtime: ecs_platform
    operator: alerts
    outputs: 0
    inputs:
      - from: {dataset: blocks}
        where: {chain: mainnet}
  - name: testnets
    activation: reactive
    runtime: ecs_platform
    operator: alerts
    queue: alerts_test
    outputs: 0
    inputs:
      - from: {dataset: blocks}
        where: {chain: [sepolia, holesky]}
publish:
  blocks:
    from: {job: follower, output: 0}
    filter_fields: [chain]
`

// pipelineEnv is an env with chainDoc deployed and an emitter: a running task whose events stand
// for the source's.
type pipelineEnv struct {
	*env
	router  *dataplane.Router
	view    *dataplane.PipelineView
	emitter *dispatch.Claim
}

func newPipelineEnv(t *testing.T, st store.Store) *pipelineEnv {
	e := &pipelineEnv{env: newEnv(t, st)}
	if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(chainDoc), "application/yaml"); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	e.view = e.pipeline("chain")
	e.router = e.dp.NewRouter(dataplane.RouteConfig{})
	job := e.Submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"})
	e.emitter = e.Claim(job, "emit")
	return e
}

func (e *pipelineEnv) pipeline(name string) *dataplane.PipelineView {
	e.T.Helper()
	v, err := e.dp.GetPipeline(e.Ctx, tenant, name)
	if err != nil {
		e.T.Fatalf("get pipeline %s: %v", name, err)
	}
	return v
}

// output is the dataset of a job's output in the deployed version.
func (e *pipelineEnv) output(job string, i int) (uuid, version string) {
	e.T.Helper()
	for _, j := range e.view.Jobs() {
		if j.Name == job {
			ds, err := e.Store.DatasetGetMany(e.Ctx, []string{j.Outputs[i].DatasetUUID})
			if err != nil || len(ds) != 1 {
				e.T.Fatalf("dataset of %s[%d]: %v %v", job, i, ds, err)
			}
			return ds[0].UUID, ds[0].CurrentVersion
		}
	}
	e.T.Fatalf("no job %s", job)
	return "", ""
}

func (e *pipelineEnv) emit(events ...report.Event) {
	e.T.Helper()
	c := e.emitter.Task
	if _, err := e.dp.Intake().Record(e.Ctx, dispatch.Fence{TaskID: c.ID, Attempt: c.Attempt, LeaseToken: c.LeaseToken}, events); err != nil {
		e.T.Fatalf("record events: %v", err)
	}
}

// route runs the router until the outbox holds no event and returns the tasks it created.
func (e *pipelineEnv) route() int {
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

// counts is the task count of each pipeline job ("routed").
func (e *pipelineEnv) counts() map[string]int {
	e.T.Helper()
	out := map[string]int{}
	for _, j := range e.pipeline("chain").Jobs() {
		out[j.Name] = j.Counts["routed"]
	}
	return out
}

func partition(uuid, version string, start, end int64) report.Event {
	return report.Event{DatasetUUID: uuid, DatasetVersion: version, PartitionKey: fmt.Sprintf("%d-%d", start, end), Start: &start, End: &end}
}

func cursorEvent(uuid, version string, cursor int64) report.Event {
	return report.Event{DatasetUUID: uuid, DatasetVersion: version, Cursor: &cursor}
}

func TestRoutingOneTaskPerConsumerAndDedupeKey(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		blocks, v := e.output("follower", 0)
		ev := partition(blocks, v, 100, 199)
		// The same event, sent concurrently, twice more, and again by the same task.
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { e.emit(ev) })
		}
		wg.Wait()
		e.emit(ev, ev)
		if got := e.route(); got != 3 {
			t.Errorf("routed %d tasks, want 3 (ranges, mainnet, testnets)", got)
		}
		// A second task reporting the same partition: the dedupe key is the same.
		other := e.Claim(e.Submit(lifecycle.TaskSpec{Key: "emit2", Name: "emit"}), "emit2")
		if _, err := e.dp.Intake().Record(e.Ctx, dispatch.Fence{TaskID: other.Task.ID, LeaseToken: other.Task.LeaseToken},
			[]report.Event{ev}); err != nil {
			t.Fatal(err)
		}
		if got := e.route(); got != 0 {
			t.Errorf("the same partition from another task routed %d tasks, want 0", got)
		}
		want := map[string]int{"follower": 0, "ranges": 1, "totals": 0, "mainnet": 1, "testnets": 1}
		if got := e.counts(); !mapsEqual(got, want) {
			t.Errorf("counts %v, want %v", got, want)
		}
		// A new partition and a cursor event: PerPartition jobs take only partitions.
		e.emit(partition(blocks, v, 200, 299), cursorEvent(blocks, v, 42))
		if got := e.route(); got != 6 {
			t.Errorf("routed %d tasks, want 6", got)
		}
	})
}

func TestRoutingPerPartitionTakesPartitionsOnly(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		ranges, v := e.output("ranges", 0)
		e.emit(cursorEvent(ranges, v, 7))
		if got := e.route(); got != 0 {
			t.Errorf("a cursor routed %d tasks to a PerPartition job, want 0", got)
		}
		e.emit(partition(ranges, v, 0, 9), partition(ranges, v, 10, 19), partition(ranges, v, 0, 9))
		if got := e.route(); got != 2 {
			t.Errorf("routed %d tasks, want 2 (one per partition)", got)
		}
	})
}

func TestRoutingIgnoresVersionsThatAreNotCurrentAndOtherTenants(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		blocks, _ := e.output("follower", 0)
		e.emit(partition(blocks, "not-the-current-version", 0, 9))
		if got := e.route(); got != 0 {
			t.Errorf("an old version's event routed %d tasks", got)
		}
		// The event is kept for audit.
		evs, err := st.DatasetEventListByTask(e.Ctx, e.emitter.Task.ID)
		if err != nil || len(evs) != 1 {
			t.Errorf("stored events %v, %v; want the one event", evs, err)
		}
		// Another tenant's task reporting on this tenant's dataset is refused
		// (TestEventsNameOnlyTheTenantsOwnDatasets) and routes nothing.
		res, err := e.D.CreateJob(e.Ctx, dispatch.CreateJobParams{Tenant: "intruder", Tasks: []lifecycle.TaskSpec{{Key: "x", Name: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		tasks, _ := st.TaskListByJob(e.Ctx, res.Job.ID)
		c, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: tasks[0].ID, WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		_, v := e.output("follower", 0)
		_, err = e.dp.Intake().Record(e.Ctx, dispatch.Fence{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken},
			[]report.Event{partition(blocks, v, 0, 9)})
		dispatchtest.WantErr[*dispatch.InvalidError](t, err)
		if got := e.route(); got != 0 {
			t.Errorf("another tenant's event routed %d tasks", got)
		}
	})
}

func TestRoutingStaleAttemptRoutesNothing(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		blocks, v := e.output("follower", 0)
		c := e.emitter.Task
		_, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.ID, Attempt: c.Attempt, LeaseToken: "stale-lease",
			Outcome: store.OutcomeSucceeded, Events: []report.Event{partition(blocks, v, 0, 9)}})
		if !errors.Is(err, dispatch.ErrLeaseMismatch) {
			t.Fatalf("completion with a stale lease: %v, want a fencing error", err)
		}
		if got := e.route(); got != 0 {
			t.Errorf("a stale attempt's final events routed %d tasks", got)
		}
		// The current attempt's final events are routed.
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.ID, Attempt: c.Attempt, LeaseToken: c.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{partition(blocks, v, 0, 9)}}); err != nil {
			t.Fatal(err)
		}
		if got := e.route(); got != 3 {
			t.Errorf("final events routed %d tasks, want 3", got)
		}
	})
}

func TestRoutedTaskCarriesItsDataPlane(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		blocks, v := e.output("follower", 0)
		e.emit(partition(blocks, v, 1000, 1999))
		e.route()
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"alerts_test"}, WorkerID: "w"})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v %v", claims, err)
		}
		task := claims[0].Task
		if task.Name != "alerts" {
			t.Errorf("task name %q, want the operator", task.Name)
		}
		r := dispatch.DecodeRoute(task)
		if r == nil {
			t.Fatal("the routed task has no route")
		}
		if !reflect.DeepEqual(r.Job, wire.PipelineJob{DAGName: "chain", Name: "testnets", Version: e.view.Pipeline.ActiveVersion, Runtime: "ecs_platform"}) {
			t.Errorf("route job %+v, want version %s", r.Job, e.view.Pipeline.ActiveVersion)
		}
		if len(r.Inputs) != 1 {
			t.Fatalf("inputs %+v", r.Inputs)
		}
		in := r.Inputs[0]
		if in.DatasetUUID != blocks || in.DatasetVersion != v || in.DatasetName != "blocks" || in.PartitionKey != "1000-1999" ||
			*in.Start != 1000 || *in.End != 1999 || string(in.Where) != `{"chain":["sepolia","holesky"]}` {
			t.Errorf("input %+v where %s", in, in.Where)
		}
		// The routed job's counts and the ranges task's outputs.
		claims, err = e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"range_builder"}, WorkerID: "w"})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim ranges: %v %v", claims, err)
		}
		r = claims[0].Route // the claim hands out the route it decoded inside its transaction
		if r == nil || !reflect.DeepEqual(r, dispatch.DecodeRoute(claims[0].Task)) {
			t.Fatalf("the claim's route %+v is not the task's", r)
		}
		ranges, rv := e.output("ranges", 0)
		if len(r.Outputs) != 1 || r.Outputs[0] != (wire.DatasetOutput{OutputIndex: 0, DatasetUUID: ranges, DatasetVersion: rv}) {
			t.Errorf("outputs %+v", r.Outputs)
		}
		job, err := st.JobGet(e.Ctx, claims[0].Task.JobID)
		if err != nil || job.Pipeline != "chain" || job.PipelineJob != "ranges" {
			t.Errorf("job %+v %v", job, err)
		}
		if want := (dispatch.JobRef{ID: job.ID, Tenant: job.Tenant, Name: job.Name}); claims[0].Job != want {
			t.Errorf("the claim's job %+v, want %+v", claims[0].Job, want)
		}
		// The routed task is an ordinary task: it completes, with its own events routed on.
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: claims[0].Task.ID, LeaseToken: claims[0].Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{partition(ranges, rv, 1000, 1999)}}); err != nil {
			t.Fatal(err)
		}
		if got := e.route(); got != 1 {
			t.Errorf("the ranges task's event routed %d tasks, want 1 (totals)", got)
		}
		claims, err = e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"totals"}, WorkerID: "w"})
		if err != nil || len(claims) != 1 || string(claims[0].Task.Input) != `{"unit":"blocks"}` {
			t.Fatalf("claim totals: %v %v", claims, err)
		}
	})
}

func TestDeployChecksOtherPipelinesDatasets(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		reader := `
name: reader
jobs:
  - name: r
    activation: reactive
    runtime: ecs_platform
    operator: r
    outputs: 0
    inputs:
      - from: {dataset: blocks}
      - from: {dataset: nowhere}
  - name: thief
    activation: source
    runtime: ecs_platform
    operator: t
    outputs: 1
    source: {kind: manual}
publish:
  blocks:
    from: {job: thief, output: 0}
`
		_, err := e.dp.Deploy(e.Ctx, tenant, []byte(reader), "application/yaml")
		var v *dispatch.ValidationError
		if !errors.As(err, &v) {
			t.Fatalf("deploy: %v, want a validation error", err)
		}
		want := []string{
			`publish.blocks: dataset "blocks" is already produced by pipeline "chain" job "follower" output 0`,
			`jobs[0].inputs[1].from.dataset: unknown dataset "nowhere"`,
		}
		for _, w := range want {
			if !slices.Contains(v.Errors, w) {
				t.Errorf("errors %q lack %q", v.Errors, w)
			}
		}
		if _, err := st.PipelineGet(e.Ctx, tenant, "reader"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a refused deploy stored the pipeline: %v", err)
		}
		// Another tenant may use the names freely.
		if _, err := e.dp.Deploy(e.Ctx, "other", []byte(chainDoc), "application/yaml"); err != nil {
			t.Errorf("another tenant's deploy: %v", err)
		}
		// The where of an input reading another pipeline's dataset is checked against its fields.
		ok := strings.Replace(reader, "      - from: {dataset: nowhere}\n", "        where: {chain: mainnet}\n", 1)
		ok = strings.Replace(ok, "publish:\n  blocks:\n    from: {job: thief, output: 0}\n", "", 1)
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(ok), "application/yaml"); err != nil {
			t.Errorf("deploy a reader of blocks: %v", err)
		}
		bad := strings.Replace(ok, "chain: mainnet", "severity: high", 1)
		_, err = e.dp.Deploy(e.Ctx, tenant, []byte(bad), "application/yaml")
		if !errors.As(err, &v) || !strings.Contains(strings.Join(v.Errors, "\n"), "jobs[0].inputs[0].where.severity") {
			t.Errorf("a where off the allowlist of another pipeline's dataset: %v", err)
		}
	})
}

func TestCutoverSwitchesTheRoutedVersion(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		blocks, v1 := e.output("follower", 0)
		if _, err := e.dp.SetCurrentVersion(e.Ctx, tenant, "blocks", "v2"); err == nil {
			t.Fatal("cutover to an unregistered version succeeded")
		}
		// A completion registers v2 through datasets_published.
		c := e.emitter.Task
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.ID, LeaseToken: c.LeaseToken, Outcome: store.OutcomeSucceeded,
			Published: []report.Published{{DatasetUUID: blocks, DatasetVersion: "v2", StorageRef: json.RawMessage(`{"scheme":"s3"}`)}}}); err != nil {
			t.Fatal(err)
		}
		x, err := e.dp.SetCurrentVersion(e.Ctx, tenant, "blocks", "v2")
		if err != nil || x.CurrentVersion != "v2" {
			t.Fatalf("cutover: %+v %v", x, err)
		}
		e.emitter = e.Claim(e.Submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"}), "emit")
		e.emit(partition(blocks, v1, 0, 9))
		if got := e.route(); got != 0 {
			t.Errorf("the old version routed %d", got)
		}
		e.emit(partition(blocks, "v2", 0, 9))
		if got := e.route(); got != 3 {
			t.Errorf("the new version routed %d, want 3", got)
		}
		// The routed task's input names the version's storage, as datasets_published registered it.
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"alerts"}, WorkerID: "w"})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v %v", claims, err)
		}
		if in := dispatch.DecodeRoute(claims[0].Task).Inputs[0]; in.DatasetVersion != "v2" || string(in.StorageRef) != `{"scheme":"s3"}` {
			t.Errorf("input %+v storage_ref %s", in, in.StorageRef)
		}
	})
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Two replicas on one PostgreSQL, each with its router, route the same events reported by many
// tasks at once: every consuming job gets one task per partition.
func TestRoutingTwoReplicasOnePostgres(t *testing.T) {
	db := storetest.NewPostgresDatabase(t)
	a := newPipelineEnv(t, db.Open(t))
	b := newEnv(t, db.Open(t))
	routerB := b.dp.NewRouter(dataplane.RouteConfig{Batch: 7})
	blocks, v := a.output("follower", 0)
	var emitters []*dispatch.Claim
	for i := range 16 {
		e := a.env
		if i%2 == 1 {
			e = b
		}
		emitters = append(emitters, e.Claim(e.Submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"}), "emit"))
	}
	var wg sync.WaitGroup
	for i, c := range emitters {
		in := a.dp.Intake()
		if i%2 == 1 {
			in = b.dp.Intake()
		}
		wg.Go(func() {
			for p := range int64(10) {
				if _, err := in.Record(a.Ctx, dispatch.Fence{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken},
					[]report.Event{partition(blocks, v, p*10, p*10+9)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for _, r := range []*dataplane.Router{a.router, routerB} {
		wg.Go(func() {
			for range 200 {
				if _, _, err := r.RunOnce(a.Ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	a.route()
	want := map[string]int{"follower": 0, "ranges": 10, "totals": 0, "mainnet": 10, "testnets": 10}
	if got := a.counts(); !mapsEqual(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
}

// A buffered dataset may have writers in several pipelines: one dataset, whose uuid each writer's
// output carries; a direct dataset has one producer.
func TestBufferedDatasetHasManyWriters(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		writer := func(name string) string {
			return `
name: ` + name + `
jobs:
  - name: scan
    activation: source
    runtime: ecs_platform
    operator: scan
    outputs: 1
    source: {kind: manual}
publish:
  alert_events:
    from: {job: scan, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: severity, type: string}
      unique: [dedupe_key]
`
		}
		uuids := map[string]bool{}
		for _, name := range []string{"first", "second"} {
			if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(writer(name)), "application/yaml"); err != nil {
				t.Fatalf("deploy %s: %v", name, err)
			}
			v, err := e.dp.GetPipeline(e.Ctx, tenant, name)
			if err != nil {
				t.Fatal(err)
			}
			out := v.Jobs()[0].Outputs[0]
			if out.DatasetName != "alert_events" {
				t.Errorf("%s's output: %+v", name, out)
			}
			uuids[out.DatasetUUID] = true
		}
		x, err := st.DatasetGetByName(e.Ctx, tenant, "alert_events")
		if err != nil || len(uuids) != 1 || !uuids[x.UUID] || x.WriteMode != "buffered" {
			t.Errorf("one buffered dataset for both writers: %v, dataset %+v, %v", uuids, x, err)
		}
		direct := strings.Replace(writer("third"), "    write_mode: buffered\n", "", 1)
		_, err = e.dp.Deploy(e.Ctx, tenant, []byte(direct), "application/yaml")
		var v *dispatch.ValidationError
		if !errors.As(err, &v) || !strings.Contains(strings.Join(v.Errors, "\n"), `dataset "alert_events" is already produced by buffered writers`) {
			t.Errorf("a direct producer of a buffered dataset: %v", err)
		}
	})
}
