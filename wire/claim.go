package wire

import (
	"bytes"
	"encoding/json"
	"time"
)

// What a worker is handed when it claims a task, in each dialect: the stream-worker dialect's
// StreamClaim, the internal dialect's InternalClaim with its Task, and the push runtime's
// PushEnvelope. The server renders each from one claim; the worker SDK reads the first two.

// Time is a moment as the internal dialect and the push envelope write it: RFC 3339 in UTC to
// the second, or null for none. Reading accepts any RFC 3339 time.
type Time struct{ time.Time }

// MilliTime is a moment as the stream-worker dialect writes it: RFC 3339 in UTC to the
// millisecond, or null for none. Reading accepts any RFC 3339 time.
type MilliTime struct{ time.Time }

// MarshalJSON writes t to the second, or null.
func (t Time) MarshalJSON() ([]byte, error) { return marshalTime(t.Time, time.RFC3339) }

// UnmarshalJSON reads an RFC 3339 time or null.
func (t *Time) UnmarshalJSON(b []byte) error { return unmarshalTime(b, &t.Time) }

// MarshalJSON writes t to the millisecond, or null.
func (t MilliTime) MarshalJSON() ([]byte, error) {
	return marshalTime(t.Time, "2006-01-02T15:04:05.000Z07:00")
}

// UnmarshalJSON reads an RFC 3339 time or null.
func (t *MilliTime) UnmarshalJSON(b []byte) error { return unmarshalTime(b, &t.Time) }

func marshalTime(t time.Time, layout string) ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	b := make([]byte, 0, len(layout)+8)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, layout)
	return append(b, '"'), nil
}

func unmarshalTime(b []byte, t *time.Time) error {
	if bytes.Equal(b, []byte("null")) {
		*t = time.Time{}
		return nil
	}
	var s string
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' && bytes.IndexByte(b, '\\') < 0 {
		s = string(b[1 : n-1]) // claims are the hottest answers: no decoder for a plain string
	} else if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = at
	return nil
}

// StreamClaim is a task claimed through the stream-worker dialect.
//
// Payload is the task's input exactly as the producer sent it (an empty object when it sent
// none): clients of the dialect read their own fields from it. What Baton adds — the task's key
// and name, its job (run_id), its parents' outputs, its execution timeout — are its siblings.
type StreamClaim struct {
	Claimed    bool   `json:"claimed"`
	JobID      string `json:"job_id"` // the task id, in the dialect's name
	AttemptID  int    `json:"attempt_id"`
	LeaseToken string `json:"lease_token"`
	Stream     string `json:"stream"`     // the task's queue
	MessageID  string `json:"message_id"` // the wake-up's stream entry, to acknowledge; "" for none

	Payload                  json.RawMessage            `json:"payload"`
	TaskID                   string                     `json:"task_id"`
	TaskKey                  string                     `json:"task_key"`
	TaskName                 string                     `json:"task_name"`
	RunID                    string                     `json:"run_id"` // the task's job
	DependencyOutputs        map[string]json.RawMessage `json:"dependency_outputs"`
	TimeoutSeconds           *float64                   `json:"timeout_seconds"` // null: no execution deadline
	LeaseTTLSeconds          float64                    `json:"lease_ttl_seconds"`
	HeartbeatIntervalSeconds float64                    `json:"heartbeat_interval_seconds"`
	LeaseExpiresAt           MilliTime                  `json:"lease_expires_at"`
	CapabilityToken          string                     `json:"capability_token"`
	CapabilityTokenExpiresAt MilliTime                  `json:"capability_token_expires_at"`
	// Traceparent is the W3C trace context of the task's job, for the worker's spans; left out
	// when the job has none.
	Traceparent string `json:"traceparent,omitempty"`
	// A pipeline task's data-plane part, all set or all left out.
	Job      *PipelineJob     `json:"job,omitempty"`
	Operator string           `json:"operator,omitempty"`
	Config   json.RawMessage  `json:"config,omitempty"`
	Inputs   *[]DatasetInput  `json:"inputs,omitempty"`
	Outputs  *[]DatasetOutput `json:"outputs,omitempty"`
	Trigger  json.RawMessage  `json:"trigger,omitempty"`
}

// InternalClaim is the internal dialect's answer to a claim that got its task (status
// "Claimed"); a refused claim is answered {"status": "NotClaimed", "reason", "detail"}.
type InternalClaim struct {
	Status                   string `json:"status"`
	TaskID                   string `json:"task_id"`
	Attempt                  int    `json:"attempt"`
	LeaseToken               string `json:"lease_token"`
	LeaseExpiresAt           Time   `json:"lease_expires_at"`
	CapabilityToken          string `json:"capability_token"`
	CapabilityTokenExpiresAt Time   `json:"capability_token_expires_at"`
	HeartbeatIntervalSeconds int64  `json:"heartbeat_interval_seconds"`
	LeaseTTLSeconds          int64  `json:"lease_ttl_seconds"`
	Task                     *Task  `json:"task"`
	// Traceparent repeats the task's, beside it, as the stream dialect and the push envelope
	// have it.
	Traceparent string `json:"traceparent,omitempty"`
}

// Task is everything a worker of the internal dialect needs to run a task, as its claim and
// GET /internal/task-fetch hand it out.
type Task struct {
	TaskID   string          `json:"task_id"`
	Attempt  int             `json:"attempt"`
	TaskKey  string          `json:"task_key"`
	Job      TaskJob         `json:"job"`
	Operator string          `json:"operator"` // the task's name
	Config   json.RawMessage `json:"config"`   // its input; {} when it has none
	// Inputs are, for a task of a submitted job, its parents' outputs ([]ParentOutput, by task
	// key); for a pipeline task, the datasets it reads ([]DatasetInput).
	Inputs            json.RawMessage            `json:"inputs"`
	DependencyOutputs map[string]json.RawMessage `json:"dependency_outputs"`
	Queue             string                     `json:"queue"`
	TimeoutSeconds    *int64                     `json:"timeout_seconds"` // null: no execution deadline
	Traceparent       string                     `json:"traceparent,omitempty"`
	// A pipeline task's outputs and what started it; left out for other tasks.
	Outputs *[]DatasetOutput `json:"outputs,omitempty"`
	Trigger json.RawMessage  `json:"trigger,omitempty"`
}

// TaskJob is the job of an internal dialect's Task. For a pipeline task it is its pipeline job.
type TaskJob struct {
	JobID   string  `json:"job_id"`
	DAGName *string `json:"dag_name"` // the job's name; null when it has none
	Name    string  `json:"name"`     // the task's key, or a pipeline task's pipeline job
	Version string  `json:"pipeline_version,omitempty"`
	// IdleTimeoutSeconds is a pipeline job's idle_timeout (see PipelineJob).
	IdleTimeoutSeconds *float64 `json:"idle_timeout_seconds,omitempty"`
	// UpdateStrategy and UniqueKey are a pipeline job's (see PipelineJob).
	UpdateStrategy string   `json:"update_strategy,omitempty"`
	UniqueKey      []string `json:"unique_key,omitempty"`
}

// ParentOutput is the output of one parent of a task of a submitted job.
type ParentOutput struct {
	TaskID string          `json:"task_id"` // the parent's key
	Output json.RawMessage `json:"output"`
}

// PushEnvelope is what the push runtime POSTs to a push target, in the callback dialect's
// camelCase. The target reports back with TaskToken.
type PushEnvelope struct {
	TaskID              string                     `json:"taskId"`
	RunID               string                     `json:"runId"` // the job
	TaskKey             string                     `json:"taskKey"`
	TaskName            string                     `json:"taskName"` // what the target runs: one URL may serve several names
	Queue               string                     `json:"queue"`
	TenantID            string                     `json:"tenantId"`
	Attempt             int                        `json:"attempt"`
	AttemptID           string                     `json:"attemptId"` // the attempt's id, which callbacks may send back to fence on
	LeaseToken          string                     `json:"leaseToken"`
	LeaseExpiresAt      Time                       `json:"leaseExpiresAt"`
	EnqueuedAt          Time                       `json:"enqueuedAt"` // when the task became claimable (ready, or due for its retry)
	Deadline            Time                       `json:"deadline"`   // null: no execution timeout
	Input               json.RawMessage            `json:"input"`
	DependencyOutputs   map[string]json.RawMessage `json:"dependencyOutputs"` // parent task key → output
	CallbackBaseURL     string                     `json:"callbackBaseUrl"`
	TaskToken           string                     `json:"taskToken"`
	TokenExpiresAt      Time                       `json:"tokenExpiresAt"`
	HeartbeatIntervalMs int64                      `json:"heartbeatIntervalMs"`
	HeartbeatTimeoutMs  int64                      `json:"heartbeatTimeoutMs"`
	CancelGracePeriodMs int64                      `json:"cancelGracePeriodMs"`
	IdempotencyKey      string                     `json:"idempotencyKey"` // also the Idempotency-Key header
	// A pipeline task's data plane, in the worker contracts' own names: its pipeline job, its
	// operator and config, the datasets it reads and writes, and what started it.
	Job      *PipelineJob    `json:"job,omitempty"`
	Operator string          `json:"operator,omitempty"`
	Config   json.RawMessage `json:"config,omitempty"`
	Inputs   []DatasetInput  `json:"inputs,omitempty"`
	Outputs  []DatasetOutput `json:"outputs,omitempty"`
	Trigger  json.RawMessage `json:"trigger,omitempty"`
	// Traceparent is the W3C trace context of the task's job, also sent as the traceparent
	// header; left out when the job has none.
	Traceparent string `json:"traceparent,omitempty"`
}

// FetchedTask is GET /internal/task-fetch's answer: the task as its claim handed it out, with
// where it stands now.
type FetchedTask struct {
	Task
	Status          string `json:"status"`           // Pending, Running, Completed, Failed, Canceled...
	LeaseExpiresAt  Time   `json:"lease_expires_at"` // null unless running
	CancelRequested bool   `json:"cancel_requested"`
}
