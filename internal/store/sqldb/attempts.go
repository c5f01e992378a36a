package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const attemptCols = `task_id, attempt, worker_id, lease_token, started_at, finished_at, outcome,
	result, error, metrics, traceparent`

// attemptColumns is attemptCols as a list.
var attemptColumns = strings.FieldsFunc(attemptCols, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })

func scanAttempt(row rowScanner) (*store.Attempt, error) {
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
	a.StartedAt = sqltext.Time(sql.NullInt64{Int64: started, Valid: true})
	a.FinishedAt = sqltext.Time(finished)
	a.Metrics = sqltext.FromJSON(metrics)
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
	return collect(rows, scanAttempt)
}

// AttemptInsert implements store.Tx.
func (t *tx) AttemptInsert(ctx context.Context, a *store.Attempt) error {
	errJSON, err := errArg(a.Error)
	if err != nil {
		return err
	}
	_, err = t.exec(ctx, `INSERT INTO attempts (`+attemptCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		a.TaskID, a.Attempt, a.WorkerID, a.LeaseToken, sqltext.Millis(a.StartedAt), sqltext.Millis(a.FinishedAt),
		string(a.Outcome), string(a.Result), errJSON, sqltext.JSON(a.Metrics), a.Traceparent)
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
		rows[i] = []any{a.TaskID, a.Attempt, a.WorkerID, a.LeaseToken, sqltext.Millis(a.StartedAt), sqltext.Millis(a.FinishedAt),
			string(a.Outcome), string(a.Result), errJSON, sqltext.JSON(a.Metrics), a.Traceparent}
	}
	return t.insertRows(ctx, "attempts", attemptColumns, rows, ` ON CONFLICT (task_id, attempt) DO UPDATE SET
		worker_id = excluded.worker_id, lease_token = excluded.lease_token, started_at = excluded.started_at,
		finished_at = excluded.finished_at, outcome = excluded.outcome, result = excluded.result,
		error = excluded.error, metrics = excluded.metrics,
		traceparent = CASE WHEN excluded.traceparent = '' THEN attempts.traceparent ELSE excluded.traceparent END`)
}
