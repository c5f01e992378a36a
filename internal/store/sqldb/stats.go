// The counts of the metrics and the dashboard: jobs by status, queue stats and task counts.

package sqldb

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// JobCounts implements store.Reader. It reads only the (tenant, status, seq) index.
func (q q) JobCounts(ctx context.Context, tenant string) (map[lifecycle.JobStatus]int, error) {
	counts := map[lifecycle.JobStatus]int{}
	err := q.each(ctx, "count jobs", `SELECT status, count(*) FROM jobs WHERE tenant = $1 GROUP BY status`, []any{tenant},
		func(rows *sql.Rows) error {
			var status string
			var n int
			if err := rows.Scan(&status, &n); err != nil {
				return err
			}
			counts[lifecycle.JobStatus(status)] = n
			return nil
		})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// The queries of QueueStats. Each reads tasks through a partial index of its status (pending,
// running, dead-lettered) or through the tenant's jobs that were processing within the window,
// never the whole tasks table: finished tasks of old jobs are most of it.
const (
	statsPending = `SELECT t.queue,
		SUM(CASE WHEN t.available_at <= $2 THEN 1 ELSE 0 END),
		SUM(CASE WHEN t.available_at > $2 THEN 1 ELSE 0 END),
		MIN(CASE WHEN t.available_at <= $2 THEN t.available_at END)
		FROM tasks t JOIN jobs j ON j.id = t.job_id
		WHERE t.status = 'pending' AND j.tenant = $1 GROUP BY t.queue`
	statsRunning = `SELECT t.queue, count(*) FROM tasks t JOIN jobs j ON j.id = t.job_id
		WHERE t.status = 'running' AND j.tenant = $1 GROUP BY t.queue`
	statsDead = `SELECT t.queue, count(*) FROM tasks t JOIN jobs j ON j.id = t.job_id
		WHERE ` + deadLettered + ` AND j.tenant = $1 GROUP BY t.queue`
	// A task that completed or was claimed within the window belongs to a job that was
	// processing then: it still is, or it finished within the window.
	statsCompleted = `SELECT t.queue, count(*) FROM jobs j JOIN tasks t ON t.job_id = j.id
		WHERE j.tenant = $1 AND (j.status = 'processing' OR j.finished_at >= $2)
		AND t.status = 'completed' AND t.finished_at >= $2 GROUP BY t.queue`
	statsWorkers = `SELECT t.worker_id, t.queue, MAX(t.started_at),
		SUM(CASE WHEN t.status = 'running' THEN 1 ELSE 0 END)
		FROM jobs j JOIN tasks t ON t.job_id = j.id
		WHERE j.tenant = $1 AND (j.status = 'processing' OR j.finished_at >= $2)
		AND t.worker_id IS NOT NULL AND t.worker_id <> '' AND (t.started_at >= $2 OR t.status = 'running')
		GROUP BY t.worker_id, t.queue`
)

// QueueStats implements store.Reader.
func (q q) QueueStats(ctx context.Context, p store.QueueStatsParams) (*store.QueueStats, error) {
	byQueue := map[string]*store.QueueStat{}
	stat := func(queue string) *store.QueueStat {
		s, ok := byQueue[queue]
		if !ok {
			s = &store.QueueStat{Queue: queue}
			byQueue[queue] = s
		}
		return s
	}
	since := p.Now.Add(-p.Window).UnixMilli()
	if err := q.each(ctx, "queue stats", statsPending, []any{p.Tenant, p.Now.UnixMilli()}, func(rows *sql.Rows) error {
		var queue string
		var ready, delayed int
		var oldest sql.NullInt64
		if err := rows.Scan(&queue, &ready, &delayed, &oldest); err != nil {
			return err
		}
		s := stat(queue)
		s.Ready, s.Delayed, s.OldestReady = ready, delayed, sqltext.Time(oldest)
		return nil
	}); err != nil {
		return nil, err
	}
	counts := []struct {
		query string
		args  []any
		field func(*store.QueueStat) *int
	}{
		{statsRunning, []any{p.Tenant}, func(s *store.QueueStat) *int { return &s.Running }},
		{statsDead, []any{p.Tenant}, func(s *store.QueueStat) *int { return &s.DeadLettered }},
		{statsCompleted, []any{p.Tenant, since}, func(s *store.QueueStat) *int { return &s.Completed }},
	}
	for _, c := range counts {
		if err := q.each(ctx, "queue stats", c.query, c.args, func(rows *sql.Rows) error {
			var queue string
			var n int
			if err := rows.Scan(&queue, &n); err != nil {
				return err
			}
			*c.field(stat(queue)) = n
			return nil
		}); err != nil {
			return nil, err
		}
	}
	res := &store.QueueStats{}
	if err := q.each(ctx, "queue stats", statsWorkers, []any{p.Tenant, since}, func(rows *sql.Rows) error {
		var w store.WorkerSeen
		var last sql.NullInt64
		if err := rows.Scan(&w.WorkerID, &w.Queue, &last, &w.Running); err != nil {
			return err
		}
		w.LastClaim = sqltext.Time(last)
		res.Workers = append(res.Workers, &w)
		return nil
	}); err != nil {
		return nil, err
	}
	for _, s := range byQueue {
		res.Queues = append(res.Queues, s)
	}
	slices.SortFunc(res.Queues, func(a, b *store.QueueStat) int { return cmp.Compare(a.Queue, b.Queue) })
	slices.SortFunc(res.Workers, func(a, b *store.WorkerSeen) int {
		return cmp.Or(b.LastClaim.Compare(a.LastClaim), cmp.Compare(a.WorkerID, b.WorkerID), cmp.Compare(a.Queue, b.Queue))
	})
	return res, nil
}

// TaskCounts implements store.Reader. Pending and running tasks are counted through their
// partial indexes (tasks_ready, tasks_reap), dead-lettered ones through tasks_dead; waiting tasks
// have no index of their own, so they are found among the tasks of processing jobs (by job id,
// the unique index on job_id and task_key), as only an unfinished job has waiting tasks. The
// cost follows the live work and the dead letters, not the table's history.
func (q q) TaskCounts(ctx context.Context) ([]store.TaskCount, error) {
	rows, err := q.query(ctx, `SELECT queue, 'pending', count(*) FROM tasks WHERE status = 'pending' GROUP BY queue
		UNION ALL SELECT queue, 'running', count(*) FROM tasks WHERE status = 'running' GROUP BY queue
		UNION ALL SELECT t.queue, 'waiting', count(*) FROM jobs j JOIN tasks t ON t.job_id = j.id
			WHERE j.status = 'processing' AND t.status = 'waiting' GROUP BY t.queue
		UNION ALL SELECT t.queue, '`+store.DeadLettered+`', count(*) FROM tasks t WHERE `+deadLettered+` GROUP BY t.queue`)
	if err != nil {
		return nil, fmt.Errorf("task counts: %w", err)
	}
	return collect(rows, func(row rowScanner) (c store.TaskCount, err error) {
		if err = row.Scan(&c.Queue, &c.State, &c.N); err != nil {
			err = fmt.Errorf("task counts: %w", err)
		}
		return c, err
	})
}
