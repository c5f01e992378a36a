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
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/api/codec"
	"github.com/baton-dev/baton/internal/assignment"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
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
			return codec.InvalidRequest("%v", he.Body["error"])
		}
		return he
	case errors.As(err, &bad):
		return codec.InvalidRequest("%s", bad.Message)
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
			"state": codec.InternalStatus(terminal.State), "message": terminal.Error()}}
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

// snakeTime is an RFC 3339 UTC time, or null for the zero time.
func snakeTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
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
	if err := codec.CheckTaskID(b.taskID); err != nil {
		return nil, err
	}
	if attempt == nil {
		return nil, codec.InvalidRequest("attempt is required")
	}
	if *attempt < 1 {
		return nil, codec.InvalidRequest("attempt must be a positive integer, got %d", *attempt)
	}
	b.attempt = *attempt
	if b.leaseToken == "" {
		return nil, codec.InvalidRequest("lease_token is required")
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
	isolation, err := readIsolation(f)
	if err != nil {
		return nil, err
	}
	if err := codec.CheckTaskID(taskID); err != nil {
		return nil, err
	}
	if workerID == "" {
		workerID = peerName(r)
	}
	if len(workerID) > maxWorkerID {
		return nil, codec.InvalidRequest("worker_id must be at most %d characters", maxWorkerID)
	}
	if !s.caps.Enabled() {
		// Refuse before taking a lease that could not be handed out with its token.
		return nil, errors.New("api: no capability token issuer configured (Config.Tokens)")
	}
	ctx := r.Context()
	s.noteWorker(ctx, workerID, isolation)
	c, err := s.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: taskID, WorkerID: workerID})
	var nc *dispatch.NotClaimedError
	if errors.As(err, &nc) {
		return map[string]any{"status": "NotClaimed", "reason": internalClaimReason(nc.Reason), "detail": nc.Reason}, nil
	}
	if err != nil {
		return nil, err
	}
	token, tokenExp, err := s.caps.Mint(ctx, c.Task, c.Job, c.Route)
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
		return nil, codec.InvalidRequest("task_id is required: GET /internal/task-fetch?task_id=<uuid>")
	case len(ids) > 1:
		return nil, codec.InvalidRequest("task_id must be given once")
	}
	if err := codec.CheckTaskID(ids[0]); err != nil {
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
		Status: codec.InternalStatus(t.Status), CancelRequested: !t.CancelRequestedAt.IsZero()}
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
				return nil, codec.InvalidRequest("status is required: Completed, Failed or Canceled")
			}
		default:
			return nil, codec.InvalidRequest("status must be Completed, Failed or Canceled, got %q", st)
		}
		if raw, ok := b.present("events"); ok {
			if p.Events, err = codec.Events(raw); err != nil {
				return nil, err
			}
		}
		output := map[string]json.RawMessage{}
		for _, name := range []string{"outputs", "datasets_published"} {
			if raw, ok := b.present(name); ok {
				if output[name], err = codec.ObjectArray(raw, name); err != nil {
					return nil, err
				}
			}
		}
		if raw, ok := output["datasets_published"]; ok {
			if p.Published, err = codec.Published(raw); err != nil {
				return nil, err
			}
		}
		// output, any JSON, is kept as the task's output as it is, in place of {outputs,
		// datasets_published}: what a handler returned, as the stream-worker dialect's result.
		var whole json.RawMessage
		if raw, ok := b.present("output"); ok {
			switch {
			case b.Err == nil && p.Outcome != store.OutcomeSucceeded:
				return nil, codec.InvalidRequest("output belongs to status Completed only")
			case output["outputs"] != nil:
				return nil, codec.InvalidRequest("output and outputs are both the task's output: send one of them")
			}
			whole = request.Compact(raw)
		}
		message := b.Str("error_message")
		var taskErr *store.TaskError
		if raw, ok := b.present("error"); ok {
			if taskErr, err = codec.InternalTaskError(raw); err != nil {
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
			p.Output = whole
			if whole == nil {
				p.Output, _ = json.Marshal(output)
			}
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
	return codec.InternalStatus(st)
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
			return nil, codec.InvalidRequest("events is required: an array of one or more events")
		}
		events, err := codec.Events(raw)
		if err != nil {
			return nil, err
		}
		if len(events) == 0 {
			return nil, codec.InvalidRequest("events must hold at least one event")
		}
		f, err := b.resolve(r, fence)
		if err != nil {
			return nil, err
		}
		stored, err := s.dp.Intake().Record(r.Context(), f, events)
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
