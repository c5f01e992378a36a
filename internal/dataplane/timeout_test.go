package dataplane_test

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// A pipeline task's execution deadline is its job's timeout_seconds, else the document's default,
// else its runtime's (lambda 60 s, ecs_platform 1800 s): the claim and the reaper enforce it.
func TestPipelineTasksTakeTheirJobsTimeout(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		docs := map[string]string{
			"runtimes": `name: runtimes
jobs:
  - {name: fn, activation: source, runtime: lambda, operator: fn, outputs: 0, source: {kind: manual}}
  - {name: box, activation: source, runtime: ecs_platform, operator: box, outputs: 0, source: {kind: manual}}
  - {name: own, activation: source, runtime: lambda, operator: own, outputs: 0, source: {kind: manual}, timeout_seconds: 5}
`,
			"defaulted": `name: defaulted
defaults: {timeout_seconds: 300}
jobs:
  - {name: fn, activation: source, runtime: lambda, operator: fn, outputs: 0, source: {kind: manual}}
`,
		}
		for name, doc := range docs {
			if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml"); err != nil {
				t.Fatalf("deploy %s: %v", name, err)
			}
		}
		for _, c := range []struct {
			pipeline, job string
			want          time.Duration
		}{
			{"runtimes", "fn", time.Minute},
			{"runtimes", "box", 30 * time.Minute},
			{"runtimes", "own", 5 * time.Second},
			{"defaulted", "fn", 5 * time.Minute},
		} {
			run, err := e.dp.RunSource(e.Ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: c.pipeline, Job: c.job})
			if err != nil {
				t.Fatal(err)
			}
			task, err := st.TaskGet(e.Ctx, run.TaskID)
			if err != nil {
				t.Fatal(err)
			}
			if task.Timeout != c.want {
				t.Errorf("%s.%s: timeout %s, want %s", c.pipeline, c.job, task.Timeout, c.want)
			}
		}
	})
}
