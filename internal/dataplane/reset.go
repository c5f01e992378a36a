package dataplane

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// resetOutputs resets the outputs of doc's source jobs with bootstrap.reset_outputs, in the
// transaction of the deploy that activates doc's version; cleared holds the rows the deploy's
// data database transaction removed, and retiring the version it retired, by dataset uuid. A
// buffered dataset whose current version is no longer the one retired (another request changed
// it since the deploy read it) makes the deploy start over (errDeployRaced). For each output
// dataset of such a job:
//
//   - a fresh dataset version is registered and made current, so that consumers start over:
//     routing keys are per dataset version, events of the versions before it (also those still
//     waiting to be routed) are no longer routed, and tasks started from now on are handed the
//     fresh version;
//   - for a buffered dataset, the tenant's batches still queued for the sink are dead-lettered
//     rather than loaded into the emptied table; they are of a version no longer current, so they
//     can no longer be retried, and the data database refuses a batch of the retired version that
//     a sink holds already;
//   - an OutputReset records it all, with who deployed and when: the pipeline's history, and the
//     invalidation the dataset's consumers read.
func (dp *Plane) resetOutputs(ctx context.Context, tx store.Tx, c *dispatch.Work, who Deployer, doc *pipeline.Document,
	spec *specs.Pipeline, cleared map[string]int64, retiring map[string]string) error {
	jobs := doc.ResetJobs()
	if len(jobs) == 0 {
		return nil
	}
	type target struct {
		job string
		out specs.Output
	}
	var targets []target
	var uuids []string
	seen := map[string]bool{}
	for _, js := range spec.Jobs {
		if !jobs[js.Name] {
			continue
		}
		for _, o := range js.Outputs {
			if !seen[o.DatasetUUID] {
				seen[o.DatasetUUID] = true
				targets = append(targets, target{js.Name, o})
				uuids = append(uuids, o.DatasetUUID)
			}
		}
	}
	ds, err := tx.DatasetGetMany(ctx, uuids)
	if err != nil {
		return fmt.Errorf("pipeline %s version %s: reset outputs: %w", doc.Name, doc.Version, err)
	}
	byUUID := make(map[string]*store.Dataset, len(ds))
	for _, x := range ds {
		byUUID[x.UUID] = x
	}
	versions := make([]*store.DatasetVersion, 0, len(targets))
	records := make([]*store.OutputReset, 0, len(targets))
	for _, tg := range targets {
		x := byUUID[tg.out.DatasetUUID]
		if x == nil || x.Tenant != who.Tenant {
			return fmt.Errorf("reset outputs of job %q: dataset %s vanished during the deploy", tg.job, tg.out.DatasetUUID)
		}
		if v, ok := retiring[x.UUID]; ok && v != x.CurrentVersion {
			return errDeployRaced // the data database retired another version than the one this replaces
		}
		r := &store.OutputReset{Tenant: who.Tenant, Pipeline: doc.Name, Version: doc.Version, Job: tg.job, APIKey: who.APIKey,
			DatasetUUID: x.UUID, DatasetName: x.Name, OutputIndex: tg.out.OutputIndex, PreviousVersion: x.CurrentVersion,
			DatasetVersion: uuid.NewString(), RowsRemoved: cleared[x.UUID], At: c.Now()}
		if x.WriteMode == pipeline.WriteBuffered {
			n, err := tx.BufferPublishDiscardQueued(ctx, store.BufferPublishDiscardParams{Tenant: who.Tenant, DatasetUUID: x.UUID,
				Reason: fmt.Sprintf("discarded, not loaded: job %q of pipeline %q reset its outputs (bootstrap.reset_outputs) when version %s was deployed",
					tg.job, doc.Name, doc.Version), Now: c.Now()})
			if err != nil {
				return fmt.Errorf("reset outputs of job %q: %w", tg.job, err)
			}
			r.BatchesDiscarded = int64(n)
		}
		versions = append(versions, &store.DatasetVersion{DatasetUUID: x.UUID, Version: r.DatasetVersion, CreatedAt: c.Now()})
		x.CurrentVersion, x.UpdatedAt = r.DatasetVersion, c.Now()
		if err := tx.DatasetUpdate(ctx, x); err != nil {
			return fmt.Errorf("reset outputs of job %q: dataset %s: %w", tg.job, x.UUID, err)
		}
		records = append(records, r)
	}
	if err := tx.DatasetVersionInsertMany(ctx, versions); err != nil {
		return fmt.Errorf("pipeline %s version %s: reset outputs: %w", doc.Name, doc.Version, err)
	}
	return tx.OutputResetInsertMany(ctx, records)
}

// maxResets bounds the resets a view lists.
const maxResets = 100

// PipelineResets lists the output resets of a tenant's pipeline, newest first (at most 100).
func (dp *Plane) PipelineResets(ctx context.Context, tenant, name string) ([]*store.OutputReset, error) {
	return dp.store.OutputResetList(ctx, store.OutputResetListParams{Tenant: tenant, Pipeline: name, Limit: maxResets})
}
