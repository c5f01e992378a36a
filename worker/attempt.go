package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/secrets"
	"github.com/baton-dev/baton/internal/transport"
)

// maxErrorText caps the message and the stack of a reported failure, so that a huge error text
// cannot make the report itself too large for the server.
const maxErrorText = 64 << 10

// host is what runs attempts, whatever dialect they speak: a Worker while it runs, a PushHandler
// until it is shut down. The attempts of both run, heartbeat, settle and publish the same way
// (this file, publish.go); only their dialect differs (dialect.go).
type host struct {
	workerID       string
	tracerProvider trace.TracerProvider // nil: OpenTelemetry's global one
	blobURL        string               // WithBlob, WithPushBlob

	runCtx    context.Context // values for handlers; never cancelled
	reportCtx context.Context // ends when outcomes not reported yet are given up on
	force     chan struct{}   // closed when the shutdown timeout passed
	// unreported counts attempts whose outcome could not be delivered before reportCtx ended.
	unreported atomic.Int64

	blobMu sync.Mutex // guards blob, opened on the first PublishBatch
	blob   *blob.Store
}

// attempt is one claimed (or pushed) attempt that a host runs.
type attempt struct {
	h       *host
	d       dialect
	api     *client // where the attempt's own calls go
	routes  *routes // their paths in its dialect
	handler Handler // nil: none for the task's name

	task      *Task
	taskID    string // the stream-worker dialect's job_id
	lease     string
	stream    string
	messageID string
	every     time.Duration // heartbeat interval
	leaseTTL  time.Duration // how long a heartbeat extends the lease; 0: not known
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

	// handlerReturned, when set, is called once the handler has returned (or was given up on at
	// shutdown), before its outcome is reported: a Worker frees the attempt's slot there.
	handlerReturned func()
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
func (a *attempt) run() {
	defer a.stopDeadline()
	defer a.cancel(context.Canceled) // the attempt is over; a cause set before stays

	hbCtx, stopHeartbeats := context.WithCancel(a.h.reportCtx)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); a.heartbeat(hbCtx) }()
	defer func() { stopHeartbeats(); <-hbDone }()

	res := make(chan result, 1)
	go a.call(res)
	var r result
	select {
	case r = <-res:
	case <-a.h.force:
		select {
		case r = <-res:
		default:
			a.cancel(ErrShutdown)
			r = result{forced: true, cause: ErrShutdown, cancelRequested: a.cancelRequested.Load()}
		}
	}
	if a.handlerReturned != nil {
		a.handlerReturned()
	}
	a.settle(r)
}

// call runs the handler and sends how it returned, panics included, on res.
func (a *attempt) call(res chan<- result) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			res <- a.returned(result{err: &Error{Category: UserCode, Message: fmt.Sprintf("panic: %v", p)}, stack: string(debug.Stack())})
		} else if !returned {
			res <- a.returned(result{err: &Error{Category: UserCode, Message: "the handler exited without returning (runtime.Goexit)"}})
		}
	}()
	if a.handler == nil {
		no := false
		returned = true
		res <- a.returned(result{err: &Error{Category: Configuration, Retryable: &no,
			Message: fmt.Sprintf("no handler for task name %q on worker %s", a.task.Name, a.h.workerID)}})
		return
	}
	ctx, span := a.h.startSpan(a)
	defer span.End()
	out, err := a.handler(ctx, a.task)
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
func (a *attempt) settle(r result) {
	switch {
	case r.cancelRequested:
		a.deliver(outcome{status: canceled})
	case r.forced:
		yes := true
		a.fail(failure{Code: string(Infrastructure), Message: ErrShutdown.Error(), Retryable: &yes})
	case r.err == nil:
		out, err := encodeOutput(r.out)
		if err == nil {
			out = redactOutput(a.task.redactor(), out)
		}
		if err != nil {
			no := false
			a.fail(failure{Code: string(UserCode), Message: "encode the handler's output: " + err.Error(), Retryable: &no})
			return
		}
		if d, err := a.deliver(outcome{status: completed, output: out}); d == refused {
			// The result itself is unacceptable (too large, say): fail the attempt instead of
			// leaving it to time out.
			a.fail(failure{Code: string(UserCode), Message: "the server refused the task's output: " + err.Error()})
		}
	case a.lost.Load():
		a.log.InfoContext(a.h.runCtx, "attempt lost: its outcome is not reported", "err", r.err)
	case errors.Is(r.cause, ErrTimeout):
		a.log.InfoContext(a.h.runCtx, "task timeout passed: the server times the attempt out", "err", r.err)
	default:
		a.fail(failureOf(r))
	}
}

// fail reports f, redacted of the task's secrets and truncated.
func (a *attempt) fail(f failure) {
	if r := a.task.redactor(); r != nil {
		f.Message, f.Stack = r.Redact(f.Message), r.Redact(f.Stack)
	}
	f.Message, f.Stack = truncate(f.Message), truncate(f.Stack)
	a.deliver(outcome{status: failed, failure: f})
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

// deliver sends an outcome until the server decides on it, retrying network errors, timeouts,
// 5xx, 408 and 429 answers with backoff (longer when the answer's Retry-After asks for it), for as
// long as the host lasts: a server or database that is unreachable for a while delays an outcome
// but never loses it. It stops when the server accepts the report, answers that the attempt is no
// longer this worker's (409, 410, 404: the lease is lost), or refuses the report for good
// (another 4xx). A report is idempotent on the server, so repeating one whose answer was lost is
// safe.
func (a *attempt) deliver(o outcome) (delivery, error) {
	var b backoff
	for {
		ans, err := a.d.report(a.h.reportCtx, a, o)
		switch {
		case err == nil:
			a.log.InfoContext(a.h.runCtx, "task "+string(o.status), "answer", ans)
			return delivered, nil
		case gone(err):
			a.log.InfoContext(a.h.runCtx, "attempt no longer ours: outcome not committed", "outcome", o.status, "err", err)
			return notOurs, err
		case !transient(err):
			a.log.ErrorContext(a.h.runCtx, "server refused report", "outcome", o.status, "err", err)
			return refused, err
		}
		a.log.WarnContext(a.h.runCtx, "report failed, retrying", "outcome", o.status, "err", err)
		if !sleep(a.h.reportCtx, b.after(err)) {
			a.h.unreported.Add(1)
			a.abandoned.Store(true)
			a.log.ErrorContext(a.h.runCtx, "outcome not reported: the worker stopped", "outcome", o.status, "err", err)
			return abandoned, err
		}
	}
}

// heartbeat keeps a's lease alive until ctx ends, and turns the server's answers into
// cancellations of the handler's context.
func (a *attempt) heartbeat(ctx context.Context) {
	timer := time.NewTimer(a.every)
	defer timer.Stop()
	deadline := a.handlerCtx.Done()
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
		ans, err := a.d.beat(ctx, a)
		switch {
		case err == nil:
			b.reset()
			if ans.CapabilityToken != "" {
				a.task.setToken(ans.CapabilityToken, ans.CapabilityTokenExpiresAt)
			}
			if ans.ShouldCancel && !a.cancelRequested.Swap(true) {
				a.log.InfoContext(a.h.runCtx, "cancellation requested", "reason", ans.CancelReason)
				a.cancel(ErrCancelRequested)
			}
			timer.Reset(a.every)
		case ctx.Err() != nil:
			return
		case gone(err), !transient(err):
			a.lost.Store(true)
			a.cancel(ErrLeaseLost)
			a.log.InfoContext(a.h.runCtx, "lease lost: stopping the handler", "err", err)
			return
		default:
			a.log.WarnContext(a.h.runCtx, "heartbeat failed, retrying", "err", err)
			// Never later than the next beat would be: the lease must not run out meanwhile.
			timer.Reset(min(a.every, b.after(err)))
		}
	}
}

// beatTimeout bounds one heartbeat request: at least the interval and a second, and half the
// lease, so that the answer of a server slower than the interval still lands while the lease
// lasts. A heartbeat given up on is lost: the server stops working on a request whose client has
// gone.
func (a *attempt) beatTimeout() time.Duration {
	return min(requestTimeout, max(a.every, time.Second, a.leaseTTL/2))
}
