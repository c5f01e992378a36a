package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/api/codec"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/telemetry"
)

// GET /healthz
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	request.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// GET /readyz: ready when the store answers.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.d.Store().Ping(ctx); err != nil {
		s.log.WarnContext(ctx, "store not ready", "err", err)
		request.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "the store does not answer"})
		return
	}
	request.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

type tenantKey struct{}

// authenticated resolves the x-api-key header to a tenant before the endpoint runs.
func (s *Server) authenticated(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		k, err := s.auth.Authenticate(r.Context(), r.Header.Get("x-api-key"))
		if err != nil {
			return nil, s.rejected(err, "")
		}
		ctx := context.WithValue(context.WithValue(r.Context(), tenantKey{}, k.Tenant), apiKeyID{}, k.ID)
		return h(w, r.WithContext(ctx))
	}
}

// apiKeyID is the context key of the id of the API key a producer request was authenticated by.
type apiKeyID struct{}

// keyOf is the id of the API key that authenticated r.
func keyOf(r *http.Request) string {
	id, _ := r.Context().Value(apiKeyID{}).(string)
	return id
}

func tenantOf(r *http.Request) string {
	t, _ := r.Context().Value(tenantKey{}).(string)
	if t == "" {
		// Unreachable behind authenticated; refuse rather than fall back to the all-tenants view.
		panic("api: producer request without a tenant")
	}
	return t
}

func ms(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// POST /jobs
func (s *Server) createJob(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	obj, err := request.DecodeObject(body)
	if err != nil {
		return nil, err
	}
	if err := codec.CheckFields(obj, "", "tasks", "name"); err != nil {
		return nil, err
	}
	raw, present := obj["tasks"]
	tasks, err := codec.Tasks(raw, present)
	if err != nil {
		return nil, err
	}
	f := request.Fields{Obj: obj, Where: "body"}
	name := f.Str("name")
	if f.Err != nil {
		return nil, f.Err
	}
	if err := s.checkPushTargets(tasks); err != nil {
		return nil, err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return nil, err
	}
	hash := sha256.Sum256(body)
	res, err := s.d.CreateJob(r.Context(), dispatch.CreateJobParams{Tenant: tenantOf(r), Name: name,
		IdempotencyKey: key, RequestHash: hex.EncodeToString(hash[:]), Tasks: tasks, Traceparent: jobTraceparent(r)})
	if err != nil {
		return nil, err
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	roots := res.RootTasks
	if roots == nil {
		roots = []string{}
	}
	return created{map[string]any{
		"jobId":      res.Job.ID,
		"status":     "created",
		"totalTasks": res.Job.TotalTasks,
		"rootTasks":  roots,
		"createdAt":  res.Job.CreatedAt.UnixMilli(),
	}}, nil
}

// jobTraceparent is the W3C trace context a new job keeps for its tasks' workers: the request's
// traceparent header when it is valid (an invalid one is ignored, as W3C says), else the server
// span's when tracing is on (the job is then still one trace), else "".
func jobTraceparent(r *http.Request) string {
	if h := r.Header.Get("traceparent"); telemetry.ValidTraceparent(h) {
		if tp := telemetry.NormalTraceparent(h); tp != "" {
			return tp
		}
	}
	return telemetry.Traceparent(trace.SpanContextFromContext(r.Context()))
}

// maxIdempotencyKey bounds an Idempotency-Key: the key is kept in a unique index, and PostgreSQL
// cannot index a long text.
const maxIdempotencyKey = 255

// idempotencyKey reads the Idempotency-Key header ("" when there is none).
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey {
		return "", request.Errorf(http.StatusBadRequest, "Idempotency-Key must be at most %d characters", maxIdempotencyKey)
	}
	return key, nil
}

// POST /jobs/{jobId}/tasks
func (s *Server) addTasks(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	obj, err := request.DecodeObject(body)
	if err != nil {
		return nil, err
	}
	if err := codec.CheckFields(obj, "", "tasks"); err != nil {
		return nil, err
	}
	raw, present := obj["tasks"]
	tasks, err := codec.Tasks(raw, present)
	if err != nil {
		return nil, err
	}
	if err := s.checkPushTargets(tasks); err != nil {
		return nil, err
	}
	res, err := s.d.AddTasks(r.Context(), dispatch.AddTasksParams{Tenant: tenantOf(r), JobID: r.PathValue("jobId"), Tasks: tasks})
	if err == dispatch.ErrJobFinished {
		return nil, request.Errorf(http.StatusConflict, "Job already completed — cannot add tasks")
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"jobId":            res.Job.ID,
		"addedTasks":       res.AddedTasks,
		"immediatelyReady": res.ImmediatelyReady,
		"totalTasksNow":    res.TotalTasksNow,
	}, nil
}

var jobStatuses = []lifecycle.JobStatus{lifecycle.JobProcessing, lifecycle.JobCompleted, lifecycle.JobPartialFailure, lifecycle.JobCanceled}

// GET /jobs
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, request.Errorf(http.StatusBadRequest, "limit must be an integer from 1 to 100, got %q", v)
		}
		limit = min(max(n, 1), 100) // the producer contract clamps
	}
	status := lifecycle.JobStatus(q.Get("status"))
	if status != "" && !slices.Contains(jobStatuses, status) {
		return nil, request.Errorf(http.StatusBadRequest, "status must be one of processing, completed, partial_failure, canceled; got %q", status)
	}
	jobs, next, err := s.d.ListJobs(r.Context(), dispatch.ListJobsParams{Tenant: tenantOf(r), Status: status, Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(jobs))
	for i, j := range jobs {
		out[i] = map[string]any{"jobId": j.ID, "status": j.Status, "totalTasks": j.TotalTasks, "createdAt": j.CreatedAt.UnixMilli()}
		if j.Name != "" {
			out[i]["name"] = j.Name
		}
	}
	var nextCursor any
	if next != "" {
		nextCursor = next
	}
	return map[string]any{"jobs": out, "nextCursor": nextCursor}, nil
}

// producerStatus is a task status in the producer contract's words: running is "processing".
func producerStatus(s lifecycle.TaskStatus) string {
	if s == lifecycle.Running {
		return "processing"
	}
	return string(s)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// GET /jobs/{jobId}. Each task carries its result once it has one for good: "output" (as
// getTask shows it) when completed, "error" when failed; both are null otherwise, even when an
// earlier, retried attempt left one.
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) (any, error) {
	job, tasks, err := s.d.GetJobWithResults(r.Context(), tenantOf(r), r.PathValue("jobId"))
	if err != nil {
		return nil, err
	}
	progress := map[string]int{"waiting": 0, "pending": 0, "processing": 0, "completed": 0, "failed": 0, "canceled": 0, "skipped": 0}
	views := make([]map[string]any, len(tasks))
	for i, t := range tasks {
		st := producerStatus(t.Status)
		progress[st]++
		views[i] = map[string]any{
			"taskId":        t.Key,
			"id":            t.ID,
			"name":          t.Name,
			"dependsOn":     t.DependsOn,
			"status":        st,
			"attempt":       t.Attempt,
			"lastEventType": nullable(t.LastEventType),
			"lastEventAt":   ms(t.LastEventAt),
			"output":        rawOrNull(t.Output),
			"error":         t.Error,
		}
	}
	return map[string]any{
		"jobId":       job.ID,
		"name":        nullable(job.Name),
		"status":      job.Status,
		"totalTasks":  job.TotalTasks,
		"progress":    progress,
		"createdAt":   job.CreatedAt.UnixMilli(),
		"completedAt": ms(job.FinishedAt),
		"tasks":       views,
	}, nil
}

// GET /jobs/{jobId}/tasks/{taskId}: the task by its taskId in the job, or by its global id.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request) (any, error) {
	tenant := tenantOf(r)
	id, err := s.d.TaskInJob(r.Context(), tenant, r.PathValue("jobId"), r.PathValue("taskId"))
	if err != nil {
		return nil, err
	}
	d, err := s.d.GetTask(r.Context(), tenant, id)
	if err != nil {
		return nil, err
	}
	t := d.Task
	attempts := make([]map[string]any, len(d.Attempts))
	for i, a := range d.Attempts {
		attempts[i] = map[string]any{
			"attempt":    a.Attempt,
			"workerId":   a.WorkerID,
			"startedAt":  a.StartedAt.UnixMilli(),
			"finishedAt": ms(a.FinishedAt),
			"outcome":    nullable(string(a.Outcome)),
			"result":     nullable(producerStatus(a.Result)),
			"error":      a.Error,
			"metrics":    rawOrNull(a.Metrics),
		}
	}
	out := map[string]any{
		"jobId":             t.JobID,
		"taskId":            t.Key,
		"id":                t.ID,
		"name":              t.Name,
		"queue":             t.Queue,
		"priority":          t.Priority,
		"runtime":           t.Runtime,
		"status":            producerStatus(t.Status),
		"dependsOn":         t.DependsOn,
		"input":             t.Input,
		"dependencyOutputs": d.DependencyOutputs,
		"output":            rawOrNull(t.Output),
		"error":             t.Error,
		"attempt":           t.Attempt,
		"maxAttempts":       t.MaxAttempts,
		"attemptsUsed":      t.AttemptsUsed(),
		"availableAt":       ms(t.AvailableAt),
		"leaseExpiresAt":    ms(t.LeaseExpiresAt),
		"workerId":          nullable(t.WorkerID),
		"cancelRequestedAt": ms(t.CancelRequestedAt),
		"deadLetteredAt":    ms(t.DeadLetteredAt),
		"createdAt":         t.CreatedAt.UnixMilli(),
		"finishedAt":        ms(t.FinishedAt),
		"lastEventType":     nullable(t.LastEventType),
		"lastEventAt":       ms(t.LastEventAt),
		"attempts":          attempts,
	}
	if t.Status == lifecycle.Pending && t.Runtime == "push" && len(t.Route) > 0 && s.pushTargets != nil {
		if _, ok := s.pushTargets[t.Name]; !ok {
			out["waitingFor"] = waitingForTarget(t.Name)
		}
	}
	return out, nil
}

func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func jobSummary(j *store.Job) map[string]any {
	return map[string]any{"jobId": j.ID, "status": j.Status, "totalTasks": j.TotalTasks,
		"createdAt": j.CreatedAt.UnixMilli(), "completedAt": ms(j.FinishedAt), "cancelRequestedAt": ms(j.CancelRequestedAt)}
}

// POST /jobs/{jobId}/cancel
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := request.NoBody(r); err != nil {
		return nil, err
	}
	job, err := s.d.CancelJob(r.Context(), tenantOf(r), r.PathValue("jobId"), "user_requested")
	if err != nil {
		return nil, err
	}
	return jobSummary(job), nil
}

// POST /jobs/{jobId}/resume
func (s *Server) resumeJob(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := request.NoBody(r); err != nil {
		return nil, err
	}
	res, err := s.d.ResumeJob(r.Context(), tenantOf(r), r.PathValue("jobId"))
	if err != nil {
		return nil, err
	}
	out := jobSummary(res.Job)
	out["resumedTasks"] = res.Resumed
	return out, nil
}

func eventView(e *store.Event) map[string]any {
	return map[string]any{"id": e.ID, "type": e.Type, "taskId": nullable(e.TaskKey), "at": e.At.UnixMilli(), "data": json.RawMessage(e.Data)}
}

// GET /jobs/{jobId}/events: the audit log, as JSON pages (?after=ID&limit=N) or, when the client
// accepts text/event-stream, as a live Server-Sent Events stream that ends when the job does.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	after, err := codec.IntParam(q.Get("after"), 0)
	if err != nil {
		return nil, request.Errorf(http.StatusBadRequest, "after must be an event id (an integer)")
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		if id := r.Header.Get("Last-Event-ID"); id != "" {
			if after, err = codec.IntParam(id, 0); err != nil {
				return nil, request.Errorf(http.StatusBadRequest, "Last-Event-ID must be an event id")
			}
		}
		return nil, s.streamEvents(w, r, r.PathValue("jobId"), after)
	}
	limit, err := eventLimit(q)
	if err != nil {
		return nil, err
	}
	events, err := s.d.JobEvents(r.Context(), tenantOf(r), r.PathValue("jobId"), after, limit)
	if err != nil {
		return nil, err
	}
	return eventPage(events, after), nil
}

// GET /jobs/{jobId}/tasks/{taskId}/events: one task's audit events (the task named by its taskId
// in the job or its global id, as getTask takes it), as JSON pages of the job events' shape.
// There is no live stream of one task: follow the job's stream and pick the task's events.
func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	after, err := codec.IntParam(q.Get("after"), 0)
	if err != nil {
		return nil, request.Errorf(http.StatusBadRequest, "after must be an event id (an integer)")
	}
	limit, err := eventLimit(q)
	if err != nil {
		return nil, err
	}
	events, err := s.d.TaskEvents(r.Context(), tenantOf(r), r.PathValue("jobId"), r.PathValue("taskId"), after, limit)
	if err != nil {
		return nil, err
	}
	return eventPage(events, after), nil
}

func eventLimit(q url.Values) (int, error) {
	limit, err := codec.IntParam(q.Get("limit"), 1000)
	if err != nil || limit < 1 || limit > 1000 {
		return 0, request.Errorf(http.StatusBadRequest, "limit must be an integer from 1 to 1000")
	}
	return int(limit), nil
}

// eventPage is a page of events, oldest first, with the cursor of the next one.
func eventPage(events []*store.Event, after int64) map[string]any {
	out := make([]map[string]any, len(events))
	next := after
	for i, e := range events {
		out[i] = eventView(e)
		next = e.ID
	}
	return map[string]any{"events": out, "nextAfter": next}
}
