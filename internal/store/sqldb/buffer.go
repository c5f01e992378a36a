// The Buffer Queue of buffered publishes.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// BufferPublishInsert implements store.Tx.
func (t *tx) BufferPublishInsert(ctx context.Context, p *store.BufferPublish) (bool, error) {
	err := t.queryRow(ctx, `INSERT INTO buffer_publishes (task_id, attempt, batch_uri,
		job_id, tenant, dataset_uuid, dataset_version, record_count, content_type, batch_size_bytes,
		dedupe_scope, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (task_id, attempt, batch_uri) DO NOTHING RETURNING id`,
		p.TaskID, p.Attempt, p.BatchURI, p.JobID, p.Tenant, p.DatasetUUID, p.DatasetVersion,
		sqltext.NullInt(p.RecordCount), p.ContentType, sqltext.NullInt(p.BatchSizeBytes), p.DedupeScope,
		sqltext.Millis(p.CreatedAt)).Scan(&p.ID)
	if err == sql.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("insert buffer publish: %w", err)
	}
	return true, nil
}

const bufferPublishCols = `id, task_id, attempt, batch_uri, job_id, tenant, dataset_uuid,
	dataset_version, record_count, content_type, batch_size_bytes, dedupe_scope, created_at, state,
	receive_count, visible_at, last_error, batch_cursor, rows_inserted, finished_at`

func scanBufferPublish(row rowScanner) (*store.BufferPublish, error) {
	var (
		p                                    store.BufferPublish
		count, bytes, cursor, inserted, done sql.NullInt64
		created, visible, receives           int64
	)
	if err := row.Scan(&p.ID, &p.TaskID, &p.Attempt, &p.BatchURI, &p.JobID, &p.Tenant, &p.DatasetUUID,
		&p.DatasetVersion, &count, &p.ContentType, &bytes, &p.DedupeScope, &created, &p.State,
		&receives, &visible, &p.LastError, &cursor, &inserted, &done); err != nil {
		return nil, err
	}
	p.RecordCount, p.BatchSizeBytes = sqltext.FromNullInt(count), sqltext.FromNullInt(bytes)
	p.Cursor, p.RowsInserted = sqltext.FromNullInt(cursor), sqltext.FromNullInt(inserted)
	p.CreatedAt, p.VisibleAt, p.FinishedAt = sqltext.UnixMilli(created), sqltext.UnixMilli(visible), sqltext.Time(done)
	p.ReceiveCount = int(receives)
	return &p, nil
}

// BufferPublishListByTask implements store.Reader.
func (q q) BufferPublishListByTask(ctx context.Context, taskID string) ([]*store.BufferPublish, error) {
	rows, err := q.query(ctx, `SELECT `+bufferPublishCols+` FROM buffer_publishes WHERE task_id = $1 ORDER BY id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list buffer publishes: %w", err)
	}
	return collect(rows, scanBufferPublish)
}

// BufferPublishGet implements store.Reader.
func (q q) BufferPublishGet(ctx context.Context, id int64) (*store.BufferPublish, error) {
	p, err := scanBufferPublish(q.queryRow(ctx, `SELECT `+bufferPublishCols+` FROM buffer_publishes WHERE id = $1`+q.lockRow(), id))
	if err != nil {
		return nil, fmt.Errorf("get buffer publish %d: %w", id, notFound(err))
	}
	return p, nil
}

// BufferPublishListDeadLetters implements store.Reader.
func (q q) BufferPublishListDeadLetters(ctx context.Context, p store.BufferPublishListDeadLettersParams) ([]*store.BufferPublish, error) {
	rows, err := q.query(ctx, `SELECT `+bufferPublishCols+` FROM buffer_publishes
		WHERE dataset_uuid = $1 AND state = 'dead' AND id > $2 ORDER BY id LIMIT $3`, p.DatasetUUID, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list buffer dead letters: %w", err)
	}
	return collect(rows, scanBufferPublish)
}

// BufferPublishListClaimable implements store.Tx.
func (t *tx) BufferPublishListClaimable(ctx context.Context, p store.BufferPublishListClaimableParams) ([]*store.BufferPublish, error) {
	where := ""
	args := []any{p.Now.UnixMilli(), p.Limit}
	if p.ID > 0 {
		where = " AND id = $3"
		args = append(args, p.ID)
	}
	rows, err := t.query(ctx, `SELECT `+bufferPublishCols+` FROM buffer_publishes
		WHERE state = 'queued' AND visible_at <= $1`+where+` ORDER BY visible_at, id LIMIT $2`+t.d.LockSkip, args...)
	if err != nil {
		return nil, fmt.Errorf("claim buffer publishes: %w", err)
	}
	return collect(rows, scanBufferPublish)
}

// BufferPublishUpdate implements store.Tx.
func (t *tx) BufferPublishUpdate(ctx context.Context, p *store.BufferPublish) error {
	res, err := t.exec(ctx, `UPDATE buffer_publishes SET state = $2, receive_count = $3, visible_at = $4,
		last_error = $5, batch_cursor = $6, rows_inserted = $7, finished_at = $8 WHERE id = $1`,
		p.ID, p.State, p.ReceiveCount, p.VisibleAt.UnixMilli(), p.LastError, sqltext.NullInt(p.Cursor),
		sqltext.NullInt(p.RowsInserted), sqltext.Millis(p.FinishedAt))
	if err != nil {
		return fmt.Errorf("update buffer publish %d: %w", p.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("update buffer publish %d: %w", p.ID, store.ErrNotFound)
	}
	return nil
}

// BufferPublishExtend implements store.Tx: one conditional update, so that the check of the
// receipt and the write cannot be split by another claim.
func (t *tx) BufferPublishExtend(ctx context.Context, p store.BufferPublishExtendParams) (bool, error) {
	res, err := t.exec(ctx, `UPDATE buffer_publishes SET visible_at = $3
		WHERE id = $1 AND state = 'queued' AND receive_count = $2`, p.ID, p.Receipt, p.VisibleAt.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("extend buffer publish %d: %w", p.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("extend buffer publish %d: %w", p.ID, err)
	}
	return n == 1, nil
}

// BufferPublishDiscardQueued implements store.Tx.
func (t *tx) BufferPublishDiscardQueued(ctx context.Context, p store.BufferPublishDiscardParams) (int, error) {
	res, err := t.exec(ctx, `UPDATE buffer_publishes SET state = 'dead', last_error = $3, finished_at = $4
		WHERE dataset_uuid = $1 AND tenant = $2 AND state = 'queued'`, p.DatasetUUID, p.Tenant, p.Reason, p.Now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("discard the queued buffer publishes of dataset %s: %w", p.DatasetUUID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("discard the queued buffer publishes of dataset %s: %w", p.DatasetUUID, err)
	}
	return int(n), nil
}
