package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// MaxPipelineBytes is the largest pipeline document a deploy accepts.
const MaxPipelineBytes = 1 << 20

// ErrPipelineNotFound: the tenant has no pipeline (or version) of that name.
var ErrPipelineNotFound = errors.New("pipeline not found")

// ErrPipelineVersionNotFound: the tenant's pipeline has no version of that name.
var ErrPipelineVersionNotFound = errors.New("pipeline version not found")

// DeployResult says what a deploy did.
type DeployResult struct {
	Pipeline *store.Pipeline
	Version  string
	Created  bool // a new version was stored (false: the same text was deployed before)
	// Activated: the version became the active one (false: it already was, or it is building).
	Activated bool
	// Building: the version is being built beside the active one (see specs.PlanBuild); Abandoned
	// names the build it replaced, if any.
	Building  bool
	Abandoned string
	// Canceled counts the jobs of an abandoned build that the deploy canceled.
	Canceled int
}

// errDeployRaced: a concurrent deploy created a buffered dataset of the document first, so the
// table this deploy made for it is not the dataset's. The deploy starts over.
var errDeployRaced = errors.New("a concurrent deploy created a dataset of the document first")

// deployAttempts bounds how often a deploy starts over after losing a race for its datasets.
const deployAttempts = 3

// Deploy validates a pipeline document and stores it as the pipeline's active version. Every
// problem, in the document or against the tenant's other pipelines' datasets, is reported in one
// dispatch.ValidationError and nothing is stored. The same content deployed again creates no
// version; if it is an earlier version, it becomes the active one again. Whether a document is
// valid depends on the document and the tenant's stored pipelines only, never on the flags of
// the replica that answers (a lambda job's operator need not have a push target yet).
func (dp *Plane) Deploy(ctx context.Context, tenant string, body []byte, contentType string) (*DeployResult, error) {
	return dp.DeployBy(ctx, Deployer{Tenant: tenant}, body, contentType)
}

// Deployer is who deploys: the tenant, and the id of the API key its request was authenticated
// by ("" when none), which the history of output resets records; and how the version takes over
// when its change needs a build: Activate is ActivateManual (""), ActivateWhenReady or
// ActivateImmediate.
type Deployer struct {
	Tenant   string
	APIKey   string
	Activate string
}

// DeployBy is Deploy on behalf of who. When the deploy activates its version, the outputs of
// every source job with bootstrap.reset_outputs are reset in the same transactions (see
// resetOutputs).
func (dp *Plane) DeployBy(ctx context.Context, who Deployer, body []byte, contentType string) (*DeployResult, error) {
	switch who.Activate {
	case "", ActivateManual, ActivateWhenReady, ActivateImmediate:
	default:
		return nil, &dispatch.InvalidError{Message: fmt.Sprintf("activate must be %s, %s or %s, got %q",
			ActivateManual, ActivateWhenReady, ActivateImmediate, who.Activate)}
	}
	if len(body) > MaxPipelineBytes {
		return nil, &dispatch.InvalidError{Message: fmt.Sprintf("a pipeline document is at most %d bytes", MaxPipelineBytes)}
	}
	doc, problems := pipeline.Parse(body, contentType)
	if doc == nil || len(problems) > 0 {
		return nil, &dispatch.ValidationError{Errors: problems.Strings()}
	}
	// A deploy that lost a race for one of its datasets (errDeployRaced) or for a dataset's name
	// (store.ErrConflict) starts over: checked again, it sees what the other deploy stored.
	for attempt := 1; ; attempt++ {
		res, err := dp.deploy(ctx, who, body, contentType, doc)
		raced := errors.Is(err, errDeployRaced) || errors.Is(err, store.ErrConflict)
		switch {
		case !raced && err == nil && res.Abandoned != "":
			// The build the deploy replaced stops: its tasks that have not ended are canceled.
			n, err := dp.cancelTasks(ctx, who.Tenant, doc.Name, res.Abandoned, "pipeline_build_abandoned", every)
			res.Canceled = n
			if err != nil {
				return res, fmt.Errorf("pipeline %s version %s is deployed, but canceling the build it replaced failed: %w", doc.Name, doc.Version, err)
			}
			return res, nil
		case !raced && err == nil && res.Activated && !res.Created:
			// An earlier version deployed again gets its datasets back: what an activation
			// canceled of it runs again (see ResumeReplaced; the builds pass retries it).
			if _, err := dp.ResumeReplaced(ctx); err != nil {
				dp.log.WarnContext(ctx, "resuming what an activation canceled failed; the next builds pass retries", "pipeline", doc.Name, "err", err)
			}
			return res, nil
		case !raced:
			return res, err
		case attempt == deployAttempts:
			return nil, &dispatch.ValidationError{Errors: []string{"publish: a dataset name was taken by another deploy at the same time; deploy again"}}
		}
	}
}

// deploy is one try of Deploy, in this order:
//
//  1. Check the document against the tenant (reads only). Any problem refuses the deploy here,
//     before anything is written.
//  2. Open the data database's transaction (EnsureTables), which locks the buffered datasets'
//     tables, plans every table change, checks them all (a schema a table cannot serve refuses
//     the deploy, every such dataset listed, nothing changed) and makes them, uncommitted. A
//     dataset the document creates gets its uuid here, before it exists in the store.
//  3. With that transaction open, run the store's transaction: datasets, version, activation.
//     It holds no DDL, so the store's write lock is held as briefly as for any other write, and
//     other tenants' writes do not wait for a table to be built (on SQLite the store has one
//     writer, which a transaction building tables would hold for as long as its indexes take).
//  4. Commit the data database's transaction only if the store's committed.
//
// So a refused or failed deploy leaves the data database as it was: a problem of the document,
// a table that cannot serve its new schema, or a store transaction that fails (a dataset name
// taken at the same time, say) all roll the table changes back. The locks held from 2 to 4
// order the deploys of one dataset, so the schema the store records for it is the one its table
// was last given. A concurrent deploy that created a dataset of the document first, under
// another uuid, is found when the store's transaction reads the datasets back (the table this
// deploy made is then not the dataset's): the deploy rolls back and starts over, and then sees
// the dataset as existing.
//
// A deploy that activates its version resets the outputs of its source jobs with
// bootstrap.reset_outputs: step 2 removes the tenant's rows of their buffered datasets and
// retires the versions those rows were of, so that no batch of them loads into the emptied
// tables, and step 3 records the reset (resetOutputs). Whether the deploy activates its version,
// and the buffered datasets' current versions, are read before step 2 and checked again in step
// 3; a deploy that finds one changed meanwhile starts over.
//
// What remains is the commit of step 4 failing after the store's committed: the version is then
// active while its tables lag behind. The changes were checked under the locks, so nothing in
// the tables contradicts them; the sink ensures a dataset's table from the store's schema before
// each load, and deploying the document again makes them too. A reset's rows are then still
// there although its record says they were removed: the deploy's error says so.
func (dp *Plane) deploy(ctx context.Context, who Deployer, body []byte, contentType string, doc *pipeline.Document) (*DeployResult, error) {
	d := &deployment{dp: dp, who: who, body: body, contentType: contentType, doc: doc}
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	d.planTables()
	if len(d.tables) == 0 {
		if err := d.store(ctx, nil); err != nil {
			return nil, err
		}
		return d.res, nil
	}
	stored := false
	err := dp.cfg.Tables.EnsureTables(ctx, d.tables, func(cleared map[string]int64) error {
		if err := d.store(ctx, cleared); err != nil {
			return err
		}
		stored = true
		return nil
	})
	var inc *IncompatibleTablesError
	switch {
	case errors.As(err, &inc):
		return nil, d.incompatible(inc)
	case err != nil && stored:
		return nil, fmt.Errorf("pipeline %q version %s is active, but its datasets' tables (and the rows its resets remove) were not committed: %w",
			doc.Name, doc.Version, err)
	case err != nil:
		return nil, err
	}
	return d.res, nil
}

// deployment is one try of a deploy: the document, what it found of the tenant, the tables it
// plans, and what it did.
type deployment struct {
	dp          *Plane
	who         Deployer
	body        []byte
	contentType string
	doc         *pipeline.Document

	existing  map[string]*store.Dataset // the tenant's datasets the document names or produces (checkAgainstTenant)
	bundles   map[string]*wire.Bundle   // the bundle each job that runs one runs, pinned (pinBundles)
	resetJobs map[string]bool           // the source jobs with bootstrap.reset_outputs
	activates bool                      // the deploy makes its version the active one (read before the tables)

	tables   []DatasetTable    // the buffered datasets' tables
	planned  map[string]string // producer key → uuid
	retiring map[string]string // uuid → the version its reset retires

	res *DeployResult
}

// check is step 1: the document against the tenant, and whether the deploy activates its version
// (its resets run only then).
func (d *deployment) check(ctx context.Context) error {
	existing, more, err := d.dp.checkAgainstTenant(ctx, d.who.Tenant, d.doc)
	if err != nil {
		return err
	}
	pins, bad, err := d.pinBundles(ctx)
	more = append(more, bad...)
	if err != nil {
		return err
	}
	if d.dp.afterDeployCheck != nil {
		d.dp.afterDeployCheck()
	}
	if len(more) > 0 {
		return &dispatch.ValidationError{Errors: more.Strings()}
	}
	d.existing, d.bundles, d.resetJobs, d.activates = existing, pins, d.doc.ResetJobs(), true
	if len(d.resetJobs) > 0 {
		p, err := d.dp.store.PipelineGet(ctx, d.who.Tenant, d.doc.Name)
		switch {
		case err == nil:
			d.activates = p.ActiveVersion != d.doc.Version
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("pipeline %s: %w", d.doc.Name, err)
		}
	}
	return nil
}

// planTables plans the buffered datasets' tables for step 2, with the uuid of each: its own, or a
// new one; a table of a dataset a reset clears names the tenant and the version it retires.
func (d *deployment) planTables() {
	d.planned, d.retiring = map[string]string{}, map[string]string{}
	if d.dp.cfg.Tables == nil {
		return
	}
	for _, name := range sortedKeys(d.doc.Publish) {
		p := d.doc.Publish[name]
		if p.WriteMode != pipeline.WriteBuffered || p.Schema == nil {
			continue
		}
		id := uuid.NewString()
		x := d.existing[bufferedProducer(name)]
		if x != nil {
			id = x.UUID
		}
		d.planned[bufferedProducer(name)] = id
		table := DatasetTable{DatasetUUID: id, Schema: p.Schema}
		if d.activates && d.resetJobs[p.From.Job] {
			table.ClearTenant = d.who.Tenant
			if x != nil {
				// resetOutputs checks that it is still the current version.
				table.RetireVersion = x.CurrentVersion
				d.retiring[id] = x.CurrentVersion
			}
		}
		d.tables = append(d.tables, table)
	}
}

// store is step 3, the store's transaction: the datasets, the version, and then either its build
// or its activation. cleared counts the rows step 2 removed for resets, by dataset uuid.
func (d *deployment) store(ctx context.Context, cleared map[string]int64) error {
	return d.dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		tenant, doc := d.who.Tenant, d.doc
		d.res = &DeployResult{Version: doc.Version}
		spec, err := d.dp.storeDatasets(ctx, tx, c, tenant, doc, d.existing, d.planned)
		if err != nil {
			return err
		}
		d.pin(spec)
		p, err := tx.PipelineGet(ctx, tenant, doc.Name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			p = &store.Pipeline{Tenant: tenant, Name: doc.Name, CreatedAt: c.Now()}
		case err != nil:
			return fmt.Errorf("pipeline %s: %w", doc.Name, err)
		}
		stored, err := tx.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: doc.Name, Version: doc.Version})
		switch {
		case errors.Is(err, store.ErrNotFound):
			stored = nil
		case err != nil:
			return fmt.Errorf("pipeline %s version %s: %w", doc.Name, doc.Version, err)
		case stored.Version == p.BuildingVersion:
			// Deployed again while it builds: it goes on building.
			d.res.Building, d.res.Pipeline = true, p
			return nil
		case stored.State == store.VersionAbandoned && d.who.Activate != ActivateImmediate:
			return &dispatch.ConflictError{Code: "pipeline_version_abandoned", Message: fmt.Sprintf(
				"pipeline %q version %s was abandoned while it was built; deploy a changed document to build it again, or deploy it with activate=immediate",
				doc.Name, doc.Version)}
		}
		if stored == nil {
			if err := d.planBuild(ctx, tx, p, spec); err != nil {
				return err
			}
		}
		if err := d.insertVersion(ctx, tx, c, spec); err != nil {
			return err
		}
		switch {
		case d.res.Created && spec.Build != nil:
			return d.dp.startBuild(ctx, tx, c, p, spec, d.res)
		case spec.Build != nil:
			return errDeployRaced // a concurrent deploy stored the version first: see what it did
		}
		return d.activate(ctx, tx, c, p, stored, spec, cleared)
	})
}

// planBuild decides whether a new version is built beside the active one: when its change
// materializes differently (specs.PlanBuild), unless the deployer asks for it at once or the document
// resets outputs (the reset is its rebuild, when it activates).
func (d *deployment) planBuild(ctx context.Context, tx store.Tx, p *store.Pipeline, spec *specs.Pipeline) error {
	if p.ActiveVersion == "" || d.who.Activate == ActivateImmediate || len(d.resetJobs) > 0 {
		return nil
	}
	base, err := d.dp.specs.Get(ctx, tx, p.Tenant, p.Name, p.ActiveVersion)
	if err != nil {
		return fmt.Errorf("pipeline %s version %s: plan its build: %w", p.Name, spec.Version, err)
	}
	if spec.Build = specs.PlanBuild(base, spec, bufferedOutputs(d.doc, spec)); spec.Build != nil {
		spec.Build.Activate = cmp.Or(d.who.Activate, ActivateManual)
	}
	return nil
}

// insertVersion stores the version with its spec and, when it is new, its consumers.
func (d *deployment) insertVersion(ctx context.Context, tx store.Tx, c *dispatch.Work, spec *specs.Pipeline) error {
	doc := d.doc
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("pipeline %s version %s: encode spec: %w", doc.Name, doc.Version, err)
	}
	if d.res.Created, err = tx.PipelineVersionInsert(ctx, &store.PipelineVersion{Tenant: d.who.Tenant, Pipeline: doc.Name,
		Version: doc.Version, Document: d.body, ContentType: d.contentType, Spec: specJSON, CreatedAt: c.Now()}); err != nil {
		return fmt.Errorf("pipeline %s version %s: %w", doc.Name, doc.Version, err)
	}
	if !d.res.Created {
		return nil
	}
	if err := tx.ConsumerInsertMany(ctx, spec.Consumers()); err != nil {
		return fmt.Errorf("pipeline %s version %s: store consumers: %w", doc.Name, doc.Version, err)
	}
	return nil
}

// activate makes the version the active one unless it already is. A build under way is
// abandoned: the version deployed replaces it. The datasets the pipeline writes get the versions
// they had when the version was last replaced, if it was (a version rolled back and deployed
// again), and the outputs of its reset jobs are reset.
func (d *deployment) activate(ctx context.Context, tx store.Tx, c *dispatch.Work, p *store.Pipeline, stored *store.PipelineVersion,
	spec *specs.Pipeline, cleared map[string]int64) error {
	doc, res := d.doc, d.res
	res.Activated = p.ActiveVersion != doc.Version
	if len(d.resetJobs) > 0 && res.Activated != d.activates {
		return errDeployRaced // the rows to clear were chosen for another active version
	}
	res.Pipeline = p
	if !res.Activated {
		return nil
	}
	res.Abandoned = p.BuildingVersion
	if err := d.dp.abandonBuild(ctx, tx, c, p); err != nil {
		return err
	}
	var err error
	if stored != nil {
		err = d.dp.restore(ctx, tx, c, p, doc.Version)
	} else {
		err = d.dp.switchPointers(ctx, tx, c, p, nil)
	}
	if err != nil {
		return fmt.Errorf("activate version %s: %w", doc.Version, err)
	}
	p.ActiveVersion, p.UpdatedAt = doc.Version, c.Now()
	if err := tx.PipelinePut(ctx, p); err != nil {
		return fmt.Errorf("pipeline %s: %w", doc.Name, err)
	}
	// A version rolled back before and deployed again is a deployed version again.
	if err := tx.PipelineVersionSetState(ctx, store.PipelineVersionKey{Tenant: p.Tenant, Pipeline: doc.Name, Version: doc.Version},
		store.VersionDeployed); err != nil {
		return fmt.Errorf("pipeline %s version %s: %w", doc.Name, doc.Version, err)
	}
	return d.dp.resetOutputs(ctx, tx, c, d.who, doc, spec, cleared, d.retiring)
}
