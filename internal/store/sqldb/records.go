package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/store"
)

const attemptCols = `task_id, attempt, worker_id, lease_token, started_at, finished_at, outcome,
	result, error, metrics, traceparent`

// attemptColumns is attemptCols as a list.
var attemptColumns = strings.FieldsFunc(attemptCols, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })

func scanAttempt(row interface{ Scan(...any) error }) (*store.Attempt, error) {
	var (
		a                store.Attempt
		started          int64
		finished         sql.NullInt64
		errJSON, metrics sql.NullString
	)
	if err := row.Scan(&a.TaskID, &a.Attempt, &a.WorkerID, &a.LeaseToken, &started, &finished,
		&a.Outcome, &a.Result, &errJSON, &metrics, &a.Traceparent); err != nil {
		return nil, notFound(err)
	}
	a.StartedAt = fromMs(sql.NullInt64{Int64: started, Valid: true})
	a.FinishedAt = fromMs(finished)
	a.Metrics = fromJSON(metrics)
	var err error
	a.Error, err = fromErr(errJSON)
	return &a, err
}

// AttemptGet implements store.Reader.
func (q q) AttemptGet(ctx context.Context, taskID string, attempt int) (*store.Attempt, error) {
	return scanAttempt(q.queryRow(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE task_id = $1 AND attempt = $2`, taskID, attempt))
}

// AttemptList implements store.Reader.
func (q q) AttemptList(ctx context.Context, taskID string) ([]*store.Attempt, error) {
	rows, err := q.query(ctx, `SELECT `+attemptCols+` FROM attempts WHERE task_id = $1
		ORDER BY attempt`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	defer rows.Close()
	var out []*store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// AttemptInsert implements store.Tx.
func (t *tx) AttemptInsert(ctx context.Context, a *store.Attempt) error {
	errJSON, err := errArg(a.Error)
	if err != nil {
		return err
	}
	_, err = t.exec(ctx, `INSERT INTO attempts (`+attemptCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		a.TaskID, a.Attempt, a.WorkerID, a.LeaseToken, ms(a.StartedAt), ms(a.FinishedAt),
		string(a.Outcome), string(a.Result), errJSON, jsonArg(a.Metrics), a.Traceparent)
	if err != nil {
		return fmt.Errorf("insert attempt %s/%d: %w", a.TaskID, a.Attempt, err)
	}
	return nil
}

// AttemptPutMany implements store.Tx.
func (t *tx) AttemptPutMany(ctx context.Context, as []*store.Attempt) error {
	if len(as) == 0 {
		return nil
	}
	rows := make([][]any, len(as))
	for i, a := range as {
		errJSON, err := errArg(a.Error)
		if err != nil {
			return err
		}
		rows[i] = []any{a.TaskID, a.Attempt, a.WorkerID, a.LeaseToken, ms(a.StartedAt), ms(a.FinishedAt),
			string(a.Outcome), string(a.Result), errJSON, jsonArg(a.Metrics), a.Traceparent}
	}
	return t.insertRows(ctx, "attempts", attemptColumns, rows, ` ON CONFLICT (task_id, attempt) DO UPDATE SET
		worker_id = excluded.worker_id, lease_token = excluded.lease_token, started_at = excluded.started_at,
		finished_at = excluded.finished_at, outcome = excluded.outcome, result = excluded.result,
		error = excluded.error, metrics = excluded.metrics,
		traceparent = CASE WHEN excluded.traceparent = '' THEN attempts.traceparent ELSE excluded.traceparent END`)
}

// EventList implements store.Reader.
func (q q) EventList(ctx context.Context, p store.EventListParams) ([]*store.Event, error) {
	rows, err := q.query(ctx, `SELECT id, job_id, task_id, task_key, type, at, data
		FROM events WHERE job_id = $1 AND id > $2 ORDER BY id LIMIT $3`, p.JobID, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return collectEvents(rows)
}

// EventListByTask implements store.Reader. The job's condition lets the query walk the job's
// events index: events have no index by task, which would cost every transition a write.
func (q q) EventListByTask(ctx context.Context, p store.EventListByTaskParams) ([]*store.Event, error) {
	if p.TaskID == "" { // job events have no task id: they are not a task's
		return nil, nil
	}
	rows, err := q.query(ctx, `SELECT id, job_id, task_id, task_key, type, at, data
		FROM events WHERE job_id = $1 AND task_id = $2 AND id > $3 ORDER BY id LIMIT $4`, p.JobID, p.TaskID, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list task events: %w", err)
	}
	return collectEvents(rows)
}

func collectEvents(rows *sql.Rows) ([]*store.Event, error) {
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		var (
			e    store.Event
			at   int64
			data string
		)
		if err := rows.Scan(&e.ID, &e.JobID, &e.TaskID, &e.TaskKey, &e.Type, &at, &data); err != nil {
			return nil, err
		}
		e.At = fromMs(sql.NullInt64{Int64: at, Valid: true})
		e.Data = []byte(data)
		out = append(out, &e)
	}
	return out, rows.Err()
}

// EventInsertMany implements store.Tx.
func (t *tx) EventInsertMany(ctx context.Context, events []*store.Event) error {
	rows := make([][]any, len(events))
	for i, e := range events {
		data := string(e.Data)
		if e.Data == nil {
			data = "{}"
		}
		rows[i] = []any{e.JobID, e.TaskID, e.TaskKey, e.Type, e.At.UnixMilli(), data}
	}
	return t.insertRows(ctx, "events", []string{"job_id", "task_id", "task_key", "type", "at", "data"}, rows, "")
}

// OutboxListAfter implements store.Reader.
func (q q) OutboxListAfter(ctx context.Context, afterID int64, limit int) ([]*store.OutboxMessage, error) {
	rows, err := q.query(ctx, `SELECT id, topic, msg_key, payload, available_at, created_at
		FROM outbox WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	defer rows.Close()
	var out []*store.OutboxMessage
	for rows.Next() {
		var (
			m                  store.OutboxMessage
			payload            string
			available, created int64
		)
		if err := rows.Scan(&m.ID, &m.Topic, &m.Key, &payload, &available, &created); err != nil {
			return nil, err
		}
		m.Payload = []byte(payload)
		m.AvailableAt = fromMs(sql.NullInt64{Int64: available, Valid: true})
		m.CreatedAt = fromMs(sql.NullInt64{Int64: created, Valid: true})
		out = append(out, &m)
	}
	return out, rows.Err()
}

// OutboxInsertMany implements store.Tx.
func (t *tx) OutboxInsertMany(ctx context.Context, msgs []*store.OutboxMessage) error {
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		rows[i] = []any{m.Topic, m.Key, string(m.Payload), m.AvailableAt.UnixMilli(), m.CreatedAt.UnixMilli()}
	}
	return t.insertRows(ctx, "outbox", []string{"topic", "msg_key", "payload", "available_at", "created_at"}, rows, "")
}
