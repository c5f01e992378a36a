package dataplane_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dataset/datasettest"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// deployTables is the data database as a deploy sees it (dataplane.DatasetDB). before, when set,
// runs once the tables' changes are made, before the deploy's store transaction.
type deployTables struct {
	dataplane.DatasetDB
	before func()
}

func (t *deployTables) EnsureTables(ctx context.Context, tables []dataplane.DatasetTable, during func(map[string]int64) error) error {
	return t.DatasetDB.EnsureTables(ctx, tables, func(cleared map[string]int64) error {
		if t.before != nil {
			t.before()
		}
		return during(cleared)
	})
}

// dataEnv is an env whose dispatcher keeps buffered datasets' tables in a data database of the
// store's driver.
type dataEnv struct {
	*env
	data   *dataset.DB
	url    string // for datasettest.Dump
	tables *deployTables
}

// forEachDataDriver runs fn as a parallel subtest per driver: SQLite store and data database, or
// PostgreSQL ones.
func forEachDataDriver(t *testing.T, fn func(t *testing.T, e *dataEnv)) {
	t.Helper()
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			st := drv.Open(t)
			url := datasettest.URL(t, drv.Name)
			data, err := dataset.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { data.Close() })
			tables := &deployTables{DatasetDB: dataplane.DatasetDB{DB: data}}
			e := newEnv(t, st, func(c *dataplane.Config) { c.Tables = tables })
			fn(t, &dataEnv{env: e, data: data, url: url, tables: tables})
		})
	}
}

// maximalDoc is the largest document a deploy accepts: every limit of a pipeline document met.
func maximalDoc(name string) string {
	return pipelinetest.SizedDoc(name, pipelinetest.Size{Buffered: pipeline.MaxBufferedDatasets, Columns: pipeline.MaxColumns,
		Indexes: pipeline.MaxIndexes, KeyColumns: pipeline.MaxKeyColumns, Outputs: pipeline.MaxOutputs, Datasets: pipeline.MaxDatasets})
}

// deploy deploys doc for the tenant, failing the test on an error.
func (e *dataEnv) deploy(tenant, doc string) *dataplane.DeployResult {
	e.T.Helper()
	res, err := e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml")
	if err != nil {
		e.T.Fatalf("deploy: %v\n%s", err, doc)
	}
	return res
}

// refused deploys doc and returns the problems of its ValidationError, failing the test on any
// other outcome.
func (e *dataEnv) refused(tenant, doc string) []string {
	e.T.Helper()
	_, err := e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml")
	var v *dispatch.ValidationError
	if !errors.As(err, &v) {
		e.T.Fatalf("deploy: %v, want a ValidationError\n%s", err, doc)
	}
	return v.Errors
}

// bufferedDoc is a pipeline named name with one source job and the given buffered datasets:
// dataset name → flow-style schema.
func bufferedDoc(name string, datasets map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\njobs:\n  - {name: src, activation: source, runtime: ecs_platform, operator: op, outputs: 1, source: {kind: manual}}\npublish:\n", name)
	names := make([]string, 0, len(datasets))
	for n := range datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %s: {from: {job: src, output: 0}, write_mode: buffered, schema: %s}\n", n, datasets[n])
	}
	return b.String()
}

const (
	alertSchema = `{columns: [{name: key, type: string}, {name: severity, type: string}], unique: [key], indexes: [[severity]]}`
	// alertSchemaGrown adds an optional column, indexed: a change the table takes.
	alertSchemaGrown = `{columns: [{name: key, type: string}, {name: severity, type: string}, {name: extra, type: string}],` +
		` unique: [key], indexes: [[severity], [extra]]}`
	// alertSchemaRetyped changes severity's type: a change no table of alertSchema takes.
	alertSchemaRetyped = `{columns: [{name: key, type: string}, {name: severity, type: integer}], unique: [key], indexes: [[severity]]}`
)

const retypedProblem = `publish.%s.schema: column "severity" changes type from string to integer; a buffered dataset's table only gains optional columns`

// A deploy refused because one dataset's schema change cannot be made leaves the other datasets'
// tables as they were, though their changes could be made: the data database is exactly as
// before, and the active version deploys again.
func TestRefusedDeployChangesNoTable(t *testing.T) {
	t.Parallel()
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		v1 := bufferedDoc("alerts", map[string]string{"grows": alertSchema, "retyped": alertSchema})
		e.deploy(tenant, v1)
		before := datasettest.Dump(t, e.url)

		v2 := bufferedDoc("alerts", map[string]string{"grows": alertSchemaGrown, "retyped": alertSchemaRetyped,
			"fresh": alertSchema})
		problems := e.refused(tenant, v2)
		if after := datasettest.Dump(t, e.url); after != before {
			t.Fatalf("a refused deploy changed the data database:\n%s", datasettest.Diff(before, after))
		}
		if want := []string{fmt.Sprintf(retypedProblem, "retyped")}; !slices.Equal(problems, want) {
			t.Fatalf("problems %q, want %q", problems, want)
		}
		if _, err := e.Store.DatasetGetByName(e.Ctx, tenant, "fresh"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the refused deploy's new dataset: %v", err)
		}
		// Each incompatible dataset is named, in the order of their names.
		v3 := bufferedDoc("alerts", map[string]string{"grows": alertSchemaRetyped, "retyped": alertSchemaRetyped})
		if got, want := e.refused(tenant, v3), []string{fmt.Sprintf(retypedProblem, "grows"), fmt.Sprintf(retypedProblem, "retyped")}; !slices.Equal(got, want) {
			t.Fatalf("problems %q, want %q", got, want)
		}
		// The active version is served by the tables still: deploying it again changes nothing.
		if res := e.deploy(tenant, v1); res.Created || res.Activated {
			t.Errorf("deploying the active version again: %+v", res)
		}
		if after := datasettest.Dump(t, e.url); after != before {
			t.Fatalf("deploying the active version again changed the data database:\n%s", datasettest.Diff(before, after))
		}
		// A deploy that can be made is made, all of it.
		e.deploy(tenant, bufferedDoc("alerts", map[string]string{"grows": alertSchemaGrown, "retyped": alertSchema, "fresh": alertSchema}))
		tables := datasettest.Tables(t, e.url)
		for _, name := range []string{"grows", "retyped", "fresh"} {
			ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, name)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(tables, dataset.TableName(ds.UUID)) {
				t.Errorf("dataset %s has no table: %v", name, tables)
			}
		}
		if dump := datasettest.Dump(t, e.url); !strings.Contains(dump, `"extra"`) {
			t.Errorf("the added column is missing:\n%s", dump)
		}
	})
}

// Refused deploys that introduce buffered datasets create no table and record no schema, whether
// a schema of the document or the store's transaction refuses them.
func TestRefusedDeploysCreateNoTables(t *testing.T) {
	t.Parallel()
	var raced sync.Map // by test name: the race of the third deploy was run
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		e.deploy(tenant, bufferedDoc("alerts", map[string]string{"alerts": alertSchema}))
		before := datasettest.Dump(t, e.url)
		tablesBefore := datasettest.Tables(t, e.url)
		for i := range 2 {
			doc := bufferedDoc("alerts", map[string]string{"alerts": alertSchemaRetyped, fmt.Sprintf("new_%d", i): alertSchema})
			problems := e.refused(tenant, doc)
			if after := datasettest.Tables(t, e.url); !slices.Equal(after, tablesBefore) {
				t.Fatalf("tables %v after refused deploy %d, were %v", after, i, tablesBefore)
			}
			if want := []string{fmt.Sprintf(retypedProblem, "alerts")}; !slices.Equal(problems, want) {
				t.Fatalf("deploy %d: problems %q, want %q", i, problems, want)
			}
		}
		// A pipeline whose buffered dataset's name another deploy takes while this one runs: its
		// store transaction fails after its table was made.
		other := `name: other
jobs:
  - {name: src, activation: source, runtime: ecs_platform, operator: op, outputs: 1, source: {kind: manual}}
publish:
  taken: {from: {job: src, output: 0}}
`
		var fired atomic.Bool // not a sync.Once: the other deploy runs the hook too
		dataplane.SetAfterDeployCheck(e.dp, func() {
			if fired.CompareAndSwap(false, true) {
				raced.Store(t.Name(), true)
				e.deploy(tenant, other)
			}
		})
		_, err := e.dp.Deploy(e.Ctx, tenant, []byte(bufferedDoc("late", map[string]string{"taken": alertSchema})), "application/yaml")
		dataplane.SetAfterDeployCheck(e.dp, nil)
		var v *dispatch.ValidationError
		if !errors.As(err, &v) || !slices.Equal(v.Errors, []string{`publish.taken: dataset "taken" is already produced by pipeline "other" job "src" output 0`}) {
			t.Fatalf("a deploy that lost its dataset's name: %v", err)
		}
		if _, ok := raced.Load(t.Name()); !ok {
			t.Fatal("the concurrent deploy did not run")
		}
		if after := datasettest.Tables(t, e.url); !slices.Equal(after, tablesBefore) {
			t.Errorf("tables %v after three refused deploys, were %v", after, tablesBefore)
		}
		if after := datasettest.Dump(t, e.url); after != before {
			t.Fatalf("refused deploys changed the data database:\n%s", datasettest.Diff(before, after))
		}
		for _, name := range []string{"new_0", "new_1"} {
			if _, err := e.Store.DatasetGetByName(e.Ctx, tenant, name); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("dataset %s of a refused deploy: %v", name, err)
			}
		}
	})
}

// Two deploys of pipelines that create the same buffered dataset, at the same time: one creates
// it, the other starts over and finds it, and the dataset has one table.
func TestConcurrentDeploysOfOneBufferedDataset(t *testing.T) {
	t.Parallel()
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		doc := bufferedDoc("alerts", map[string]string{"alerts": alertSchema})
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { _, errs[i] = e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml") })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		ds, err := e.Store.DatasetGetByName(e.Ctx, tenant, "alerts")
		if err != nil {
			t.Fatal(err)
		}
		var ours []string
		for _, tb := range datasettest.Tables(t, e.url) {
			if strings.HasPrefix(tb, "ds_") {
				ours = append(ours, tb)
			}
		}
		if want := []string{dataset.TableName(ds.UUID)}; !slices.Equal(ours, want) {
			t.Fatalf("tables %v, want %v", ours, want)
		}
	})
}

// A deploy at every limit of a document does not hold the store's write lock while it builds its
// tables: while it holds its tables' changes, before its store transaction, another tenant's job
// is created (a deploy that held the lock would wait here for a job that waits for it). The
// figures are logged: how long the deploy took, and how long the other tenant's job submissions
// took before and during it; no duration is asserted.
func TestMaximalDeployDoesNotHoldAnotherTenantsSubmissions(t *testing.T) {
	t.Parallel()
	forEachDataDriver(t, func(t *testing.T, e *dataEnv) {
		submit := func() (time.Duration, error) {
			start := time.Now()
			_, err := e.D.CreateJob(e.Ctx, dispatch.CreateJobParams{Tenant: "other", Tasks: []lifecycle.TaskSpec{spec("a")}})
			return time.Since(start), err
		}
		var idle []time.Duration
		for range 20 {
			took, err := submit()
			if err != nil {
				t.Fatal(err)
			}
			idle = append(idle, took)
		}
		var once sync.Once
		e.tables.before = func() {
			once.Do(func() {
				type result struct {
					took time.Duration
					err  error
				}
				done := make(chan result, 1)
				go func() {
					took, err := submit()
					done <- result{took, err}
				}()
				select {
				case r := <-done:
					if r.err != nil {
						t.Errorf("another tenant's job: %v", r.err)
					}
					t.Logf("another tenant's job was created in %v while the deploy held its tables' changes", r.took)
				case <-time.After(30 * time.Second):
					t.Errorf("another tenant's job was not created in 30 s while the deploy held its tables' changes")
				}
			})
		}
		doc := maximalDoc("big")
		deployed := make(chan time.Duration)
		go func() {
			start := time.Now()
			if res, err := e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml"); err != nil || !res.Created {
				t.Errorf("deploy: %+v, %v", res, err)
			}
			deployed <- time.Since(start)
		}()
		var during []time.Duration
		var took time.Duration
	loop:
		for {
			d, err := submit()
			if err != nil {
				t.Errorf("another tenant's job: %v", err)
			}
			during = append(during, d)
			select {
			case took = <-deployed:
				break loop
			default:
			}
		}
		t.Logf("a deploy at every limit (%d bytes: %d buffered datasets of %d columns and %d indexes of %d columns, %d datasets in all) took %v",
			len(doc), pipeline.MaxBufferedDatasets, pipeline.MaxColumns, pipeline.MaxIndexes, pipeline.MaxKeyColumns, pipeline.MaxDatasets, took)
		t.Logf("another tenant's job submissions: before the deploy %s; during it %s", latencies(idle), latencies(during))
	})
}

// latencies summarizes durations: how many, their median and their maximum.
func latencies(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%d, median %v, max %v", len(s), s[len(s)/2].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}
