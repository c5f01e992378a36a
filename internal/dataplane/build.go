package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// A deploy whose change affects what a job materializes does not take over at once: it rebuilds,
// beside the active version, the jobs the change affects and everything downstream of them, into
// new versions of their datasets, while the active version keeps serving and routing its own.
// When the build has caught up it is ready, and one transaction (Activate) moves every rebuilt
// dataset's current version and the pipeline's active version together; a rollback moves them all
// back. The plan is specs.PlanBuild; this file holds its start (startBuild) and its view; builds.go the
// service that moves builds forward, cutover.go the moves of a pipeline's datasets between versions.

// The activate modes of a deploy (Deployer.Activate).
const (
	// ActivateManual: a deploy that needs a build waits, once ready, for Activate. The default.
	ActivateManual = "manual"
	// ActivateWhenReady: a deploy that needs a build is activated as soon as it is ready.
	ActivateWhenReady = "when_ready"
	// ActivateImmediate: the deploy takes over at once, as if nothing needed a rebuild.
	ActivateImmediate = "immediate"
)

// The states of a build, as a pipeline view shows them.
const (
	BuildBuilding = "building"
	BuildReady    = "ready"
)

// buildProgress is how far a build has come: the version's Build record.
type buildProgress struct {
	// Through is the newest dataset event when the backfill began: the events of the datasets
	// the build reads but does not rebuild up to it are routed again to the rebuilt jobs that
	// read them (later ones reach those jobs as they are routed). 0: not begun.
	Through int64 `json:"through"`
	// After is, per backfilled input ("job/input"), the last event routed again.
	After map[string]int64 `json:"after,omitempty"`
	// Sources are the rebuilt source jobs whose build run was started.
	Sources []string `json:"sources,omitempty"`
	// Scanned: every backfilled input was routed through Through.
	Scanned bool `json:"scanned"`
	// ReadyAt is when the build was found done; nil while it builds.
	ReadyAt *time.Time `json:"ready_at,omitempty"`
}

// progressOf decodes version v's build progress (zero when it has none).
func progressOf(v *store.PipelineVersion) (buildProgress, error) {
	var prog buildProgress
	if len(v.Build) > 0 {
		if err := json.Unmarshal(v.Build, &prog); err != nil {
			return prog, fmt.Errorf("pipeline %s version %s: decode its build: %w", v.Pipeline, v.Version, err)
		}
	}
	return prog, nil
}

// BuildView is the build of a pipeline version beside the active one.
type BuildView struct {
	Version  string `json:"version"`
	State    string `json:"state"` // BuildBuilding or BuildReady
	Base     string `json:"base_version"`
	Activate string `json:"activate"`
	// Jobs are the rebuilt jobs, by name, with why and their tasks by status.
	Jobs []BuildJobView `json:"jobs"`
	// Switched are the affected jobs that change at activation instead, with why.
	Switched map[string]string `json:"switched"`
	// Datasets are the rebuilt datasets: the version readers see now and the one the build makes.
	Datasets []BuildDatasetView `json:"datasets"`
	Backfill struct {
		Through int64 `json:"through_event"`
		Scanned bool  `json:"scanned"`
	} `json:"backfill"`
	ReadyAt *time.Time `json:"ready_at"`
}

// BuildJobView is one rebuilt job of a build.
type BuildJobView struct {
	Name   string         `json:"name"`
	Reason string         `json:"reason"`
	Counts map[string]int `json:"counts"`
}

// BuildDatasetView is one rebuilt dataset of a build.
type BuildDatasetView struct {
	DatasetUUID      string `json:"dataset_uuid"`
	DatasetName      string `json:"dataset_name,omitempty"`
	CurrentVersion   string `json:"current_version"`
	CandidateVersion string `json:"candidate_version"`
}

// buildView reads the build of version v of a pipeline; nil when v has no build.
func (dp *Plane) buildView(ctx context.Context, st store.Reader, v *store.PipelineVersion, spec *specs.Pipeline) (*BuildView, error) {
	if spec.Build == nil {
		return nil, nil
	}
	prog, err := progressOf(v)
	if err != nil {
		return nil, err
	}
	b := &BuildView{Version: v.Version, State: BuildBuilding, Base: spec.Build.Base, Activate: spec.Build.Activate,
		Switched: spec.Build.Switched}
	if b.Switched == nil {
		b.Switched = map[string]string{}
	}
	if prog.ReadyAt != nil {
		at := prog.ReadyAt.UTC().Truncate(time.Second) // as the API's other times
		b.State, b.ReadyAt = BuildReady, &at
	}
	b.Backfill.Through, b.Backfill.Scanned = prog.Through, prog.Scanned
	counts, err := st.PipelineVersionTaskCounts(ctx, store.PipelineVersionKey{Tenant: v.Tenant, Pipeline: v.Pipeline, Version: v.Version})
	if err != nil {
		return nil, err
	}
	b.Jobs, b.Datasets = []BuildJobView{}, []BuildDatasetView{}
	for _, name := range sortedKeys(spec.Build.Jobs) {
		jv := BuildJobView{Name: name, Reason: spec.Build.Jobs[name], Counts: map[string]int{"routed": 0, "waiting": 0, "pending": 0,
			"running": 0, "completed": 0, "failed": 0, "canceled": 0}}
		for _, c := range counts {
			if c.Job == name {
				jv.Counts[string(c.Status)] += c.Count
				jv.Counts["routed"] += c.Count
			}
		}
		b.Jobs = append(b.Jobs, jv)
	}
	ids := sortedKeys(spec.Build.Pointers)
	ds, err := st.DatasetGetMany(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: the datasets its build rebuilds: %w", v.Pipeline, v.Version, err)
	}
	byID := map[string]*store.Dataset{}
	for _, x := range ds {
		byID[x.UUID] = x
	}
	for _, id := range ids {
		d := BuildDatasetView{DatasetUUID: id, CandidateVersion: spec.Build.Pointers[id]}
		if x := byID[id]; x != nil {
			d.DatasetName, d.CurrentVersion = x.Name, x.CurrentVersion
		}
		b.Datasets = append(b.Datasets, d)
	}
	return b, nil
}

// startBuild makes version spec, just stored, p's building version, in tx: the build it replaces,
// if any, is abandoned, and the versions the build makes of its datasets are registered.
func (dp *Plane) startBuild(ctx context.Context, tx store.Tx, c *dispatch.Work, p *store.Pipeline, spec *specs.Pipeline, res *DeployResult) error {
	res.Building, res.Abandoned = true, p.BuildingVersion
	if err := dp.abandonBuild(ctx, tx, c, p); err != nil {
		return err
	}
	p.BuildingVersion, p.UpdatedAt = spec.Version, c.Now()
	if err := tx.PipelinePut(ctx, p); err != nil {
		return fmt.Errorf("pipeline %s: start the build of version %s: %w", p.Name, spec.Version, err)
	}
	if err := tx.PipelineVersionSetState(ctx, store.PipelineVersionKey{Tenant: p.Tenant, Pipeline: p.Name, Version: spec.Version},
		store.VersionBuilding); err != nil {
		return err
	}
	versions := make([]*store.DatasetVersion, 0, len(spec.Build.Pointers))
	for _, id := range sortedKeys(spec.Build.Pointers) {
		versions = append(versions, &store.DatasetVersion{DatasetUUID: id, Version: spec.Build.Pointers[id], CreatedAt: c.Now()})
	}
	res.Pipeline = p
	if err := tx.DatasetVersionInsertMany(ctx, versions); err != nil {
		return fmt.Errorf("pipeline %s version %s: register the versions its build makes: %w", p.Name, spec.Version, err)
	}
	return nil
}

// bufferedOutputs is the buffered datasets the jobs of doc write, by uuid.
func bufferedOutputs(doc *pipeline.Document, spec *specs.Pipeline) map[string]bool {
	out := map[string]bool{}
	for _, j := range spec.Jobs {
		for _, o := range j.Outputs {
			if p := doc.Publish[o.DatasetName]; p != nil && p.WriteMode == pipeline.WriteBuffered {
				out[o.DatasetUUID] = true
			}
		}
	}
	return out
}
