package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// ClaimWait is ClaimNext as a long poll: when nothing is ready it waits, up to maxWait, until a
// transition makes a task claimable (in this process, or in another one sharing the database when
// ListenForWakeups runs) or a backed-off task's retry time comes, and claims then.
func (d *Dispatcher) ClaimWait(ctx context.Context, p ClaimNextParams, maxWait time.Duration) ([]*Claim, error) {
	start := d.clock.Now()
	claims, err := d.claimWait(ctx, maxWait,
		func() ([]*Claim, error) { return d.ClaimNext(ctx, p) },
		func() (time.Time, bool, error) { return d.store.TaskNextAvailableAt(ctx, p.Queues) })
	d.cfg.Metrics.ClaimWait(d.clock.Since(start), len(claims) > 0)
	return claims, err
}

// ClaimPushWait is ClaimPush as a long poll, as ClaimWait is ClaimNext's.
func (d *Dispatcher) ClaimPushWait(ctx context.Context, p ClaimPushParams, maxWait time.Duration) ([]*Claim, error) {
	return d.claimWait(ctx, maxWait,
		func() ([]*Claim, error) { return d.ClaimPush(ctx, p) },
		func() (time.Time, bool, error) { return d.store.TaskNextPushAvailableAt(ctx, p.Targets) })
}

// claimWait calls claim until it claims something or maxWait passes, sleeping in between until a
// wake-up or the time nextAvailable reports.
func (d *Dispatcher) claimWait(ctx context.Context, maxWait time.Duration, claim func() ([]*Claim, error),
	nextAvailable func() (time.Time, bool, error)) ([]*Claim, error) {
	deadline := d.clock.Now().Add(maxWait)
	for {
		woken := d.ready.wait() // before looking, so a wake-up between look and wait is kept
		claims, err := claim()
		if err != nil || len(claims) > 0 {
			return claims, err
		}
		now := d.clock.Now()
		wait := deadline.Sub(now)
		if wait <= 0 {
			return nil, nil
		}
		next, ok, err := nextAvailable()
		if err != nil {
			return nil, err
		}
		if ok {
			// Stored times have millisecond precision; wait until just past the retry time.
			wait = min(wait, max(next.Sub(now)+time.Millisecond, time.Millisecond))
		}
		timer := d.clock.NewTimer(wait)
		select {
		case <-woken:
		case <-timer.Chan():
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
		timer.Stop()
	}
}

// ListenForWakeups relays wake-ups committed by other processes sharing the store to this
// dispatcher's waiting claimers, until ctx ends. It returns at once for a store that no other
// process shares.
func (d *Dispatcher) ListenForWakeups(ctx context.Context) {
	if l, ok := d.store.(store.Listener); ok {
		_ = l.Listen(ctx, d.ready.notify)
	}
}

// Fence identifies the attempt a worker call is about (docs/lifecycle.md#fencing).
type Fence struct {
	TaskID     string
	Attempt    int // 0: whichever attempt LeaseToken belongs to
	LeaseToken string
}

// lockAttempt locks a task for a call about its current attempt: the fence must match, and the
// attempt must still be running or have timed out with no newer attempt claimed
// (docs/lifecycle.md#late-replies).
func (d *Dispatcher) lockAttempt(ctx context.Context, tx store.Tx, f Fence) (*store.Task, error) {
	t, err := d.lockTask(ctx, tx, f.TaskID)
	if err != nil {
		return nil, err
	}
	if err := checkFence(t, f.Attempt, f.LeaseToken); err != nil {
		return nil, err
	}
	if t.Status == lifecycle.Running {
		return t, nil
	}
	if t.Status == lifecycle.Pending {
		a, err := tx.AttemptGet(ctx, t.ID, t.Attempt)
		if err != nil {
			return nil, fmt.Errorf("attempt %d of task %s: %w", t.Attempt, t.ID, err)
		}
		if a.Outcome == store.OutcomeTimedOut {
			return t, nil
		}
	}
	return nil, d.endedAttemptError(ctx, tx, t)
}

// StartAttempt answers a worker that is about to run an attempt (the callback dialect's /started):
// the fence must match and the attempt must be running with a live lease. A running attempt whose
// task's cancellation was requested gets ErrCancelRequested: the worker must not start. It changes
// nothing.
func (d *Dispatcher) StartAttempt(ctx context.Context, f Fence) (*store.Task, error) {
	t, err := d.store.TaskGet(ctx, f.TaskID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrTaskNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", f.TaskID, err)
	}
	if err := checkFence(t, f.Attempt, f.LeaseToken); err != nil {
		return nil, err
	}
	if t.Status != lifecycle.Running {
		return nil, d.endedAttemptError(ctx, d.store, t)
	}
	switch {
	case !t.ReapAt.After(d.now()) && t.CancelRequestedAt.IsZero():
		return nil, ErrTaskExpired // the lease ran out; the reaper or the next heartbeat times it out
	case !t.CancelRequestedAt.IsZero():
		return nil, ErrCancelRequested
	}
	return t, nil
}

// RunningAttempt returns the task of the attempt f names if that attempt is the current one and
// runs under a live lease, as StartAttempt does, except that a requested cancellation is no
// refusal here: an attempt being canceled may still read what it needs to finish cleanly. It
// changes nothing.
func (d *Dispatcher) RunningAttempt(ctx context.Context, f Fence) (*store.Task, error) {
	t, err := d.StartAttempt(ctx, f)
	if errors.Is(err, ErrCancelRequested) {
		return d.store.TaskGet(ctx, f.TaskID)
	}
	return t, err
}

// RecordTraceparent keeps a worker's W3C trace context on the attempt f names, which must be
// the current one (docs/lifecycle.md#fencing). Writing the same value again changes nothing.
func (d *Dispatcher) RecordTraceparent(ctx context.Context, f Fence, traceparent string) error {
	return d.update(ctx, store.LockSet{Tasks: []string{f.TaskID}}, func(tx store.Tx, c *changes) error {
		t, err := d.lockTask(ctx, tx, f.TaskID)
		if err != nil {
			return fmt.Errorf("task %s: record traceparent: %w", f.TaskID, err)
		}
		if err := checkFence(t, f.Attempt, f.LeaseToken); err != nil {
			return err
		}
		a, err := attemptOf(ctx, tx, t)
		if err != nil {
			return err
		}
		if a.Traceparent == traceparent {
			return nil
		}
		a.Traceparent = traceparent
		return tx.AttemptPutMany(ctx, []*store.Attempt{a})
	})
}
