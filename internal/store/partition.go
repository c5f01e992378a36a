package store

import (
	"context"
	"time"
)

// PartitionCommit records that a task's attempt committed one partition of a dataset version
// written with update_strategy replace: from then on, until a later commit of the same partition,
// the partition's data is the files under Location. A dataset version keeps every commit of each
// of its partitions, so that history shows what each partition pointed at and when; the partition's
// current commit is the one stored last.
type PartitionCommit struct {
	ID             int64
	Tenant         string
	DatasetUUID    string
	DatasetVersion string
	// PartitionKey is the dataset event's "start-end"; Start and End are its two numbers, which
	// order the partitions.
	PartitionKey string
	Start, End   int64
	// Location is the URI of the attempt's staging folder of the partition, ending in "/":
	// {root}datasets/{dataset_uuid}/{task_id}/{attempt}/{partition_key}/.
	Location string
	// RowCount is the row count the partition's _SUCCESS marker declared; nil when it declared
	// none.
	RowCount *int64
	// Bytes adds up the sizes of the partition's files (every object under Location but the
	// marker) when the commit was checked.
	Bytes       int64
	TaskID      string
	Attempt     int
	CommittedAt time.Time
}

// PartitionRef names one partition of a dataset version of a tenant.
type PartitionRef struct {
	Tenant         string
	DatasetUUID    string
	DatasetVersion string
	PartitionKey   string
}

// PartitionCommitListParams selects the partitions of a dataset version of a tenant
// (Reader.PartitionCommitListCurrent).
type PartitionCommitListParams struct {
	Tenant         string
	DatasetUUID    string
	DatasetVersion string
	Limit          int
}

// PartitionAttempt names an attempt of a task.
type PartitionAttempt struct {
	TaskID  string
	Attempt int
}

// PartitionCommitReader reads the partition commits of replace outputs.
type PartitionCommitReader interface {
	// PartitionCommitListCurrent lists the current commit of each partition of p's dataset
	// version, one per partition key, ordered by the partition's start, then its end and key;
	// at most p.Limit of them, the first ones in that order.
	PartitionCommitListCurrent(ctx context.Context, p PartitionCommitListParams) ([]*PartitionCommit, error)
	// PartitionCommitHistory lists the commits of one partition, newest (the current one) first,
	// at most limit of them.
	PartitionCommitHistory(ctx context.Context, k PartitionRef, limit int) ([]*PartitionCommit, error)
	// PartitionCommitAttempts lists, in no particular order and each once, the attempts that
	// committed a partition of the dataset datasetUUID, whatever the version and whether or not
	// the commit is still current: the staging folders that must be kept.
	PartitionCommitAttempts(ctx context.Context, datasetUUID string) ([]PartitionAttempt, error)
}

// PartitionCommitWriter writes partition commits, inside a Tx.
type PartitionCommitWriter interface {
	// PartitionCommitInsert stores c as its partition's current commit and sets its ID. When the
	// partition already has a commit with c's Location (the same attempt reporting the same
	// partition again), nothing is stored and ok is false.
	PartitionCommitInsert(ctx context.Context, c *PartitionCommit) (ok bool, err error)
}
