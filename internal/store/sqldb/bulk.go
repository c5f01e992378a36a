package sqldb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// Set-based statements for batches of tasks: one statement for many rows, so that a batch costs
// a handful of round trips instead of several per task.

// placeholders returns "$from, $from+1, ..." for n parameters.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

func stringArgs(ss []string) []any {
	args := make([]any, len(ss))
	for i, s := range ss {
		args[i] = s
	}
	return args
}

// LockTasks implements store.Tx.
func (t *tx) LockTasks(ctx context.Context, ids []string) ([]*store.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := t.query(ctx, `SELECT `+taskCols+` FROM tasks WHERE id IN (`+placeholders(1, len(ids))+`)
		ORDER BY id`+t.d.LockRow, stringArgs(ids)...)
	if err != nil {
		return nil, fmt.Errorf("lock tasks: %w", err)
	}
	return collectTasks(rows)
}

// CurrentAttempts implements store.Tx.
func (t *tx) CurrentAttempts(ctx context.Context, ids []string) ([]*store.Attempt, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	fields := strings.FieldsFunc(attemptCols, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	cols := "a." + strings.Join(fields, ", a.")
	rows, err := t.query(ctx, `SELECT `+cols+` FROM attempts a JOIN tasks t ON t.id = a.task_id AND t.attempt = a.attempt
		WHERE a.task_id IN (`+placeholders(1, len(ids))+`)`, stringArgs(ids)...)
	if err != nil {
		return nil, fmt.Errorf("current attempts: %w", err)
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

// CompleteTasks implements store.Tx.
func (t *tx) CompleteTasks(ctx context.Context, done []store.CompletedTask, now time.Time) error {
	if len(done) == 0 {
		return nil
	}
	var values strings.Builder
	args := []any{now.UnixMilli()}
	for i, d := range done {
		if i > 0 {
			values.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(&values, "($%d, CAST($%d AS INTEGER), $%d)", n+1, n+2, n+3)
		args = append(args, d.ID, d.Attempt, jsonArg(d.Output))
	}
	res, err := t.exec(ctx, `WITH v(id, attempt, output) AS (VALUES `+values.String()+`)
		UPDATE tasks SET status = 'completed', output = (SELECT v.output FROM v WHERE v.id = tasks.id),
		error = NULL, lease_expires_at = NULL, deadline_at = NULL, reap_at = NULL, finished_at = $1,
		last_event_type = 'Task Completed', last_event_at = $1
		WHERE id IN (SELECT v.id FROM v) AND status = 'running'
		AND attempt = (SELECT v.attempt FROM v WHERE v.id = tasks.id)`, args...)
	if err != nil {
		return fmt.Errorf("complete tasks: %w", err)
	}
	if n, _ := res.RowsAffected(); int(n) != len(done) {
		return store.ErrLeaseLost
	}
	return nil
}

// FinishAttempts implements store.Tx.
func (t *tx) FinishAttempts(ctx context.Context, done []store.CompletedTask, now time.Time) error {
	if len(done) == 0 {
		return nil
	}
	var values strings.Builder
	args := []any{now.UnixMilli()}
	for i, d := range done {
		if i > 0 {
			values.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(&values, "($%d, CAST($%d AS INTEGER), $%d)", n+1, n+2, n+3)
		args = append(args, d.ID, d.Attempt, jsonArg(d.Metrics))
	}
	res, err := t.exec(ctx, `WITH v(task_id, attempt, metrics) AS (VALUES `+values.String()+`)
		UPDATE attempts SET finished_at = $1, outcome = 'succeeded', result = 'completed', error = NULL,
		metrics = (SELECT v.metrics FROM v WHERE v.task_id = attempts.task_id AND v.attempt = attempts.attempt)
		WHERE (task_id, attempt) IN (SELECT v.task_id, v.attempt FROM v)`, args...)
	if err != nil {
		return fmt.Errorf("finish attempts: %w", err)
	}
	if n, _ := res.RowsAffected(); int(n) != len(done) {
		return store.ErrNotFound
	}
	return nil
}

// ReleaseChildrenOf implements store.Tx.
func (t *tx) ReleaseChildrenOf(ctx context.Context, parentIDs []string, now time.Time) ([]*store.TaskRef, error) {
	if len(parentIDs) == 0 {
		return nil, nil
	}
	args := append([]any{now.UnixMilli()}, stringArgs(parentIDs)...)
	children := `SELECT d.child_id FROM d`
	if t.d.LockRow != "" {
		// Children locked in id order, as ReleaseChildren does.
		children = `SELECT id FROM tasks WHERE id IN (SELECT d.child_id FROM d) ORDER BY id` + t.d.LockRow
	}
	const n = `(SELECT d.n FROM d WHERE d.child_id = tasks.id)`
	refs, err := t.refs(ctx, `WITH d(child_id, n) AS (SELECT child_id, count(*) FROM task_deps
			WHERE parent_id IN (`+placeholders(2, len(parentIDs))+`) GROUP BY child_id)
		UPDATE tasks SET unfinished_parents = unfinished_parents - `+n+`,
		status = CASE WHEN unfinished_parents = `+n+` AND status = 'waiting' THEN 'pending' ELSE status END,
		available_at = CASE WHEN unfinished_parents = `+n+` AND status = 'waiting' THEN $1 ELSE available_at END,
		last_event_type = CASE WHEN unfinished_parents = `+n+` AND status = 'waiting' THEN 'Task Pending' ELSE last_event_type END,
		last_event_at = CASE WHEN unfinished_parents = `+n+` AND status = 'waiting' THEN $1 ELSE last_event_at END
		WHERE id IN (`+children+`) AND unfinished_parents > 0
		RETURNING `+refCols, args...)
	if err != nil {
		return nil, fmt.Errorf("release children: %w", err)
	}
	return refs, nil
}

// ClaimTasks implements store.Tx.
func (t *tx) ClaimTasks(ctx context.Context, ps []store.ClaimTaskParams) ([]*store.Task, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	p0 := ps[0]
	var values strings.Builder
	args := []any{p0.Now.UnixMilli(), p0.WorkerID, cmpOr(p0.Runtime, "pull")}
	for i, p := range ps {
		if p.WorkerID != p0.WorkerID || !p.Now.Equal(p0.Now) || cmpOr(p.Runtime, "pull") != cmpOr(p0.Runtime, "pull") {
			return nil, fmt.Errorf("claim tasks: one worker, time and runtime per call")
		}
		if i > 0 {
			values.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(&values, "($%d, $%d)", n+1, n+2)
		args = append(args, p.ID, p.LeaseToken)
	}
	rows, err := t.query(ctx, `WITH v(id, token) AS (VALUES `+values.String()+`)
		UPDATE tasks SET status = 'running',
		attempt = attempt + 1, lease_token = (SELECT v.token FROM v WHERE v.id = tasks.id), worker_id = $2,
		started_at = $1, heartbeat_at = $1,
		lease_expires_at = $1 + heartbeat_timeout_ms,
		deadline_at = CASE WHEN timeout_ms > 0 THEN $1 + timeout_ms ELSE NULL END,
		reap_at = CASE WHEN timeout_ms > 0 AND timeout_ms < heartbeat_timeout_ms
			THEN $1 + timeout_ms ELSE $1 + heartbeat_timeout_ms END,
		cancel_requested_at = NULL, cancel_reason = '', finished_at = NULL,
		last_event_type = 'Task Processing Started', last_event_at = $1
		WHERE id IN (SELECT v.id FROM v) AND status = 'pending' AND available_at <= $1 AND runtime = $3
		RETURNING `+taskCols, args...)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return collectTasks(rows)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// InsertAttempts implements store.Tx.
func (t *tx) InsertAttempts(ctx context.Context, as []*store.Attempt) error {
	if len(as) == 0 {
		return nil
	}
	cols := strings.FieldsFunc(attemptCols, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	rows := make([][]any, len(as))
	for i, a := range as {
		errJSON, err := errArg(a.Error)
		if err != nil {
			return err
		}
		rows[i] = []any{a.TaskID, a.Attempt, a.WorkerID, a.LeaseToken, ms(a.StartedAt), ms(a.FinishedAt),
			string(a.Outcome), string(a.Result), errJSON, jsonArg(a.Metrics)}
	}
	return t.insertRows(ctx, "attempts", cols, rows, "")
}
