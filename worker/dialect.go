package worker

import (
	"context"
	"encoding/json"
)

// dialect is what differs between the attempts of a Worker, which speaks the stream-worker
// dialect on the internal listener (trusted by its client certificate), and those of a
// PushHandler, which speaks the task-scoped dialect on the public listener (trusted by the
// attempt's capability token alone): how a heartbeat and an outcome are sent. Each method sends
// once; the attempt's loops retry.
type dialect interface {
	beat(ctx context.Context, a *attempt) (heartbeatAnswer, error)
	report(ctx context.Context, a *attempt, o outcome) (map[string]any, error)
}

// status is an attempt's outcome, as the log names it.
type status string

const (
	completed status = "completed"
	failed    status = "failed"
	canceled  status = "canceled"
)

// outcome is what an attempt reports.
type outcome struct {
	status  status
	output  json.RawMessage // completed
	failure failure         // failed
}

// routes are the paths of an attempt's own calls in its dialect. Each carries the attempt's
// capability token (X-Trace-Task-Capability), which the task-scoped dialect requires and the
// internal one reads where it needs it.
type routes struct {
	publish     string // buffer-publish
	credentials string // object storage credentials
	rows        string // the prefix of {dataset}/rows
	query       string // the Query Service's task query
}

var (
	internalRoutes = &routes{publish: "/internal/buffer-publish", credentials: pathCredentials, rows: pathTaskRows, query: "/internal/task-query"}
	scopedRoutes   = &routes{publish: "/v1/task/buffer-publish", credentials: "/v1/task/credentials", rows: "/v1/task/datasets/", query: "/v1/task/query"}
)

// bind gives a's task the calls that go through a's dialect.
func (a *attempt) bind() {
	a.task.publish = (&publisher{a: a}).publish
	a.task.mint = a.mintCredentials
	a.task.rows = a.readRows
	a.task.query = a.runQuery
}

// capabilityHeader carries the attempt's capability token.
const capabilityHeader = "X-Trace-Task-Capability"

// tokenHeader is the header of a call with the attempt's newest token.
func (a *attempt) tokenHeader() []string {
	token, _ := a.task.Token()
	return []string{capabilityHeader, token}
}

// fence is the body of a call about the attempt in the internal and task-scoped dialects.
func (a *attempt) fence() map[string]any {
	return map[string]any{"task_id": a.taskID, "attempt": a.task.Attempt, "lease_token": a.lease}
}

// streamDialect is a Worker's: heartbeats and outcomes through /internal/worker/..., batched
// (report-batch) when several are ready at once; a cancelled attempt, which the stream-worker
// dialect cannot say, through the internal dialect's task-complete.
type streamDialect struct{ w *Worker }

func (d streamDialect) beat(ctx context.Context, a *attempt) (heartbeatAnswer, error) {
	var ans heartbeatAnswer
	body := map[string]any{"worker_id": d.w.cfg.workerID, "job_id": a.taskID, "lease_token": a.lease, "attempt_id": a.task.Attempt}
	if err := d.w.post(ctx, a.beatTimeout(), pathHeartbeat, body, &ans); err != nil {
		return ans, err
	}
	if a.wake != nil {
		if err := a.wake.InProgress(ctx); err != nil {
			a.log.WarnContext(d.w.runCtx, "wake-up: mark in progress", "err", err)
		}
	}
	return ans, nil
}

func (d streamDialect) report(ctx context.Context, a *attempt, o outcome) (map[string]any, error) {
	switch o.status {
	case canceled:
		body := a.fence()
		body["status"] = "Canceled"
		var ans map[string]any
		err := d.w.post(ctx, requestTimeout, pathTaskComplete, body, &ans)
		return ans, err
	case completed:
		body := d.body(a)
		body["result"] = o.output
		return d.w.reports.report(ctx, pathComplete, body)
	}
	body := d.body(a)
	body["error"] = o.failure
	return d.w.reports.report(ctx, pathFail, body)
}

// body is the fence of a stream-worker report.
func (d streamDialect) body(a *attempt) map[string]any {
	b := map[string]any{"worker_id": d.w.cfg.workerID, "job_id": a.taskID, "attempt_id": a.task.Attempt, "lease_token": a.lease, "stream": a.stream}
	if a.messageID != "" {
		b["message_id"] = a.messageID
	}
	return b
}

// The task-scoped dialect's heartbeat and completion (docs/contracts/task-scoped.md).
const (
	pathScopedHeartbeat = "/v1/task/heartbeat"
	pathScopedComplete  = "/v1/task/complete"
)

// scopedDialect is a PushHandler's: every call carries the attempt's capability token.
type scopedDialect struct{}

func (scopedDialect) beat(ctx context.Context, a *attempt) (heartbeatAnswer, error) {
	var ans heartbeatAnswer
	err := a.api.postWith(ctx, a.beatTimeout(), pathScopedHeartbeat, a.tokenHeader(), a.fence(), &ans)
	return ans, err
}

func (scopedDialect) report(ctx context.Context, a *attempt, o outcome) (map[string]any, error) {
	body := a.fence()
	switch o.status {
	case completed:
		body["status"], body["output"] = "Completed", o.output
	case failed:
		body["status"], body["error"] = "Failed", scopedError{Category: o.failure.Code, Message: o.failure.Message,
			StackTrace: o.failure.Stack, Retryable: o.failure.Retryable}
	case canceled:
		body["status"] = "Canceled"
	}
	var ans map[string]any
	err := a.api.postWith(ctx, requestTimeout, pathScopedComplete, a.tokenHeader(), body, &ans)
	return ans, err
}

// scopedError is the error object of the task-scoped (and internal) dialect's completion.
type scopedError struct {
	Category   string `json:"category"`
	Message    string `json:"message"`
	StackTrace string `json:"stack_trace,omitempty"`
	Retryable  *bool  `json:"retryable,omitempty"`
}
