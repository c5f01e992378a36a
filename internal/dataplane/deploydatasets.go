package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// storeDatasets creates the datasets of doc that do not exist yet (every job output, and each
// named buffered dataset) with a first current version, names the published ones, and returns the
// document's spec with every dataset by uuid. A dataset whose producer key is in planned is
// created with that uuid, and must have it: errDeployRaced when a concurrent deploy created it
// first.
func (dp *Plane) storeDatasets(ctx context.Context, tx store.Tx, c *dispatch.Work, tenant string, doc *pipeline.Document,
	existing map[string]*store.Dataset, planned map[string]string) (*specs.Pipeline, error) {
	var fresh []*store.Dataset
	var versions []*store.DatasetVersion
	add := func(producer, name, job string, index int) {
		if existing[producer] != nil {
			return
		}
		id := planned[producer]
		if id == "" {
			id = uuid.NewString()
		}
		x := &store.Dataset{UUID: id, Tenant: tenant, Producer: producer, Pipeline: doc.Name, Job: job,
			OutputIndex: index, CurrentVersion: uuid.NewString(), CreatedAt: c.Now(), UpdatedAt: c.Now()}
		if job == "" {
			x.Pipeline = ""
		}
		fresh = append(fresh, x)
		versions = append(versions, &store.DatasetVersion{DatasetUUID: x.UUID, Version: x.CurrentVersion, CreatedAt: c.Now()})
	}
	for _, j := range doc.Jobs {
		for i := range j.Outputs {
			add(outputProducer(doc.Name, j.Name, i), "", j.Name, i)
		}
	}
	for name, p := range doc.Publish {
		if p.WriteMode == pipeline.WriteBuffered {
			add(bufferedProducer(name), name, "", 0)
		}
	}
	if err := tx.DatasetInsertMany(ctx, fresh); err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: create %d datasets: %w", doc.Name, doc.Version, len(fresh), err)
	}
	if err := tx.DatasetVersionInsertMany(ctx, versions); err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: register the new datasets' versions: %w", doc.Name, doc.Version, err)
	}
	// Read back: a concurrent deploy may have created some of them first. The existing ones too,
	// as they are now: the updates below must keep what other requests changed since the deploy
	// read them (the current version a cutover set).
	var producers []string
	for _, x := range fresh {
		producers = append(producers, x.Producer)
	}
	for k, x := range existing {
		if x != nil && k == x.Producer {
			producers = append(producers, k)
		}
	}
	got, err := tx.DatasetListByProducer(ctx, tenant, producers)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s version %s: read its datasets back: %w", doc.Name, doc.Version, err)
	}
	byProducer := map[string]*store.Dataset{}
	for k, x := range existing {
		byProducer[k] = x
	}
	for _, x := range got {
		byProducer[x.Producer] = x
	}
	for producer, id := range planned {
		if x := byProducer[producer]; x == nil || x.UUID != id {
			return nil, errDeployRaced
		}
	}
	// Name the published datasets and keep their schema and filter fields.
	for _, name := range sortedKeys(doc.Publish) {
		p := doc.Publish[name]
		producer := outputProducer(doc.Name, p.From.Job, p.From.Output)
		if p.WriteMode == pipeline.WriteBuffered {
			producer = bufferedProducer(name)
		}
		x := byProducer[producer]
		if x == nil {
			return nil, fmt.Errorf("dataset of %s vanished during the deploy", producer)
		}
		x.Name, x.Storage, x.WriteMode, x.UpdatedAt = name, p.Storage, p.WriteMode, c.Now()
		x.Schema, x.FilterFields = nil, nil
		if p.Schema != nil {
			x.Schema, _ = json.Marshal(p.Schema)
		}
		if len(p.FilterFields) > 0 {
			x.FilterFields, _ = json.Marshal(p.FilterFields)
		}
		if err := tx.DatasetUpdate(ctx, x); err != nil {
			return nil, fmt.Errorf("dataset %s: publish it as %s: %w", x.UUID, name, err)
		}
	}
	return buildSpec(tenant, doc, byProducer)
}

// buildSpec resolves doc's datasets to uuids: byProducer holds every dataset it produces, by
// producer key, and the other pipelines' datasets it reads, by "name:" and their name.
func buildSpec(tenant string, doc *pipeline.Document, byProducer map[string]*store.Dataset) (*specs.Pipeline, error) {
	s := &specs.Pipeline{Tenant: tenant, Name: doc.Name, Version: doc.Version}
	outputUUID := func(job string, i int) string {
		if x := byProducer[outputProducer(doc.Name, job, i)]; x != nil {
			return x.UUID
		}
		return ""
	}
	for _, j := range doc.Jobs {
		js := &specs.Job{Name: j.Name, Activation: j.Activation, Runtime: j.Runtime, Operator: j.Operator, Queue: j.Queue,
			Strategy: j.ExecutionStrategy, Priority: j.Priority, MaxAttempts: j.MaxAttempts, TimeoutSeconds: j.TimeoutSeconds,
			HeartbeatTimeoutSeconds: j.HeartbeatTimeoutSeconds, Config: j.Config, Secrets: j.Secrets,
			UpdateStrategy: j.UpdateStrategy, UniqueKey: j.UniqueKey}
		if j.IdleTimeout != nil {
			secs := time.Duration(*j.IdleTimeout).Seconds()
			js.IdleTimeoutSeconds = &secs
		}
		if j.Scaling != nil {
			js.MaxConcurrency = j.Scaling.MaxConcurrency
		}
		if j.UDF != nil {
			js.Bundle = j.UDF.BundleID
		}
		if j.Activation == pipeline.ActivationReactive && (j.MaxQueueDepth > 0 || j.MaxQueueAge > 0) {
			js.MaxQueueDepth, js.MaxQueueAgeSeconds = j.MaxQueueDepth, time.Duration(j.MaxQueueAge).Seconds()
			js.BackpressureMode = cmp.Or(j.BackpressureMode, pipeline.BackpressurePause)
		}
		if j.Source != nil {
			js.SourceKind, js.Schedule, js.WebhookPath = j.Source.Kind, j.Source.Schedule, j.Source.WebhookPath
		}
		for i := range j.Outputs {
			o := specs.Output{OutputIndex: i, DatasetUUID: outputUUID(j.Name, i)}
			if p := publishedAs(doc, j.Name, i); p != nil {
				o.DatasetName = p.Dataset
				if p.WriteMode == pipeline.WriteBuffered {
					o.DatasetUUID = byProducer[bufferedProducer(p.Dataset)].UUID
				}
			}
			js.Outputs = append(js.Outputs, o)
		}
		for _, in := range j.Inputs {
			is := specs.Input{}
			if len(in.Where) > 0 {
				is.Where, _ = json.Marshal(in.Where)
			}
			switch name := in.From.Dataset; {
			case name == "":
				is.DatasetUUID = outputUUID(in.From.Job, *in.From.Output)
				if p := publishedAs(doc, in.From.Job, *in.From.Output); p != nil {
					is.DatasetName = p.Dataset
					if p.WriteMode == pipeline.WriteBuffered {
						is.DatasetUUID = byProducer[bufferedProducer(p.Dataset)].UUID
					}
				}
			case doc.Publish[name] != nil:
				p := doc.Publish[name]
				is.DatasetName = name
				if p.WriteMode == pipeline.WriteBuffered {
					is.DatasetUUID = byProducer[bufferedProducer(name)].UUID
				} else {
					is.DatasetUUID = outputUUID(p.From.Job, p.From.Output)
				}
			default:
				x := byProducer["name:"+name]
				if x == nil {
					return nil, fmt.Errorf("dataset %q vanished during the deploy", name)
				}
				is.DatasetName, is.DatasetUUID = name, x.UUID
			}
			js.Inputs = append(js.Inputs, is)
		}
		s.Jobs = append(s.Jobs, js)
	}
	return s, nil
}

// publishedAs is the publish entry naming output i of job: its direct entry, else the first
// buffered dataset (by name) it writes into.
func publishedAs(doc *pipeline.Document, job string, i int) *pipeline.Publish {
	if p := doc.PublishedAs(job, i); p != nil {
		return p
	}
	for _, name := range sortedKeys(doc.Publish) {
		if p := doc.Publish[name]; p.From.Job == job && p.From.Output == i {
			return p
		}
	}
	return nil
}

// incompatible is the refusal of tables that cannot serve their new schemas, by publish path.
func (d *deployment) incompatible(inc *IncompatibleTablesError) error {
	var problems []string
	for _, name := range sortedKeys(d.doc.Publish) {
		if p := d.doc.Publish[name]; p.WriteMode == pipeline.WriteBuffered {
			if reason, ok := inc.Reasons[d.planned[bufferedProducer(name)]]; ok {
				problems = append(problems, fmt.Sprintf("publish.%s.schema: %s", name, reason))
			}
		}
	}
	return &dispatch.ValidationError{Errors: problems}
}
