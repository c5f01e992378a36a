package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// routingKey is the identity of a routing: of the update (intake.Routed.dedupeKey) to job of
// pipeline version version. It is the idempotency key of the task the routing creates, so an
// update makes one task per consuming job and pipeline version: an update routed again under
// another version (by a rollback, or released from backpressure after a deploy) is a new routing,
// the same update routed again under the same version is not.
func routingKey(pipeline, version, job, update string) string {
	return "pipeline:" + pipeline + ":" + version + ":" + job + ":" + update
}

// updateOf is the update a routing key of job of pipeline version version names; keys stored
// before routing keys named the version ("pipeline:{pipeline}:{job}:{update}") are read too.
func updateOf(key, pipeline, version, job string) string {
	if rest, ok := strings.CutPrefix(key, "pipeline:"+pipeline+":"+version+":"+job+":"); ok {
		return rest
	}
	rest, _ := strings.CutPrefix(key, "pipeline:"+pipeline+":"+job+":")
	return rest
}

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
// one task per dedupe key, then marks the events routed. Events of a dataset version that is not
// the dataset's current one, and events on datasets of another tenant, route nothing; they stay
// stored for audit.
type Router struct {
	dp      *Plane
	batch   int
	passes  int
	backlog chan struct{} // the first loop found a full batch: the helpers join in
	service.Loop
}

// NewRouter returns a stopped router of the plane's dataset events.
func (dp *Plane) NewRouter(cfg RouteConfig) *Router {
	return &Router{dp: dp, batch: cmpOr(cfg.Batch, 2000), passes: cmpOr(cfg.Passes, 2), backlog: make(chan struct{})}
}

// Start runs the router until Stop or until ctx ends.
func (r *Router) Start(ctx context.Context) error {
	return r.Run(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		for range r.passes - 1 {
			wg.Go(func() { r.help(ctx) })
		}
		r.run(ctx)
		wg.Wait()
	})
}

// run routes what is committed: after each commit that queued events, and each second (events
// another replica accepted and did not route, because it stopped).
func (r *Router) run(ctx context.Context) {
	for {
		woken := r.dp.routing.Wait() // before the pass, so an event committed during it is not missed
		if full := r.pass(ctx); full {
			select {
			case r.backlog <- struct{}{}: // wake a helper, if one is idle
			default:
			}
			continue // more are waiting
		}
		select {
		case <-ctx.Done():
			return
		case <-woken:
		case <-r.dp.clock.After(time.Second):
		}
	}
}

// help runs passes alongside run while a backlog lasts.
func (r *Router) help(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.backlog:
		}
		for r.pass(ctx) {
		}
	}
}

// pass runs one routing pass, logging a failure, and reports whether it took a full batch.
func (r *Router) pass(ctx context.Context) bool {
	claimed, _, err := r.RunOnce(ctx)
	r.dp.logPass(ctx, "routing", err)
	return err == nil && claimed >= r.batch
}

// RunOnce routes one batch of events and returns how many events it claimed and how many tasks
// it created. In the same transaction it releases the routings backpressure held for jobs whose
// backlog has drained (see route).
func (r *Router) RunOnce(ctx context.Context) (events, tasks int, err error) {
	var tally heldTally
	err = r.dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		events, tasks, tally = 0, 0, heldTally{}
		msgs, err := tx.OutboxClaim(ctx, store.OutboxClaimParams{
			Now: c.Now(), Limit: r.batch, Filter: store.OutboxFilter{Topic: store.TopicDatasetEvent},
		})
		if err != nil {
			return err
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
		if tasks, err = r.route(ctx, tx, c, evs, held, &tally); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		return tx.OutboxMarkSent(ctx, ids, c.Now())
	})
	if err == nil {
		r.dp.d.Metrics().Backpressure(tally.held, tally.coalesced, tally.released, tally.pauses)
	}
	return events, tasks, err
}

// heldTally is what a routing transaction did with held events, for the metrics once it
// committed.
type heldTally struct {
	held, coalesced, released int
	pauses                    []time.Duration // of the jobs whose pause ended
}

// routing is the routing of one event to one consuming job, before backpressure decides.
type routing struct {
	spec  *specs.Pipeline
	js    *specs.Job
	input int
	e     *intake.Routed
	key   string
	// building: the routing is to a job a build rebuilds, which backpressure does not gate (the
	// build paces itself: see Builds) and whose task reads and writes the build's versions.
	building bool
}

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

// route creates the tasks of evs in tx, and releases held routings. A job with backpressure
// limits is gated: its lock is taken (so that two replicas decide for it one after the other),
// its held routings are released, oldest first, as far as its backlog leaves room, and each new
// routing then either creates a task (nothing held, backlog below the limits; the backlog counts
// the tasks created so far) or is held behind the others.
func (r *Router) route(ctx context.Context, tx store.Tx, c *dispatch.Work, evs []*intake.Routed, held []*store.HeldSummary, tally *heldTally) (int, error) {
	uuids := make([]string, 0, len(evs))
	for _, e := range evs {
		uuids = append(uuids, e.DatasetUUID)
	}
	known := specs.NewKnown()
	if err := known.Load(ctx, tx, uuids); err != nil {
		return 0, err
	}
	datasets := known.Datasets
	// Which version of a dataset a consumer reads is decided per consumer (routes): the current
	// one for the active version, the build's own for a building version.
	var routable []*intake.Routed
	for _, e := range evs {
		if ds := datasets[e.DatasetUUID]; ds != nil && ds.Tenant == e.Tenant {
			routable = append(routable, e)
		}
	}
	if len(routable)+len(held) == 0 {
		return 0, nil
	}
	var consumers []*store.Consumer
	if len(routable) > 0 {
		var err error
		if consumers, err = tx.ConsumerList(ctx, uniq(uuids)); err != nil {
			return 0, err
		}
	}
	byDataset := map[string][]*store.Consumer{}
	specOf := map[*store.Consumer]*specs.Pipeline{}
	var more []string // the datasets the new tasks read and write, for their versions
	for _, cs := range consumers {
		byDataset[cs.DatasetUUID] = append(byDataset[cs.DatasetUUID], cs)
		spec, err := r.dp.specs.Get(ctx, tx, cs.Tenant, cs.Pipeline, cs.Version)
		if err != nil {
			return 0, err
		}
		specOf[cs] = spec
		more = append(more, spec.DatasetUUIDs()...)
	}
	var routings []routing
	seen := map[string]bool{}
	for _, e := range routable {
		for _, cs := range byDataset[e.DatasetUUID] {
			if cs.Tenant != e.Tenant || (e.Pipeline != "" && (cs.Pipeline != e.Pipeline || cs.Job != e.Job)) ||
				(e.Version != "" && cs.Version != e.Version) {
				continue
			}
			spec := specOf[cs]
			if !spec.Routes(cs, e, datasets[e.DatasetUUID]) {
				continue
			}
			js := spec.Job(cs.Job)
			if js == nil || (js.Strategy == "PerPartition" && e.PartitionKey == "") {
				continue // a partitioned job is not started by a cursor
			}
			if e.Facets != nil && !js.InputMayMatch(cs.InputIndex, e.Facets) {
				continue // no row of the batch is one this input reads
			}
			key := routingKey(cs.Pipeline, cs.Version, cs.Job, e.DedupeKey())
			if seen[key] {
				continue
			}
			seen[key] = true
			routings = append(routings, routing{spec: spec, js: js, input: cs.InputIndex, e: e, key: key, building: cs.Building})
		}
	}

	// The gated jobs: those that hold routings, and the limited jobs of the new routings.
	gates := map[store.PipelineJobKey]*gate{}
	for _, h := range held {
		k := store.PipelineJobKey{Tenant: h.Tenant, Pipeline: h.Pipeline, Job: h.Job}
		active, err := r.activeSpec(ctx, tx, k)
		if err != nil {
			return 0, err
		}
		g := &gate{active: active}
		if js := active.Job(k.Job); js != nil {
			g.Limits, g.queue = js.Limits(), js.TaskQueue()
		}
		gates[k] = g
	}
	for _, rt := range routings {
		k := store.PipelineJobKey{Tenant: rt.spec.Tenant, Pipeline: rt.spec.Name, Job: rt.js.Name}
		if lim := rt.js.Limits(); lim.Set() && gates[k] == nil && !rt.building {
			gates[k] = &gate{Limits: lim, queue: rt.js.TaskQueue(), active: rt.spec}
		}
	}
	var (
		jobs     []*store.Job
		tasks    = map[string]*store.Task{} // by job id
		released = map[int64]bool{}
		hold     []*heldRouting
	)
	create := func(spec *specs.Pipeline, js *specs.Job, input int, e *intake.Routed, key string, building bool) {
		job, task := r.dp.newPipelineTask(spec, js, c.Now(), key)
		var pins map[string]string
		if building {
			pins = spec.Build.Pointers
		}
		task.Route = js.Route(spec, known, input, e, nil, pins)
		jobs = append(jobs, job)
		tasks[job.ID] = task
	}
	if len(gates) > 0 {
		keys := make([]string, 0, len(gates))
		for k := range gates {
			keys = append(keys, "backpressure:"+k.Tenant+":"+k.Pipeline+":"+k.Job)
		}
		if err := tx.RowsLock(ctx, store.LockSet{Keys: keys}); err != nil {
			return 0, err
		}
		order := slices.SortedFunc(maps.Keys(gates), func(a, b store.PipelineJobKey) int {
			return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Pipeline, b.Pipeline), cmp.Compare(a.Job, b.Job))
		})
		for _, k := range order {
			g := gates[k]
			g.key = k
			var err error
			if g.backlog, err = tx.PipelineJobBacklog(ctx, k, g.queue, c.Now()); err != nil {
				return 0, err
			}
			// What was held, read under the lock: another replica may have released some.
			room := g.Room(g.backlog, c.Now())
			if room < 0 || room > r.batch {
				room = r.batch
			}
			hs, err := tx.HeldRoutingList(ctx, k, room+1)
			if err != nil {
				return 0, err
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
				released[h.ID] = true
				tally.released += max(h.Events, 1)
				var e intake.Routed
				if err := json.Unmarshal(h.Event, &e); err != nil {
					r.dp.log.ErrorContext(ctx, "unreadable held routing; dropped", "id", h.ID, "pipeline", h.Pipeline, "job", h.Job, "err", err)
					continue
				}
				// Released under the version active now, whichever it was held under: as when
				// routed, an event of a replaced dataset version, or one the active version's job
				// does not read, starts nothing.
				spec := g.active
				if spec == nil {
					continue
				}
				if err := known.Load(ctx, tx, append(spec.DatasetUUIDs(), e.DatasetUUID)); err != nil {
					return 0, err
				}
				ds := known.Datasets[e.DatasetUUID]
				js := spec.Job(h.Job)
				input := js.InputOf(e.DatasetUUID, h.InputIndex)
				if input < 0 || ds == nil || ds.CurrentVersion != e.DatasetVersion || (js.Strategy == "PerPartition" && e.PartitionKey == "") {
					continue
				}
				create(spec, js, input, &e, routingKey(spec.Name, spec.Version, js.Name, updateOf(h.Key, h.Pipeline, h.Version, h.Job)), false)
				g.backlog.Depth++
			}
		}
	}
	if err := known.Load(ctx, tx, more); err != nil {
		return 0, err
	}
	for _, rt := range routings {
		var g *gate
		if !rt.building {
			g = gates[store.PipelineJobKey{Tenant: rt.spec.Tenant, Pipeline: rt.spec.Name, Job: rt.js.Name}]
		}
		if g != nil && (g.holding || g.Full(g.backlog, c.Now())) {
			tally.held++
			if !g.holding {
				g.holding = true
				if g.pausedSince.IsZero() { // else it released everything it held and is full again: the same pause
					g.pausedSince = c.Now()
				}
			}
			if g.Coalesce {
				joined, err := g.coalesce(ctx, tx, rt, released)
				if err != nil {
					return 0, err
				}
				if joined {
					tally.coalesced++
					continue
				}
			}
			hr := &heldRouting{e: rt.e, h: &store.HeldRouting{Tenant: rt.spec.Tenant, Pipeline: rt.spec.Name, Version: rt.spec.Version,
				Job: rt.js.Name, InputIndex: rt.input, Key: rt.key, Events: 1, HeldAt: c.Now(), PausedSince: g.pausedSince}}
			hold = append(hold, hr)
			g.remember(hr)
			continue
		}
		create(rt.spec, rt.js, rt.input, rt.e, rt.key, rt.building)
		if g != nil {
			g.backlog.Depth++
		}
	}
	for _, g := range gates {
		if g.wasPaused && !g.holding {
			tally.pauses = append(tally.pauses, c.Now().Sub(g.pausedSince))
		}
		for _, hr := range g.byKey {
			if hr.dirty {
				hr.h.Event, _ = json.Marshal(hr.e)
				if err := tx.HeldRoutingCoalesce(ctx, hr.h); err != nil {
					return 0, err
				}
			}
		}
	}
	if _, err := tx.HeldRoutingDelete(ctx, slices.Collect(maps.Keys(released))); err != nil {
		return 0, err
	}
	if len(hold) > 0 {
		hs := make([]*store.HeldRouting, len(hold))
		for i, hr := range hold {
			hr.h.Event, _ = json.Marshal(hr.e)
			hs[i] = hr.h
		}
		if err := tx.HeldRoutingInsertMany(ctx, hs); err != nil {
			return 0, err
		}
	}
	return c.InsertJobsIfAbsent(ctx, tx, jobs, tasks)
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

// newPipelineTask builds a pending task of pipeline job js and its one-task job, keyed for
// idempotency by key.
func (dp *Plane) newPipelineTask(spec *specs.Pipeline, js *specs.Job, now time.Time, key string) (*store.Job, *store.Task) {
	def := dp.d.Defaults()
	job := &store.Job{
		ID:              "job-" + uuid.NewString(),
		Tenant:          spec.Tenant,
		Name:            spec.Name + "." + js.Name,
		Status:          lifecycle.JobProcessing,
		IdempotencyKey:  key,
		TotalTasks:      1,
		UnfinishedTasks: 1,
		CreatedAt:       now,
		Pipeline:        spec.Name,
		PipelineVersion: spec.Version,
		PipelineJob:     js.Name,
	}
	t := &store.Task{
		ID:               uuid.Must(uuid.NewV7()).String(),
		JobID:            job.ID,
		Key:              js.Name,
		Name:             js.Operator,
		Queue:            js.TaskQueue(),
		Priority:         js.Priority,
		Runtime:          js.TaskRuntime(dp.cfg.LambdaOnPull),
		Input:            js.Config,
		DependsOn:        []string{},
		Status:           lifecycle.Pending,
		MaxAttempts:      cmpOr(js.MaxAttempts, def.MaxAttempts),
		AvailableAt:      now,
		BackoffBase:      def.BackoffBase,
		BackoffMax:       def.BackoffMax,
		Timeout:          time.Duration(js.TimeoutSeconds) * time.Second,
		HeartbeatTimeout: cmpOr(time.Duration(js.HeartbeatTimeoutSeconds)*time.Second, def.HeartbeatTimeout),
		CancelGrace:      def.CancelGrace,
		CreatedAt:        now,
		LastEventType:    dispatch.EventTaskPending,
		LastEventAt:      now,
	}
	if len(t.Input) == 0 {
		t.Input = json.RawMessage("{}")
	}
	if js.MaxConcurrency > 0 {
		t.ConcurrencyKey, t.ConcurrencyLimit = spec.Tenant+"/"+spec.Name+"/"+js.Name, js.MaxConcurrency
	}
	return job, t
}

// uniq returns the distinct strings of ss, sorted.
func uniq(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}
