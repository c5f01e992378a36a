package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
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
	// Building: the version is being built beside the active one (see planBuild); Abandoned
	// names the build it replaced, if any.
	Building  bool
	Abandoned string
	// Canceled counts the jobs of an abandoned build that the deploy canceled.
	Canceled int
}

// outputProducer is the producer key of output i of job j of pipeline p.
func outputProducer(p, j string, i int) string {
	return "output:" + p + "/" + j + "/" + strconv.Itoa(i)
}

func bufferedProducer(name string) string { return "buffered:" + name }

// DatasetTable is a buffered dataset's table as a deploy wants it.
type DatasetTable struct {
	DatasetUUID string
	Schema      *pipeline.Schema
	// ClearTenant, when set, is the tenant whose rows the deploy removes: the dataset is an
	// output of a source job whose bootstrap.reset_outputs runs.
	ClearTenant string
	// RetireVersion, when set, is the dataset version the reset replaces: from the data
	// database's commit on, batches of it are no longer loaded (dataset.Table.RetireVersion).
	RetireVersion string
}

// IncompatibleTablesError: tables that cannot serve the schemas a deploy gives their datasets.
type IncompatibleTablesError struct {
	Reasons map[string]string // by dataset uuid: every reason, in the data database's words
}

func (e *IncompatibleTablesError) Error() string {
	var b strings.Builder
	for i, id := range sortedKeys(e.Reasons) {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString("dataset " + id + ": " + e.Reasons[id])
	}
	return b.String()
}

func (e *IncompatibleTablesError) Unwrap() error { return ErrIncompatibleSchema }

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
	tenant := who.Tenant
	existing, more, err := dp.checkAgainstTenant(ctx, tenant, doc)
	if err != nil {
		return nil, err
	}
	if dp.afterDeployCheck != nil {
		dp.afterDeployCheck()
	}
	if len(more) > 0 {
		return nil, &dispatch.ValidationError{Errors: more.Strings()}
	}
	// The resets run when this deploy makes its version the active one.
	resetJobs := doc.ResetJobs()
	activates := true
	if len(resetJobs) > 0 {
		p, err := dp.store.PipelineGet(ctx, tenant, doc.Name)
		switch {
		case err == nil:
			activates = p.ActiveVersion != doc.Version
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	// The buffered datasets' tables, with the uuid of each: its own, or a new one.
	var tables []DatasetTable
	planned := map[string]string{}  // producer key → uuid
	names := map[string]string{}    // uuid → dataset name
	retiring := map[string]string{} // uuid → the version its reset retires
	if dp.cfg.Tables != nil {
		for _, name := range sortedKeys(doc.Publish) {
			p := doc.Publish[name]
			if p.WriteMode != pipeline.WriteBuffered || p.Schema == nil {
				continue
			}
			id := uuid.NewString()
			x := existing[bufferedProducer(name)]
			if x != nil {
				id = x.UUID
			}
			planned[bufferedProducer(name)], names[id] = id, name
			table := DatasetTable{DatasetUUID: id, Schema: p.Schema}
			if activates && resetJobs[p.From.Job] {
				table.ClearTenant = tenant
				if x != nil {
					// resetOutputs checks that it is still the current version.
					table.RetireVersion = x.CurrentVersion
					retiring[id] = x.CurrentVersion
				}
			}
			tables = append(tables, table)
		}
	}
	var res *DeployResult
	control := func(cleared map[string]int64) error {
		return dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
			res = &DeployResult{Version: doc.Version}
			spec, err := dp.storeDatasets(ctx, tx, c, tenant, doc, existing, planned)
			if err != nil {
				return err
			}
			p, err := tx.PipelineGet(ctx, tenant, doc.Name)
			switch {
			case errors.Is(err, store.ErrNotFound):
				p = &store.Pipeline{Tenant: tenant, Name: doc.Name, CreatedAt: c.Now()}
			case err != nil:
				return err
			}
			stored, err := tx.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: doc.Name, Version: doc.Version})
			switch {
			case errors.Is(err, store.ErrNotFound):
				stored = nil
			case err != nil:
				return err
			case stored.Version == p.BuildingVersion:
				// Deployed again while it builds: it goes on building.
				res.Building, res.Pipeline = true, p
				return nil
			case stored.State == store.VersionAbandoned && who.Activate != ActivateImmediate:
				return &dispatch.ConflictError{Code: "pipeline_version_abandoned", Message: fmt.Sprintf(
					"pipeline %q version %s was abandoned while it was built; deploy a changed document to build it again, or deploy it with activate=immediate",
					doc.Name, doc.Version)}
			}
			// A new version whose change materializes differently is built beside the active one,
			// unless the deployer asks for it at once or the document resets outputs (the reset
			// is its rebuild, when it activates).
			if stored == nil && p.ActiveVersion != "" && who.Activate != ActivateImmediate && len(resetJobs) == 0 {
				base, err := dp.specs.Get(ctx, tx, tenant, doc.Name, p.ActiveVersion)
				if err != nil {
					return err
				}
				if spec.Build = planBuild(base, spec, bufferedOutputs(doc, spec)); spec.Build != nil {
					spec.Build.Activate = cmp.Or(who.Activate, ActivateManual)
				}
			}
			specJSON, _ := json.Marshal(spec)
			if res.Created, err = tx.PipelineVersionInsert(ctx, &store.PipelineVersion{Tenant: tenant, Pipeline: doc.Name,
				Version: doc.Version, Document: body, ContentType: contentType, Spec: specJSON, CreatedAt: c.Now()}); err != nil {
				return err
			}
			if res.Created {
				if err := tx.ConsumerInsertMany(ctx, spec.Consumers()); err != nil {
					return err
				}
			}
			switch {
			case res.Created && spec.Build != nil:
				return dp.startBuild(ctx, tx, c, p, spec, res)
			case spec.Build != nil:
				return errDeployRaced // a concurrent deploy stored the version first: see what it did
			}
			res.Activated = p.ActiveVersion != doc.Version
			if len(resetJobs) > 0 && res.Activated != activates {
				return errDeployRaced // the rows to clear were chosen for another active version
			}
			if res.Activated {
				// A build under way is abandoned: the version deployed replaces it. The datasets
				// the pipeline writes get the versions they had when the version was last
				// replaced, if it was (a version rolled back and deployed again).
				res.Abandoned = p.BuildingVersion
				if err := dp.abandonBuild(ctx, tx, c, p); err != nil {
					return err
				}
				if stored != nil {
					err = dp.restore(ctx, tx, c, p, doc.Version)
				} else {
					err = dp.switchPointers(ctx, tx, c, p, nil)
				}
				if err != nil {
					return err
				}
			}
			p.ActiveVersion, p.UpdatedAt = doc.Version, c.Now()
			if res.Activated {
				if err := tx.PipelinePut(ctx, p); err != nil {
					return err
				}
				// A version rolled back before and deployed again is a deployed version again.
				if err := tx.PipelineVersionSetState(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: doc.Name, Version: doc.Version},
					store.VersionDeployed); err != nil {
					return err
				}
				if err := dp.resetOutputs(ctx, tx, c, who, doc, spec, cleared, retiring); err != nil {
					return err
				}
			}
			res.Pipeline = p
			return nil
		})
	}
	if len(tables) == 0 {
		if err := control(nil); err != nil {
			return nil, err
		}
		return res, nil
	}
	stored := false
	err = dp.cfg.Tables.EnsureTables(ctx, tables, func(cleared map[string]int64) error {
		if err := control(cleared); err != nil {
			return err
		}
		stored = true
		return nil
	})
	var inc *IncompatibleTablesError
	switch {
	case errors.As(err, &inc):
		var problems []string
		for _, name := range sortedKeys(doc.Publish) {
			if p := doc.Publish[name]; p.WriteMode == pipeline.WriteBuffered {
				if reason, ok := inc.Reasons[planned[bufferedProducer(name)]]; ok {
					problems = append(problems, fmt.Sprintf("publish.%s.schema: %s", name, reason))
				}
			}
		}
		return nil, &dispatch.ValidationError{Errors: problems}
	case err != nil && stored:
		return nil, fmt.Errorf("pipeline %q version %s is active, but its datasets' tables (and the rows its resets remove) were not committed: %w",
			doc.Name, doc.Version, err)
	case err != nil:
		return nil, err
	}
	return res, nil
}

// checkAgainstTenant checks what a document cannot check alone: that the datasets it reads from
// other pipelines exist and its filters use their allowed fields, and that the names it publishes
// are not another producer's. It returns the tenant's datasets the document names or produces,
// by producer key and by name.
func (dp *Plane) checkAgainstTenant(ctx context.Context, tenant string, doc *pipeline.Document) (map[string]*store.Dataset, pipeline.Problems, error) {
	st := dp.store
	existing := map[string]*store.Dataset{}
	var producers []string
	for _, j := range doc.Jobs {
		for i := range j.Outputs {
			producers = append(producers, outputProducer(doc.Name, j.Name, i))
		}
	}
	for name, p := range doc.Publish {
		if p.WriteMode == pipeline.WriteBuffered {
			producers = append(producers, bufferedProducer(name))
		}
	}
	ds, err := st.DatasetListByProducer(ctx, tenant, producers)
	if err != nil {
		return nil, nil, err
	}
	for _, x := range ds {
		existing[x.Producer] = x
	}
	var problems pipeline.Problems
	bad := func(path, format string, args ...any) {
		problems = append(problems, pipeline.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	byName := func(name string) (*store.Dataset, error) {
		if x, ok := existing["name:"+name]; ok {
			return x, nil
		}
		x, err := st.DatasetGetByName(ctx, tenant, name)
		if errors.Is(err, store.ErrNotFound) {
			x, err = nil, nil
		}
		existing["name:"+name] = x
		return x, err
	}
	for _, name := range sortedKeys(doc.Publish) {
		p := doc.Publish[name]
		path := "publish." + name
		held, err := byName(name)
		if err != nil {
			return nil, nil, err
		}
		want := outputProducer(doc.Name, p.From.Job, p.From.Output)
		if p.WriteMode == pipeline.WriteBuffered {
			want = bufferedProducer(name)
		}
		if held != nil && held.Producer != want {
			bad(path, "dataset %q is already produced by %s", name, describeProducer(held))
			continue
		}
		if mine := existing[want]; mine != nil && mine.Name != "" && mine.Name != name {
			bad(path+".from", "output %d of job %q is already published as %q", p.From.Output, p.From.Job, mine.Name)
		}
	}
	var lookupErr error
	problems = append(problems, doc.CheckExternal(func(name string) (pipeline.Allowlist, bool) {
		x, err := byName(name)
		if err != nil {
			lookupErr = err
		}
		if x == nil {
			return pipeline.Allowlist{}, false
		}
		return reads.Allowlist(x), true
	})...)
	if lookupErr != nil {
		return nil, nil, lookupErr
	}
	return existing, problems, nil
}

func describeProducer(x *store.Dataset) string {
	if x.Pipeline == "" {
		return "buffered writers"
	}
	return fmt.Sprintf("pipeline %q job %q output %d", x.Pipeline, x.Job, x.OutputIndex)
}

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
		return nil, err
	}
	if err := tx.DatasetVersionInsertMany(ctx, versions); err != nil {
		return nil, err
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
		return nil, err
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
			return nil, err
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

// PipelineView is a pipeline with its active version's spec and its jobs' task counts.
type PipelineView struct {
	Pipeline *store.Pipeline
	Active   *store.PipelineVersion
	Spec     *specs.Pipeline
	Counts   []*store.PipelineTaskCount
	// Backpressure is the state of each job that has backpressure limits or holds routings.
	Backpressure map[string]*BackpressureView
	// Build is the build of the version a changed deploy is building beside the active one; nil
	// when none is.
	Build *BuildView
}

// BackpressureView is the backpressure state of one pipeline job.
type BackpressureView struct {
	// State is "paused" while the job holds routings or its backlog is at its limits (the next
	// event is held), else "open".
	State              string  `json:"state"`
	Mode               string  `json:"mode"`
	MaxQueueDepth      int     `json:"max_queue_depth,omitempty"`
	MaxQueueAgeSeconds float64 `json:"max_queue_age_seconds,omitempty"`
	LowWater           int     `json:"low_water,omitempty"`
	// Depth is the job's backlog: its pending tasks, ready or backing off.
	Depth int `json:"depth"`
	// OldestReadyAt is when its oldest ready task became ready.
	OldestReadyAt *time.Time `json:"oldest_ready_at"`
	// Held counts the routings held, HeldEvents the events they cover: more than Held once
	// coalesce joined events of one scope.
	Held         int        `json:"held"`
	HeldEvents   int        `json:"held_events"`
	OldestHeldAt *time.Time `json:"oldest_held_at"`
	PausedSince  *time.Time `json:"paused_since"`
}

// PipelineJobView is one job of a pipeline view.
type PipelineJobView struct {
	Name       string         `json:"name"`
	Activation string         `json:"activation"`
	Runtime    string         `json:"runtime"`
	Operator   string         `json:"operator"`
	Queue      string         `json:"queue"`
	Source     string         `json:"source,omitempty"`
	Secrets    []string       `json:"secrets"`
	Outputs    []specs.Output `json:"outputs"`
	Inputs     []specs.Input  `json:"inputs"`
	Counts     map[string]int `json:"counts"`
	// Backpressure is set for a job with max_queue_depth or max_queue_age, or that holds
	// routings.
	Backpressure *BackpressureView `json:"backpressure,omitempty"`
	// WaitingFor says why the job's tasks do not run, when the server knows: a lambda job whose
	// operator has no push target. Set by the API, which knows the targets.
	WaitingFor string `json:"waiting_for,omitempty"`
}

// Jobs lists the active version's jobs with their outputs' datasets and task counts: routed
// (every task ever created for the job), waiting, pending, running, completed, failed, canceled.
func (v *PipelineView) Jobs() []PipelineJobView {
	out := make([]PipelineJobView, 0, len(v.Spec.Jobs))
	for _, j := range v.Spec.Jobs {
		jv := PipelineJobView{Name: j.Name, Activation: j.Activation, Runtime: j.Runtime, Operator: j.Operator,
			Queue: j.Queue, Source: j.SourceKind, Secrets: append([]string{}, j.Secrets...), Outputs: j.Outputs, Inputs: j.Inputs,
			Counts: map[string]int{"routed": 0, "waiting": 0, "pending": 0, "running": 0, "completed": 0, "failed": 0, "canceled": 0}}
		if jv.Outputs == nil {
			jv.Outputs = []specs.Output{}
		}
		if jv.Inputs == nil {
			jv.Inputs = []specs.Input{}
		}
		jv.Backpressure = v.Backpressure[j.Name]
		for _, c := range v.Counts {
			if c.Job == j.Name {
				jv.Counts[string(c.Status)] += c.Count
				jv.Counts["routed"] += c.Count
			}
		}
		out = append(out, jv)
	}
	return out
}

// LambdaOnPull reports whether a lambda job's tasks of operator op are handed to pull workers
// (Config.LambdaOnPull).
func (dp *Plane) LambdaOnPull(op string) bool {
	return dp.cfg.LambdaOnPull != nil && dp.cfg.LambdaOnPull(op)
}

// GetPipeline returns a tenant's pipeline with its active version.
func (dp *Plane) GetPipeline(ctx context.Context, tenant, name string) (*PipelineView, error) {
	p, err := dp.store.PipelineGet(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrPipelineNotFound
	}
	if err != nil {
		return nil, err
	}
	v, err := dp.store.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: p.ActiveVersion})
	if err != nil {
		return nil, err
	}
	spec, err := specs.Decode(v)
	if err != nil {
		return nil, err
	}
	counts, err := dp.store.PipelineTaskCounts(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	bp, err := dp.backpressure(ctx, spec)
	if err != nil {
		return nil, err
	}
	view := &PipelineView{Pipeline: p, Active: v, Spec: spec, Counts: counts, Backpressure: bp}
	if p.BuildingVersion != "" {
		bv, err := dp.store.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: name, Version: p.BuildingVersion})
		if err != nil {
			return nil, err
		}
		bs, err := specs.Decode(bv)
		if err != nil {
			return nil, err
		}
		if view.Build, err = dp.buildView(ctx, dp.store, bv, bs); err != nil {
			return nil, err
		}
	}
	return view, nil
}

// backpressure reads the backpressure state of spec's jobs that have limits or hold routings.
func (dp *Plane) backpressure(ctx context.Context, spec *specs.Pipeline) (map[string]*BackpressureView, error) {
	held, err := dp.store.HeldRoutingSummary(ctx, store.HeldSummaryParams{Tenant: spec.Tenant, Pipeline: spec.Name})
	if err != nil {
		return nil, err
	}
	byJob := map[string]*store.HeldSummary{}
	for _, h := range held {
		byJob[h.Job] = h
	}
	now := dp.clock.Now()
	out := map[string]*BackpressureView{}
	for _, j := range spec.Jobs {
		lim, h := j.Limits(), byJob[j.Name]
		if !lim.Set() && h == nil {
			continue
		}
		b, err := dp.store.PipelineJobBacklog(ctx, store.PipelineJobKey{Tenant: spec.Tenant, Pipeline: spec.Name, Job: j.Name}, j.TaskQueue(), now)
		if err != nil {
			return nil, err
		}
		v := &BackpressureView{State: "open", Mode: cmp.Or(j.BackpressureMode, pipeline.BackpressurePause),
			MaxQueueDepth: lim.Depth, MaxQueueAgeSeconds: lim.Age.Seconds(), LowWater: lim.LowWater(),
			Depth: b.Depth, OldestReadyAt: timePtr(b.OldestReadyAt)}
		if h != nil {
			v.Held, v.HeldEvents, v.OldestHeldAt, v.PausedSince = h.Held, h.Events, timePtr(h.OldestHeldAt), timePtr(h.PausedSince)
		}
		if h != nil || lim.Full(b, now) {
			v.State = "paused"
		}
		out[j.Name] = v
	}
	return out, nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// ListPipelines lists a tenant's pipelines.
func (dp *Plane) ListPipelines(ctx context.Context, tenant string) ([]*store.Pipeline, error) {
	return dp.store.PipelineList(ctx, tenant)
}

// PipelineVersions lists a pipeline's versions, newest first.
func (dp *Plane) PipelineVersions(ctx context.Context, tenant, name string) ([]*store.PipelineVersion, error) {
	if _, err := dp.store.PipelineGet(ctx, tenant, name); errors.Is(err, store.ErrNotFound) {
		return nil, ErrPipelineNotFound
	} else if err != nil {
		return nil, err
	}
	return dp.store.PipelineVersionList(ctx, tenant, name)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
