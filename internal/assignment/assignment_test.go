package assignment_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/assignment"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

var (
	leaseEnd = time.Date(2026, 5, 1, 12, 0, 30, 0, time.UTC)
	tokenEnd = time.Date(2026, 5, 1, 12, 15, 0, 0, time.UTC)
)

func claim(route *wire.Route) assignment.Assignment {
	t := &store.Task{ID: "0196b0c4-0000-7000-8000-000000000001", JobID: "job-1", Key: "transform", Name: "clean",
		Queue: "etl", Input: json.RawMessage(`{"n":7}`), Attempt: 2, LeaseToken: "lease-2", LeaseExpiresAt: leaseEnd,
		HeartbeatTimeout: 90 * time.Second, Timeout: 10 * time.Minute, CancelGrace: 30 * time.Second,
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	return assignment.Assignment{Claim: &dispatch.Claim{Task: t, Job: dispatch.JobRef{ID: "job-1", Tenant: "acme", Name: "nightly"},
		Route: route, DependencyOutputs: map[string]json.RawMessage{"b": json.RawMessage(`{"rows":2}`), "a": nil},
		HeartbeatInterval: 30 * time.Second}, Token: "tok", TokenExpires: tokenEnd}
}

// Every dialect renders the same claim: the same task, attempt, lease, token and parents'
// outputs, and for a pipeline task the same route.
func TestEveryDialectRendersTheSameClaim(t *testing.T) {
	in := int64(5)
	idle := 300.0
	route := &wire.Route{Job: wire.PipelineJob{DAGName: "alerts", Name: "scan", Version: "v3", IdleTimeoutSeconds: &idle,
		UpdateStrategy: "append", UniqueKey: []string{"dedupe_key", "channel"}},
		Inputs:  []wire.DatasetInput{{InputIndex: 0, DatasetUUID: "ds-in", DatasetVersion: "1", Cursor: &in}},
		Outputs: []wire.DatasetOutput{{OutputIndex: 0, DatasetUUID: "ds-out", DatasetVersion: "1", WriteMode: "buffered"}},
		Trigger: json.RawMessage(`{"kind":"manual"}`)}
	for _, r := range []*wire.Route{nil, route} {
		a := claim(r)
		s, i, p := a.Stream("1-0"), a.Internal(), a.Push("https://baton.example", "job-1/t/2")
		task := i.Task
		same := []struct {
			what                 string
			stream, intern, push any
		}{
			{"task id", s.TaskID, task.TaskID, p.TaskID},
			{"attempt", s.AttemptID, i.Attempt, p.Attempt},
			{"lease token", s.LeaseToken, i.LeaseToken, p.LeaseToken},
			{"lease end", s.LeaseExpiresAt.Time, i.LeaseExpiresAt.Time, p.LeaseExpiresAt.Time},
			{"token", s.CapabilityToken, i.CapabilityToken, p.TaskToken},
			{"token end", s.CapabilityTokenExpiresAt.Time, i.CapabilityTokenExpiresAt.Time, p.TokenExpiresAt.Time},
			{"traceparent", s.Traceparent, task.Traceparent, p.Traceparent},
			{"parents' outputs", string(must(json.Marshal(s.DependencyOutputs))), string(must(json.Marshal(task.DependencyOutputs))),
				string(must(json.Marshal(p.DependencyOutputs)))},
		}
		for _, c := range same {
			if c.stream != c.intern || c.intern != c.push {
				t.Errorf("route %v: %s differs: stream %v, internal %v, push %v", r != nil, c.what, c.stream, c.intern, c.push)
			}
		}
		if r == nil {
			if s.Job != nil || p.Job != nil || task.Outputs != nil || task.Job.Version != "" {
				t.Errorf("a task without a route got a pipeline job: %+v %+v %+v", s.Job, p.Job, task.Job)
			}
			var parents []wire.ParentOutput
			if err := json.Unmarshal(task.Inputs, &parents); err != nil || len(parents) != 2 || parents[0].TaskID != "a" ||
				string(parents[0].Output) != "null" {
				t.Errorf("internal inputs of a plain task: %s (%v), want its parents by key, a missing output as null", task.Inputs, err)
			}
			continue
		}
		var inputs []wire.DatasetInput
		if err := json.Unmarshal(task.Inputs, &inputs); err != nil || !slices.EqualFunc(inputs, route.Inputs, sameInput) ||
			!slices.EqualFunc(*s.Inputs, route.Inputs, sameInput) || !slices.EqualFunc(p.Inputs, route.Inputs, sameInput) {
			t.Errorf("inputs differ: internal %s, stream %+v, push %+v", task.Inputs, *s.Inputs, p.Inputs)
		}
		if !reflect.DeepEqual(*s.Job, route.Job) || !reflect.DeepEqual(*p.Job, route.Job) || task.Job.Name != "scan" || task.Job.Version != "v3" || *task.Job.DAGName != "alerts" ||
			*task.Job.IdleTimeoutSeconds != idle || task.Job.UpdateStrategy != "append" || !slices.Equal(task.Job.UniqueKey, route.Job.UniqueKey) {
			t.Errorf("pipeline job differs: stream %+v, push %+v, internal %+v", s.Job, p.Job, task.Job)
		}
		if len(*s.Outputs) != 1 || len(*task.Outputs) != 1 || len(p.Outputs) != 1 {
			t.Errorf("outputs differ: %v %v %v", *s.Outputs, *task.Outputs, p.Outputs)
		}
	}
}

func sameInput(a, b wire.DatasetInput) bool {
	return a.DatasetUUID == b.DatasetUUID && *a.Cursor == *b.Cursor
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// The dialects' own names and units: the stream dialect in seconds with milliseconds, the
// internal dialect in whole seconds, the push envelope in milliseconds.
func TestDialectUnits(t *testing.T) {
	a := claim(nil)
	s, i, p := a.Stream(""), a.Internal(), a.Push("", "k")
	if *s.TimeoutSeconds != 600 || *i.Task.TimeoutSeconds != 600 || s.HeartbeatIntervalSeconds != 30 ||
		i.HeartbeatIntervalSeconds != 30 || p.HeartbeatIntervalMs != 30_000 || s.LeaseTTLSeconds != 90 || i.LeaseTTLSeconds != 90 ||
		p.HeartbeatTimeoutMs != 90_000 || p.CancelGracePeriodMs != 30_000 {
		t.Errorf("units: stream %+v, internal %+v, push %+v", s, i, p)
	}
	if *i.Task.Job.DAGName != "nightly" || i.Task.Job.Name != "transform" || p.TenantID != "acme" || s.RunID != "job-1" {
		t.Errorf("job: internal %+v, push tenant %q, stream run %q", i.Task.Job, p.TenantID, s.RunID)
	}
}
