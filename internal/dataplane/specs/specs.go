// Package specs is a deployed pipeline version as routing, sources and builds read it: each job
// with its defaults applied and every dataset it reads or writes by uuid, the routes of the tasks
// it creates, and its jobs' backpressure Limits. A version's spec is stored with it and never
// changes.
package specs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// Pipeline is a deployed pipeline version as routing and sources read it: each job with its
// defaults applied and every dataset it reads or writes by uuid. It is stored with the version,
// which never changes.
type Pipeline struct {
	Tenant  string `json:"tenant"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Jobs    []*Job `json:"jobs"`
	// Build is set on a version a changed deploy created to be built beside the active version:
	// what it rebuilds, and the dataset versions it rebuilds them at.
	Build *BuildPlan `json:"build,omitempty"`
}

// Job is one job of a Pipeline.
type Job struct {
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
	// MaxQueueDepth and MaxQueueAgeSeconds are a reactive job's backpressure Limits (zero:
	// none); BackpressureMode is "pause" when either is set.
	MaxQueueDepth      int             `json:"max_queue_depth,omitempty"`
	MaxQueueAgeSeconds float64         `json:"max_queue_age_seconds,omitempty"`
	BackpressureMode   string          `json:"backpressure_mode,omitempty"`
	Config             json.RawMessage `json:"config"`
	SourceKind         string          `json:"source_kind,omitempty"`
	Schedule           string          `json:"schedule,omitempty"`
	WebhookPath        string          `json:"webhook_path,omitempty"`
	// Secrets are the names of the secrets the job's tasks need; shown, not yet delivered.
	Secrets []string `json:"secrets,omitempty"`
	// Bundle is the user code bundle the job runs (its udf's bundle_id); "" none. UDF is that
	// bundle as the deploy pinned it (nil in versions deployed before bundles could be uploaded).
	Bundle  string       `json:"bundle,omitempty"`
	UDF     *wire.Bundle `json:"udf,omitempty"`
	Inputs  []Input      `json:"inputs"`
	Outputs []Output     `json:"outputs"`
}

// Input is one input of a job: the dataset it reads and the filter its tasks apply.
type Input struct {
	DatasetUUID string          `json:"dataset_uuid"`
	DatasetName string          `json:"dataset_name,omitempty"`
	Where       json.RawMessage `json:"where,omitempty"`
}

// Output is one output of a job: the dataset it writes.
type Output struct {
	OutputIndex int    `json:"output_index"`
	DatasetUUID string `json:"dataset_uuid"`
	DatasetName string `json:"dataset_name,omitempty"`
}

// Cache keeps the specs of pipeline versions read so far: versions never change.
type Cache struct{ m sync.Map } // "tenant\x00pipeline\x00version" → *Pipeline

// Get returns a version's spec, reading it from st the first time.
func (c *Cache) Get(ctx context.Context, st store.Reader, tenant, pipeline, version string) (*Pipeline, error) {
	key := tenant + "\x00" + pipeline + "\x00" + version
	if s, ok := c.m.Load(key); ok {
		return s.(*Pipeline), nil
	}
	v, err := st.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: pipeline, Version: version})
	if err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: %w", pipeline, version, err)
	}
	s, err := Decode(v)
	if err != nil {
		return nil, err
	}
	c.m.Store(key, s)
	return s, nil
}

func Decode(v *store.PipelineVersion) (*Pipeline, error) {
	var s Pipeline
	if err := json.Unmarshal(v.Spec, &s); err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: decode spec: %w", v.Pipeline, v.Version, err)
	}
	return &s, nil
}

func (s *Pipeline) Job(name string) *Job {
	for _, j := range s.Jobs {
		if j.Name == name {
			return j
		}
	}
	return nil
}

// Routes reports whether an event of ds reaches consumer cs of this version: for the active
// version, an event of the dataset's current version; for a building version, one of the version
// its build makes of the dataset, or of the current version of a dataset it does not rebuild, and
// only for the jobs it rebuilds.
func (s *Pipeline) Routes(cs *store.Consumer, e *intake.Routed, ds *store.Dataset) bool {
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

// InputOf is the input of j that reads dataset uuid: prefer when it does, else the first that
// does; -1 when none does, or j is nil.
func (j *Job) InputOf(uuid string, prefer int) int {
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

// DatasetUUIDs lists every dataset the version's jobs read or write.
func (s *Pipeline) DatasetUUIDs() []string {
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

// TaskRuntime is how the job's tasks are run: "push" to a push target for lambda jobs (unless
// onPull hands the operator's to pull workers: Config.LambdaOnPull), else "pull" (by workers, or
// by the server itself for dispatcher jobs, on their reserved queue).
func (j *Job) TaskRuntime(onPull func(op string) bool) string {
	if j.Runtime == pipeline.RuntimeLambda && (onPull == nil || !onPull(j.Operator)) {
		return "push"
	}
	return "pull"
}

// TaskQueue is the queue of the job's tasks: the server's own for dispatcher jobs.
func (j *Job) TaskQueue() string {
	if j.Runtime == pipeline.RuntimeDispatcher {
		return ControlQueue
	}
	return j.Queue
}

// Consumers is the routing rows of the spec's reactive jobs.
func (s *Pipeline) Consumers() []*store.Consumer {
	var out []*store.Consumer
	for _, j := range s.Jobs {
		for i, in := range j.Inputs {
			out = append(out, &store.Consumer{DatasetUUID: in.DatasetUUID, Tenant: s.Tenant, Pipeline: s.Name,
				Version: s.Version, Job: j.Name, InputIndex: i})
		}
	}
	return out
}

// Route builds the route of a task of j: started by event e on input fired (e nil, fired -1: a
// source task, with trigger describing what started it). Its datasets are at their current
// versions, but those pins names, by dataset uuid: a build's task reads and writes the versions
// its build makes.
func (j *Job) Route(s *Pipeline, known *Known, fired int, e *intake.Routed, trigger json.RawMessage, pins map[string]string) json.RawMessage {
	r := wire.Route{Job: wire.PipelineJob{DAGName: s.Name, Name: j.Name, Version: s.Version, IdleTimeoutSeconds: j.IdleTimeoutSeconds,
		UpdateStrategy: j.UpdateStrategy, UniqueKey: j.UniqueKey, Runtime: j.Runtime, Bundle: j.Bundle, Secrets: j.Secrets, UDF: j.UDF},
		Trigger: trigger,
		Inputs:  make([]wire.DatasetInput, len(j.Inputs)), Outputs: make([]wire.DatasetOutput, len(j.Outputs))}
	for i, in := range j.Inputs {
		ri := wire.DatasetInput{InputIndex: i, DatasetUUID: in.DatasetUUID, DatasetName: in.DatasetName, Where: in.Where}
		if ds := known.Datasets[in.DatasetUUID]; ds != nil {
			ri.DatasetVersion = ds.CurrentVersion
		}
		if v, ok := pins[in.DatasetUUID]; ok {
			ri.DatasetVersion = v
		}
		if i == fired && e != nil {
			ri.DatasetVersion, ri.Cursor, ri.CursorEnd, ri.PartitionKey, ri.Start, ri.End = e.DatasetVersion, e.Cursor, e.CursorEnd, e.PartitionKey, e.Start, e.End
		}
		ri.StorageRef = known.StorageRef(ri.DatasetUUID, ri.DatasetVersion)
		r.Inputs[i] = ri
	}
	for i, o := range j.Outputs {
		ro := wire.DatasetOutput{OutputIndex: o.OutputIndex, DatasetUUID: o.DatasetUUID, DatasetName: o.DatasetName}
		if ds := known.Datasets[o.DatasetUUID]; ds != nil {
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

// InputMayMatch reports whether input i's where may match a row with the given values (see
// pipeline.MayMatch).
func (j *Job) InputMayMatch(i int, values map[string][]any) bool {
	if i < 0 || i >= len(j.Inputs) || len(j.Inputs[i].Where) == 0 {
		return true
	}
	var where map[string]any
	if err := json.Unmarshal(j.Inputs[i].Where, &where); err != nil {
		return true
	}
	return pipeline.MayMatch(where, values)
}

// ControlQueue is the queue of the tasks of dispatcher-runtime jobs, which the server runs itself
// (see Controller). Workers do not claim from it.
const ControlQueue = "baton.dispatcher"

// Known holds the datasets a transaction has read, with the storage references of their
// registered versions.
type Known struct {
	Datasets map[string]*store.Dataset
	refs     map[string]json.RawMessage // "uuid\x00version" → storage_ref
}

// NewKnown returns a Known that holds nothing yet.
func NewKnown() *Known {
	return &Known{Datasets: map[string]*store.Dataset{}, refs: map[string]json.RawMessage{}}
}

// Load reads the datasets of uuids that k does not hold yet, and their versions.
func (k *Known) Load(ctx context.Context, tx store.Tx, uuids []string) error {
	var missing []string
	for _, u := range sortedUnique(uuids) {
		if _, ok := k.Datasets[u]; !ok {
			missing = append(missing, u)
		}
	}
	ds, err := tx.DatasetGetMany(ctx, missing)
	if err != nil {
		return err
	}
	for _, d := range ds {
		k.Datasets[d.UUID] = d
	}
	vs, err := tx.DatasetVersionList(ctx, missing...)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if len(v.StorageRef) > 0 {
			k.refs[v.DatasetUUID+"\x00"+v.Version] = v.StorageRef
		}
	}
	return nil
}

// StorageRef is where a dataset version's data is, as datasets_published registered it; null
// when it was not.
func (k *Known) StorageRef(uuid, version string) json.RawMessage {
	if ref, ok := k.refs[uuid+"\x00"+version]; ok {
		return ref
	}
	return json.RawMessage("null")
}

// sortedUnique returns ss sorted, without repeats.
func sortedUnique(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}
