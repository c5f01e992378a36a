package specs

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// The rule of what a changed deploy rebuilds: the jobs whose change materializes differently and
// everything downstream through a rebuilt dataset; a job writing a buffered dataset switches at
// activation instead, and nothing is rebuilt through it.
func TestPlanBuildRule(t *testing.T) {
	t.Parallel()
	// src → a (writes A) → b (reads A, writes B) → c (reads B); a → buf (buffered) → d (reads buf).
	base := func() *Pipeline {
		return &Pipeline{Version: "v1", Jobs: []*Job{
			{Name: "src", Runtime: "ecs_platform", Operator: "follow", Outputs: []Output{{DatasetUUID: "S"}}},
			{Name: "a", Runtime: "ecs_platform", Operator: "op", Config: json.RawMessage(`{"x":1,"y":2}`),
				Inputs: []Input{{DatasetUUID: "S"}}, Outputs: []Output{{DatasetUUID: "A"}}},
			{Name: "b", Runtime: "ecs_platform", Operator: "op", Inputs: []Input{{DatasetUUID: "A"}}, Outputs: []Output{{DatasetUUID: "B"}}},
			{Name: "c", Runtime: "ecs_platform", Operator: "op", Inputs: []Input{{DatasetUUID: "B", Where: json.RawMessage(`{"k":"v"}`)}}},
			{Name: "w", Runtime: "ecs_platform", Operator: "writer", Inputs: []Input{{DatasetUUID: "S"}}, Outputs: []Output{{DatasetUUID: "BUF"}}},
			{Name: "d", Runtime: "ecs_platform", Operator: "op", Inputs: []Input{{DatasetUUID: "BUF"}}},
		}}
	}
	buffered := map[string]bool{"BUF": true}
	for _, c := range []struct {
		name     string
		change   func(s *Pipeline)
		rebuilt  []string
		switched []string
		datasets []string
	}{
		{"nothing changes", func(s *Pipeline) {}, nil, nil, nil},
		{"retries, timeouts, priority and queue do not materialize", func(s *Pipeline) {
			j := s.Job("a")
			j.MaxAttempts, j.TimeoutSeconds, j.Priority, j.Queue, j.MaxConcurrency = 9, 60, 5, "other", 3
		}, nil, nil, nil},
		{"config keys reordered are the same config", func(s *Pipeline) { s.Job("a").Config = json.RawMessage(`{ "y": 2, "x": 1 }`) }, nil, nil, nil},
		{"a middle job's config: it and everything downstream", func(s *Pipeline) { s.Job("a").Config = json.RawMessage(`{"x":2,"y":2}`) },
			[]string{"a", "b", "c"}, nil, []string{"A", "B"}},
		{"an operator at the end", func(s *Pipeline) { s.Job("c").Operator = "op2" }, []string{"c"}, nil, nil},
		{"a filter", func(s *Pipeline) { s.Job("c").Inputs[0].Where = json.RawMessage(`{"k":"w"}`) }, []string{"c"}, nil, nil},
		{"the source's runtime", func(s *Pipeline) { s.Job("src").Runtime = "lambda" },
			[]string{"a", "b", "c", "src"}, []string{"w"}, []string{"A", "B", "S"}},
		{"a writer of a buffered dataset switches, and its readers stay", func(s *Pipeline) { s.Job("w").Config = json.RawMessage(`{"v":2}`) },
			nil, []string{"w"}, nil},
		{"a new job reading a rebuilt dataset is rebuilt, one reading a kept dataset is not", func(s *Pipeline) {
			s.Job("b").Strategy = "PerPartition"
			s.Jobs = append(s.Jobs, &Job{Name: "n1", Inputs: []Input{{DatasetUUID: "B"}}},
				&Job{Name: "n2", Inputs: []Input{{DatasetUUID: "S"}}})
		}, []string{"b", "c", "n1"}, nil, []string{"B"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			next := base()
			next.Version = "v2"
			c.change(next)
			plan := PlanBuild(base(), next, buffered)
			if c.rebuilt == nil && c.switched == nil {
				if plan != nil {
					t.Fatalf("plan %+v, want none", plan)
				}
				return
			}
			if c.rebuilt == nil {
				if plan != nil {
					t.Fatalf("plan %+v, want none (only switched jobs)", plan)
				}
				return
			}
			if plan == nil {
				t.Fatal("no plan")
			}
			if got := slices.Sorted(maps.Keys(plan.Jobs)); !slices.Equal(got, c.rebuilt) {
				t.Errorf("rebuilt %v, want %v", got, c.rebuilt)
			}
			if got := slices.Sorted(maps.Keys(plan.Switched)); !slices.Equal(got, c.switched) && (len(got) > 0 || len(c.switched) > 0) {
				t.Errorf("switched %v, want %v", got, c.switched)
			}
			if got := slices.Sorted(maps.Keys(plan.Pointers)); !slices.Equal(got, c.datasets) && (len(got) > 0 || len(c.datasets) > 0) {
				t.Errorf("rebuilt datasets %v, want %v", got, c.datasets)
			}
			if plan.Base != "v1" {
				t.Errorf("base %s", plan.Base)
			}
		})
	}
}
