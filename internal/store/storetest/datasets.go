// Contract of datasets: lookups, names, updates, listing, versions and dataset events.

package storetest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/store"
)

// ---------------------------------------------------------------------------------------------
// Fixtures

// outputDataset is a job output of a pipeline, as a deploy creates it: unnamed, with a fresh
// current version.
func outputDataset(tenant, pipeline, job string, index int) *store.Dataset {
	return &store.Dataset{
		UUID:           uuid.NewString(),
		Tenant:         tenant,
		Producer:       fmt.Sprintf("output:%s/%s/%d", pipeline, job, index),
		Pipeline:       pipeline,
		Job:            job,
		OutputIndex:    index,
		CurrentVersion: uuid.NewString(),
		CreatedAt:      t0,
		UpdatedAt:      t0,
	}
}

// bufferedDataset is a named buffered dataset with a schema and filter fields.
func bufferedDataset(tenant, name string) *store.Dataset {
	return &store.Dataset{
		UUID:           uuid.NewString(),
		Tenant:         tenant,
		Producer:       "buffered:" + name,
		Name:           name,
		CurrentVersion: uuid.NewString(),
		Storage:        "postgres",
		WriteMode:      "buffered",
		Schema:         json.RawMessage(`{"columns":[{"name":"order_id","type":"string","required":true},{"name":"region","type":"string"}],"unique":["order_id"]}`),
		FilterFields:   json.RawMessage(`["region"]`),
		CreatedAt:      at(time.Second),
		UpdatedAt:      at(2 * time.Second),
	}
}

func insertDatasets(t testing.TB, st store.Store, ds ...*store.Dataset) {
	t.Helper()
	inTx(t, st, func(tx store.Tx) error { return tx.DatasetInsertMany(t.Context(), ds) })
}

// getDataset reads one dataset by uuid, nil if there is none.
func getDataset(t testing.TB, st store.Reader, id string) *store.Dataset {
	t.Helper()
	ds, err := st.DatasetGetMany(t.Context(), []string{id})
	if err != nil {
		t.Fatalf("GetDatasets(%s): %v", id, err)
	}
	switch len(ds) {
	case 0:
		return nil
	case 1:
		return ds[0]
	}
	t.Fatalf("GetDatasets(%s) = %d datasets", id, len(ds))
	return nil
}

func datasetUUIDs(ds []*store.Dataset) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.UUID
	}
	return out
}

// checkDatasets checks that got holds exactly want, in any order, each with every field.
func checkDatasets(t testing.TB, what string, got []*store.Dataset, want ...*store.Dataset) {
	t.Helper()
	checkIDs(t, what, sortedStrings(datasetUUIDs(got)), sortedStrings(datasetUUIDs(want)))
	byUUID := map[string]*store.Dataset{}
	for _, d := range want {
		byUUID[d.UUID] = d
	}
	for _, d := range got {
		if w := byUUID[d.UUID]; w != nil {
			checkSame(t, what+": dataset "+d.Producer, w, d)
		}
	}
}

func int64p(n int64) *int64 { return &n }

// ---------------------------------------------------------------------------------------------
// Datasets

// testDatasetLookups: DatasetInsertMany stores every field; DatasetGetMany finds datasets by uuid
// (those that exist), DatasetGetByName a tenant's named dataset (ErrNotFound otherwise), and
// DatasetListByProducer a tenant's datasets by producer.
func testDatasetLookups(t *testing.T, st store.Store) {
	ctx := t.Context()
	extract := outputDataset("acme", "etl", "extract", 0)
	published := outputDataset("acme", "etl", "load", 1)
	published.Name, published.Storage, published.WriteMode = "orders", "s3", "direct"
	published.FilterFields = json.RawMessage(`["region","day"]`)
	events := bufferedDataset("acme", "events")
	theirExtract := outputDataset("globex", "etl", "extract", 0) // the same producer, another tenant
	theirEvents := bufferedDataset("globex", "events")           // the same name, another tenant
	theirEvents.Schema = json.RawMessage(`{"columns":[{"name":"id","type":"integer"}]}`)
	insertDatasets(t, st, extract, published, events, theirExtract, theirEvents)

	unknown := uuid.NewString()
	ds, err := st.DatasetGetMany(ctx, []string{extract.UUID, published.UUID, events.UUID, theirExtract.UUID, unknown})
	if err != nil {
		t.Fatal(err)
	}
	checkDatasets(t, "GetDatasets", ds, extract, published, events, theirExtract)
	for _, ids := range [][]string{nil, {unknown}} {
		if ds, err := st.DatasetGetMany(ctx, ids); err != nil || len(ds) != 0 {
			t.Errorf("GetDatasets(%v) = %v, %v; want none", ids, datasetUUIDs(ds), err)
		}
	}

	byName := func(tenant, name string) *store.Dataset {
		t.Helper()
		d, err := st.DatasetGetByName(ctx, tenant, name)
		if err != nil {
			t.Fatalf("DatasetByName(%s, %s): %v", tenant, name, err)
		}
		return d
	}
	checkSame(t, "DatasetByName(acme, orders)", published, byName("acme", "orders"))
	checkSame(t, "DatasetByName(acme, events)", events, byName("acme", "events"))
	checkSame(t, "DatasetByName(globex, events)", theirEvents, byName("globex", "events"))
	for _, k := range [][2]string{{"globex", "orders"}, {"initech", "events"}, {"acme", "nothing"}, {"acme", ""}, {"acme", extract.UUID}} {
		if d, err := st.DatasetGetByName(ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DatasetByName(%s, %q) = %v, %v; want ErrNotFound", k[0], k[1], d, err)
		}
	}
	inTx(t, st, func(tx store.Tx) error {
		d, err := tx.DatasetGetByName(ctx, "acme", "events")
		if err != nil {
			return err
		}
		checkSame(t, "DatasetByName inside a transaction", events, d)
		return nil
	})

	byProducer := func(tenant string, producers ...string) []*store.Dataset {
		t.Helper()
		ds, err := st.DatasetListByProducer(ctx, tenant, producers)
		if err != nil {
			t.Fatalf("DatasetsByProducer(%s, %v): %v", tenant, producers, err)
		}
		return ds
	}
	checkDatasets(t, "DatasetsByProducer(acme)", byProducer("acme", extract.Producer, events.Producer, "output:etl/nothing/0"), extract, events)
	checkDatasets(t, "DatasetsByProducer(globex)", byProducer("globex", extract.Producer, published.Producer), theirExtract)
	checkDatasets(t, "DatasetsByProducer(initech)", byProducer("initech", extract.Producer))
	checkDatasets(t, "DatasetsByProducer(acme) of no producer", byProducer("acme"))
}

// testInsertDatasetsSkipsExistingProducers: a dataset whose tenant already has its producer is
// skipped, the stored one unchanged; the others of the call are stored.
func testInsertDatasetsSkipsExistingProducers(t *testing.T, st store.Store) {
	ctx := t.Context()
	first := outputDataset("acme", "etl", "extract", 0)
	insertDatasets(t, st, first)

	// A concurrent deploy's fresh dataset for the same output, beside a new one.
	again := outputDataset("acme", "etl", "extract", 0)
	again.CreatedAt, again.UpdatedAt = at(time.Hour), at(time.Hour)
	fresh := outputDataset("acme", "etl", "extract", 1)
	insertDatasets(t, st, again, fresh)

	checkSame(t, "the dataset of the producer", first, getDataset(t, st, first.UUID))
	if d := getDataset(t, st, again.UUID); d != nil {
		t.Errorf("a dataset of a stored producer was stored: %+v", d)
	}
	checkSame(t, "a new dataset beside a skipped one", fresh, getDataset(t, st, fresh.UUID))
	ds, err := st.DatasetListByProducer(ctx, "acme", []string{first.Producer})
	if err != nil {
		t.Fatal(err)
	}
	checkDatasets(t, "DatasetsByProducer after the repeat", ds, first)
}

// testDatasetNamesAreUniquePerTenant: a name another dataset of the tenant holds is ErrConflict
// for DatasetInsertMany and DatasetUpdate, and nothing changes; another tenant may use the name,
// and any number of datasets have none.
func testDatasetNamesAreUniquePerTenant(t *testing.T, st store.Store) {
	ctx := t.Context()
	orders := bufferedDataset("acme", "orders")
	plain := outputDataset("acme", "etl", "load", 0)
	plain2 := outputDataset("acme", "etl", "load", 1) // unnamed too
	insertDatasets(t, st, orders, plain, plain2)

	clash := outputDataset("acme", "etl", "load", 2)
	clash.Name = "orders"
	if err := st.InTx(ctx, func(tx store.Tx) error { return tx.DatasetInsertMany(ctx, []*store.Dataset{clash}) }); !errors.Is(err, store.ErrConflict) {
		t.Errorf("InsertDatasets with a name the tenant holds: %v, want ErrConflict", err)
	}
	if d := getDataset(t, st, clash.UUID); d != nil {
		t.Errorf("a dataset with a taken name was stored: %+v", d)
	}

	renamed := *plain
	renamed.Name, renamed.UpdatedAt = "orders", at(time.Minute)
	if err := st.InTx(ctx, func(tx store.Tx) error { return tx.DatasetUpdate(ctx, &renamed) }); !errors.Is(err, store.ErrConflict) {
		t.Errorf("UpdateDataset to a name the tenant holds: %v, want ErrConflict", err)
	}
	checkSame(t, "a dataset after a refused rename", plain, getDataset(t, st, plain.UUID))
	checkSame(t, "the dataset holding the name", orders, getDataset(t, st, orders.UUID))

	theirs := outputDataset("globex", "etl", "load", 0)
	theirs.Name = "orders"
	insertDatasets(t, st, theirs)
	checkSame(t, "another tenant's dataset of the same name", theirs, getDataset(t, st, theirs.UUID))
	if d, err := st.DatasetGetByName(ctx, "acme", "orders"); err != nil || d.UUID != orders.UUID {
		t.Errorf("DatasetByName(acme, orders) = %v, %v; want %s", d, err, orders.UUID)
	}
}

// testUpdateDatasetWritesItsFields: DatasetUpdate writes a dataset's name, current version,
// storage, write mode, schema and filter fields, clearing them too, and nothing else.
func testUpdateDatasetWritesItsFields(t *testing.T, st store.Store) {
	ctx := t.Context()
	x := outputDataset("acme", "etl", "load", 0)
	neighbour := outputDataset("acme", "etl", "load", 1)
	insertDatasets(t, st, x, neighbour)
	update := func(d *store.Dataset) {
		t.Helper()
		inTx(t, st, func(tx store.Tx) error { return tx.DatasetUpdate(ctx, d) })
	}

	// Published under a name, with a schema: as a deploy does it.
	u := *x
	u.Name, u.CurrentVersion, u.Storage, u.WriteMode = "orders", "2024-06-01", "postgres", "buffered"
	u.Schema = json.RawMessage(`{"columns":[{"name":"order_id","type":"string"}]}`)
	u.FilterFields = json.RawMessage(`["region"]`)
	u.UpdatedAt = at(time.Minute)
	update(&u)
	checkSame(t, "a dataset after UpdateDataset", &u, getDataset(t, st, x.UUID), "UpdatedAt")
	if d, err := st.DatasetGetByName(ctx, "acme", "orders"); err != nil || d.UUID != x.UUID {
		t.Errorf("DatasetByName after naming it = %v, %v; want %s", d, err, x.UUID)
	}

	// What identifies the dataset is not written, whatever the caller passes.
	w := u
	w.CurrentVersion = "2024-06-02"
	w.Tenant, w.Producer, w.Pipeline, w.Job, w.OutputIndex, w.CreatedAt = "globex", "output:other/x/9", "other", "x", 9, at(time.Hour)
	update(&w)
	want := u
	want.CurrentVersion = "2024-06-02"
	checkSame(t, "a dataset after an update that names other identity fields", &want, getDataset(t, st, x.UUID), "UpdatedAt")

	// Cleared: unnamed again, without schema and filter fields.
	c := want
	c.Name, c.Storage, c.WriteMode, c.Schema, c.FilterFields, c.UpdatedAt = "", "", "", nil, nil, at(2*time.Minute)
	update(&c)
	checkSame(t, "a dataset after clearing its fields", &c, getDataset(t, st, x.UUID), "UpdatedAt")
	if d, err := st.DatasetGetByName(ctx, "acme", "orders"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DatasetByName after the name was cleared = %v, %v; want ErrNotFound", d, err)
	}
	checkSame(t, "a neighbour", neighbour, getDataset(t, st, neighbour.UUID))

	// An update never creates a dataset.
	ghost := outputDataset("acme", "etl", "ghost", 0)
	_ = st.InTx(ctx, func(tx store.Tx) error { return tx.DatasetUpdate(ctx, ghost) })
	if d := getDataset(t, st, ghost.UUID); d != nil {
		t.Errorf("UpdateDataset of an unknown uuid created %+v", d)
	}
}

// testListDatasetsNamedFirst: DatasetList lists a tenant's datasets, the named ones first by
// name, then the others.
func testListDatasetsNamedFirst(t *testing.T, st store.Store) {
	ctx := t.Context()
	extract := outputDataset("acme", "etl", "extract", 0)
	zeta := outputDataset("acme", "etl", "load", 0)
	zeta.Name = "zeta"
	alpha := bufferedDataset("acme", "alpha")
	load := outputDataset("acme", "etl", "load", 1)
	mid := bufferedDataset("acme", "mid")
	theirs := bufferedDataset("globex", "aaa")
	insertDatasets(t, st, extract, zeta, alpha, load, mid, theirs)

	list := func(tenant string) []*store.Dataset {
		t.Helper()
		ds, err := st.DatasetList(ctx, tenant)
		if err != nil {
			t.Fatalf("ListDatasets(%s): %v", tenant, err)
		}
		return ds
	}
	ds := list("acme")
	checkDatasets(t, "ListDatasets(acme)", ds, extract, zeta, alpha, load, mid)
	if len(ds) == 5 {
		checkIDs(t, "ListDatasets(acme): the named ones first, by name", datasetUUIDs(ds[:3]), []string{alpha.UUID, mid.UUID, zeta.UUID})
	}
	checkDatasets(t, "ListDatasets(globex)", list("globex"), theirs)
	checkDatasets(t, "ListDatasets(initech)", list("initech"))
}

// ---------------------------------------------------------------------------------------------
// Dataset versions

func versionKeys(vs []*store.DatasetVersion) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.DatasetUUID + "/" + v.Version
	}
	return out
}

// testDatasetVersions: DatasetVersionInsertMany registers each version of a dataset once (a repeat
// is skipped, the stored one unchanged), and DatasetVersionList lists the versions of the
// datasets asked for, oldest first, with every field.
func testDatasetVersions(t *testing.T, st store.Store) {
	ctx := t.Context()
	a, b := outputDataset("acme", "etl", "extract", 0), outputDataset("acme", "etl", "load", 0)
	b.CreatedAt, b.UpdatedAt = at(30*time.Second), at(30*time.Second)
	insertDatasets(t, st, a, b)
	job := newJob("acme")
	tk := newTask(job.ID, "extract")
	seed(t, st, job, tk)

	// The versions the deploy created, then those tasks published; the names do not sort like
	// their registrations.
	aDeploy := &store.DatasetVersion{DatasetUUID: a.UUID, Version: a.CurrentVersion, CreatedAt: t0}
	bDeploy := &store.DatasetVersion{DatasetUUID: b.UUID, Version: b.CurrentVersion, CreatedAt: at(30 * time.Second)}
	aJune := &store.DatasetVersion{DatasetUUID: a.UUID, Version: "m-2024-06-01",
		StorageRef: json.RawMessage(`{"prefix":"s3://lake/datasets/` + a.UUID + `/m-2024-06-01/","format":"parquet"}`),
		ConfigHash: "sha256:6f1ed002ab5595859014ebf0951522d9", Start: int64p(1_717_200_000_000), End: int64p(1_717_286_400_000),
		TaskID: tk.ID, CreatedAt: at(time.Minute)}
	bNext := &store.DatasetVersion{DatasetUUID: b.UUID, Version: "z-next", StorageRef: json.RawMessage(`{"table":"load_v2"}`),
		Start: int64p(0), TaskID: tk.ID, CreatedAt: at(2 * time.Minute)}
	aEarly := &store.DatasetVersion{DatasetUUID: a.UUID, Version: "a-backfill", ConfigHash: "sha256:00", End: int64p(1_700_000_000_000),
		TaskID: tk.ID, CreatedAt: at(3 * time.Minute)}
	inTx(t, st, func(tx store.Tx) error {
		return tx.DatasetVersionInsertMany(ctx, []*store.DatasetVersion{aDeploy, bDeploy})
	})
	inTx(t, st, func(tx store.Tx) error { return tx.DatasetVersionInsertMany(ctx, []*store.DatasetVersion{aJune}) })
	inTx(t, st, func(tx store.Tx) error { return tx.DatasetVersionInsertMany(ctx, []*store.DatasetVersion{bNext}) })
	// A repeat registration of June's version, beside a new one: skipped, the first one kept.
	repeat := *aJune
	repeat.StorageRef, repeat.ConfigHash, repeat.CreatedAt = json.RawMessage(`{"prefix":"elsewhere"}`), "sha256:ff", at(time.Hour)
	inTx(t, st, func(tx store.Tx) error {
		return tx.DatasetVersionInsertMany(ctx, []*store.DatasetVersion{&repeat, aEarly})
	})
	inTx(t, st, func(tx store.Tx) error { return tx.DatasetVersionInsertMany(ctx, nil) })

	list := func(uuids ...string) []*store.DatasetVersion {
		t.Helper()
		vs, err := st.DatasetVersionList(ctx, uuids...)
		if err != nil {
			t.Fatalf("ListDatasetVersions(%v): %v", uuids, err)
		}
		return vs
	}
	check := func(what string, got []*store.DatasetVersion, want ...*store.DatasetVersion) {
		t.Helper()
		checkIDs(t, what, versionKeys(got), versionKeys(want))
		if len(got) == len(want) {
			for i := range want {
				checkSame(t, what+": "+want[i].Version, want[i], got[i])
			}
		}
	}
	check("ListDatasetVersions(a)", list(a.UUID), aDeploy, aJune, aEarly)
	check("ListDatasetVersions(b)", list(b.UUID), bDeploy, bNext)
	check("ListDatasetVersions(a, b)", list(a.UUID, b.UUID), aDeploy, bDeploy, aJune, bNext, aEarly)
	check("ListDatasetVersions(b, unknown)", list(b.UUID, uuid.NewString()), bDeploy, bNext)
	check("ListDatasetVersions()", list())

	// Inside a transaction, as the router reads them.
	inTx(t, st, func(tx store.Tx) error {
		vs, err := tx.DatasetVersionList(ctx, b.UUID)
		if err != nil {
			return err
		}
		check("ListDatasetVersions(b) inside a transaction", vs, bDeploy, bNext)
		return nil
	})
	// A registered version becomes the current one.
	cur := getDataset(t, st, a.UUID)
	cur.CurrentVersion, cur.UpdatedAt = aJune.Version, at(4*time.Minute)
	inTx(t, st, func(tx store.Tx) error { return tx.DatasetUpdate(ctx, cur) })
	if got := getDataset(t, st, a.UUID); got.CurrentVersion != aJune.Version {
		t.Errorf("current version %q after UpdateDataset, want %q", got.CurrentVersion, aJune.Version)
	}
}

// ---------------------------------------------------------------------------------------------
// Dataset events

func eventIDs(es []*store.DatasetEvent) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func insertDatasetEvents(t testing.TB, st store.Store, es ...*store.DatasetEvent) int {
	t.Helper()
	var n int
	inTx(t, st, func(tx store.Tx) error {
		var err error
		n, err = tx.DatasetEventInsertMany(t.Context(), es)
		return err
	})
	return n
}

// testDatasetEvents: DatasetEventInsertMany stores events once per dedupe key, giving each new one
// its ID and counting them; DatasetEventListByTask lists a task's events oldest first, and
// DatasetEventListRecent a dataset's latest events by tasks of a tenant's jobs, newest first.
func testDatasetEvents(t *testing.T, st store.Store) {
	ctx := t.Context()
	ds, other := uuid.NewString(), uuid.NewString()
	job := newJob("acme")
	a, b := newTask(job.ID, "a"), newTask(job.ID, "b")
	seed(t, st, job, a, b)
	theirJob := newJob("globex")
	c := newTask(theirJob.ID, "c")
	seed(t, st, theirJob, c)

	cursor := func(tk *store.Task, n int64, created time.Time) *store.DatasetEvent {
		return &store.DatasetEvent{DedupeKey: fmt.Sprintf("cursor:%s:v1:%d:%s", ds, n, tk.ID), JobID: tk.JobID, TaskID: tk.ID, Attempt: 1,
			DatasetUUID: ds, DatasetVersion: "v1", Cursor: int64p(n), CreatedAt: created}
	}
	partition := &store.DatasetEvent{DedupeKey: "partition:" + ds + ":v1:2024-06-01:" + a.ID, JobID: job.ID, TaskID: a.ID, Attempt: 2,
		DatasetUUID: ds, DatasetVersion: "v1", PartitionKey: "2024-06-01", Start: int64p(1_717_200_000_000), End: int64p(1_717_286_400_000),
		CreatedAt: at(time.Second)}
	e1, e3 := cursor(a, 10, t0), cursor(a, 20, at(2*time.Second))
	if n := insertDatasetEvents(t, st, e1, partition, e3); n != 3 {
		t.Errorf("InsertDatasetEvents of 3 new events = %d", n)
	}
	ids := eventIDs([]*store.DatasetEvent{e1, partition, e3})
	for i, id := range ids {
		if id <= 0 || slices.Index(ids, id) != i {
			t.Fatalf("new events got IDs %v, want distinct IDs > 0", ids)
		}
	}

	// Repeats are skipped, whether stored before or earlier in the same call: a skipped event
	// keeps ID 0 and the stored one is unchanged.
	repeat := cursor(a, 10, at(time.Hour))
	repeat.Cursor, repeat.Attempt = int64p(99), 3
	e4 := cursor(b, 30, at(3*time.Second))
	e4again := cursor(b, 30, at(4*time.Second))
	e4again.Attempt = 2
	if n := insertDatasetEvents(t, st, repeat, e4, e4again); n != 1 {
		t.Errorf("InsertDatasetEvents of a stored event, a new one and its repeat = %d, want 1", n)
	}
	if repeat.ID != 0 {
		t.Errorf("a repeat of a stored event got ID %d, want 0", repeat.ID)
	}
	stored := e4 // the one of the pair that got an ID
	if (e4.ID == 0) == (e4again.ID == 0) {
		t.Errorf("a new event and its repeat in one call got IDs %d and %d, want exactly one of them 0", e4.ID, e4again.ID)
	} else if e4.ID == 0 {
		stored = e4again
	}
	again1, again3 := *e1, *e3
	again1.ID, again3.ID = 0, 0
	if n := insertDatasetEvents(t, st, &again1, &again3); n != 0 || again1.ID != 0 || again3.ID != 0 {
		t.Errorf("InsertDatasetEvents of stored events = %d, IDs %d and %d; want 0, none", n, again1.ID, again3.ID)
	}
	// Another task's event on another dataset, and another tenant's on this one.
	onOther := cursor(b, 40, at(5*time.Second))
	onOther.DatasetUUID, onOther.DedupeKey = other, "cursor:"+other+":v1:40"
	e6 := cursor(c, 50, at(6*time.Second))
	if n := insertDatasetEvents(t, st, onOther, e6); n != 2 {
		t.Errorf("InsertDatasetEvents of 2 new events = %d", n)
	}
	if !(e1.ID < stored.ID && e3.ID < stored.ID && stored.ID < onOther.ID && onOther.ID < e6.ID) {
		t.Errorf("IDs of events inserted in later transactions: %d, %d, %d, %d; want increasing",
			max(e1.ID, e3.ID), stored.ID, onOther.ID, e6.ID)
	}

	list := func(taskID string) []*store.DatasetEvent {
		t.Helper()
		es, err := st.DatasetEventListByTask(ctx, taskID)
		if err != nil {
			t.Fatalf("ListDatasetEvents(%s): %v", taskID, err)
		}
		return es
	}
	check := func(what string, got []*store.DatasetEvent, want ...*store.DatasetEvent) {
		t.Helper()
		if !slices.Equal(eventIDs(got), eventIDs(want)) {
			t.Errorf("%s: IDs %v, want %v", what, eventIDs(got), eventIDs(want))
			return
		}
		for i := range want {
			checkSame(t, fmt.Sprintf("%s: event %d", what, want[i].ID), want[i], got[i])
		}
	}
	ofA := []*store.DatasetEvent{e1, partition, e3}
	slices.SortFunc(ofA, func(x, y *store.DatasetEvent) int { return cmp.Compare(x.ID, y.ID) })
	check("ListDatasetEvents(a)", list(a.ID), ofA...)
	check("ListDatasetEvents(b)", list(b.ID), stored, onOther)
	check("ListDatasetEvents(c)", list(c.ID), e6)
	check("ListDatasetEvents(unknown)", list(uuid.NewString()))

	recent := func(tenant, dataset string, limit int) []*store.DatasetEvent {
		t.Helper()
		es, err := st.DatasetEventListRecent(ctx, store.DatasetEventListRecentParams{Tenant: tenant, DatasetUUID: dataset, Limit: limit})
		if err != nil {
			t.Fatalf("RecentDatasetEvents(%s, %s, %d): %v", tenant, dataset, limit, err)
		}
		return es
	}
	newestFirst := []*store.DatasetEvent{stored, ofA[2], ofA[1], ofA[0]}
	check("RecentDatasetEvents(acme, ds)", recent("acme", ds, 10), newestFirst...)
	check("RecentDatasetEvents(acme, ds, 2)", recent("acme", ds, 2), newestFirst[:2]...)
	check("RecentDatasetEvents(acme, other)", recent("acme", other, 10), onOther)
	check("RecentDatasetEvents(globex, ds)", recent("globex", ds, 10), e6)
	check("RecentDatasetEvents(initech, ds)", recent("initech", ds, 10))
}

// testDatasetEventsByVersionAfter: DatasetEventListAfter pages through one version of one
// dataset's events by id within (after, through]; DatasetEventMaxID is the newest event's id.
func testDatasetEventsByVersionAfter(t *testing.T, st store.Store) {
	ctx := t.Context()
	ds, other := uuid.NewString(), uuid.NewString()
	job := newJob("acme")
	a := newTask(job.ID, "a")
	seed(t, st, job, a)
	var es []*store.DatasetEvent
	for i, c := range []struct {
		ds, version string
	}{{ds, "v1"}, {ds, "v2"}, {other, "v1"}, {ds, "v1"}, {ds, "v1"}, {ds, "v1"}} {
		es = append(es, &store.DatasetEvent{DedupeKey: fmt.Sprintf("k%d-%s", i, ds), JobID: job.ID, TaskID: a.ID, Attempt: 1,
			DatasetUUID: c.ds, DatasetVersion: c.version, Cursor: int64p(int64(i)), CreatedAt: t0})
	}
	insertDatasetEvents(t, st, es...)
	maxID, err := st.DatasetEventMaxID(ctx)
	if err != nil || maxID < es[5].ID {
		t.Errorf("DatasetEventMaxID = %d, %v; want at least %d", maxID, err, es[5].ID)
	}
	list := func(after, through int64, limit int) []int64 {
		t.Helper()
		got, err := st.DatasetEventListAfter(ctx, store.DatasetEventListParams{DatasetUUID: ds, DatasetVersion: "v1", AfterID: after, ThroughID: through, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		return eventIDs(got)
	}
	if got := list(0, maxID, 2); !slices.Equal(got, []int64{es[0].ID, es[3].ID}) {
		t.Errorf("first page = %v, want %v", got, []int64{es[0].ID, es[3].ID})
	}
	if got := list(es[3].ID, es[4].ID, 10); !slices.Equal(got, []int64{es[4].ID}) {
		t.Errorf("page through %d = %v, want %v", es[4].ID, got, []int64{es[4].ID})
	}
	if got := list(es[5].ID, maxID, 10); len(got) != 0 {
		t.Errorf("past the last = %v", got)
	}

}
