package api

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/api/codec"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
)

// The data plane's producer endpoints: pipelines (deployed DAG documents) and datasets. Field
// names are snake_case, as in the DAG document and the worker contracts' dataset fields.

// POST /pipelines: the body is the DAG document, as YAML (Content-Type application/yaml, the
// default) or JSON (application/json).
func (s *Server) deployPipeline(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, request.Errorf(http.StatusBadRequest, "request body is empty: send the pipeline document as YAML or JSON")
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "application/json", "text/plain":
	default:
		return nil, request.Errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/yaml or application/json, got %q", ct)
	}
	tenant := tenantOf(r)
	res, err := s.dp.DeployBy(r.Context(), dataplane.Deployer{Tenant: tenant, APIKey: keyOf(r), Activate: r.URL.Query().Get("activate")}, body, ct)
	if err != nil {
		return nil, err
	}
	v, err := s.dp.GetPipeline(r.Context(), tenant, res.Pipeline.Name)
	if err != nil {
		return nil, err
	}
	out := s.pipelineView(v)
	out["version"], out["created"], out["activated"] = res.Version, res.Created, res.Activated
	out["state"] = "active"
	if res.Building {
		out["state"] = v.Build.State
	}
	if res.Abandoned != "" {
		out["abandoned"] = map[string]any{"version": res.Abandoned, "canceled_jobs": res.Canceled}
	}
	if ws := s.pushWarnings(out["jobs"].([]dataplane.PipelineJobView)); len(ws) > 0 {
		out["warnings"] = ws
	}
	if res.Created {
		return created{out}, nil
	}
	return out, nil
}

func pipelineSummary(p *store.Pipeline) map[string]any {
	return map[string]any{"name": p.Name, "active_version": p.ActiveVersion, "building_version": nullable(p.BuildingVersion),
		"created_at": snakeTime(p.CreatedAt), "updated_at": snakeTime(p.UpdatedAt)}
}

func (s *Server) pipelineView(v *dataplane.PipelineView) map[string]any {
	out := pipelineSummary(v.Pipeline)
	jobs := v.Jobs()
	for i, j := range jobs {
		if s.lacksPushTarget(j) && !s.dp.LambdaOnPull(j.Operator) {
			jobs[i].WaitingFor = waitingForTarget(j.Operator)
		}
	}
	out["jobs"] = jobs
	out["build"] = v.Build // null when no version is being built
	return out
}

// GET /pipelines
func (s *Server) listPipelines(w http.ResponseWriter, r *http.Request) (any, error) {
	ps, err := s.dp.ListPipelines(r.Context(), tenantOf(r))
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(ps))
	for i, p := range ps {
		out[i] = pipelineSummary(p)
	}
	return map[string]any{"pipelines": out}, nil
}

// GET /pipelines/{name}
func (s *Server) getPipeline(w http.ResponseWriter, r *http.Request) (any, error) {
	v, err := s.dp.GetPipeline(r.Context(), tenantOf(r), r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	return s.pipelineView(v), nil
}

// GET /pipelines/{name}/versions
func (s *Server) pipelineVersions(w http.ResponseWriter, r *http.Request) (any, error) {
	tenant, name := tenantOf(r), r.PathValue("name")
	vs, err := s.dp.PipelineVersions(r.Context(), tenant, name)
	if err != nil {
		return nil, err
	}
	p, err := s.d.Store().PipelineGet(r.Context(), tenant, name)
	if err != nil {
		return nil, err
	}
	resets, err := s.dp.PipelineResets(r.Context(), tenant, name)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(vs))
	for i, v := range vs {
		state := v.State
		switch {
		case v.Version == p.ActiveVersion:
			state = "active"
		case state == store.VersionDeployed:
			state = "inactive"
		}
		out[i] = map[string]any{"version": v.Version, "active": v.Version == p.ActiveVersion, "state": state,
			"content_type": v.ContentType, "created_at": snakeTime(v.CreatedAt), "resets": resetsOf(resets, v.Version)}
	}
	return map[string]any{"name": name, "active_version": p.ActiveVersion, "versions": out}, nil
}

// resetsOf renders the output resets of one pipeline version, newest first, one per deploy and
// job that reset: {job, at, api_key, datasets: [{dataset_uuid, dataset_name, output_index,
// previous_version, dataset_version, rows_removed, batches_discarded}]}.
func resetsOf(rs []*store.OutputReset, version string) []map[string]any {
	out := []map[string]any{}
	var last map[string]any
	var lastAt time.Time
	for _, r := range rs {
		if r.Version != version {
			continue
		}
		if last == nil || last["job"] != r.Job || !lastAt.Equal(r.At) {
			last = map[string]any{"job": r.Job, "at": snakeTime(r.At), "api_key": nullable(r.APIKey), "datasets": []map[string]any{}}
			lastAt = r.At
			out = append(out, last)
		}
		last["datasets"] = append(last["datasets"].([]map[string]any), map[string]any{"dataset_uuid": r.DatasetUUID,
			"dataset_name": nullable(r.DatasetName), "output_index": r.OutputIndex, "previous_version": r.PreviousVersion,
			"dataset_version": r.DatasetVersion, "rows_removed": r.RowsRemoved, "batches_discarded": r.BatchesDiscarded})
	}
	return out
}

// GET /pipelines/{name}/versions/{version}: the document as it was deployed.
func (s *Server) pipelineVersion(w http.ResponseWriter, r *http.Request) (any, error) {
	tenant, name := tenantOf(r), r.PathValue("name")
	vs, err := s.dp.PipelineVersions(r.Context(), tenant, name)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		if v.Version == r.PathValue("version") {
			return map[string]any{"name": name, "version": v.Version, "content_type": v.ContentType,
				"created_at": snakeTime(v.CreatedAt), "document": string(v.Document)}, nil
		}
	}
	return nil, request.Errorf(http.StatusNotFound, "Pipeline version not found")
}

// POST /pipelines/{name}/rollback {"version": "..."}: version defaults to the one deployed
// before the active one.
func (s *Server) rollbackPipeline(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	var version string
	if len(strings.TrimSpace(string(body))) > 0 && strings.TrimSpace(string(body)) != "null" {
		obj, err := request.DecodeObject(body)
		if err != nil {
			return nil, err
		}
		f := request.Fields{Obj: obj}
		version = f.Str("version")
		if f.Err != nil {
			return nil, f.Err
		}
		if err := codec.CheckFields(obj, "", "version"); err != nil {
			return nil, err
		}
	}
	name := r.PathValue("name")
	res, canceled, err := s.dp.Rollback(r.Context(), tenantOf(r), name, version)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"name": name, "active_version": res.Version, "activated": res.Activated, "canceled_jobs": canceled}
	if res.Abandoned != "" {
		out["abandoned"] = map[string]any{"version": res.Abandoned} // its tasks are among canceled_jobs
	}
	return out, nil
}

// POST /pipelines/{name}/versions/{version}/activate {"force": false}: cuts over to the version a
// changed deploy built, once its build is ready (force: even before).
func (s *Server) activatePipelineVersion(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	force := false
	if len(strings.TrimSpace(string(body))) > 0 && strings.TrimSpace(string(body)) != "null" {
		obj, err := request.DecodeObject(body)
		if err != nil {
			return nil, err
		}
		f := request.Fields{Obj: obj}
		if b := f.Bool("force"); b != nil {
			force = *b
		}
		if f.Err != nil {
			return nil, f.Err
		}
		if err := codec.CheckFields(obj, "", "force"); err != nil {
			return nil, err
		}
	}
	name := r.PathValue("name")
	res, canceled, err := s.dp.Activate(r.Context(), tenantOf(r), name, r.PathValue("version"), force)
	if err != nil {
		return nil, err
	}
	return map[string]any{"name": name, "active_version": res.Version, "activated": res.Activated, "canceled_jobs": canceled}, nil
}

// DELETE /pipelines/{name}/versions/{version}: abandons the build of a version.
func (s *Server) abandonPipelineVersion(w http.ResponseWriter, r *http.Request) (any, error) {
	name, version := r.PathValue("name"), r.PathValue("version")
	canceled, err := s.dp.Abandon(r.Context(), tenantOf(r), name, version)
	if err != nil {
		return nil, err
	}
	return map[string]any{"name": name, "version": version, "state": store.VersionAbandoned, "canceled_jobs": canceled}, nil
}

// GET /datasets
func (s *Server) listDatasets(w http.ResponseWriter, r *http.Request) (any, error) {
	ds, err := s.dp.ListDatasets(r.Context(), tenantOf(r))
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(ds))
	for i, x := range ds {
		out[i] = datasetSummary(x)
	}
	return map[string]any{"datasets": out}, nil
}

func datasetSummary(x *store.Dataset) map[string]any {
	out := map[string]any{"dataset_uuid": x.UUID, "name": nullable(x.Name), "current_version": x.CurrentVersion,
		"producer": map[string]any{"pipeline": nullable(x.Pipeline), "job": nullable(x.Job), "output_index": x.OutputIndex},
		"storage":  nullable(x.Storage), "write_mode": nullable(x.WriteMode), "created_at": snakeTime(x.CreatedAt),
		"updated_at": snakeTime(x.UpdatedAt)}
	if x.Pipeline == "" {
		out["producer"] = nil // a buffered dataset: many writers
	}
	if len(x.Schema) > 0 {
		out["schema"] = json.RawMessage(x.Schema)
	}
	return out
}

// GET /datasets/{name}: by name, or by dataset_uuid.
func (s *Server) getDataset(w http.ResponseWriter, r *http.Request) (any, error) {
	v, err := s.dp.GetDataset(r.Context(), tenantOf(r), r.PathValue("name"), 20)
	if err != nil {
		return nil, err
	}
	return datasetView(v), nil
}

func datasetView(v *dataplane.DatasetView) map[string]any {
	out := datasetSummary(v.Dataset)
	versions := make([]map[string]any, len(v.Versions))
	for i, dv := range v.Versions {
		versions[i] = map[string]any{"dataset_version": dv.Version, "current": dv.Version == v.Dataset.CurrentVersion,
			"storage_ref": rawOrNull(dv.StorageRef), "config_hash": nullable(dv.ConfigHash), "range_start": dv.Start,
			"range_end": dv.End, "task_id": nullable(dv.TaskID), "created_at": snakeTime(dv.CreatedAt)}
	}
	events := make([]map[string]any, len(v.Events))
	for i, e := range v.Events {
		events[i] = map[string]any{"id": e.ID, "dataset_version": e.DatasetVersion, "cursor": e.Cursor,
			"partition_key": nullable(e.PartitionKey), "start": e.Start, "end": e.End, "task_id": e.TaskID,
			"attempt": e.Attempt, "created_at": snakeTime(e.CreatedAt)}
	}
	invalidations := make([]map[string]any, len(v.Invalidations))
	for i, r := range v.Invalidations {
		invalidations[i] = map[string]any{"id": r.ID, "kind": "reset", "previous_version": r.PreviousVersion,
			"dataset_version": r.DatasetVersion, "rows_removed": r.RowsRemoved, "batches_discarded": r.BatchesDiscarded,
			"pipeline": r.Pipeline, "pipeline_version": r.Version, "job": r.Job, "created_at": snakeTime(r.At)}
	}
	partitions := make([]map[string]any, len(v.Partitions))
	for i, c := range v.Partitions {
		partitions[i] = map[string]any{"partition_key": c.PartitionKey, "location": c.Location, "row_count": c.RowCount,
			"bytes": c.Bytes, "task_id": c.TaskID, "attempt": c.Attempt, "committed_at": snakeTime(c.CommittedAt)}
	}
	out["versions"], out["recent_events"], out["filter_fields"] = versions, events, v.Allowed
	out["invalidations"] = invalidations
	out["partitions"], out["partitions_truncated"] = partitions, v.PartitionsTruncated
	return out
}

// POST /datasets/{name}/current {"dataset_version": "..."}: the cutover.
func (s *Server) setCurrentVersion(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	obj, err := request.DecodeObject(body)
	if err != nil {
		return nil, err
	}
	f := request.Fields{Obj: obj}
	version := f.Str("dataset_version")
	if f.Err != nil {
		return nil, f.Err
	}
	if err := codec.CheckFields(obj, "", "dataset_version"); err != nil {
		return nil, err
	}
	tenant := tenantOf(r)
	x, err := s.dp.SetCurrentVersion(r.Context(), tenant, r.PathValue("name"), version)
	if err != nil {
		return nil, err
	}
	v, err := s.dp.GetDataset(r.Context(), tenant, x.UUID, 20)
	if err != nil {
		return nil, err
	}
	return datasetView(v), nil
}

// POST /pipelines/{name}/jobs/{job}/run: a task of a manual source job. The optional JSON body
// is handed to the task as its trigger's input; an Idempotency-Key header makes a repeat start no
// second task.
func (s *Server) runPipelineJob(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	trigger := map[string]any{}
	if t := strings.TrimSpace(string(body)); t != "" && t != "null" {
		if !json.Valid(body) {
			return nil, request.Errorf(http.StatusBadRequest, "the request body must be JSON (the run's input), or empty")
		}
		trigger["input"] = json.RawMessage(request.Compact(body))
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return nil, err
	}
	res, err := s.dp.RunSource(r.Context(), dataplane.RunSourceParams{Tenant: tenantOf(r), Pipeline: r.PathValue("name"),
		Job: r.PathValue("job"), Key: key, Trigger: trigger})
	if err != nil {
		return nil, err
	}
	return runAnswer(res), nil
}

// POST /webhooks/{path}: a task of the webhook source job whose webhook_path is /{path}, in the
// tenant's active pipelines. The body (JSON, or else text) is the trigger's body.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	trigger := map[string]any{"path": "/" + r.PathValue("path"), "content_type": r.Header.Get("Content-Type")}
	switch {
	case len(strings.TrimSpace(string(body))) == 0:
		trigger["body"] = nil
	case json.Valid(body):
		trigger["body"] = json.RawMessage(request.Compact(body))
	default:
		trigger["body"] = string(body)
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return nil, err
	}
	res, err := s.dp.RunSource(r.Context(), dataplane.RunSourceParams{Tenant: tenantOf(r), WebhookPath: "/" + r.PathValue("path"),
		Key: key, Trigger: trigger})
	if err != nil {
		return nil, err
	}
	return runAnswer(res), nil
}

func runAnswer(res *dataplane.RunSourceResult) any {
	out := map[string]any{"pipeline": res.Pipeline, "job": res.Job, "job_id": res.JobID, "task_id": res.TaskID, "created": res.Created}
	if res.Created {
		return created{out}
	}
	return out
}

// lacksPushTarget reports whether j is a lambda job whose operator has no push target on this
// server (false when the server does not know its targets).
func (s *Server) lacksPushTarget(j dataplane.PipelineJobView) bool {
	if s.pushTargets == nil || j.Runtime != pipeline.RuntimeLambda {
		return false
	}
	_, ok := s.pushTargets[j.Operator]
	return !ok
}

// waitingForTarget is what a task of a lambda job of operator op waits for when the server has
// no push target for op (a task's waitingFor, a pipeline job's waiting_for).
func waitingForTarget(op string) string {
	return fmt.Sprintf("a push target for operator %q (baton server --push-target %s=URL)", op, op)
}

// pushWarnings are a deploy answer's warnings about its lambda jobs whose operator has no push
// target on this server. The deploy stands: whether a document is valid never depends on the
// replica's flags. Their tasks wait for a target, or, on baton dev, go to pull workers.
func (s *Server) pushWarnings(jobs []dataplane.PipelineJobView) []string {
	var ws []string
	for _, j := range jobs {
		if !s.lacksPushTarget(j) {
			continue
		}
		if s.dp.LambdaOnPull(j.Operator) {
			ws = append(ws, fmt.Sprintf("job %s: no push target for operator %q: baton dev hands its tasks to pull workers of queue %q instead (baton worker --task %s --queue %s)",
				j.Name, j.Operator, j.Queue, j.Operator, j.Queue))
		} else {
			ws = append(ws, fmt.Sprintf("job %s: no push target for operator %q on this server: its tasks wait, pending, until one is configured (baton server --push-target %s=URL)",
				j.Name, j.Operator, j.Operator))
		}
	}
	return ws
}
