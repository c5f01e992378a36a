package staging_test

import (
	"testing"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/staging"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

const tenant = dispatchtest.Tenant

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

// replaceEnv is a test's dispatcher (dispatchtest.Env) and the data plane over it, with object
// storage (a directory) and replaceDoc deployed.
type replaceEnv struct {
	*dispatchtest.Env
	dp   *dataplane.Plane
	blob *blob.Store
	days *store.Dataset
}

func newReplaceEnv(t *testing.T, st store.Store) *replaceEnv {
	t.Helper()
	e := dispatchtest.New(t, st)
	bs, err := blob.Open(t.Context(), blobtest.File(t), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	r := &replaceEnv{Env: e, dp: dataplane.New(e.D, dataplane.Config{Blob: bs}), blob: bs}
	if _, err := r.dp.Deploy(r.Ctx, tenant, []byte(replaceDoc), "application/yaml"); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if r.days, err = st.DatasetGetByName(r.Ctx, tenant, "days"); err != nil {
		t.Fatal(err)
	}
	return r
}

// collector returns a stopped collector of the env's staging folders, as a server builds it.
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
	return e.dp.Intake().Record(e.Ctx, dispatch.Fence{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken}, events)
}

func str(s string) *string { return &s }
