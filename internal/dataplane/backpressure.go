package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/store"
)

// Backpressure: a reactive job with max_queue_depth or max_queue_age is gated. While its backlog
// is at its limits, new routings to it are held (stored, not turned into tasks) behind the ones
// already held; they are released, oldest first, as the backlog drains below the low-water mark;
// with backpressure_mode coalesce, a held routing absorbs the next cursor's event of its scope.

// gate is the backpressure state of one limited job during a routing transaction.
type gate struct {
	specs.Limits
	active      *specs.Pipeline // the pipeline's active version, which held routings are released under; nil when gone
	key         store.PipelineJobKey
	queue       string // the queue the job's tasks are created on
	backlog     store.Backlog
	holding     bool      // routings of the job are held: new ones queue behind them
	pausedSince time.Time // of the held routings
	wasPaused   bool      // the job held routings when the transaction began

	// For coalesce: the newest routing held (nil: none, or not read yet: newestRead), and the
	// routings held by this transaction or coalesced into, by key.
	newest     *heldRouting
	newestRead bool
	byKey      map[string]*heldRouting
}

// heldRouting is a held routing with its event decoded, as coalesce changes it.
type heldRouting struct {
	h     *store.HeldRouting
	e     *intake.Routed
	dirty bool // stored before this transaction and changed by it
}

// openGates gates the jobs with backpressure: those that hold routings, and the limited jobs of
// the new routings (a build's routings are never gated). Each job's lock is taken, in one order,
// so that two replicas decide for it one after the other; then its backlog is read and its held
// routings are released, oldest first, as far as the backlog leaves room.
func (p *routingPass) openGates(ctx context.Context, held []*store.HeldSummary, routings []routing) error {
	for _, h := range held {
		k := store.PipelineJobKey{Tenant: h.Tenant, Pipeline: h.Pipeline, Job: h.Job}
		active, err := p.r.activeSpec(ctx, p.tx, k)
		if err != nil {
			return fmt.Errorf("the held routings of job %s: %w", k.Job, err)
		}
		g := &gate{active: active}
		if js := active.Job(k.Job); js != nil {
			g.Limits, g.queue = js.Limits(), js.TaskQueue()
		}
		p.gates[k] = g
	}
	for _, rt := range routings {
		k := store.PipelineJobKey{Tenant: rt.spec.Tenant, Pipeline: rt.spec.Name, Job: rt.js.Name}
		if lim := rt.js.Limits(); lim.Set() && p.gates[k] == nil && !rt.building {
			p.gates[k] = &gate{Limits: lim, queue: rt.js.TaskQueue(), active: rt.spec}
		}
	}
	if len(p.gates) == 0 {
		return nil
	}
	keys := make([]string, 0, len(p.gates))
	for k := range p.gates {
		keys = append(keys, "backpressure:"+k.Tenant+":"+k.Pipeline+":"+k.Job)
	}
	if err := p.tx.RowsLock(ctx, store.LockSet{Keys: keys}); err != nil {
		return fmt.Errorf("lock the gated jobs: %w", err)
	}
	order := slices.SortedFunc(maps.Keys(p.gates), func(a, b store.PipelineJobKey) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Pipeline, b.Pipeline), cmp.Compare(a.Job, b.Job))
	})
	for _, k := range order {
		if err := p.release(ctx, k, p.gates[k]); err != nil {
			return fmt.Errorf("pipeline %s job %s: %w", k.Pipeline, k.Job, err)
		}
	}
	return nil
}

// release reads the backlog of job k under its lock and releases its held routings, oldest first,
// as far as the backlog leaves room (another replica may have released some since they were
// summed up). A released routing creates its task under the version active now, whichever it was
// held under: as when routed, an event of a replaced dataset version, or one the active version's
// job does not read, starts nothing.
func (p *routingPass) release(ctx context.Context, k store.PipelineJobKey, g *gate) error {
	g.key = k
	now := p.c.Now()
	var err error
	if g.backlog, err = p.tx.PipelineJobBacklog(ctx, store.PipelineJobBacklogParams{Job: k, Queue: g.queue, Now: now}); err != nil {
		return fmt.Errorf("read the backlog: %w", err)
	}
	room := g.Room(g.backlog, now)
	if room < 0 || room > p.r.batch {
		room = p.r.batch
	}
	hs, err := p.tx.HeldRoutingList(ctx, k, room+1)
	if err != nil {
		return fmt.Errorf("list held routings: %w", err)
	}
	if len(hs) > 0 {
		g.holding, g.wasPaused, g.pausedSince = true, true, hs[0].PausedSince
	}
	if len(hs) > room {
		hs = hs[:room]
	} else {
		g.holding = false // every held routing is released below
		g.newestRead = true
	}
	for _, h := range hs {
		p.released[h.ID] = true
		p.tally.released += max(h.Events, 1)
		var e intake.Routed
		if err := json.Unmarshal(h.Event, &e); err != nil {
			p.r.dp.log.ErrorContext(ctx, "unreadable held routing; dropped", "id", h.ID, "pipeline", h.Pipeline, "job", h.Job, "err", err)
			continue
		}
		spec := g.active
		if spec == nil {
			continue
		}
		if err := p.known.Load(ctx, p.tx, append(spec.DatasetUUIDs(), e.DatasetUUID)); err != nil {
			return fmt.Errorf("held routing %d: load its datasets: %w", h.ID, err)
		}
		ds := p.known.Datasets[e.DatasetUUID]
		js := spec.Job(h.Job)
		input := js.InputOf(e.DatasetUUID, h.InputIndex)
		if input < 0 || ds == nil || ds.CurrentVersion != e.DatasetVersion || (js.Strategy == "PerPartition" && e.PartitionKey == "") {
			continue
		}
		p.create(spec, js, input, &e, routingKey(spec.Name, spec.Version, js.Name, updateOf(h.Key, h.Pipeline, h.Version, h.Job)), false)
		g.backlog.Depth++
	}
	return nil
}

// admit creates the task of routing rt, unless its job's gate holds it: the job already holds
// routings (new ones queue behind them), or its backlog (counting the tasks created so far) has
// reached its limits. A held routing joins a held routing of its scope when the job coalesces.
func (p *routingPass) admit(ctx context.Context, rt routing) error {
	var g *gate
	if !rt.building {
		g = p.gates[store.PipelineJobKey{Tenant: rt.spec.Tenant, Pipeline: rt.spec.Name, Job: rt.js.Name}]
	}
	now := p.c.Now()
	if g == nil || (!g.holding && !g.Full(g.backlog, now)) {
		p.create(rt.spec, rt.js, rt.input, rt.e, rt.key, rt.building)
		if g != nil {
			g.backlog.Depth++
		}
		return nil
	}
	p.tally.held++
	if !g.holding {
		g.holding = true
		if g.pausedSince.IsZero() { // else it released everything it held and is full again: the same pause
			g.pausedSince = now
		}
	}
	if g.Coalesce {
		joined, err := g.coalesce(ctx, p.tx, rt, p.released)
		if err != nil {
			return fmt.Errorf("pipeline %s job %s: %w", rt.spec.Name, rt.js.Name, err)
		}
		if joined {
			p.tally.coalesced++
			return nil
		}
	}
	hr := &heldRouting{e: rt.e, h: &store.HeldRouting{Tenant: rt.spec.Tenant, Pipeline: rt.spec.Name, Version: rt.spec.Version,
		Job: rt.js.Name, InputIndex: rt.input, Key: rt.key, Events: 1, HeldAt: now, PausedSince: g.pausedSince}}
	p.hold = append(p.hold, hr)
	g.remember(hr)
	return nil
}

// coalesce joins routing rt, which the job must hold, to a held routing of its scope, and
// reports whether it did: a partition's event to the routing held for the same partition (the
// same key), a cursor's to the newest routing held when that one's last cursor is the one just
// before it, of the same dataset version, input and pipeline version (it then covers rt's cursor
// too). Only the next cursor joins: events routed out of order (by two replicas, say) start a
// new routing, so that no cursor is ever in two routings or in a routing and a task. A routing
// released by this transaction is never joined.
func (g *gate) coalesce(ctx context.Context, tx store.Tx, rt routing, released map[int64]bool) (bool, error) {
	var into *heldRouting
	if rt.e.PartitionKey != "" {
		into = g.byKey[rt.key]
		if into == nil {
			h, err := tx.HeldRoutingByKey(ctx, g.key, rt.key)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
			if err == nil && !released[h.ID] {
				if into, err = g.decode(h); err != nil {
					return false, err
				}
			}
		}
		if into == nil {
			return false, nil
		}
	} else {
		if !g.newestRead {
			g.newestRead = true
			h, err := tx.HeldRoutingNewest(ctx, g.key)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
			if err == nil && !released[h.ID] {
				if g.newest, err = g.decode(h); err != nil {
					return false, err
				}
			}
		}
		into = g.newest
		if into == nil {
			return false, nil
		}
		last := into.e.Cursor
		if into.e.CursorEnd != nil {
			last = into.e.CursorEnd
		}
		if into.e.PartitionKey != "" || last == nil || into.e.DatasetUUID != rt.e.DatasetUUID ||
			into.e.DatasetVersion != rt.e.DatasetVersion || into.h.InputIndex != rt.input ||
			into.h.Version != rt.spec.Version || *rt.e.Cursor != *last+1 {
			return false, nil
		}
		into.e.CursorEnd = rt.e.Cursor
	}
	into.h.Events++
	into.dirty = into.h.ID != 0
	return true, nil
}

// decode reads held routing h of the gate's job for coalesce, once per transaction.
func (g *gate) decode(h *store.HeldRouting) (*heldRouting, error) {
	if hr := g.byKey[h.Key]; hr != nil && hr.h.ID == h.ID {
		return hr, nil
	}
	var e intake.Routed
	if err := json.Unmarshal(h.Event, &e); err != nil {
		return nil, fmt.Errorf("held routing %d: decode its event: %w", h.ID, err)
	}
	hr := &heldRouting{h: h, e: &e}
	g.remember(hr)
	return hr, nil
}

// remember notes hr by its key and, when this transaction holds it (it has no ID yet), as the
// newest routing of the gate's job.
func (g *gate) remember(hr *heldRouting) {
	if g.byKey == nil {
		g.byKey = map[string]*heldRouting{}
	}
	if hr.h.ID == 0 {
		g.newest, g.newestRead = hr, true
	}
	g.byKey[hr.h.Key] = hr
}

// activeSpec is the active version of a pipeline job's pipeline, nil when the pipeline is gone.
// Its limits on the job (none when the job is gone, so that what it held is released) gate the
// job, and what it held is released under it.
func (r *Router) activeSpec(ctx context.Context, tx store.Tx, k store.PipelineJobKey) (*specs.Pipeline, error) {
	p, err := tx.PipelineGet(ctx, k.Tenant, k.Pipeline)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", k.Pipeline, err)
	}
	return r.dp.specs.Get(ctx, tx, k.Tenant, k.Pipeline, p.ActiveVersion)
}
