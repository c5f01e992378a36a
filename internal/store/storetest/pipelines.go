// Contract of pipelines: pipelines, versions, consumers and the jobs a pipeline starts.

package storetest

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// ---------------------------------------------------------------------------------------------
// Fixtures of the data plane

// pipelineJob is a job that routing or a source starts for a job of a pipeline version.
func pipelineJob(tenant, pipeline, version, job string) *store.Job {
	j := newJob(tenant)
	j.Name = pipeline + "." + job
	j.IdempotencyKey = "pipeline:" + pipeline + ":" + job + ":" + uuid.NewString()
	j.Pipeline, j.PipelineVersion, j.PipelineJob = pipeline, version, job
	return j
}

func getPipeline(t testing.TB, st store.Reader, tenant, name string) *store.Pipeline {
	t.Helper()
	p, err := st.PipelineGet(t.Context(), tenant, name)
	if err != nil {
		t.Fatalf("GetPipeline(%s, %s): %v", tenant, name, err)
	}
	return p
}

func putPipelines(t testing.TB, st store.Store, ps ...*store.Pipeline) {
	t.Helper()
	inTx(t, st, func(tx store.Tx) error {
		for _, p := range ps {
			if err := tx.PipelinePut(t.Context(), p); err != nil {
				return err
			}
		}
		return nil
	})
}

// insertVersion stores a pipeline version in its own transaction and returns
// PipelineVersionInsert's ok.
func insertVersion(t testing.TB, st store.Store, v *store.PipelineVersion) bool {
	t.Helper()
	var ok bool
	inTx(t, st, func(tx store.Tx) error {
		var err error
		ok, err = tx.PipelineVersionInsert(t.Context(), v)
		return err
	})
	return ok
}

// deployedVersion is a version of a pipeline as a deploy stores it.
func deployedVersion(tenant, pipeline, version string, deployed time.Time) *store.PipelineVersion {
	return &store.PipelineVersion{
		Tenant:      tenant,
		Pipeline:    pipeline,
		Version:     version,
		Document:    []byte("name: " + pipeline + "\njobs:\n  - name: load\n    operator: copy\n# " + tenant + " " + version + "\n"),
		ContentType: "application/yaml",
		Spec:        json.RawMessage(`{"tenant":"` + tenant + `","name":"` + pipeline + `","version":"` + version + `","jobs":[{"name":"load"}]}`),
		CreatedAt:   deployed,
	}
}

func pipelineNames(ps []*store.Pipeline) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Tenant + "/" + p.Name
	}
	return out
}

func versionNames(vs []*store.PipelineVersion) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Version
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Pipelines

// testPutPipelineInsertsAndActivates: PipelinePut inserts a pipeline, then moves its active
// version (a deploy, then a rollback) and when, keeping its creation; PipelineGet reads it back
// per tenant, inside a transaction too, and an unknown pipeline is ErrNotFound.
func testPutPipelineInsertsAndActivates(t *testing.T, st store.Store) {
	ctx := t.Context()
	etl := &store.Pipeline{Tenant: "acme", Name: "etl", ActiveVersion: "v-one", CreatedAt: at(-time.Hour), UpdatedAt: at(-time.Hour)}
	theirs := &store.Pipeline{Tenant: "globex", Name: "etl", ActiveVersion: "v-nine", CreatedAt: at(-2 * time.Hour), UpdatedAt: at(-time.Minute)}
	putPipelines(t, st, etl, theirs)
	checkSame(t, "inserted pipeline", etl, getPipeline(t, st, "acme", "etl"))
	checkSame(t, "another tenant's pipeline of the same name", theirs, getPipeline(t, st, "globex", "etl"))

	// A deploy activates a new version. The creation time a caller passes along does not move the
	// stored one: PipelinePut updates the active version (and when it changed) only.
	deploy := *etl
	deploy.ActiveVersion, deploy.UpdatedAt, deploy.CreatedAt = "v-two", at(time.Minute), at(time.Minute)
	putPipelines(t, st, &deploy)
	want := *etl
	want.ActiveVersion, want.UpdatedAt = "v-two", at(time.Minute)
	checkSame(t, "pipeline after a deploy", &want, getPipeline(t, st, "acme", "etl"))

	// A rollback, as the dispatcher does it: read inside the transaction, then put back.
	inTx(t, st, func(tx store.Tx) error {
		p, err := tx.PipelineGet(ctx, "acme", "etl")
		if err != nil {
			return err
		}
		if p.ActiveVersion != "v-two" {
			t.Errorf("GetPipeline inside a transaction: active version %q, want v-two", p.ActiveVersion)
		}
		p.ActiveVersion, p.UpdatedAt = "v-one", at(2*time.Minute)
		return tx.PipelinePut(ctx, p)
	})
	want.ActiveVersion, want.UpdatedAt = "v-one", at(2*time.Minute)
	checkSame(t, "pipeline after a rollback", &want, getPipeline(t, st, "acme", "etl"))
	checkSame(t, "another tenant's pipeline after the rollback", theirs, getPipeline(t, st, "globex", "etl"))

	for _, k := range [][2]string{{"acme", "nothing"}, {"initech", "etl"}, {"acme", "ETL"}} {
		if p, err := st.PipelineGet(ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetPipeline(%s, %s) = %v, %v; want ErrNotFound", k[0], k[1], p, err)
		}
	}
	inTx(t, st, func(tx store.Tx) error {
		if p, err := tx.PipelineGet(ctx, "initech", "etl"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetPipeline(initech, etl) inside a transaction = %v, %v; want ErrNotFound", p, err)
		}
		return nil
	})
}

// testListPipelinesByTenant: PipelineList lists one tenant's pipelines by name, PipelineListActive
// every tenant's, each with its current active version.
func testListPipelinesByTenant(t *testing.T, st store.Store) {
	ctx := t.Context()
	var all []*store.Pipeline
	for i, k := range [][2]string{{"acme", "loader"}, {"globex", "etl"}, {"acme", "etl"}, {"acme", "billing"}, {"globex", "crm"}} {
		p := &store.Pipeline{Tenant: k[0], Name: k[1], ActiveVersion: "v-" + k[1], CreatedAt: at(time.Duration(i) * time.Minute),
			UpdatedAt: at(time.Duration(i) * time.Minute)}
		putPipelines(t, st, p)
		all = append(all, p)
	}
	byName := map[string]*store.Pipeline{}
	for _, p := range all {
		byName[p.Tenant+"/"+p.Name] = p
	}
	check := func(what string, got []*store.Pipeline, want ...string) {
		t.Helper()
		checkIDs(t, what, pipelineNames(got), want)
		for _, p := range got {
			if w := byName[p.Tenant+"/"+p.Name]; w != nil {
				checkSame(t, what+": "+p.Tenant+"/"+p.Name, w, p)
			}
		}
	}
	list := func(tenant string) []*store.Pipeline {
		t.Helper()
		ps, err := st.PipelineList(ctx, tenant)
		if err != nil {
			t.Fatalf("ListPipelines(%s): %v", tenant, err)
		}
		return ps
	}
	check("ListPipelines(acme)", list("acme"), "acme/billing", "acme/etl", "acme/loader")
	check("ListPipelines(globex)", list("globex"), "globex/crm", "globex/etl")
	check("ListPipelines(initech)", list("initech"))

	// An activation shows in the lists.
	up := *byName["acme/etl"]
	up.ActiveVersion, up.UpdatedAt = "v-next", at(time.Hour)
	putPipelines(t, st, &up)
	byName["acme/etl"] = &up
	check("ListPipelines(acme) after an activation", list("acme"), "acme/billing", "acme/etl", "acme/loader")

	active, err := st.PipelineListActive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(active, func(a, b *store.Pipeline) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Name, b.Name))
	})
	check("ActivePipelines", active, "acme/billing", "acme/etl", "acme/loader", "globex/crm", "globex/etl")
}

// testPipelineVersions: PipelineVersionInsert stores each version of a pipeline once (a repeat
// changes nothing), PipelineVersionGet reads one back by tenant, pipeline and version
// (ErrNotFound otherwise), and PipelineVersionList lists a pipeline's versions newest deploy
// first.
func testPipelineVersions(t *testing.T, st store.Store) {
	ctx := t.Context()
	// Deployed in this order; the names sort neither way like the deploys.
	b := deployedVersion("acme", "etl", "v-b", t0)
	c := deployedVersion("acme", "etl", "v-c", at(time.Minute))
	a := deployedVersion("acme", "etl", "v-a", at(2*time.Minute))
	theirs := deployedVersion("globex", "etl", "v-a", at(3*time.Minute))
	report := deployedVersion("acme", "report", "v-a", at(4*time.Minute))
	for _, v := range []*store.PipelineVersion{b, c, a, theirs, report} {
		if !insertVersion(t, st, v) {
			t.Fatalf("InsertPipelineVersion(%s %s %s) = false for a new version", v.Tenant, v.Pipeline, v.Version)
		}
	}
	get := func(tenant, pipeline, version string) *store.PipelineVersion {
		t.Helper()
		v, err := st.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: pipeline, Version: version})
		if err != nil {
			t.Fatalf("GetPipelineVersion(%s, %s, %s): %v", tenant, pipeline, version, err)
		}
		return v
	}
	for _, v := range []*store.PipelineVersion{b, c, a, theirs, report} {
		got := get(v.Tenant, v.Pipeline, v.Version)
		checkSame(t, "version "+v.Tenant+"/"+v.Pipeline+"/"+v.Version, v, got, "Seq")
		if got.Seq <= 0 {
			t.Errorf("version %s/%s/%s: Seq %d, want > 0", v.Tenant, v.Pipeline, v.Version, got.Seq)
		}
	}

	// Deploying a version again stores nothing and changes nothing: not its text, not its place.
	again := deployedVersion("acme", "etl", "v-c", at(time.Hour))
	again.Document, again.Spec = []byte("name: etl\n# changed\n"), json.RawMessage(`{"changed":true}`)
	before := get("acme", "etl", "v-c")
	if insertVersion(t, st, again) {
		t.Error("InsertPipelineVersion of a version the pipeline has = true, want false")
	}
	checkSame(t, "a version deployed again", before, get("acme", "etl", "v-c"))

	list := func(tenant, pipeline string) []*store.PipelineVersion {
		t.Helper()
		vs, err := st.PipelineVersionList(ctx, tenant, pipeline)
		if err != nil {
			t.Fatalf("ListPipelineVersions(%s, %s): %v", tenant, pipeline, err)
		}
		return vs
	}
	vs := list("acme", "etl")
	checkIDs(t, "ListPipelineVersions(acme, etl)", versionNames(vs), []string{"v-a", "v-c", "v-b"})
	if len(vs) == 3 {
		for i, want := range []*store.PipelineVersion{a, c, b} {
			checkSame(t, "listed version "+want.Version, want, vs[i], "Seq")
			if i > 0 && vs[i].Seq >= vs[i-1].Seq {
				t.Errorf("listed versions: Seq %d after %d, want newest (highest) first", vs[i].Seq, vs[i-1].Seq)
			}
		}
	}
	if vs := list("globex", "etl"); len(vs) != 1 || vs[0].Version != "v-a" || !slices.Equal(vs[0].Document, theirs.Document) {
		t.Errorf("ListPipelineVersions(globex, etl) = %v, want globex's v-a only", versionNames(vs))
	}
	checkIDs(t, "ListPipelineVersions(acme, report)", versionNames(list("acme", "report")), []string{"v-a"})
	checkIDs(t, "ListPipelineVersions(acme, nothing)", versionNames(list("acme", "nothing")), nil)

	for _, k := range []store.PipelineVersionKey{
		{Tenant: "globex", Pipeline: "etl", Version: "v-b"},
		{Tenant: "acme", Pipeline: "etl", Version: "v-z"},
		{Tenant: "acme", Pipeline: "nothing", Version: "v-a"},
		{Tenant: "initech", Pipeline: "etl", Version: "v-a"},
	} {
		if v, err := st.PipelineVersionGet(ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetPipelineVersion(%s, %s, %s) = %v, %v; want ErrNotFound", k.Tenant, k.Pipeline, k.Version, v, err)
		}
		if state, err := st.PipelineVersionState(ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("PipelineVersionState(%s, %s, %s) = %q, %v; want ErrNotFound", k.Tenant, k.Pipeline, k.Version, state, err)
		}
	}

	// A version's state: deployed, until set; set on that version only.
	state := func(k store.PipelineVersionKey) string {
		t.Helper()
		s, err := st.PipelineVersionState(ctx, k)
		if err != nil {
			t.Fatalf("PipelineVersionState(%+v): %v", k, err)
		}
		return s
	}
	cKey := store.PipelineVersionKey{Tenant: "acme", Pipeline: "etl", Version: "v-c"}
	theirsKey := store.PipelineVersionKey{Tenant: "globex", Pipeline: "etl", Version: "v-a"}
	if s := state(cKey); s != store.VersionDeployed {
		t.Errorf("a new version's state is %q, want deployed (%q)", s, store.VersionDeployed)
	}
	inTx(t, st, func(tx store.Tx) error { return tx.PipelineVersionSetState(ctx, cKey, store.VersionRolledBack) })
	if s := state(cKey); s != store.VersionRolledBack {
		t.Errorf("state %q after setting it to %q", s, store.VersionRolledBack)
	}
	if got := get("acme", "etl", "v-c"); got.State != store.VersionRolledBack {
		t.Errorf("PipelineVersionGet: State %q, want %q", got.State, store.VersionRolledBack)
	}
	if s := state(theirsKey); s != store.VersionDeployed {
		t.Errorf("another tenant's version of the same name has state %q", s)
	}
	inTx(t, st, func(tx store.Tx) error { return tx.PipelineVersionSetState(ctx, cKey, store.VersionDeployed) })
	if s := state(cKey); s != store.VersionDeployed {
		t.Errorf("state %q after setting it back", s)
	}
}

// ---------------------------------------------------------------------------------------------
// ConsumerList: who reads a dataset

func consumerKey(c *store.Consumer) string {
	return strings.Join([]string{c.DatasetUUID, c.Tenant, c.Pipeline, c.Version, c.Job, strconv.Itoa(c.InputIndex)}, "|")
}

func consumerKeys(cs []*store.Consumer) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = consumerKey(c)
	}
	slices.Sort(out)
	return out
}

// testConsumersFollowTheActiveVersion: ConsumerInsertMany stores a version's inputs once, and
// ConsumerList lists the inputs of the versions that are active now, for the tenant whose
// pipeline it is: a deploy and a rollback switch them.
func testConsumersFollowTheActiveVersion(t *testing.T, st store.Store) {
	ctx := t.Context()
	orders, customers, leads := uuid.NewString(), uuid.NewString(), uuid.NewString()
	v1Load0 := &store.Consumer{DatasetUUID: orders, Tenant: "acme", Pipeline: "etl", Version: "v1", Job: "load", InputIndex: 0}
	v1Load1 := &store.Consumer{DatasetUUID: customers, Tenant: "acme", Pipeline: "etl", Version: "v1", Job: "load", InputIndex: 1}
	v2Transform := &store.Consumer{DatasetUUID: orders, Tenant: "acme", Pipeline: "etl", Version: "v2", Job: "transform", InputIndex: 0}
	report := &store.Consumer{DatasetUUID: orders, Tenant: "acme", Pipeline: "report", Version: "v7", Job: "summarize", InputIndex: 2}
	// Never deployed as active: the version of a pipeline with no pipeline record.
	ghost := &store.Consumer{DatasetUUID: orders, Tenant: "acme", Pipeline: "ghost", Version: "v1", Job: "load", InputIndex: 0}
	// Another tenant's etl runs v1: that says nothing of acme's etl.
	theirs := &store.Consumer{DatasetUUID: leads, Tenant: "globex", Pipeline: "etl", Version: "v1", Job: "load", InputIndex: 0}

	inTx(t, st, func(tx store.Tx) error {
		if err := tx.ConsumerInsertMany(ctx, []*store.Consumer{v1Load0, v1Load1, report, ghost, theirs}); err != nil {
			return err
		}
		// Stored ones again, in the same transaction, are skipped.
		return tx.ConsumerInsertMany(ctx, []*store.Consumer{v1Load0})
	})
	inTx(t, st, func(tx store.Tx) error {
		// And in a later one, beside a new one.
		return tx.ConsumerInsertMany(ctx, []*store.Consumer{v1Load1, v2Transform, v1Load0})
	})
	inTx(t, st, func(tx store.Tx) error { return tx.ConsumerInsertMany(ctx, nil) })

	consumers := func(uuids ...string) []string {
		t.Helper()
		cs, err := st.ConsumerList(ctx, uuids)
		if err != nil {
			t.Fatalf("Consumers(%v): %v", uuids, err)
		}
		return consumerKeys(cs)
	}
	keys := func(cs ...*store.Consumer) []string { return consumerKeys(cs) }

	checkIDs(t, "Consumers before any pipeline is active", consumers(orders, customers, leads), nil)

	putPipelines(t, st,
		&store.Pipeline{Tenant: "acme", Name: "etl", ActiveVersion: "v2", CreatedAt: t0, UpdatedAt: t0},
		&store.Pipeline{Tenant: "acme", Name: "report", ActiveVersion: "v7", CreatedAt: t0, UpdatedAt: t0},
		&store.Pipeline{Tenant: "globex", Name: "etl", ActiveVersion: "v1", CreatedAt: t0, UpdatedAt: t0})
	checkIDs(t, "Consumers with etl v2 active", consumers(orders, customers), keys(v2Transform, report))
	checkIDs(t, "Consumers(customers) with etl v2 active", consumers(customers), nil)
	checkIDs(t, "Consumers(leads)", consumers(leads), keys(theirs))

	// Rollback to v1: its inputs read again, v2's no longer.
	putPipelines(t, st, &store.Pipeline{Tenant: "acme", Name: "etl", ActiveVersion: "v1", CreatedAt: t0, UpdatedAt: at(time.Minute)})
	checkIDs(t, "Consumers with etl v1 active", consumers(orders, customers, leads), keys(v1Load0, v1Load1, report, theirs))
	checkIDs(t, "Consumers(customers) with etl v1 active", consumers(customers), keys(v1Load1))
	checkIDs(t, "Consumers(unknown dataset)", consumers(uuid.NewString()), nil)
	checkIDs(t, "Consumers()", consumers(), nil)

	// Read inside a transaction, as the router does, with every field.
	inTx(t, st, func(tx store.Tx) error {
		cs, err := tx.ConsumerList(ctx, []string{customers})
		if err != nil {
			return err
		}
		if len(cs) != 1 {
			t.Errorf("Consumers(customers) inside a transaction = %v, want 1", consumerKeys(cs))
			return nil
		}
		checkSame(t, "consumer", v1Load1, cs[0])
		return nil
	})
}

// ---------------------------------------------------------------------------------------------
// The jobs of pipeline jobs

// testInsertJobsIfAbsent: JobInsertManyIfAbsent inserts the jobs whose idempotency key the tenant
// has not used, with every field, and returns their ids; the others change nothing.
func testInsertJobsIfAbsent(t *testing.T, st store.Store) {
	ctx := t.Context()
	existing := pipelineJob("acme", "etl", "v1", "load")
	existing.TotalTasks, existing.UnfinishedTasks = 1, 1
	inTx(t, st, func(tx store.Tx) error { return tx.JobInsert(ctx, existing) })

	repeat := pipelineJob("acme", "etl", "v2", "load")
	repeat.IdempotencyKey, repeat.Name = existing.IdempotencyKey, "another name"
	fresh := pipelineJob("acme", "etl", "v1", "load")
	fresh.TotalTasks, fresh.UnfinishedTasks, fresh.CreatedAt = 1, 1, at(time.Minute)
	fresh.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	theirs := pipelineJob("globex", "etl", "v1", "load")
	theirs.IdempotencyKey = existing.IdempotencyKey // another tenant's key space
	jobs := []*store.Job{repeat, fresh, theirs}
	slices.SortFunc(jobs, func(a, b *store.Job) int { return strings.Compare(a.IdempotencyKey, b.IdempotencyKey) })

	var inserted []string
	inTx(t, st, func(tx store.Tx) error {
		var err error
		inserted, err = tx.JobInsertManyIfAbsent(ctx, jobs)
		return err
	})
	checkIDs(t, "InsertJobsIfAbsent", sortedStrings(inserted), sortedStrings([]string{fresh.ID, theirs.ID}))
	checkSame(t, "a job inserted if absent", fresh, getJob(t, st, fresh.ID), "Seq")
	checkSame(t, "another tenant's job of the same key", theirs, getJob(t, st, theirs.ID), "Seq")
	checkSame(t, "the job that held the key", existing, getJob(t, st, existing.ID))
	if _, err := st.JobGet(ctx, repeat.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob of the job whose key was taken: %v, want ErrNotFound", err)
	}
	if j, err := st.JobGetByIdempotencyKey(ctx, "acme", existing.IdempotencyKey); err != nil || j.ID != existing.ID {
		t.Errorf("JobByIdempotencyKey(acme) = %v, %v; want %s", j, err, existing.ID)
	}

	// The same jobs again: nothing is new.
	inTx(t, st, func(tx store.Tx) error {
		var err error
		inserted, err = tx.JobInsertManyIfAbsent(ctx, jobs)
		return err
	})
	checkIDs(t, "InsertJobsIfAbsent again", inserted, nil)
	if js := listJobs(t, st, store.ListJobsParams{Tenant: "acme", Limit: 10}); len(js) != 2 {
		t.Errorf("acme has %d jobs, want 2", len(js))
	}
}

// testPipelineJobQueries: the per-pipeline reads of jobs and tasks (PipelineTaskCounts,
// PipelineJobTasks, PipelineJobLatest, PipelineTasksUnfinished) see exactly the jobs of their
// tenant, pipeline, job and version.
func testPipelineJobQueries(t *testing.T, st store.Store) {
	ctx := t.Context()
	now := at(time.Minute)
	const retrying = lifecycle.TaskStatus("retrying") // pending again after a failed attempt
	n := 0
	// add stores a pipeline job whose tasks have the given statuses; each job is created earlier
	// than the one before, so that "inserted last" and "created last" differ.
	add := func(tenant, pipeline, version, job string, statuses ...lifecycle.TaskStatus) *store.Job {
		t.Helper()
		n++
		j := pipelineJob(tenant, pipeline, version, job)
		j.CreatedAt = at(-time.Duration(n) * time.Minute)
		var tasks []*store.Task
		for i := range statuses {
			tk := newTask(j.ID, string(rune('a'+i)))
			if i > 0 && statuses[i] == lifecycle.Waiting {
				tk = newTask(j.ID, string(rune('a'+i)), "a")
			}
			tasks = append(tasks, tk)
		}
		seed(t, st, j, tasks...)
		for i, s := range statuses {
			id := tasks[i].ID
			switch s {
			case lifecycle.Pending, lifecycle.Waiting: // as inserted, never attempted
			case lifecycle.Running:
				mustClaim(t, st, id, now)
			case retrying:
				mustClaim(t, st, id, now)
				mutate(t, st, id, func(tk *store.Task) { tk.Status, tk.AvailableAt = lifecycle.Pending, at(time.Hour) })
			default:
				mustClaim(t, st, id, now)
				setStatus(t, st, id, s, now)
			}
		}
		return j
	}
	notStarted := add("acme", "etl", "v1", "extract", lifecycle.Pending)
	running := add("acme", "etl", "v1", "extract", lifecycle.Running)
	add("acme", "etl", "v1", "load", lifecycle.Completed)
	// Started, with tasks no attempt has started: each unfinished task listed.
	partly := add("acme", "etl", "v1", "load", lifecycle.Running, lifecycle.Waiting, lifecycle.Waiting)
	retried := add("acme", "etl", "v1", "extract", retrying)
	newer := add("acme", "etl", "v2", "extract", lifecycle.Pending)
	lastExtract := add("acme", "etl", "v1", "extract", lifecycle.Failed)
	theirs := add("globex", "etl", "v1", "extract", lifecycle.Pending)
	add("acme", "report", "v1", "extract", lifecycle.Pending)
	plain := newJob("acme") // submitted over the producer API
	seed(t, st, plain, newTask(plain.ID, "a"))

	// PipelineTaskCounts: by pipeline job and status.
	counts, err := st.PipelineTaskCounts(ctx, "acme", "etl")
	if err != nil {
		t.Fatal(err)
	}
	type jobStatus struct {
		job    string
		status lifecycle.TaskStatus
	}
	got := map[jobStatus]int{}
	for _, c := range counts {
		if _, dup := got[jobStatus{c.Job, c.Status}]; dup {
			t.Errorf("PipelineTaskCounts lists %s/%s twice", c.Job, c.Status)
		}
		got[jobStatus{c.Job, c.Status}] += c.Count
	}
	want := map[jobStatus]int{
		{"extract", lifecycle.Pending}: 3, {"extract", lifecycle.Running}: 1, {"extract", lifecycle.Failed}: 1,
		{"load", lifecycle.Completed}: 1, {"load", lifecycle.Running}: 1, {"load", lifecycle.Waiting}: 2,
	}
	if !maps.Equal(got, want) {
		t.Errorf("PipelineTaskCounts(acme, etl) = %v, want %v", got, want)
	}
	if counts, err := st.PipelineTaskCounts(ctx, "globex", "etl"); err != nil || len(counts) != 1 ||
		*counts[0] != (store.PipelineTaskCount{Job: "extract", Status: lifecycle.Pending, Count: 1}) {
		t.Errorf("PipelineTaskCounts(globex, etl) = %v, %v; want one pending extract task", counts, err)
	}
	if counts, err := st.PipelineTaskCounts(ctx, "acme", "nothing"); err != nil || len(counts) != 0 {
		t.Errorf("PipelineTaskCounts(acme, nothing) = %v, %v; want none", counts, err)
	}

	// PipelineJobTasks: all the tasks of a pipeline job, and the live ones.
	for _, c := range []struct {
		tenant, pipeline, job string
		total, live           int
	}{
		{"acme", "etl", "extract", 5, 4},
		{"acme", "etl", "load", 4, 3},
		{"globex", "etl", "extract", 1, 1},
		{"acme", "report", "extract", 1, 1},
		{"acme", "etl", "nothing", 0, 0},
		{"initech", "etl", "extract", 0, 0},
	} {
		total, live, err := st.PipelineJobTasks(ctx, store.PipelineJobKey{Tenant: c.tenant, Pipeline: c.pipeline, Job: c.job})
		if err != nil || total != c.total || live != c.live {
			t.Errorf("PipelineJobTasks(%s, %s, %s) = %d, %d, %v; want %d, %d", c.tenant, c.pipeline, c.job, total, live, err, c.total, c.live)
		}
	}

	// PipelineJobLatest: the job inserted last, whatever its version or creation time.
	for _, c := range []struct {
		tenant, pipeline, job string
		want                  *store.Job
	}{
		{"acme", "etl", "extract", lastExtract},
		{"acme", "etl", "load", partly},
		{"globex", "etl", "extract", theirs},
	} {
		j, err := st.PipelineJobLatest(ctx, store.PipelineJobKey{Tenant: c.tenant, Pipeline: c.pipeline, Job: c.job})
		if err != nil {
			t.Errorf("LatestPipelineJob(%s, %s, %s): %v", c.tenant, c.pipeline, c.job, err)
			continue
		}
		checkSame(t, "LatestPipelineJob("+c.tenant+", "+c.pipeline+", "+c.job+")", getJob(t, st, c.want.ID), j)
	}
	for _, k := range []store.PipelineJobKey{
		{Tenant: "acme", Pipeline: "etl", Job: "nothing"},
		{Tenant: "initech", Pipeline: "etl", Job: "extract"},
		{Tenant: "acme", Pipeline: "nothing", Job: "extract"},
	} {
		if j, err := st.PipelineJobLatest(ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LatestPipelineJob(%s, %s, %s) = %v, %v; want ErrNotFound", k.Tenant, k.Pipeline, k.Job, j, err)
		}
	}

	// PipelineTasksUnfinished: the tasks of one version that have not ended, with their jobs.
	for _, c := range []struct {
		tenant, pipeline, version string
		want                      []string // "job id/status", a task each
	}{
		{"acme", "etl", "v1", sortedStrings([]string{notStarted.ID + "/pending", running.ID + "/running", partly.ID + "/running",
			partly.ID + "/waiting", partly.ID + "/waiting", retried.ID + "/pending"})},
		{"acme", "etl", "v2", []string{newer.ID + "/pending"}},
		// Every version: v1's and v2's.
		{"acme", "etl", "", sortedStrings([]string{notStarted.ID + "/pending", running.ID + "/running", partly.ID + "/running",
			partly.ID + "/waiting", partly.ID + "/waiting", retried.ID + "/pending", newer.ID + "/pending"})},
		{"globex", "etl", "v1", []string{theirs.ID + "/pending"}},
		{"acme", "etl", "v9", nil},
	} {
		refs, err := st.PipelineTasksUnfinished(ctx, store.PipelineVersionKey{Tenant: c.tenant, Pipeline: c.pipeline, Version: c.version})
		if err != nil {
			t.Fatalf("PipelineTasksUnfinished(%s, %s, %s): %v", c.tenant, c.pipeline, c.version, err)
		}
		var got []string
		for _, r := range refs {
			got = append(got, r.JobID+"/"+string(r.Status))
			if r.TaskID == "" || r.Job == "" || r.RouteKey == "" {
				t.Errorf("PipelineTasksUnfinished: ref %+v lacks its task, pipeline job or key", r)
			}
			if want := map[bool]string{true: "v2", false: "v1"}[r.JobID == newer.ID]; r.Version != want {
				t.Errorf("PipelineTasksUnfinished: job %s listed with version %q, want %q", r.JobID, r.Version, want)
			}
		}
		checkIDs(t, "PipelineTasksUnfinished("+c.tenant+", "+c.pipeline+", "+c.version+")", sortedStrings(got), c.want)
	}
}

// ---------------------------------------------------------------------------------------------
// Builds

// testBuildRecords: a pipeline's building version round-trips through PipelinePut; ConsumerList
// lists the building version's inputs beside the active one's, marked Building, and no longer
// once the build is cleared; a version's Build and Pointers round-trip; the tasks of a version
// are counted by job and status (PipelineVersionTaskCounts) and listed from a creation time on
// (PipelineTasksSince).
func testBuildRecords(t *testing.T, st store.Store) {
	ctx := t.Context()
	orders := uuid.NewString()
	live := &store.Consumer{DatasetUUID: orders, Tenant: "acme", Pipeline: "etl", Version: "v1", Job: "load"}
	built := &store.Consumer{DatasetUUID: orders, Tenant: "acme", Pipeline: "etl", Version: "v2", Job: "load"}
	stale := &store.Consumer{DatasetUUID: orders, Tenant: "acme", Pipeline: "etl", Version: "v0", Job: "load"}
	inTx(t, st, func(tx store.Tx) error { return tx.ConsumerInsertMany(ctx, []*store.Consumer{live, built, stale}) })
	for _, v := range []string{"v0", "v1", "v2"} {
		insertVersion(t, st, deployedVersion("acme", "etl", v, t0))
	}

	p := &store.Pipeline{Tenant: "acme", Name: "etl", ActiveVersion: "v1", BuildingVersion: "v2", CreatedAt: t0, UpdatedAt: t0}
	putPipelines(t, st, p)
	checkSame(t, "pipeline with a building version", p, getPipeline(t, st, "acme", "etl"))
	cs, err := st.ConsumerList(ctx, []string{orders})
	if err != nil {
		t.Fatal(err)
	}
	building := map[string]bool{}
	for _, c := range cs {
		building[c.Version] = c.Building
	}
	if len(cs) != 2 || building["v1"] || !building["v2"] {
		t.Errorf("ConsumerList while v2 builds = %v; want v1's (not building) and v2's (building)", consumerKeys(cs))
	}
	p.BuildingVersion, p.UpdatedAt = "", at(time.Minute)
	putPipelines(t, st, p)
	checkSame(t, "pipeline whose build was cleared", p, getPipeline(t, st, "acme", "etl"))
	if cs, err := st.ConsumerList(ctx, []string{orders}); err != nil || len(cs) != 1 || cs[0].Version != "v1" || cs[0].Building {
		t.Errorf("ConsumerList after the build = %v, %v; want v1's only", consumerKeys(cs), err)
	}

	k := store.PipelineVersionKey{Tenant: "acme", Pipeline: "etl", Version: "v2"}
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.PipelineVersionSetBuild(ctx, k, json.RawMessage(`{"through":7}`)); err != nil {
			return err
		}
		return tx.PipelineVersionSetPointers(ctx, k, json.RawMessage(`{"datasets":{"a":"b"}}`))
	})
	v, err := st.PipelineVersionGet(ctx, k)
	if err != nil || string(v.Build) != `{"through":7}` || string(v.Pointers) != `{"datasets":{"a":"b"}}` {
		t.Errorf("version after SetBuild and SetPointers: %+v, %v", v, err)
	}
	if v, err := st.PipelineVersionGet(ctx, store.PipelineVersionKey{Tenant: "acme", Pipeline: "etl", Version: "v1"}); err != nil || v.Build != nil || v.Pointers != nil {
		t.Errorf("a version with neither: %+v, %v; want nil Build and Pointers", v, err)
	}

	add := func(version, job string, created time.Time, done bool) *store.Job {
		j := pipelineJob("acme", "etl", version, job)
		j.CreatedAt = created
		tk := newTask(j.ID, "a")
		seed(t, st, j, tk)
		if done {
			mustClaim(t, st, tk.ID, at(4*time.Hour))
			setStatus(t, st, tk.ID, lifecycle.Completed, at(4*time.Hour))
		}
		return j
	}
	add("v2", "load", at(-time.Hour), true)
	late := add("v2", "load", at(time.Hour), false)
	lateDone := add("v2", "sum", at(2*time.Hour), true)
	add("v1", "load", at(3*time.Hour), false)
	counts, err := st.PipelineVersionTaskCounts(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, c := range counts {
		got[c.Job+"/"+string(c.Status)] += c.Count
	}
	if want := map[string]int{"load/completed": 1, "load/pending": 1, "sum/completed": 1}; !maps.Equal(got, want) {
		t.Errorf("PipelineVersionTaskCounts(v2) = %v, want %v", got, want)
	}
	refs, err := st.PipelineTasksSince(ctx, k, t0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range refs {
		ids = append(ids, r.JobID)
		if r.Version != "v2" || r.TaskID == "" || r.RouteKey == "" {
			t.Errorf("PipelineTasksSince: ref %+v", r)
		}
	}
	checkIDs(t, "PipelineTasksSince(v2, t0)", ids, sortedStrings([]string{late.ID, lateDone.ID}))

	// PipelineTasksReplacedActive: the tasks an activation canceled, of versions active now.
	replaced := func(version, reason string) *store.Job {
		j := pipelineJob("acme", "etl", version, "load")
		tk := newTask(j.ID, "a")
		seed(t, st, j, tk)
		mustClaim(t, st, tk.ID, at(4*time.Hour))
		mutate(t, st, tk.ID, func(tk *store.Task) {
			tk.Status, tk.FinishedAt, tk.CancelReason = lifecycle.Canceled, at(4*time.Hour), reason
		})
		return j
	}
	activeReplaced := replaced("v1", store.CancelVersionReplaced)
	replaced("v2", store.CancelVersionReplaced) // not active
	replaced("v1", "pipeline_rolled_back")      // canceled for another reason
	refs, err = st.PipelineTasksReplacedActive(ctx, 10)
	if err != nil || len(refs) != 1 || refs[0].JobID != activeReplaced.ID || refs[0].Tenant != "acme" || refs[0].Version != "v1" {
		t.Errorf("PipelineTasksReplacedActive = %v, %v; want the one of v1, the active version", refs, err)
	}
}
