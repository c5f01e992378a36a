package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// PipelineView is a pipeline with its active version's spec and its jobs' task counts.
type PipelineView struct {
	Pipeline *store.Pipeline
	Active   *store.PipelineVersion
	Spec     *specs.Pipeline
	Counts   []*store.PipelineTaskCount
	// Backpressure is the state of each job that has backpressure limits or holds routings.
	Backpressure map[string]*BackpressureView
	// Build is the build of the version a changed deploy is building beside the active one; nil
	// when none is.
	Build *BuildView
}

// BackpressureView is the backpressure state of one pipeline job.
type BackpressureView struct {
	// State is "paused" while the job holds routings or its backlog is at its limits (the next
	// event is held), else "open".
	State              string  `json:"state"`
	Mode               string  `json:"mode"`
	MaxQueueDepth      int     `json:"max_queue_depth,omitempty"`
	MaxQueueAgeSeconds float64 `json:"max_queue_age_seconds,omitempty"`
	LowWater           int     `json:"low_water,omitempty"`
	// Depth is the job's backlog: its pending tasks, ready or backing off.
	Depth int `json:"depth"`
	// OldestReadyAt is when its oldest ready task became ready.
	OldestReadyAt *time.Time `json:"oldest_ready_at"`
	// Held counts the routings held, HeldEvents the events they cover: more than Held once
	// coalesce joined events of one scope.
	Held         int        `json:"held"`
	HeldEvents   int        `json:"held_events"`
	OldestHeldAt *time.Time `json:"oldest_held_at"`
	PausedSince  *time.Time `json:"paused_since"`
}

// PipelineJobView is one job of a pipeline view.
type PipelineJobView struct {
	Name       string   `json:"name"`
	Activation string   `json:"activation"`
	Runtime    string   `json:"runtime"`
	Operator   string   `json:"operator"`
	Queue      string   `json:"queue"`
	Source     string   `json:"source,omitempty"`
	Secrets    []string `json:"secrets"`
	// UDF is the bundle the job runs, as its deploy pinned it; nil when it runs none.
	UDF     *wire.Bundle   `json:"udf,omitempty"`
	Outputs []specs.Output `json:"outputs"`
	Inputs  []specs.Input  `json:"inputs"`
	Counts  map[string]int `json:"counts"`
	// Backpressure is set for a job with max_queue_depth or max_queue_age, or that holds
	// routings.
	Backpressure *BackpressureView `json:"backpressure,omitempty"`
	// WaitingFor says why the job's tasks do not run, when the server knows: a lambda job whose
	// operator has no push target. Set by the API, which knows the targets.
	WaitingFor string `json:"waiting_for,omitempty"`
}

// Jobs lists the active version's jobs with their outputs' datasets and task counts: routed
// (every task ever created for the job), waiting, pending, running, completed, failed, canceled.
func (v *PipelineView) Jobs() []PipelineJobView {
	out := make([]PipelineJobView, 0, len(v.Spec.Jobs))
	for _, j := range v.Spec.Jobs {
		jv := PipelineJobView{Name: j.Name, Activation: j.Activation, Runtime: j.Runtime, Operator: j.Operator,
			Queue: j.Queue, Source: j.SourceKind, Secrets: append([]string{}, j.Secrets...), UDF: j.UDF, Outputs: j.Outputs, Inputs: j.Inputs,
			Counts: map[string]int{"routed": 0, "waiting": 0, "pending": 0, "running": 0, "completed": 0, "failed": 0, "canceled": 0}}
		if jv.Outputs == nil {
			jv.Outputs = []specs.Output{}
		}
		if jv.Inputs == nil {
			jv.Inputs = []specs.Input{}
		}
		jv.Backpressure = v.Backpressure[j.Name]
		for _, c := range v.Counts {
			if c.Job == j.Name {
				jv.Counts[string(c.Status)] += c.Count
				jv.Counts["routed"] += c.Count
			}
		}
		out = append(out, jv)
	}
	return out
}

// LambdaOnPull reports whether a lambda job's tasks of operator op are handed to pull workers
// (Config.LambdaOnPull).
func (dp *Plane) LambdaOnPull(op string) bool {
	return dp.cfg.LambdaOnPull != nil && dp.cfg.LambdaOnPull(op)
}

// GetPipeline returns a tenant's pipeline with its active version.
func (dp *Plane) GetPipeline(ctx context.Context, tenant, name string) (*PipelineView, error) {
	p, err := dp.store.PipelineGet(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrPipelineNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", name, err)
	}
	v, spec, err := dp.version(ctx, tenant, name, p.ActiveVersion)
	if err != nil {
		return nil, err
	}
	counts, err := dp.store.PipelineTaskCounts(ctx, tenant, name)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", name, err)
	}
	bp, err := dp.backpressure(ctx, spec)
	if err != nil {
		return nil, err
	}
	view := &PipelineView{Pipeline: p, Active: v, Spec: spec, Counts: counts, Backpressure: bp}
	if p.BuildingVersion != "" {
		bv, bs, err := dp.version(ctx, tenant, name, p.BuildingVersion)
		if err != nil {
			return nil, err
		}
		if view.Build, err = dp.buildView(ctx, dp.store, bv, bs); err != nil {
			return nil, err
		}
	}
	return view, nil
}

// version reads a pipeline version and decodes its spec.
func (dp *Plane) version(ctx context.Context, tenant, name, version string) (*store.PipelineVersion, *specs.Pipeline, error) {
	v, err := dp.store.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version})
	if err != nil {
		return nil, nil, fmt.Errorf("pipeline %s version %s: %w", name, version, err)
	}
	spec, err := specs.Decode(v)
	return v, spec, err
}

// backpressure reads the backpressure state of spec's jobs that have limits or hold routings.
func (dp *Plane) backpressure(ctx context.Context, spec *specs.Pipeline) (map[string]*BackpressureView, error) {
	held, err := dp.store.HeldRoutingSummary(ctx, store.HeldSummaryParams{Tenant: spec.Tenant, Pipeline: spec.Name})
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	byJob := map[string]*store.HeldSummary{}
	for _, h := range held {
		byJob[h.Job] = h
	}
	now := dp.clock.Now()
	out := map[string]*BackpressureView{}
	for _, j := range spec.Jobs {
		lim, h := j.Limits(), byJob[j.Name]
		if !lim.Set() && h == nil {
			continue
		}
		b, err := dp.store.PipelineJobBacklog(ctx, store.PipelineJobBacklogParams{
			Job: store.PipelineJobKey{Tenant: spec.Tenant, Pipeline: spec.Name, Job: j.Name}, Queue: j.TaskQueue(), Now: now})
		if err != nil {
			return nil, err
		}
		v := &BackpressureView{State: "open", Mode: cmp.Or(j.BackpressureMode, pipeline.BackpressurePause),
			MaxQueueDepth: lim.Depth, MaxQueueAgeSeconds: lim.Age.Seconds(), LowWater: lim.LowWater(),
			Depth: b.Depth, OldestReadyAt: timePtr(b.OldestReadyAt)}
		if h != nil {
			v.Held, v.HeldEvents, v.OldestHeldAt, v.PausedSince = h.Held, h.Events, timePtr(h.OldestHeldAt), timePtr(h.PausedSince)
		}
		if h != nil || lim.Full(b, now) {
			v.State = "paused"
		}
		out[j.Name] = v
	}
	return out, nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// ListPipelines lists a tenant's pipelines.
func (dp *Plane) ListPipelines(ctx context.Context, tenant string) ([]*store.Pipeline, error) {
	return dp.store.PipelineList(ctx, tenant)
}

// PipelineVersions lists a pipeline's versions, newest first.
func (dp *Plane) PipelineVersions(ctx context.Context, tenant, name string) ([]*store.PipelineVersion, error) {
	if _, err := dp.store.PipelineGet(ctx, tenant, name); errors.Is(err, store.ErrNotFound) {
		return nil, ErrPipelineNotFound
	} else if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", name, err)
	}
	return dp.store.PipelineVersionList(ctx, tenant, name)
}

// sortedKeys lists the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
