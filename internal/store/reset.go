package store

import (
	"context"
	"time"
)

// OutputReset records what a source job's bootstrap.reset_outputs did to one of its output
// datasets when a deploy activated a version of its pipeline: it is the pipeline's history of
// resets and, read by dataset, the invalidation its consumers see.
type OutputReset struct {
	ID       int64
	Tenant   string
	Pipeline string
	Version  string // the pipeline version whose activation reset the dataset
	Job      string // the source job
	// APIKey is the id of the API key that deployed the version; "" when the deploy named none.
	APIKey      string
	DatasetUUID string
	DatasetName string // "" for an unpublished output
	OutputIndex int
	// PreviousVersion was the dataset's current version; DatasetVersion is the fresh one the reset
	// registered and made current.
	PreviousVersion string
	DatasetVersion  string
	// RowsRemoved counts the tenant's rows removed from the dataset's table in the data database
	// (0 for a dataset that is not buffered: Baton keeps none of its rows).
	RowsRemoved int64
	// BatchesDiscarded counts the tenant's buffered batches of the dataset that were still queued
	// for the sink: they were dead-lettered instead of loaded.
	BatchesDiscarded int64
	At               time.Time
}

// OutputResetListParams selects a tenant's output resets, newest first: those of one pipeline,
// of one dataset, or both.
type OutputResetListParams struct {
	Tenant      string
	Pipeline    string // when set, only this pipeline's
	DatasetUUID string // when set, only this dataset's
	Limit       int
}

// OutputResetReader reads the output resets.
type OutputResetReader interface {
	OutputResetList(ctx context.Context, p OutputResetListParams) ([]*OutputReset, error)
}

// OutputResetWriter writes the output resets, inside a Tx.
type OutputResetWriter interface {
	// OutputResetInsertMany stores records and sets their IDs, in the order given.
	OutputResetInsertMany(ctx context.Context, rs []*OutputReset) error
}

// BufferPublishDiscardParams selects the queued buffered publishes of one tenant's dataset that
// Tx.BufferPublishDiscardQueued dead-letters, and says why.
type BufferPublishDiscardParams struct {
	Tenant      string
	DatasetUUID string
	Reason      string // their LastError
	Now         time.Time
}
