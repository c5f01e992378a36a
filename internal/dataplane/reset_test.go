package dataplane_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dataset/datasettest"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
)

// resettingDoc is bufferedDoc("alerts", alerts) whose source job resets its outputs when reset
// is true.
func resettingDoc(reset bool) string {
	doc := bufferedDoc("alerts", map[string]string{"alerts": alertSchema})
	if reset {
		doc = strings.Replace(doc, "source: {kind: manual}}", "source: {kind: manual}, bootstrap: {reset_outputs: true}}", 1)
	}
	return doc
}

// loadAlerts loads n rows of the tenant into the dataset alerts as batch id.
func (e *dataEnv) loadAlerts(id string, n int) {
	e.T.Helper()
	ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alerts")
	if err != nil {
		e.T.Fatal(err)
	}
	var s pipeline.Schema
	if err := json.Unmarshal(ds.Schema, &s); err != nil {
		e.T.Fatal(err)
	}
	rows := make([]dataset.Row, n)
	for i := range rows {
		rows[i] = dataset.Row{"key": id + "-" + string(rune('a'+i)), "severity": "high"}
	}
	if _, err := e.data.Load(e.Ctx, dataset.Batch{ID: id, Tenant: tenant, DatasetUUID: ds.UUID, Schema: &s, Rows: rows}); err != nil {
		e.T.Fatal(err)
	}
}

// alertRows counts the tenant's rows of the dataset alerts.
func (e *dataEnv) alertRows() int {
	e.T.Helper()
	ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alerts")
	if err != nil {
		e.T.Fatal(err)
	}
	var s pipeline.Schema
	if err := json.Unmarshal(ds.Schema, &s); err != nil {
		e.T.Fatal(err)
	}
	page, err := e.data.Rows(e.Ctx, ds.UUID, &s, dataset.Query{Tenant: tenant, Limit: 1000})
	if err != nil {
		e.T.Fatal(err)
	}
	return len(page.Rows)
}

func (e *dataEnv) resetCount() int {
	e.T.Helper()
	rs, err := e.Store.OutputResetList(e.Ctx, store.OutputResetListParams{Tenant: tenant, Pipeline: "alerts", Limit: 100})
	if err != nil {
		e.T.Fatal(err)
	}
	return len(rs)
}

// Rule: bootstrap is refused on a reactive job at deploy, with its path and line, and the
// refused deploy stores nothing.
func TestDeployRefusesBootstrapOnAReactiveJob(t *testing.T) {
	t.Parallel()
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		doc := `name: alerts
jobs:
  - {name: src, activation: source, runtime: ecs_platform, operator: op, outputs: 1, source: {kind: manual}}
  - {name: r, activation: reactive, runtime: ecs_platform, operator: op, outputs: 0, inputs: [{from: {dataset: alerts}}],
     bootstrap: {reset_outputs: true}}
publish:
  alerts: {from: {job: src, output: 0}, write_mode: buffered, schema: ` + alertSchema + `}
`
		before := datasettest.Dump(t, e.url)
		problems := e.refused(tenant, doc)
		want := `jobs[1].bootstrap: only allowed for source jobs: a reactive job's outputs are reset by resetting the source it reads (line 5)`
		if len(problems) != 1 || problems[0] != want {
			t.Fatalf("problems %q, want %q\n%s", problems, want, doc)
		}
		if _, err := e.Store.PipelineGet(e.Ctx, tenant, "alerts"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the refused pipeline: %v", err)
		}
		if after := datasettest.Dump(t, e.url); after != before {
			t.Errorf("a refused deploy changed the data database:\n%s", datasettest.Diff(before, after))
		}
	})
}

// A deploy that finds, in its store transaction, that another request made its version active
// meanwhile does not reset: the rows it removed are put back (its data database transaction
// rolls back), it starts over, and then finds nothing to activate.
func TestResetLosesTheRaceToAnotherActivation(t *testing.T) {
	t.Parallel()
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		plain := e.deploy(tenant, resettingDoc(false))
		resetting := e.deploy(tenant, resettingDoc(true))
		if n := e.resetCount(); n != 1 {
			t.Fatalf("%d resets after the first activation, want 1", n)
		}
		e.loadAlerts("b1", 3)
		e.deploy(tenant, resettingDoc(false)) // plain is active again, by a deploy: no reset
		if n := e.alertRows(); n != 3 {
			t.Fatalf("%d rows, want 3", n)
		}
		if plain.Version == resetting.Version || e.resetCount() != 1 {
			t.Fatalf("versions %s %s, %d resets", plain.Version, resetting.Version, e.resetCount())
		}
		before := datasettest.Dump(t, e.url)
		var raced atomic.Bool
		e.tables.before = func() {
			if raced.CompareAndSwap(false, true) {
				if _, _, err := e.dp.Rollback(e.Ctx, tenant, "alerts", resetting.Version); err != nil {
					t.Errorf("rollback: %v", err)
				}
			}
		}
		res := e.deploy(tenant, resettingDoc(true))
		e.tables.before = nil
		if !raced.Load() || res.Activated {
			t.Fatalf("raced %v, activated %v: want the rollback to have activated the version first", raced.Load(), res.Activated)
		}
		if n := e.resetCount(); n != 1 {
			t.Errorf("%d resets, want still 1", n)
		}
		if n := e.alertRows(); n != 3 {
			t.Errorf("%d rows after the deploy that lost the race, want still 3", n)
		}
		if after := datasettest.Dump(t, e.url); after != before {
			t.Errorf("the deploy that lost the race changed the data database:\n%s", datasettest.Diff(before, after))
		}
	})
}

// loadVersion loads a row of the tenant into the dataset alerts as batch id, of the dataset
// version version.
func (e *dataEnv) loadVersion(id, version string) error {
	e.T.Helper()
	ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alerts")
	if err != nil {
		e.T.Fatal(err)
	}
	var s pipeline.Schema
	if err := json.Unmarshal(ds.Schema, &s); err != nil {
		e.T.Fatal(err)
	}
	_, err = e.data.Load(e.Ctx, dataset.Batch{ID: id, Tenant: tenant, DatasetUUID: ds.UUID, Version: version, Schema: &s,
		Rows: []dataset.Row{{"key": id, "severity": "high"}}})
	return err
}

// Rule: a reset retires, in the data database, the dataset version it replaces, so that a batch
// of it a sink still holds never loads into the emptied table; batches of the fresh version load.
// The version retired is the one the reset replaces even when the current version is switched
// while the deploy runs: the deploy that finds it switched starts over.
func TestResetRetiresTheVersionItReplaces(t *testing.T) {
	t.Parallel()
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		e.deploy(tenant, resettingDoc(false))
		v0 := e.currentVersion()
		e.deploy(tenant, resettingDoc(true))
		v1 := e.currentVersion()
		if err := e.loadVersion("held-0", v0); !errors.Is(err, dataset.ErrStaleVersion) {
			t.Fatalf("a batch of the version the reset replaced: %v, want ErrStaleVersion", err)
		}
		if err := e.loadVersion("fresh-1", v1); err != nil {
			t.Fatalf("a batch of the fresh version: %v", err)
		}

		// A task registers another version; the current version is switched to it while the
		// next resetting deploy runs, after the deploy read v1: the deploy starts over, and
		// retires the version its reset replaces.
		e.registerVersion("v-side")
		e.deploy(tenant, resettingDoc(false))
		var switched atomic.Bool
		e.tables.before = func() {
			if switched.CompareAndSwap(false, true) {
				if _, err := e.dp.SetCurrentVersion(e.Ctx, tenant, "alerts", "v-side"); err != nil {
					t.Errorf("switch: %v", err)
				}
			}
		}
		e.deploy(tenant, resettingDoc(true))
		e.tables.before = nil
		rs, err := e.Store.OutputResetList(e.Ctx, store.OutputResetListParams{Tenant: tenant, Pipeline: "alerts", Limit: 1})
		if err != nil || len(rs) != 1 || rs[0].PreviousVersion != "v-side" {
			t.Fatalf("the newest reset %v %+v, want it to replace v-side", err, rs)
		}
		if err := e.loadVersion("held-side", "v-side"); !errors.Is(err, dataset.ErrStaleVersion) {
			t.Fatalf("a batch of the version the second reset replaced: %v, want ErrStaleVersion", err)
		}
		if err := e.loadVersion("fresh-2", e.currentVersion()); err != nil {
			t.Fatalf("a batch of the version the second reset made current: %v", err)
		}
	})
}

// registerVersion has a task of the job src register version of the dataset alerts
// (datasets_published).
func (e *dataEnv) registerVersion(version string) {
	e.T.Helper()
	run, err := e.dp.RunSource(e.Ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: "alerts", Job: "src"})
	if err != nil {
		e.T.Fatal(err)
	}
	c, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: run.TaskID, WorkerID: "w"})
	if err != nil {
		e.T.Fatal(err)
	}
	ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alerts")
	if err != nil {
		e.T.Fatal(err)
	}
	if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
		Outcome: store.OutcomeSucceeded, Published: []report.Published{{DatasetUUID: ds.UUID, DatasetVersion: version}}}); err != nil {
		e.T.Fatal(err)
	}
}

func (e *dataEnv) currentVersion() string {
	e.T.Helper()
	ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alerts")
	if err != nil {
		e.T.Fatal(err)
	}
	return ds.CurrentVersion
}

// Rule: a deploy keeps a cutover (POST /datasets/{name}/current) that another request committed
// after the deploy read the datasets: it writes back their names and schemas, not the current
// version it read.
func TestDeployKeepsACutoverMadeWhileItRuns(t *testing.T) {
	t.Parallel()
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		e.deploy(tenant, resettingDoc(false))
		v0 := e.currentVersion()
		e.registerVersion("v-side")
		e.tables.before = func() {
			if _, err := e.dp.SetCurrentVersion(e.Ctx, tenant, "alerts", "v-side"); err != nil {
				t.Errorf("switch: %v", err)
			}
		}
		e.deploy(tenant, bufferedDoc("alerts", map[string]string{"alerts": alertSchemaGrown}))
		e.tables.before = nil
		if v := e.currentVersion(); v != "v-side" {
			t.Fatalf("current version %s after the deploy (was %s), want v-side, which the cutover made current", v, v0)
		}
	})
}
