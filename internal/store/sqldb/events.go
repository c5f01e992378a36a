// The audit trail of jobs and tasks.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// EventList implements store.Reader.
func (q q) EventList(ctx context.Context, p store.EventListParams) ([]*store.Event, error) {
	rows, err := q.query(ctx, `SELECT `+eventCols+` FROM events WHERE job_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
		p.JobID, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return collect(rows, scanEvent)
}

// EventListByTask implements store.Reader. The job's condition lets the query walk the job's
// events index: events have no index by task, which would cost every transition a write.
func (q q) EventListByTask(ctx context.Context, p store.EventListByTaskParams) ([]*store.Event, error) {
	if p.TaskID == "" { // job events have no task id: they are not a task's
		return nil, nil
	}
	rows, err := q.query(ctx, `SELECT `+eventCols+` FROM events WHERE job_id = $1 AND task_id = $2 AND id > $3
		ORDER BY id LIMIT $4`, p.JobID, p.TaskID, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list task events: %w", err)
	}
	return collect(rows, scanEvent)
}

const eventCols = `id, job_id, task_id, task_key, type, at, data`

func scanEvent(row rowScanner) (*store.Event, error) {
	var (
		e    store.Event
		at   int64
		data string
	)
	if err := row.Scan(&e.ID, &e.JobID, &e.TaskID, &e.TaskKey, &e.Type, &at, &data); err != nil {
		return nil, err
	}
	e.At = sqltext.Time(sql.NullInt64{Int64: at, Valid: true})
	e.Data = []byte(data)
	return &e, nil
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
