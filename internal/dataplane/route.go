package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
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

// route creates the tasks of evs in tx, and releases held routings, in three steps: match each
// event to the consuming jobs it starts (match); gate the jobs with backpressure limits, releasing
// what they held as far as their backlogs leave room (openGates); then admit each new routing,
// which creates its task or is held behind the others (admit). The tasks and held routings are
// written last (write).
func (r *Router) route(ctx context.Context, tx store.Tx, c *dispatch.Work, evs []*intake.Routed, held []*store.HeldSummary, tally *heldTally) ([]*store.Job, error) {
	p := &routingPass{r: r, tx: tx, c: c, tally: tally, known: specs.NewKnown(), gates: map[store.PipelineJobKey]*gate{},
		tasks: map[string]*store.Task{}, released: map[int64]bool{}}
	routings, err := p.match(ctx, evs)
	if err != nil || len(routings)+len(held) == 0 {
		return nil, err
	}
	if err := p.openGates(ctx, held, routings); err != nil {
		return nil, err
	}
	if err := p.known.Load(ctx, tx, p.more); err != nil {
		return nil, fmt.Errorf("load the datasets of the routed versions: %w", err)
	}
	for _, rt := range routings {
		if err := p.admit(ctx, rt); err != nil {
			return nil, err
		}
	}
	return p.write(ctx)
}

// routingPass is one routing transaction: the datasets it has read, the gates of the limited
// jobs it routes to, and the tasks and held routings it makes.
type routingPass struct {
	r     *Router
	tx    store.Tx
	c     *dispatch.Work
	tally *heldTally
	known *specs.Known
	more  []string // the datasets the new tasks read and write, for their versions

	gates    map[store.PipelineJobKey]*gate
	jobs     []*store.Job
	tasks    map[string]*store.Task // by job id
	released map[int64]bool         // held routings released, by id
	hold     []*heldRouting         // routings this pass holds
}

// match returns the routings of evs: one per event and consuming job of a pipeline version that
// reads the event's dataset at the event's version (the current one for the active version, the
// build's own for a building version: see specs.Pipeline.Routes), once per routing key. Events of
// unknown datasets, or of another tenant's, route nothing.
func (p *routingPass) match(ctx context.Context, evs []*intake.Routed) ([]routing, error) {
	uuids := make([]string, 0, len(evs))
	for _, e := range evs {
		uuids = append(uuids, e.DatasetUUID)
	}
	if err := p.known.Load(ctx, p.tx, uuids); err != nil {
		return nil, fmt.Errorf("load the events' datasets: %w", err)
	}
	datasets := p.known.Datasets
	var routable []*intake.Routed
	for _, e := range evs {
		if ds := datasets[e.DatasetUUID]; ds != nil && ds.Tenant == e.Tenant {
			routable = append(routable, e)
		}
	}
	if len(routable) == 0 {
		return nil, nil
	}
	consumers, err := p.tx.ConsumerList(ctx, uniq(uuids))
	if err != nil {
		return nil, fmt.Errorf("list the consumers of the events' datasets: %w", err)
	}
	byDataset := map[string][]*store.Consumer{}
	specOf := map[*store.Consumer]*specs.Pipeline{}
	for _, cs := range consumers {
		byDataset[cs.DatasetUUID] = append(byDataset[cs.DatasetUUID], cs)
		spec, err := p.r.dp.specs.Get(ctx, p.tx, cs.Tenant, cs.Pipeline, cs.Version)
		if err != nil {
			return nil, fmt.Errorf("dataset %s: its consumer job %s: %w", cs.DatasetUUID, cs.Job, err)
		}
		specOf[cs] = spec
		p.more = append(p.more, spec.DatasetUUIDs()...)
	}
	var routings []routing
	seen := map[string]bool{}
	for _, e := range routable {
		for _, cs := range byDataset[e.DatasetUUID] {
			rt, ok := matchConsumer(cs, specOf[cs], e, datasets[e.DatasetUUID])
			if !ok || seen[rt.key] {
				continue
			}
			seen[rt.key] = true
			routings = append(routings, rt)
		}
	}
	return routings, nil
}

// matchConsumer returns the routing of event e of dataset ds to consumer cs of pipeline version
// spec, and whether there is one: the consumer is of e's tenant (and of the pipeline job and
// version e is addressed to, when it is), reads e's dataset version, and its job is started by
// such an event with rows its input may read.
func matchConsumer(cs *store.Consumer, spec *specs.Pipeline, e *intake.Routed, ds *store.Dataset) (routing, bool) {
	if cs.Tenant != e.Tenant || (e.Pipeline != "" && (cs.Pipeline != e.Pipeline || cs.Job != e.Job)) ||
		(e.Version != "" && cs.Version != e.Version) {
		return routing{}, false
	}
	if !spec.Routes(cs, e, ds) {
		return routing{}, false
	}
	js := spec.Job(cs.Job)
	if js == nil || (js.Strategy == "PerPartition" && e.PartitionKey == "") {
		return routing{}, false // a partitioned job is not started by a cursor
	}
	if e.Facets != nil && !js.InputMayMatch(cs.InputIndex, e.Facets) {
		return routing{}, false // no row of the batch is one this input reads
	}
	key := routingKey(cs.Pipeline, cs.Version, cs.Job, e.DedupeKey())
	return routing{spec: spec, js: js, input: cs.InputIndex, e: e, key: key, building: cs.Building}, true
}

// create makes the task of a routing of event e to input input of job js of version spec.
func (p *routingPass) create(spec *specs.Pipeline, js *specs.Job, input int, e *intake.Routed, key string, building bool) {
	var pins map[string]string
	if building {
		pins = spec.Build.Pointers
	}
	job, task := p.r.dp.pipelineTask(spec, js, p.known, input, e, nil, pins, p.c.Now(), key)
	p.jobs = append(p.jobs, job)
	p.tasks[job.ID] = task
}

// write stores what the pass decided: the held routings it coalesced into, released and held, and
// the tasks it created (once per routing key); it returns the jobs of those tasks.
func (p *routingPass) write(ctx context.Context) ([]*store.Job, error) {
	for _, g := range p.gates {
		if g.wasPaused && !g.holding {
			p.tally.pauses = append(p.tally.pauses, p.c.Now().Sub(g.pausedSince))
		}
		for _, hr := range g.byKey {
			if hr.dirty {
				hr.h.Event, _ = json.Marshal(hr.e)
				if err := p.tx.HeldRoutingCoalesce(ctx, hr.h); err != nil {
					return nil, fmt.Errorf("pipeline %s job %s: coalesce held routing %d: %w", hr.h.Pipeline, hr.h.Job, hr.h.ID, err)
				}
			}
		}
	}
	if _, err := p.tx.HeldRoutingDelete(ctx, slices.Collect(maps.Keys(p.released))); err != nil {
		return nil, fmt.Errorf("delete released routings: %w", err)
	}
	if len(p.hold) > 0 {
		hs := make([]*store.HeldRouting, len(p.hold))
		for i, hr := range p.hold {
			hr.h.Event, _ = json.Marshal(hr.e)
			hs[i] = hr.h
		}
		if err := p.tx.HeldRoutingInsertMany(ctx, hs); err != nil {
			return nil, fmt.Errorf("hold routings: %w", err)
		}
	}
	return p.c.InsertJobsIfAbsent(ctx, p.tx, p.jobs, p.tasks)
}

// uniq returns the distinct strings of ss, sorted.
func uniq(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}
