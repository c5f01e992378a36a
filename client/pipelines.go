package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Pipeline is a deployed DAG document: its active version and its jobs, and the version a
// changed deploy is building beside it, if any.
type Pipeline struct {
	Name          string `json:"name"`
	ActiveVersion string `json:"active_version"`
	// BuildingVersion is the version being built beside the active one; nil when none is.
	BuildingVersion *string       `json:"building_version"`
	CreatedAt       time.Time     `json:"created_at"`
	UpdatedAt       time.Time     `json:"updated_at"`
	Jobs            []PipelineJob `json:"jobs,omitempty"`
	// Build is the build of BuildingVersion (set by GetPipeline and DeployPipeline; ListPipelines
	// leaves it nil).
	Build *PipelineBuild `json:"build,omitempty"`
	// Set by DeployPipeline: the deployed version, whether it is new, and whether the deploy made
	// it the active one.
	Version   string `json:"version,omitempty"`
	Created   bool   `json:"created,omitempty"`
	Activated bool   `json:"activated,omitempty"`
	// State is set by DeployPipeline: DeployActive when the deployed version is the active one,
	// else BuildBuilding or BuildReady: it is built beside the active one.
	State string `json:"state,omitempty"`
	// Abandoned is set by DeployPipeline when the deploy replaced a build under way.
	Abandoned *AbandonedBuild `json:"abandoned,omitempty"`
}

// DeployActive is the State of a deploy whose version is the active one.
const DeployActive = "active"

// The states of a build (PipelineBuild.State, Pipeline.State after a deploy).
const (
	BuildBuilding = "building" // its rebuilt jobs are catching up
	BuildReady    = "ready"    // caught up: ActivatePipelineVersion cuts over
)

// The activate modes of a deploy (WithActivate): what happens to a version whose change needs a
// build: a change of what a job writes (its config, operator, inputs, outputs, ...).
const (
	// ActivateManual builds it beside the active version; ActivatePipelineVersion cuts over. The
	// server's default.
	ActivateManual = "manual"
	// ActivateWhenReady builds it, then activates it as soon as the build is ready.
	ActivateWhenReady = "when_ready"
	// ActivateImmediate activates it at once, without a build.
	ActivateImmediate = "immediate"
)

// The states of a pipeline version (PipelineVersion.State).
const (
	VersionActive     = "active"      // the pipeline's active version
	VersionInactive   = "inactive"    // not active: a later deploy or activation replaced it
	VersionBuilding   = "building"    // being built beside the active version
	VersionRolledBack = "rolled_back" // replaced by a rollback
	VersionAbandoned  = "abandoned"   // its build was abandoned before it was activated
)

// PipelineBuild is the build of a version beside the active one: the jobs it rebuilds, with why
// and their tasks by status, and the versions of the datasets it rebuilds.
type PipelineBuild struct {
	Version     string             `json:"version"`
	State       string             `json:"state"`        // BuildBuilding or BuildReady
	BaseVersion string             `json:"base_version"` // the version active when it was deployed
	Activate    string             `json:"activate"`     // ActivateManual or ActivateWhenReady
	Jobs        []PipelineBuildJob `json:"jobs"`
	// Switched are the jobs the change affects that are not rebuilt (they write a buffered
	// dataset, which keeps no versions) but change at activation, each with why.
	Switched map[string]string      `json:"switched"`
	Datasets []PipelineBuildDataset `json:"datasets"`
	Backfill PipelineBuildBackfill  `json:"backfill"`
	// ReadyAt is when the build was found ready; nil while it builds.
	ReadyAt *time.Time `json:"ready_at"`
}

// Ready reports whether the build has caught up, so that it can be activated without force.
func (b *PipelineBuild) Ready() bool { return b != nil && b.State == BuildReady }

// PipelineBuildJob is a job a build rebuilds: why, and its tasks under the build by status (the
// keys of PipelineJob.Counts).
type PipelineBuildJob struct {
	Name   string         `json:"name"`
	Reason string         `json:"reason"`
	Counts map[string]int `json:"counts"`
}

// PipelineBuildDataset is a dataset a build rebuilds: the version readers see now, and the one
// the build writes, current from its activation on.
type PipelineBuildDataset struct {
	DatasetUUID      string `json:"dataset_uuid"`
	DatasetName      string `json:"dataset_name,omitempty"`
	CurrentVersion   string `json:"current_version"`
	CandidateVersion string `json:"candidate_version"`
}

// PipelineBuildBackfill is how far a build has routed again the events of the datasets its
// rebuilt jobs read but it does not rebuild: through event ThroughEvent (0: not begun), all of
// them once Scanned.
type PipelineBuildBackfill struct {
	ThroughEvent int64 `json:"through_event"`
	Scanned      bool  `json:"scanned"`
}

// AbandonedBuild is the build a deploy replaced.
type AbandonedBuild struct {
	Version      string `json:"version"`
	CanceledJobs int    `json:"canceled_jobs"`
}

// PipelineJob is a job of a pipeline's active version with its task counts (routed: every task
// created for it; then by status).
type PipelineJob struct {
	Name       string            `json:"name"`
	Activation string            `json:"activation"`
	Runtime    string            `json:"runtime"`
	Operator   string            `json:"operator"`
	Queue      string            `json:"queue"`
	Source     string            `json:"source,omitempty"`
	Outputs    []PipelineDataset `json:"outputs"`
	Inputs     []PipelineDataset `json:"inputs"`
	Counts     map[string]int    `json:"counts"`
}

// PipelineDataset is a dataset a pipeline job writes (an output) or reads (an input, with its
// filter).
type PipelineDataset struct {
	OutputIndex int             `json:"output_index"`
	DatasetUUID string          `json:"dataset_uuid"`
	DatasetName string          `json:"dataset_name,omitempty"`
	Where       json.RawMessage `json:"where,omitempty"`
}

// PipelineVersion is one deployed text of a pipeline.
type PipelineVersion struct {
	Version string `json:"version"`
	Active  bool   `json:"active"`
	// State is VersionActive, VersionInactive, VersionBuilding, VersionRolledBack or
	// VersionAbandoned.
	State       string    `json:"state"`
	ContentType string    `json:"content_type"`
	CreatedAt   time.Time `json:"created_at"`
}

// RollbackResponse says what a rollback did.
type RollbackResponse struct {
	Name          string `json:"name"`
	ActiveVersion string `json:"active_version"`
	Activated     bool   `json:"activated"`
	CanceledJobs  int    `json:"canceled_jobs"`
}

// ActivateResponse says what an activation did.
type ActivateResponse struct {
	Name          string `json:"name"`
	ActiveVersion string `json:"active_version"`
	Activated     bool   `json:"activated"`
	// CanceledJobs counts the jobs of the replaced version's rebuilt jobs that had not ended and
	// were canceled.
	CanceledJobs int `json:"canceled_jobs"`
}

// AbandonResponse says what abandoning a build did.
type AbandonResponse struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	State        string `json:"state"` // VersionAbandoned
	CanceledJobs int    `json:"canceled_jobs"`
}

// DeployOption configures a deploy.
type DeployOption func(*deployConfig)

type deployConfig struct {
	activate string
}

// WithActivate sets what happens to a version whose change needs a build (?activate=):
// ActivateManual (the server's default), ActivateWhenReady or ActivateImmediate.
func WithActivate(mode string) DeployOption {
	return func(c *deployConfig) { c.activate = mode }
}

// DeployPipeline deploys a DAG document (POST /pipelines), YAML or JSON as contentType says
// ("application/yaml" or "application/json"). The same content deployed again creates no version.
// A new version whose change affects what a job writes is built beside the active one (State
// BuildBuilding) unless WithActivate says otherwise; other new versions are active at once.
func (c *Client) DeployPipeline(ctx context.Context, document []byte, contentType string, opts ...DeployOption) (*Pipeline, error) {
	var cfg deployConfig
	for _, o := range opts {
		o(&cfg)
	}
	path := "/pipelines"
	if cfg.activate != "" {
		path += "?" + url.Values{"activate": {cfg.activate}}.Encode()
	}
	var out Pipeline
	_, err := c.do(ctx, request{method: http.MethodPost, path: path, body: document,
		header: http.Header{"Content-Type": {contentType}}, retry: true}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ListPipelines lists the tenant's pipelines (GET /pipelines).
func (c *Client) ListPipelines(ctx context.Context) ([]Pipeline, error) {
	var out struct {
		Pipelines []Pipeline `json:"pipelines"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/pipelines", retry: true}, &out)
	return out.Pipelines, err
}

// GetPipeline returns a pipeline with its active version's jobs (GET /pipelines/{name}).
func (c *Client) GetPipeline(ctx context.Context, name string) (*Pipeline, error) {
	var out Pipeline
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/pipelines/" + url.PathEscape(name), retry: true}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// PipelineVersions lists a pipeline's versions, newest first (GET /pipelines/{name}/versions).
func (c *Client) PipelineVersions(ctx context.Context, name string) ([]PipelineVersion, error) {
	var out struct {
		Versions []PipelineVersion `json:"versions"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/pipelines/" + url.PathEscape(name) + "/versions", retry: true}, &out)
	return out.Versions, err
}

// RollbackPipeline makes an earlier version active (version "": the one before the active one)
// and cancels the rolled-back version's tasks that have not started (POST
// /pipelines/{name}/rollback).
func (c *Client) RollbackPipeline(ctx context.Context, name, version string) (*RollbackResponse, error) {
	body, _ := json.Marshal(map[string]string{"version": version})
	if version == "" {
		body = []byte("{}")
	}
	var out RollbackResponse
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/pipelines/" + url.PathEscape(name) + "/rollback", body: body}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ActivatePipelineVersion makes version, which a changed deploy is building, the active one: in
// one step every dataset the build rebuilt moves to the build's version and the pipeline to
// version (POST /pipelines/{name}/versions/{version}/activate). A build that is not ready is
// refused (409) unless force is set; a version that is not being built is refused (409) too.
func (c *Client) ActivatePipelineVersion(ctx context.Context, name, version string, force bool) (*ActivateResponse, error) {
	body := []byte("{}")
	if force {
		body = []byte(`{"force":true}`)
	}
	var out ActivateResponse
	_, err := c.do(ctx, request{method: http.MethodPost, path: versionPath(name, version) + "/activate", body: body}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// AbandonPipelineVersion stops the build of version (DELETE /pipelines/{name}/versions/{version}):
// the pipeline keeps its active version and its datasets their current versions, and the build's
// tasks that have not ended are canceled. A version that is not being built is refused (409).
func (c *Client) AbandonPipelineVersion(ctx context.Context, name, version string) (*AbandonResponse, error) {
	var out AbandonResponse
	_, err := c.do(ctx, request{method: http.MethodDelete, path: versionPath(name, version)}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func versionPath(name, version string) string {
	return "/pipelines/" + url.PathEscape(name) + "/versions/" + url.PathEscape(version)
}

// Dataset is a job output of a pipeline (named when published), or a named buffered dataset.
type Dataset struct {
	DatasetUUID    string           `json:"dataset_uuid"`
	Name           *string          `json:"name"`
	CurrentVersion string           `json:"current_version"`
	Producer       *DatasetProducer `json:"producer"` // nil for a buffered dataset
	Storage        *string          `json:"storage"`
	WriteMode      *string          `json:"write_mode"`
	Schema         json.RawMessage  `json:"schema,omitempty"`
	CreatedAt      time.Time        `json:"created_at"`
	UpdatedAt      time.Time        `json:"updated_at"`
	// Set by GetDataset and SetCurrentVersion only.
	FilterFields []string         `json:"filter_fields,omitempty"`
	Versions     []DatasetVersion `json:"versions,omitempty"`
	RecentEvents []DatasetEvent   `json:"recent_events,omitempty"`
}

// DatasetProducer is the pipeline job output that writes a dataset.
type DatasetProducer struct {
	Pipeline    string `json:"pipeline"`
	Job         string `json:"job"`
	OutputIndex int    `json:"output_index"`
}

// DatasetVersion is a registered version of a dataset.
type DatasetVersion struct {
	DatasetVersion string          `json:"dataset_version"`
	Current        bool            `json:"current"`
	StorageRef     json.RawMessage `json:"storage_ref"`
	ConfigHash     *string         `json:"config_hash"`
	RangeStart     *int64          `json:"range_start"`
	RangeEnd       *int64          `json:"range_end"`
	TaskID         *string         `json:"task_id"`
	CreatedAt      time.Time       `json:"created_at"`
}

// DatasetEvent is an event a task reported on a dataset.
type DatasetEvent struct {
	ID             int64     `json:"id"`
	DatasetVersion string    `json:"dataset_version"`
	Cursor         *int64    `json:"cursor"`
	PartitionKey   *string   `json:"partition_key"`
	Start          *int64    `json:"start"`
	End            *int64    `json:"end"`
	TaskID         string    `json:"task_id"`
	Attempt        int       `json:"attempt"`
	CreatedAt      time.Time `json:"created_at"`
}

// ListDatasets lists the tenant's datasets, named ones first (GET /datasets).
func (c *Client) ListDatasets(ctx context.Context) ([]Dataset, error) {
	var out struct {
		Datasets []Dataset `json:"datasets"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/datasets", retry: true}, &out)
	return out.Datasets, err
}

// GetDataset returns a dataset, by name or dataset_uuid, with its versions and latest events
// (GET /datasets/{name}).
func (c *Client) GetDataset(ctx context.Context, name string) (*Dataset, error) {
	var out Dataset
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/datasets/" + url.PathEscape(name), retry: true}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// SetCurrentVersion switches a dataset's current version to a registered one (POST
// /datasets/{name}/current): from then on its events of that version are routed.
func (c *Client) SetCurrentVersion(ctx context.Context, name, version string) (*Dataset, error) {
	body, err := json.Marshal(map[string]string{"dataset_version": version})
	if err != nil {
		return nil, fmt.Errorf("baton: encode: %w", err)
	}
	var out Dataset
	_, err = c.do(ctx, request{method: http.MethodPost, path: "/datasets/" + url.PathEscape(name) + "/current", body: body, retry: true}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// RowsQuery selects a page of a buffered dataset's rows. Zero fields are left out.
type RowsQuery struct {
	Where  map[string]any // column → value, or list of values: AND of equality / IN
	Cursor int64          // only the rows of the batch with this dataset cursor
	After  int64          // the NextAfter of the previous page
	Limit  int            // 1 to 1000; default 100
}

// RowsPage is a page of a buffered dataset's rows: each row's columns and its batch's "_cursor".
type RowsPage struct {
	Rows      []map[string]any `json:"rows"`
	NextAfter *int64           `json:"next_after"` // nil on the last page
}

// DatasetRows reads a page of a buffered dataset's rows, oldest first (GET /datasets/{name}/rows).
func (c *Client) DatasetRows(ctx context.Context, name string, q RowsQuery) (*RowsPage, error) {
	v := url.Values{}
	if q.Where != nil {
		w, err := json.Marshal(q.Where)
		if err != nil {
			return nil, fmt.Errorf("baton: encode where: %w", err)
		}
		v.Set("where", string(w))
	}
	for k, n := range map[string]int64{"cursor": q.Cursor, "after": q.After, "limit": int64(q.Limit)} {
		if n != 0 {
			v.Set(k, strconv.FormatInt(n, 10))
		}
	}
	path := "/datasets/" + url.PathEscape(name) + "/rows"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out RowsPage
	if _, err := c.do(ctx, request{method: http.MethodGet, path: path, retry: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BufferBatch is a batch published to a buffered dataset, as the Buffer Queue keeps it.
type BufferBatch struct {
	ID             int64           `json:"id"`
	State          string          `json:"state"` // queued, committed or dead
	BatchURI       string          `json:"batch_uri"`
	DatasetUUID    string          `json:"dataset_uuid"`
	DatasetVersion string          `json:"dataset_version"`
	RecordCount    *int64          `json:"record_count"`
	ReceiveCount   int             `json:"receive_count"`
	LastError      *string         `json:"last_error"`
	Producer       json.RawMessage `json:"producer"` // {"task_id", "attempt"}
	CreatedAt      time.Time       `json:"created_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
}

// BatchDeadLetters lists a buffered dataset's dead-lettered batches, oldest first (GET
// /datasets/{name}/dead-letters).
func (c *Client) BatchDeadLetters(ctx context.Context, name string) ([]BufferBatch, error) {
	var out struct {
		DeadLetters []BufferBatch `json:"dead_letters"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/datasets/" + url.PathEscape(name) + "/dead-letters", retry: true}, &out)
	return out.DeadLetters, err
}

// RetryBatch puts a dead-lettered batch back on the Buffer Queue (POST
// /datasets/{name}/dead-letters/{id}/retry).
func (c *Client) RetryBatch(ctx context.Context, name string, id int64) (*BufferBatch, error) {
	var out BufferBatch
	path := "/datasets/" + url.PathEscape(name) + "/dead-letters/" + strconv.FormatInt(id, 10) + "/retry"
	if _, err := c.do(ctx, request{method: http.MethodPost, path: path, retry: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
