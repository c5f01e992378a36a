package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// The store's queries and writes, one interface per aggregate; Reader and Tx embed them.

// JobReader reads jobs.
type JobReader interface {
	JobGet(ctx context.Context, id string) (*Job, error)
	JobGetByIdempotencyKey(ctx context.Context, tenant, key string) (*Job, error)
	JobList(ctx context.Context, p ListJobsParams) ([]*Job, error)
	// JobCounts counts a tenant's jobs by status.
	JobCounts(ctx context.Context, tenant string) (map[lifecycle.JobStatus]int, error)
}

// JobWriter writes jobs, inside a Tx.
type JobWriter interface {
	// JobInsert returns ErrConflict when the tenant already has a job with its idempotency key.
	JobInsert(ctx context.Context, j *Job) error
	// JobUpdate writes a job's mutable fields.
	JobUpdate(ctx context.Context, j *Job) error
	// JobAddUnfinished adds delta to the job's count of non-terminal tasks and returns the job,
	// locked for the rest of the transaction.
	JobAddUnfinished(ctx context.Context, jobID string, delta int) (*Job, error)
	// JobLockMany returns the jobs of ids that exist, in id order, each locked for the rest of
	// the transaction (in that order, where rows are locked).
	JobLockMany(ctx context.Context, ids []string) ([]*Job, error)
	// JobUpdateMany is JobUpdate for several distinct jobs in one statement; ErrNotFound, having
	// changed nothing the caller may keep, when a job does not exist. Where several transactions
	// may update the same jobs, lock them first (JobLockMany).
	JobUpdateMany(ctx context.Context, jobs []*Job) error
	// JobDeleteExpired deletes up to p.Limit finished jobs that p says have expired, oldest
	// finish first, with every row that belongs to them, children before parents, and returns how
	// many rows of each table it deleted. Where rows are locked (PostgreSQL) it skips jobs, and
	// jobs with tasks, another transaction holds, so that concurrent callers never wait on each
	// other or on the dispatcher: it may then delete fewer than p.Limit jobs though more expired.
	JobDeleteExpired(ctx context.Context, p RetentionPolicy) (RetentionCounts, error)
	// JobInsertManyIfAbsent inserts the jobs whose idempotency key the tenant has not used and
	// returns the ids of those it inserted. Concurrent calls with the same keys insert each
	// once; callers pass keys in sorted order so that they wait on each other without deadlock.
	JobInsertManyIfAbsent(ctx context.Context, jobs []*Job) ([]string, error)
}

// TaskReader reads tasks, their dependencies and the queues they wait in.
type TaskReader interface {
	TaskGet(ctx context.Context, id string) (*Task, error)
	// TaskListByJob lists a job's tasks in submission order, without their inputs and outputs.
	TaskListByJob(ctx context.Context, jobID string) ([]*TaskSummary, error)
	// TaskJobsNotCompleted returns those of jobIDs that have a task that is not completed, in no
	// particular order: a job with no task left unfinished completed when it is not one of them.
	TaskJobsNotCompleted(ctx context.Context, jobIDs []string) ([]string, error)
	// TaskListByJobWithResults is TaskListByJob with the Output of each completed task and the Error of
	// each failed one; other tasks' results are left out (nil) and not even read.
	TaskListByJobWithResults(ctx context.Context, jobID string) ([]*TaskSummary, error)
	// TaskParentOutputs maps each parent's key to its output (null when it has none).
	TaskParentOutputs(ctx context.Context, taskID string) (map[string]json.RawMessage, error)
	// TaskParentOutputsMany is TaskParentOutputs for several tasks, by task id; a task without parents
	// has no entry.
	TaskParentOutputsMany(ctx context.Context, taskIDs []string) (map[string]map[string]json.RawMessage, error)
	// TaskListDeadLetters returns up to p.Limit failed, dead-lettered tasks of p.Tenant, newest
	// first, with Seq < p.BeforeSeq (0: from the newest).
	TaskListDeadLetters(ctx context.Context, p TaskListDeadLettersParams) ([]*Task, error)
	// TaskNextReapAt is the earliest lease expiry, deadline or cancel grace end of a running task.
	TaskNextReapAt(ctx context.Context) (t time.Time, ok bool, err error)
	// TaskListDue lists running tasks whose reap time is at or before now, earliest first.
	TaskListDue(ctx context.Context, now time.Time, limit int) ([]string, error)
	// TaskNextAvailableAt is the earliest time a pending pull task of the queues becomes claimable.
	TaskNextAvailableAt(ctx context.Context, queues []string) (t time.Time, ok bool, err error)
	// TaskNextPushAvailableAt is the earliest time a pending push task that a deliverer with
	// targets may list (TaskListReadyPushIDsParams.Targets) becomes claimable.
	TaskNextPushAvailableAt(ctx context.Context, targets []string) (t time.Time, ok bool, err error)
	// TaskReadyCounts counts, per queue, the pull tasks that have been claimable since before.
	TaskReadyCounts(ctx context.Context, before time.Time) (map[string]int, error)
	// TaskListOldestReady lists up to p.Limit pull tasks of p.Queue claimable since p.Before,
	// longest waiting first, without locking them.
	TaskListOldestReady(ctx context.Context, p TaskListOldestReadyParams) ([]string, error)
	// QueueStats summarizes p.Tenant's tasks queue by queue at p.Now: what is ready, backing off,
	// running and dead-lettered, the tasks completed within p.Window before p.Now, and the
	// workers that claimed a task within it (or still run one).
	QueueStats(ctx context.Context, p QueueStatsParams) (*QueueStats, error)
	// TaskCounts counts the tasks of each queue that are waiting, pending or running, and those
	// that are dead-lettered (State DeadLettered), for the metrics; a queue and state with none
	// is left out. It reads partial indexes and the tasks of unfinished jobs, never every task.
	TaskCounts(ctx context.Context) ([]TaskCount, error)
}

// TaskWriter writes tasks, their dependencies and the queues they wait in, inside a Tx.
type TaskWriter interface {
	TaskInsertMany(ctx context.Context, tasks []*Task) error
	DepInsertMany(ctx context.Context, deps []Dep) error
	// TaskLockMany returns the tasks of ids that exist, in id order, each locked for the rest of the
	// transaction.
	TaskLockMany(ctx context.Context, ids []string) ([]*Task, error)
	// TaskCompleteMany is a success for many running attempts at once: each task becomes
	// completed with its output, its lease and deadlines cleared. It returns ErrLeaseLost, having
	// changed nothing the caller may keep, unless every task was running the given attempt.
	TaskCompleteMany(ctx context.Context, done []CompletedTask, now time.Time) error
	// TaskClaimMany is TaskClaim for several tasks, all with the same time and runtime; it
	// returns the tasks it claimed (those still claimable), in no particular order.
	TaskClaimMany(ctx context.Context, ps []ClaimTaskParams) ([]*Task, error)
	// TaskReleaseChildrenMany is TaskReleaseChildren for several completed parents at once.
	TaskReleaseChildrenMany(ctx context.Context, parentIDs []string, now time.Time) ([]*TaskRef, error)
	// TaskListReadyIDs selects up to p.Limit claimable pull tasks of p.Queue (pending, available at
	// or before p.Now), highest priority first, skipping rows another transaction has locked.
	TaskListReadyIDs(ctx context.Context, p TaskListReadyIDsParams) ([]string, error)
	// TaskListReadyPushIDs is TaskListReadyIDs for push tasks, of every queue, that a deliverer
	// with p.Targets may deliver.
	TaskListReadyPushIDs(ctx context.Context, p TaskListReadyPushIDsParams) ([]string, error)
	// TaskClaim is the only way into running (docs/lifecycle.md#claim): pending and available →
	// running with attempt+1, the given lease token, a lease of the task's heartbeat timeout, and
	// its execution deadline. ok is false, and nothing changes, when the task is not claimable.
	TaskClaim(ctx context.Context, p ClaimTaskParams) (t *Task, ok bool, err error)
	// TaskUpdate writes a task's mutable fields if its status and attempt are still those of
	// fence; otherwise it returns ErrLeaseLost and changes nothing.
	TaskUpdate(ctx context.Context, t *Task, fence Fence) error
	// TaskReleaseChildren releases a completed parent's children (docs/lifecycle.md#dependents): each
	// child's unfinished-parent count drops by one, and waiting children that reach zero become
	// pending. It returns every child it touched with its status afterwards; those now pending are
	// the ones it released.
	TaskReleaseChildren(ctx context.Context, parentID string, now time.Time) ([]*TaskRef, error)
	// TaskSkipDescendants turns every waiting or pending descendant of a task into skipped.
	TaskSkipDescendants(ctx context.Context, taskID string, now time.Time) ([]*TaskRef, error)
	// TaskCancelIdle turns the waiting and pending tasks in scope into canceled.
	TaskCancelIdle(ctx context.Context, p CancelParams) ([]*TaskRef, error)
	// TaskRequestCancel marks the running tasks in scope as cancel-requested, moving their reap time
	// to the end of their cancel grace if that comes first.
	TaskRequestCancel(ctx context.Context, p CancelParams) ([]*TaskRef, error)
	// TaskResume puts a job's failed, canceled and skipped tasks back to pending (no unfinished
	// parent) or waiting, with a fresh retry budget.
	TaskResume(ctx context.Context, jobID string, now time.Time) ([]*TaskRef, error)
	// TaskReadyNotify tells other processes sharing the database, once this transaction commits, that
	// a task became claimable. A no-op where one process owns the database.
	TaskReadyNotify(ctx context.Context) error
}

// AttemptReader reads attempts.
type AttemptReader interface {
	AttemptGet(ctx context.Context, taskID string, attempt int) (*Attempt, error)
	AttemptList(ctx context.Context, taskID string) ([]*Attempt, error)
}

// AttemptWriter writes attempts, inside a Tx.
type AttemptWriter interface {
	// AttemptInsert stores a new attempt record.
	AttemptInsert(ctx context.Context, a *Attempt) error
	// AttemptPutMany stores the records, each replacing a stored record of the same task and
	// attempt if there is one, except that an empty Traceparent keeps the stored one. The
	// dispatcher stores an attempt when it ends (or something is recorded on it while it
	// runs): the running attempt lives on its task row until then.
	AttemptPutMany(ctx context.Context, as []*Attempt) error
}

// EventReader reads the audit trail.
type EventReader interface {
	// EventList returns up to p.Limit events of job p.JobID with ID > p.AfterID, oldest first.
	EventList(ctx context.Context, p EventListParams) ([]*Event, error)
	// EventListByTask is EventList narrowed to the events of task p.TaskID of the job.
	EventListByTask(ctx context.Context, p EventListByTaskParams) ([]*Event, error)
}

// EventWriter writes the audit trail, inside a Tx.
type EventWriter interface {
	EventInsertMany(ctx context.Context, events []*Event) error
}

// OutboxReader reads the outbox.
type OutboxReader interface {
	// OutboxListAfter returns outbox messages with ID > afterID, oldest first.
	OutboxListAfter(ctx context.Context, afterID int64, limit int) ([]*OutboxMessage, error)
	// OutboxBacklog counts the outbox messages not sent yet, for the metrics.
	OutboxBacklog(ctx context.Context) (OutboxBacklog, error)
	// OutboxUnsentByKey counts the unsent outbox messages of topic whose key is one of keys.
	OutboxUnsentByKey(ctx context.Context, topic string, keys []string) (int, error)
}

// OutboxWriter writes the outbox, inside a Tx.
type OutboxWriter interface {
	OutboxInsertMany(ctx context.Context, msgs []*OutboxMessage) error
	// OutboxClaim selects up to p.Limit unsent outbox messages with AvailableAt at or before p.Now,
	// oldest (lowest ID) first, and locks them for the rest of the transaction, skipping rows
	// another transaction holds, so that relays on several replicas never take the same message.
	// Only messages p.Filter selects are claimed.
	OutboxClaim(ctx context.Context, p OutboxClaimParams) ([]*OutboxMessage, error)
	// OutboxMarkSent sets the sent time of the messages; ids that do not exist are ignored.
	OutboxMarkSent(ctx context.Context, ids []int64, at time.Time) error
	// OutboxDelete deletes the messages of ids, sent or not; ids that do not exist are ignored.
	OutboxDelete(ctx context.Context, ids []int64) error
	// OutboxRetry records a failed publish of message p.ID: its attempt count becomes p.Attempts
	// and it is not claimable again before p.NextAt. ErrNotFound if there is no such message.
	OutboxRetry(ctx context.Context, p OutboxRetryParams) error
	// OutboxDeleteSent deletes up to limit messages sent before the given time (never an unsent
	// one) and returns how many it deleted.
	OutboxDeleteSent(ctx context.Context, before time.Time, limit int) (int, error)
}

// PipelineReader reads pipelines and their versions.
type PipelineReader interface {
	PipelineGet(ctx context.Context, tenant, name string) (*Pipeline, error)
	// PipelineList lists a tenant's pipelines by name.
	PipelineList(ctx context.Context, tenant string) ([]*Pipeline, error)
	PipelineVersionGet(ctx context.Context, k PipelineVersionKey) (*PipelineVersion, error)
	// PipelineVersionList lists a pipeline's versions, newest deploy first.
	PipelineVersionList(ctx context.Context, tenant, name string) ([]*PipelineVersion, error)
	// PipelineVersionState is a version's State; ErrNotFound when there is no such version.
	PipelineVersionState(ctx context.Context, k PipelineVersionKey) (string, error)
	// PipelineTaskCounts counts the tasks of a pipeline's jobs by pipeline job and status.
	PipelineTaskCounts(ctx context.Context, tenant, name string) ([]*PipelineTaskCount, error)
	// PipelineListActive lists every tenant's pipelines.
	PipelineListActive(ctx context.Context) ([]*Pipeline, error)
	// PipelineJobTasks counts the tasks of one pipeline job: all of them, and those not yet
	// terminal (waiting, pending, running).
	PipelineJobTasks(ctx context.Context, k PipelineJobKey) (total, live int, err error)
	// PipelineJobLatest is the job of a pipeline job inserted last; ErrNotFound if it has none.
	PipelineJobLatest(ctx context.Context, k PipelineJobKey) (*Job, error)
	// PipelineTasksUnfinished lists the tasks of a pipeline that have not ended (waiting, pending
	// or running), with their jobs, by job id and task: of version k.Version, or of every version
	// when k.Version is "".
	PipelineTasksUnfinished(ctx context.Context, k PipelineVersionKey) ([]*PipelineTaskRef, error)
	// PipelineTasksSince lists the tasks of pipeline version k (k.Version must be set) whose jobs
	// were created at or after since, whatever their status, by job id and task.
	PipelineTasksSince(ctx context.Context, k PipelineVersionKey, since time.Time) ([]*PipelineTaskRef, error)
	// PipelineTasksReplacedActive lists up to limit tasks, of every tenant, canceled with reason
	// CancelVersionReplaced that are of the active version of their pipeline.
	PipelineTasksReplacedActive(ctx context.Context, limit int) ([]*PipelineTaskRef, error)
	// ConsumerList lists the inputs of active and building pipeline versions that read the
	// datasets of uuids.
	ConsumerList(ctx context.Context, uuids []string) ([]*Consumer, error)
	// PipelineVersionTaskCounts counts the tasks of one pipeline version's jobs by job and status.
	PipelineVersionTaskCounts(ctx context.Context, k PipelineVersionKey) ([]*PipelineTaskCount, error)
}

// PipelineWriter writes pipelines and their versions, inside a Tx.
type PipelineWriter interface {
	// PipelinePut inserts a pipeline or updates its active version.
	PipelinePut(ctx context.Context, p *Pipeline) error
	// PipelineVersionInsert stores a version; ok is false, and nothing changes, when the
	// pipeline already has that version.
	PipelineVersionInsert(ctx context.Context, v *PipelineVersion) (ok bool, err error)
	// PipelineVersionSetState sets a version's State.
	PipelineVersionSetState(ctx context.Context, k PipelineVersionKey, state string) error
	// PipelineVersionSetBuild sets a version's Build.
	PipelineVersionSetBuild(ctx context.Context, k PipelineVersionKey, build json.RawMessage) error
	// PipelineVersionSetPointers sets a version's Pointers.
	PipelineVersionSetPointers(ctx context.Context, k PipelineVersionKey, pointers json.RawMessage) error
	// ConsumerInsertMany stores a version's inputs; those already stored are skipped.
	ConsumerInsertMany(ctx context.Context, cs []*Consumer) error
}

// DatasetReader reads datasets, their versions and events.
type DatasetReader interface {
	DatasetEventListByTask(ctx context.Context, taskID string) ([]*DatasetEvent, error)
	// DatasetGetMany returns the datasets of uuids that exist, in no particular order.
	DatasetGetMany(ctx context.Context, uuids []string) ([]*Dataset, error)
	DatasetGetByName(ctx context.Context, tenant, name string) (*Dataset, error)
	// DatasetListByProducer returns the tenant's datasets of the given producers that exist.
	DatasetListByProducer(ctx context.Context, tenant string, producers []string) ([]*Dataset, error)
	// DatasetList lists a tenant's datasets, named ones first by name.
	DatasetList(ctx context.Context, tenant string) ([]*Dataset, error)
	// DatasetVersionList lists the registered versions of the datasets of uuids, oldest first.
	DatasetVersionList(ctx context.Context, uuids ...string) ([]*DatasetVersion, error)
	// DatasetEventListRecent lists the latest p.Limit events reported on dataset p.DatasetUUID by
	// tasks of p.Tenant's jobs, newest first.
	DatasetEventListRecent(ctx context.Context, p DatasetEventListRecentParams) ([]*DatasetEvent, error)
	// DatasetEventListAfter lists up to p.Limit events of version p.DatasetVersion of dataset
	// p.DatasetUUID with an id in (p.AfterID, p.ThroughID], by id.
	DatasetEventListAfter(ctx context.Context, p DatasetEventListParams) ([]*DatasetEvent, error)
	// DatasetEventMaxID is the greatest id of a stored dataset event, 0 when there is none.
	DatasetEventMaxID(ctx context.Context) (int64, error)
}

// DatasetWriter writes datasets, their versions and events, inside a Tx.
type DatasetWriter interface {
	// DatasetEventInsertMany stores events, skipping any whose DedupeKey is already stored, and
	// returns how many were new; each new event gets its ID, a skipped one keeps ID 0.
	DatasetEventInsertMany(ctx context.Context, events []*DatasetEvent) (int, error)
	// DatasetInsertMany stores datasets; one whose (tenant, producer) exists is skipped. A name
	// another dataset of the tenant holds is ErrConflict.
	DatasetInsertMany(ctx context.Context, ds []*Dataset) error
	// DatasetUpdate writes a dataset's name, current version, storage, write mode, schema and
	// filter fields. A name another dataset of the tenant holds is ErrConflict.
	DatasetUpdate(ctx context.Context, d *Dataset) error
	// DatasetVersionInsertMany registers versions; those already registered are skipped, whatever
	// their values (a task's registration compares them first: dataplane.Plane.RegisterVersions).
	DatasetVersionInsertMany(ctx context.Context, vs []*DatasetVersion) error
}

// BufferReader reads the Buffer Queue of buffered publishes.
type BufferReader interface {
	BufferPublishListByTask(ctx context.Context, taskID string) ([]*BufferPublish, error)
	// BufferPublishGet reads one publish record (locking it inside a Tx); ErrNotFound if none.
	BufferPublishGet(ctx context.Context, id int64) (*BufferPublish, error)
	// BufferPublishListDeadLetters returns up to p.Limit dead buffer publishes of dataset
	// p.DatasetUUID with ID > p.AfterID, oldest first.
	BufferPublishListDeadLetters(ctx context.Context, p BufferPublishListDeadLettersParams) ([]*BufferPublish, error)
}

// BufferWriter writes the Buffer Queue of buffered publishes, inside a Tx.
type BufferWriter interface {
	// BufferPublishInsert stores a publish record; ok is false, and nothing changes, when the same
	// (task, attempt, batch URI) was recorded before.
	BufferPublishInsert(ctx context.Context, p *BufferPublish) (ok bool, err error)
	// BufferPublishListClaimable selects up to p.Limit queued publishes visible at or before p.Now
	// (only publish p.ID, when p.ID > 0), oldest first, and locks them for the rest of the
	// transaction, skipping rows another transaction holds.
	BufferPublishListClaimable(ctx context.Context, p BufferPublishListClaimableParams) ([]*BufferPublish, error)
	// BufferPublishUpdate writes a publish's queue fields: State, ReceiveCount, VisibleAt,
	// LastError, Cursor, RowsInserted and FinishedAt. ErrNotFound if there is no such record.
	BufferPublishUpdate(ctx context.Context, p *BufferPublish) error
	// BufferPublishExtend sets the VisibleAt of publish p.ID to p.VisibleAt when it is queued and
	// its ReceiveCount is p.Receipt, so that only the latest receive of a message extends its
	// claim; ok is false, and nothing changes, otherwise (also when there is no such record).
	BufferPublishExtend(ctx context.Context, p BufferPublishExtendParams) (ok bool, err error)
	// BufferPublishDiscardQueued dead-letters every queued publish of p.Tenant into dataset
	// p.DatasetUUID, with p.Reason as its LastError and p.Now as its FinishedAt, and returns how
	// many it dead-lettered. Committed and dead publishes are left as they are.
	BufferPublishDiscardQueued(ctx context.Context, p BufferPublishDiscardParams) (int, error)
}
