package maintenance

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/transport"
)

// TransportPublisher is the relay's Publisher for a wake-up transport (--transport redis|nats): it
// publishes the outbox's task wake-ups, and for each buffered publish a wake-up on
// transport.BufferQueue naming the Buffer Queue message, which sinks then claim by id
// (ClaimBatches), as workers claim tasks. Other topics count as published.
type TransportPublisher struct {
	Transport transport.Transport
}

// Publish implements Publisher.
func (p TransportPublisher) Publish(ctx context.Context, msgs []*store.OutboxMessage) map[int64]error {
	var wakes []transport.Wakeup
	failed := map[int64]error{}
	for _, m := range msgs {
		if m.Topic == store.TopicBufferBatch {
			var body struct {
				ID int64 `json:"id"`
			}
			if err := json.Unmarshal(m.Payload, &body); err == nil && body.ID > 0 {
				wakes = append(wakes, transport.Wakeup{ID: m.ID, Queue: transport.BufferQueue, TaskID: strconv.FormatInt(body.ID, 10)})
			}
			continue
		}
		if m.Topic != store.TopicTaskReady {
			continue
		}
		var body struct {
			TaskID string `json:"task_id"`
		}
		if err := json.Unmarshal(m.Payload, &body); err != nil || body.TaskID == "" {
			// Written by this package; never happens. Give it up rather than retry forever.
			continue
		}
		wakes = append(wakes, transport.Wakeup{ID: m.ID, Queue: m.Key, TaskID: body.TaskID})
	}
	if len(wakes) == 0 {
		return nil
	}
	for id, err := range p.Transport.Publish(ctx, wakes) {
		failed[id] = err
	}
	return failed
}

// ReconcilerConfig configures a Reconciler. Zero fields take their defaults.
type ReconcilerConfig struct {
	Every   time.Duration // time between passes; default 5 s
	Grace   time.Duration // how long a task may be ready before a missing wake-up is re-published; default 10 s
	MinIdle time.Duration // how long a delivered wake-up may go unacknowledged before it is reclaimed; default 60 s
	Batch   int           // most wake-ups reclaimed, and re-published per queue, in one pass; default 1000
}

// DefaultReconcilerConfig holds the defaults.
var DefaultReconcilerConfig = ReconcilerConfig{Every: 5 * time.Second, Grace: 10 * time.Second, MinIdle: time.Minute, Batch: 1000}

// Reconciler heals a wake-up transport against the store, which stays the truth:
//
//   - wake-ups delivered to a consumer that never acknowledged them (a dead worker) are reclaimed
//     and acknowledged: if their task is still ready the next step re-publishes it, and if it is
//     running the reaper publishes a new wake-up when it requeues it;
//   - for each queue, if more tasks have been ready for longer than Grace than the transport has
//     wake-ups outstanding, wake-ups are re-published for the longest-waiting ready tasks, so a
//     transport that lost everything (a flushed Redis, a deleted stream) recovers by itself.
//
// Duplicates this may create are harmless: the lease decides who runs a task. Running it on every
// replica is safe for the same reason.
type Reconciler struct {
	env   Env
	tr    transport.Transport
	cfg   ReconcilerConfig
	clock clockwork.Clock
	log   *slog.Logger
	*service.Periodic
}

// NewReconciler returns a stopped reconciler of tr against env's store.
func NewReconciler(env Env, tr transport.Transport, cfg ReconcilerConfig) *Reconciler {
	env = env.withDefaults()
	def := DefaultReconcilerConfig
	cfg.Every = cmp.Or(max(cfg.Every, 0), def.Every)
	cfg.Grace = cmp.Or(max(cfg.Grace, 0), def.Grace)
	cfg.MinIdle = cmp.Or(max(cfg.MinIdle, 0), def.MinIdle)
	cfg.Batch = cmp.Or(max(cfg.Batch, 0), def.Batch)
	r := &Reconciler{env: env, tr: tr, cfg: cfg, clock: env.Clock, log: env.Logger}
	r.Periodic = env.every("wake-up reconciler ("+tr.Name()+")", cfg.Every, func(ctx context.Context) error {
		_, _, err := r.RunOnce(ctx)
		return err
	})
	return r
}

// RunOnce runs one pass and returns how many wake-ups it reclaimed and re-published.
func (r *Reconciler) RunOnce(ctx context.Context) (reclaimed, republished int, err error) {
	ds, err := r.tr.Reclaim(ctx, r.cfg.MinIdle, r.cfg.Batch)
	if err != nil {
		return 0, 0, fmt.Errorf("reclaim wake-ups: %w", err)
	}
	for _, dl := range ds {
		if err := dl.Ack(ctx); err != nil {
			return reclaimed, 0, fmt.Errorf("acknowledge reclaimed wake-up of %s: %w", dl.TaskID(), err)
		}
		reclaimed++
	}
	before := r.env.now().Add(-r.cfg.Grace)
	counts, err := r.env.Store.TaskReadyCounts(ctx, before)
	if err != nil {
		return reclaimed, 0, err
	}
	for queue, ready := range counts {
		out, err := r.tr.Outstanding(ctx, queue)
		if err != nil {
			return reclaimed, republished, fmt.Errorf("outstanding wake-ups of %s: %w", queue, err)
		}
		if ready <= out {
			continue
		}
		ids, err := r.env.Store.TaskListOldestReady(ctx, store.TaskListOldestReadyParams{
			Queue: queue, Before: before, Limit: min(ready-out, r.cfg.Batch),
		})
		if err != nil {
			return reclaimed, republished, err
		}
		wakes := make([]transport.Wakeup, len(ids))
		for i, id := range ids {
			wakes[i] = transport.Wakeup{ID: int64(i), Queue: queue, TaskID: id}
		}
		failed := r.tr.Publish(ctx, wakes)
		for _, err := range failed {
			return reclaimed, republished, fmt.Errorf("re-publish wake-ups of %s: %w", queue, err)
		}
		republished += len(wakes)
		r.log.InfoContext(ctx, "re-published missing wake-ups", "queue", queue, "count", len(wakes),
			"ready", ready, "outstanding", out)
	}
	return reclaimed, republished, nil
}
