package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/baton-dev/baton/internal/secrets"
	"github.com/baton-dev/baton/internal/transport"
)

// maxErrorText caps the message and the stack of a reported failure, so that a huge error text
// cannot make the report itself too large for the server.
const maxErrorText = 64 << 10

// attempt is one claimed attempt this worker runs.
type attempt struct {
	task      *Task
	taskID    string // the stream-worker dialect's job_id
	lease     string
	stream    string
	messageID string
	every     time.Duration // heartbeat interval
	log       *slog.Logger

	// ctx is cancelled (with a cause) by cancellation, a lost lease or shutdown; handlerCtx is
	// ctx with the task's execution deadline, if it has one.
	ctx          context.Context
	cancel       context.CancelCauseFunc
	handlerCtx   context.Context
	stopDeadline context.CancelFunc

	cancelRequested atomic.Bool // a heartbeat answered should_cancel
	lost            atomic.Bool // a heartbeat answered that the attempt is no longer ours
	abandoned       atomic.Bool // the outcome could not be reported before Run gave up

	wake transport.Delivery // the wake-up that led to the claim, if any: acknowledged once settled
}

// result is how a handler returned.
type result struct {
	out    any
	err    error
	stack  string // of a panic
	forced bool   // the shutdown timeout passed before the handler returned
	// As things stood when the handler returned:
	cause           error // context.Cause of the handler's context
	cancelRequested bool
}

// run runs a's handler under heartbeats and reports its outcome.
func (w *Worker) run(a *attempt) {
	defer w.ackWake(a) // last: after the heartbeats stopped and the outcome was reported
	defer a.stopDeadline()
	defer a.cancel(context.Canceled) // the attempt is over; a cause set before stays

	hbCtx, stopHeartbeats := context.WithCancel(w.reportCtx)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeat(hbCtx, a) }()
	defer func() { stopHeartbeats(); <-hbDone }()

	res := make(chan result, 1)
	go w.call(a, res)
	var r result
	select {
	case r = <-res:
	case <-w.force:
		select {
		case r = <-res:
		default:
			a.cancel(ErrShutdown)
			r = result{forced: true, cause: ErrShutdown, cancelRequested: a.cancelRequested.Load()}
		}
	}
	w.settle(a, r)
}

// call runs the handler and sends how it returned, panics included, on res.
func (w *Worker) call(a *attempt, res chan<- result) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			res <- a.returned(result{err: &Error{Category: UserCode, Message: fmt.Sprintf("panic: %v", p)}, stack: string(debug.Stack())})
		} else if !returned {
			res <- a.returned(result{err: &Error{Category: UserCode, Message: "the handler exited without returning (runtime.Goexit)"}})
		}
	}()
	h := w.handler(a.task.Name)
	if h == nil {
		no := false
		returned = true
		res <- a.returned(result{err: &Error{Category: Configuration, Retryable: &no,
			Message: fmt.Sprintf("no handler for task name %q on worker %s", a.task.Name, w.cfg.workerID)}})
		return
	}
	ctx, span := w.startSpan(a)
	defer span.End()
	out, err := h(ctx, a.task)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	returned = true
	res <- a.returned(result{out: out, err: err})
}

func (a *attempt) returned(r result) result {
	r.cause = context.Cause(a.handlerCtx)
	r.cancelRequested = a.cancelRequested.Load()
	return r
}

// settle reports r, the outcome of a.
func (w *Worker) settle(a *attempt, r result) {
	switch {
	case r.cancelRequested:
		// The stream-worker dialect has no cancelled outcome; the internal dialect's task-complete
		// has.
		w.report(a, "canceled", pathTaskComplete, map[string]any{
			"task_id": a.taskID, "attempt": a.task.Attempt, "lease_token": a.lease, "status": "Canceled"})
	case r.forced:
		yes := true
		w.reportFailure(a, failure{Code: string(Infrastructure), Message: ErrShutdown.Error(), Retryable: &yes})
	case r.err == nil:
		out, err := encodeOutput(r.out)
		if err == nil {
			out = redactOutput(a.task.redactor(), out)
		}
		if err != nil {
			no := false
			w.reportFailure(a, failure{Code: string(UserCode), Message: "encode the handler's output: " + err.Error(), Retryable: &no})
			return
		}
		body := w.body(a)
		body["result"] = out
		if d, err := w.report(a, "completed", pathComplete, body); d == refused {
			// The result itself is unacceptable (too large, say): fail the attempt instead of
			// leaving it to time out.
			w.reportFailure(a, failure{Code: string(UserCode), Message: "the server refused the task's output: " + err.Error()})
		}
	case a.lost.Load():
		a.log.InfoContext(w.runCtx, "attempt lost: its outcome is not reported", "err", r.err)
	case errors.Is(r.cause, ErrTimeout):
		a.log.InfoContext(w.runCtx, "task timeout passed: the server times the attempt out", "err", r.err)
	default:
		w.reportFailure(a, failureOf(r))
	}
}

func (w *Worker) reportFailure(a *attempt, f failure) {
	if r := a.task.redactor(); r != nil {
		f.Message, f.Stack = r.Redact(f.Message), r.Redact(f.Stack)
	}
	f.Message, f.Stack = truncate(f.Message), truncate(f.Stack)
	body := w.body(a)
	body["error"] = f
	w.report(a, "failed", pathFail, body)
}

// body is the fence of a stream-worker report.
func (w *Worker) body(a *attempt) map[string]any {
	b := map[string]any{"worker_id": w.cfg.workerID, "job_id": a.taskID, "attempt_id": a.task.Attempt, "lease_token": a.lease, "stream": a.stream}
	if a.messageID != "" {
		b["message_id"] = a.messageID
	}
	return b
}

// failureOf classifies a handler's error.
func failureOf(r result) failure {
	f := failure{Code: string(UserCode), Message: r.err.Error(), Stack: r.stack}
	var e *Error
	if errors.As(r.err, &e) {
		f.Code, f.Retryable = string(e.category()), e.Retryable
	} else {
		yes := true
		f.Retryable = &yes
	}
	return f
}

// redactOutput is out with the task's secrets redacted (r nil: none); JSON that a secret's
// removal breaks becomes the JSON string "[REDACTED]".
func redactOutput(r *secrets.Redactor, out json.RawMessage) json.RawMessage {
	if r == nil {
		return out
	}
	red := json.RawMessage(r.RedactBytes(out))
	if !json.Valid(red) {
		return json.RawMessage(`"[REDACTED]"`)
	}
	return red
}

// encodeOutput is the JSON of a handler's output.
func encodeOutput(v any) (json.RawMessage, error) {
	switch o := v.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		if len(o) == 0 {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(o) {
			return nil, errors.New("the json.RawMessage output is not valid JSON")
		}
		return o, nil
	}
	return json.Marshal(v)
}

func truncate(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	return s[:maxErrorText] + "…(truncated)"
}

// delivery is what became of a report.
type delivery int

const (
	delivered delivery = iota
	notOurs            // 409/410/404: the attempt is no longer this worker's; nothing to commit
	refused            // another 4xx: the server will never accept this report
	abandoned          // Run gave up at the end of shutdown
)

// report sends a report until the server decides on it, retrying network errors, timeouts, 5xx,
// 408 and 429 answers with backoff (longer when the answer's Retry-After asks for it), for as long
// as Run lasts: a server or database that is unreachable for a while delays an outcome but never
// loses it. It stops when the server accepts the report, answers that the attempt is no longer
// this worker's (409, 410, 404: the lease is lost), or refuses the report for good (another 4xx).
// A report is idempotent on the server, so repeating one whose answer was lost is safe.
func (w *Worker) report(a *attempt, what, path string, body map[string]any) (delivery, error) {
	var b backoff
	for {
		var (
			ans map[string]any
			err error
		)
		if path == pathComplete || path == pathFail {
			ans, err = w.reports.report(w.reportCtx, path, body)
		} else {
			err = w.post(w.reportCtx, requestTimeout, path, body, &ans)
		}
		switch {
		case err == nil:
			a.log.InfoContext(w.runCtx, "task "+what, "answer", ans)
			return delivered, nil
		case gone(err):
			a.log.InfoContext(w.runCtx, "attempt no longer ours: outcome not committed", "outcome", what, "err", err)
			return notOurs, err
		case !transient(err):
			a.log.ErrorContext(w.runCtx, "server refused report", "outcome", what, "err", err)
			return refused, err
		}
		a.log.WarnContext(w.runCtx, "report failed, retrying", "outcome", what, "err", err)
		if !sleep(w.reportCtx, b.after(err)) {
			w.unreported.Add(1)
			a.abandoned.Store(true)
			a.log.ErrorContext(w.runCtx, "outcome not reported: the worker stopped", "outcome", what, "err", err)
			return abandoned, err
		}
	}
}

// heartbeat keeps a's lease alive until ctx ends, and turns the server's answers into
// cancellations of the handler's context.
func (w *Worker) heartbeat(ctx context.Context, a *attempt) {
	timer := time.NewTimer(a.every)
	defer timer.Stop()
	deadline := a.handlerCtx.Done()
	body := map[string]any{"worker_id": w.cfg.workerID, "job_id": a.taskID, "lease_token": a.lease, "attempt_id": a.task.Attempt}
	var b backoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-deadline:
			deadline = nil
			if !errors.Is(context.Cause(a.handlerCtx), ErrTimeout) {
				continue
			}
			// Past the execution deadline: beat now, so that the server applies its timeout
			// (answering 410) instead of waiting for its reaper.
		}
		var ans heartbeatAnswer
		err := w.post(ctx, min(requestTimeout, max(a.every, time.Second)), pathHeartbeat, body, &ans)
		switch {
		case err == nil:
			b.reset()
			if a.wake != nil {
				if err := a.wake.InProgress(ctx); err != nil {
					a.log.WarnContext(w.runCtx, "wake-up: mark in progress", "err", err)
				}
			}
			if ans.CapabilityToken != "" {
				a.task.setToken(ans.CapabilityToken, ans.CapabilityTokenExpiresAt)
			}
			if ans.ShouldCancel && !a.cancelRequested.Swap(true) {
				a.log.InfoContext(w.runCtx, "cancellation requested", "reason", ans.CancelReason)
				a.cancel(ErrCancelRequested)
			}
			timer.Reset(a.every)
		case ctx.Err() != nil:
			return
		case gone(err), !transient(err):
			a.lost.Store(true)
			a.cancel(ErrLeaseLost)
			a.log.InfoContext(w.runCtx, "lease lost: stopping the handler", "err", err)
			return
		default:
			a.log.WarnContext(w.runCtx, "heartbeat failed, retrying", "err", err)
			// Never later than the next beat would be: the lease must not run out meanwhile.
			timer.Reset(min(a.every, b.after(err)))
		}
	}
}
