package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// A pipeline's datasets move between versions with its active version: an activation moves the
// datasets a build rebuilt to the build's versions (Activate), a rollback or a deploy of an
// earlier version back to the versions they had under it (restore), recorded when it was replaced
// (switchPointers). What a move leaves undone runs again (restore, ResumeReplaced); what it
// replaces stops (cancelTasks). Abandon drops a build without moving anything.

// Activate makes version, which a changed deploy is building, the pipeline's active version: in
// one transaction every dataset the build rebuilt gets the build's version as its current one,
// and the pipeline the version as its active one; the versions the datasets had are recorded
// with the version replaced, for a rollback to it. Then the tasks of the replaced version's
// rebuilt jobs that have not ended are canceled (what they write is of versions no longer
// current, and the build has run their updates). A build that is not ready is refused (409
// pipeline_version_not_ready) unless force is set. It returns how many jobs it canceled.
func (dp *Plane) Activate(ctx context.Context, tenant, name, version string, force bool) (*DeployResult, int, error) {
	var (
		res  *DeployResult
		base string
		plan *specs.BuildPlan
	)
	err := dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		p, v, spec, err := dp.building(ctx, tx, tenant, name, version)
		if err != nil {
			return err
		}
		if !force {
			prog, err := progressOf(v)
			if err != nil {
				return err
			}
			if prog.ReadyAt == nil {
				return &dispatch.ConflictError{Code: "pipeline_version_not_ready", Message: fmt.Sprintf(
					"pipeline %q version %s is still building: activate it when its build is ready, or with force", name, version)}
			}
		}
		base, plan = p.ActiveVersion, spec.Build
		if err := dp.switchPointers(ctx, tx, c, p, spec.Build.Pointers); err != nil {
			return fmt.Errorf("activate version %s: %w", version, err)
		}
		p.ActiveVersion, p.BuildingVersion, p.UpdatedAt = version, "", c.Now()
		if err := tx.PipelinePut(ctx, p); err != nil {
			return fmt.Errorf("pipeline %s: activate version %s: %w", name, version, err)
		}
		if err := tx.PipelineVersionSetState(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version}, store.VersionDeployed); err != nil {
			return err
		}
		c.Signal(&dp.routing) // held routings are released under the new version
		res = &DeployResult{Pipeline: p, Version: version, Activated: true}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	n, err := dp.cancelTasks(ctx, tenant, name, base, store.CancelVersionReplaced, ofJobs(plan.Jobs))
	if err != nil {
		return res, n, fmt.Errorf("pipeline %s version %s is active, but canceling the replaced version's rebuilt jobs failed: %w", name, version, err)
	}
	return res, n, nil
}

// Abandon stops the build of version: the version is marked abandoned (what its tasks report is
// stored, never routed), the pipeline keeps its active version and its datasets their current
// versions, and the build's tasks that have not ended are canceled. It returns how many jobs it
// canceled.
func (dp *Plane) Abandon(ctx context.Context, tenant, name, version string) (int, error) {
	err := dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		p, _, _, err := dp.building(ctx, tx, tenant, name, version)
		if err != nil {
			return err
		}
		return dp.abandonBuild(ctx, tx, c, p)
	})
	if err != nil {
		return 0, err
	}
	return dp.cancelTasks(ctx, tenant, name, version, "pipeline_build_abandoned", every)
}

// abandonBuild marks p's building version, if any, abandoned, in tx, and clears it from p (which
// the caller stores).
func (dp *Plane) abandonBuild(ctx context.Context, tx store.Tx, c *dispatch.Work, p *store.Pipeline) error {
	if p.BuildingVersion == "" {
		return nil
	}
	k := store.PipelineVersionKey{Tenant: p.Tenant, Pipeline: p.Name, Version: p.BuildingVersion}
	if err := tx.PipelineVersionSetState(ctx, k, store.VersionAbandoned); err != nil {
		return err
	}
	p.BuildingVersion, p.UpdatedAt = "", c.Now()
	if err := tx.PipelinePut(ctx, p); err != nil {
		return fmt.Errorf("pipeline %s: abandon the build of version %s: %w", p.Name, k.Version, err)
	}
	return nil
}

// building reads, in tx, pipeline name and its building version, which must be version.
func (dp *Plane) building(ctx context.Context, tx store.Tx, tenant, name, version string) (*store.Pipeline, *store.PipelineVersion, *specs.Pipeline, error) {
	p, err := tx.PipelineGet(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, ErrPipelineNotFound
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pipeline %s: %w", name, err)
	}
	k := store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version}
	v, err := tx.PipelineVersionGet(ctx, k)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, ErrPipelineVersionNotFound
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pipeline %s version %s: %w", name, version, err)
	}
	if p.BuildingVersion != version {
		what := "is not being built"
		switch {
		case p.ActiveVersion == version:
			what = "is the active version"
		case v.State == store.VersionAbandoned:
			what = "was abandoned (deploy it again to build it again)"
		}
		return nil, nil, nil, &dispatch.ConflictError{Code: "pipeline_version_not_building",
			Message: fmt.Sprintf("pipeline %q version %s %s", name, version, what)}
	}
	spec, err := specs.Decode(v)
	if err != nil {
		return nil, nil, nil, err
	}
	if spec.Build == nil {
		return nil, nil, nil, fmt.Errorf("pipeline %s version %s is building but has no build plan", name, version)
	}
	return p, v, spec, nil
}

// replacedRecord is what is recorded with a version when it stops being the active one (its
// Pointers): the current versions of the datasets its jobs write, which a rollback to it
// restores, and when.
type replacedRecord struct {
	Datasets map[string]string `json:"datasets"`
	At       time.Time         `json:"replaced_at"`
}

// switchPointers records, in tx, the current versions of the datasets pipeline p's jobs write
// with p's active version (see replacedRecord), then makes pins, by dataset uuid, their current
// versions. Buffered datasets are live and are left out.
func (dp *Plane) switchPointers(ctx context.Context, tx store.Tx, c *dispatch.Work, p *store.Pipeline, pins map[string]string) error {
	if p.ActiveVersion != "" {
		spec, err := dp.specs.Get(ctx, tx, p.Tenant, p.Name, p.ActiveVersion)
		if err != nil {
			return err
		}
		current, err := writtenVersions(ctx, tx, spec)
		if err != nil {
			return err
		}
		raw, _ := json.Marshal(replacedRecord{Datasets: current, At: c.Now()})
		if err := tx.PipelineVersionSetPointers(ctx, store.PipelineVersionKey{Tenant: p.Tenant, Pipeline: p.Name, Version: p.ActiveVersion}, raw); err != nil {
			return err
		}
	}
	if len(pins) == 0 {
		return nil
	}
	ds, err := tx.DatasetGetMany(ctx, sortedKeys(pins))
	if err != nil {
		return fmt.Errorf("pipeline %s: the datasets to switch: %w", p.Name, err)
	}
	for _, x := range ds {
		if v := pins[x.UUID]; x.Tenant == p.Tenant && x.WriteMode != pipeline.WriteBuffered && x.CurrentVersion != v {
			x.CurrentVersion, x.UpdatedAt = v, c.Now()
			if err := tx.DatasetUpdate(ctx, x); err != nil {
				return fmt.Errorf("pipeline %s: dataset %s: make version %s current: %w", p.Name, x.UUID, v, err)
			}
		}
	}
	return nil
}

// writtenVersions is the current version of each dataset spec's jobs write, by uuid; buffered
// datasets are left out.
func writtenVersions(ctx context.Context, tx store.Tx, spec *specs.Pipeline) (map[string]string, error) {
	var ids []string
	for _, j := range spec.Jobs {
		for _, o := range j.Outputs {
			ids = append(ids, o.DatasetUUID)
		}
	}
	ds, err := tx.DatasetGetMany(ctx, uniq(ids))
	if err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: the datasets its jobs write: %w", spec.Name, spec.Version, err)
	}
	out := map[string]string{}
	for _, x := range ds {
		if x.WriteMode != pipeline.WriteBuffered {
			out[x.UUID] = x.CurrentVersion
		}
	}
	return out, nil
}

// restore makes version to, which was active before, p's active version's successor in tx: the
// datasets its jobs write get back the versions they had when it was replaced, and the updates
// the replaced version ran since then on a job of to that writes one of those datasets are
// routed again to that job (once: routingKey), so that the versions it gets back miss nothing
// that happened meanwhile. The caller then moves p's active version.
func (dp *Plane) restore(ctx context.Context, tx store.Tx, c *dispatch.Work, p *store.Pipeline, to string) error {
	k := store.PipelineVersionKey{Tenant: p.Tenant, Pipeline: p.Name, Version: to}
	v, err := tx.PipelineVersionGet(ctx, k)
	if err != nil {
		return fmt.Errorf("pipeline %s version %s: %w", p.Name, to, err)
	}
	var rec replacedRecord
	if len(v.Pointers) > 0 {
		if err := json.Unmarshal(v.Pointers, &rec); err != nil {
			return fmt.Errorf("pipeline %s version %s: decode its dataset pointers: %w", p.Name, to, err)
		}
	}
	spec, err := dp.specs.Get(ctx, tx, p.Tenant, p.Name, to)
	if err != nil {
		return err
	}
	current, err := writtenVersions(ctx, tx, spec)
	if err != nil {
		return err
	}
	// The jobs of to whose datasets move back: what the replaced version wrote in their place
	// meanwhile is not in the versions they get back.
	moved := map[string]string{}
	for _, j := range spec.Jobs {
		for _, o := range j.Outputs {
			if was, ok := rec.Datasets[o.DatasetUUID]; ok && current[o.DatasetUUID] != "" && was != current[o.DatasetUUID] {
				moved[j.Name] = "its datasets move back"
			}
		}
	}
	if err := dp.switchPointers(ctx, tx, c, p, rec.Datasets); err != nil {
		return err
	}
	if len(moved) == 0 || p.ActiveVersion == "" {
		return nil
	}
	refs, err := tx.PipelineTasksSince(ctx, store.PipelineVersionKey{Tenant: p.Tenant, Pipeline: p.Name, Version: p.ActiveVersion}, rec.At)
	if err != nil {
		return err
	}
	var again []*store.PipelineTaskRef
	for _, ref := range refs {
		if moved[ref.Job] != "" {
			again = append(again, ref)
		}
	}
	dp.queueAgain(c, p.Tenant, p.Name, p.ActiveVersion, to, again)
	return nil
}

// cancelTasks cancels the jobs of the tasks of pipeline name that have not ended, of version
// version ("": of every version) and for which cancel holds, with reason; it returns how many
// jobs it canceled. A job that ended meanwhile is skipped.
func (dp *Plane) cancelTasks(ctx context.Context, tenant, name, version, reason string, cancel func(*store.PipelineTaskRef) bool) (int, error) {
	refs, err := dp.store.PipelineTasksUnfinished(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version})
	if err != nil {
		return 0, err
	}
	n := 0
	for i, ref := range refs {
		if !cancel(ref) || (i > 0 && refs[i-1].JobID == ref.JobID) {
			continue // kept, or its job listed already
		}
		job, err := dp.d.CancelJob(ctx, tenant, ref.JobID, reason)
		switch {
		case errors.Is(err, dispatch.ErrJobNotFound), errors.Is(err, dispatch.ErrJobFinished):
			continue
		case err != nil:
			return n, fmt.Errorf("pipeline %s job %s: %w", name, ref.Job, err)
		}
		if job != nil {
			n++
		}
	}
	return n, nil
}

// ofJobs is a cancelTasks filter: the tasks of the pipeline jobs of jobs.
func ofJobs(jobs map[string]string) func(*store.PipelineTaskRef) bool {
	return func(ref *store.PipelineTaskRef) bool { return jobs[ref.Job] != "" }
}

// every is a cancelTasks filter: every task.
func every(*store.PipelineTaskRef) bool { return true }

// ResumeReplaced resumes the jobs, of pipeline versions active again, that the activation of a
// build canceled when it replaced them (store.CancelVersionReplaced): the build ran their updates
// into its own datasets, and a rollback (or a deploy of the version again) gave the version back
// its datasets, which lack them. A task asked to cancel that had not ended at the rollback is
// resumed once it has. It returns how many jobs it resumed.
func (dp *Plane) ResumeReplaced(ctx context.Context) (int, error) {
	refs, err := dp.store.PipelineTasksReplacedActive(ctx, 500)
	if err != nil {
		return 0, err
	}
	n := 0
	for i, ref := range refs {
		if i > 0 && refs[i-1].JobID == ref.JobID {
			continue
		}
		_, err := dp.d.ResumeJob(ctx, ref.Tenant, ref.JobID)
		switch {
		case errors.Is(err, dispatch.ErrJobNotFinished), errors.Is(err, dispatch.ErrNothingToResume), errors.Is(err, dispatch.ErrJobNotFound):
			continue // another replica's pass resumed it, or its cancel has not ended yet
		case err != nil:
			return n, fmt.Errorf("resume job %s of pipeline %s version %s: %w", ref.JobID, ref.Job, ref.Version, err)
		}
		n++
	}
	return n, nil
}
