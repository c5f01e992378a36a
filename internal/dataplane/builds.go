package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

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
	*service.Periodic
}

// NewBuilds returns stopped Builds over dp.
func (dp *Plane) NewBuilds(cfg BuildConfig) *Builds {
	cfg.Batch, cfg.MaxBacklog = cmpOr(cfg.Batch, 500), cmpOr(cfg.MaxBacklog, 5000)
	b := &Builds{dp: dp, router: dp.NewRouter(RouteConfig{Batch: cfg.Batch}), cfg: cfg}
	b.Periodic = dp.every("pipeline builds", time.Second, func(ctx context.Context) error {
		_, err := b.RunOnce(ctx)
		return err
	})
	return b
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
		return false, fmt.Errorf("read the version: %w", err)
	}
	spec, err := b.dp.specs.Get(ctx, b.dp.store, k.Tenant, k.Pipeline, k.Version)
	if err != nil || spec.Build == nil {
		return false, err
	}
	prog, err := progressOf(v)
	if err != nil {
		return false, err
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
		js := spec.Job(name)
		if js == nil || len(js.Inputs) > 0 || slices.Contains(prog.Sources, name) {
			continue
		}
		trigger, _ := json.Marshal(map[string]any{"kind": "build", "version": k.Version})
		if _, err := b.dp.startSource(ctx, spec, js, "build:"+k.Version, trigger, spec.Build.Pointers); err != nil {
			return false, fmt.Errorf("job %s: %w", name, err)
		}
		prog.Sources = append(prog.Sources, name)
	}
	// The build's tasks by status, in one grouped read: those not ended pace the backfill, and
	// one that failed for good left a hole in what it rebuilt, so the build is not ready
	// (activate it with force, or deploy a fix).
	counts, err := b.dp.store.PipelineVersionTaskCounts(ctx, k)
	if err != nil {
		return false, err
	}
	unfinished, failed := 0, false
	for _, c := range counts {
		if !c.Status.Terminal() {
			unfinished += c.Count
		}
		failed = failed || (c.Status == lifecycle.Failed && c.Count > 0)
	}
	switch {
	case !prog.Scanned && unfinished < b.cfg.MaxBacklog:
		if err := b.backfill(ctx, spec, &prog); err != nil {
			return false, err
		}
	case prog.Scanned && unfinished == 0 && !failed:
		unsent, err := b.dp.store.OutboxUnsentByKey(ctx, store.TopicDatasetEvent, sortedKeys(spec.Build.Pointers))
		if err != nil {
			return false, fmt.Errorf("the unrouted events of the datasets it rebuilds: %w", err)
		}
		if unsent == 0 {
			now := b.dp.clock.Now()
			prog.ReadyAt = &now
		}
	}
	return false, b.record(ctx, k, &prog)
}

// backfill routes again, to the rebuilt jobs that read them, up to a batch of the events of each
// dataset they read and the build does not rebuild: of its current version, up to prog.Through.
func (b *Builds) backfill(ctx context.Context, spec *specs.Pipeline, prog *buildProgress) error {
	if prog.Through == 0 {
		through, err := b.dp.store.DatasetEventMaxID(ctx)
		if err != nil {
			return fmt.Errorf("begin the backfill: %w", err)
		}
		prog.Through = max(through, 1) // 0 means not begun
	}
	if prog.After == nil {
		prog.After = map[string]int64{}
	}
	scanned := true
	for _, name := range sortedKeys(spec.Build.Jobs) {
		js := spec.Job(name)
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
				return fmt.Errorf("backfill input %s: %w", key, err)
			}
			scanned = scanned && done
		}
	}
	prog.Scanned = scanned
	return nil
}

// backfillInput routes again one batch of the events of dataset uuid for input key of rebuilt
// job js, and reports whether none is left.
func (b *Builds) backfillInput(ctx context.Context, spec *specs.Pipeline, js *specs.Job, uuid, key string, prog *buildProgress) (bool, error) {
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
	routed := make([]*intake.Routed, len(evs))
	for i, e := range evs {
		routed[i] = &intake.Routed{Tenant: spec.Tenant, EventID: e.ID, TaskID: e.TaskID, Pipeline: spec.Name, Job: js.Name,
			Version: spec.Version, Event: report.Event{DatasetUUID: e.DatasetUUID, DatasetVersion: e.DatasetVersion,
				Cursor: e.Cursor, PartitionKey: e.PartitionKey, Start: e.Start, End: e.End}}
	}
	err = b.dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		var tally heldTally
		_, err := b.router.route(ctx, tx, c, routed, nil, &tally)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("route %d events of dataset %s again: %w", len(routed), uuid, err)
	}
	prog.After[key] = evs[len(evs)-1].ID
	return len(evs) < b.cfg.Batch && prog.After[key] <= prog.Through, nil
}

// record stores a build's progress, unless the version stopped being built meanwhile.
func (b *Builds) record(ctx context.Context, k store.PipelineVersionKey, prog *buildProgress) error {
	raw, _ := json.Marshal(prog)
	return b.dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		p, err := tx.PipelineGet(ctx, k.Tenant, k.Pipeline)
		if err != nil {
			return fmt.Errorf("record the build's progress: %w", err)
		}
		if p.BuildingVersion != k.Version {
			return nil
		}
		return tx.PipelineVersionSetBuild(ctx, k, raw)
	})
}
