package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// A deploy whose change affects what a job materializes does not take over at once: it rebuilds,
// beside the active version, the jobs the change affects and everything downstream of them, into
// new versions of their datasets, while the active version keeps serving and routing its own.
// When the build has caught up it is ready, and one transaction (Activate) moves every rebuilt
// dataset's current version and the pipeline's active version together; a rollback moves them all
// back. This file holds the plan (planBuild), the build's progress (Builds), and the cutover.

// The activate modes of a deploy (DeployOptions.Activate).
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

// buildPlan is what a version built beside the active one rebuilds. It is part of the version's
// spec, decided when it is deployed.
type buildPlan struct {
	// Base is the version that was active when it was deployed.
	Base string `json:"base"`
	// Jobs are the jobs it rebuilds, each with why.
	Jobs map[string]string `json:"jobs"`
	// Switched are the jobs its change affects that it does not rebuild, each with why: jobs that
	// write a buffered dataset, which is live and keeps no versions. They change at activation.
	Switched map[string]string `json:"switched,omitempty"`
	// Pointers are the dataset versions it rebuilds, by dataset uuid: new versions of the outputs
	// of the rebuilt jobs, current from its activation on.
	Pointers map[string]string `json:"pointers"`
	// Activate is ActivateManual or ActivateWhenReady.
	Activate string `json:"activate"`
}

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

// materializes reports why job b (deployed before) and job a differ in what they write: "" when
// they do not. A change of runtime, operator, config, inputs (their datasets or filters),
// execution strategy, update strategy, unique key or outputs does; retries, timeouts, priority,
// queue, scaling, backpressure and schedule do not.
func materializes(b, a *jobSpec) string {
	switch {
	case b.Runtime != a.Runtime:
		return fmt.Sprintf("runtime changed from %s to %s", b.Runtime, a.Runtime)
	case b.Operator != a.Operator:
		return fmt.Sprintf("operator changed from %s to %s", b.Operator, a.Operator)
	case !sameJSON(b.Config, a.Config):
		return "config changed"
	case len(b.Inputs) != len(a.Inputs):
		return "inputs changed"
	case b.Strategy != a.Strategy:
		return "execution_strategy changed"
	case b.UpdateStrategy != a.UpdateStrategy || !slices.Equal(b.UniqueKey, a.UniqueKey):
		return "update_strategy or unique_key changed"
	case len(b.Outputs) != len(a.Outputs):
		return "outputs changed"
	}
	for i := range a.Inputs {
		if b.Inputs[i].DatasetUUID != a.Inputs[i].DatasetUUID || !sameJSON(b.Inputs[i].Where, a.Inputs[i].Where) {
			return fmt.Sprintf("input %d changed", i)
		}
	}
	return ""
}

// planBuild decides what next rebuilds beside base, the active version: the jobs whose change
// materializes differently, and every job downstream of a rebuilt one through a dataset it
// rebuilds. A job that writes a buffered dataset is not rebuilt (the dataset is live: it keeps no
// versions to build beside) but switched at activation, and what it writes is not rebuilt either.
// A job new in next is rebuilt only when it reads a rebuilt dataset. Nil when nothing is rebuilt.
func planBuild(base, next *pipelineSpec, buffered map[string]bool) *buildPlan {
	plan := &buildPlan{Base: base.Version, Jobs: map[string]string{}, Switched: map[string]string{}, Pointers: map[string]string{}}
	affect := func(j *jobSpec, why string) bool {
		if plan.Jobs[j.Name] != "" || plan.Switched[j.Name] != "" {
			return false
		}
		for _, o := range j.Outputs {
			if buffered[o.DatasetUUID] {
				plan.Switched[j.Name] = why + "; it writes a buffered dataset, which keeps no versions: it changes at activation"
				return false
			}
		}
		plan.Jobs[j.Name] = why
		for _, o := range j.Outputs {
			plan.Pointers[o.DatasetUUID] = uuid.NewString()
		}
		return true
	}
	for _, j := range next.Jobs {
		if b := base.job(j.Name); b != nil {
			if why := materializes(b, j); why != "" {
				affect(j, why)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, j := range next.Jobs {
			for _, in := range j.Inputs {
				if _, ok := plan.Pointers[in.DatasetUUID]; ok {
					if affect(j, fmt.Sprintf("reads %s, which is rebuilt", cmp.Or(in.DatasetName, in.DatasetUUID))) {
						changed = true
					}
					break
				}
			}
		}
	}
	if len(plan.Jobs) == 0 {
		return nil
	}
	return plan
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
func (dp *Plane) buildView(ctx context.Context, st store.Reader, v *store.PipelineVersion, spec *pipelineSpec) (*BuildView, error) {
	if spec.Build == nil {
		return nil, nil
	}
	var prog buildProgress
	if len(v.Build) > 0 {
		if err := json.Unmarshal(v.Build, &prog); err != nil {
			return nil, fmt.Errorf("pipeline %s version %s: decode its build: %w", v.Pipeline, v.Version, err)
		}
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
		return nil, err
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

// ErrNotBuilding: the pipeline version named is not the one being built.
var ErrNotBuilding = errors.New("pipeline version is not being built")

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
		plan *buildPlan
	)
	err := dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		p, v, spec, err := dp.building(ctx, tx, tenant, name, version)
		if err != nil {
			return err
		}
		if !force {
			var prog buildProgress
			if len(v.Build) > 0 {
				_ = json.Unmarshal(v.Build, &prog)
			}
			if prog.ReadyAt == nil {
				return &dispatch.ConflictError{Code: "pipeline_version_not_ready", Message: fmt.Sprintf(
					"pipeline %q version %s is still building: activate it when its build is ready, or with force", name, version)}
			}
		}
		base, plan = p.ActiveVersion, spec.Build
		if err := dp.switchPointers(ctx, tx, c, p, spec.Build.Pointers); err != nil {
			return err
		}
		p.ActiveVersion, p.BuildingVersion, p.UpdatedAt = version, "", c.Now()
		if err := tx.PipelinePut(ctx, p); err != nil {
			return err
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
	n, err := dp.cancelVersion(ctx, tenant, name, base, plan.Jobs, store.CancelVersionReplaced)
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
	var plan *buildPlan
	err := dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		p, _, spec, err := dp.building(ctx, tx, tenant, name, version)
		if err != nil {
			return err
		}
		plan = spec.Build
		return dp.abandonBuild(ctx, tx, c, p)
	})
	if err != nil {
		return 0, err
	}
	return dp.cancelVersion(ctx, tenant, name, version, plan.Jobs, "pipeline_build_abandoned")
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
	return tx.PipelinePut(ctx, p)
}

// building reads, in tx, pipeline name and its building version, which must be version.
func (dp *Plane) building(ctx context.Context, tx store.Tx, tenant, name, version string) (*store.Pipeline, *store.PipelineVersion, *pipelineSpec, error) {
	p, err := tx.PipelineGet(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, ErrPipelineNotFound
	}
	if err != nil {
		return nil, nil, nil, err
	}
	k := store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version}
	v, err := tx.PipelineVersionGet(ctx, k)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, ErrPipelineVersionNotFound
	}
	if err != nil {
		return nil, nil, nil, err
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
	spec, err := decodeSpec(v)
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
		spec, err := dp.specs.get(ctx, tx, p.Tenant, p.Name, p.ActiveVersion)
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
		return err
	}
	for _, x := range ds {
		if v := pins[x.UUID]; x.Tenant == p.Tenant && x.WriteMode != pipeline.WriteBuffered && x.CurrentVersion != v {
			x.CurrentVersion, x.UpdatedAt = v, c.Now()
			if err := tx.DatasetUpdate(ctx, x); err != nil {
				return err
			}
		}
	}
	return nil
}

// writtenVersions is the current version of each dataset spec's jobs write, by uuid; buffered
// datasets are left out.
func writtenVersions(ctx context.Context, tx store.Tx, spec *pipelineSpec) (map[string]string, error) {
	var ids []string
	for _, j := range spec.Jobs {
		for _, o := range j.Outputs {
			ids = append(ids, o.DatasetUUID)
		}
	}
	ds, err := tx.DatasetGetMany(ctx, uniq(ids))
	if err != nil {
		return nil, err
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
		return err
	}
	var rec replacedRecord
	if len(v.Pointers) > 0 {
		if err := json.Unmarshal(v.Pointers, &rec); err != nil {
			return fmt.Errorf("pipeline %s version %s: decode its dataset pointers: %w", p.Name, to, err)
		}
	}
	spec, err := dp.specs.get(ctx, tx, p.Tenant, p.Name, to)
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

// cancelVersion cancels the tasks of pipeline version version's jobs (all of them when jobs is
// nil) that have not ended, and returns how many jobs it canceled.
func (dp *Plane) cancelVersion(ctx context.Context, tenant, name, version string, jobs map[string]string, reason string) (int, error) {
	refs, err := dp.store.PipelineTasksUnfinished(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version})
	if err != nil {
		return 0, err
	}
	n := 0
	for i, ref := range refs {
		if (jobs != nil && jobs[ref.Job] == "") || (i > 0 && refs[i-1].JobID == ref.JobID) {
			continue
		}
		job, err := dp.d.CancelJob(ctx, tenant, ref.JobID, reason)
		switch {
		case errors.Is(err, dispatch.ErrJobNotFound), errors.Is(err, dispatch.ErrJobFinished):
			continue
		case err != nil:
			return n, err
		}
		if job != nil {
			n++
		}
	}
	return n, nil
}

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

// BuildConfig configures Builds. Zero fields take their defaults.
type BuildConfig struct {
	// Batch is how many events a pass routes again per backfilled input; default 500.
	Batch int
	// MaxBacklog pauses a build's backfill while its rebuilt jobs have this many tasks that have
	// not ended; default 5000.
	MaxBacklog int
}

// Builds moves the builds of pipeline versions forward, on every replica, a pass each second:
// it starts the build run of each rebuilt source job (once), routes again to each rebuilt job
// the events of the datasets it reads but the build does not rebuild, up to the newest event when
// the backfill began (paced by the build's backlog; later events are routed to it as they come),
// marks the build ready when that is done and every task of the build has ended with no event
// of it left to route, and activates a ready build deployed with activate=when_ready.
type Builds struct {
	dp     *Plane
	router *Router
	cfg    BuildConfig
	service.Loop
}

// NewBuilds returns stopped Builds over dp.
func (dp *Plane) NewBuilds(cfg BuildConfig) *Builds {
	cfg.Batch, cfg.MaxBacklog = cmpOr(cfg.Batch, 500), cmpOr(cfg.MaxBacklog, 5000)
	return &Builds{dp: dp, router: dp.NewRouter(RouteConfig{Batch: cfg.Batch}), cfg: cfg}
}

// Start runs the builds until Stop or until ctx ends.
func (b *Builds) Start(ctx context.Context) error {
	return b.Run(ctx, b.run)
}

func (b *Builds) run(ctx context.Context) {
	for {
		if _, err := b.RunOnce(ctx); err != nil && ctx.Err() == nil {
			level := slog.LevelError
			if b.dp.d.Unavailable(err) {
				level = slog.LevelWarn
			}
			b.dp.log.Log(ctx, level, "pipeline builds pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-b.dp.clock.After(time.Second):
		}
	}
}

// RunOnce moves every build forward once, and resumes what activations canceled of versions
// active again (ResumeReplaced); it returns how many builds it activated.
func (b *Builds) RunOnce(ctx context.Context) (int, error) {
	ps, err := b.dp.store.PipelineListActive(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	if _, err := b.dp.ResumeReplaced(ctx); err != nil {
		errs = append(errs, err)
	}
	activated := 0
	for _, p := range ps {
		if p.BuildingVersion == "" {
			continue
		}
		ok, err := b.advance(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline %s version %s: %w", p.Name, p.BuildingVersion, err))
		}
		if ok {
			activated++
		}
	}
	return activated, errors.Join(errs...)
}

// advance moves the build of p forward once and reports whether it activated it.
func (b *Builds) advance(ctx context.Context, p *store.Pipeline) (bool, error) {
	k := store.PipelineVersionKey{Tenant: p.Tenant, Pipeline: p.Name, Version: p.BuildingVersion}
	v, err := b.dp.store.PipelineVersionGet(ctx, k)
	if err != nil {
		return false, err
	}
	spec, err := b.dp.specs.get(ctx, b.dp.store, k.Tenant, k.Pipeline, k.Version)
	if err != nil || spec.Build == nil {
		return false, err
	}
	var prog buildProgress
	if len(v.Build) > 0 {
		if err := json.Unmarshal(v.Build, &prog); err != nil {
			return false, fmt.Errorf("decode its build: %w", err)
		}
	}
	if prog.ReadyAt != nil {
		if spec.Build.Activate != ActivateWhenReady {
			return false, nil
		}
		_, _, err := b.dp.Activate(ctx, k.Tenant, k.Pipeline, k.Version, false)
		var nb *dispatch.ConflictError
		if errors.As(err, &nb) { // another replica activated it, or it was abandoned
			return false, nil
		}
		return err == nil, err
	}
	// The rebuilt source jobs run once under the build.
	for _, name := range sortedKeys(spec.Build.Jobs) {
		js := spec.job(name)
		if js == nil || len(js.Inputs) > 0 || slices.Contains(prog.Sources, name) {
			continue
		}
		trigger, _ := json.Marshal(map[string]any{"kind": "build", "version": k.Version})
		if _, err := b.dp.startSource(ctx, spec, js, "build:"+k.Version, trigger, spec.Build.Pointers); err != nil {
			return false, err
		}
		prog.Sources = append(prog.Sources, name)
	}
	unfinished, err := b.dp.store.PipelineTasksUnfinished(ctx, k)
	if err != nil {
		return false, err
	}
	if !prog.Scanned && len(unfinished) < b.cfg.MaxBacklog {
		if err := b.backfill(ctx, spec, &prog); err != nil {
			return false, err
		}
	} else if prog.Scanned && len(unfinished) == 0 {
		unsent, err := b.dp.store.OutboxUnsentByKey(ctx, store.TopicDatasetEvent, sortedKeys(spec.Build.Pointers))
		if err != nil {
			return false, err
		}
		// A task of the build that failed for good left a hole in what it rebuilt: the build
		// is not ready (activate it with force, or deploy a fix).
		counts, err := b.dp.store.PipelineVersionTaskCounts(ctx, k)
		if err != nil {
			return false, err
		}
		failed := slices.ContainsFunc(counts, func(c *store.PipelineTaskCount) bool { return c.Status == lifecycle.Failed && c.Count > 0 })
		if unsent == 0 && !failed {
			now := b.dp.clock.Now()
			prog.ReadyAt = &now
		}
	}
	return false, b.record(ctx, k, &prog)
}

// backfill routes again, to the rebuilt jobs that read them, up to a batch of the events of each
// dataset they read and the build does not rebuild: of its current version, up to prog.Through.
func (b *Builds) backfill(ctx context.Context, spec *pipelineSpec, prog *buildProgress) error {
	if prog.Through == 0 {
		through, err := b.dp.store.DatasetEventMaxID(ctx)
		if err != nil {
			return err
		}
		prog.Through = max(through, 1) // 0 means not begun
	}
	if prog.After == nil {
		prog.After = map[string]int64{}
	}
	scanned := true
	for _, name := range sortedKeys(spec.Build.Jobs) {
		js := spec.job(name)
		if js == nil {
			continue
		}
		for i, in := range js.Inputs {
			if _, rebuilt := spec.Build.Pointers[in.DatasetUUID]; rebuilt {
				continue // its events come from the build's own tasks
			}
			key := fmt.Sprintf("%s/%d", name, i)
			done, err := b.backfillInput(ctx, spec, js, in.DatasetUUID, key, prog)
			if err != nil {
				return err
			}
			scanned = scanned && done
		}
	}
	prog.Scanned = scanned
	return nil
}

// backfillInput routes again one batch of the events of dataset uuid for input key of rebuilt
// job js, and reports whether none is left.
func (b *Builds) backfillInput(ctx context.Context, spec *pipelineSpec, js *jobSpec, uuid, key string, prog *buildProgress) (bool, error) {
	if prog.After[key] >= prog.Through {
		return true, nil
	}
	ds, err := b.dp.store.DatasetGetMany(ctx, []string{uuid})
	if err != nil || len(ds) == 0 {
		return true, err // a dataset gone has nothing to route
	}
	evs, err := b.dp.store.DatasetEventListAfter(ctx, store.DatasetEventListParams{DatasetUUID: uuid,
		DatasetVersion: ds[0].CurrentVersion, AfterID: prog.After[key], ThroughID: prog.Through, Limit: b.cfg.Batch})
	if err != nil {
		return false, err
	}
	if len(evs) == 0 {
		prog.After[key] = prog.Through
		return true, nil
	}
	routed := make([]*routedEvent, len(evs))
	for i, e := range evs {
		routed[i] = &routedEvent{Tenant: spec.Tenant, EventID: e.ID, TaskID: e.TaskID, Pipeline: spec.Name, Job: js.Name,
			Version: spec.Version, DatasetEvent: dispatch.DatasetEvent{DatasetUUID: e.DatasetUUID, DatasetVersion: e.DatasetVersion,
				Cursor: e.Cursor, PartitionKey: e.PartitionKey, Start: e.Start, End: e.End}}
	}
	err = b.dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		var tally heldTally
		_, err := b.router.route(ctx, tx, c, routed, nil, &tally)
		return err
	})
	if err != nil {
		return false, err
	}
	prog.After[key] = evs[len(evs)-1].ID
	return len(evs) < b.cfg.Batch && prog.After[key] <= prog.Through, nil
}

// record stores a build's progress, unless the version stopped being built meanwhile.
func (b *Builds) record(ctx context.Context, k store.PipelineVersionKey, prog *buildProgress) error {
	raw, _ := json.Marshal(prog)
	return b.dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		p, err := tx.PipelineGet(ctx, k.Tenant, k.Pipeline)
		if err != nil || p.BuildingVersion != k.Version {
			return err
		}
		return tx.PipelineVersionSetBuild(ctx, k, raw)
	})
}

// startBuild makes version spec, just stored, p's building version, in tx: the build it replaces,
// if any, is abandoned, and the versions the build makes of its datasets are registered.
func (dp *Plane) startBuild(ctx context.Context, tx store.Tx, c *dispatch.Work, p *store.Pipeline, spec *pipelineSpec, res *DeployResult) error {
	res.Building, res.Abandoned = true, p.BuildingVersion
	if err := dp.abandonBuild(ctx, tx, c, p); err != nil {
		return err
	}
	p.BuildingVersion, p.UpdatedAt = spec.Version, c.Now()
	if err := tx.PipelinePut(ctx, p); err != nil {
		return err
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
	return tx.DatasetVersionInsertMany(ctx, versions)
}

// bufferedOutputs is the buffered datasets the jobs of doc write, by uuid.
func bufferedOutputs(doc *pipeline.Document, spec *pipelineSpec) map[string]bool {
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
