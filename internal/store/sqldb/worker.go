package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

func nullInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func fromNullInt(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	v := n.Int64
	return &v
}

// DatasetEventInsertMany implements store.Tx, in multi-row statements: each new event gets the ID
// the database returned for it; a repeat (already stored, or earlier in events) keeps ID 0.
func (t *tx) DatasetEventInsertMany(ctx context.Context, events []*store.DatasetEvent) (int, error) {
	cols := []string{"dedupe_key", "job_id", "task_id", "attempt", "dataset_uuid", "dataset_version", "cursor",
		"partition_key", "range_start", "range_end", "created_at"}
	rows := make([][]any, len(events))
	first := make(map[string]*store.DatasetEvent, len(events))
	for i, e := range events {
		e.ID = 0
		if first[e.DedupeKey] == nil {
			first[e.DedupeKey] = e
		}
		rows[i] = []any{e.DedupeKey, e.JobID, e.TaskID, e.Attempt, e.DatasetUUID, e.DatasetVersion,
			nullInt(e.Cursor), strArg(e.PartitionKey), nullInt(e.Start), nullInt(e.End), ms(e.CreatedAt)}
	}
	n := 0
	err := t.insertReturning(ctx, "dataset_events", cols, rows, " ON CONFLICT (dedupe_key) DO NOTHING RETURNING id, dedupe_key",
		func(rs *sql.Rows) error {
			var (
				id  int64
				key string
			)
			if err := rs.Scan(&id, &key); err != nil {
				return err
			}
			first[key].ID = id
			n++
			return nil
		})
	return n, err
}

const datasetEventCols = `id, dedupe_key, job_id, task_id, attempt, dataset_uuid, dataset_version,
	cursor, partition_key, range_start, range_end, created_at`

func scanDatasetEvent(row interface{ Scan(...any) error }) (*store.DatasetEvent, error) {
	var (
		e                  store.DatasetEvent
		cursor, start, end sql.NullInt64
		partition          sql.NullString
		created            int64
	)
	if err := row.Scan(&e.ID, &e.DedupeKey, &e.JobID, &e.TaskID, &e.Attempt, &e.DatasetUUID,
		&e.DatasetVersion, &cursor, &partition, &start, &end, &created); err != nil {
		return nil, err
	}
	e.Cursor, e.Start, e.End = fromNullInt(cursor), fromNullInt(start), fromNullInt(end)
	e.PartitionKey = partition.String
	e.CreatedAt = fromMillis(created)
	return &e, nil
}

// DatasetEventListByTask implements store.Reader.
func (q q) DatasetEventListByTask(ctx context.Context, taskID string) ([]*store.DatasetEvent, error) {
	rows, err := q.query(ctx, `SELECT `+datasetEventCols+` FROM dataset_events WHERE task_id = $1 ORDER BY id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list dataset events: %w", err)
	}
	return collect(rows, scanDatasetEvent)
}

// BufferPublishInsert implements store.Tx.
func (t *tx) BufferPublishInsert(ctx context.Context, p *store.BufferPublish) (bool, error) {
	err := t.queryRow(ctx, `INSERT INTO buffer_publishes (task_id, attempt, batch_uri,
		job_id, tenant, dataset_uuid, dataset_version, record_count, content_type, batch_size_bytes,
		dedupe_scope, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (task_id, attempt, batch_uri) DO NOTHING RETURNING id`,
		p.TaskID, p.Attempt, p.BatchURI, p.JobID, p.Tenant, p.DatasetUUID, p.DatasetVersion,
		nullInt(p.RecordCount), p.ContentType, nullInt(p.BatchSizeBytes), p.DedupeScope,
		ms(p.CreatedAt)).Scan(&p.ID)
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

func scanBufferPublish(row interface{ Scan(...any) error }) (*store.BufferPublish, error) {
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
	p.RecordCount, p.BatchSizeBytes = fromNullInt(count), fromNullInt(bytes)
	p.Cursor, p.RowsInserted = fromNullInt(cursor), fromNullInt(inserted)
	p.CreatedAt, p.VisibleAt, p.FinishedAt = fromMillis(created), fromMillis(visible), fromMs(done)
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
		p.ID, p.State, p.ReceiveCount, p.VisibleAt.UnixMilli(), p.LastError, nullInt(p.Cursor),
		nullInt(p.RowsInserted), ms(p.FinishedAt))
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

// SigningKeyInsert implements store.Keys.
func (db *DB) SigningKeyInsert(ctx context.Context, k *store.SigningKey) error {
	err := db.writeTx(ctx, func(t *tx) error {
		_, err := t.exec(ctx, `INSERT INTO signing_keys (kid, secret, created_at, retired_at)
			VALUES ($1, $2, $3, $4)`, k.KID, string(k.Secret), ms(k.CreatedAt), ms(k.RetiredAt))
		return err
	})
	if err != nil {
		if db.dialect.IsUnique(err) {
			return store.ErrConflict
		}
		return fmt.Errorf("insert signing key: %w", err)
	}
	return nil
}

// SigningKeyList implements store.Keys.
func (db *DB) SigningKeyList(ctx context.Context) ([]*store.SigningKey, error) {
	rows, err := db.q.query(ctx, `SELECT kid, secret, created_at, retired_at FROM signing_keys
		ORDER BY created_at DESC, kid DESC`)
	if err != nil {
		return nil, fmt.Errorf("list signing keys: %w", err)
	}
	defer rows.Close()
	var out []*store.SigningKey
	for rows.Next() {
		var (
			k       store.SigningKey
			secret  string
			created int64
			retired sql.NullInt64
		)
		if err := rows.Scan(&k.KID, &secret, &created, &retired); err != nil {
			return nil, err
		}
		k.Secret = []byte(secret)
		k.CreatedAt = time.UnixMilli(created).UTC()
		k.RetiredAt = fromMs(retired)
		out = append(out, &k)
	}
	return out, rows.Err()
}

// SigningKeyRetire implements store.Keys.
func (db *DB) SigningKeyRetire(ctx context.Context, kid string, at time.Time) error {
	return db.writeTx(ctx, func(t *tx) error {
		res, err := t.exec(ctx, `UPDATE signing_keys SET retired_at = $2 WHERE kid = $1 AND retired_at IS NULL`, kid, at.UnixMilli())
		if err != nil {
			return fmt.Errorf("retire signing key: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var exists int
		if err := t.queryRow(ctx, `SELECT count(*) FROM signing_keys WHERE kid = $1`, kid).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}
