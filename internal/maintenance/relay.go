package maintenance

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// Publisher carries outbox messages to a transport. Publish returns the messages it could not
// publish, by ID; every message of msgs not in failed counts as published. It may be called again
// with a message it already published (the relay delivers at least once), and it is called inside
// the store transaction that claimed msgs, so it should not block for long.
type Publisher interface {
	Publish(ctx context.Context, msgs []*store.OutboxMessage) (failed map[int64]error)
}

// StorePublisher is the "store" transport (--transport store), the default: workers find work
// through the store itself (claims and long-polls on the tasks table, with in-process and
// PostgreSQL LISTEN/NOTIFY wake-ups), so a wake-up needs no delivery. It publishes nothing and
// reports every message as published, which lets the relay mark the outbox rows sent and prune
// them. It is a complete transport, not a stub.
type StorePublisher struct{}

// Publish implements Publisher.
func (StorePublisher) Publish(context.Context, []*store.OutboxMessage) map[int64]error { return nil }

// RelayConfig configures a Relay. Zero fields take their defaults.
type RelayConfig struct {
	Publisher   Publisher     // default StorePublisher
	Batch       int           // messages claimed per transaction; default 100
	MaxAttempts int           // publishes tried per message before giving up; default 20
	BackoffBase time.Duration // delay after the first failure; default 1 s
	BackoffMax  time.Duration // cap of the doubling delay; default 5 min
	Retention   time.Duration // how long sent messages are kept before pruning; default 24 h
	// Wake, when set, returns a channel closed at the next commit that made a task claimable (and
	// so wrote a wake-up), which starts a pass at once rather than at the next poll.
	Wake func() <-chan struct{}
}

// DefaultRelayConfig holds the defaults.
var DefaultRelayConfig = RelayConfig{
	Publisher:   StorePublisher{},
	Batch:       100,
	MaxAttempts: 20,
	BackoffBase: time.Second,
	BackoffMax:  5 * time.Minute,
	Retention:   24 * time.Hour,
}

const (
	relayBusySleep = 200 * time.Millisecond // between passes that found work
	relayIdleSleep = time.Second            // the longest sleep between passes
	relayPruneEach = time.Minute
	relayPruneRows = 1000 // sent rows deleted per prune transaction
)

// Relay publishes the outbox: each pass claims a batch of due, unsent messages in one
// transaction, publishes them, marks the published ones sent and schedules a retry with
// exponential backoff for the others. Claims skip rows another transaction holds, so relays on
// several replicas share the outbox without publishing a message twice (barring a crash or a
// transaction retry after Publish, which makes delivery at least once).
//
// A message that fails MaxAttempts times is given up: it is marked sent, with its attempts
// recorded, and logged as an error with its ID and topic. The store stays the source of truth —
// a wake-up only saves a worker a poll — so a lost message costs latency, never correctness.
type Relay struct {
	env       Env
	cfg       RelayConfig
	clock     clockwork.Clock
	log       *slog.Logger
	mu        sync.Mutex // guards nextRetry and lastPrune
	nextRetry time.Time  // earliest retry this relay scheduled and has not yet seen due
	lastPrune time.Time
	claimed   int // by the loop's last pass (read and written by the loop only)
	*service.Periodic
}

// NewRelay returns a stopped relay over env's store.
func NewRelay(env Env, cfg RelayConfig) *Relay {
	env = env.withDefaults()
	def := DefaultRelayConfig
	cfg = RelayConfig{
		Publisher:   cmp.Or[Publisher](cfg.Publisher, def.Publisher),
		Batch:       max(cfg.Batch, 0),
		MaxAttempts: max(cfg.MaxAttempts, 0),
		BackoffBase: max(cfg.BackoffBase, 0),
		BackoffMax:  max(cfg.BackoffMax, 0),
		Retention:   max(cfg.Retention, 0),
		Wake:        cfg.Wake,
	}
	cfg.Batch = cmp.Or(cfg.Batch, def.Batch)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, def.MaxAttempts)
	cfg.BackoffBase = cmp.Or(cfg.BackoffBase, def.BackoffBase)
	cfg.BackoffMax = max(cmp.Or(cfg.BackoffMax, def.BackoffMax), cfg.BackoffBase)
	cfg.Retention = cmp.Or(cfg.Retention, def.Retention)
	r := &Relay{env: env, cfg: cfg, clock: env.Clock, log: env.Logger}
	r.Periodic = env.every("outbox relay", relayIdleSleep, r.loopPass).WaitBy(r.wait)
	if cfg.Wake != nil {
		r.Periodic.WakeOn(cfg.Wake)
	}
	return r
}

// RunOnce runs one pass: it claims up to Batch due messages, publishes them and records the
// outcome, all in one transaction. It returns how many messages were published.
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	published, _, err = r.pass(ctx)
	return published, err
}

// backoff is the delay after a message's nth failed publish: min(max, base·2^(n-1)).
func (r *Relay) backoff(n int) time.Duration {
	return lifecycle.Backoff(n, r.cfg.BackoffBase, r.cfg.BackoffMax, 0.5)
}

// pass is RunOnce, also returning how many messages it claimed.
func (r *Relay) pass(ctx context.Context) (published, claimed int, err error) {
	now := r.env.now()
	var (
		dead      []*store.OutboxMessage
		nextRetry time.Time
	)
	err = r.env.Store.InTx(ctx, func(tx store.Tx) error {
		// InTx may run this more than once: reset what it reports.
		published, claimed, dead, nextRetry = 0, 0, nil, time.Time{}
		msgs, err := tx.OutboxClaim(ctx, store.OutboxClaimParams{
			Now: now, Limit: r.cfg.Batch, Filter: store.OutboxFilter{Topic: store.TopicDatasetEvent, Except: true},
		})
		if err != nil {
			return err
		}
		claimed = len(msgs)
		if len(msgs) == 0 {
			return nil
		}
		failed := r.cfg.Publisher.Publish(ctx, msgs)
		sent := make([]int64, 0, len(msgs))
		for _, m := range msgs {
			perr, isFailed := failed[m.ID]
			if !isFailed {
				sent = append(sent, m.ID)
				published++
				continue
			}
			attempts := m.Attempts + 1
			if attempts >= r.cfg.MaxAttempts {
				// Give up: record the attempts and take it out of the queue.
				if err := tx.OutboxRetry(ctx, store.OutboxRetryParams{ID: m.ID, Attempts: attempts, NextAt: now}); err != nil {
					return err
				}
				sent = append(sent, m.ID)
				dead = append(dead, &store.OutboxMessage{ID: m.ID, Topic: m.Topic, Key: m.Key, Attempts: attempts})
				continue
			}
			next := now.Add(r.backoff(attempts))
			if err := tx.OutboxRetry(ctx, store.OutboxRetryParams{ID: m.ID, Attempts: attempts, NextAt: next}); err != nil {
				return err
			}
			if nextRetry.IsZero() || next.Before(nextRetry) {
				nextRetry = next
			}
			r.log.WarnContext(ctx, "outbox publish failed; will retry", "id", m.ID, "topic", m.Topic,
				"attempts", attempts, "retry_at", next, "err", perr)
		}
		return tx.OutboxMarkSent(ctx, sent, now)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("relay outbox: %w", err)
	}
	for _, m := range dead {
		r.log.ErrorContext(ctx, "outbox message dropped after too many failed publishes",
			"id", m.ID, "topic", m.Topic, "key", m.Key, "attempts", m.Attempts)
	}
	if !nextRetry.IsZero() {
		r.mu.Lock()
		if r.nextRetry.IsZero() || nextRetry.Before(r.nextRetry) {
			r.nextRetry = nextRetry
		}
		r.mu.Unlock()
	}
	return published, claimed, nil
}

// Prune deletes messages sent more than Retention ago and returns how many it deleted.
func (r *Relay) Prune(ctx context.Context) (int, error) {
	before := r.env.now().Add(-r.cfg.Retention)
	total := 0
	for {
		var n int
		err := r.env.Store.InTx(ctx, func(tx store.Tx) error {
			var err error
			n, err = tx.OutboxDeleteSent(ctx, before, relayPruneRows)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("prune outbox: %w", err)
		}
		total += n
		if n < relayPruneRows {
			return total, nil
		}
	}
}

// sleep is how long to wait after a pass that claimed claimed messages: briefly when there was
// work, else until the earliest retry this relay scheduled, at most relayIdleSleep. Messages
// written with a later AvailableAt, or retried by another replica, are found within that second.
func (r *Relay) sleep(claimed int) time.Duration {
	if claimed > 0 {
		return relayBusySleep
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	if r.nextRetry.IsZero() {
		return relayIdleSleep
	}
	if !r.nextRetry.After(now) {
		r.nextRetry = time.Time{} // due now; the next pass claims it
		return 5 * time.Millisecond
	}
	return min(r.nextRetry.Sub(now), relayIdleSleep)
}

// loopPass is one pass of the relay's loop: RunOnce, and a prune of sent messages every
// relayPruneEach.
func (r *Relay) loopPass(ctx context.Context) error {
	_, claimed, err := r.pass(ctx)
	r.claimed = claimed
	r.mu.Lock()
	prune := r.clock.Since(r.lastPrune) >= relayPruneEach
	if prune {
		r.lastPrune = r.clock.Now()
	}
	r.mu.Unlock()
	if prune {
		if n, perr := r.Prune(ctx); perr != nil {
			service.LogFailure(ctx, service.Env{Logger: r.log}, "outbox relay", fmt.Errorf("prune sent messages: %w", perr))
		} else if n > 0 {
			r.log.InfoContext(ctx, "pruned sent outbox messages", "count", n)
		}
	}
	return err
}

// wait is how long the loop waits after a pass (sleep), and whether a commit may wake it early:
// not after a pass that claimed messages, so that the relay batches up for relayBusySleep rather
// than running a pass per commit.
func (r *Relay) wait() (time.Duration, bool) {
	return r.sleep(r.claimed), r.claimed == 0
}
