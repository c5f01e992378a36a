package client

import "encoding/json"

// Job statuses.
const (
	JobProcessing     = "processing"
	JobCompleted      = "completed"
	JobPartialFailure = "partial_failure"
	JobCanceled       = "canceled"
)

// Task statuses, in the producer API's words (a running task is "processing").
const (
	TaskWaiting    = "waiting"
	TaskPending    = "pending"
	TaskProcessing = "processing"
	TaskCompleted  = "completed"
	TaskFailed     = "failed"
	TaskCanceled   = "canceled"
	TaskSkipped    = "skipped"
)

// TaskStatuses lists the task statuses in the order of a task's life, as a progress map is
// best shown.
var TaskStatuses = []string{TaskWaiting, TaskPending, TaskProcessing, TaskCompleted, TaskFailed, TaskCanceled, TaskSkipped}

// Task is one node of a job's DAG as submitted. Optional fields left empty take the server's
// defaults.
type Task struct {
	TaskID    string          `json:"taskId"` // unique within the job: [a-zA-Z0-9_-]{1,128}
	Name      string          `json:"name"`   // the task type a worker knows how to run
	DependsOn []string        `json:"dependsOn,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	Queue     string          `json:"queue,omitempty"`
	Priority  int             `json:"priority,omitempty"`
	Runtime   string          `json:"runtime,omitempty"`

	MaxAttempts             *int   `json:"maxAttempts,omitempty"`
	BackoffBaseMs           *int64 `json:"backoffBaseMs,omitempty"`
	BackoffMaxMs            *int64 `json:"backoffMaxMs,omitempty"`
	TimeoutSeconds          *int   `json:"timeoutSeconds,omitempty"`
	HeartbeatTimeoutSeconds *int   `json:"heartbeatTimeoutSeconds,omitempty"`
	CancelGraceSeconds      *int   `json:"cancelGraceSeconds,omitempty"`
}

// SubmitJobRequest is the body of POST /jobs.
type SubmitJobRequest struct {
	Name  string `json:"name,omitempty"`
	Tasks []Task `json:"tasks"`
}

// SubmitJobResponse is the answer of POST /jobs. Times are Unix milliseconds, as on the wire.
type SubmitJobResponse struct {
	JobID      string   `json:"jobId"`
	Status     string   `json:"status"` // "created"
	TotalTasks int      `json:"totalTasks"`
	RootTasks  []string `json:"rootTasks"`
	CreatedAt  int64    `json:"createdAt"`
	// Replayed is true when an earlier submission with the same idempotency key created the
	// job and this answer repeats it (the Idempotent-Replayed header).
	Replayed bool `json:"-"`
}

// AddTasksResponse is the answer of POST /jobs/{jobId}/tasks.
type AddTasksResponse struct {
	JobID            string   `json:"jobId"`
	AddedTasks       []string `json:"addedTasks"`
	ImmediatelyReady []string `json:"immediatelyReady"`
	TotalTasksNow    int      `json:"totalTasksNow"`
}

// Job is a job in detail (GET /jobs/{jobId}).
type Job struct {
	JobID       string         `json:"jobId"`
	Name        string         `json:"name"`
	Status      string         `json:"status"` // JobProcessing, JobCompleted, ...
	TotalTasks  int            `json:"totalTasks"`
	Progress    map[string]int `json:"progress"` // tasks per status; every status is present
	CreatedAt   int64          `json:"createdAt"`
	CompletedAt *int64         `json:"completedAt"` // nil while processing
	Tasks       []JobTask      `json:"tasks"`
}

// Finished reports whether the job has reached a final status.
func (j *Job) Finished() bool { return j.Status != JobProcessing }

// JobTask is a task as a job's detail lists it.
type JobTask struct {
	TaskID        string   `json:"taskId"`
	ID            string   `json:"id"` // the server's global id of the task
	Name          string   `json:"name"`
	DependsOn     []string `json:"dependsOn"`
	Status        string   `json:"status"` // TaskWaiting, TaskPending, ...
	Attempt       int      `json:"attempt"`
	LastEventType string   `json:"lastEventType"`
	LastEventAt   *int64   `json:"lastEventAt"`
	// Output is the task's output once it has completed; JSON null before, and for other statuses.
	Output json.RawMessage `json:"output"`
	// Error is the task's error once it has failed for good; nil otherwise.
	Error *TaskError `json:"error"`
}

// JobSummary is a job as lists and the cancel and resume answers show it.
type JobSummary struct {
	JobID             string `json:"jobId"`
	Name              string `json:"name,omitempty"`
	Status            string `json:"status"`
	TotalTasks        int    `json:"totalTasks"`
	CreatedAt         int64  `json:"createdAt"`
	CompletedAt       *int64 `json:"completedAt,omitempty"`
	CancelRequestedAt *int64 `json:"cancelRequestedAt,omitempty"`
	// ResumedTasks are the taskIds a resume sent back to work (ResumeJob only).
	ResumedTasks []string `json:"resumedTasks,omitempty"`
}

// JobPage is one page of ListJobs.
type JobPage struct {
	Jobs []JobSummary `json:"jobs"`
	// NextCursor fetches the next page; empty on the last one.
	NextCursor string `json:"nextCursor"`
}

// ListOptions selects a page of ListJobs. Zero values take the server's defaults.
type ListOptions struct {
	Limit  int    // 1 to 100; the server's default is 20
	Cursor string // a previous page's NextCursor
	Status string // only jobs in this status
}

// TaskError is how a task attempt failed.
type TaskError struct {
	Category   string `json:"category"`
	Message    string `json:"message"`
	StackTrace string `json:"stackTrace,omitempty"`
	Retryable  *bool  `json:"retryable,omitempty"`
	Reason     string `json:"reason,omitempty"` // HEARTBEAT_TIMEOUT, CANCEL_TIMEOUT, ...
	Code       string `json:"code,omitempty"`
}

// TaskDetail is one task with its attempts (GET /jobs/{jobId}/tasks/{taskId}).
type TaskDetail struct {
	JobID             string                     `json:"jobId"`
	TaskID            string                     `json:"taskId"`
	ID                string                     `json:"id"`
	Name              string                     `json:"name"`
	Queue             string                     `json:"queue"`
	Priority          int                        `json:"priority"`
	Runtime           string                     `json:"runtime"`
	Status            string                     `json:"status"`
	DependsOn         []string                   `json:"dependsOn"`
	Input             json.RawMessage            `json:"input"`
	DependencyOutputs map[string]json.RawMessage `json:"dependencyOutputs"`
	Output            json.RawMessage            `json:"output"` // JSON null until it completes
	Error             *TaskError                 `json:"error"`
	Attempt           int                        `json:"attempt"`
	MaxAttempts       int                        `json:"maxAttempts"`
	AttemptsUsed      int                        `json:"attemptsUsed"`
	AvailableAt       *int64                     `json:"availableAt"`
	LeaseExpiresAt    *int64                     `json:"leaseExpiresAt"`
	WorkerID          string                     `json:"workerId"`
	CancelRequestedAt *int64                     `json:"cancelRequestedAt"`
	DeadLetteredAt    *int64                     `json:"deadLetteredAt"`
	CreatedAt         int64                      `json:"createdAt"`
	FinishedAt        *int64                     `json:"finishedAt"`
	LastEventType     string                     `json:"lastEventType"`
	LastEventAt       *int64                     `json:"lastEventAt"`
	Attempts          []Attempt                  `json:"attempts"`
}

// Attempt is one run of a task by a worker.
type Attempt struct {
	Attempt    int             `json:"attempt"`
	WorkerID   string          `json:"workerId"`
	StartedAt  int64           `json:"startedAt"`
	FinishedAt *int64          `json:"finishedAt"`
	Outcome    string          `json:"outcome"` // succeeded, failed, canceled, timed_out, ...; empty while it runs
	Result     string          `json:"result"`  // the task's status right after the outcome
	Error      *TaskError      `json:"error"`
	Metrics    json.RawMessage `json:"metrics"`
}

// Event is one entry of a job's audit log.
type Event struct {
	ID     int64           `json:"id"`
	Type   string          `json:"type"`   // "Job Created", "Task Completed", ...
	TaskID string          `json:"taskId"` // the producer's taskId; empty for job events
	At     int64           `json:"at"`
	Data   json.RawMessage `json:"data"`
}
