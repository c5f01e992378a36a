package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// Claim is a task leased to a worker: everything it needs to run the attempt and report on it.
type Claim struct {
	Task              *store.Task // Attempt, LeaseToken and LeaseExpiresAt are the new lease's
	Job               JobRef      // the task's job
	Route             *wire.Route // a pipeline task's data plane; nil for other tasks
	DependencyOutputs map[string]json.RawMessage
	HeartbeatInterval time.Duration
}

// ClaimTaskParams claims one task by id, as a worker does after a wake-up.
type ClaimTaskParams struct {
	TaskID   string
	WorkerID string
}

// ClaimTask is the claim (docs/lifecycle.md#claim): the task must be pending and available; it
// becomes running under a new attempt and lease token. Otherwise a *NotClaimedError says why and
// the worker must not run it.
func (d *Dispatcher) ClaimTask(ctx context.Context, p ClaimTaskParams) (*Claim, error) {
	var claims []*Claim
	err := d.update(ctx, store.LockSet{Tasks: []string{p.TaskID}}, func(tx store.Tx, c *changes) error {
		var err error
		if claims, err = d.claim(ctx, tx, c, []string{p.TaskID}, p.WorkerID, "pull"); err != nil || len(claims) == 1 {
			return err
		}
		t, err := tx.TaskGet(ctx, p.TaskID)
		if errors.Is(err, store.ErrNotFound) {
			return &NotClaimedError{Reason: NotClaimedNotFound}
		}
		if err != nil {
			return fmt.Errorf("task %s: read why it was not claimed: %w", p.TaskID, err)
		}
		if t.Runtime == "push" && t.Status == lifecycle.Pending {
			// The server dispatches push tasks itself; no worker may claim one.
			return &NotClaimedError{Reason: NotClaimedNotReady}
		}
		return &NotClaimedError{Reason: notClaimedReason(t.Status)}
	})
	d.countClaims(claims, err)
	if err != nil || len(claims) != 1 {
		return nil, err
	}
	return claims[0], nil
}

// ClaimNextParams claims the next ready tasks of some queues.
type ClaimNextParams struct {
	Queues   []string // in priority order: a task of an earlier queue is claimed first
	WorkerID string
	Limit    int // at most this many tasks; default 1
}

// ClaimNext claims up to Limit ready tasks from the queues in order, within a queue highest
// priority first, then oldest. It returns no claims, and no error, when nothing is ready.
func (d *Dispatcher) ClaimNext(ctx context.Context, p ClaimNextParams) (got []*Claim, err error) {
	defer func() { d.countClaims(got, err) }()
	limit := cmpOr(p.Limit, 1)
	if d.commit != nil {
		if msg := lifecycle.CheckName(p.WorkerID); msg != "" {
			return nil, &InvalidError{Message: "worker id " + msg}
		}
		// Claimed together with the other claims of its group commit (claimMany).
		p.Limit = limit
		return d.commit.doClaim(ctx, p)
	}
	var claims []*Claim
	// Claims lock nothing in advance: they skip the rows other transactions hold.
	err = d.update(ctx, store.LockSet{}, func(tx store.Tx, c *changes) error {
		claims = nil
		for _, q := range p.Queues {
			if len(claims) == limit {
				break
			}
			ids, err := tx.TaskListReadyIDs(ctx, store.TaskListReadyIDsParams{Queue: q, Now: c.now, Limit: limit - len(claims)})
			if err != nil {
				return fmt.Errorf("worker %s: claim next: %w", p.WorkerID, err)
			}
			got, err := d.claim(ctx, tx, c, ids, p.WorkerID, "pull")
			if err != nil {
				return err
			}
			claims = append(claims, got...)
		}
		return nil
	})
	return claims, err
}

// ClaimPushParams is the input of ClaimPush and ClaimPushWait.
type ClaimPushParams struct {
	WorkerID string
	Limit    int // at most this many claims; 0 is 1
	// Targets are the task names the deliverer has a push target for: a pipeline task whose name
	// is not among them is not claimed but waits, pending, for a deliverer that has one
	// (store.TaskListReadyPushIDsParams).
	Targets []string
}

// ClaimPush claims up to p.Limit ready push tasks, of any queue, for the server's push
// dispatcher, which then delivers each to its target. It returns no claims, and no error, when
// none is ready.
func (d *Dispatcher) ClaimPush(ctx context.Context, p ClaimPushParams) ([]*Claim, error) {
	var claims []*Claim
	err := d.update(ctx, store.LockSet{}, func(tx store.Tx, c *changes) error {
		ids, err := tx.TaskListReadyPushIDs(ctx, store.TaskListReadyPushIDsParams{Now: c.now, Limit: cmpOr(p.Limit, 1), Targets: p.Targets})
		if err != nil {
			return fmt.Errorf("worker %s: claim push tasks: %w", p.WorkerID, err)
		}
		claims, err = d.claim(ctx, tx, c, ids, p.WorkerID, "push")
		return err
	})
	d.countClaims(claims, err)
	return claims, err
}

// claim takes a lease on each of ids that is claimable and of the runtime, and returns those it
// got.
func (d *Dispatcher) claim(ctx context.Context, tx store.Tx, c *changes, ids []string, workerID, runtime string) ([]*Claim, error) {
	if msg := lifecycle.CheckName(workerID); msg != "" {
		return nil, &InvalidError{Message: "worker id " + msg}
	}
	workers := make([]string, len(ids))
	for i := range workers {
		workers[i] = workerID
	}
	return d.claimFor(ctx, tx, c, ids, workers, runtime)
}

// claimFor is claim with a worker per task: ids[i] is claimed for workers[i]. The claims are
// returned in the order of ids.
func (d *Dispatcher) claimFor(ctx context.Context, tx store.Tx, c *changes, ids, workers []string, runtime string) ([]*Claim, error) {
	now := c.now
	if len(ids) == 0 {
		return nil, nil
	}
	ps := make([]store.ClaimTaskParams, len(ids))
	order := make(map[string]int, len(ids))
	for i, id := range ids {
		ps[i] = store.ClaimTaskParams{ID: id, Now: now, WorkerID: workers[i], LeaseToken: uuid.NewString(), Runtime: runtime}
		order[id] = i
	}
	tasks, err := tx.TaskClaimMany(ctx, ps)
	if err != nil {
		return nil, fmt.Errorf("%d %s tasks: %w", len(ids), runtime, err)
	}
	slices.SortFunc(tasks, func(a, b *store.Task) int { return order[a.ID] - order[b.ID] })
	if len(tasks) == 0 {
		return nil, nil
	}
	// The attempts are stored when they end (see attemptOf): until then the task row holds them.
	var withParents []string
	for _, t := range tasks {
		if len(t.DependsOn) > 0 {
			withParents = append(withParents, t.ID)
		}
	}
	parentOutputs, err := tx.TaskParentOutputsMany(ctx, withParents)
	if err != nil {
		return nil, fmt.Errorf("%d claimed tasks: %w", len(withParents), err)
	}
	claims := make([]*Claim, 0, len(tasks))
	for _, t := range tasks {
		outputs := parentOutputs[t.ID]
		if outputs == nil {
			outputs = map[string]json.RawMessage{}
		}
		job, err := d.JobRef(ctx, t.JobID)
		if err != nil {
			return nil, fmt.Errorf("claimed task %s: job %s: %w", t.ID, t.JobID, err)
		}
		c.event(t.JobID, t.ID, t.Key, EventTaskStarted, map[string]any{"attempt": t.Attempt, "workerId": t.WorkerID})
		claims = append(claims, &Claim{Task: t, Job: job, Route: DecodeRoute(t), DependencyOutputs: outputs,
			HeartbeatInterval: d.heartbeatInterval(t)})
	}
	return claims, nil
}

// checkFence is the fence (docs/lifecycle.md#fencing): a call about an attempt must name the
// task's current attempt (0: the attempt the token belongs to) and carry that attempt's lease
// token.
func checkFence(t *store.Task, attempt int, token string) error {
	return CheckFence(t, Fence{Attempt: attempt, LeaseToken: token})
}

// CheckFence reports whether f names t's current attempt and carries its lease token, as the
// fenced calls require (docs/lifecycle.md#fencing). On a task read outside a transaction it is a
// preview: the call's own transaction checks again.
func CheckFence(t *store.Task, f Fence) error {
	attempt, token := f.Attempt, f.LeaseToken
	if attempt != 0 && attempt != t.Attempt {
		return &AttemptMismatchError{Expected: t.Attempt, Received: attempt}
	}
	if token == "" || token != t.LeaseToken {
		return ErrLeaseMismatch
	}
	return nil
}

// HeartbeatParams identifies the attempt that is still alive.
type HeartbeatParams struct {
	TaskID      string
	Attempt     int // 0: whichever attempt LeaseToken belongs to
	LeaseToken  string
	Traceparent string // the worker's W3C trace context, put on the audit events; optional
}

// HeartbeatResult is a heartbeat's answer (docs/lifecycle.md#heartbeats-and-expiry).
type HeartbeatResult struct {
	Task           *store.Task
	LeaseExpiresAt time.Time
	ShouldCancel   bool
	CancelReason   string
}

// Heartbeat extends the lease of a running attempt and says whether to cancel. For
// an attempt that has timed out it answers ErrTaskExpired; if the lease ran out but the reaper has
// not acted yet, the heartbeat applies the timeout itself, so the answer never depends on when the
// reaper last ran.
func (d *Dispatcher) Heartbeat(ctx context.Context, p HeartbeatParams) (*HeartbeatResult, error) {
	var res *HeartbeatResult
	var expired bool
	// Only the task: a heartbeat that finds the lease run out times the attempt out, which may
	// lock the job too, out of order; that is rare, and a deadlock it caused would be retried.
	err := d.update(ctx, store.LockSet{Tasks: []string{p.TaskID}}, func(tx store.Tx, c *changes) error {
		res, expired = nil, false
		c.traceparent = p.Traceparent
		t, err := d.lockTask(ctx, tx, p.TaskID)
		if err != nil {
			return fmt.Errorf("task %s: heartbeat: %w", p.TaskID, err)
		}
		if err := checkFence(t, p.Attempt, p.LeaseToken); err != nil {
			return err
		}
		now := c.now
		if t.Status != lifecycle.Running {
			return d.endedAttemptError(ctx, tx, t)
		}
		if !t.ReapAt.After(now) {
			expired = true
			return d.reapTask(ctx, tx, c, t)
		}
		fence := store.Fence{Status: t.Status, Attempt: t.Attempt}
		t.HeartbeatAt = now
		t.LeaseExpiresAt = now.Add(t.HeartbeatTimeout)
		t.ReapAt = reapAt(t)
		if t.LastEventType != EventTaskHeartbeat || now.Sub(t.LastEventAt) >= heartbeatEventInterval {
			t.LastEventType, t.LastEventAt = EventTaskHeartbeat, now
			c.event(t.JobID, t.ID, t.Key, EventTaskHeartbeat, map[string]any{"attempt": t.Attempt, "workerId": t.WorkerID})
		}
		if err := tx.TaskUpdate(ctx, t, fence); err != nil {
			return fmt.Errorf("task %s attempt %d: extend the lease: %w", t.ID, t.Attempt, err)
		}
		res = &HeartbeatResult{Task: t, LeaseExpiresAt: t.LeaseExpiresAt, ShouldCancel: !t.CancelRequestedAt.IsZero(), CancelReason: t.CancelReason}
		return nil
	})
	if err == nil && expired {
		res, err = nil, ErrTaskExpired
	}
	d.count(metrics.Heartbeat, err)
	return res, err
}

// reapAt is when the reaper must look at a running task: the earliest of its lease expiry,
// execution deadline and cancel grace end.
func reapAt(t *store.Task) time.Time {
	at := t.LeaseExpiresAt
	if !t.DeadlineAt.IsZero() && t.DeadlineAt.Before(at) {
		at = t.DeadlineAt
	}
	if !t.CancelRequestedAt.IsZero() {
		if end := t.CancelRequestedAt.Add(t.CancelGrace); end.Before(at) {
			at = end
		}
	}
	return at
}

// attemptOf returns the record of t's current attempt. A running attempt is stored only when it
// ends, or when something is recorded on it (a trace context): until then its task row holds
// it, and attemptOf returns the record the row implies.
func attemptOf(ctx context.Context, r store.Reader, t *store.Task) (*store.Attempt, error) {
	a, err := r.AttemptGet(ctx, t.ID, t.Attempt)
	if errors.Is(err, store.ErrNotFound) && t.Status == lifecycle.Running {
		return runningAttempt(t), nil
	}
	if err != nil {
		return nil, fmt.Errorf("attempt %d of task %s: %w", t.Attempt, t.ID, err)
	}
	return a, nil
}

// runningAttempt is the record of t's running attempt that its task row implies.
func runningAttempt(t *store.Task) *store.Attempt {
	return &store.Attempt{TaskID: t.ID, Attempt: t.Attempt, WorkerID: t.WorkerID, LeaseToken: t.LeaseToken, StartedAt: t.StartedAt}
}

// endedAttemptError answers a call about the current attempt of a task that no longer runs it:
// the attempt reported its own outcome (the task is terminal, or the outcome conflicts), or the
// dispatcher ended it (timeout, cancel timeout), which the worker hears as ErrTaskExpired.
func (d *Dispatcher) endedAttemptError(ctx context.Context, tx store.Reader, t *store.Task) error {
	a, err := tx.AttemptGet(ctx, t.ID, t.Attempt)
	if err != nil {
		return fmt.Errorf("attempt %d of task %s: %w", t.Attempt, t.ID, err)
	}
	if reported(a.Outcome) && t.Status.Terminal() {
		return &TerminalError{State: t.Status}
	}
	return ErrTaskExpired
}

// reported: the outcome came from the worker, not from the dispatcher giving up on it.
func reported(o store.Outcome) bool {
	return o == store.OutcomeSucceeded || o == store.OutcomeFailed || o == store.OutcomeCanceled
}

func (d *Dispatcher) lockTask(ctx context.Context, tx store.Tx, id string) (*store.Task, error) {
	t, err := tx.TaskGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrTaskNotFound
	}
	return t, err
}

// CompleteParams is a worker's report of how its attempt ended.
type CompleteParams struct {
	TaskID     string
	Attempt    int // 0: whichever attempt LeaseToken belongs to
	LeaseToken string
	Outcome    store.Outcome // succeeded, failed or canceled
	Output     json.RawMessage
	Error      *store.TaskError // for failed: category (default USER_CODE), message, retryable
	Metrics    json.RawMessage
	Events     []report.Event // final upstream events, stored with the completion
	// Published are the dataset versions a successful attempt wrote, registered with it.
	Published []report.Published
	// Traceparent is the worker's W3C trace context: kept on the attempt and its audit events.
	Traceparent string
}

// redact applies Config.Redact to what p reports.
func (d *Dispatcher) redact(p *CompleteParams) {
	if d.cfg.Redact == nil {
		return
	}
	// A redactor that finds nothing answers its argument: nothing is copied then.
	if len(p.Output) > 0 {
		if out := d.cfg.Redact(p.Output); len(out) == 0 || &out[0] != &p.Output[0] {
			p.Output = out
			if !json.Valid(p.Output) { // a secret across JSON's syntax: nothing of it is kept
				p.Output = json.RawMessage(`"[REDACTED]"`)
			}
		}
	}
	if p.Error != nil && p.Error.Message != "" {
		e := *p.Error
		e.Message = string(d.cfg.Redact([]byte(e.Message)))
		p.Error = &e
	}
}

// CompleteResult says what became of the task.
type CompleteResult struct {
	Task         *store.Task
	Status       lifecycle.TaskStatus // completed, pending (retry scheduled), failed, canceled
	Requeued     bool                 // a retry is scheduled
	DeadLettered bool                 // failed for good
	Duplicate    bool                 // the same report was applied before; nothing changed now
}

// Complete applies a worker's report (docs/lifecycle.md). It is fenced by attempt and lease
// token, idempotent for a repeated identical report, and accepts a late report of an attempt
// that timed out as long as no newer attempt has been claimed.
func (d *Dispatcher) Complete(ctx context.Context, p CompleteParams) (_ *CompleteResult, rerr error) {
	defer func() { d.count(reportKind(&p), rerr) }()
	d.redact(&p)
	switch p.Outcome {
	case store.OutcomeSucceeded, store.OutcomeCanceled:
	case store.OutcomeFailed:
		if p.Error != nil && p.Error.Category != "" && !p.Error.Category.Valid() {
			return nil, &InvalidError{Message: fmt.Sprintf("unknown error category %q", p.Error.Category)}
		}
	default:
		return nil, &InvalidError{Message: fmt.Sprintf("unknown outcome %q", p.Outcome)}
	}
	if d.commit != nil && p.Outcome == store.OutcomeSucceeded && len(p.Events) == 0 && len(p.Published) == 0 && p.Traceparent == "" {
		// Applied with the other plain successes of its group commit, set-based.
		if res, err, slow := d.commit.doComplete(ctx, p); !slow {
			return res, err
		}
	}
	events, err := d.checkEvents(ctx, Fence{TaskID: p.TaskID, Attempt: p.Attempt, LeaseToken: p.LeaseToken}, p.Events)
	if err != nil {
		return nil, fmt.Errorf("task %s: check events: %w", p.TaskID, err)
	}
	p.Events = events
	var res *CompleteResult
	err = d.update(ctx, store.LockSet{Tasks: []string{p.TaskID}}, func(tx store.Tx, c *changes) error {
		res = nil
		c.traceparent = p.Traceparent
		t, err := d.lockTask(ctx, tx, p.TaskID)
		if err != nil {
			return fmt.Errorf("task %s: complete: %w", p.TaskID, err)
		}
		if err := checkFence(t, p.Attempt, p.LeaseToken); err != nil {
			return err
		}
		a, err := attemptOf(ctx, tx, t)
		if err != nil {
			return err
		}
		if reported(a.Outcome) {
			if a.Outcome != p.Outcome {
				return ErrOutcomeConflict
			}
			res = &CompleteResult{Task: t, Status: a.Result, Duplicate: true,
				Requeued:     a.Result == lifecycle.Pending,
				DeadLettered: a.Outcome == store.OutcomeFailed && a.Result == lifecycle.Failed}
			return nil
		}
		// Running, or (a late reply) back in pending after this very attempt timed out.
		late := t.Status == lifecycle.Pending && a.Outcome == store.OutcomeTimedOut
		if t.Status != lifecycle.Running && !late {
			return ErrTaskExpired
		}
		now := c.now
		if len(p.Events) > 0 {
			if _, err := d.recordEvents(ctx, tx, c, t, p.Events); err != nil {
				return fmt.Errorf("task %s attempt %d: record events: %w", t.ID, t.Attempt, err)
			}
		}
		fence := store.Fence{Status: t.Status, Attempt: t.Attempt}
		a.FinishedAt, a.Outcome, a.Metrics = now, p.Outcome, p.Metrics
		if p.Traceparent != "" {
			a.Traceparent = p.Traceparent
		}
		res = &CompleteResult{Task: t}
		switch p.Outcome {
		case store.OutcomeSucceeded:
			if err := d.registerVersions(ctx, tx, c, t, p.Published); err != nil {
				return fmt.Errorf("task %s attempt %d: register versions: %w", t.ID, t.Attempt, err)
			}
			err = d.succeed(ctx, tx, c, t, fence, p.Output)
		case store.OutcomeCanceled:
			err = d.endUnsuccessfully(ctx, tx, c, t, fence, lifecycle.Canceled, nil)
		case store.OutcomeFailed:
			e := p.Error
			if e == nil {
				e = &store.TaskError{}
			}
			if e.Category == "" {
				e.Category = lifecycle.UserCode
			}
			a.Error = e
			res.Requeued, err = d.fail(ctx, tx, c, t, fence, e)
			res.DeadLettered = !res.Requeued
		}
		if err != nil {
			return err
		}
		a.Result, res.Status = t.Status, t.Status
		return tx.AttemptPutMany(ctx, []*store.Attempt{a})
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// succeed completes t and releases its children (docs/lifecycle.md#dependents).
func (d *Dispatcher) succeed(ctx context.Context, tx store.Tx, c *changes, t *store.Task, fence store.Fence, output json.RawMessage) error {
	if len(output) == 0 {
		output = json.RawMessage("null")
	}
	t.Status, t.Output, t.Error = lifecycle.Completed, output, nil
	endAttempt(t, c.now)
	t.LastEventType, t.LastEventAt = EventTaskCompleted, c.now
	if err := tx.TaskUpdate(ctx, t, fence); err != nil {
		return fmt.Errorf("task %s attempt %d: mark completed: %w", t.ID, t.Attempt, err)
	}
	c.event(t.JobID, t.ID, t.Key, EventTaskCompleted, map[string]any{"attempt": t.Attempt, "workerId": t.WorkerID})
	c.release(t.ID)
	c.finish(t.JobID, 1, "")
	c.freed(t)
	return nil
}

// fail applies the retry rule (docs/lifecycle.md#retries) to a failed attempt: back to pending
// after a backoff if the failure is retryable, attempts remain and no cancel was asked for;
// otherwise failed, dead-lettered, with its descendants skipped.
func (d *Dispatcher) fail(ctx context.Context, tx store.Tx, c *changes, t *store.Task, fence store.Fence, e *store.TaskError) (requeued bool, err error) {
	t.Error = e
	retry := t.CancelRequestedAt.IsZero() && lifecycle.ShouldRetry(e.Category, e.Retryable, t.AttemptsUsed(), t.MaxAttempts)
	if !retry {
		c.tally.DeadLetter(e.Category)
		t.DeadLetteredAt = c.now
		if err := d.endUnsuccessfully(ctx, tx, c, t, fence, lifecycle.Failed, e); err != nil {
			return false, err
		}
		return false, nil
	}
	c.tally.Retry(e.Category)
	endAttempt(t, c.now)
	t.Status = lifecycle.Pending
	t.AvailableAt = c.now.Add(lifecycle.Backoff(t.AttemptsUsed(), t.BackoffBase, t.BackoffMax, d.jitter()))
	t.LastEventType, t.LastEventAt = EventTaskRetrying, c.now
	if err := tx.TaskUpdate(ctx, t, fence); err != nil {
		return false, fmt.Errorf("task %s attempt %d: schedule a retry: %w", t.ID, t.Attempt, err)
	}
	c.event(t.JobID, t.ID, t.Key, EventTaskRetrying, map[string]any{"attempt": t.Attempt, "error": e, "retryAt": t.AvailableAt.UnixMilli()})
	c.wake(t.ID, t.Queue, t.Runtime, t.AvailableAt)
	return true, nil
}

// endUnsuccessfully ends t as failed or canceled and skips its descendants
// (docs/lifecycle.md#dependents).
func (d *Dispatcher) endUnsuccessfully(ctx context.Context, tx store.Tx, c *changes, t *store.Task, fence store.Fence, status lifecycle.TaskStatus, e *store.TaskError) error {
	c.freed(t)
	t.Status = status
	endAttempt(t, c.now)
	typ := EventTaskCanceled
	data := map[string]any{"attempt": t.Attempt}
	if status == lifecycle.Failed {
		typ = EventTaskFailed
		data["error"], data["deadLettered"] = e, true
	} else if t.CancelReason != "" {
		data["reason"] = t.CancelReason
	}
	t.LastEventType, t.LastEventAt = typ, c.now
	if err := tx.TaskUpdate(ctx, t, fence); err != nil {
		return fmt.Errorf("task %s attempt %d: mark %s: %w", t.ID, t.Attempt, status, err)
	}
	c.event(t.JobID, t.ID, t.Key, typ, data)
	c.skip(t, status)
	failedKey := ""
	if status == lifecycle.Failed {
		failedKey = t.Key
	}
	c.finish(t.JobID, 1, failedKey)
	return nil
}

// endAttempt clears the lease bookkeeping of a task whose attempt is over. The lease token stays:
// it identifies the attempt for idempotent repeats and late replies.
func endAttempt(t *store.Task, now time.Time) {
	t.LeaseExpiresAt, t.DeadlineAt, t.ReapAt = time.Time{}, time.Time{}, time.Time{}
	if t.Status.Terminal() {
		t.FinishedAt = now
	}
}

// CancelTask cancels one task (docs/lifecycle.md#cancellation): a waiting or pending task is
// canceled at once and its descendants skipped; a running one is asked to stop. Canceling a task
// twice changes nothing.
func (d *Dispatcher) CancelTask(ctx context.Context, taskID, reason string) (_ *store.Task, rerr error) {
	defer func() { d.count(metrics.Cancel, rerr) }()
	if reason == "" {
		reason = "user_requested"
	}
	var t *store.Task
	err := d.update(ctx, store.LockSet{Tasks: []string{taskID}}, func(tx store.Tx, c *changes) error {
		var err error
		if t, err = d.lockTask(ctx, tx, taskID); err != nil {
			return fmt.Errorf("task %s: cancel: %w", taskID, err)
		}
		now := c.now
		scope := store.CancelParams{JobID: t.JobID, TaskID: t.ID, Now: now, Reason: reason}
		switch {
		case t.Status == lifecycle.Canceled:
			return nil
		case t.Status.Terminal():
			return &TerminalError{State: t.Status}
		case t.Status == lifecycle.Running:
			if _, err := tx.TaskRequestCancel(ctx, scope); err != nil {
				return fmt.Errorf("task %s: %w", t.ID, err)
			}
		default:
			if _, err := tx.TaskCancelIdle(ctx, scope); err != nil {
				return fmt.Errorf("task %s: %w", t.ID, err)
			}
			c.event(t.JobID, t.ID, t.Key, EventTaskCanceled, map[string]any{"reason": reason})
			c.skip(t, lifecycle.Canceled)
			c.finish(t.JobID, 1, "")
		}
		if t, err = tx.TaskGet(ctx, t.ID); err != nil {
			return fmt.Errorf("task %s: read it back after the cancel: %w", taskID, err)
		}
		return nil
	})
	return t, err
}

// TaskDetail is one task in full, for the producer's task view and the workers' task-fetch.
type TaskDetail struct {
	Task              *store.Task
	DependencyOutputs map[string]json.RawMessage
	Attempts          []*store.Attempt
}

// GetTask returns a task with its parents' outputs and every attempt. A non-empty tenant hides
// other tenants' tasks.
func (d *Dispatcher) GetTask(ctx context.Context, tenant, taskID string) (*TaskDetail, error) {
	t, err := d.store.TaskGet(ctx, taskID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrTaskNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", taskID, err)
	}
	if tenant != "" {
		job, err := d.store.JobGet(ctx, t.JobID)
		if err != nil {
			return nil, fmt.Errorf("task %s: job %s: %w", t.ID, t.JobID, err)
		}
		if job.Tenant != tenant {
			return nil, ErrTaskNotFound
		}
	}
	outputs, err := d.store.TaskParentOutputs(ctx, t.ID)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	attempts, err := d.store.AttemptList(ctx, t.ID)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	if t.Status == lifecycle.Running && (len(attempts) == 0 || attempts[len(attempts)-1].Attempt < t.Attempt) {
		attempts = append(attempts, runningAttempt(t))
	}
	return &TaskDetail{Task: t, DependencyOutputs: outputs, Attempts: attempts}, nil
}
