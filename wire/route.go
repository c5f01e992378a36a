package wire

import "encoding/json"

// Route is the data-plane part of a pipeline task's payload, which every worker dialect hands to
// the task: which pipeline job it runs for, what it reads and what it writes.
type Route struct {
	Job     PipelineJob     `json:"job"`
	Inputs  []DatasetInput  `json:"inputs"`
	Outputs []DatasetOutput `json:"outputs"`
	Trigger json.RawMessage `json:"trigger,omitempty"`
}

// PipelineJob names the pipeline job a task runs for, and the pipeline version it was created
// under.
type PipelineJob struct {
	DAGName string `json:"dag_name"`
	Name    string `json:"name"`
	Version string `json:"pipeline_version"`
	// IdleTimeoutSeconds is the job's idle_timeout: how long a worker of its queue stays with
	// nothing to claim before it exits (0: as soon as the queue is empty). Absent: it stays.
	IdleTimeoutSeconds *float64 `json:"idle_timeout_seconds,omitempty"`
	// UpdateStrategy is the job's update_strategy, "append" or "replace" ("" when it sets none),
	// and UniqueKey its unique_key: the columns an append job's rows are deduplicated on.
	UpdateStrategy string   `json:"update_strategy,omitempty"`
	UniqueKey      []string `json:"unique_key,omitempty"`
	// Runtime is the job's runtime (lambda, ecs_platform, dispatcher); Bundle the id of the user
	// code bundle it runs (its udf), "" none; Secrets the names of the secrets it declares (never
	// their values).
	Runtime string   `json:"runtime,omitempty"`
	Bundle  string   `json:"bundle_id,omitempty"`
	Secrets []string `json:"secrets,omitempty"`
	// UDF is the bundle the job runs as its deploy pinned it; nil when it runs none.
	UDF *Bundle `json:"udf,omitempty"`
}

// Bundle is a user code bundle as a job's deploy pinned it: what a runner downloads (from
// Download, resolved against the server's public URL: GET /v1/task/bundle with the attempt's
// capability token), checks (SHA256, before it unpacks anything) and starts (Entrypoint, in
// Language's runtime).
type Bundle struct {
	ID         string `json:"bundle_id"`
	SHA256     string `json:"sha256"`
	Size       int64  `json:"size"`
	Language   string `json:"language"`
	Entrypoint string `json:"entrypoint"`
	Download   string `json:"download"`
}

// BundleDownload is the task-scoped route a runner downloads its attempt's bundle from.
const BundleDownload = "/v1/task/bundle"

// DatasetInput is a dataset a task reads: input InputIndex of its job. The input whose event
// started the task carries the event's version and cursor, or its partition; the others the
// version current when the task was created. CursorEnd is set when backpressure coalesced the
// events of several consecutive cursors into the task: it reads the batches of every cursor from
// Cursor to CursorEnd. Where is the filter to apply when reading.
type DatasetInput struct {
	InputIndex     int             `json:"input_index"`
	DatasetUUID    string          `json:"dataset_uuid"`
	DatasetVersion string          `json:"dataset_version"`
	DatasetName    string          `json:"dataset_name,omitempty"`
	Cursor         *int64          `json:"cursor,omitempty"`
	CursorEnd      *int64          `json:"cursor_end,omitempty"`
	PartitionKey   string          `json:"partition_key,omitempty"`
	Start          *int64          `json:"start,omitempty"`
	End            *int64          `json:"end,omitempty"`
	Where          json.RawMessage `json:"where,omitempty"`
	StorageRef     json.RawMessage `json:"storage_ref"`
}

// DatasetOutput is a dataset a task writes: output OutputIndex of its job, at the version
// current when the task was created.
type DatasetOutput struct {
	OutputIndex    int    `json:"output_index"`
	DatasetUUID    string `json:"dataset_uuid"`
	DatasetVersion string `json:"dataset_version"`
	DatasetName    string `json:"dataset_name,omitempty"`
	// WriteMode is the dataset's: "buffered" for one that tasks add rows to by publishing batches.
	WriteMode string `json:"write_mode,omitempty"`
}
