// Pipelines, their versions and inputs (consumers), and the jobs and tasks they run.

package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const pipelineCols = `tenant, name, active_version, building_version, created_at, updated_at`

func scanPipeline(row rowScanner) (*store.Pipeline, error) {
	var (
		p                store.Pipeline
		created, updated int64
	)
	if err := row.Scan(&p.Tenant, &p.Name, &p.ActiveVersion, &p.BuildingVersion, &created, &updated); err != nil {
		return nil, notFound(err)
	}
	p.CreatedAt, p.UpdatedAt = sqltext.UnixMilli(created), sqltext.UnixMilli(updated)
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

// PipelineJobLatest implements store.Reader.
func (q q) PipelineJobLatest(ctx context.Context, k store.PipelineJobKey) (*store.Job, error) {
	return scanJob(q.queryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE tenant = $1 AND pipeline = $2
		AND pipeline_job = $3 ORDER BY seq DESC LIMIT 1`, k.Tenant, k.Pipeline, k.Job))
}

// PipelinePut implements store.Tx.
func (t *tx) PipelinePut(ctx context.Context, p *store.Pipeline) error {
	_, err := t.exec(ctx, `INSERT INTO pipelines (`+pipelineCols+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (tenant, name) DO UPDATE SET active_version = excluded.active_version,
		building_version = excluded.building_version, updated_at = excluded.updated_at`,
		p.Tenant, p.Name, p.ActiveVersion, p.BuildingVersion, sqltext.Millis(p.CreatedAt), sqltext.Millis(p.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put pipeline: %w", err)
	}
	return nil
}

const versionCols = `seq, tenant, pipeline, version, document, content_type, spec, created_at, state, build, pointers`

func scanVersion(row rowScanner) (*store.PipelineVersion, error) {
	var (
		v               store.PipelineVersion
		doc, spec       string
		build, pointers string
		created         int64
	)
	if err := row.Scan(&v.Seq, &v.Tenant, &v.Pipeline, &v.Version, &doc, &v.ContentType, &spec, &created, &v.State, &build, &pointers); err != nil {
		return nil, notFound(err)
	}
	v.Document, v.Spec, v.CreatedAt = []byte(doc), []byte(spec), sqltext.UnixMilli(created)
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
	return t.versionSet(ctx, k, "state", state, "set the state")
}

// PipelineVersionSetBuild implements store.Tx.
func (t *tx) PipelineVersionSetBuild(ctx context.Context, k store.PipelineVersionKey, build json.RawMessage) error {
	return t.versionSet(ctx, k, "build", string(build), "record the build")
}

// PipelineVersionSetPointers implements store.Tx.
func (t *tx) PipelineVersionSetPointers(ctx context.Context, k store.PipelineVersionKey, pointers json.RawMessage) error {
	return t.versionSet(ctx, k, "pointers", string(pointers), "record the dataset pointers")
}

// versionSet sets column col of the pipeline version k to v; what says what that does, in the
// error.
func (t *tx) versionSet(ctx context.Context, k store.PipelineVersionKey, col string, v any, what string) error {
	_, err := t.exec(ctx, `UPDATE pipeline_versions SET `+col+` = $4 WHERE tenant = $1 AND pipeline = $2 AND version = $3`,
		k.Tenant, k.Pipeline, k.Version, v)
	if err != nil {
		return fmt.Errorf("%s of pipeline %s version %s: %w", what, k.Pipeline, k.Version, err)
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
	return collect(rows, scanPipelineTaskCount)
}

// scanPipelineTaskCount reads a pipeline job, a task status and a count.
func scanPipelineTaskCount(row rowScanner) (*store.PipelineTaskCount, error) {
	var c store.PipelineTaskCount
	err := row.Scan(&c.Job, &c.Status, &c.Count)
	return &c, err
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
		v.Tenant, v.Pipeline, v.Version, string(v.Document), v.ContentType, string(v.Spec), sqltext.Millis(v.CreatedAt))
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
	return collect(rows, scanPipelineTaskCount)
}

// PipelineTasksUnfinished implements store.Reader.
func (q q) PipelineTasksUnfinished(ctx context.Context, k store.PipelineVersionKey) ([]*store.PipelineTaskRef, error) {
	rows, err := q.query(ctx, pipelineTaskRefs+`
		WHERE j.tenant = $1 AND j.pipeline = $2 AND ($3 = '' OR j.pipeline_version = $3)
		AND t.status IN ('waiting', 'pending', 'running') ORDER BY j.id, t.seq`, k.Tenant, k.Pipeline, k.Version)
	if err != nil {
		return nil, fmt.Errorf("unfinished tasks of pipeline %s version %s: %w", k.Pipeline, k.Version, err)
	}
	return collect(rows, scanPipelineTaskRef)
}

// PipelineTasksSince implements store.Reader.
func (q q) PipelineTasksSince(ctx context.Context, k store.PipelineVersionKey, since time.Time) ([]*store.PipelineTaskRef, error) {
	rows, err := q.query(ctx, pipelineTaskRefs+`
		WHERE j.tenant = $1 AND j.pipeline = $2 AND j.pipeline_version = $3 AND j.created_at >= $4
		ORDER BY j.id, t.seq`, k.Tenant, k.Pipeline, k.Version, sqltext.Millis(since))
	if err != nil {
		return nil, fmt.Errorf("tasks of pipeline %s version %s since %s: %w", k.Pipeline, k.Version, since, err)
	}
	return collect(rows, scanPipelineTaskRef)
}

// PipelineTasksReplacedActive implements store.Reader. Its condition is the partial index
// tasks_replaced's, with the reason written out so that SQLite uses the index.
func (q q) PipelineTasksReplacedActive(ctx context.Context, limit int) ([]*store.PipelineTaskRef, error) {
	rows, err := q.query(ctx, pipelineTaskRefs+`
		JOIN pipelines p ON p.tenant = j.tenant AND p.name = j.pipeline AND p.active_version = j.pipeline_version
		WHERE t.status = 'canceled' AND t.cancel_reason = '`+store.CancelVersionReplaced+`' ORDER BY j.id, t.seq LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("tasks of active pipeline versions an activation canceled: %w", err)
	}
	return collect(rows, scanPipelineTaskRef)
}

// pipelineTaskRefs selects what scanPipelineTaskRef reads, from tasks t and their jobs j.
const pipelineTaskRefs = `SELECT j.tenant, j.id, t.id, COALESCE(j.idempotency_key, ''), j.pipeline_job, j.pipeline_version,
	t.status, t.route FROM tasks t JOIN jobs j ON j.id = t.job_id`

func scanPipelineTaskRef(row rowScanner) (*store.PipelineTaskRef, error) {
	var (
		r     store.PipelineTaskRef
		route sql.NullString
	)
	if err := row.Scan(&r.Tenant, &r.JobID, &r.TaskID, &r.RouteKey, &r.Job, &r.Version, &r.Status, &route); err != nil {
		return nil, err
	}
	r.Route = sqltext.FromJSON(route)
	return &r, nil
}

// ConsumerList implements store.Reader.
func (q q) ConsumerList(ctx context.Context, uuids []string) ([]*store.Consumer, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	args := sqltext.StringArgs(uuids)
	rows, err := q.query(ctx, `SELECT i.dataset_uuid, i.tenant, i.pipeline, i.version, i.job, i.input_index,
		CASE WHEN p.active_version = i.version THEN 0 ELSE 1 END
		FROM pipeline_inputs i JOIN pipelines p ON p.tenant = i.tenant AND p.name = i.pipeline
		AND (p.active_version = i.version OR p.building_version = i.version)
		WHERE i.dataset_uuid IN (`+sqltext.Placeholders(1, len(args))+`)
		ORDER BY i.dataset_uuid, i.tenant, i.pipeline, i.job, i.input_index`, args...)
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	return collect(rows, func(row rowScanner) (*store.Consumer, error) {
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
