package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// reapBatch is how many due tasks one pass of Reap looks up at a time.
const reapBatch = 100

// Reap is the reaper (docs/lifecycle.md#heartbeats-and-expiry): every running task whose lease
// expired or whose execution deadline passed gets Task Timeout and goes through the retry rule;
// one past its cancel grace fails with CANCEL_TIMEOUT (docs/lifecycle.md#cancellation). Each task
// is its own transaction, re-checked under its row lock, so several replicas may reap at once. It
// returns how many tasks it timed out.
func (d *Dispatcher) Reap(ctx context.Context) (int, error) {
	reaped := 0
	for {
		now := d.now()
		ids, err := d.store.TaskListDue(ctx, now, reapBatch)
		if err != nil {
			return reaped, fmt.Errorf("due tasks: %w", err)
		}
		for _, id := range ids {
			var done bool
			err := d.update(ctx, store.LockSet{Tasks: []string{id}}, func(tx store.Tx, c *changes) error {
				done = false
				t, err := tx.TaskGet(ctx, id)
				if err != nil {
					return err
				}
				// A heartbeat, completion or another replica may have got here first.
				if t.Status != lifecycle.Running || t.ReapAt.After(now) {
					return nil
				}
				done = true
				return d.reapTask(ctx, tx, c, t)
			})
			if err != nil {
				d.count(metrics.Expire, err)
				return reaped, fmt.Errorf("reap task %s: %w", id, err)
			}
			if done {
				d.count(metrics.Expire, nil)
				reaped++
			}
		}
		if len(ids) < reapBatch {
			return reaped, nil
		}
	}
}

// reapTask ends the running attempt of t, which is due at c.now.
func (d *Dispatcher) reapTask(ctx context.Context, tx store.Tx, c *changes, t *store.Task) error {
	now := c.now
	fence := store.Fence{Status: t.Status, Attempt: t.Attempt}
	a, err := attemptOf(ctx, tx, t)
	if err != nil {
		return err
	}
	a.FinishedAt = now
	if !t.CancelRequestedAt.IsZero() {
		// Asked to cancel and neither reported nor kept its lease within the grace period.
		e := &store.TaskError{Category: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelTimeout,
			Message: fmt.Sprintf("task did not stop within its cancel grace period of %s", t.CancelGrace)}
		a.Outcome, a.Error = store.OutcomeCancelTimeout, e
		t.Error = e
		c.tally.Expiry(metrics.CancelTimeout)
		if err := d.endUnsuccessfully(ctx, tx, c, t, fence, lifecycle.Failed, e); err != nil {
			return err
		}
	} else {
		e := &store.TaskError{Category: lifecycle.Timeout, Reason: lifecycle.ReasonHeartbeatTimeout,
			Message: fmt.Sprintf("no heartbeat within the heartbeat timeout of %s", t.HeartbeatTimeout)}
		if !t.DeadlineAt.IsZero() && !t.DeadlineAt.After(now) && !t.DeadlineAt.After(t.LeaseExpiresAt) {
			e.Reason = lifecycle.ReasonExecutionTimeout
			e.Message = fmt.Sprintf("task exceeded its execution timeout of %s", t.Timeout)
		}
		a.Outcome, a.Error = store.OutcomeTimedOut, e
		c.tally.Expiry(metrics.ExpiryOf(e.Reason))
		c.event(t.JobID, t.ID, t.Key, EventTaskTimeout, map[string]any{"attempt": t.Attempt, "reason": e.Reason, "workerId": t.WorkerID})
		if _, err := d.fail(ctx, tx, c, t, fence, e); err != nil {
			return err
		}
	}
	a.Result = t.Status
	return tx.AttemptPutMany(ctx, []*store.Attempt{a})
}

// maxReaperSleep bounds the reaper's sleep, so that a lease taken on another replica (which
// cannot wake this one) is still reaped within about a second of its expiry.
const maxReaperSleep = time.Second

// Reaper runs Reap whenever the earliest reap time comes, and at least every second.
type Reaper struct {
	d     *Dispatcher
	clock clockwork.Clock
	log   *slog.Logger
	service.Loop
}

// NewReaper returns a stopped reaper.
func (d *Dispatcher) NewReaper() *Reaper {
	return &Reaper{d: d, clock: d.clock, log: d.log}
}

// Start runs the reaper until Stop or until ctx ends.
func (r *Reaper) Start(ctx context.Context) error { return r.Run(ctx, r.run) }

func (r *Reaper) run(ctx context.Context) {
	for {
		if n, err := r.d.Reap(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.ErrorContext(ctx, "reap failed", "err", err)
		} else if n > 0 {
			r.log.InfoContext(ctx, "timed out tasks", "count", n)
		}
		sleep := maxReaperSleep
		if next, ok, err := r.d.store.TaskNextReapAt(ctx); err == nil && ok {
			sleep = min(max(next.Sub(r.clock.Now()), 5*time.Millisecond), maxReaperSleep)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(sleep):
		}
	}
}
