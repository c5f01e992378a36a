package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// A deadlock, a serialization failure, a connection lost mid-transaction or a backend shut down
// fails a transaction through no fault of the requests in it (store.Store.Transient). The
// dispatcher then does the work again itself, each transition in a transaction of its own (never
// as the group that failed), after a random pause up to a bound that doubles each time ("full
// jitter"), for up to Config.RetryFor. Only a database that stays unreachable that long reaches
// the caller, as ErrUnavailable; or one its store already knows does not answer
// (store.Reachability), at once, so that a request fails fast instead of waiting out RetryFor.
//
// Doing a transition again is safe because each is fenced or idempotent: a report that did commit
// before the connection broke is found the second time as a repeat; a job's id is chosen before
// its first try, so a creation that did commit is found by id. A claim that did commit is the one
// exception: its task is not handed out twice, but it stays leased to nobody until its lease
// expires and the reaper gives it back.

// ErrUnavailable: the database failed transiently, again and again, for longer than the
// dispatcher retries. The request may succeed later.
var ErrUnavailable = errors.New("the database is unavailable; try again later")

// DefaultRetryFor is how long a transition is retried after transient database failures.
const DefaultRetryFor = 10 * time.Second

const (
	firstRetryPause = 5 * time.Millisecond
	maxRetryPause   = time.Second
)

// Unavailable reports whether err is a transient failure of the database (retried already, or a
// read's): the caller should answer "try again later", not "internal error". A context that
// ended while the database was failing is not one: the caller has gone.
func (d *Dispatcher) Unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, ErrUnavailable) || d.store.Transient(err)
}

// unreachable reports whether the store knows its database does not answer (store.Reachability):
// trying again now would only fail again, so the caller is told at once.
func (d *Dispatcher) unreachable() bool {
	r, ok := d.store.(store.Reachability)
	return ok && r.Unreachable() != nil
}

// retry calls fn until it succeeds, fails for a reason other than the database, or RetryFor has
// passed since the first call, or the store knows its database does not answer.
func (d *Dispatcher) retry(ctx context.Context, fn func() error) error {
	giveUp := time.Now().Add(d.retryFor)
	pause := firstRetryPause
	for {
		err := fn()
		if err == nil || !d.store.Transient(err) {
			return err
		}
		if ctx.Err() != nil || time.Now().After(giveUp) || d.unreachable() {
			d.log.WarnContext(ctx, "transient database failure; giving up", "err", err)
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		d.log.WarnContext(ctx, "transient database failure; trying again", "err", err)
		wait := time.Duration(rand.Int64N(int64(pause)))
		pause = min(2*pause, maxRetryPause)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// runOnce runs fn in a transaction of its own that first locks locks, appends the events and
// outbox messages fn collected, and wakes waiting claimers after it committed if fn made a task
// claimable. It does not retry.
func (d *Dispatcher) runOnce(ctx context.Context, locks store.LockSet, fn func(tx store.Tx, c *changes) error) error {
	var c *changes
	ctx, end := d.traceTx(ctx, SpanTransaction, 1, nil)
	err := d.store.InTx(ctx, func(tx store.Tx) error {
		c = d.newChanges()
		if err := tx.RowsLock(ctx, locks); err != nil {
			return err
		}
		if err := fn(tx, c); err != nil {
			return err
		}
		if err := d.settle(ctx, tx, c); err != nil {
			return err
		}
		if c.ready {
			if err := tx.TaskReadyNotify(ctx); err != nil {
				return fmt.Errorf("wake claimers: %w", err)
			}
		}
		return c.write(ctx, tx)
	})
	end(err)
	if err == nil {
		d.committed(c.ready, c.signals)
		d.cfg.Metrics.Record(&c.tally)
	}
	return err
}

// TaskReady returns a channel that is closed the next time a commit makes a task claimable (and so
// writes its wake-up to the outbox). Take it before looking for work, so that a commit between
// the look and the wait is not missed.
func (d *Dispatcher) TaskReady() <-chan struct{} { return d.ready.wait() }

// committed wakes, once a transaction committed, what waits for what it did: claimers if a task
// became claimable (ready), and the waiters of each signal it signalled.
func (d *Dispatcher) committed(ready bool, signals []*Signal) {
	if ready {
		d.ready.notify()
	}
	for _, s := range signals {
		s.Notify()
	}
}
