package worker_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/worker"
)

// A pipeline task reaches its handler with its data plane: its job, the datasets it writes and
// what started it; its input is the job's config.
func TestPipelineTaskCarriesItsDataPlane(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	doc := `
name: sdk
jobs:
  - name: backfill
    activation: source
    runtime: ecs_platform
    operator: backfill
    outputs: 2
    config: {depth: 3}
    source: {kind: manual}
publish:
  filled:
    from: {job: backfill, output: 1}
`
	if _, err := s.dp.Deploy(ctx, "default", []byte(doc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	run, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "sdk", Job: "backfill",
		Trigger: map[string]any{"input": map[string]int{"from": 7}}})
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Pointer[worker.Task]
	start(t, s.url(), map[string]worker.Handler{
		"backfill": func(ctx context.Context, tk *worker.Task) (any, error) {
			seen.Store(tk)
			return map[string]bool{"ok": true}, nil
		},
	})
	s.waitTask(run.TaskID, "completed", status(lifecycle.Completed))
	tk := seen.Load()
	p := tk.Pipeline
	if p == nil {
		t.Fatalf("task %+v has no pipeline", tk)
	}
	if p.Job.DAGName != "sdk" || p.Job.Name != "backfill" || p.Operator != "backfill" || p.Job.Version == "" || string(tk.Input) != `{"depth":3}` {
		t.Errorf("pipeline %+v input %s", p, tk.Input)
	}
	if len(p.Outputs) != 2 || p.Outputs[1].DatasetName != "filled" || p.Outputs[0].DatasetUUID == "" || p.Outputs[1].DatasetVersion == "" {
		t.Errorf("outputs %+v", p.Outputs)
	}
	if string(p.Trigger) != `{"input":{"from":7},"kind":"manual"}` {
		t.Errorf("trigger %s", p.Trigger)
	}
}
