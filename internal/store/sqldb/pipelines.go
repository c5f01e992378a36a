package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// The data plane's tables: pipelines, their versions and inputs, datasets and their versions.

const pipelineCols = `tenant, name, active_version, building_version, created_at, updated_at`

func scanPipeline(row interface{ Scan(...any) error }) (*store.Pipeline, error) {
	var (
		p                store.Pipeline
		created, updated int64
	)
	if err := row.Scan(&p.Tenant, &p.Name, &p.ActiveVersion, &p.BuildingVersion, &created, &updated); err != nil {
		return nil, notFound(err)
	}
	p.CreatedAt, p.UpdatedAt = fromMillis(created), fromMillis(updated)
	return &p, nil
}

// PipelineGet implements store.Reader.
func (q q) PipelineGet(ctx context.Context, tenant, name string) (*store.Pipeline, error) {
	return scanPipeline(q.queryRow(ctx, `SELECT `+pipelineCols+` FROM pipelines
		WHERE tenant = $1 AND name = $2`+q.lockRow(), tenant, name))
}

// PipelineList implements store.Reader.
func (q q) PipelineList(ctx context.Context, tenant string) ([]*store.Pipeline, error) {
	rows, err := q.query(ctx, `SELECT `+pipelineCols+` FROM pipelines WHERE tenant = $1 ORDER BY name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list pipelines: %w", err)
	}
	return collect(rows, scanPipeline)
}

// PipelineListActive implements store.Reader.
func (q q) PipelineListActive(ctx context.Context) ([]*store.Pipeline, error) {
	rows, err := q.query(ctx, `SELECT `+pipelineCols+` FROM pipelines ORDER BY tenant, name`)
	if err != nil {
		return nil, fmt.Errorf("active pipelines: %w", err)
	}
	return collect(rows, scanPipeline)
}

// PipelineJobTasks implements store.Reader.
func (q q) PipelineJobTasks(ctx context.Context, k store.PipelineJobKey) (total, live int, err error) {
	err = q.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN t.status IN ('waiting', 'pending', 'running')
		THEN 1 ELSE 0 END), 0) FROM jobs j JOIN tasks t ON t.job_id = j.id
		WHERE j.tenant = $1 AND j.pipeline = $2 AND j.pipeline_job = $3`, k.Tenant, k.Pipeline, k.Job).Scan(&total, &live)
	if err != nil {
		return 0, 0, fmt.Errorf("pipeline job tasks: %w", err)
	}
	return total, live, nil
}

// PipelinePut implements store.Tx.
func (t *tx) PipelinePut(ctx context.Context, p *store.Pipeline) error {
	_, err := t.exec(ctx, `INSERT INTO pipelines (`+pipelineCols+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (tenant, name) DO UPDATE SET active_version = excluded.active_version,
		building_version = excluded.building_version, updated_at = excluded.updated_at`,
		p.Tenant, p.Name, p.ActiveVersion, p.BuildingVersion, ms(p.CreatedAt), ms(p.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put pipeline: %w", err)
	}
	return nil
}

const versionCols = `seq, tenant, pipeline, version, document, content_type, spec, created_at, state, build, pointers`

func scanVersion(row interface{ Scan(...any) error }) (*store.PipelineVersion, error) {
	var (
		v               store.PipelineVersion
		doc, spec       string
		build, pointers string
		created         int64
	)
	if err := row.Scan(&v.Seq, &v.Tenant, &v.Pipeline, &v.Version, &doc, &v.ContentType, &spec, &created, &v.State, &build, &pointers); err != nil {
		return nil, notFound(err)
	}
	v.Document, v.Spec, v.CreatedAt = []byte(doc), []byte(spec), fromMillis(created)
	if build != "" {
		v.Build = []byte(build)
	}
	if pointers != "" {
		v.Pointers = []byte(pointers)
	}
	return &v, nil
}

// PipelineVersionGet implements store.Reader.
func (q q) PipelineVersionGet(ctx context.Context, k store.PipelineVersionKey) (*store.PipelineVersion, error) {
	return scanVersion(q.queryRow(ctx, `SELECT `+versionCols+` FROM pipeline_versions
		WHERE tenant = $1 AND pipeline = $2 AND version = $3`, k.Tenant, k.Pipeline, k.Version))
}

// PipelineVersionState implements store.Reader.
func (q q) PipelineVersionState(ctx context.Context, k store.PipelineVersionKey) (string, error) {
	var state string
	err := q.queryRow(ctx, `SELECT state FROM pipeline_versions WHERE tenant = $1 AND pipeline = $2 AND version = $3`,
		k.Tenant, k.Pipeline, k.Version).Scan(&state)
	if err != nil {
		return "", notFound(err)
	}
	return state, nil
}

// PipelineVersionSetState implements store.Tx.
func (t *tx) PipelineVersionSetState(ctx context.Context, k store.PipelineVersionKey, state string) error {
	_, err := t.exec(ctx, `UPDATE pipeline_versions SET state = $4 WHERE tenant = $1 AND pipeline = $2 AND version = $3`,
		k.Tenant, k.Pipeline, k.Version, state)
	if err != nil {
		return fmt.Errorf("set the state of pipeline %s version %s: %w", k.Pipeline, k.Version, err)
	}
	return nil
}

// PipelineVersionSetBuild implements store.Tx.
func (t *tx) PipelineVersionSetBuild(ctx context.Context, k store.PipelineVersionKey, build json.RawMessage) error {
	_, err := t.exec(ctx, `UPDATE pipeline_versions SET build = $4 WHERE tenant = $1 AND pipeline = $2 AND version = $3`,
		k.Tenant, k.Pipeline, k.Version, string(build))
	if err != nil {
		return fmt.Errorf("record the build of pipeline %s version %s: %w", k.Pipeline, k.Version, err)
	}
	return nil
}

// PipelineVersionSetPointers implements store.Tx.
func (t *tx) PipelineVersionSetPointers(ctx context.Context, k store.PipelineVersionKey, pointers json.RawMessage) error {
	_, err := t.exec(ctx, `UPDATE pipeline_versions SET pointers = $4 WHERE tenant = $1 AND pipeline = $2 AND version = $3`,
		k.Tenant, k.Pipeline, k.Version, string(pointers))
	if err != nil {
		return fmt.Errorf("record the dataset pointers of pipeline %s version %s: %w", k.Pipeline, k.Version, err)
	}
	return nil
}

// PipelineVersionTaskCounts implements store.Reader.
func (q q) PipelineVersionTaskCounts(ctx context.Context, k store.PipelineVersionKey) ([]*store.PipelineTaskCount, error) {
	rows, err := q.query(ctx, `SELECT j.pipeline_job, t.status, COUNT(*) FROM jobs j
		JOIN tasks t ON t.job_id = j.id WHERE j.tenant = $1 AND j.pipeline = $2 AND j.pipeline_version = $3
		GROUP BY j.pipeline_job, t.status ORDER BY j.pipeline_job, t.status`, k.Tenant, k.Pipeline, k.Version)
	if err != nil {
		return nil, fmt.Errorf("task counts of pipeline %s version %s: %w", k.Pipeline, k.Version, err)
	}
	return collect(rows, func(row interface{ Scan(...any) error }) (*store.PipelineTaskCount, error) {
		var c store.PipelineTaskCount
		err := row.Scan(&c.Job, &c.Status, &c.Count)
		return &c, err
	})
}

// PipelineVersionList implements store.Reader.
func (q q) PipelineVersionList(ctx context.Context, tenant, name string) ([]*store.PipelineVersion, error) {
	rows, err := q.query(ctx, `SELECT `+versionCols+` FROM pipeline_versions
		WHERE tenant = $1 AND pipeline = $2 ORDER BY seq DESC`, tenant, name)
	if err != nil {
		return nil, fmt.Errorf("list pipeline versions: %w", err)
	}
	return collect(rows, scanVersion)
}

// PipelineVersionInsert implements store.Tx.
func (t *tx) PipelineVersionInsert(ctx context.Context, v *store.PipelineVersion) (bool, error) {
	res, err := t.exec(ctx, `INSERT INTO pipeline_versions (tenant, pipeline, version, document,
		content_type, spec, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (tenant, pipeline, version) DO NOTHING`,
		v.Tenant, v.Pipeline, v.Version, string(v.Document), v.ContentType, string(v.Spec), ms(v.CreatedAt))
	if err != nil {
		return false, fmt.Errorf("insert pipeline version: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// PipelineTaskCounts implements store.Reader.
func (q q) PipelineTaskCounts(ctx context.Context, tenant, name string) ([]*store.PipelineTaskCount, error) {
	rows, err := q.query(ctx, `SELECT j.pipeline_job, t.status, COUNT(*) FROM jobs j
		JOIN tasks t ON t.job_id = j.id WHERE j.tenant = $1 AND j.pipeline = $2
		GROUP BY j.pipeline_job, t.status ORDER BY j.pipeline_job, t.status`, tenant, name)
	if err != nil {
		return nil, fmt.Errorf("pipeline task counts: %w", err)
	}
	return collect(rows, func(row interface{ Scan(...any) error }) (*store.PipelineTaskCount, error) {
		var c store.PipelineTaskCount
		err := row.Scan(&c.Job, &c.Status, &c.Count)
		return &c, err
	})
}

// PipelineTasksUnfinished implements store.Reader.
func (q q) PipelineTasksUnfinished(ctx context.Context, k store.PipelineVersionKey) ([]*store.PipelineTaskRef, error) {
	rows, err := q.query(ctx, `SELECT j.tenant, j.id, t.id, COALESCE(j.idempotency_key, ''), j.pipeline_job, j.pipeline_version,
		t.status, t.route FROM tasks t JOIN jobs j ON j.id = t.job_id
		WHERE j.tenant = $1 AND j.pipeline = $2 AND ($3 = '' OR j.pipeline_version = $3)
		AND t.status IN ('waiting', 'pending', 'running') ORDER BY j.id, t.seq`, k.Tenant, k.Pipeline, k.Version)
	if err != nil {
		return nil, fmt.Errorf("unfinished tasks of pipeline %s version %s: %w", k.Pipeline, k.Version, err)
	}
	return collect(rows, scanPipelineTaskRef)
}

// PipelineTasksSince implements store.Reader.
func (q q) PipelineTasksSince(ctx context.Context, k store.PipelineVersionKey, since time.Time) ([]*store.PipelineTaskRef, error) {
	rows, err := q.query(ctx, `SELECT j.tenant, j.id, t.id, COALESCE(j.idempotency_key, ''), j.pipeline_job, j.pipeline_version,
		t.status, t.route FROM tasks t JOIN jobs j ON j.id = t.job_id
		WHERE j.tenant = $1 AND j.pipeline = $2 AND j.pipeline_version = $3 AND j.created_at >= $4
		ORDER BY j.id, t.seq`, k.Tenant, k.Pipeline, k.Version, ms(since))
	if err != nil {
		return nil, fmt.Errorf("tasks of pipeline %s version %s since %s: %w", k.Pipeline, k.Version, since, err)
	}
	return collect(rows, scanPipelineTaskRef)
}

// PipelineTasksReplacedActive implements store.Reader. Its condition is the partial index
// tasks_replaced's, with the reason written out so that SQLite uses the index.
func (q q) PipelineTasksReplacedActive(ctx context.Context, limit int) ([]*store.PipelineTaskRef, error) {
	rows, err := q.query(ctx, `SELECT j.tenant, j.id, t.id, COALESCE(j.idempotency_key, ''), j.pipeline_job, j.pipeline_version,
		t.status, t.route FROM tasks t JOIN jobs j ON j.id = t.job_id
		JOIN pipelines p ON p.tenant = j.tenant AND p.name = j.pipeline AND p.active_version = j.pipeline_version
		WHERE t.status = 'canceled' AND t.cancel_reason = '`+store.CancelVersionReplaced+`' ORDER BY j.id, t.seq LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("tasks of active pipeline versions an activation canceled: %w", err)
	}
	return collect(rows, scanPipelineTaskRef)
}

func scanPipelineTaskRef(row interface{ Scan(...any) error }) (*store.PipelineTaskRef, error) {
	var (
		r     store.PipelineTaskRef
		route sql.NullString
	)
	if err := row.Scan(&r.Tenant, &r.JobID, &r.TaskID, &r.RouteKey, &r.Job, &r.Version, &r.Status, &route); err != nil {
		return nil, err
	}
	r.Route = fromJSON(route)
	return &r, nil
}

const datasetCols = `uuid, tenant, producer, name, pipeline, job, output_index, current_version,
	storage, write_mode, schema, filter_fields, created_at, updated_at`

func scanDataset(row interface{ Scan(...any) error }) (*store.Dataset, error) {
	var (
		d                     store.Dataset
		name, schema, filters sql.NullString
		created, updated      int64
	)
	if err := row.Scan(&d.UUID, &d.Tenant, &d.Producer, &name, &d.Pipeline, &d.Job, &d.OutputIndex,
		&d.CurrentVersion, &d.Storage, &d.WriteMode, &schema, &filters, &created, &updated); err != nil {
		return nil, notFound(err)
	}
	d.Name, d.Schema, d.FilterFields = name.String, fromJSON(schema), fromJSON(filters)
	d.CreatedAt, d.UpdatedAt = fromMillis(created), fromMillis(updated)
	return &d, nil
}

// DatasetGetMany implements store.Reader.
func (q q) DatasetGetMany(ctx context.Context, uuids []string) ([]*store.Dataset, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	args := stringArgs(uuids)
	rows, err := q.query(ctx, `SELECT `+datasetCols+` FROM datasets WHERE uuid IN (`+placeholders(1, len(args))+`)`, args...)
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
	args := append([]any{tenant}, stringArgs(producers)...)
	rows, err := q.query(ctx, `SELECT `+datasetCols+` FROM datasets WHERE tenant = $1
		AND producer IN (`+placeholders(2, len(args)-1)+`)`, args...)
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
		rows[i] = []any{d.UUID, d.Tenant, d.Producer, strArg(d.Name), d.Pipeline, d.Job, d.OutputIndex,
			d.CurrentVersion, d.Storage, d.WriteMode, jsonArg(d.Schema), jsonArg(d.FilterFields),
			ms(d.CreatedAt), ms(d.UpdatedAt)}
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
		d.UUID, strArg(d.Name), d.CurrentVersion, d.Storage, d.WriteMode, jsonArg(d.Schema),
		jsonArg(d.FilterFields), ms(d.UpdatedAt))
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
	args := stringArgs(uuids)
	rows, err := q.query(ctx, `SELECT dataset_uuid, version, storage_ref, config_hash, range_start,
		range_end, task_id, created_at FROM dataset_versions WHERE dataset_uuid IN (`+placeholders(1, len(args))+`)
		ORDER BY created_at, version`, args...)
	if err != nil {
		return nil, fmt.Errorf("list dataset versions: %w", err)
	}
	return collect(rows, func(row interface{ Scan(...any) error }) (*store.DatasetVersion, error) {
		var (
			v          store.DatasetVersion
			ref        sql.NullString
			start, end sql.NullInt64
			created    int64
		)
		if err := row.Scan(&v.DatasetUUID, &v.Version, &ref, &v.ConfigHash, &start, &end, &v.TaskID, &created); err != nil {
			return nil, err
		}
		v.StorageRef, v.Start, v.End, v.CreatedAt = fromJSON(ref), fromNullInt(start), fromNullInt(end), fromMillis(created)
		return &v, nil
	})
}

// DatasetVersionInsertMany implements store.Tx.
func (t *tx) DatasetVersionInsertMany(ctx context.Context, vs []*store.DatasetVersion) error {
	cols := []string{"dataset_uuid", "version", "storage_ref", "config_hash", "range_start", "range_end",
		"task_id", "created_at"}
	rows := make([][]any, len(vs))
	for i, v := range vs {
		rows[i] = []any{v.DatasetUUID, v.Version, jsonArg(v.StorageRef), v.ConfigHash, nullInt(v.Start),
			nullInt(v.End), v.TaskID, ms(v.CreatedAt)}
	}
	return t.insertRows(ctx, "dataset_versions", cols, rows, " ON CONFLICT (dataset_uuid, version) DO NOTHING")
}

// DatasetEventListRecent implements store.Reader.
func (q q) DatasetEventListRecent(ctx context.Context, p store.DatasetEventListRecentParams) ([]*store.DatasetEvent, error) {
	rows, err := q.query(ctx, `SELECT `+prefixed("e.", datasetEventCols)+` FROM dataset_events e
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

// OutboxUnsentByKey implements store.Reader.
func (q q) OutboxUnsentByKey(ctx context.Context, topic string, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	args := append([]any{topic}, stringArgs(keys)...)
	var n int
	if err := q.queryRow(ctx, `SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND topic = $1
		AND msg_key IN (`+placeholders(2, len(args)-1)+`)`, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("unsent %s messages: %w", topic, err)
	}
	return n, nil
}

// ConsumerList implements store.Reader.
func (q q) ConsumerList(ctx context.Context, uuids []string) ([]*store.Consumer, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	args := stringArgs(uuids)
	rows, err := q.query(ctx, `SELECT i.dataset_uuid, i.tenant, i.pipeline, i.version, i.job, i.input_index,
		CASE WHEN p.active_version = i.version THEN 0 ELSE 1 END
		FROM pipeline_inputs i JOIN pipelines p ON p.tenant = i.tenant AND p.name = i.pipeline
		AND (p.active_version = i.version OR p.building_version = i.version)
		WHERE i.dataset_uuid IN (`+placeholders(1, len(args))+`)
		ORDER BY i.dataset_uuid, i.tenant, i.pipeline, i.job, i.input_index`, args...)
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	return collect(rows, func(row interface{ Scan(...any) error }) (*store.Consumer, error) {
		var (
			c        store.Consumer
			building int
		)
		err := row.Scan(&c.DatasetUUID, &c.Tenant, &c.Pipeline, &c.Version, &c.Job, &c.InputIndex, &building)
		c.Building = building == 1
		return &c, err
	})
}

// ConsumerInsertMany implements store.Tx.
func (t *tx) ConsumerInsertMany(ctx context.Context, cs []*store.Consumer) error {
	cols := []string{"dataset_uuid", "tenant", "pipeline", "version", "job", "input_index"}
	rows := make([][]any, len(cs))
	for i, c := range cs {
		rows[i] = []any{c.DatasetUUID, c.Tenant, c.Pipeline, c.Version, c.Job, c.InputIndex}
	}
	return t.insertRows(ctx, "pipeline_inputs", cols, rows, " ON CONFLICT DO NOTHING")
}

// JobInsertManyIfAbsent implements store.Tx.
func (t *tx) JobInsertManyIfAbsent(ctx context.Context, jobs []*store.Job) ([]string, error) {
	rows := make([][]any, len(jobs))
	for i, j := range jobs {
		rows[i] = jobRow(j)
	}
	var inserted []string
	err := t.insertReturning(ctx, "jobs", jobInsertCols, rows, " ON CONFLICT DO NOTHING RETURNING id", func(rs *sql.Rows) error {
		var id string
		err := rs.Scan(&id)
		inserted = append(inserted, id)
		return err
	})
	return inserted, err
}

// collect scans every row with scan.
func collect[T any](rows *sql.Rows, scan func(interface{ Scan(...any) error }) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
