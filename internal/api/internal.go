package api

// The internal worker dialect (docs/contracts/internal.md), served on the internal (mTLS)
// listener: a worker claims a task by id after a wake-up, may fetch it, heartbeats, reports
// upstream events and buffered publishes, and completes it. Every call about an attempt is fenced
// by {task_id, attempt, lease_token}.
//
// The four fenced operations (heartbeat, complete, events, buffer-publish) are shared with the
// task-scoped dialect (taskscoped.go): each is one function that takes the step that
// turns the body's {task_id, attempt, lease_token} into the fence the core checks. Here the body
// is taken as it is (the listener's client certificate vouches for the caller); there it is first
// bound to the capability token. Neither holds a lifecycle rule: they translate shapes and errors.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/assignment"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// fenceFunc resolves the attempt a fenced call is about from the task_id, attempt and lease_token
// of its body.
type fenceFunc func(r *http.Request, taskID string, attempt int, leaseToken string) (dispatch.Fence, error)

// bodyFence is the internal dialect's fence: the body's own ids, checked by the core alone.
func bodyFence(_ *http.Request, taskID string, attempt int, leaseToken string) (dispatch.Fence, error) {
	return dispatch.Fence{TaskID: taskID, Attempt: attempt, LeaseToken: leaseToken}, nil
}

// invalidRequest is the dialects' 400: a code and a message that names the field.
func invalidRequest(format string, args ...any) *request.Error {
	return &request.Error{Status: http.StatusBadRequest, Body: map[string]any{"error": "invalid_request", "message": fmt.Sprintf(format, args...)}}
}

func codedError(status int, code, message string) *request.Error {
	return &request.Error{Status: status, Body: map[string]any{"error": code, "message": message}}
}

// fencedErrors maps the errors of the internal and task-scoped dialects to their snake_case
// answers; anything it does not know goes on to toHTTP (a 500 is logged there).
func (s *Server) fencedErrors(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		res, err := h(w, r)
		if err != nil {
			return nil, fencedError(err)
		}
		return res, nil
	}
}

func fencedError(err error) error {
	var (
		he       *request.Error
		bad      *dispatch.InvalidError
		denied   *dispatch.ForbiddenError
		conflict *dispatch.ConflictError
		mismatch *dispatch.AttemptMismatchError
		terminal *dispatch.TerminalError
	)
	switch {
	case errors.As(err, &he):
		// The shared JSON helpers answer {"error": message}; these dialects answer a code.
		if _, ok := he.Body["message"]; he.Status == http.StatusBadRequest && !ok {
			return invalidRequest("%v", he.Body["error"])
		}
		return he
	case errors.As(err, &bad):
		return invalidRequest("%s", bad.Message)
	case errors.As(err, &denied):
		return codedError(http.StatusForbidden, "forbidden", denied.Message)
	case errors.As(err, &conflict):
		return codedError(http.StatusConflict, conflict.Code, conflict.Message)
	case errors.As(err, &mismatch):
		return &request.Error{Status: http.StatusConflict, Body: map[string]any{"error": "attempt_mismatch",
			"expected_attempt": mismatch.Expected, "received_attempt": mismatch.Received, "message": mismatch.Error()}}
	case errors.Is(err, dispatch.ErrLeaseMismatch):
		return codedError(http.StatusConflict, "lease_mismatch", "lease_token is not the current attempt's lease token")
	case errors.Is(err, dispatch.ErrTaskExpired):
		return codedError(http.StatusGone, "task_expired", "the attempt timed out or was given up on: stop running it")
	case errors.As(err, &terminal):
		return &request.Error{Status: http.StatusConflict, Body: map[string]any{"error": "task_already_terminal",
			"state": internalStatus(terminal.State), "message": terminal.Error()}}
	case errors.Is(err, dispatch.ErrOutcomeConflict):
		return codedError(http.StatusConflict, "outcome_conflict", "the attempt already reported a different outcome")
	case errors.Is(err, dispatch.ErrTaskNotFound):
		return codedError(http.StatusNotFound, "task_not_found", "no task with this task_id")
	case errors.Is(err, auth.ErrTokenMissing), errors.Is(err, auth.ErrTokenExpired), errors.Is(err, auth.ErrTokenInvalid):
		return codedError(http.StatusUnauthorized, "unauthorized", err.Error())
	case errors.Is(err, auth.ErrTokenScope):
		return codedError(http.StatusForbidden, "forbidden", err.Error())
	}
	return err
}

// internalStatus is a task status in the internal dialect's words.
func internalStatus(st lifecycle.TaskStatus) string {
	switch st {
	case lifecycle.Waiting:
		return "Waiting"
	case lifecycle.Pending:
		return "Pending"
	case lifecycle.Running:
		return "Running"
	case lifecycle.Completed:
		return "Completed"
	case lifecycle.Failed:
		return "Failed"
	case lifecycle.Canceled:
		return "Canceled"
	case lifecycle.Skipped:
		return "Skipped"
	}
	return string(st)
}

// snakeTime is an RFC 3339 UTC time, or null for the zero time.
func snakeTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

// checkTaskID checks the shape of a task id: the dispatcher's ids are UUIDs.
func checkTaskID(id string) error {
	if id == "" {
		return invalidRequest("task_id is required")
	}
	if len(id) != 36 || uuid.Validate(id) != nil {
		return invalidRequest("task_id must be a task UUID, got %q", id)
	}
	return nil
}

// readWorker reads the JSON object body of a worker endpoint. Every worker endpoint reads its
// body as one object (request.ReadObject) whose members it does not know are ignored: clients of
// the worker contracts evolve and add fields (attemptId, traceparent...) that an older server must
// let through. A body that is not an object, and members of the wrong type, are still refused by
// the readers of the members.
func readWorker(r *http.Request) (*request.Fields, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, err
	}
	return &request.Fields{Obj: obj, Where: "body"}, nil
}

// fencedBody is the body of a call about one attempt.
type fencedBody struct {
	*request.Fields
	taskID     string
	attempt    int
	leaseToken string
}

// readFenced reads the body of a call about one attempt: task_id, attempt and lease_token, all
// required, and whatever else the endpoint reads from it.
func readFenced(r *http.Request) (*fencedBody, error) {
	f, err := readWorker(r)
	if err != nil {
		return nil, err
	}
	b := &fencedBody{Fields: f, taskID: f.Str("task_id"), leaseToken: f.Str("lease_token")}
	attempt := f.Int("attempt")
	if f.Err != nil {
		return nil, f.Err
	}
	if err := checkTaskID(b.taskID); err != nil {
		return nil, err
	}
	if attempt == nil {
		return nil, invalidRequest("attempt is required")
	}
	if *attempt < 1 {
		return nil, invalidRequest("attempt must be a positive integer, got %d", *attempt)
	}
	b.attempt = *attempt
	if b.leaseToken == "" {
		return nil, invalidRequest("lease_token is required")
	}
	return b, nil
}

// resolve turns the body's ids into the fence the core checks, after the whole body was read.
// readFence reads a request that carries nothing but its fence, and resolves it.
func readFence(r *http.Request, fence fenceFunc) (dispatch.Fence, error) {
	b, err := readFenced(r)
	if err != nil {
		return dispatch.Fence{}, err
	}
	return b.resolve(r, fence)
}

func (b *fencedBody) resolve(r *http.Request, fence fenceFunc) (dispatch.Fence, error) {
	if b.Err != nil {
		return dispatch.Fence{}, b.Err
	}
	return fence(r, b.taskID, b.attempt, b.leaseToken)
}

// present reports whether the body has the member with a non-null value.
func (b *fencedBody) present(name string) (json.RawMessage, bool) {
	raw, ok := b.Obj[name]
	if !ok || request.IsNull(raw) {
		return nil, false
	}
	return raw, true
}

// ---- claim and fetch (internal dialect only) ----

// internalClaimReason maps the core's NotClaimed reason to one of the internal dialect's four
// reasons, which strict clients parse: Failed → Completed, Skipped → Canceled, NotReady (waiting
// for parents or backing off before a retry) → AlreadyRunning. In every case the worker's action
// is the same one — do not run the task, ack the queue message — so the coarser name loses nothing
// a client acts on; the core's precise reason is in "detail".
func internalClaimReason(r dispatch.NotClaimedReason) dispatch.NotClaimedReason {
	switch r {
	case dispatch.NotClaimedFailed:
		return dispatch.NotClaimedCompleted
	case dispatch.NotClaimedSkipped:
		return dispatch.NotClaimedCanceled
	case dispatch.NotClaimedNotReady:
		return dispatch.NotClaimedAlreadyRunning
	}
	return r
}

// maxWorkerID bounds a worker id, which is stored with every attempt and audit event.
const maxWorkerID = 256

// peerName names the caller of a worker endpoint that did not name itself: the subject of its
// client certificate (mTLS), or "unknown".
func peerName(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		if name := r.TLS.PeerCertificates[0].Subject.String(); name != "" && len(name) <= maxWorkerID {
			return name
		}
	}
	return "unknown"
}

// POST /internal/task-claim {task_id, worker_id?}: worker_id is optional (peerName).
func (s *Server) internalClaim(w http.ResponseWriter, r *http.Request) (any, error) {
	f, err := readWorker(r)
	if err != nil {
		return nil, err
	}
	taskID, workerID := f.Str("task_id"), f.Str("worker_id")
	if f.Err != nil {
		return nil, f.Err
	}
	if err := checkTaskID(taskID); err != nil {
		return nil, err
	}
	if workerID == "" {
		workerID = peerName(r)
	}
	if len(workerID) > maxWorkerID {
		return nil, invalidRequest("worker_id must be at most %d characters", maxWorkerID)
	}
	if s.tokens == nil {
		// Refuse before taking a lease that could not be handed out with its token.
		return nil, errors.New("api: no capability token issuer configured (Config.Tokens)")
	}
	ctx := r.Context()
	c, err := s.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: taskID, WorkerID: workerID})
	var nc *dispatch.NotClaimedError
	if errors.As(err, &nc) {
		return map[string]any{"status": "NotClaimed", "reason": internalClaimReason(nc.Reason), "detail": nc.Reason}, nil
	}
	if err != nil {
		return nil, err
	}
	token, tokenExp, err := s.TaskToken(ctx, c.Task, c.Job, c.Route)
	if err != nil {
		return nil, err
	}
	return assignment.Assignment{Claim: c, Token: token, TokenExpires: tokenExp}.Internal(), nil
}

// GET /internal/task-fetch?task_id=
func (s *Server) internalFetch(w http.ResponseWriter, r *http.Request) (any, error) {
	ids := r.URL.Query()["task_id"]
	switch {
	case len(ids) == 0 || ids[0] == "":
		return nil, invalidRequest("task_id is required: GET /internal/task-fetch?task_id=<uuid>")
	case len(ids) > 1:
		return nil, invalidRequest("task_id must be given once")
	}
	if err := checkTaskID(ids[0]); err != nil {
		return nil, err
	}
	ctx := r.Context()
	d, err := s.d.GetTask(ctx, "", ids[0])
	if err != nil {
		return nil, err
	}
	t := d.Task
	job, err := s.d.JobRef(ctx, t.JobID)
	if err != nil {
		return nil, err
	}
	out := &wire.FetchedTask{Task: *assignment.Task(t, job, dispatch.DecodeRoute(t), d.DependencyOutputs),
		Status: internalStatus(t.Status), CancelRequested: !t.CancelRequestedAt.IsZero()}
	if t.Status == lifecycle.Running {
		out.LeaseExpiresAt.Time = t.LeaseExpiresAt
		if out.CancelRequested {
			// The wrapper does not run (or stops) the operator and reports Canceled.
			out.Status = "Canceled"
		}
	}
	return out, nil
}

// ---- the fenced operations, shared with the task-scoped dialect ----

// fencedHeartbeat: POST /internal/heartbeat, POST /v1/task/heartbeat.
func (s *Server) fencedHeartbeat(fence fenceFunc) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		f, err := readFence(r, fence)
		if err != nil {
			return nil, err
		}
		ctx := r.Context()
		res, err := s.d.Heartbeat(ctx, dispatch.HeartbeatParams{TaskID: f.TaskID, Attempt: f.Attempt, LeaseToken: f.LeaseToken})
		if err != nil {
			return nil, err
		}
		out := map[string]any{"ok": true, "lease_expires_at": snakeTime(res.LeaseExpiresAt), "should_cancel": res.ShouldCancel, "cancel_reason": nil}
		if res.ShouldCancel {
			out["cancel_reason"] = nullable(res.CancelReason)
		}
		if token, exp := s.caps.HeartbeatToken(ctx, capability.Claims(r), res.Task); token != "" {
			out["capability_token"], out["capability_token_expires_at"] = token, snakeTime(exp)
		}
		return out, nil
	}
}

// fencedComplete: POST /internal/task-complete, POST /v1/task/complete.
func (s *Server) fencedComplete(fence fenceFunc) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		b, err := readFenced(r)
		if err != nil {
			return nil, err
		}
		var p dispatch.CompleteParams
		switch st := b.Str("status"); st {
		case "Completed":
			p.Outcome = store.OutcomeSucceeded
		case "Failed":
			p.Outcome = store.OutcomeFailed
		case "Canceled":
			p.Outcome = store.OutcomeCanceled
		case "":
			if b.Err == nil {
				return nil, invalidRequest("status is required: Completed, Failed or Canceled")
			}
		default:
			return nil, invalidRequest("status must be Completed, Failed or Canceled, got %q", st)
		}
		if raw, ok := b.present("events"); ok {
			if p.Events, err = decodeUpstreamEvents(raw); err != nil {
				return nil, err
			}
		}
		output := map[string]json.RawMessage{}
		for _, name := range []string{"outputs", "datasets_published"} {
			if raw, ok := b.present(name); ok {
				if output[name], err = objectArray(raw, name); err != nil {
					return nil, err
				}
			}
		}
		if raw, ok := output["datasets_published"]; ok {
			if p.Published, err = decodePublished(raw); err != nil {
				return nil, err
			}
		}
		message := b.Str("error_message")
		var taskErr *store.TaskError
		if raw, ok := b.present("error"); ok {
			if taskErr, err = decodeTaskError(raw); err != nil {
				return nil, err
			}
		}
		f, err := b.resolve(r, fence)
		if err != nil {
			return nil, err
		}
		p.TaskID, p.Attempt, p.LeaseToken = f.TaskID, f.Attempt, f.LeaseToken
		switch p.Outcome {
		case store.OutcomeSucceeded:
			p.Output, _ = json.Marshal(output)
		case store.OutcomeFailed:
			if taskErr == nil {
				taskErr = &store.TaskError{}
			}
			if taskErr.Message == "" {
				taskErr.Message = message
			}
			p.Error = taskErr // the core defaults the category to USER_CODE
		}
		res, err := s.d.Complete(r.Context(), p)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ok": true, "ack": true, "status": completeStatus(res.Status), "requeued": res.Requeued,
			"dead_lettered": res.DeadLettered, "duplicate": res.Duplicate}, nil
	}
}

// completeStatus is what became of the task, in the dialect's words.
func completeStatus(st lifecycle.TaskStatus) string {
	if st == lifecycle.Pending {
		return "RetryScheduled"
	}
	return internalStatus(st)
}

// decodeTaskError reads the optional error object of a failed completion.
func decodeTaskError(raw json.RawMessage) (*store.TaskError, error) {
	obj, err := request.DecodeObject(raw)
	if err != nil {
		return nil, invalidRequest("error must be an object {category, message, stack_trace, retryable}")
	}
	f := request.Fields{Obj: obj, Where: "error"}
	e := &store.TaskError{Category: lifecycle.Category(f.Str("category")), Message: f.Str("message"), StackTrace: f.Str("stack_trace")}
	if f.Err != nil {
		return nil, f.Err
	}
	if raw, ok := obj["retryable"]; ok && !request.IsNull(raw) {
		var v bool
		if json.Unmarshal(raw, &v) != nil {
			return nil, invalidRequest("error.retryable must be true or false")
		}
		e.Retryable = &v
	}
	return e, nil
}

// objectArray checks that raw is an array of JSON objects and returns it compacted.
func objectArray(raw json.RawMessage, name string) (json.RawMessage, error) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, invalidRequest("%s must be an array of objects", name)
	}
	for i, it := range items {
		var obj map[string]json.RawMessage
		if json.Unmarshal(it, &obj) != nil || obj == nil {
			return nil, invalidRequest("%s[%d] must be an object", name, i)
		}
	}
	return request.Compact(raw), nil
}

// decodeUpstreamEvents reads the internal dialect's events (single, partitioned or batch shapes);
// what they mean is checked by the core.
func decodeUpstreamEvents(raw json.RawMessage) ([]report.Event, error) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, invalidRequest("events must be an array of event objects")
	}
	events := make([]report.Event, len(items))
	for i, item := range items {
		where := fmt.Sprintf("events[%d]", i)
		obj, err := request.DecodeObject(item)
		if err != nil {
			return nil, invalidRequest("%s must be an object", where)
		}
		f := request.Fields{Obj: obj, Where: where}
		events[i] = report.Event{DatasetUUID: f.Str("dataset_uuid"), DatasetVersion: f.Str("dataset_version"),
			Cursor: f.Int64("cursor"), PartitionKey: f.Str("partition_key"), Start: f.Int64("start"), End: f.Int64("end")}
		if f.Err != nil {
			return nil, f.Err
		}
	}
	return events, nil
}

// maxVersionText bounds the ids and hashes of a published dataset version, which the store
// indexes.
const maxVersionText = 255

// decodePublished reads a completion's datasets_published: the dataset versions the task wrote,
// which the core registers when the completion commits (the output keeps them too).
func decodePublished(raw json.RawMessage) ([]report.Published, error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalidRequest("datasets_published must be an array of objects")
	}
	out := make([]report.Published, len(items))
	for i, obj := range items {
		where := fmt.Sprintf("datasets_published[%d]", i)
		f := request.Fields{Obj: obj, Where: where}
		out[i] = report.Published{DatasetUUID: f.Str("dataset_uuid"), DatasetVersion: f.Str("dataset_version"),
			StorageRef: request.Compact(obj["storage_ref"]), ConfigHash: f.Str("config_hash"), RangeStart: f.Int64("range_start"), RangeEnd: f.Int64("range_end")}
		if f.Err != nil {
			return nil, f.Err
		}
		v := out[i]
		if v.DatasetUUID == "" || v.DatasetVersion == "" {
			return nil, invalidRequest("%s: dataset_uuid and dataset_version are required", where)
		}
		for name, text := range map[string]string{"dataset_uuid": v.DatasetUUID, "dataset_version": v.DatasetVersion, "config_hash": v.ConfigHash} {
			if len(text) > maxVersionText {
				return nil, invalidRequest("%s.%s must be at most %d bytes", where, name, maxVersionText)
			}
		}
	}
	return out, nil
}

// fencedEvents: POST /internal/events, POST /v1/task/events.
func (s *Server) fencedEvents(fence fenceFunc) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		b, err := readFenced(r)
		if err != nil {
			return nil, err
		}
		raw, ok := b.present("events")
		if !ok {
			return nil, invalidRequest("events is required: an array of one or more events")
		}
		events, err := decodeUpstreamEvents(raw)
		if err != nil {
			return nil, err
		}
		if len(events) == 0 {
			return nil, invalidRequest("events must hold at least one event")
		}
		f, err := b.resolve(r, fence)
		if err != nil {
			return nil, err
		}
		stored, err := s.d.RecordEvents(r.Context(), f, events)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ok": true, "received": len(events), "stored": stored}, nil
	}
}

// fencedBufferPublish: POST /internal/buffer-publish (the internal dialect's body), POST
// /v1/task/buffer-publish (the task-scoped dialect's body); both accept either set of fields
// (docs/contracts/buffer.md).
func (s *Server) fencedBufferPublish(fence fenceFunc) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		b, err := readFenced(r)
		if err != nil {
			return nil, err
		}
		p := bufferqueue.PublishParams{BatchURI: b.Str("batch_uri"), DatasetUUID: b.Str("dataset_uuid"),
			DatasetVersion: b.Str("dataset_version"), RecordCount: b.Int64("record_count"), ContentType: b.Str("content_type"),
			BatchSizeBytes: b.Int64("batch_size_bytes"), DedupeScope: b.Str("dedupe_scope")}
		if p.Fence, err = b.resolve(r, fence); err != nil {
			return nil, err
		}
		dup, err := s.dp.Buffers().Publish(r.Context(), p)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ok": true, "duplicate": dup}, nil
	}
}
