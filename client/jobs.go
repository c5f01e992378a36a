package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// SubmitOption configures a job submission.
type SubmitOption func(*submitConfig)

type submitConfig struct {
	idempotencyKey string
}

// WithIdempotencyKey sends key as the Idempotency-Key header: a submission repeated with the same
// key and body returns the job the first one created instead of a new job. It also makes the
// submission safe to retry, so the client retries it on 429 and 503 like a GET.
func WithIdempotencyKey(key string) SubmitOption {
	return func(c *submitConfig) { c.idempotencyKey = key }
}

// SubmitJob creates a job from a DAG of tasks (POST /jobs).
func (c *Client) SubmitJob(ctx context.Context, req SubmitJobRequest, opts ...SubmitOption) (*SubmitJobResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("baton: encode job: %w", err)
	}
	return c.SubmitJobJSON(ctx, body, opts...)
}

// SubmitJobJSON creates a job from a request body that is already JSON, sent as it is: the server
// validates it, and an idempotency key is matched against these exact bytes.
func (c *Client) SubmitJobJSON(ctx context.Context, body []byte, opts ...SubmitOption) (*SubmitJobResponse, error) {
	var cfg submitConfig
	for _, o := range opts {
		o(&cfg)
	}
	r := request{method: http.MethodPost, path: "/jobs", body: body}
	if cfg.idempotencyKey != "" {
		r.header = http.Header{"Idempotency-Key": {cfg.idempotencyKey}}
		r.retry = true
	}
	var out SubmitJobResponse
	h, err := c.do(ctx, r, &out)
	if err != nil {
		return nil, err
	}
	out.Replayed = h.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// AddTasks adds tasks to a job that is still processing (POST /jobs/{jobId}/tasks). They may
// depend on the job's tasks and on each other.
func (c *Client) AddTasks(ctx context.Context, jobID string, tasks []Task) (*AddTasksResponse, error) {
	body, err := json.Marshal(struct {
		Tasks []Task `json:"tasks"`
	}{tasks})
	if err != nil {
		return nil, fmt.Errorf("baton: encode tasks: %w", err)
	}
	var out AddTasksResponse
	if _, err := c.do(ctx, request{method: http.MethodPost, path: jobPath(jobID) + "/tasks", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetJob returns a job with the status of each of its tasks (GET /jobs/{jobId}).
func (c *Client) GetJob(ctx context.Context, jobID string) (*Job, error) {
	var out Job
	if _, err := c.do(ctx, get(jobPath(jobID)), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListJobs returns a page of jobs, newest first (GET /jobs).
func (c *Client) ListJobs(ctx context.Context, opts ListOptions) (*JobPage, error) {
	q := url.Values{}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.Status != "" {
		q.Set("status", opts.Status)
	}
	path := "/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out JobPage
	if _, err := c.do(ctx, get(path), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTask returns one task of a job with its attempts (GET /jobs/{jobId}/tasks/{taskId}). taskID
// is the producer's taskId or the server's global task id.
func (c *Client) GetTask(ctx context.Context, jobID, taskID string) (*TaskDetail, error) {
	var out TaskDetail
	if _, err := c.do(ctx, get(jobPath(jobID)+"/tasks/"+url.PathEscape(taskID)), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelJob cancels a processing job (POST /jobs/{jobId}/cancel): its waiting and pending tasks
// at once, its running ones after their workers stop. A job that has finished answers 409.
func (c *Client) CancelJob(ctx context.Context, jobID string) (*JobSummary, error) {
	var out JobSummary
	if _, err := c.do(ctx, request{method: http.MethodPost, path: jobPath(jobID) + "/cancel"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ResumeJob sends a finished job's failed, canceled and skipped tasks back to work with a fresh
// retry budget (POST /jobs/{jobId}/resume). The answer lists them in ResumedTasks.
func (c *Client) ResumeJob(ctx context.Context, jobID string) (*JobSummary, error) {
	var out JobSummary
	if _, err := c.do(ctx, request{method: http.MethodPost, path: jobPath(jobID) + "/resume"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DefaultWatchInterval is Watch's polling interval when it is given none.
const DefaultWatchInterval = time.Second

// Watch polls a job every interval until it has finished and returns it in its final state.
// fn, if not nil, sees the job after every poll, the last one included. A failed poll ends the
// watch with its error (a 429 or 503 is retried first, as for every GET).
func (c *Client) Watch(ctx context.Context, jobID string, interval time.Duration, fn func(*Job)) (*Job, error) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		job, err := c.GetJob(ctx, jobID)
		if err != nil {
			return nil, err
		}
		if fn != nil {
			fn(job)
		}
		if job.Finished() {
			return job, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("baton: watch job %s: %w", jobID, ctx.Err())
		case <-t.C:
		}
	}
}

func jobPath(jobID string) string { return "/jobs/" + url.PathEscape(jobID) }

func get(path string) request { return request{method: http.MethodGet, path: path, retry: true} }
