package dataplane

import (
	"context"
	"fmt"
	"slices"

	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
)

// DatasetView is a dataset with its registered versions and latest events.
type DatasetView struct {
	Dataset  *store.Dataset
	Versions []*store.DatasetVersion
	Events   []*store.DatasetEvent
	// Invalidations are the resets of the dataset by its producer's bootstrap.reset_outputs, newest
	// first: each says its rows up to then are gone and its consumers start over at a fresh version.
	Invalidations []*store.OutputReset
	// Partitions are the committed partitions of the current version (replace outputs), each
	// with its current commit, by start; at most MaxPartitionsListed, the lowest starts first.
	// PartitionsTruncated says that the version has more.
	Partitions          []*store.PartitionCommit
	PartitionsTruncated bool
	Allowed             []string // the fields a where may use
}

// MaxPartitionsListed caps the partitions a dataset view lists.
const MaxPartitionsListed = 1000

// GetDataset returns a tenant's dataset, named or by uuid, with its versions and its latest
// events (up to limit).
func (dp *Plane) GetDataset(ctx context.Context, tenant, ref string, limit int) (*DatasetView, error) {
	x, err := reads.Find(ctx, dp.store, tenant, ref)
	if err != nil {
		return nil, err
	}
	v := &DatasetView{Dataset: x, Allowed: []string{}}
	if v.Versions, err = dp.store.DatasetVersionList(ctx, x.UUID); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", x.UUID, err)
	}
	if v.Events, err = dp.store.DatasetEventListRecent(ctx, store.DatasetEventListRecentParams{
		Tenant: tenant, DatasetUUID: x.UUID, Limit: cmpOr(limit, 20),
	}); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", x.UUID, err)
	}
	if v.Invalidations, err = dp.store.OutputResetList(ctx, store.OutputResetListParams{
		Tenant: tenant, DatasetUUID: x.UUID, Limit: cmpOr(limit, 20),
	}); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", x.UUID, err)
	}
	if v.Partitions, err = dp.store.PartitionCommitListCurrent(ctx, store.PartitionCommitListParams{
		Tenant: tenant, DatasetUUID: x.UUID, DatasetVersion: x.CurrentVersion, Limit: MaxPartitionsListed + 1,
	}); err != nil {
		return nil, err
	}
	if len(v.Partitions) > MaxPartitionsListed {
		v.Partitions, v.PartitionsTruncated = v.Partitions[:MaxPartitionsListed], true
	}
	allow, err := reads.Allowlist(x)
	if err != nil {
		return nil, err
	}
	for f := range allow.Fields {
		v.Allowed = append(v.Allowed, f)
	}
	slices.Sort(v.Allowed)
	return v, nil
}

// ListDatasets lists a tenant's datasets, named ones first.
func (dp *Plane) ListDatasets(ctx context.Context, tenant string) ([]*store.Dataset, error) {
	return dp.store.DatasetList(ctx, tenant)
}

// SetCurrentVersion makes a registered version the dataset's current one, atomically: events of
// the version it replaces are no longer routed, events of the new one are.
func (dp *Plane) SetCurrentVersion(ctx context.Context, tenant, ref, version string) (*store.Dataset, error) {
	if version == "" {
		return nil, &dispatch.InvalidError{Message: "dataset_version is required"}
	}
	var out *store.Dataset
	err := dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		x, err := reads.Find(ctx, tx, tenant, ref)
		if err != nil {
			return err
		}
		versions, err := tx.DatasetVersionList(ctx, x.UUID)
		if err != nil {
			return fmt.Errorf("dataset %s: %w", x.UUID, err)
		}
		if !slices.ContainsFunc(versions, func(v *store.DatasetVersion) bool { return v.Version == version }) {
			return &dispatch.InvalidError{Message: fmt.Sprintf("dataset %s has no registered version %q (versions are registered by datasets_published on task completion)", ref, version)}
		}
		x.CurrentVersion, x.UpdatedAt = version, c.Now()
		out = x
		if err := tx.DatasetUpdate(ctx, x); err != nil {
			return fmt.Errorf("dataset %s: make version %s current: %w", x.UUID, version, err)
		}
		return nil
	})
	return out, err
}
