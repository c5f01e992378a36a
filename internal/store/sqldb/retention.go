package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// Retention: what a finished job's deletion takes with it, table by table (every table of the
// migrations of both drivers).
//
// Deleted with the job, as they exist for it alone:
//   - jobs: the row, and with it its idempotency key (a repeat of the key after the deletion
//     creates a new job: keys are remembered as long as their job is kept);
//   - tasks, task_deps (every dep's child is a task of the job), attempts, events;
//   - dataset_events: what its tasks reported; the datasets and their versions stay;
//   - buffer_publishes: its batches, once committed by the sink (a queued or recently dead one
//     keeps the job, see store.RetentionPolicy).
//
// Kept, as they are not the job's:
//   - datasets, dataset_versions (a version keeps the id of the task that published it, which
//     then names a deleted task), pipelines, pipeline_versions, pipeline_inputs;
//   - concurrency_groups: one row per concurrency key, shared by every job of the key;
//   - outbox: pruned by the relay once sent, whatever became of the job;
//   - api_keys, api_key_usage, signing_keys: credentials, not jobs.
//
// Deleted by age alone: query_audit, the Query Service's records, once older than their
// tenant's retention (at most Limit per call).

// finishedStatuses are the statuses of a finished job.
const finishedStatuses = "'completed', 'partial_failure', 'canceled'"

// JobDeleteExpired implements store.Tx.
func (t *tx) JobDeleteExpired(ctx context.Context, p store.RetentionPolicy) (store.RetentionCounts, error) {
	var counts store.RetentionCounts
	cond, args, ok := expiredCondition(p)
	if !ok || p.Limit <= 0 {
		return counts, nil
	}
	var err error
	if counts.QueryAudit, err = t.queryAuditDeleteExpired(ctx, p); err != nil {
		return counts, err
	}
	args = append(args, p.Limit)
	// Oldest finish first; on PostgreSQL the jobs are locked, those another transaction holds
	// skipped, so that replicas running this at once take disjoint batches without waiting.
	jobs, err := t.ids(ctx, `SELECT j.id FROM jobs j WHERE `+cond+`
		ORDER BY j.finished_at, j.id LIMIT $`+strconv.Itoa(len(args))+t.d.LockSkip, args...)
	if err != nil {
		return counts, fmt.Errorf("select expired jobs: %w", err)
	}
	if len(jobs) == 0 {
		return counts, nil
	}
	jobs, tasks, err := t.lockJobTasks(ctx, jobs)
	if err != nil || len(jobs) == 0 {
		return counts, err
	}
	// Children before parents, in the same order in every transaction.
	steps := []struct {
		n          *int
		table, col string
		ids        []string
	}{
		{&counts.Attempts, "attempts", "task_id", tasks},
		{&counts.DatasetEvents, "dataset_events", "task_id", tasks},
		{&counts.BufferPublishes, "buffer_publishes", "task_id", tasks},
		{&counts.TaskDeps, "task_deps", "child_id", tasks},
		{&counts.Events, "events", "job_id", jobs},
		{&counts.Tasks, "tasks", "job_id", jobs},
		{&counts.Jobs, "jobs", "id", jobs},
	}
	for _, s := range steps {
		if *s.n, err = t.deleteIn(ctx, s.table, s.col, s.ids); err != nil {
			return store.RetentionCounts{}, err
		}
	}
	return counts, nil
}

// expiredCondition is the SQL condition, on jobs aliased j, of a job p says has expired, with its
// arguments ($1...); ok is false when p keeps every job.
func expiredCondition(p store.RetentionPolicy) (cond string, args []any, ok bool) {
	now := p.Now.UnixMilli()
	cutoff := func(d time.Duration) int64 { return now - d.Milliseconds() }
	// The latest cutoff of any tenant bounds the scan of the index on finished_at (jobs_finished).
	var bound int64 = -1
	if p.Retention > 0 {
		bound = cutoff(p.Retention)
	}
	tenants := make([]string, 0, len(p.Tenants))
	for tenant, d := range p.Tenants {
		tenants = append(tenants, tenant)
		if d > 0 {
			bound = max(bound, cutoff(d))
		}
	}
	if bound < 0 {
		return "", nil, false
	}
	slices.Sort(tenants) // one statement text per configuration
	var b strings.Builder
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	b.WriteString("j.status IN (" + finishedStatuses + ") AND j.finished_at < " + arg(bound))
	// A tenant whose jobs are kept forever has a cutoff no finish time is below.
	def := int64(-1)
	if p.Retention > 0 {
		def = cutoff(p.Retention)
	}
	if len(tenants) > 0 {
		b.WriteString(" AND j.finished_at < CASE j.tenant")
		for _, tenant := range tenants {
			c := int64(-1)
			if d := p.Tenants[tenant]; d > 0 {
				c = cutoff(d)
			}
			b.WriteString(" WHEN " + arg(tenant) + " THEN CAST(" + arg(c) + " AS BIGINT)")
		}
		b.WriteString(" ELSE CAST(" + arg(def) + " AS BIGINT) END")
	}
	// A dead letter (or a dead buffered publish) at or after dead is recent enough to keep its
	// job; with no dead-letter retention, every one is.
	var dead int64
	if p.DeadLetterRetention > 0 {
		dead = cutoff(p.DeadLetterRetention)
	}
	deadArg := arg(dead)
	b.WriteString(` AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND ` + deadLettered +
		` AND t.dead_lettered_at >= ` + deadArg + `)`)
	b.WriteString(` AND NOT EXISTS (SELECT 1 FROM tasks t JOIN buffer_publishes bp ON bp.task_id = t.id
		WHERE t.job_id = j.id AND (bp.state = '` + store.BufferQueued + `' OR (bp.state = '` + store.BufferDead + `'
		AND (bp.finished_at IS NULL OR bp.finished_at >= ` + deadArg + `))))`)
	// The latest job of a pipeline job stays: Sources numbers an always_on job's next run after it.
	b.WriteString(` AND (j.pipeline IS NULL OR EXISTS (SELECT 1 FROM jobs n WHERE n.tenant = j.tenant
		AND n.pipeline = j.pipeline AND n.pipeline_job = j.pipeline_job AND n.seq > j.seq))`)
	return b.String(), args, true
}

// lockJobTasks returns the tasks of jobs and the jobs whose every task it could lock: on
// PostgreSQL, a job with a task another transaction holds (a late report from a worker, a
// resume) is left for a later batch, as waiting for that task while holding its job, which such
// a transaction locks after its tasks, could deadlock. Where a single writer makes locks moot,
// every job and task.
func (t *tx) lockJobTasks(ctx context.Context, jobs []string) (keptJobs, tasks []string, err error) {
	all, err := t.jobTaskIDs(ctx, jobs, "")
	if err != nil || t.d.LockSkip == "" {
		return jobs, flatten(all), err
	}
	locked, err := t.jobTaskIDs(ctx, jobs, t.d.LockSkip)
	if err != nil {
		return nil, nil, err
	}
	for _, j := range jobs {
		if len(locked[j]) == len(all[j]) {
			keptJobs = append(keptJobs, j)
			tasks = append(tasks, all[j]...)
		}
	}
	return keptJobs, tasks, nil
}

// jobTaskIDs maps each of jobs to the ids of its tasks, locking them with lock (a LockSkip, or
// "" for none).
func (t *tx) jobTaskIDs(ctx context.Context, jobs []string, lock string) (map[string][]string, error) {
	out := map[string][]string{}
	for chunk := range slices.Chunk(jobs, inChunk) {
		cond, args := t.in("job_id", 1, chunk)
		err := t.each(ctx, "tasks of expired jobs", `SELECT id, job_id FROM tasks WHERE `+cond+` ORDER BY id`+lock, args,
			func(rows *sql.Rows) error {
				var id, job string
				if err := rows.Scan(&id, &job); err != nil {
					return err
				}
				out[job] = append(out[job], id)
				return nil
			})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func flatten(m map[string][]string) []string {
	var out []string
	for _, ids := range m {
		out = append(out, ids...)
	}
	return out
}

// inChunk is the most ids one "IN" list of a deletion carries.
const inChunk = 1000

// deleteIn deletes the rows of table whose col is one of ids and returns how many it deleted.
func (t *tx) deleteIn(ctx context.Context, table, col string, ids []string) (int, error) {
	total := 0
	for chunk := range slices.Chunk(ids, inChunk) {
		cond, args := t.in(col, 1, chunk)
		res, err := t.exec(ctx, `DELETE FROM `+table+` WHERE `+cond, args...)
		if err != nil {
			return 0, fmt.Errorf("delete %s of expired jobs: %w", table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		total += int(n)
	}
	return total, nil
}

// queryAuditDeleteExpired deletes up to p.Limit query audit records older than their tenant's
// retention, oldest first.
func (t *tx) queryAuditDeleteExpired(ctx context.Context, p store.RetentionPolicy) (int, error) {
	now := p.Now.UnixMilli()
	cutoff := func(d time.Duration) int64 {
		if d <= 0 {
			return -1 // kept forever: no record is older
		}
		return now - d.Milliseconds()
	}
	args := []any{cutoff(p.Retention)}
	bound := cutoff(p.Retention)
	expr := "$1"
	if len(p.Tenants) > 0 {
		tenants := make([]string, 0, len(p.Tenants))
		for tenant := range p.Tenants {
			tenants = append(tenants, tenant)
			bound = max(bound, cutoff(p.Tenants[tenant]))
		}
		slices.Sort(tenants)
		var b strings.Builder
		b.WriteString("CASE tenant")
		for _, tenant := range tenants {
			args = append(args, tenant, cutoff(p.Tenants[tenant]))
			fmt.Fprintf(&b, " WHEN $%d THEN CAST($%d AS BIGINT)", len(args)-1, len(args))
		}
		b.WriteString(" ELSE CAST($1 AS BIGINT) END")
		expr = b.String()
	}
	if bound < 0 {
		return 0, nil
	}
	args = append(args, p.Limit)
	res, err := t.exec(ctx, `DELETE FROM query_audit WHERE id IN (SELECT id FROM query_audit WHERE at < `+expr+`
		ORDER BY id LIMIT $`+strconv.Itoa(len(args))+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("delete expired query audit: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
