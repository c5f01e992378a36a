// Jobs (store.JobReader, store.JobWriter); their deletion on expiry is retention.go, their counts
// stats.go.

package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const jobCols = `seq, id, tenant, name, status, idempotency_key, request_hash, total_tasks,
	unfinished_tasks, created_at, finished_at, cancel_requested_at, failure_detected_at, pipeline,
	pipeline_version, pipeline_job, traceparent`

func scanJob(row rowScanner) (*store.Job, error) {
	var (
		j                                    store.Job
		idem, pipeline, version, pipelineJob sql.NullString
		created                              int64
		finished, cancelReq, failureDetected sql.NullInt64
	)
	err := row.Scan(&j.Seq, &j.ID, &j.Tenant, &j.Name, &j.Status, &idem, &j.RequestHash,
		&j.TotalTasks, &j.UnfinishedTasks, &created, &finished, &cancelReq, &failureDetected,
		&pipeline, &version, &pipelineJob, &j.Traceparent)
	if err != nil {
		return nil, notFound(err)
	}
	j.IdempotencyKey = idem.String
	j.Pipeline, j.PipelineVersion, j.PipelineJob = pipeline.String, version.String, pipelineJob.String
	j.CreatedAt = sqltext.Time(sql.NullInt64{Int64: created, Valid: true})
	j.FinishedAt = sqltext.Time(finished)
	j.CancelRequestedAt = sqltext.Time(cancelReq)
	j.FailureDetectedAt = sqltext.Time(failureDetected)
	return &j, nil
}

// JobGet implements store.Reader.
func (q q) JobGet(ctx context.Context, id string) (*store.Job, error) {
	return scanJob(q.queryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = $1`+q.lockRow(), id))
}

// JobGetByIdempotencyKey implements store.Reader.
func (q q) JobGetByIdempotencyKey(ctx context.Context, tenant, key string) (*store.Job, error) {
	return scanJob(q.queryRow(ctx,
		`SELECT `+jobCols+` FROM jobs WHERE tenant = $1 AND idempotency_key = $2`, tenant, key))
}

// JobList implements store.Reader.
func (q q) JobList(ctx context.Context, p store.ListJobsParams) ([]*store.Job, error) {
	rows, err := q.query(ctx, `SELECT `+jobCols+` FROM jobs WHERE tenant = $1
		AND (CAST($2 AS BIGINT) = 0 OR seq < $2) AND ($3 = '' OR status = $3) ORDER BY seq DESC LIMIT $4`,
		p.Tenant, p.BeforeSeq, string(p.Status), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return collect(rows, scanJob)
}

// JobInsert implements store.Tx.
func (t *tx) JobInsert(ctx context.Context, j *store.Job) error {
	err := t.queryRow(ctx, `INSERT INTO jobs (`+strings.Join(jobInsertCols, ", ")+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING seq`, jobRow(j)...).Scan(&j.Seq)
	if err != nil {
		if t.d.IsUnique(err) {
			return store.ErrConflict
		}
		return fmt.Errorf("insert job: %w", err)
	}
	return nil
}

var jobInsertCols = []string{"id", "tenant", "name", "status", "idempotency_key", "request_hash",
	"total_tasks", "unfinished_tasks", "created_at", "finished_at", "pipeline", "pipeline_version", "pipeline_job", "traceparent"}

// jobRow is the values of jobInsertCols.
func jobRow(j *store.Job) []any {
	return []any{j.ID, j.Tenant, j.Name, string(j.Status), sqltext.NullIfEmpty(j.IdempotencyKey), j.RequestHash,
		j.TotalTasks, j.UnfinishedTasks, sqltext.Millis(j.CreatedAt), sqltext.Millis(j.FinishedAt), sqltext.NullIfEmpty(j.Pipeline),
		sqltext.NullIfEmpty(j.PipelineVersion), sqltext.NullIfEmpty(j.PipelineJob), j.Traceparent}
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

// JobUpdate implements store.Tx.
func (t *tx) JobUpdate(ctx context.Context, j *store.Job) error {
	res, err := t.exec(ctx, `UPDATE jobs SET status = $2, total_tasks = $3,
		unfinished_tasks = $4, finished_at = $5, cancel_requested_at = $6, failure_detected_at = $7
		WHERE id = $1`,
		j.ID, string(j.Status), j.TotalTasks, j.UnfinishedTasks, sqltext.Millis(j.FinishedAt),
		sqltext.Millis(j.CancelRequestedAt), sqltext.Millis(j.FailureDetectedAt))
	if err != nil {
		return fmt.Errorf("update job: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// JobAddUnfinished implements store.Tx.
func (t *tx) JobAddUnfinished(ctx context.Context, jobID string, delta int) (*store.Job, error) {
	return scanJob(t.queryRow(ctx, `UPDATE jobs SET unfinished_tasks = unfinished_tasks + $2
		WHERE id = $1 RETURNING `+jobCols, jobID, delta))
}

// JobLockMany implements store.Tx.
func (t *tx) JobLockMany(ctx context.Context, ids []string) ([]*store.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	in, arg := "id = ANY($1)", any(ids)
	if !t.d.Arrays {
		b, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		in, arg = "id IN (SELECT value FROM json_each($1))", string(b)
	}
	rows, err := t.query(ctx, `SELECT `+jobCols+` FROM jobs WHERE `+in+` ORDER BY id`+t.d.LockRow, arg)
	if err != nil {
		return nil, fmt.Errorf("lock jobs: %w", err)
	}
	jobs, err := collect(rows, scanJob)
	if err != nil {
		return nil, fmt.Errorf("lock jobs: %w", err)
	}
	return jobs, nil
}

// JobUpdateMany implements store.Tx.
func (t *tx) JobUpdateMany(ctx context.Context, jobs []*store.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	var (
		res sql.Result
		err error
	)
	if t.d.Arrays {
		n := len(jobs)
		ids, statuses := make([]string, n), make([]string, n)
		total, unfinished := make([]int64, n), make([]int64, n)
		finished, cancel, failure := make([]*int64, n), make([]*int64, n), make([]*int64, n)
		for i, j := range jobs {
			ids[i], statuses[i], total[i], unfinished[i] = j.ID, string(j.Status), int64(j.TotalTasks), int64(j.UnfinishedTasks)
			finished[i], cancel[i], failure[i] = millisPtr(j.FinishedAt), millisPtr(j.CancelRequestedAt), millisPtr(j.FailureDetectedAt)
		}
		res, err = t.exec(ctx, `UPDATE jobs SET status = u.u_status, total_tasks = u.u_total,
			unfinished_tasks = u.u_unfinished, finished_at = u.u_finished, cancel_requested_at = u.u_cancel,
			failure_detected_at = u.u_failure
			FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
				AS u(u_id, u_status, u_total, u_unfinished, u_finished, u_cancel, u_failure)
			WHERE jobs.id = u.u_id`, ids, statuses, total, unfinished, finished, cancel, failure)
	} else {
		vals := make([][]any, len(jobs))
		for i, j := range jobs {
			vals[i] = []any{j.ID, string(j.Status), j.TotalTasks, j.UnfinishedTasks, sqltext.Millis(j.FinishedAt),
				sqltext.Millis(j.CancelRequestedAt), sqltext.Millis(j.FailureDetectedAt)}
		}
		from, arg, jerr := sqltext.JSONRows(1, "u", []string{"u_id", "u_status", "u_total", "u_unfinished", "u_finished",
			"u_cancel", "u_failure"}, vals)
		if jerr != nil {
			return fmt.Errorf("update jobs: %w", jerr)
		}
		res, err = t.exec(ctx, `UPDATE jobs SET status = u.u_status, total_tasks = u.u_total,
			unfinished_tasks = u.u_unfinished, finished_at = u.u_finished, cancel_requested_at = u.u_cancel,
			failure_detected_at = u.u_failure
			FROM `+from+` WHERE jobs.id = u.u_id`, arg)
	}
	if err != nil {
		return fmt.Errorf("update jobs: %w", err)
	}
	if n, _ := res.RowsAffected(); int(n) != len(jobs) {
		return store.ErrNotFound
	}
	return nil
}

// millisPtr is a time as milliseconds, nil for the zero time: an element of a nullable array.
func millisPtr(at time.Time) *int64 {
	if at.IsZero() {
		return nil
	}
	ms := at.UnixMilli()
	return &ms
}
