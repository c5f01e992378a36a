package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// pipelineSpec is a deployed pipeline version as routing and sources read it: each job with its
// defaults applied and every dataset it reads or writes by uuid. It is stored with the version,
// which never changes.
type pipelineSpec struct {
	Tenant  string     `json:"tenant"`
	Name    string     `json:"name"`
	Version string     `json:"version"`
	Jobs    []*jobSpec `json:"jobs"`
	// Build is set on a version a changed deploy created to be built beside the active version:
	// what it rebuilds, and the dataset versions it rebuilds them at.
	Build *buildPlan `json:"build,omitempty"`
}

// jobSpec is one job of a pipelineSpec.
type jobSpec struct {
	Name                    string `json:"name"`
	Activation              string `json:"activation"`
	Runtime                 string `json:"runtime"`
	Operator                string `json:"operator"`
	Queue                   string `json:"queue"`
	Strategy                string `json:"execution_strategy,omitempty"`
	Priority                int    `json:"priority"`
	MaxAttempts             int    `json:"max_attempts,omitempty"`
	TimeoutSeconds          int    `json:"timeout_seconds,omitempty"`
	HeartbeatTimeoutSeconds int    `json:"heartbeat_timeout_seconds,omitempty"`
	// IdleTimeoutSeconds is the job's idle_timeout, nil for never; its tasks' claims carry it.
	IdleTimeoutSeconds *float64 `json:"idle_timeout_seconds,omitempty"`
	// UpdateStrategy and UniqueKey are the job's; its tasks' claims carry them.
	UpdateStrategy string   `json:"update_strategy,omitempty"`
	UniqueKey      []string `json:"unique_key,omitempty"`
	MaxConcurrency int      `json:"max_concurrency,omitempty"`
	// MaxQueueDepth and MaxQueueAgeSeconds are a reactive job's backpressure limits (zero:
	// none); BackpressureMode is "pause" when either is set.
	MaxQueueDepth      int             `json:"max_queue_depth,omitempty"`
	MaxQueueAgeSeconds float64         `json:"max_queue_age_seconds,omitempty"`
	BackpressureMode   string          `json:"backpressure_mode,omitempty"`
	Config             json.RawMessage `json:"config"`
	SourceKind         string          `json:"source_kind,omitempty"`
	Schedule           string          `json:"schedule,omitempty"`
	WebhookPath        string          `json:"webhook_path,omitempty"`
	// Secrets are the names of the secrets the job's tasks need; shown, not yet delivered.
	Secrets []string     `json:"secrets,omitempty"`
	Inputs  []inputSpec  `json:"inputs"`
	Outputs []outputSpec `json:"outputs"`
}

// inputSpec is one input of a job: the dataset it reads and the filter its tasks apply.
type inputSpec struct {
	DatasetUUID string          `json:"dataset_uuid"`
	DatasetName string          `json:"dataset_name,omitempty"`
	Where       json.RawMessage `json:"where,omitempty"`
}

// outputSpec is one output of a job: the dataset it writes.
type outputSpec struct {
	OutputIndex int    `json:"output_index"`
	DatasetUUID string `json:"dataset_uuid"`
	DatasetName string `json:"dataset_name,omitempty"`
}

// specCache keeps the specs of pipeline versions read so far: versions never change.
type specCache struct{ m sync.Map } // "tenant\x00pipeline\x00version" → *pipelineSpec

// get returns a version's spec, reading it from st the first time.
func (c *specCache) get(ctx context.Context, st store.Reader, tenant, pipeline, version string) (*pipelineSpec, error) {
	key := tenant + "\x00" + pipeline + "\x00" + version
	if s, ok := c.m.Load(key); ok {
		return s.(*pipelineSpec), nil
	}
	v, err := st.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: pipeline, Version: version})
	if err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: %w", pipeline, version, err)
	}
	s, err := decodeSpec(v)
	if err != nil {
		return nil, err
	}
	c.m.Store(key, s)
	return s, nil
}

func decodeSpec(v *store.PipelineVersion) (*pipelineSpec, error) {
	var s pipelineSpec
	if err := json.Unmarshal(v.Spec, &s); err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: decode spec: %w", v.Pipeline, v.Version, err)
	}
	return &s, nil
}

func (s *pipelineSpec) job(name string) *jobSpec {
	for _, j := range s.Jobs {
		if j.Name == name {
			return j
		}
	}
	return nil
}

// routes reports whether an event of ds reaches consumer cs of this version: for the active
// version, an event of the dataset's current version; for a building version, one of the version
// its build makes of the dataset, or of the current version of a dataset it does not rebuild, and
// only for the jobs it rebuilds.
func (s *pipelineSpec) routes(cs *store.Consumer, e *intake.Routed, ds *store.Dataset) bool {
	if ds == nil {
		return false
	}
	if !cs.Building {
		return e.DatasetVersion == ds.CurrentVersion
	}
	if s.Build == nil || s.Build.Jobs[cs.Job] == "" {
		return false
	}
	if pin, ok := s.Build.Pointers[e.DatasetUUID]; ok {
		return e.DatasetVersion == pin
	}
	return e.DatasetVersion == ds.CurrentVersion
}

// inputOf is the input of j that reads dataset uuid: prefer when it does, else the first that
// does; -1 when none does, or j is nil.
func (j *jobSpec) inputOf(uuid string, prefer int) int {
	if j == nil {
		return -1
	}
	if prefer >= 0 && prefer < len(j.Inputs) && j.Inputs[prefer].DatasetUUID == uuid {
		return prefer
	}
	for i, in := range j.Inputs {
		if in.DatasetUUID == uuid {
			return i
		}
	}
	return -1
}

// datasetUUIDs lists every dataset the version's jobs read or write.
func (s *pipelineSpec) datasetUUIDs() []string {
	var out []string
	for _, j := range s.Jobs {
		for _, in := range j.Inputs {
			out = append(out, in.DatasetUUID)
		}
		for _, o := range j.Outputs {
			out = append(out, o.DatasetUUID)
		}
	}
	return out
}

// taskRuntime is how the job's tasks are run: "push" to a push target for lambda jobs (unless
// onPull hands the operator's to pull workers: Config.LambdaOnPull), else "pull" (by workers, or
// by the server itself for dispatcher jobs, on their reserved queue).
func (j *jobSpec) taskRuntime(onPull func(op string) bool) string {
	if j.Runtime == pipeline.RuntimeLambda && (onPull == nil || !onPull(j.Operator)) {
		return "push"
	}
	return "pull"
}

// taskQueue is the queue of the job's tasks: the server's own for dispatcher jobs.
func (j *jobSpec) taskQueue() string {
	if j.Runtime == pipeline.RuntimeDispatcher {
		return ControlQueue
	}
	return j.Queue
}

// route builds the route of a task of j: started by event e on input fired (e nil, fired -1: a
// source task, with trigger describing what started it). Its datasets are at their current
// versions, but those pins names, by dataset uuid: a build's task reads and writes the versions
// its build makes.
func (j *jobSpec) route(s *pipelineSpec, known *knownDatasets, fired int, e *intake.Routed, trigger json.RawMessage, pins map[string]string) json.RawMessage {
	r := wire.Route{Job: wire.PipelineJob{DAGName: s.Name, Name: j.Name, Version: s.Version, IdleTimeoutSeconds: j.IdleTimeoutSeconds,
		UpdateStrategy: j.UpdateStrategy, UniqueKey: j.UniqueKey},
		Trigger: trigger,
		Inputs:  make([]wire.DatasetInput, len(j.Inputs)), Outputs: make([]wire.DatasetOutput, len(j.Outputs))}
	for i, in := range j.Inputs {
		ri := wire.DatasetInput{InputIndex: i, DatasetUUID: in.DatasetUUID, DatasetName: in.DatasetName, Where: in.Where}
		if ds := known.datasets[in.DatasetUUID]; ds != nil {
			ri.DatasetVersion = ds.CurrentVersion
		}
		if v, ok := pins[in.DatasetUUID]; ok {
			ri.DatasetVersion = v
		}
		if i == fired && e != nil {
			ri.DatasetVersion, ri.Cursor, ri.CursorEnd, ri.PartitionKey, ri.Start, ri.End = e.DatasetVersion, e.Cursor, e.CursorEnd, e.PartitionKey, e.Start, e.End
		}
		ri.StorageRef = known.storageRef(ri.DatasetUUID, ri.DatasetVersion)
		r.Inputs[i] = ri
	}
	for i, o := range j.Outputs {
		ro := wire.DatasetOutput{OutputIndex: o.OutputIndex, DatasetUUID: o.DatasetUUID, DatasetName: o.DatasetName}
		if ds := known.datasets[o.DatasetUUID]; ds != nil {
			ro.DatasetVersion, ro.WriteMode = ds.CurrentVersion, ds.WriteMode
		}
		if v, ok := pins[o.DatasetUUID]; ok {
			ro.DatasetVersion = v
		}
		r.Outputs[i] = ro
	}
	b, _ := json.Marshal(r)
	return b
}

// inputMayMatch reports whether input i's where may match a row with the given values (see
// pipeline.MayMatch).
func (j *jobSpec) inputMayMatch(i int, values map[string][]any) bool {
	if i < 0 || i >= len(j.Inputs) || len(j.Inputs[i].Where) == 0 {
		return true
	}
	var where map[string]any
	if err := json.Unmarshal(j.Inputs[i].Where, &where); err != nil {
		return true
	}
	return pipeline.MayMatch(where, values)
}
