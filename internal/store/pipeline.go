package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// PipelineReader holds the queries of the data plane: deployed pipelines, datasets and who reads
// them.
type PipelineReader interface {
	GetPipeline(ctx context.Context, tenant, name string) (*Pipeline, error)
	// ListPipelines lists a tenant's pipelines by name.
	ListPipelines(ctx context.Context, tenant string) ([]*Pipeline, error)
	GetPipelineVersion(ctx context.Context, tenant, name, version string) (*PipelineVersion, error)
	// ListPipelineVersions lists a pipeline's versions, newest deploy first.
	ListPipelineVersions(ctx context.Context, tenant, name string) ([]*PipelineVersion, error)
	// PipelineTaskCounts counts the tasks of a pipeline's jobs by pipeline job and status.
	PipelineTaskCounts(ctx context.Context, tenant, name string) ([]*PipelineTaskCount, error)
	// ActivePipelines lists every tenant's pipelines.
	ActivePipelines(ctx context.Context) ([]*Pipeline, error)
	// PipelineJobTasks counts the tasks of one pipeline job: all of them, and those not yet
	// terminal (waiting, pending, running).
	PipelineJobTasks(ctx context.Context, tenant, pipeline, job string) (total, live int, err error)
	// LatestPipelineJob is the job of a pipeline job inserted last; ErrNotFound if it has none.
	LatestPipelineJob(ctx context.Context, tenant, pipeline, job string) (*Job, error)
	// PipelineJobsNotStarted lists the ids of the jobs of one version of a pipeline that have a
	// waiting or pending task no attempt has started yet.
	PipelineJobsNotStarted(ctx context.Context, tenant, name, version string) ([]string, error)

	// GetDatasets returns the datasets of uuids that exist, in no particular order.
	GetDatasets(ctx context.Context, uuids []string) ([]*Dataset, error)
	DatasetByName(ctx context.Context, tenant, name string) (*Dataset, error)
	// DatasetsByProducer returns the tenant's datasets of the given producers that exist.
	DatasetsByProducer(ctx context.Context, tenant string, producers []string) ([]*Dataset, error)
	// ListDatasets lists a tenant's datasets, named ones first by name.
	ListDatasets(ctx context.Context, tenant string) ([]*Dataset, error)
	// ListDatasetVersions lists the registered versions of the datasets of uuids, oldest first.
	ListDatasetVersions(ctx context.Context, uuids ...string) ([]*DatasetVersion, error)
	// RecentDatasetEvents lists the latest events reported on a dataset by tasks of tenant's
	// jobs, newest first.
	RecentDatasetEvents(ctx context.Context, tenant, uuid string, limit int) ([]*DatasetEvent, error)
	// Consumers lists the inputs of active pipeline versions that read the datasets of uuids.
	Consumers(ctx context.Context, uuids []string) ([]*Consumer, error)
}

// PipelineWriter holds the data plane's writes, inside a Tx.
type PipelineWriter interface {
	// PutPipeline inserts a pipeline or updates its active version.
	PutPipeline(ctx context.Context, p *Pipeline) error
	// InsertPipelineVersion stores a version; ok is false, and nothing changes, when the
	// pipeline already has that version.
	InsertPipelineVersion(ctx context.Context, v *PipelineVersion) (ok bool, err error)
	// InsertConsumers stores a version's inputs; those already stored are skipped.
	InsertConsumers(ctx context.Context, cs []*Consumer) error
	// InsertDatasets stores datasets; one whose (tenant, producer) exists is skipped. A name
	// another dataset of the tenant holds is ErrConflict.
	InsertDatasets(ctx context.Context, ds []*Dataset) error
	// UpdateDataset writes a dataset's name, current version, storage, write mode, schema and
	// filter fields. A name another dataset of the tenant holds is ErrConflict.
	UpdateDataset(ctx context.Context, d *Dataset) error
	// InsertDatasetVersions registers versions; those already registered are skipped.
	InsertDatasetVersions(ctx context.Context, vs []*DatasetVersion) error
	// InsertJobsIfAbsent inserts the jobs whose idempotency key the tenant has not used and
	// returns the ids of those it inserted. Concurrent calls with the same keys insert each
	// once; callers pass keys in sorted order so that they wait on each other without deadlock.
	InsertJobsIfAbsent(ctx context.Context, jobs []*Job) ([]string, error)
}

// Pipeline is a deployed DAG and the version that runs.
type Pipeline struct {
	Tenant        string
	Name          string
	ActiveVersion string
	CreatedAt     time.Time
	UpdatedAt     time.Time
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
}
