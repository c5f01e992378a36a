package api_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
)

// readsDoc is a pipeline whose job consume reads the output of produce.
const readsDoc = `name: reads
jobs:
  - {name: produce, activation: source, runtime: ecs_platform, operator: produce, outputs: 1, source: {kind: manual}}
  - {name: consume, activation: reactive, runtime: ecs_platform, operator: consume, outputs: 0, inputs: [{from: {job: produce, output: 0}}]}
`

// routedTask is the id of a task of the pipeline job job that is not in seen (task ids), and adds
// it there.
func routedTask(t *testing.T, w *workerAPI, job string, seen map[string]string) string {
	t.Helper()
	jobs, err := w.st.JobList(context.Background(), store.ListJobsParams{Tenant: "acme", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.PipelineJob != job {
			continue
		}
		tasks, err := w.st.TaskListByJob(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range tasks {
			if _, ok := seen[tk.ID]; !ok {
				seen[tk.ID] = job
				return tk.ID
			}
		}
	}
	t.Fatalf("no new task of %s", job)
	return ""
}

// Rule: a consumer's capability token grants reading a version's location only where it lies
// under the version's own dataset's prefix, whenever the version was registered: a version stored
// before locations were checked (here written into the store directly) that names the object
// storage's shared buffers/ folder grants nothing.
func TestAVersionOutsideItsDatasetsPrefixIsNeverGranted(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ctx := context.Background()
		if _, err := w.dp.Deploy(ctx, "acme", []byte(readsDoc), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		v, err := w.dp.GetPipeline(ctx, "acme", "reads")
		if err != nil {
			t.Fatal(err)
		}
		ds := v.Jobs()[0].Outputs[0].DatasetUUID
		own := "s3://trace-scratch/datasets/" + ds + "/t0/1/"
		versions := map[string]string{"shared": "s3://trace-scratch/buffers/", "other": "s3://trace-scratch/datasets/0b2f5c8e-1d3a-4b6c-9e7f-8a9b0c1d2e3f/t/1/",
			"own": own}
		if err := w.st.InTx(ctx, func(tx store.Tx) error {
			var vs []*store.DatasetVersion
			for version, ref := range versions {
				raw, _ := json.Marshal(ref)
				vs = append(vs, &store.DatasetVersion{DatasetUUID: ds, Version: version, StorageRef: raw, CreatedAt: time.Now()})
			}
			return tx.DatasetVersionInsertMany(ctx, vs)
		}); err != nil {
			t.Fatal(err)
		}
		_, ids := w.submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"})
		emitter, _ := w.claim(ids["emit"])
		router, seen := w.dp.NewRouter(dataplane.RouteConfig{}), map[string]string{}
		for i, version := range []string{"shared", "other", "own"} {
			if _, err := w.dp.SetCurrentVersion(ctx, "acme", ds, version); err != nil {
				t.Fatal(err)
			}
			cursor := int64(i + 1)
			if _, err := w.dp.Intake().Record(ctx, dispatch.Fence{TaskID: emitter.Task.ID, Attempt: 1, LeaseToken: emitter.Task.LeaseToken},
				[]report.Event{{DatasetUUID: ds, DatasetVersion: version, Cursor: &cursor}}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := router.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			// The consumer task the event started, claimed as a worker would: its answer carries
			// the server's token.
			id := routedTask(t, w, "consume", seen)
			claim := claimInternal(t, w, id)
			c, err := w.tokens.Verify(ctx, claim["capability_token"].(string))
			if err != nil || c.S3 == nil {
				t.Fatalf("token: %v %+v", err, c)
			}
			want := []string{}
			if version == "own" {
				want = []string{own}
			}
			if !slices.Equal(c.S3.ReadPrefixes, want) {
				t.Errorf("version %s (%s): read_prefixes %q, want %q", version, versions[version], c.S3.ReadPrefixes, want)
			}
		}
	})
}
