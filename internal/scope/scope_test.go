package scope_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

func i64(n int64) *int64 { return &n }

// task is a task of attempt 2 with route r (nil: a task of a submitted job).
func task(t *testing.T, r *wire.Route) *store.Task {
	t.Helper()
	tk := &store.Task{ID: "t1", Attempt: 2}
	if r != nil {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		tk.Route = b
	}
	return tk
}

// What a scope allows, by job kind: what the attempt reads (and where from), publishes into,
// commits partitions of, is granted in object storage, may download and is told.
func TestScopeByJobKind(t *testing.T) {
	blocks := wire.DatasetInput{InputIndex: 0, DatasetUUID: "u-blocks", DatasetName: "blocks", DatasetVersion: "v1",
		Cursor: i64(7), Where: json.RawMessage(`{"chain":"mainnet"}`), StorageRef: json.RawMessage(`"s3://b/datasets/u-blocks/x/"`)}
	prices := wire.DatasetInput{InputIndex: 1, DatasetUUID: "u-prices", DatasetVersion: "v3", StorageRef: json.RawMessage("null")}
	alerts := wire.DatasetOutput{OutputIndex: 0, DatasetUUID: "u-alerts", DatasetName: "alerts", DatasetVersion: "v9", WriteMode: "buffered"}
	ranges := wire.DatasetOutput{OutputIndex: 0, DatasetUUID: "u-ranges", DatasetName: "ranges", DatasetVersion: "v2"}
	job := func(runtime string) wire.PipelineJob {
		return wire.PipelineJob{DAGName: "p", Name: "j", Version: "1", Runtime: runtime, Secrets: []string{"rpc_key"}}
	}
	type want struct {
		reads     map[string]string // ref → the version read
		fires     string            // the dataset whose read carries the task's event
		refused   []string          // refs it may not read
		publishes []string          // buffered outputs it may publish into
		commits   []string          // outputs whose partitions it commits
		inputs    int               // storage grant inputs
		outputs   []grant.Output    // storage grant outputs
		bundle    string
		secrets   []string
	}
	for _, c := range []struct {
		name  string
		route *wire.Route
		want  want
	}{
		{"a task of a submitted job", nil, want{refused: []string{"blocks", "u-blocks", "alerts"}}},
		{"a pipeline job with inputs", &wire.Route{Job: job("ecs_platform"), Inputs: []wire.DatasetInput{blocks, prices}},
			want{reads: map[string]string{"blocks": "v1", "u-blocks": "v1", "u-prices": "v3"}, fires: "u-blocks",
				refused: []string{"prices", "alerts", "u-alerts"}, inputs: 2, secrets: []string{"rpc_key"}}},
		{"a buffered writer", &wire.Route{Job: job("ecs_platform"), Inputs: []wire.DatasetInput{blocks}, Outputs: []wire.DatasetOutput{alerts}},
			want{reads: map[string]string{"blocks": "v1", "alerts": "v9", "u-alerts": "v9"}, fires: "u-blocks", refused: []string{"ranges"},
				publishes: []string{"u-alerts"}, inputs: 1, outputs: []grant.Output{{DatasetUUID: "u-alerts", Buffered: true}},
				secrets: []string{"rpc_key"}}},
		{"a replace writer", &wire.Route{Job: func() wire.PipelineJob { j := job("ecs_platform"); j.UpdateStrategy = "replace"; return j }(),
			Outputs: []wire.DatasetOutput{ranges, alerts}},
			want{reads: map[string]string{"ranges": "v2", "alerts": "v9"}, refused: []string{"blocks"}, publishes: []string{"u-alerts"},
				commits: []string{"u-ranges"}, outputs: []grant.Output{{DatasetUUID: "u-ranges"}, {DatasetUUID: "u-alerts", Buffered: true}},
				secrets: []string{"rpc_key"}}},
		{"a lambda job", &wire.Route{Job: job("lambda"), Outputs: []wire.DatasetOutput{ranges}},
			want{reads: map[string]string{"ranges": "v2"}, outputs: []grant.Output{{DatasetUUID: "u-ranges"}}, secrets: []string{"rpc_key"}}},
		{"a job that runs a bundle", &wire.Route{Job: func() wire.PipelineJob { j := job("ecs_platform"); j.Bundle = "b-1"; return j }(),
			Inputs: []wire.DatasetInput{blocks}},
			want{reads: map[string]string{"blocks": "v1"}, fires: "u-blocks", inputs: 1, bundle: "b-1"}},
		{"the untrusted runtime", &wire.Route{Job: func() wire.PipelineJob { j := job("ecs_udf"); j.Bundle = "b-2"; return j }()},
			want{bundle: "b-2"}},
		{"a dispatcher job", &wire.Route{Job: job("dispatcher"), Outputs: []wire.DatasetOutput{ranges}},
			want{reads: map[string]string{"ranges": "v2"}, outputs: []grant.Output{{DatasetUUID: "u-ranges"}}, secrets: []string{"rpc_key"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := scope.Of(task(t, c.route), "acme")
			if sc.Tenant != "acme" || sc.TaskID != "t1" || sc.Attempt != 2 {
				t.Errorf("identity %s %s %d", sc.Tenant, sc.TaskID, sc.Attempt)
			}
			for ref, version := range c.want.reads {
				d, ok := sc.Readable(ref)
				if !ok || d.Version != version {
					t.Errorf("read %s: %+v %v, want version %s", ref, d, ok, version)
				}
				if (d.UUID == c.want.fires) != (d.Input != nil && d.Input.Cursor != nil) {
					t.Errorf("read %s: its input fired %v", ref, d.Input != nil && d.Input.Cursor != nil)
				}
			}
			for _, ref := range c.want.refused {
				if d, ok := sc.Readable(ref); ok {
					t.Errorf("read %s: allowed (%+v)", ref, d)
				}
			}
			var publishes []string
			for _, u := range []string{"u-blocks", "u-prices", "u-alerts", "u-ranges"} {
				if _, ok := sc.Publishable(u); ok {
					publishes = append(publishes, u)
				}
			}
			if !slices.Equal(publishes, c.want.publishes) {
				t.Errorf("publishes into %v, want %v", publishes, c.want.publishes)
			}
			if commits := slices.Sorted(maps.Keys(sc.Commits())); !slices.Equal(commits, c.want.commits) {
				t.Errorf("commits %v, want %v", commits, c.want.commits)
			}
			st := sc.Storage()
			if st.TaskID != "t1" || st.Attempt != 2 || len(st.Inputs) != c.want.inputs || !slices.Equal(st.Outputs, c.want.outputs) {
				t.Errorf("storage %+v, want %d inputs and outputs %v", st, c.want.inputs, c.want.outputs)
			}
			if sc.Bundle != c.want.bundle || !slices.Equal(sc.Secrets, c.want.secrets) {
				t.Errorf("bundle %q secrets %v, want %q %v", sc.Bundle, sc.Secrets, c.want.bundle, c.want.secrets)
			}
		})
	}
}

// The input whose event started the task is the one read when two inputs read one dataset.
func TestReadableFiredInputFirst(t *testing.T) {
	r := &wire.Route{Inputs: []wire.DatasetInput{
		{InputIndex: 0, DatasetUUID: "u", DatasetVersion: "v1", Where: json.RawMessage(`{"a":1}`)},
		{InputIndex: 1, DatasetUUID: "u", DatasetVersion: "v1", PartitionKey: "0-9", Where: json.RawMessage(`{"a":2}`)},
	}}
	d, ok := scope.Of(task(t, r), "acme").Readable("u")
	if !ok || d.Input.InputIndex != 1 {
		t.Fatalf("%+v %v, want input 1", d, ok)
	}
}
