package api

// The stream-worker dialect (docs/contracts/stream-worker.md), served on the internal listener:
// trusted workers long-poll named queues ("streams", in priority order) for the next task ("job"),
// heartbeat under its lease, and report the outcome with /complete or /fail. Names: job_id is
// Baton's task id, attempt_id the attempt number, a stream a queue name (any name a Redis key may
// have, such as jobs:stream:high). A claim hands out the task's stream message id: the entry id of
// its wake-up with the Redis transport, a stable id of the same form otherwise. Every report's
// answer says whether the worker should ACK that message (ack); the server settles the wake-up on
// the transport itself then (for report-batch too), so a worker's own XACK is harmless either way.
//
// This file only translates shapes and errors; every rule is the dispatcher's.

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/api/codec"
	"github.com/baton-dev/baton/internal/assignment"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/wire"
)

const (
	// streamMaxWaitMs caps max_wait_ms: one minute of long poll.
	streamMaxWaitMs = 60000
	// streamMaxWorkerID bounds the worker id a claim records.
	streamMaxWorkerID = 256
)

// POST /internal/worker/claim {worker_id, streams, max_wait_ms}
func (s *Server) streamClaim(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, err
	}
	claims, err := s.streamClaimWait(w, r, obj, 1)
	if err != nil {
		return nil, err
	}
	if len(claims) == 0 {
		return map[string]any{"claimed": false}, nil
	}
	answers, err := s.streamClaimAnswers(r.Context(), claims)
	if err != nil {
		return nil, err
	}
	return answers[0], nil
}

// streamClaimWait reads a claim's worker_id, streams and max_wait_ms from obj and long-polls
// for up to limit tasks. It returns when tasks are claimed, when max_wait_ms passes, or when the
// worker hangs up (nothing was claimed then); a server shutting down ends waiting long polls at
// once, empty-handed, instead of holding up the shutdown for up to max_wait_ms.
func (s *Server) streamClaimWait(w http.ResponseWriter, r *http.Request, obj map[string]json.RawMessage, limit int) ([]*dispatch.Claim, error) {
	f := request.Fields{Obj: obj, Where: "body"}
	workerID := f.Str("worker_id")
	wait := f.Int64("max_wait_ms")
	isolation, err := readIsolation(&f)
	if err != nil {
		return nil, err
	}
	if workerID == "" || len(workerID) > streamMaxWorkerID {
		return nil, request.Errorf(http.StatusBadRequest, "body.worker_id is required: a non-empty string of at most %d bytes", streamMaxWorkerID)
	}
	s.noteWorker(r.Context(), workerID, isolation)
	streams, err := codec.StreamNames(obj["streams"])
	if err != nil {
		return nil, err
	}
	maxWait := time.Duration(0)
	if wait != nil {
		if *wait < 0 || *wait > streamMaxWaitMs {
			return nil, request.Errorf(http.StatusBadRequest, "body.max_wait_ms must be an integer from 0 to %d", streamMaxWaitMs)
		}
		maxWait = time.Duration(*wait) * time.Millisecond
	}
	if !s.caps.Enabled() {
		// Refuse before taking a lease that could not be handed out with its token.
		return nil, errors.New("api: no capability token issuer configured (Config.Tokens)")
	}
	release, err := s.longPoll(w, workerID, maxWait)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	claims, err := s.d.ClaimWait(ctx, dispatch.ClaimNextParams{Queues: streams, WorkerID: workerID, Limit: limit}, maxWait)
	if err != nil && r.Context().Err() == nil && s.drainCtx.Err() != nil {
		return nil, nil
	}
	return claims, err
}

// streamClaimAnswer is the answer of a claim that got c; msgID is the id of its wake-up message
// (streamMessageIDs).
func (s *Server) streamClaimAnswer(ctx context.Context, c *dispatch.Claim, msgID string) (*wire.StreamClaim, error) {
	t := c.Task
	// If minting fails the worker gets a 500 and never runs the attempt; its lease then expires
	// and the reaper retries the task, as for any worker that vanishes after a claim.
	tok, exp, err := s.caps.Mint(ctx, t, c.Job, c.Route)
	if err != nil {
		return nil, fmt.Errorf("issue capability token for task %s attempt %d: %w", t.ID, t.Attempt, err)
	}
	return assignment.Assignment{Claim: c, Token: tok, TokenExpires: exp}.Stream(msgID), nil
}

// streamClaimAnswers answers claims in order, each with its message id.
func (s *Server) streamClaimAnswers(ctx context.Context, claims []*dispatch.Claim) ([]*wire.StreamClaim, error) {
	ids := s.streamMessageIDs(ctx, claims)
	out := make([]*wire.StreamClaim, 0, len(claims))
	for _, c := range claims {
		a, err := s.streamClaimAnswer(ctx, c, ids[c.Task.ID])
		if err != nil {
			// The leases of the claims not handed out expire and the reaper retries them.
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// streamMessageIDs is the message_id of each claimed task, by task id. With a transport whose
// wake-ups are stream entries (Redis), it is the entry id of the task's wake-up; otherwise, or
// when the transport does not answer (the lease is taken: the worker must get its task), a stable
// id of the claimed attempt in the same "<milliseconds>-<sequence>" form, so that a client which
// acknowledges it on its own stream gets a well-formed id (and acknowledges nothing).
func (s *Server) streamMessageIDs(ctx context.Context, claims []*dispatch.Claim) map[string]string {
	ids := make(map[string]string, len(claims))
	if s.wakeups != nil {
		byQueue := map[string][]string{}
		for _, c := range claims {
			byQueue[c.Task.Queue] = append(byQueue[c.Task.Queue], c.Task.ID)
		}
		for queue, tasks := range byQueue {
			got, err := s.wakeups.MessageIDs(ctx, queue, tasks)
			if err != nil {
				s.log.WarnContext(ctx, "look up wake-up message ids", "queue", queue, "err", err)
				continue
			}
			maps.Copy(ids, got)
		}
	}
	for _, c := range claims {
		if ids[c.Task.ID] == "" {
			ids[c.Task.ID] = stableMessageID(c.Task)
		}
	}
	return ids
}

// stableMessageID is "<claim time in ms>-<63 random bits of the task id>": the same for every
// answer about one attempt, distinct across tasks and attempts, and a valid Redis stream entry id.
// (Task ids are UUIDv7: their first half is a timestamp, their second half random.)
func stableMessageID(t *store.Task) string {
	var seq uint64
	if id, err := uuid.Parse(t.ID); err == nil {
		seq = binary.BigEndian.Uint64(id[8:]) >> 1
	}
	return fmt.Sprintf("%d-%d", max(t.StartedAt.UnixMilli(), 0), seq)
}

// streamAcked reports whether the answer to a report, whose error is err, tells the worker to
// ACK its message: a success, or a refusal with ack: true (streamRefusal).
func (s *Server) streamAcked(err error) bool {
	if err == nil {
		return true
	}
	var se *streamShapedError
	return errors.As(s.streamRefusal(err), &se) && se.he.Body["ack"] == true
}

// streamSettle settles, on the transport, the wake-up messages that acknowledged reports name
// (stream, job_id and message_id): the worker's own XACK then finds them settled. Best effort: a
// wake-up left outstanding costs the reconciler a look, never correctness.
func (s *Server) streamSettle(ctx context.Context, reports ...map[string]json.RawMessage) {
	if s.wakeups == nil {
		return
	}
	refs := make([]transport.WakeupRef, 0, len(reports))
	for _, obj := range reports {
		f := request.Fields{Obj: obj, Where: "body"}
		ref := transport.WakeupRef{Queue: f.Str("stream"), TaskID: f.Str("job_id"), ID: f.Str("message_id")}
		if f.Err == nil && ref.Queue != "" && ref.TaskID != "" && ref.ID != "" {
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		return
	}
	if err := s.wakeups.Settle(ctx, refs); err != nil {
		s.log.WarnContext(ctx, "settle wake-up messages", "messages", len(refs), "err", err)
	}
}

// POST /internal/worker/heartbeat {worker_id, job_id, lease_token}. The dialect's heartbeat names
// no attempt: the lease token identifies it (Attempt 0). An attempt_id, when sent, fences as well.
func (s *Server) streamHeartbeat(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, err
	}
	f := request.Fields{Obj: obj, Where: "body"}
	_ = f.Str("worker_id")
	taskID := f.Required("job_id")
	lease := f.Required("lease_token")
	attempt := 0
	if _, ok := obj["attempt_id"]; ok && !request.IsNull(obj["attempt_id"]) {
		attempt = streamAttempt(&f)
	}
	if f.Err != nil {
		return nil, f.Err
	}
	res, err := s.d.Heartbeat(r.Context(), dispatch.HeartbeatParams{TaskID: taskID, Attempt: attempt, LeaseToken: lease})
	if err != nil {
		return nil, err
	}
	var reason any
	if res.ShouldCancel {
		reason = cmp.Or(res.CancelReason, "user_requested")
	}
	out := map[string]any{
		"ok":               true,
		"lease_expires_at": streamTime(res.LeaseExpiresAt),
		"should_cancel":    res.ShouldCancel,
		"cancel_reason":    reason,
	}
	// The dialect's heartbeat carries no capability token, so the server cannot see how old the
	// worker's token is. The claim minted it when the attempt started (Task.StartedAt) with
	// auth.TokenTTL; once that token is past half its life (in the dispatcher's time), every
	// heartbeat answer carries a freshly minted one, so a worker that heartbeats on schedule always
	// holds a token with at least half a lifetime, minus one heartbeat interval, left.
	t := res.Task
	if ttl := auth.TokenTTL(t.Timeout); s.caps.Enabled() && t.HeartbeatAt.Sub(t.StartedAt) >= ttl/2 {
		tok, exp, err := s.caps.Remint(r.Context(), t)
		if err != nil {
			// The lease was extended and committed; the next heartbeat tries again.
			s.log.WarnContext(r.Context(), "refresh capability token", "task", t.ID, "attempt", t.Attempt, "err", err)
		} else {
			out["capability_token"], out["capability_token_expires_at"] = tok, streamTime(exp)
		}
	}
	return out, nil
}

// POST /internal/worker/complete {worker_id, job_id, attempt_id, lease_token, stream, message_id, result}
func (s *Server) streamComplete(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, err
	}
	res, err := s.streamCompleteObj(r.Context(), obj)
	if s.streamAcked(err) {
		s.streamSettle(r.Context(), obj)
	}
	return res, err
}

// streamCompleteParams reads a /complete report.
func streamCompleteParams(obj map[string]json.RawMessage) (dispatch.CompleteParams, error) {
	p, err := streamReport(obj)
	if err != nil {
		return p, err
	}
	p.Outcome = store.OutcomeSucceeded
	if raw, ok := obj["result"]; ok {
		p.Output = request.Compact(raw)
	}
	return p, nil
}

// streamCompleteObj applies a /complete report read into obj.
func (s *Server) streamCompleteObj(ctx context.Context, obj map[string]json.RawMessage) (any, error) {
	p, err := streamCompleteParams(obj)
	if err != nil {
		return nil, err
	}
	if _, err := s.d.Complete(ctx, p); err != nil {
		return nil, err
	}
	// The success is committed (or was, by an identical earlier report): the message is done.
	return map[string]any{"ok": true, "ack": true}, nil
}

// POST /internal/worker/fail {worker_id, job_id, attempt_id, lease_token, stream, message_id,
// error: {code, message, stack, retryable}}
func (s *Server) streamFail(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, err
	}
	res, err := s.streamFailObj(r.Context(), obj)
	if s.streamAcked(err) {
		s.streamSettle(r.Context(), obj)
	}
	return res, err
}

// streamFailObj applies a /fail report read into obj.
func (s *Server) streamFailObj(ctx context.Context, obj map[string]json.RawMessage) (any, error) {
	p, err := streamReport(obj)
	if err != nil {
		return nil, err
	}
	e, err := codec.StreamTaskError(obj["error"])
	if err != nil {
		return nil, err
	}
	p.Outcome, p.Error = store.OutcomeFailed, e
	res, err := s.d.Complete(ctx, p)
	if err != nil {
		return nil, err
	}
	// Either way the DB state is final for this attempt: a retry is scheduled (with its own
	// wake-up message) or the task is dead-lettered.
	return map[string]any{"ok": true, "ack": true, "requeued": res.Requeued, "dlq": res.DeadLettered}, nil
}

// streamReport reads the members /complete and /fail share into the fence of a report.
func streamReport(obj map[string]json.RawMessage) (dispatch.CompleteParams, error) {
	f := request.Fields{Obj: obj, Where: "body"}
	_ = f.Str("worker_id")
	_ = f.Str("stream")
	_ = f.Str("message_id") // a Redis message id is a string ("1700000000000-0")
	p := dispatch.CompleteParams{
		TaskID:     f.Required("job_id"),
		Attempt:    streamAttempt(&f),
		LeaseToken: f.Required("lease_token"),
	}
	return p, f.Err
}

// streamAttempt reads the required attempt_id, a positive integer.
func streamAttempt(f *request.Fields) int {
	n := f.Int("attempt_id")
	if f.Err != nil {
		return 0
	}
	if n == nil || *n < 1 {
		f.Err = request.Errorf(http.StatusBadRequest, "%s.attempt_id is required: a positive integer (the attempt_id of the claim)", f.Where)
		return 0
	}
	return *n
}

// streamTime is a time as RFC 3339 UTC with milliseconds, or null for none.
func streamTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// streamRefusals answers the dialect's refusals as {"ok": false, "ack": B, "error": code,
// "message": text}.
func (s *Server) streamRefusals(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		res, err := h(w, r)
		if err != nil {
			return nil, s.streamRefusal(err)
		}
		return res, nil
	}
}

// streamRefusal maps err to its status code and body.
//
// ack follows the stream-worker dialect: ACK a message only once the DB no longer needs it, i.e.
// the attempt's final state is committed or the task was safely requeued or dead-lettered. Every
// refusal about an attempt that is not (or no longer) the live one answers ack=true:
// attempt_mismatch and lease_mismatch (a newer attempt was claimed — through its own wake-up
// message, which governs it — or the call does not hold the live lease, whose holder reports under
// its own message), task_expired (the dispatcher timed the attempt out and already requeued or
// dead-lettered the task in that same transaction), task_already_terminal and outcome_conflict
// (the attempt's or the task's final state is committed), task_not_found (no row will ever need
// the message: ids are never reused). Keeping such a message un-ACKed would only get it
// redelivered to claim nothing. The transport never decides correctness: the lease does, so an ACK
// can cost at most latency. Refusals that decided nothing — a malformed request, an internal
// error, a request the worker hung up on — answer ack=false: the worker must fix or retry the
// call, and keeps its message.
func (s *Server) streamRefusal(err error) error {
	refuse := func(status int, code, msg string, extra ...any) error {
		body := map[string]any{"ok": false, "ack": true, "error": code, "message": msg}
		for i := 0; i+1 < len(extra); i += 2 {
			body[extra[i].(string)] = extra[i+1]
		}
		return &streamShapedError{he: &request.Error{Status: status, Body: body}, cause: err}
	}
	var (
		mismatch *dispatch.AttemptMismatchError
		terminal *dispatch.TerminalError
	)
	switch {
	case errors.As(err, &mismatch):
		return refuse(http.StatusConflict, "attempt_mismatch",
			fmt.Sprintf("attempt_id %d is not the job's current attempt %d", mismatch.Received, mismatch.Expected),
			"current_attempt_id", mismatch.Expected, "received_attempt_id", mismatch.Received)
	case errors.Is(err, dispatch.ErrLeaseMismatch):
		return refuse(http.StatusConflict, "lease_mismatch", "lease_token is not the current attempt's lease: this worker no longer holds the job")
	case errors.As(err, &terminal):
		return refuse(http.StatusConflict, "task_already_terminal", fmt.Sprintf("job already %s", terminal.State), "status", string(terminal.State))
	case errors.Is(err, dispatch.ErrOutcomeConflict):
		return refuse(http.StatusConflict, "outcome_conflict", "this attempt already reported a different outcome")
	case errors.Is(err, dispatch.ErrTaskExpired):
		return refuse(http.StatusGone, "task_expired", "the attempt expired (lease or deadline passed, or it was given up on); abort it")
	case errors.Is(err, dispatch.ErrTaskNotFound):
		return refuse(http.StatusNotFound, "task_not_found", "no job with this job_id")
	}
	he := s.toHTTP(err)
	msg, _ := he.Body["error"].(string)
	return &streamShapedError{he: &request.Error{Status: he.Status, Header: he.Header,
		Body: map[string]any{"ok": false, "ack": false, "error": codec.StreamStatusName(he.Status), "message": msg}}, cause: err}
}

// streamShapedError is a dialect-shaped error answer that keeps the error it answers for the log.
type streamShapedError struct {
	he    *request.Error
	cause error
}

func (e *streamShapedError) Error() string { return e.he.Error() + ": " + e.cause.Error() }
func (e *streamShapedError) Unwrap() error { return e.he }
