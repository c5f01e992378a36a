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

// Reader holds the queries. Inside a Tx, GetJob and GetTask lock the row for the rest of the
// transaction where the database supports row locks.
type Reader interface {
	PipelineReader
	GetJob(ctx context.Context, id string) (*Job, error)
	JobByIdempotencyKey(ctx context.Context, tenant, key string) (*Job, error)
	ListJobs(ctx context.Context, p ListJobsParams) ([]*Job, error)
	GetTask(ctx context.Context, id string) (*Task, error)
	// JobTasks lists a job's tasks in submission order, without their inputs and outputs.
	JobTasks(ctx context.Context, jobID string) ([]*TaskSummary, error)
	// JobTasksWithResults is JobTasks with the Output of each completed task and the Error of
	// each failed one; other tasks' results are left out (nil) and not even read.
	JobTasksWithResults(ctx context.Context, jobID string) ([]*TaskSummary, error)
	// ParentOutputs maps each parent's key to its output (null when it has none).
	ParentOutputs(ctx context.Context, taskID string) (map[string]json.RawMessage, error)
	// ParentOutputsOf is ParentOutputs for several tasks, by task id; a task without parents
	// has no entry.
	ParentOutputsOf(ctx context.Context, taskIDs []string) (map[string]map[string]json.RawMessage, error)
	GetAttempt(ctx context.Context, taskID string, attempt int) (*Attempt, error)
	ListAttempts(ctx context.Context, taskID string) ([]*Attempt, error)
	// ListEvents returns a job's events with ID > afterID, oldest first.
	ListEvents(ctx context.Context, jobID string, afterID int64, limit int) ([]*Event, error)
	// ListTaskEvents is ListEvents narrowed to the events of one task of the job.
	ListTaskEvents(ctx context.Context, jobID, taskID string, afterID int64, limit int) ([]*Event, error)
	// ListDeadLetters returns failed, dead-lettered tasks of a tenant, newest first, with
	// Seq < beforeSeq (0: from the newest).
	ListDeadLetters(ctx context.Context, tenant string, beforeSeq int64, limit int) ([]*Task, error)
	ListDatasetEvents(ctx context.Context, taskID string) ([]*DatasetEvent, error)
	ListBufferPublishes(ctx context.Context, taskID string) ([]*BufferPublish, error)
	// GetBufferPublish reads one publish record (locking it inside a Tx); ErrNotFound if none.
	GetBufferPublish(ctx context.Context, id int64) (*BufferPublish, error)
	// ListBufferDeadLetters returns the dead buffer publishes of a dataset with ID > afterID,
	// oldest first.
	ListBufferDeadLetters(ctx context.Context, datasetUUID string, afterID int64, limit int) ([]*BufferPublish, error)
	// OutboxAfter returns outbox messages with ID > afterID, oldest first.
	OutboxAfter(ctx context.Context, afterID int64, limit int) ([]*OutboxMessage, error)
	// NextReapAt is the earliest lease expiry, deadline or cancel grace end of a running task.
	NextReapAt(ctx context.Context) (t time.Time, ok bool, err error)
	// DueTasks lists running tasks whose reap time is at or before now, earliest first.
	DueTasks(ctx context.Context, now time.Time, limit int) ([]string, error)
	// NextAvailableAt is the earliest time a pending pull task of the queues becomes claimable.
	NextAvailableAt(ctx context.Context, queues []string) (t time.Time, ok bool, err error)
	// NextPushAvailableAt is the earliest time a pending push task becomes claimable.
	NextPushAvailableAt(ctx context.Context) (t time.Time, ok bool, err error)
	// ReadyCounts counts, per queue, the pull tasks that have been claimable since before.
	ReadyCounts(ctx context.Context, before time.Time) (map[string]int, error)
	// OldestReady lists up to limit pull tasks of queue claimable since before, longest
	// waiting first, without locking them.
	OldestReady(ctx context.Context, queue string, before time.Time, limit int) ([]string, error)
	// JobCounts counts a tenant's jobs by status.
	JobCounts(ctx context.Context, tenant string) (map[lifecycle.JobStatus]int, error)
	// QueueStats summarizes a tenant's tasks queue by queue at now: what is ready, backing off,
	// running and dead-lettered, the tasks completed within window before now, and the workers
	// that claimed a task within it (or still run one).
	QueueStats(ctx context.Context, tenant string, now time.Time, window time.Duration) (*QueueStats, error)
	// TaskCounts counts the tasks of each queue that are waiting, pending or running, and those
	// that are dead-lettered (State DeadLettered), for the metrics; a queue and state with none
	// is left out. It reads partial indexes and the tasks of unfinished jobs, never every task.
	TaskCounts(ctx context.Context) ([]TaskCount, error)
	// OutboxBacklog counts the outbox messages not sent yet, for the metrics.
	OutboxBacklog(ctx context.Context) (OutboxBacklog, error)
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
// time any process commits a transaction that called Tx.NotifyReady, until ctx ends.
type Listener interface {
	Listen(ctx context.Context, fn func()) error
}

// Keys stores producer API keys and counts their use.
type Keys interface {
	InsertAPIKey(ctx context.Context, k *APIKey) error
	// APIKeyByHash finds a key, revoked or not, by the SHA-256 of its secret.
	APIKeyByHash(ctx context.Context, secretHash string) (*APIKey, error)
	ListAPIKeys(ctx context.Context) ([]*APIKey, error)
	// RevokeAPIKey marks a key revoked; ErrNotFound if there is no such key.
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error
	// CountRequest adds one to a key's count for a UTC day ("2006-01-02") and returns the new count.
	CountRequest(ctx context.Context, keyID, day string) (int64, error)

	// InsertSigningKey stores a token signing key; ErrConflict if its kid exists.
	InsertSigningKey(ctx context.Context, k *SigningKey) error
	// ListSigningKeys returns every signing key, newest first.
	ListSigningKeys(ctx context.Context) ([]*SigningKey, error)
	// RetireSigningKey stops a key from verifying; ErrNotFound if there is no such key.
	RetireSigningKey(ctx context.Context, kid string, at time.Time) error
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
	PipelineWriter

	// LockRows locks the rows of s for the rest of the transaction, the idempotency keys of
	// s.Keys first, then tasks by id and then the jobs of s.Jobs by id, waiting for other transactions that hold them. Rows that do not exist are ignored. A
	// no-op where write transactions run one at a time (SQLite).
	LockRows(ctx context.Context, s LockSet) error

	// InsertJob returns ErrConflict when the tenant already has a job with its idempotency key.
	InsertJob(ctx context.Context, j *Job) error
	// UpdateJob writes a job's mutable fields.
	UpdateJob(ctx context.Context, j *Job) error
	// AddUnfinished adds delta to the job's count of non-terminal tasks and returns the job,
	// locked for the rest of the transaction.
	AddUnfinished(ctx context.Context, jobID string, delta int) (*Job, error)

	InsertTasks(ctx context.Context, tasks []*Task) error
	InsertDeps(ctx context.Context, deps []Dep) error
	// Nested runs fn as a part of the transaction that can fail alone: when fn returns an error,
	// its writes are undone (back to a savepoint) and the rest of the transaction stands. A
	// transient error (a deadlock, say) dooms the whole transaction: it fails with that error
	// whatever the rest does.
	Nested(ctx context.Context, fn func(Tx) error) error
	// LockTasks returns the tasks of ids that exist, in id order, each locked for the rest of the
	// transaction.
	LockTasks(ctx context.Context, ids []string) ([]*Task, error)
	// CompleteTasks is a success for many running attempts at once: each task becomes
	// completed with its output, its lease and deadlines cleared. It returns ErrLeaseLost, having
	// changed nothing the caller may keep, unless every task was running the given attempt.
	CompleteTasks(ctx context.Context, done []CompletedTask, now time.Time) error
	// ClaimTasks is ClaimTask for several tasks, all with the same time and runtime; it
	// returns the tasks it claimed (those still claimable), in no particular order.
	ClaimTasks(ctx context.Context, ps []ClaimTaskParams) ([]*Task, error)
	// ReleaseChildrenOf is ReleaseChildren for several completed parents at once.
	ReleaseChildrenOf(ctx context.Context, parentIDs []string, now time.Time) ([]*TaskRef, error)
	// ReadyTaskIDs selects up to limit claimable pull tasks of a queue (pending, available at or
	// before now), highest priority first, skipping rows another transaction has locked.
	ReadyTaskIDs(ctx context.Context, queue string, now time.Time, limit int) ([]string, error)
	// ReadyPushTaskIDs is ReadyTaskIDs for push tasks, of every queue.
	ReadyPushTaskIDs(ctx context.Context, now time.Time, limit int) ([]string, error)
	// ClaimTask is the only way into running (docs/lifecycle.md#claim): pending and available →
	// running with attempt+1, the given lease token, a lease of the task's heartbeat timeout, and
	// its execution deadline. ok is false, and nothing changes, when the task is not claimable.
	ClaimTask(ctx context.Context, p ClaimTaskParams) (t *Task, ok bool, err error)
	// UpdateTask writes a task's mutable fields if its status and attempt are still those of
	// fence; otherwise it returns ErrLeaseLost and changes nothing.
	UpdateTask(ctx context.Context, t *Task, fence Fence) error
	// ReleaseChildren releases a completed parent's children (docs/lifecycle.md#dependents): each
	// child's unfinished-parent count drops by one, and waiting children that reach zero become
	// pending. It returns every child it touched with its status afterwards; those now pending are
	// the ones it released.
	ReleaseChildren(ctx context.Context, parentID string, now time.Time) ([]*TaskRef, error)
	// SkipDescendants turns every waiting or pending descendant of a task into skipped.
	SkipDescendants(ctx context.Context, taskID string, now time.Time) ([]*TaskRef, error)
	// CancelIdle turns the waiting and pending tasks in scope into canceled.
	CancelIdle(ctx context.Context, p CancelParams) ([]*TaskRef, error)
	// RequestCancel marks the running tasks in scope as cancel-requested, moving their reap time
	// to the end of their cancel grace if that comes first.
	RequestCancel(ctx context.Context, p CancelParams) ([]*TaskRef, error)
	// ResumeTasks puts a job's failed, canceled and skipped tasks back to pending (no unfinished
	// parent) or waiting, with a fresh retry budget.
	ResumeTasks(ctx context.Context, jobID string, now time.Time) ([]*TaskRef, error)

	// InsertDatasetEvents stores events, skipping any whose DedupeKey is already stored, and
	// returns how many were new; each new event gets its ID, a skipped one keeps ID 0.
	InsertDatasetEvents(ctx context.Context, events []*DatasetEvent) (int, error)
	// InsertBufferPublish stores a publish record; ok is false, and nothing changes, when the same
	// (task, attempt, batch URI) was recorded before.
	InsertBufferPublish(ctx context.Context, p *BufferPublish) (ok bool, err error)
	// ClaimableBufferPublishes selects up to limit queued publishes visible at or before now
	// (only publish id, when id > 0), oldest first, and locks them for the rest of the
	// transaction, skipping rows another transaction holds.
	ClaimableBufferPublishes(ctx context.Context, now time.Time, id int64, limit int) ([]*BufferPublish, error)
	// UpdateBufferPublish writes a publish's queue fields: State, ReceiveCount, VisibleAt,
	// LastError, Cursor, RowsInserted and FinishedAt. ErrNotFound if there is no such record.
	UpdateBufferPublish(ctx context.Context, p *BufferPublish) error
	// ExtendBufferPublish sets the VisibleAt of publish id to visibleAt when it is queued and its
	// ReceiveCount is receipt, so that only the latest receive of a message extends its claim; ok
	// is false, and nothing changes, otherwise (also when there is no such record).
	ExtendBufferPublish(ctx context.Context, id int64, receipt int, visibleAt time.Time) (ok bool, err error)

	// NotifyReady tells other processes sharing the database, once this transaction commits, that
	// a task became claimable. A no-op where one process owns the database.
	NotifyReady(ctx context.Context) error

	// InsertAttempt stores a new attempt record.
	InsertAttempt(ctx context.Context, a *Attempt) error
	// PutAttempts stores the records, each replacing a stored record of the same task and
	// attempt if there is one, except that an empty Traceparent keeps the stored one. The
	// dispatcher stores an attempt when it ends (or something is recorded on it while it
	// runs): the running attempt lives on its task row until then.
	PutAttempts(ctx context.Context, as []*Attempt) error
	InsertEvents(ctx context.Context, events []*Event) error
	InsertOutbox(ctx context.Context, msgs []*OutboxMessage) error

	// ClaimOutbox selects up to limit unsent outbox messages with AvailableAt at or before now,
	// oldest (lowest ID) first, and locks them for the rest of the transaction, skipping rows
	// another transaction holds, so that relays on several replicas never take the same message.
	// Only messages f selects are claimed.
	ClaimOutbox(ctx context.Context, now time.Time, limit int, f OutboxFilter) ([]*OutboxMessage, error)
	// MarkOutboxSent sets the sent time of the messages; ids that do not exist are ignored.
	MarkOutboxSent(ctx context.Context, ids []int64, at time.Time) error
	// RetryOutbox records a failed publish: the message's attempt count becomes attempts and it is
	// not claimable again before nextAt. ErrNotFound if there is no such message.
	RetryOutbox(ctx context.Context, id int64, attempts int, nextAt time.Time) error
	// DeleteSentOutbox deletes up to limit messages sent before the given time (never an unsent
	// one) and returns how many it deleted.
	DeleteSentOutbox(ctx context.Context, before time.Time, limit int) (int, error)

	// DeleteExpiredJobs deletes up to p.Limit finished jobs that p says have expired, oldest
	// finish first, with every row that belongs to them, children before parents, and returns how
	// many rows of each table it deleted. Where rows are locked (PostgreSQL) it skips jobs, and
	// jobs with tasks, another transaction holds, so that concurrent callers never wait on each
	// other or on the dispatcher: it may then delete fewer than p.Limit jobs though more expired.
	DeleteExpiredJobs(ctx context.Context, p RetentionPolicy) (RetentionCounts, error)
}

// RetentionPolicy says which finished jobs (completed, partial_failure or canceled) have expired
// at Now (Tx.DeleteExpiredJobs). A job has expired when it finished more than its tenant's
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

// RetentionCounts counts the rows Tx.DeleteExpiredJobs deleted, by table.
type RetentionCounts struct {
	Jobs, Tasks, TaskDeps, Attempts, Events, DatasetEvents, BufferPublishes int
}

// Tables lists the counts by table name.
func (c RetentionCounts) Tables() []TableCount {
	return []TableCount{{"jobs", c.Jobs}, {"tasks", c.Tasks}, {"task_deps", c.TaskDeps}, {"attempts", c.Attempts},
		{"events", c.Events}, {"dataset_events", c.DatasetEvents}, {"buffer_publishes", c.BufferPublishes}}
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
	// Output and Error are set by JobTasksWithResults only: the output of a completed task, the
	// error of a failed one.
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

// Fence is the state a task must still be in for UpdateTask to apply.
type Fence struct {
	Status  lifecycle.TaskStatus
	Attempt int
}

// CompletedTask is one succeeded attempt of Tx.CompleteTasks.
type CompletedTask struct {
	ID      string
	Attempt int
	Output  json.RawMessage
}

// ClaimTaskParams is the input of Tx.ClaimTask.
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

// The outbox topics: what an outbox message asks of its reader.
const (
	// TopicTaskReady: a task became claimable; Key is its queue, the payload {"task_id": ...}.
	// The relay publishes it as a wake-up on the transport.
	TopicTaskReady = "task.ready"
	// TopicBufferBatch: a batch was published into a buffered dataset; Key is the dataset's uuid,
	// the payload {"id": <Buffer Queue message id>, ...}. The relay wakes the sinks with it.
	TopicBufferBatch = "buffer.batch"
	// TopicDatasetEvent: a dataset event was accepted; Key is the dataset's uuid. The data plane's
	// router reads these itself and turns them into tasks; the relay leaves them alone.
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
	Attempts    int // failed publishes so far; set by ClaimOutbox, ignored by InsertOutbox
}

// OutboxFilter selects outbox messages by topic: those of Topic, or with Except those of every
// other topic. The zero filter selects every message.
type OutboxFilter struct {
	Topic  string
	Except bool
}

// ListJobsParams selects a page of jobs, newest first.
type ListJobsParams struct {
	Tenant    string
	Status    lifecycle.JobStatus // empty: any
	BeforeSeq int64               // 0: from the newest
	Limit     int
}
