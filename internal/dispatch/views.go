package dispatch

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// The read-only views of jobs, tasks and their audit trail, for the API and the dashboard.

// GetJob returns a job and its tasks.
func (d *Dispatcher) GetJob(ctx context.Context, tenant, id string) (*store.Job, []*store.TaskSummary, error) {
	return d.getJob(ctx, tenant, id, d.store.TaskListByJob)
}

// GetJobWithResults is GetJob with the output of each completed task and the error of each
// failed one.
func (d *Dispatcher) GetJobWithResults(ctx context.Context, tenant, id string) (*store.Job, []*store.TaskSummary, error) {
	return d.getJob(ctx, tenant, id, d.store.TaskListByJobWithResults)
}

func (d *Dispatcher) getJob(ctx context.Context, tenant, id string,
	list func(context.Context, string) ([]*store.TaskSummary, error)) (*store.Job, []*store.TaskSummary, error) {
	job, err := d.tenantJob(ctx, tenant, id)
	if err != nil {
		return nil, nil, err
	}
	tasks, err := list(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("job %s: %w", id, err)
	}
	return job, tasks, nil
}

// Job returns a job without its tasks; another tenant's job is ErrJobNotFound.
func (d *Dispatcher) Job(ctx context.Context, tenant, id string) (*store.Job, error) {
	return d.tenantJob(ctx, tenant, id)
}

// tenantJob loads a job, hiding other tenants' jobs; an empty tenant sees every job.
func (d *Dispatcher) tenantJob(ctx context.Context, tenant, id string) (*store.Job, error) {
	job, err := d.store.JobGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && tenant != "" && job.Tenant != tenant) {
		return nil, ErrJobNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	return job, nil
}

// TaskInJob returns the global id of the task that ref names in the job: its taskId there, or
// its global id. ErrJobNotFound for an unknown job or another tenant's, ErrTaskNotFound when the
// job has no such task.
func (d *Dispatcher) TaskInJob(ctx context.Context, tenant, jobID, ref string) (string, error) {
	_, tasks, err := d.GetJob(ctx, tenant, jobID)
	if err != nil {
		return "", err
	}
	for _, t := range tasks {
		if t.Key == ref || t.ID == ref {
			return t.ID, nil
		}
	}
	return "", ErrTaskNotFound
}

// ListJobsParams selects a page of a tenant's jobs.
type ListJobsParams struct {
	Tenant string
	Status lifecycle.JobStatus // empty: any
	Cursor string              // from a previous page's NextCursor
	Limit  int
}

// ListJobs returns a page of jobs, newest first, and the cursor of the next page ("" at the end).
func (d *Dispatcher) ListJobs(ctx context.Context, p ListJobsParams) ([]*store.Job, string, error) {
	before, err := decodeCursor(p.Cursor)
	if err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 20
	}
	jobs, err := d.store.JobList(ctx, store.ListJobsParams{Tenant: p.Tenant, Status: p.Status, BeforeSeq: before, Limit: limit + 1})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = encodeCursor(jobs[limit-1].Seq)
	}
	return jobs, next, nil
}

func encodeCursor(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(`{"before":` + strconv.FormatInt(seq, 10) + `}`))
}

func decodeCursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, ErrInvalidCursor
	}
	var c struct {
		Before int64 `json:"before"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Before <= 0 {
		return 0, ErrInvalidCursor
	}
	return c.Before, nil
}

// JobEvents returns a job's audit events after the given event id, oldest first.
func (d *Dispatcher) JobEvents(ctx context.Context, tenant, jobID string, afterID int64, limit int) ([]*store.Event, error) {
	if _, err := d.tenantJob(ctx, tenant, jobID); err != nil {
		return nil, err
	}
	return d.store.EventList(ctx, store.EventListParams{JobID: jobID, AfterID: afterID, Limit: cmpOr(limit, 1000)})
}

// TaskEvents returns the audit events of one task of a job (named as TaskInJob takes it) after
// the given event id, oldest first.
func (d *Dispatcher) TaskEvents(ctx context.Context, tenant, jobID, taskRef string, afterID int64, limit int) ([]*store.Event, error) {
	id, err := d.TaskInJob(ctx, tenant, jobID, taskRef)
	if err != nil {
		return nil, err
	}
	return d.store.EventListByTask(ctx, store.EventListByTaskParams{
		JobID: jobID, TaskID: id, AfterID: afterID, Limit: cmpOr(limit, 1000),
	})
}

// DeadLetters lists a tenant's dead-lettered tasks, newest first; a resume of their job replays
// them.
func (d *Dispatcher) DeadLetters(ctx context.Context, tenant string, beforeSeq int64, limit int) ([]*store.Task, error) {
	return d.store.TaskListDeadLetters(ctx, store.TaskListDeadLettersParams{
		Tenant: tenant, BeforeSeq: beforeSeq, Limit: cmpOr(limit, 100),
	})
}

// cmpOr is v when it is positive, else def.
func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// JobCounts counts a tenant's jobs by status.
func (d *Dispatcher) JobCounts(ctx context.Context, tenant string) (map[lifecycle.JobStatus]int, error) {
	return d.store.JobCounts(ctx, tenant)
}

// QueueStats summarizes a tenant's queues now: the window is how far back completions are
// counted and workers are listed.
func (d *Dispatcher) QueueStats(ctx context.Context, tenant string, window time.Duration) (*store.QueueStats, error) {
	return d.store.QueueStats(ctx, store.QueueStatsParams{Tenant: tenant, Now: d.now(), Window: window})
}
