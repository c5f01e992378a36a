package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
)

// Rollback makes an earlier version of a pipeline active again (version "": the one deployed
// before the active one). Nothing of the version it replaces gets through, and nothing it had not
// finished is lost:
//
//   - in the transaction that moves the pointer, the replaced version is marked rolled back (what
//     its tasks report from then on is stored, never routed), and the update that started each of
//     its tasks that had not ended (waiting, pending or running) is queued again for routing, to
//     the same job of the restored version: it runs there once (routingKey), unless the restored
//     version's job already ran it;
//   - then every task of a version other than the active one that has not ended is canceled: at
//     once if it has not started, cooperatively if it runs (its heartbeats answer should_cancel
//     and a claim of it Canceled). These cancels run again on every rollback of the pipeline, so
//     a rollback whose cancels were interrupted is finished by posting it again.
//
// Held routings are released under the version active when they are released (route), so what
// backpressure held under the replaced version runs under the restored one. A source's run that
// had not ended is canceled, not repeated: the restored version's sources run on their own
// (a cron job at its next tick, an always_on job as soon as the replaced one's run has ended).
// It returns how many jobs it canceled.
func (dp *Plane) Rollback(ctx context.Context, tenant, name, version string) (*DeployResult, int, error) {
	p, err := dp.store.PipelineGet(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, ErrPipelineNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("pipeline %s: %w", name, err)
	}
	if version == "" {
		versions, err := dp.store.PipelineVersionList(ctx, tenant, name)
		if err != nil {
			return nil, 0, fmt.Errorf("pipeline %s: %w", name, err)
		}
		// The newest version older than the active one that ever ran: not one whose build was
		// abandoned.
		for i, v := range versions {
			if v.Version != p.ActiveVersion {
				continue
			}
			for _, older := range versions[i+1:] {
				if older.State != store.VersionAbandoned && older.State != store.VersionBuilding {
					version = older.Version
					break
				}
			}
			break
		}
		if version == "" {
			return nil, 0, &dispatch.InvalidError{Message: fmt.Sprintf("pipeline %q has no version deployed before %s to roll back to", name, p.ActiveVersion)}
		}
	} else if v, err := dp.store.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version}); errors.Is(err, store.ErrNotFound) {
		return nil, 0, &dispatch.InvalidError{Message: fmt.Sprintf("pipeline %q has no version %q", name, version)}
	} else if err != nil {
		return nil, 0, fmt.Errorf("pipeline %s version %s: %w", name, version, err)
	} else if v.State == store.VersionBuilding || v.State == store.VersionAbandoned {
		return nil, 0, &dispatch.ConflictError{Code: "pipeline_version_never_active", Message: fmt.Sprintf(
			"pipeline %q version %s was never active (its build is %s): activate it when its build is ready instead", name, version,
			map[string]string{store.VersionBuilding: "under way", store.VersionAbandoned: "abandoned"}[v.State])}
	}
	res := &DeployResult{Version: version}
	err = dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		p, err := tx.PipelineGet(ctx, tenant, name)
		if err != nil {
			return err
		}
		old := p.ActiveVersion
		res.Activated = old != version
		res.Pipeline = p
		if !res.Activated {
			return nil
		}
		// A build under way was built on the version replaced: it is abandoned. The datasets
		// the pipeline writes get back the versions they had under the restored version.
		res.Abandoned = p.BuildingVersion
		if err := dp.abandonBuild(ctx, tx, c, p); err != nil {
			return err
		}
		if err := dp.restore(ctx, tx, c, p, version); err != nil {
			return err
		}
		p.ActiveVersion, p.UpdatedAt = version, c.Now()
		if err := tx.PipelinePut(ctx, p); err != nil {
			return err
		}
		oldKey := store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: old}
		if err := tx.PipelineVersionSetState(ctx, oldKey, store.VersionRolledBack); err != nil {
			return err
		}
		if err := tx.PipelineVersionSetState(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: version}, store.VersionDeployed); err != nil {
			return err
		}
		return dp.routeAgain(ctx, tx, c, oldKey, version)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("roll pipeline %s back to version %s: %w", name, version, err)
	}
	n, err := dp.cancelTasks(ctx, tenant, name, "", "pipeline_rolled_back", func(ref *store.PipelineTaskRef) bool { return ref.Version != version })
	if err != nil {
		return res, n, fmt.Errorf("pipeline %s is rolled back to version %s, but canceling the tasks of its other versions failed "+
			"(post the rollback again to finish it): %w", name, version, err)
	}
	// What an activation canceled of the restored version runs again now (and, for a task whose
	// cancel has not ended, once it has: Builds runs this on every pass).
	if _, err := dp.ResumeReplaced(ctx); err != nil {
		dp.log.WarnContext(ctx, "resuming what an activation canceled failed; the next builds pass retries", "pipeline", name, "err", err)
	}
	return res, n, nil
}

// routeAgain queues again, in tx, the update that started each task of pipeline version k that
// has not ended, to be routed to the same job of pipeline version to (see Rollback).
func (dp *Plane) routeAgain(ctx context.Context, tx store.Tx, c *dispatch.Work, k store.PipelineVersionKey, to string) error {
	refs, err := tx.PipelineTasksUnfinished(ctx, k)
	if err != nil {
		return err
	}
	dp.queueAgain(c, k.Tenant, k.Pipeline, k.Version, to, refs)
	return nil
}

// queueAgain queues again, through c's outbox, the update that started each of refs, tasks of
// pipeline version from, to be routed to the same job of pipeline version to.
func (dp *Plane) queueAgain(c *dispatch.Work, tenant, pipeline, from, to string, refs []*store.PipelineTaskRef) {
	k := store.PipelineVersionKey{Tenant: tenant, Pipeline: pipeline, Version: from}
	queued := false
	for _, ref := range refs {
		r := dispatch.DecodeRoute(&store.Task{Route: ref.Route})
		if r == nil {
			continue
		}
		for _, in := range r.Inputs {
			if in.Cursor == nil && in.PartitionKey == "" {
				continue // not the input whose event started the task
			}
			e := intake.Routed{Tenant: k.Tenant, Pipeline: k.Pipeline, Job: ref.Job, Version: to, Update: updateOf(ref.RouteKey, k.Pipeline, k.Version, ref.Job),
				CursorEnd: in.CursorEnd, Event: report.Event{DatasetUUID: in.DatasetUUID, DatasetVersion: in.DatasetVersion,
					Cursor: in.Cursor, PartitionKey: in.PartitionKey, Start: in.Start, End: in.End}}
			intake.Queue(c, &e)
			queued = true
		}
	}
	if queued {
		c.Signal(&dp.routing)
	}
}
