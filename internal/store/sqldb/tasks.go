package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// tx is a store.Tx.
type tx struct {
	q
	savepoints int   // savepoints taken so far, for unique names
	doomed     error // a nested part failed with a transient error: the transaction fails with it
}

// Nested implements store.Tx.
func (t *tx) Nested(ctx context.Context, fn func(store.Tx) error) error {
	t.savepoints++
	name := "sp" + strconv.Itoa(t.savepoints)
	if _, err := t.exec(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	ferr := fn(t)
	if ferr == nil {
		if _, err := t.exec(ctx, "RELEASE SAVEPOINT "+name); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
		return nil
	}
	if t.d.Transient(ferr) && t.doomed == nil {
		t.doomed = ferr
	}
	if _, err := t.exec(ctx, "ROLLBACK TO SAVEPOINT "+name); err != nil {
		return errors.Join(ferr, fmt.Errorf("roll back to savepoint: %w", err))
	}
	if _, err := t.exec(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return errors.Join(ferr, fmt.Errorf("release savepoint: %w", err))
	}
	return ferr
}

var _ store.Tx = (*tx)(nil)

const taskCols = `seq, id, job_id, task_key, name, queue, priority, runtime, input, depends_on,
	unfinished_parents, status, attempt, retry_base, max_attempts, available_at, lease_token,
	lease_expires_at, worker_id, started_at, heartbeat_at, deadline_at, reap_at,
	cancel_requested_at, cancel_reason, output, error, backoff_base_ms, backoff_max_ms, timeout_ms,
	heartbeat_timeout_ms, cancel_grace_ms, created_at, finished_at, dead_lettered_at,
	last_event_type, last_event_at, route, concurrency_key, concurrency_limit, traceparent`

func scanTask(row interface{ Scan(...any) error }) (*store.Task, error) {
	var (
		t                                                  store.Task
		input, deps                                        string
		output, errJSON, lastEvent, route, concurrency     sql.NullString
		available, created                                 int64
		leaseExp, started, hb, deadline, reap, cancelReq   sql.NullInt64
		finished, dead, lastAt                             sql.NullInt64
		backoffBase, backoffMax, timeout, hbTimeout, grace int64
	)
	err := row.Scan(&t.Seq, &t.ID, &t.JobID, &t.Key, &t.Name, &t.Queue, &t.Priority, &t.Runtime,
		&input, &deps, &t.UnfinishedParents, &t.Status, &t.Attempt, &t.RetryBase, &t.MaxAttempts,
		&available, &t.LeaseToken, &leaseExp, &t.WorkerID, &started, &hb, &deadline, &reap,
		&cancelReq, &t.CancelReason, &output, &errJSON, &backoffBase, &backoffMax, &timeout,
		&hbTimeout, &grace, &created, &finished, &dead, &lastEvent, &lastAt, &route,
		&concurrency, &t.ConcurrencyLimit, &t.Traceparent)
	if err != nil {
		return nil, notFound(err)
	}
	t.Input = json.RawMessage(input)
	if err := json.Unmarshal([]byte(deps), &t.DependsOn); err != nil {
		return nil, fmt.Errorf("decode depends_on of task %s: %w", t.ID, err)
	}
	t.AvailableAt = time.UnixMilli(available).UTC()
	t.LeaseExpiresAt = fromMs(leaseExp)
	t.StartedAt = fromMs(started)
	t.HeartbeatAt = fromMs(hb)
	t.DeadlineAt = fromMs(deadline)
	t.ReapAt = fromMs(reap)
	t.CancelRequestedAt = fromMs(cancelReq)
	t.Output = fromJSON(output)
	if t.Error, err = fromErr(errJSON); err != nil {
		return nil, err
	}
	t.BackoffBase = time.Duration(backoffBase) * time.Millisecond
	t.BackoffMax = time.Duration(backoffMax) * time.Millisecond
	t.Timeout = time.Duration(timeout) * time.Millisecond
	t.HeartbeatTimeout = time.Duration(hbTimeout) * time.Millisecond
	t.CancelGrace = time.Duration(grace) * time.Millisecond
	t.CreatedAt = time.UnixMilli(created).UTC()
	t.FinishedAt = fromMs(finished)
	t.DeadLetteredAt = fromMs(dead)
	t.LastEventType = lastEvent.String
	t.LastEventAt = fromMs(lastAt)
	t.Route = fromJSON(route)
	t.ConcurrencyKey = concurrency.String
	return &t, nil
}

// TaskGet implements store.Reader.
func (q q) TaskGet(ctx context.Context, id string) (*store.Task, error) {
	return scanTask(q.queryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1`+q.lockRow(), id))
}

// TaskListByJob implements store.Reader.
func (q q) TaskListByJob(ctx context.Context, jobID string) ([]*store.TaskSummary, error) {
	return q.jobTasks(ctx, jobID, false)
}

// TaskListByJobWithResults implements store.Reader.
func (q q) TaskListByJobWithResults(ctx context.Context, jobID string) ([]*store.TaskSummary, error) {
	return q.jobTasks(ctx, jobID, true)
}

// jobTasks reads a job's task summaries. With results, the CASE projections read the output of
// completed tasks and the error of failed ones only, so the rows of unfinished tasks (and stale
// results of retried or resumed ones) cost nothing.
func (q q) jobTasks(ctx context.Context, jobID string, withResults bool) ([]*store.TaskSummary, error) {
	results := "NULL, NULL"
	if withResults {
		results = "CASE WHEN status = 'completed' THEN output END, CASE WHEN status = 'failed' THEN error END"
	}
	rows, err := q.query(ctx, `SELECT id, task_key, name, depends_on, status, attempt,
		last_event_type, last_event_at, `+results+` FROM tasks WHERE job_id = $1 ORDER BY seq`, jobID)
	if err != nil {
		return nil, fmt.Errorf("job tasks: %w", err)
	}
	defer rows.Close()
	var out []*store.TaskSummary
	for rows.Next() {
		var (
			s                       store.TaskSummary
			deps                    string
			lastEvent, output, errJ sql.NullString
			lastAt                  sql.NullInt64
		)
		if err := rows.Scan(&s.ID, &s.Key, &s.Name, &deps, &s.Status, &s.Attempt, &lastEvent, &lastAt, &output, &errJ); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(deps), &s.DependsOn); err != nil {
			return nil, fmt.Errorf("decode depends_on of task %s: %w", s.ID, err)
		}
		s.LastEventType = lastEvent.String
		s.LastEventAt = fromMs(lastAt)
		s.Output = fromJSON(output)
		if s.Error, err = fromErr(errJ); err != nil {
			return nil, fmt.Errorf("task %s: %w", s.ID, err)
		}
		out = append(out, &s)
	}
	return out, rows.Err()
}

// TaskParentOutputs implements store.Reader.
func (q q) TaskParentOutputs(ctx context.Context, taskID string) (map[string]json.RawMessage, error) {
	all, err := q.TaskParentOutputsMany(ctx, []string{taskID})
	if err != nil {
		return nil, err
	}
	if out := all[taskID]; out != nil {
		return out, nil
	}
	return map[string]json.RawMessage{}, nil
}

// TaskParentOutputsMany implements store.Reader.
func (q q) TaskParentOutputsMany(ctx context.Context, taskIDs []string) (map[string]map[string]json.RawMessage, error) {
	out := map[string]map[string]json.RawMessage{}
	if len(taskIDs) == 0 {
		return out, nil
	}
	cond, args := q.in("d.child_id", 1, taskIDs)
	// A parent is looked up by id for each dependency (correlated subqueries): as a join, the
	// planner overestimated the dependencies of a batch and hashed the whole tasks table for it
	// (26 ms instead of 1.7 ms for the children of a 256-task claim on PostgreSQL).
	rows, err := q.query(ctx, `SELECT d.child_id, (SELECT p.task_key FROM tasks p WHERE p.id = d.parent_id),
		(SELECT p.output FROM tasks p WHERE p.id = d.parent_id) FROM task_deps d WHERE `+cond, args...)
	if err != nil {
		return nil, fmt.Errorf("parent outputs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			child       string
			key, output sql.NullString
		)
		if err := rows.Scan(&child, &key, &output); err != nil {
			return nil, err
		}
		if !key.Valid {
			continue // no such parent (as the join had it)
		}
		if out[child] == nil {
			out[child] = map[string]json.RawMessage{}
		}
		out[child][key.String] = fromJSON(output)
		if out[child][key.String] == nil {
			out[child][key.String] = json.RawMessage("null")
		}
	}
	return out, rows.Err()
}

// deadLettered is the condition of a dead letter, on tasks aliased t: failed for good (a resume
// clears dead_lettered_at). It matches the partial index tasks_dead.
const deadLettered = "t.status = 'failed' AND t.dead_lettered_at IS NOT NULL"

// TaskListDeadLetters implements store.Reader.
func (q q) TaskListDeadLetters(ctx context.Context, p store.TaskListDeadLettersParams) ([]*store.Task, error) {
	rows, err := q.query(ctx, `SELECT `+prefixed("t.", taskCols)+` FROM tasks t
		JOIN jobs j ON j.id = t.job_id
		WHERE j.tenant = $1 AND `+deadLettered+`
		AND (CAST($2 AS BIGINT) = 0 OR t.seq < $2) ORDER BY t.seq DESC LIMIT $3`, p.Tenant, p.BeforeSeq, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return collectTasks(rows)
}

// TaskNextReapAt implements store.Reader.
func (q q) TaskNextReapAt(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullInt64
	if err := q.queryRow(ctx, `SELECT min(reap_at) FROM tasks WHERE status = 'running'`).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("next reap: %w", err)
	}
	return fromMs(at), at.Valid, nil
}

// TaskListDue implements store.Reader.
func (q q) TaskListDue(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return q.ids(ctx, `SELECT id FROM tasks WHERE status = 'running' AND reap_at <= $1
		ORDER BY reap_at LIMIT $2`, now.UnixMilli(), limit)
}

// TaskNextAvailableAt implements store.Reader.
func (q q) TaskNextAvailableAt(ctx context.Context, queues []string) (time.Time, bool, error) {
	if len(queues) == 0 {
		return time.Time{}, false, nil
	}
	var b strings.Builder
	args := make([]any, len(queues))
	for i, qu := range queues {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d", i+1)
		args[i] = qu
	}
	var at sql.NullInt64
	err := q.queryRow(ctx, `SELECT min(available_at) FROM tasks WHERE status = 'pending'
		AND runtime = 'pull' AND queue IN (`+b.String()+`)`+notAtCap, args...).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next available: %w", err)
	}
	return fromMs(at), at.Valid, nil
}

// TaskNextPushAvailableAt implements store.Reader.
func (q q) TaskNextPushAvailableAt(ctx context.Context, targets []string) (time.Time, bool, error) {
	var at sql.NullInt64
	deliverable, args := pushDeliverable(targets, 1)
	err := q.queryRow(ctx, `SELECT min(available_at) FROM tasks WHERE status = 'pending' AND runtime = 'push'`+deliverable+notAtCap, args...).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next push available: %w", err)
	}
	return fromMs(at), at.Valid, nil
}

// TaskReadyCounts implements store.Reader.
func (q q) TaskReadyCounts(ctx context.Context, before time.Time) (map[string]int, error) {
	rows, err := q.query(ctx, `SELECT queue, count(*) FROM tasks WHERE status = 'pending'
		AND runtime = 'pull' AND available_at <= $1 GROUP BY queue`, before.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("ready counts: %w", err)
	}
	defer rows.Close()
	counts := map[string]int{}
	for rows.Next() {
		var (
			queue string
			n     int
		)
		if err := rows.Scan(&queue, &n); err != nil {
			return nil, fmt.Errorf("ready counts: %w", err)
		}
		counts[queue] = n
	}
	return counts, rows.Err()
}

// TaskCounts implements store.Reader. Pending and running tasks are counted through their
// partial indexes (tasks_ready, tasks_reap), dead-lettered ones through tasks_dead; waiting tasks
// have no index of their own, so they are found among the tasks of processing jobs (by job id,
// the unique index on job_id and task_key), as only an unfinished job has waiting tasks. The
// cost follows the live work and the dead letters, not the table's history.
func (q q) TaskCounts(ctx context.Context) ([]store.TaskCount, error) {
	rows, err := q.query(ctx, `SELECT queue, 'pending', count(*) FROM tasks WHERE status = 'pending' GROUP BY queue
		UNION ALL SELECT queue, 'running', count(*) FROM tasks WHERE status = 'running' GROUP BY queue
		UNION ALL SELECT t.queue, 'waiting', count(*) FROM jobs j JOIN tasks t ON t.job_id = j.id
			WHERE j.status = 'processing' AND t.status = 'waiting' GROUP BY t.queue
		UNION ALL SELECT t.queue, '`+store.DeadLettered+`', count(*) FROM tasks t WHERE `+deadLettered+` GROUP BY t.queue`)
	if err != nil {
		return nil, fmt.Errorf("task counts: %w", err)
	}
	defer rows.Close()
	var counts []store.TaskCount
	for rows.Next() {
		var c store.TaskCount
		if err := rows.Scan(&c.Queue, &c.State, &c.N); err != nil {
			return nil, fmt.Errorf("task counts: %w", err)
		}
		counts = append(counts, c)
	}
	return counts, rows.Err()
}

// TaskListOldestReady implements store.Reader.
func (q q) TaskListOldestReady(ctx context.Context, p store.TaskListOldestReadyParams) ([]string, error) {
	ids, err := q.ids(ctx, `SELECT id FROM tasks WHERE status = 'pending' AND queue = $1
		AND runtime = 'pull' AND available_at <= $2 ORDER BY available_at, seq LIMIT $3`,
		p.Queue, p.Before.UnixMilli(), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("oldest ready of %s: %w", p.Queue, err)
	}
	return ids, nil
}

// TaskReadyNotify implements store.Tx.
func (t *tx) TaskReadyNotify(ctx context.Context) error {
	if t.d.Notify == "" {
		return nil
	}
	_, err := t.exec(ctx, t.d.Notify)
	return err
}

func (q q) ids(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func collectTasks(rows *sql.Rows) ([]*store.Task, error) {
	defer rows.Close()
	var out []*store.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TaskInsertMany implements store.Tx.
func (t *tx) TaskInsertMany(ctx context.Context, tasks []*store.Task) error {
	cols := []string{"id", "job_id", "task_key", "name", "queue", "priority", "runtime", "input",
		"depends_on", "unfinished_parents", "status", "max_attempts", "available_at",
		"backoff_base_ms", "backoff_max_ms", "timeout_ms", "heartbeat_timeout_ms", "cancel_grace_ms",
		"created_at", "finished_at", "last_event_type", "last_event_at", "route", "concurrency_key",
		"concurrency_limit", "traceparent"}
	rows := make([][]any, len(tasks))
	for i, tk := range tasks {
		deps, err := json.Marshal(tk.DependsOn)
		if err != nil {
			return err
		}
		if tk.DependsOn == nil {
			deps = []byte("[]")
		}
		rows[i] = []any{tk.ID, tk.JobID, tk.Key, tk.Name, tk.Queue, tk.Priority, tk.Runtime,
			string(tk.Input), string(deps), tk.UnfinishedParents, string(tk.Status), tk.MaxAttempts,
			tk.AvailableAt.UnixMilli(), tk.BackoffBase.Milliseconds(), tk.BackoffMax.Milliseconds(),
			tk.Timeout.Milliseconds(), tk.HeartbeatTimeout.Milliseconds(), tk.CancelGrace.Milliseconds(),
			tk.CreatedAt.UnixMilli(), ms(tk.FinishedAt), strArg(tk.LastEventType), ms(tk.LastEventAt),
			jsonArg(tk.Route), strArg(tk.ConcurrencyKey), tk.ConcurrencyLimit, tk.Traceparent}
	}
	return t.insertRows(ctx, "tasks", cols, rows, "")
}

// DepInsertMany implements store.Tx.
func (t *tx) DepInsertMany(ctx context.Context, deps []store.Dep) error {
	rows := make([][]any, len(deps))
	for i, d := range deps {
		rows[i] = []any{d.ChildID, d.ParentID, d.JobID}
	}
	return t.insertRows(ctx, "task_deps", []string{"child_id", "parent_id", "job_id"}, rows, "")
}

// notAtCap leaves out the tasks whose concurrency key has as many tasks running as its limit:
// they are not claimable until one of those ends (see claimLimited).
const notAtCap = ` AND (concurrency_key IS NULL OR concurrency_limit > (SELECT COUNT(*) FROM tasks r
		WHERE r.concurrency_key = tasks.concurrency_key AND r.status = 'running'))`

// TaskListReadyIDs implements store.Tx.
func (t *tx) TaskListReadyIDs(ctx context.Context, p store.TaskListReadyIDsParams) ([]string, error) {
	ids, err := t.ids(ctx, `SELECT id FROM tasks WHERE status = 'pending' AND queue = $1
		AND available_at <= $2 AND runtime = 'pull'`+notAtCap+` ORDER BY priority DESC, available_at, seq LIMIT $3`+t.d.LockSkip,
		p.Queue, p.Now.UnixMilli(), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("ready tasks of %s: %w", p.Queue, err)
	}
	return ids, nil
}

// TaskListReadyPushIDs implements store.Tx.
func (t *tx) TaskListReadyPushIDs(ctx context.Context, p store.TaskListReadyPushIDsParams) ([]string, error) {
	deliverable, args := pushDeliverable(p.Targets, 3)
	ids, err := t.ids(ctx, `SELECT id FROM tasks WHERE status = 'pending' AND runtime = 'push'
		AND available_at <= $1`+deliverable+notAtCap+` ORDER BY priority DESC, available_at, seq LIMIT $2`+t.d.LockSkip,
		append([]any{p.Now.UnixMilli(), p.Limit}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("ready push tasks: %w", err)
	}
	return ids, nil
}

// pushDeliverable is the condition that keeps the push tasks a deliverer with targets may
// deliver (store.TaskListReadyPushIDsParams), with its arguments, numbered from first.
func pushDeliverable(targets []string, first int) (string, []any) {
	if len(targets) == 0 {
		return ` AND route IS NULL`, nil
	}
	marks := make([]string, len(targets))
	args := make([]any, len(targets))
	for i, name := range targets {
		marks[i] = "$" + strconv.Itoa(first+i)
		args[i] = name
	}
	return ` AND (route IS NULL OR name IN (` + strings.Join(marks, ", ") + `))`, args
}

// TaskClaim implements store.Tx. The WHERE clause is the fence: of two claims racing for one
// task, the second finds it no longer pending.
func (t *tx) TaskClaim(ctx context.Context, p store.ClaimTaskParams) (*store.Task, bool, error) {
	tasks, err := t.TaskClaimMany(ctx, []store.ClaimTaskParams{p})
	if err != nil || len(tasks) == 0 {
		return nil, false, err
	}
	return tasks[0], true, nil
}

// TaskUpdate implements store.Tx.
func (t *tx) TaskUpdate(ctx context.Context, tk *store.Task, fence store.Fence) error {
	errJSON, err := errArg(tk.Error)
	if err != nil {
		return err
	}
	res, err := t.exec(ctx, `UPDATE tasks SET status = $4, attempt = $5, retry_base = $6,
		max_attempts = $7, available_at = $8, lease_token = $9, lease_expires_at = $10, worker_id = $11,
		started_at = $12, heartbeat_at = $13, deadline_at = $14, reap_at = $15,
		cancel_requested_at = $16, cancel_reason = $17, output = $18, error = $19, finished_at = $20,
		dead_lettered_at = $21, last_event_type = $22, last_event_at = $23, unfinished_parents = $24
		WHERE id = $1 AND status = $2 AND attempt = $3`,
		tk.ID, string(fence.Status), fence.Attempt,
		string(tk.Status), tk.Attempt, tk.RetryBase, tk.MaxAttempts, tk.AvailableAt.UnixMilli(),
		tk.LeaseToken, ms(tk.LeaseExpiresAt), tk.WorkerID, ms(tk.StartedAt), ms(tk.HeartbeatAt),
		ms(tk.DeadlineAt), ms(tk.ReapAt), ms(tk.CancelRequestedAt), tk.CancelReason,
		jsonArg(tk.Output), errJSON, ms(tk.FinishedAt), ms(tk.DeadLetteredAt),
		strArg(tk.LastEventType), ms(tk.LastEventAt), tk.UnfinishedParents)
	if err != nil {
		return fmt.Errorf("update task %s: %w", tk.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

const refCols = `id, job_id, task_key, name, queue, runtime, status, available_at`

func (t *tx) refs(ctx context.Context, query string, args ...any) ([]*store.TaskRef, error) {
	rows, err := t.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.TaskRef
	for rows.Next() {
		var (
			r         store.TaskRef
			available int64
		)
		if err := rows.Scan(&r.ID, &r.JobID, &r.Key, &r.Name, &r.Queue, &r.Runtime, &r.Status, &available); err != nil {
			return nil, err
		}
		r.AvailableAt = time.UnixMilli(available).UTC()
		out = append(out, &r)
	}
	return out, rows.Err()
}

// TaskReleaseChildren implements store.Tx.
func (t *tx) TaskReleaseChildren(ctx context.Context, parentID string, now time.Time) ([]*store.TaskRef, error) {
	return t.TaskReleaseChildrenMany(ctx, []string{parentID}, now)
}

// TaskSkipDescendants implements store.Tx.
func (t *tx) TaskSkipDescendants(ctx context.Context, taskID string, now time.Time) ([]*store.TaskRef, error) {
	refs, err := t.refs(ctx, `WITH RECURSIVE d(id) AS (
			SELECT child_id FROM task_deps WHERE parent_id = $1
			UNION
			SELECT td.child_id FROM task_deps td JOIN d ON td.parent_id = d.id
		)
		UPDATE tasks SET status = 'skipped', finished_at = $2, reap_at = NULL,
			last_event_type = 'Task Skipped', last_event_at = $2
		WHERE id IN (SELECT id FROM d) AND status IN ('waiting', 'pending')
		RETURNING `+refCols, taskID, now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("skip descendants of %s: %w", taskID, err)
	}
	return refs, nil
}

// TaskCancelIdle implements store.Tx.
func (t *tx) TaskCancelIdle(ctx context.Context, p store.CancelParams) ([]*store.TaskRef, error) {
	refs, err := t.refs(ctx, `UPDATE tasks SET status = 'canceled', finished_at = $3,
		cancel_requested_at = $3, cancel_reason = $4, reap_at = NULL,
		last_event_type = 'Task Canceled', last_event_at = $3
		WHERE job_id = $1 AND ($2 = '' OR id = $2) AND status IN ('waiting', 'pending')
		RETURNING `+refCols, p.JobID, p.TaskID, p.Now.UnixMilli(), p.Reason)
	if err != nil {
		return nil, fmt.Errorf("cancel idle tasks of %s: %w", p.JobID, err)
	}
	return refs, nil
}

// TaskRequestCancel implements store.Tx.
func (t *tx) TaskRequestCancel(ctx context.Context, p store.CancelParams) ([]*store.TaskRef, error) {
	refs, err := t.refs(ctx, `UPDATE tasks SET cancel_requested_at = $3, cancel_reason = $4,
		reap_at = CASE WHEN reap_at IS NULL OR $3 + cancel_grace_ms < reap_at
			THEN $3 + cancel_grace_ms ELSE reap_at END
		WHERE job_id = $1 AND ($2 = '' OR id = $2) AND status = 'running'
		AND cancel_requested_at IS NULL
		RETURNING `+refCols, p.JobID, p.TaskID, p.Now.UnixMilli(), p.Reason)
	if err != nil {
		return nil, fmt.Errorf("request cancel of %s: %w", p.JobID, err)
	}
	return refs, nil
}

// TaskResume implements store.Tx.
func (t *tx) TaskResume(ctx context.Context, jobID string, now time.Time) ([]*store.TaskRef, error) {
	// Every task being resumed is unfinished, before and after this statement, so the count of a
	// task's unfinished parents is the same whichever snapshot the subquery sees.
	const unfinished = `(SELECT count(*) FROM task_deps d JOIN tasks p ON p.id = d.parent_id
		WHERE d.child_id = tasks.id AND p.status <> 'completed')`
	refs, err := t.refs(ctx, `UPDATE tasks SET
		status = CASE WHEN `+unfinished+` = 0 THEN 'pending' ELSE 'waiting' END,
		unfinished_parents = `+unfinished+`,
		retry_base = attempt, available_at = $2, error = NULL, finished_at = NULL,
		dead_lettered_at = NULL, cancel_requested_at = NULL, cancel_reason = '', reap_at = NULL,
		last_event_type = CASE WHEN `+unfinished+` = 0 THEN 'Task Pending' ELSE last_event_type END,
		last_event_at = CASE WHEN `+unfinished+` = 0 THEN $2 ELSE last_event_at END
		WHERE job_id = $1 AND status IN ('failed', 'canceled', 'skipped')
		RETURNING `+refCols, jobID, now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("resume tasks of %s: %w", jobID, err)
	}
	return refs, nil
}

func prefixed(prefix, cols string) string {
	out := []byte{}
	start := true
	for i := 0; i < len(cols); i++ {
		c := cols[i]
		if start && c != ' ' && c != '\n' && c != '\t' {
			out = append(out, prefix...)
			start = false
		}
		if c == ',' {
			start = true
		}
		out = append(out, c)
	}
	return string(out)
}
