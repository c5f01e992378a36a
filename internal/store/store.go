// Package store is the seam between the dispatcher and its database: the domain records, the
// Store interface every driver implements, and the sentinel errors drivers translate into.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
)

var (
	// ErrNotFound: no row with that id.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique key is taken (e.g. a job's idempotency key).
	ErrConflict = errors.New("conflict")
	// ErrLeaseLost: a fenced write matched no row; the caller no longer owns the state it read.
	ErrLeaseLost = errors.New("lease lost")
	// ErrUnreachable: the store found its database unreachable (Reachability) and did not send
	// the work. It is transient: the same work may succeed once the database answers again.
	ErrUnreachable = errors.New("the database is unreachable")
)

// Reachability is implemented by stores that watch whether their database answers (PostgreSQL,
// when asked to). While it does not, work fails at once with an error wrapping ErrUnreachable
// instead of waiting on a connection that will not answer, and work that was waiting is cut
// short: callers should answer "try again later" rather than retry on their own.
type Reachability interface {
	// Unreachable returns nil while the database answers, else an error wrapping ErrUnreachable
	// that says since when and why.
	Unreachable() error
}

// Store is the only source of truth. Every state change runs inside InTx; reads outside a
// transaction use the Reader methods.
type Store interface {
	Reader
	Keys
	Bundles
	Workers
	// InTx runs fn in one read-write transaction, once, and commits when fn returns nil. It does
	// not retry: a failure for which Transient is true may be followed by running the whole
	// transaction again, which is the caller's decision.
	InTx(ctx context.Context, fn func(Tx) error) error
	// Transient reports whether err is a failure of the database rather than of the request: a
	// deadlock, a serialization failure, a connection lost or refused, a backend shut down. The
	// same work may succeed if it is done again. After a connection was lost during a commit the
	// transaction may have committed: work that is done again must then find its own result.
	Transient(err error) bool
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	Close() error
}

// Reader holds the queries, one interface per aggregate. Inside a Tx, JobGet and TaskGet lock the
// row for the rest of the transaction where the database supports row locks.
type Reader interface {
	JobReader
	TaskReader
	AttemptReader
	EventReader
	OutboxReader
	PipelineReader
	DatasetReader
	BufferReader
	QueryAuditReader
	OutputResetReader
	BackpressureReader
	PartitionCommitReader
}

// QueueStats is a tenant's view of its queues (Reader.QueueStats).
type QueueStats struct {
	Queues  []*QueueStat  // by queue name
	Workers []*WorkerSeen // most recent claim first
}

// QueueStat counts one queue's tasks.
type QueueStat struct {
	Queue        string
	Ready        int       // pending and claimable now
	Delayed      int       // pending, not claimable before a later time (a retry's backoff)
	Running      int       // claimed by a worker
	DeadLettered int       // failed for good, until resumed
	OldestReady  time.Time // when the longest-waiting ready task became claimable; zero if none
	Completed    int       // tasks completed within the window
}

// WorkerSeen is a worker that claimed a task of a queue within the window, or still runs one.
type WorkerSeen struct {
	WorkerID  string
	Queue     string
	LastClaim time.Time
	Running   int // tasks of the queue it runs now
}

// QueueStatsParams is the input of Reader.QueueStats.
type QueueStatsParams struct {
	Tenant string
	// Now is the time the stats are taken at: what is ready and delayed is judged at Now.
	Now time.Time
	// Window is how far back before Now completions count, and claims make a worker seen.
	Window time.Duration
}

// DeadLettered is the TaskCount.State of failed, dead-lettered tasks.
const DeadLettered = "dead_lettered"

// TaskCount is how many tasks of a queue are in a state (Reader.TaskCounts).
type TaskCount struct {
	Queue string
	State string // waiting, pending, running or DeadLettered
	N     int
}

// OutboxBacklog is the outbox's unsent messages (Reader.OutboxBacklog).
type OutboxBacklog struct {
	Unsent int
	// OldestAvailableAt is the earliest AvailableAt of an unsent message; zero when none is.
	OldestAvailableAt time.Time
}

// Listener is implemented by stores shared between processes (PostgreSQL): Listen calls fn each
// time any process commits a transaction that called Tx.TaskReadyNotify, until ctx ends.
type Listener interface {
	Listen(ctx context.Context, fn func()) error
}

// Keys stores producer API keys and counts their use.
type Keys interface {
	APIKeyInsert(ctx context.Context, k *APIKey) error
	// APIKeyGetByHash finds a key, revoked or not, by the SHA-256 of its secret.
	APIKeyGetByHash(ctx context.Context, secretHash string) (*APIKey, error)
	APIKeyList(ctx context.Context) ([]*APIKey, error)
	// APIKeyRevoke marks a key revoked; ErrNotFound if there is no such key.
	APIKeyRevoke(ctx context.Context, id string, at time.Time) error
	// APIKeyCountRequest adds one to a key's count for a UTC day ("2006-01-02") and returns the new
	// count.
	APIKeyCountRequest(ctx context.Context, keyID, day string) (int64, error)

	// SigningKeyInsert stores a token signing key; ErrConflict if its kid exists.
	SigningKeyInsert(ctx context.Context, k *SigningKey) error
	// SigningKeyList returns every signing key, newest first.
	SigningKeyList(ctx context.Context) ([]*SigningKey, error)
	// SigningKeyRetire stops a key from verifying; ErrNotFound if there is no such key.
	SigningKeyRetire(ctx context.Context, kid string, at time.Time) error
}

// SigningKey is an HMAC key for capability tokens.
type SigningKey struct {
	KID       string
	Secret    []byte
	CreatedAt time.Time
	RetiredAt time.Time
}

// APIKey is a producer credential. Only a hash of the secret is kept.
type APIKey struct {
	ID         string
	Tenant     string
	Name       string
	SecretHash string
	Prefix     string
	CreatedAt  time.Time
	RevokedAt  time.Time
}

// LockSet names the task rows a transaction is about to change, so that it can lock them all at
// once before anything else. Every transaction takes its row locks in one order: task rows by id,
// then job rows by id, last (the dispatcher writes a job's counters once, at the end of the
// transaction, job by job in id order). Transactions that take their locks in one global order
// cannot deadlock on them; a group commit merges the sets of its transitions and locks their
// union first. A transition that later locks a task its set did not name (which the dispatcher
// keeps to rare paths) can still deadlock, and is then retried alone.
type LockSet struct {
	Tasks     []string // these tasks
	Releasing []string // the children of these tasks (that completed)
	Ending    []string // every descendant of these tasks (that failed or were canceled)
	Jobs      []string // every task of these jobs, then the jobs: for a transaction on whole jobs
	// Keys names the idempotency keys of the jobs the transaction may insert. They are locked
	// before any row, in one order: two transactions that insert jobs with the same keys in
	// opposite orders would otherwise each wait on the other's key.
	Keys []string
}

// Add merges o into s.
func (s *LockSet) Add(o LockSet) {
	s.Tasks = append(s.Tasks, o.Tasks...)
	s.Releasing = append(s.Releasing, o.Releasing...)
	s.Ending = append(s.Ending, o.Ending...)
	s.Jobs = append(s.Jobs, o.Jobs...)
	s.Keys = append(s.Keys, o.Keys...)
}

// Empty reports whether s names no row.
func (s LockSet) Empty() bool {
	return len(s.Tasks)+len(s.Releasing)+len(s.Ending)+len(s.Jobs)+len(s.Keys) == 0
}

// Tx is one read-write transaction.
type Tx interface {
	Reader
	JobWriter
	TaskWriter
	AttemptWriter
	EventWriter
	OutboxWriter
	PipelineWriter
	DatasetWriter
	BufferWriter
	QueryAuditWriter
	OutputResetWriter
	BackpressureWriter
	PartitionCommitWriter

	// RowsLock locks the rows of s for the rest of the transaction, the idempotency keys of
	// s.Keys first, then tasks by id and then the jobs of s.Jobs by id, waiting for other
	// transactions that hold them. Rows that do not exist are ignored. A no-op where write
	// transactions run one at a time (SQLite).
	RowsLock(ctx context.Context, s LockSet) error
	// Nested runs fn as a part of the transaction that can fail alone: when fn returns an error,
	// its writes are undone (back to a savepoint) and the rest of the transaction stands. A
	// transient error (a deadlock, say) dooms the whole transaction: it fails with that error
	// whatever the rest does.
	Nested(ctx context.Context, fn func(Tx) error) error
}

// RetentionPolicy says which finished jobs (completed, partial_failure or canceled) have expired
// at Now (Tx.JobDeleteExpired). A job has expired when it finished more than its tenant's
// retention ago (Tenants, else Retention; 0 keeps the jobs forever) and none of these holds:
//   - one of its tasks is dead-lettered (failed for good, not resumed) since less than
//     DeadLetterRetention (0: a dead letter keeps its job forever);
//   - one of its buffered publishes is still queued for the sink, or dead (the sink gave it up)
//     since less than DeadLetterRetention: the sink still reads its job's rows;
//   - it is the latest job of its pipeline job: a source reads it to number its next run.
type RetentionPolicy struct {
	Now                 time.Time
	Retention           time.Duration
	Tenants             map[string]time.Duration
	DeadLetterRetention time.Duration
	Limit               int
}

// RetentionCounts counts the rows Tx.JobDeleteExpired deleted, by table.
type RetentionCounts struct {
	Jobs, Tasks, TaskDeps, Attempts, Events, DatasetEvents, BufferPublishes int
	QueryAudit                                                              int // query_audit records past their tenant's retention
}

// Tables lists the counts by table name.
func (c RetentionCounts) Tables() []TableCount {
	return []TableCount{{"jobs", c.Jobs}, {"tasks", c.Tasks}, {"task_deps", c.TaskDeps}, {"attempts", c.Attempts},
		{"events", c.Events}, {"dataset_events", c.DatasetEvents}, {"buffer_publishes", c.BufferPublishes},
		{"query_audit", c.QueryAudit}}
}

// Add adds o to c.
func (c *RetentionCounts) Add(o RetentionCounts) {
	c.Jobs += o.Jobs
	c.Tasks += o.Tasks
	c.TaskDeps += o.TaskDeps
	c.Attempts += o.Attempts
	c.Events += o.Events
	c.DatasetEvents += o.DatasetEvents
	c.BufferPublishes += o.BufferPublishes
	c.QueryAudit += o.QueryAudit
}

// TableCount is a number of rows of a table.
type TableCount struct {
	Table string
	N     int
}

// Job is one submitted DAG.
type Job struct {
	Seq               int64 // insertion order; the list cursor
	ID                string
	Tenant            string
	Name              string
	Status            lifecycle.JobStatus
	IdempotencyKey    string
	RequestHash       string
	TotalTasks        int
	UnfinishedTasks   int // tasks not yet terminal
	CreatedAt         time.Time
	FinishedAt        time.Time // zero while processing
	CancelRequestedAt time.Time
	FailureDetectedAt time.Time
	// Pipeline, PipelineVersion and PipelineJob name the pipeline job a routed or source task
	// runs for; empty for jobs submitted over the producer API.
	Pipeline        string
	PipelineVersion string
	PipelineJob     string
	// Traceparent is the W3C trace context the job was submitted under ("" if none): its tasks
	// are handed it with every claim, so that the workers' spans join the producer's trace.
	Traceparent string
}

// Task is one node of a job's DAG and its current attempt.
type Task struct {
	Seq               int64
	ID                string // global uuid, used by every worker dialect
	JobID             string
	Key               string // the producer's taskId
	Name              string
	Queue             string
	Priority          int
	Runtime           string
	Input             json.RawMessage
	DependsOn         []string
	UnfinishedParents int
	Status            lifecycle.TaskStatus
	Attempt           int // the latest attempt claimed; 0 before the first claim
	RetryBase         int // Attempt when the current run began; Attempt-RetryBase attempts used
	MaxAttempts       int
	AvailableAt       time.Time
	LeaseToken        string // the latest attempt's token, kept after it ends for idempotency
	LeaseExpiresAt    time.Time
	WorkerID          string
	StartedAt         time.Time
	HeartbeatAt       time.Time
	DeadlineAt        time.Time // execution deadline of the running attempt
	ReapAt            time.Time // earliest of lease expiry, deadline and cancel grace end
	CancelRequestedAt time.Time
	CancelReason      string
	Output            json.RawMessage
	Error             *TaskError
	BackoffBase       time.Duration
	BackoffMax        time.Duration
	Timeout           time.Duration // 0: no execution deadline
	HeartbeatTimeout  time.Duration // the lease TTL
	CancelGrace       time.Duration
	CreatedAt         time.Time
	FinishedAt        time.Time
	DeadLetteredAt    time.Time
	LastEventType     string
	LastEventAt       time.Time
	// Route is the data-plane part of a pipeline task's payload (its job, inputs and outputs);
	// nil for other tasks.
	Route json.RawMessage
	// ConcurrencyKey, when set, groups tasks of which at most ConcurrencyLimit may run at once
	// (a pipeline job's scaling.max_concurrency): a claim that would exceed it does not happen.
	ConcurrencyKey   string
	ConcurrencyLimit int
	// Traceparent is its job's W3C trace context, copied when the task is inserted so that a
	// claim returns it with the task row instead of reading the job; "" if the job has none.
	Traceparent string
}

// AttemptsUsed counts the attempts of the current run against MaxAttempts.
func (t *Task) AttemptsUsed() int { return t.Attempt - t.RetryBase }

// TaskError is the last failure of a task or attempt.
type TaskError struct {
	Category   lifecycle.Category `json:"category"`
	Message    string             `json:"message"`
	StackTrace string             `json:"stackTrace,omitempty"`
	Retryable  *bool              `json:"retryable,omitempty"`
	Reason     string             `json:"reason,omitempty"` // HEARTBEAT_TIMEOUT, CANCEL_TIMEOUT, ...
	Code       string             `json:"code,omitempty"`
}

// TaskSummary is a task as the job view lists it.
type TaskSummary struct {
	ID            string
	Key           string
	Name          string
	DependsOn     []string
	Status        lifecycle.TaskStatus
	Attempt       int
	LastEventType string
	LastEventAt   time.Time
	// Output and Error are set by TaskListByJobWithResults only: the output of a completed task,
	// the error of a failed one.
	Output json.RawMessage
	Error  *TaskError
}

// TaskRef names a task a bulk transition touched, with its status afterwards.
type TaskRef struct {
	ID          string
	JobID       string
	Key         string
	Name        string
	Queue       string
	Runtime     string
	Status      lifecycle.TaskStatus
	AvailableAt time.Time
}

// Dep is one edge of the DAG.
type Dep struct {
	JobID    string
	ParentID string
	ChildID  string
}

// Fence is the state a task must still be in for TaskUpdate to apply.
type Fence struct {
	Status  lifecycle.TaskStatus
	Attempt int
}

// CompletedTask is one succeeded attempt of Tx.TaskCompleteMany.
type CompletedTask struct {
	ID      string
	Attempt int
	Output  json.RawMessage
}

// ClaimTaskParams is the input of Tx.TaskClaim.
type ClaimTaskParams struct {
	ID         string
	Now        time.Time
	WorkerID   string
	LeaseToken string
	Runtime    string // "pull" or "push": only a task of this runtime is claimed
}

// CancelParams scopes a cancellation to a job, or to one task of it when TaskID is set.
type CancelParams struct {
	JobID  string
	TaskID string
	Now    time.Time
	Reason string
}

// TaskListDeadLettersParams selects a page of a tenant's dead letters, newest first
// (Reader.TaskListDeadLetters).
type TaskListDeadLettersParams struct {
	Tenant    string
	BeforeSeq int64 // only tasks with Seq < BeforeSeq; 0: from the newest
	Limit     int
}

// TaskListOldestReadyParams is the input of Reader.TaskListOldestReady.
type TaskListOldestReadyParams struct {
	Queue  string
	Before time.Time // only tasks claimable since Before (AvailableAt at or before it)
	Limit  int
}

// TaskListReadyIDsParams is the input of Tx.TaskListReadyIDs.
type TaskListReadyIDsParams struct {
	Queue string
	Now   time.Time // only tasks available at or before Now
	Limit int
}

// TaskListReadyPushIDsParams is the input of Tx.TaskListReadyPushIDs.
type TaskListReadyPushIDsParams struct {
	Now   time.Time // only tasks available at or before Now
	Limit int
	// Targets are the task names the deliverer has a push target for. A task of a pipeline job
	// (one with a Route) is listed only when its name is among them: without a target it stays
	// pending until a deliverer has one. A task of a plain job is listed whatever its name: its
	// submission was checked against the targets, and a deliverer without one fails it.
	Targets []string
}

// Attempt is one execution of a task.
type Attempt struct {
	TaskID     string
	Attempt    int
	WorkerID   string
	LeaseToken string
	StartedAt  time.Time
	FinishedAt time.Time
	Outcome    Outcome              // empty while it runs
	Result     lifecycle.TaskStatus // the task's status right after the outcome was applied
	Error      *TaskError
	Metrics    json.RawMessage
	// Traceparent is the W3C trace context the worker reported the attempt under, if any.
	Traceparent string
}

// Outcome is how an attempt ended.
type Outcome string

const (
	OutcomeSucceeded     Outcome = "succeeded"
	OutcomeFailed        Outcome = "failed"
	OutcomeCanceled      Outcome = "canceled"
	OutcomeTimedOut      Outcome = "timed_out"
	OutcomeCancelTimeout Outcome = "cancel_timeout"
)

// DatasetEvent is an upstream event a task reported: a dataset version reached a cursor, or a
// partition of it was written.
type DatasetEvent struct {
	ID             int64
	DedupeKey      string // identifies a repeat of the same event by the same task
	JobID          string
	TaskID         string
	Attempt        int
	DatasetUUID    string
	DatasetVersion string
	Cursor         *int64
	PartitionKey   string
	Start, End     *int64
	CreatedAt      time.Time
}

// DatasetEventListRecentParams is the input of Reader.DatasetEventListRecent.
type DatasetEventListRecentParams struct {
	Tenant      string // only events reported by tasks of this tenant's jobs
	DatasetUUID string
	Limit       int
}

// BufferPublish records that a task wrote a batch for the sink to load.
type BufferPublish struct {
	ID             int64
	TaskID         string
	Attempt        int
	BatchURI       string
	JobID          string
	Tenant         string
	DatasetUUID    string
	DatasetVersion string
	RecordCount    *int64
	ContentType    string
	BatchSizeBytes *int64
	DedupeScope    string
	CreatedAt      time.Time

	// The Buffer Queue's view of the publish: a message for the sink.
	State        string // BufferQueued, BufferCommitted or BufferDead
	ReceiveCount int    // claims so far
	VisibleAt    time.Time
	LastError    string
	Cursor       *int64 // committed: the dataset cursor of the rows it added (nil when none)
	RowsInserted *int64 // committed: how many of its rows were new
	FinishedAt   time.Time
}

// Buffer publish states.
const (
	BufferQueued    = "queued"
	BufferCommitted = "committed"
	BufferDead      = "dead"
)

// BufferPublishListDeadLettersParams selects a page of a dataset's dead buffer publishes,
// oldest first (Reader.BufferPublishListDeadLetters).
type BufferPublishListDeadLettersParams struct {
	DatasetUUID string
	AfterID     int64 // only publishes with ID > AfterID; 0: from the oldest
	Limit       int
}

// BufferPublishListClaimableParams is the input of Tx.BufferPublishListClaimable.
type BufferPublishListClaimableParams struct {
	Now   time.Time // only publishes visible at or before Now
	ID    int64     // when > 0, only the publish of this ID
	Limit int
}

// BufferPublishExtendParams is the input of Tx.BufferPublishExtend.
type BufferPublishExtendParams struct {
	ID int64
	// Receipt is the ReceiveCount of the claim that extends: the publish is extended only while
	// its ReceiveCount is still Receipt.
	Receipt   int
	VisibleAt time.Time // the new VisibleAt
}

// Event is one audit row.
type Event struct {
	ID      int64
	JobID   string
	TaskID  string // empty for job events
	TaskKey string
	Type    string
	At      time.Time
	Data    json.RawMessage
}

// EventListParams selects a page of a job's events, oldest first (Reader.EventList).
type EventListParams struct {
	JobID   string
	AfterID int64 // only events with ID > AfterID; 0: from the first
	Limit   int
}

// EventListByTaskParams selects a page of the events of one task of a job, oldest first
// (Reader.EventListByTask).
type EventListByTaskParams struct {
	JobID   string
	TaskID  string
	AfterID int64 // only events with ID > AfterID; 0: from the first
	Limit   int
}

// The outbox topics: what an outbox message asks of its reader.
const (
	// TopicTaskReady: a task became claimable; Key is its queue, the payload {"task_id": ...}.
	// The relay publishes it as a wake-up on the transport.
	TopicTaskReady = "task.ready"
	// TopicBufferBatch: a batch was published into a buffered dataset; Key is the dataset's uuid,
	// the payload {"id": <Buffer Queue message id>, ...}. The relay wakes the sinks with it.
	TopicBufferBatch = "buffer.batch"
	// TopicDatasetEvent: a dataset event was accepted; Key is the dataset's uuid. The data plane's
	// router reads these itself, turns them into tasks and deletes them; the relay leaves them
	// alone.
	TopicDatasetEvent = "dataset.event"
)

// OutboxMessage is a message to publish, written in the transaction that caused it.
type OutboxMessage struct {
	ID          int64
	Topic       string
	Key         string // routing key, e.g. the queue of a task wake-up
	Payload     json.RawMessage
	AvailableAt time.Time // not to be published before
	CreatedAt   time.Time
	Attempts    int // failed publishes so far; set by OutboxClaim, ignored by OutboxInsertMany
}

// OutboxFilter selects outbox messages by topic: those of Topic, or with Except those of every
// other topic. The zero filter selects every message.
type OutboxFilter struct {
	Topic  string
	Except bool
}

// OutboxClaimParams is the input of Tx.OutboxClaim.
type OutboxClaimParams struct {
	Now    time.Time // only messages with AvailableAt at or before Now
	Limit  int
	Filter OutboxFilter // only the messages it selects
}

// OutboxRetryParams records a failed publish of an outbox message (Tx.OutboxRetry).
type OutboxRetryParams struct {
	ID       int64
	Attempts int       // the message's new attempt count
	NextAt   time.Time // not claimable again before then
}

// ListJobsParams selects a page of jobs, newest first.
type ListJobsParams struct {
	Tenant    string
	Status    lifecycle.JobStatus // empty: any
	BeforeSeq int64               // 0: from the newest
	Limit     int
}
