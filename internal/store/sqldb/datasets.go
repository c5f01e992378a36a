// Datasets, their versions and the events tasks report on them.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const datasetCols = `uuid, tenant, producer, name, pipeline, job, output_index, current_version,
	storage, write_mode, schema, filter_fields, created_at, updated_at`

func scanDataset(row rowScanner) (*store.Dataset, error) {
	var (
		d                     store.Dataset
		name, schema, filters sql.NullString
		created, updated      int64
	)
	if err := row.Scan(&d.UUID, &d.Tenant, &d.Producer, &name, &d.Pipeline, &d.Job, &d.OutputIndex,
		&d.CurrentVersion, &d.Storage, &d.WriteMode, &schema, &filters, &created, &updated); err != nil {
		return nil, notFound(err)
	}
	d.Name, d.Schema, d.FilterFields = name.String, sqltext.FromJSON(schema), sqltext.FromJSON(filters)
	d.CreatedAt, d.UpdatedAt = sqltext.UnixMilli(created), sqltext.UnixMilli(updated)
	return &d, nil
}

// DatasetGetMany implements store.Reader.
func (q q) DatasetGetMany(ctx context.Context, uuids []string) ([]*store.Dataset, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	args := sqltext.StringArgs(uuids)
	rows, err := q.query(ctx, `SELECT `+datasetCols+` FROM datasets WHERE uuid IN (`+sqltext.Placeholders(1, len(args))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("get datasets: %w", err)
	}
	return collect(rows, scanDataset)
}

// DatasetGetByName implements store.Reader.
func (q q) DatasetGetByName(ctx context.Context, tenant, name string) (*store.Dataset, error) {
	return scanDataset(q.queryRow(ctx, `SELECT `+datasetCols+` FROM datasets
		WHERE tenant = $1 AND name = $2`, tenant, name))
}

// DatasetListByProducer implements store.Reader.
func (q q) DatasetListByProducer(ctx context.Context, tenant string, producers []string) ([]*store.Dataset, error) {
	if len(producers) == 0 {
		return nil, nil
	}
	args := append([]any{tenant}, sqltext.StringArgs(producers)...)
	rows, err := q.query(ctx, `SELECT `+datasetCols+` FROM datasets WHERE tenant = $1
		AND producer IN (`+sqltext.Placeholders(2, len(args)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("datasets by producer: %w", err)
	}
	return collect(rows, scanDataset)
}

// DatasetList implements store.Reader.
func (q q) DatasetList(ctx context.Context, tenant string) ([]*store.Dataset, error) {
	rows, err := q.query(ctx, `SELECT `+datasetCols+` FROM datasets WHERE tenant = $1
		ORDER BY CASE WHEN name IS NULL THEN 1 ELSE 0 END, name, producer`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list datasets: %w", err)
	}
	return collect(rows, scanDataset)
}

// DatasetInsertMany implements store.Tx.
func (t *tx) DatasetInsertMany(ctx context.Context, ds []*store.Dataset) error {
	cols := []string{"uuid", "tenant", "producer", "name", "pipeline", "job", "output_index",
		"current_version", "storage", "write_mode", "schema", "filter_fields", "created_at", "updated_at"}
	rows := make([][]any, len(ds))
	for i, d := range ds {
		rows[i] = []any{d.UUID, d.Tenant, d.Producer, sqltext.NullIfEmpty(d.Name), d.Pipeline, d.Job, d.OutputIndex,
			d.CurrentVersion, d.Storage, d.WriteMode, sqltext.JSON(d.Schema), sqltext.JSON(d.FilterFields),
			sqltext.Millis(d.CreatedAt), sqltext.Millis(d.UpdatedAt)}
	}
	err := t.insertRows(ctx, "datasets", cols, rows, " ON CONFLICT (tenant, producer) DO NOTHING")
	if err != nil && t.d.IsUnique(err) {
		return store.ErrConflict
	}
	return err
}

// DatasetUpdate implements store.Tx.
func (t *tx) DatasetUpdate(ctx context.Context, d *store.Dataset) error {
	res, err := t.exec(ctx, `UPDATE datasets SET name = $2, current_version = $3, storage = $4,
		write_mode = $5, schema = $6, filter_fields = $7, updated_at = $8 WHERE uuid = $1`,
		d.UUID, sqltext.NullIfEmpty(d.Name), d.CurrentVersion, d.Storage, d.WriteMode, sqltext.JSON(d.Schema),
		sqltext.JSON(d.FilterFields), sqltext.Millis(d.UpdatedAt))
	if err != nil {
		if t.d.IsUnique(err) {
			return store.ErrConflict
		}
		return fmt.Errorf("update dataset: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// DatasetVersionList implements store.Reader.
func (q q) DatasetVersionList(ctx context.Context, uuids ...string) ([]*store.DatasetVersion, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	args := sqltext.StringArgs(uuids)
	rows, err := q.query(ctx, `SELECT dataset_uuid, version, storage_ref, config_hash, range_start,
		range_end, task_id, created_at FROM dataset_versions WHERE dataset_uuid IN (`+sqltext.Placeholders(1, len(args))+`)
		ORDER BY created_at, version`, args...)
	if err != nil {
		return nil, fmt.Errorf("list dataset versions: %w", err)
	}
	return collect(rows, func(row rowScanner) (*store.DatasetVersion, error) {
		var (
			v          store.DatasetVersion
			ref        sql.NullString
			start, end sql.NullInt64
			created    int64
		)
		if err := row.Scan(&v.DatasetUUID, &v.Version, &ref, &v.ConfigHash, &start, &end, &v.TaskID, &created); err != nil {
			return nil, err
		}
		v.StorageRef, v.Start, v.End, v.CreatedAt = sqltext.FromJSON(ref), sqltext.FromNullInt(start), sqltext.FromNullInt(end), sqltext.UnixMilli(created)
		return &v, nil
	})
}

// DatasetVersionInsertMany implements store.Tx.
func (t *tx) DatasetVersionInsertMany(ctx context.Context, vs []*store.DatasetVersion) error {
	cols := []string{"dataset_uuid", "version", "storage_ref", "config_hash", "range_start", "range_end",
		"task_id", "created_at"}
	rows := make([][]any, len(vs))
	for i, v := range vs {
		rows[i] = []any{v.DatasetUUID, v.Version, sqltext.JSON(v.StorageRef), v.ConfigHash, sqltext.NullInt(v.Start),
			sqltext.NullInt(v.End), v.TaskID, sqltext.Millis(v.CreatedAt)}
	}
	return t.insertRows(ctx, "dataset_versions", cols, rows, " ON CONFLICT (dataset_uuid, version) DO NOTHING")
}

const datasetEventCols = `id, dedupe_key, job_id, task_id, attempt, dataset_uuid, dataset_version,
	cursor, partition_key, range_start, range_end, created_at`

func scanDatasetEvent(row rowScanner) (*store.DatasetEvent, error) {
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
	e.Cursor, e.Start, e.End = sqltext.FromNullInt(cursor), sqltext.FromNullInt(start), sqltext.FromNullInt(end)
	e.PartitionKey = partition.String
	e.CreatedAt = sqltext.UnixMilli(created)
	return &e, nil
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
			sqltext.NullInt(e.Cursor), sqltext.NullIfEmpty(e.PartitionKey), sqltext.NullInt(e.Start), sqltext.NullInt(e.End), sqltext.Millis(e.CreatedAt)}
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

// DatasetEventListByTask implements store.Reader.
func (q q) DatasetEventListByTask(ctx context.Context, taskID string) ([]*store.DatasetEvent, error) {
	rows, err := q.query(ctx, `SELECT `+datasetEventCols+` FROM dataset_events WHERE task_id = $1 ORDER BY id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list dataset events: %w", err)
	}
	return collect(rows, scanDatasetEvent)
}

// DatasetEventListRecent implements store.Reader.
func (q q) DatasetEventListRecent(ctx context.Context, p store.DatasetEventListRecentParams) ([]*store.DatasetEvent, error) {
	rows, err := q.query(ctx, `SELECT `+sqltext.Prefixed("e.", datasetEventCols)+` FROM dataset_events e
		JOIN jobs j ON j.id = e.job_id WHERE e.dataset_uuid = $1 AND j.tenant = $2
		ORDER BY e.id DESC LIMIT $3`, p.DatasetUUID, p.Tenant, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("recent dataset events: %w", err)
	}
	return collect(rows, scanDatasetEvent)
}

// DatasetEventListAfter implements store.Reader.
func (q q) DatasetEventListAfter(ctx context.Context, p store.DatasetEventListParams) ([]*store.DatasetEvent, error) {
	rows, err := q.query(ctx, `SELECT `+datasetEventCols+` FROM dataset_events
		WHERE dataset_uuid = $1 AND dataset_version = $2 AND id > $3 AND id <= $4 ORDER BY id LIMIT $5`,
		p.DatasetUUID, p.DatasetVersion, p.AfterID, p.ThroughID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("events of dataset %s version %s: %w", p.DatasetUUID, p.DatasetVersion, err)
	}
	return collect(rows, scanDatasetEvent)
}

// DatasetEventMaxID implements store.Reader.
func (q q) DatasetEventMaxID(ctx context.Context) (int64, error) {
	var id sql.NullInt64
	if err := q.queryRow(ctx, `SELECT MAX(id) FROM dataset_events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("the newest dataset event: %w", err)
	}
	return id.Int64, nil
}
