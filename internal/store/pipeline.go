package store

import (
	"encoding/json"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// Pipeline is a deployed DAG and the version that runs.
type Pipeline struct {
	Tenant        string
	Name          string
	ActiveVersion string
	// BuildingVersion is the version a changed deploy is building beside the active one (see
	// VersionBuilding), "" when none.
	BuildingVersion string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// PipelineVersion is one immutable deployed text of a pipeline.
type PipelineVersion struct {
	Seq         int64
	Tenant      string
	Pipeline    string
	Version     string // the content hash
	Document    []byte // as deployed
	ContentType string
	Spec        json.RawMessage // the document resolved: defaults applied, datasets by uuid
	CreatedAt   time.Time
	State       string // VersionDeployed, VersionRolledBack, VersionBuilding or VersionAbandoned
	// Build is how far the build of a version a changed deploy created has come (the data
	// plane's record; empty for a version that was not built).
	Build json.RawMessage
	// Pointers are the dataset versions the pipeline's outputs had when the version was last
	// replaced as the active one, by dataset uuid (JSON); a rollback to the version restores them.
	Pointers json.RawMessage
}

// The states of a pipeline version besides being its pipeline's active one or not.
const (
	VersionDeployed = ""
	// VersionRolledBack: a rollback replaced the version, and it has not been made active again
	// since. What its tasks report afterwards is stored, never routed.
	VersionRolledBack = "rolled_back"
	// VersionBuilding: a changed deploy created the version and its affected jobs are being
	// rebuilt beside the active version; it is activated when its build is done.
	VersionBuilding = "building"
	// VersionAbandoned: the version's build was abandoned (deleted, or replaced by a newer deploy
	// or a rollback) before it was activated. What its tasks report is stored, never routed.
	VersionAbandoned = "abandoned"
)

// CancelVersionReplaced is the cancel reason of the tasks of a pipeline version's rebuilt jobs
// that the activation of a build canceled: the build ran their updates in its own datasets.
const CancelVersionReplaced = "pipeline_version_replaced"

// PipelineVersionKey identifies one version of a pipeline (Reader.PipelineVersionGet,
// Reader.PipelineTasksUnfinished).
type PipelineVersionKey struct {
	Tenant   string
	Pipeline string
	Version  string // the content hash
}

// PipelineJobKey identifies one job of a pipeline, across its versions (Reader.PipelineJobTasks,
// Reader.PipelineJobLatest).
type PipelineJobKey struct {
	Tenant   string
	Pipeline string
	Job      string // the job's name in the pipeline
}

// PipelineTaskRef is a task of a pipeline job as a rollback reads it (Reader.PipelineTasksUnfinished).
type PipelineTaskRef struct {
	Tenant   string
	JobID    string
	TaskID   string
	RouteKey string // the job's idempotency key: the routing (or source run) that created it
	Job      string // the pipeline job
	Version  string // the pipeline version
	Status   lifecycle.TaskStatus
	Route    json.RawMessage
}

// PipelineTaskCount is how many tasks of a pipeline job are in one status.
type PipelineTaskCount struct {
	Job    string
	Status lifecycle.TaskStatus
	Count  int
}

// Dataset is a job output of a pipeline, or a named buffered dataset with many writers.
type Dataset struct {
	UUID           string
	Tenant         string
	Producer       string // "output:{pipeline}/{job}/{index}" or "buffered:{name}": unique per tenant
	Name           string // "" unless published
	Pipeline       string
	Job            string
	OutputIndex    int
	CurrentVersion string
	Storage        string
	WriteMode      string
	Schema         json.RawMessage
	FilterFields   json.RawMessage
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// DatasetVersion is a registered version of a dataset.
type DatasetVersion struct {
	DatasetUUID string
	Version     string
	StorageRef  json.RawMessage
	ConfigHash  string
	Start, End  *int64
	TaskID      string // the task that published it; "" for the version a deploy created
	CreatedAt   time.Time
}

// Consumer is one input of a job of a pipeline version, reading a dataset.
type Consumer struct {
	DatasetUUID string
	Tenant      string
	Pipeline    string
	Version     string
	Job         string
	InputIndex  int
	// Building: the input is of the pipeline's building version, not its active one.
	Building bool
}

// DatasetEventListParams is the input of Reader.DatasetEventListAfter.
type DatasetEventListParams struct {
	DatasetUUID    string
	DatasetVersion string
	AfterID        int64 // events with a greater id
	ThroughID      int64 // and at most this one
	Limit          int
}
