// Package report holds what a worker reports of the data its attempt wrote — dataset events,
// the staged partitions they commit, and published dataset versions — as the lifecycle core
// hands them to the data plane inside the report's transaction.
package report

import "encoding/json"

// Event is an upstream event as a worker reports it (internal and task-scoped dialects): a
// dataset version reached a cursor, or a partition "start-end" of it was written.
type Event struct {
	DatasetUUID    string `json:"dataset_uuid"`
	DatasetVersion string `json:"dataset_version"`
	Cursor         *int64 `json:"cursor,omitempty"`
	PartitionKey   string `json:"partition_key,omitempty"`
	Start          *int64 `json:"start,omitempty"`
	End            *int64 `json:"end,omitempty"`
	// Staged is what the data plane found in object storage for an event that commits a
	// partition, before the report's transaction: it is set by the server, never read from a
	// report.
	Staged *Staged `json:"-"`
}

// Staged is a partition's staging folder as the data plane found it before the transaction of
// the report that commits it: which attempt wrote it, where it is, and what its files and its
// _SUCCESS marker say.
type Staged struct {
	Attempt  int
	Location string // the folder's URI, ending in "/"
	Bytes    int64  // the sizes of its files, the marker left out
	RowCount *int64 // as the marker declared it; nil when it declared none
}

// Published is one entry of a completion's datasets_published: a dataset version the task wrote,
// to register.
type Published struct {
	DatasetUUID    string          `json:"dataset_uuid"`
	DatasetVersion string          `json:"dataset_version"`
	StorageRef     json.RawMessage `json:"storage_ref,omitempty"`
	ConfigHash     string          `json:"config_hash,omitempty"`
	RangeStart     *int64          `json:"range_start,omitempty"`
	RangeEnd       *int64          `json:"range_end,omitempty"`
}

// MaxPublished caps the datasets_published entries of one completion.
const MaxPublished = 1000
