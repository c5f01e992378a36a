package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// RouteConfig configures a Router. Zero fields take their defaults.
type RouteConfig struct {
	Batch int // events routed per transaction; default 2000
	// Passes is how many routing transactions run at once while events are waiting (one always
	// waits for new events; the others help with a backlog); default 2.
	Passes int
}

// Router turns accepted dataset events into tasks: each pass claims a batch of the outbox's
// dataset events (skipping rows other replicas' routers hold), and in the same transaction
// creates, for every reactive job of an active pipeline version that reads the event's dataset,
// one task per dedupe key, then deletes the events' outbox rows (the events themselves stay
// stored, in dataset_events). Events of a dataset version that is not the dataset's current one,
// and events on datasets of another tenant, route nothing; they stay stored for audit.
type Router struct {
	dp      *Plane
	batch   int
	passes  int
	backlog chan struct{} // the loop found a full batch: the helpers join in
	loop    *service.Periodic
	full    bool // the loop's last pass took a full batch (read and written by the loop only)
	service.Loop
}

// NewRouter returns a stopped router of the plane's dataset events.
func (dp *Plane) NewRouter(cfg RouteConfig) *Router {
	r := &Router{dp: dp, batch: cmpOr(cfg.Batch, 2000), passes: cmpOr(cfg.Passes, 2), backlog: make(chan struct{})}
	r.loop = dp.every("router", time.Second, func(ctx context.Context) (err error) {
		r.full, err = r.pass(ctx)
		return err
	}).WakeOn(dp.routing.Wait).WaitBy(r.next)
	return r
}

// Start runs the router until Stop or until ctx ends: a pass after each commit that queued events,
// and each second (events another replica accepted and did not route, because it stopped); while
// passes find full batches, the next one starts at once and helpers join in.
func (r *Router) Start(ctx context.Context) error {
	return r.Run(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		for range r.passes - 1 {
			wg.Go(func() { r.help(ctx) })
		}
		r.loop.Serve(ctx)
		wg.Wait()
	})
}

// next is the wait after one of the loop's passes: none after a full batch (more are waiting: a
// helper, if one is idle, joins in), else a second, unless a commit wakes the loop first.
func (r *Router) next() (time.Duration, bool) {
	if !r.full {
		return time.Second, true
	}
	select {
	case r.backlog <- struct{}{}:
	default:
	}
	return 0, false
}

// help runs passes alongside the loop while a backlog lasts.
func (r *Router) help(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.backlog:
		}
		for {
			full, err := r.pass(ctx)
			service.LogFailure(ctx, r.dp.serviceEnv(), "router", err)
			if !full {
				break
			}
		}
	}
}

// pass runs one routing pass and reports whether it took a full batch.
func (r *Router) pass(ctx context.Context) (full bool, err error) {
	claimed, _, err := r.RunOnce(ctx)
	return err == nil && claimed >= r.batch, err
}

// RunOnce routes one batch of events and returns how many events it claimed and how many tasks
// it created. In the same transaction it releases the routings backpressure held for jobs whose
// backlog has drained (see route).
func (r *Router) RunOnce(ctx context.Context) (events, tasks int, err error) {
	var (
		tally   heldTally
		created []*store.Job
	)
	err = r.dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		events, tasks, tally, created = 0, 0, heldTally{}, nil
		msgs, err := tx.OutboxClaim(ctx, store.OutboxClaimParams{
			Now: c.Now(), Limit: r.batch, Filter: store.OutboxFilter{Topic: store.TopicDatasetEvent},
		})
		if err != nil {
			return fmt.Errorf("claim dataset events: %w", err)
		}
		held, err := tx.HeldRoutingSummary(ctx, store.HeldSummaryParams{})
		if err != nil || len(msgs)+len(held) == 0 {
			return err
		}
		events = len(msgs)
		ids := make([]int64, len(msgs))
		evs := make([]*intake.Routed, 0, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
			var e intake.Routed
			if err := json.Unmarshal(m.Payload, &e); err != nil || (e.Cursor == nil && e.PartitionKey == "") {
				r.dp.log.ErrorContext(ctx, "unreadable dataset event in the outbox; not routed", "id", m.ID, "err", err)
				continue
			}
			evs = append(evs, &e)
		}
		if created, err = r.route(ctx, tx, c, evs, held, &tally); err != nil {
			return fmt.Errorf("route %d dataset events and %d jobs' held routings: %w", len(evs), len(held), err)
		}
		tasks = len(created)
		if len(ids) == 0 {
			return nil
		}
		return tx.OutboxDelete(ctx, ids)
	})
	if err == nil {
		r.dp.d.NoteJobs(created)
		r.dp.d.Metrics().Backpressure(tally.held, tally.coalesced, tally.released, tally.pauses)
	}
	return events, tasks, err
}
