package api

// The callback dialect (docs/contracts/callback.md), served on the public listener without an API
// key: a worker that received a task (typically by push) reports on it through
// /v1/tasks/{task_id}/started, /heartbeat and /completed, authenticated by the task's capability
// token as "Authorization: Bearer <token>". The token binds the task and the attempt and carries
// the attempt's lease token, so the body's {task_id (path), attempt} must match the token and the
// fence of every core call comes from the token. camelCase; states SUCCEEDED, FAILED, CANCELLED.
//
// This file only translates shapes and errors; every rule is the dispatcher's.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/api/codec"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/telemetry"
)

// POST /v1/tasks/{task_id}/started {attempt, workerId, startedAt}
//
// The core has no "started" transition: the claim already made the attempt running. The answer
// is read from the task, with the core's own fence and ended-attempt errors: the attempt must be
// the current one, and still running; a running attempt whose cancellation was requested gets 409
// task_already_terminal / CANCELLED, which tells the worker not to start.
// The decision is the core's (Dispatcher.StartAttempt); only a traceparent is written, on the
// attempt.
func (s *Server) callbackStarted(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, fence, err := s.callbackRequest(r)
	if err != nil {
		return nil, err
	}
	if err := codec.CallbackTimeField(obj, "startedAt"); err != nil {
		return nil, err
	}
	if _, err := s.d.StartAttempt(r.Context(), fence.Fence); err != nil {
		return nil, err
	}
	if fence.traceparent != "" {
		if err := s.d.RecordTraceparent(r.Context(), fence.Fence, fence.traceparent); err != nil {
			return nil, err
		}
	}
	return map[string]any{"acknowledged": true, "serverTime": callbackNow()}, nil
}

// POST /v1/tasks/{task_id}/heartbeat {attempt, workerId, heartbeatAt?, progressPct?, message?}
//
// heartbeatAt, progressPct and message are validated but not stored: the lease is extended from
// the server's receipt time (a worker's clock must not lengthen its own lease), and the core's
// heartbeat records no progress.
func (s *Server) callbackHeartbeat(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, fence, err := s.callbackRequest(r)
	if err != nil {
		return nil, err
	}
	if err := codec.CallbackTimeField(obj, "heartbeatAt"); err != nil {
		return nil, err
	}
	if raw, ok := obj["progressPct"]; ok && !request.IsNull(raw) {
		var p float64
		if json.Unmarshal(raw, &p) != nil || math.IsNaN(p) || p < 0 || p > 100 {
			return nil, request.Errorf(http.StatusBadRequest, "body.progressPct must be a number from 0 to 100")
		}
	}
	f := request.Fields{Obj: obj, Where: "body"}
	_ = f.Str("message")
	if f.Err != nil {
		return nil, f.Err
	}
	res, err := s.d.Heartbeat(r.Context(), dispatch.HeartbeatParams{TaskID: fence.TaskID, Attempt: fence.Attempt, LeaseToken: fence.LeaseToken,
		Traceparent: fence.traceparent})
	if err != nil {
		return nil, err
	}
	out := map[string]any{"acknowledged": true, "shouldCancel": res.ShouldCancel, "serverTime": callbackNow()}
	if res.ShouldCancel {
		out["cancelReason"] = cmp.Or(res.CancelReason, "user_requested")
	}
	tok, exp, err := s.caps.Refresh(r.Context(), capability.Claims(r), res.Task)
	if err != nil {
		// The lease extension is committed; the next heartbeat tries again.
		s.log.WarnContext(r.Context(), "refresh task token", "task", res.Task.ID, "attempt", res.Task.Attempt, "err", err)
	} else if tok != "" {
		out["taskToken"], out["tokenExpiresAt"] = tok, exp.UTC().Format(time.RFC3339)
	}
	return out, nil
}

var callbackOutcomes = map[string]store.Outcome{
	"SUCCEEDED": store.OutcomeSucceeded,
	"FAILED":    store.OutcomeFailed,
	"CANCELLED": store.OutcomeCanceled,
}

// POST /v1/tasks/{task_id}/completed {attempt, workerId, outcome, completedAt, output, error,
// metrics, cancelledDuringPhase, partialProgress}
//
// metrics (an object) is stored with the attempt. For CANCELLED, cancelledDuringPhase and
// partialProgress are stored in that same attempt metrics object, under their own names (they
// win over metrics members of the same name): a canceled task keeps no output. output belongs to
// SUCCEEDED and error to FAILED; sending either with another outcome is a 400 rather than a
// silent drop. completedAt is validated; the server's clock times the transition.
func (s *Server) callbackCompleted(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, fence, err := s.callbackRequest(r)
	if err != nil {
		return nil, err
	}
	f := request.Fields{Obj: obj, Where: "body"}
	outcomeName := f.Str("outcome")
	phase := f.Str("cancelledDuringPhase")
	if f.Err != nil {
		return nil, f.Err
	}
	outcome, ok := callbackOutcomes[outcomeName]
	if !ok {
		return nil, request.Errorf(http.StatusBadRequest, "body.outcome is required: one of SUCCEEDED, FAILED, CANCELLED")
	}
	if err := codec.CallbackTimeField(obj, "completedAt"); err != nil {
		return nil, err
	}
	present := func(name string) bool { raw, ok := obj[name]; return ok && !request.IsNull(raw) }
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"output", outcome == store.OutcomeSucceeded},
		{"error", outcome == store.OutcomeFailed},
		{"cancelledDuringPhase", outcome == store.OutcomeCanceled},
		{"partialProgress", outcome == store.OutcomeCanceled},
	} {
		if present(c.name) && !c.ok {
			return nil, request.Errorf(http.StatusBadRequest, "body.%s does not belong to outcome %s", c.name, outcomeName)
		}
	}
	p := dispatch.CompleteParams{TaskID: fence.TaskID, Attempt: fence.Attempt, LeaseToken: fence.LeaseToken, Outcome: outcome,
		Traceparent: fence.traceparent}
	if present("output") {
		p.Output = request.Compact(obj["output"])
	}
	if present("error") {
		if p.Error, err = codec.CallbackTaskError(obj["error"]); err != nil {
			return nil, err
		}
	}
	var metrics map[string]json.RawMessage
	if present("metrics") {
		if err := json.Unmarshal(obj["metrics"], &metrics); err != nil {
			return nil, request.Errorf(http.StatusBadRequest, "body.metrics must be a JSON object")
		}
	}
	if outcome == store.OutcomeCanceled && (present("cancelledDuringPhase") || present("partialProgress")) {
		if metrics == nil {
			metrics = map[string]json.RawMessage{}
		}
		if phase != "" {
			metrics["cancelledDuringPhase"], _ = json.Marshal(phase)
		}
		if present("partialProgress") {
			metrics["partialProgress"] = request.Compact(obj["partialProgress"])
		}
	}
	if metrics != nil {
		if p.Metrics, err = json.Marshal(metrics); err != nil {
			return nil, request.Errorf(http.StatusBadRequest, "body.metrics: %v", err)
		}
	}
	res, err := s.d.Complete(r.Context(), p)
	if err != nil {
		return nil, err
	}
	return map[string]any{"acknowledged": true, "finalState": codec.CallbackState(res.Status), "willRetry": res.Requeued,
		"serverTime": callbackNow()}, nil
}

// callbackRequest reads a callback body and binds it to the request's token: the path's task must
// be the token's (checked before the body is read), and the body's attempt, required, and
// attemptId, when sent, must name the current attempt (tokenFence). workerId is required too; it
// is informational (a pushed task's lease belongs to the dispatcher's claim, not to the worker's
// own id). traceparent, when sent, must be a W3C trace context; the returned fence carries it.
func (s *Server) callbackRequest(r *http.Request) (map[string]json.RawMessage, callbackFence, error) {
	taskID := r.PathValue("task_id")
	if c := capability.Claims(r); c == nil || c.TaskID != taskID {
		return nil, callbackFence{}, s.rejected(auth.ErrTokenScope, "")
	}
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, callbackFence{}, err
	}
	f := request.Fields{Obj: obj, Where: "body"}
	attempt := f.Int("attempt")
	workerID := f.Str("workerId")
	attemptID := f.Str("attemptId")
	traceparent := f.Str("traceparent")
	if f.Err != nil {
		return nil, callbackFence{}, f.Err
	}
	if attempt == nil || *attempt < 1 {
		return nil, callbackFence{}, request.Errorf(http.StatusBadRequest, "body.attempt is required: a positive integer (the attempt of the task token)")
	}
	if workerID == "" {
		return nil, callbackFence{}, request.Errorf(http.StatusBadRequest, "body.workerId is required: a non-empty string")
	}
	if traceparent != "" && !telemetry.ValidTraceparent(traceparent) {
		return nil, callbackFence{}, request.Errorf(http.StatusBadRequest,
			"body.traceparent must be a W3C trace context: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>")
	}
	// attemptId is the envelope's id of the attempt: its lease token.
	fence, err := s.tokenFence(r, taskID, *attempt, attemptID)
	return obj, callbackFence{Fence: fence, traceparent: traceparent}, err
}

// callbackFence is the fence of a callback and the trace context the worker sent with it.
type callbackFence struct {
	dispatch.Fence
	traceparent string
}

func callbackNow() string { return time.Now().UTC().Format(time.RFC3339) }

// callbackRefusals answers the dialect's refusals as {"error": code, "message": text, ...}.
func (s *Server) callbackRefusals(endpoint string, h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		res, err := h(w, r)
		if err != nil {
			return nil, s.callbackRefusal(r, endpoint, err)
		}
		return res, nil
	}
}

// callbackRefusal maps err to the callback dialect's status codes and bodies; some messages are
// fixed texts that clients may match.
func (s *Server) callbackRefusal(r *http.Request, endpoint string, err error) error {
	refuse := func(status int, body map[string]any) error {
		return &streamShapedError{he: &request.Error{Status: status, Body: body}, cause: err}
	}
	var (
		mismatch *dispatch.AttemptMismatchError
		terminal *dispatch.TerminalError
	)
	switch {
	case errors.As(err, &mismatch):
		msg := fmt.Sprintf("Attempt %d is not the task's current attempt %d", mismatch.Received, mismatch.Expected)
		if mismatch.Received < mismatch.Expected {
			msg = fmt.Sprintf("Attempt %d is stale: attempt %d has been dispatched since", mismatch.Received, mismatch.Expected)
		}
		if endpoint == "completed" {
			msg = "A newer attempt has already completed" // a fixed text
		}
		// A stale attempt's results are logged, and ignored.
		s.log.WarnContext(r.Context(), "ignoring callback of a stale attempt", "task", r.PathValue("task_id"), "endpoint", endpoint,
			"received", mismatch.Received, "current", mismatch.Expected)
		return refuse(http.StatusConflict, map[string]any{"error": "attempt_mismatch", "expectedAttempt": mismatch.Expected,
			"receivedAttempt": mismatch.Received, "message": msg})
	case errors.Is(err, dispatch.ErrCancelRequested):
		return refuse(http.StatusConflict, map[string]any{"error": "task_already_terminal", "state": "CANCELLED",
			"message": "Task was cancelled before worker started"})
	case errors.As(err, &terminal):
		state := codec.CallbackState(terminal.State)
		return refuse(http.StatusConflict, map[string]any{"error": "task_already_terminal", "state": state,
			"message": "Task already " + state})
	case errors.Is(err, dispatch.ErrOutcomeConflict):
		return refuse(http.StatusConflict, map[string]any{"error": "outcome_conflict",
			"message": "This attempt already reported a different outcome"})
	case errors.Is(err, dispatch.ErrLeaseMismatch):
		return refuse(http.StatusConflict, map[string]any{"error": "lease_mismatch",
			"message": "The task token's lease is not the attempt's current lease"})
	case errors.Is(err, dispatch.ErrTaskExpired):
		msg := "Task attempt expired: it timed out or was given up on, and can no longer report"
		if endpoint == "heartbeat" {
			msg = "Task exceeded heartbeat timeout" // a fixed text
		}
		return refuse(http.StatusGone, map[string]any{"error": "task_expired", "message": msg})
	case errors.Is(err, dispatch.ErrTaskNotFound):
		return refuse(http.StatusNotFound, map[string]any{"error": "task_not_found", "message": "Task not found"})
	}
	he := s.toHTTP(err)
	msg, _ := he.Body["error"].(string)
	return &streamShapedError{he: &request.Error{Status: he.Status, Header: he.Header,
		Body: map[string]any{"error": codec.StreamStatusName(he.Status), "message": msg}}, cause: err}
}
