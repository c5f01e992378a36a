package pipeline

import (
	"encoding/json"
	"fmt"
	"time"
)

// Document is a valid DAG document with its defaults applied. It marshals to JSON in the
// document's own shape, which Parse reads back to the same Document.
type Document struct {
	Name string `json:"name"`
	// Version is the content hash of the document as written (see Parse). It is not part of the
	// document's shape, so a marshalled Document can be parsed again.
	Version  string              `json:"-"`
	Defaults Defaults            `json:"defaults"`
	Jobs     []Job               `json:"jobs"`
	Publish  map[string]*Publish `json:"publish,omitempty"`
}

// Defaults apply to every job that does not set the field itself. Zero means unset.
type Defaults struct {
	HeartbeatTimeoutSeconds int      `json:"heartbeat_timeout_seconds,omitempty"`
	TimeoutSeconds          int      `json:"timeout_seconds,omitempty"`
	MaxAttempts             int      `json:"max_attempts,omitempty"`
	Priority                *int     `json:"priority,omitempty"` // normalized: low -100, normal 0, high 100
	MaxQueueDepth           int      `json:"max_queue_depth,omitempty"`
	MaxQueueAge             Duration `json:"max_queue_age,omitempty"`
	BackpressureMode        string   `json:"backpressure_mode,omitempty"`
}

// Job values for activation, runtime and strategies.
const (
	ActivationSource   = "source"
	ActivationReactive = "reactive"

	RuntimeLambda      = "lambda"
	RuntimeECSPlatform = "ecs_platform"
	RuntimeDispatcher  = "dispatcher"
	// RuntimeECSUDF runs untrusted user code: a bundle, or a `baton worker --exec` child, never
	// given a secret.
	RuntimeECSUDF = "ecs_udf"

	PerUpdate    = "PerUpdate"
	PerPartition = "PerPartition"

	UpdateAppend  = "append"
	UpdateReplace = "replace"
)

// Job is one node of the DAG, with the document's defaults applied: a zero HeartbeatTimeoutSeconds
// or MaxAttempts means the server's default; TimeoutSeconds is the runtime's default unless set
// (RuntimeTimeoutSeconds; 0: none); Queue is the operator unless set; Config is at least {}; a
// reactive job's ExecutionStrategy is PerUpdate unless set.
type Job struct {
	Name                    string     `json:"name"`
	Activation              string     `json:"activation"`
	Runtime                 string     `json:"runtime"`
	Operator                string     `json:"operator"`
	Queue                   string     `json:"queue"`
	Outputs                 int        `json:"outputs"`
	Inputs                  []Input    `json:"inputs,omitempty"`
	ExecutionStrategy       string     `json:"execution_strategy,omitempty"`
	UpdateStrategy          string     `json:"update_strategy,omitempty"`
	UniqueKey               []string   `json:"unique_key,omitempty"`
	Source                  *Source    `json:"source,omitempty"`
	Bootstrap               *Bootstrap `json:"bootstrap,omitempty"`
	Secrets                 []string   `json:"secrets,omitempty"`
	Scaling                 *Scaling   `json:"scaling,omitempty"`
	TimeoutSeconds          int        `json:"timeout_seconds,omitempty"`
	HeartbeatTimeoutSeconds int        `json:"heartbeat_timeout_seconds,omitempty"`
	MaxAttempts             int        `json:"max_attempts,omitempty"`
	Priority                int        `json:"priority"`
	MaxQueueDepth           int        `json:"max_queue_depth,omitempty"`
	MaxQueueAge             Duration   `json:"max_queue_age,omitempty"`
	// IdleTimeout is how long the workers of the job's queue stay with nothing to claim before
	// they exit: 0 as soon as the queue is empty; nil never (the default).
	IdleTimeout      *Duration       `json:"idle_timeout,omitempty"`
	BackpressureMode string          `json:"backpressure_mode,omitempty"`
	Config           json.RawMessage `json:"config"`
	UDF              *UDF            `json:"udf,omitempty"`
}

// Input is one edge into a reactive job.
type Input struct {
	From From `json:"from"`
	// Where filters the input: every key must equal its value (AND across keys), or be one of
	// the values when the value is a list (IN). A value is a string, a json.Number, a bool, or a
	// non-empty []any of those.
	Where map[string]any `json:"where,omitempty"`
}

// From names what an input reads: an output of a job of this DAG (Job and Output) or a published
// dataset (Dataset), never both.
type From struct {
	Job     string `json:"job,omitempty"`
	Output  *int   `json:"output,omitempty"`
	Dataset string `json:"dataset,omitempty"`
}

// Source kinds.
const (
	SourceCron     = "cron"
	SourceAlwaysOn = "always_on"
	SourceManual   = "manual"
	SourceWebhook  = "webhook"
)

// Source says what starts a source job. Schedule is set for cron (parse it with ParseSchedule),
// WebhookPath for webhook.
type Source struct {
	Kind        string `json:"kind"`
	Schedule    string `json:"schedule,omitempty"`
	WebhookPath string `json:"webhook_path,omitempty"`
}

// Bootstrap is a source job's bootstrap: with ResetOutputs, the job's outputs are reset each time
// a deploy activates a version of the pipeline that holds it (see docs/contracts/pipelines.md).
type Bootstrap struct {
	ResetOutputs bool `json:"reset_outputs"`
}

type Scaling struct {
	MaxConcurrency int `json:"max_concurrency"`
}

// UDF names the user code bundle a job runs.
type UDF struct {
	BundleID   string `json:"bundle_id"`
	Entrypoint string `json:"entrypoint"`
}

// Publish storage and write modes.
const (
	StoragePostgres = "postgres"
	StorageS3       = "s3"

	WriteDirect   = "direct"
	WriteBuffered = "buffered"
)

// Publish names a job's output as a dataset. Storage and WriteMode are always set (postgres and
// direct by default); Schema is set whenever WriteMode is buffered.
type Publish struct {
	Dataset      string    `json:"-"` // the key of the entry in Document.Publish
	From         JobOutput `json:"from"`
	Storage      string    `json:"storage"`
	WriteMode    string    `json:"write_mode"`
	Schema       *Schema   `json:"schema,omitempty"`
	FilterFields []string  `json:"filter_fields,omitempty"`
}

type JobOutput struct {
	Job    string `json:"job"`
	Output int    `json:"output"`
}

type Schema struct {
	Columns []Column   `json:"columns"`
	Unique  []string   `json:"unique,omitempty"`
	Indexes [][]string `json:"indexes,omitempty"`
}

// Column types, after aliases (text, bigint, jsonb, ...) are normalized.
const (
	TypeString    = "string"
	TypeInteger   = "integer"
	TypeNumber    = "number"
	TypeBoolean   = "boolean"
	TypeTimestamp = "timestamp"
	TypeJSON      = "json"
)

type Column struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required,omitempty"`
}

// Duration is a time.Duration written as Go's duration text ("5m", "1h30m").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}
