package dataset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataset/datasettest"
	"github.com/baton-dev/baton/internal/pipeline"
)

// forEachDumpedDriver runs fn as a parallel subtest per driver, on a database of its own, with
// its URL for datasettest.Dump and a way to open more handles on it (other processes).
func forEachDumpedDriver(t *testing.T, fn func(t *testing.T, db *DB, url string, another func() *DB)) {
	t.Helper()
	for _, driver := range datasettest.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			url := datasettest.URL(t, driver)
			fn(t, openTest(t, url), url, func() *DB { return openTest(t, url) })
		})
	}
}

// grown is alerts with an optional column region, indexed.
func grown() *pipeline.Schema {
	return edit(func(s *pipeline.Schema) {
		s.Columns = append(s.Columns, pipeline.Column{Name: "region", Type: pipeline.TypeString})
		s.Indexes = append(s.Indexes, []string{"region"})
	})
}

// retyped is alerts whose severity became an integer: no table of alerts can serve it.
func retyped() *pipeline.Schema {
	return edit(func(s *pipeline.Schema) { s.Columns[1].Type = pipeline.TypeInteger })
}

func TestEnsureAllChangesNothingWhenOneTableCannotServeItsSchema(t *testing.T) {
	t.Parallel()
	forEachDumpedDriver(t, func(t *testing.T, db *DB, url string, _ func() *DB) {
		ctx := context.Background()
		a, b, c := newFixture(t, db, alerts()), newFixture(t, db, alerts()), newFixture(t, db, alerts())
		c.load("acme", "c1", alert("k1", "high"))
		before := datasettest.Dump(t, url)
		fresh := uuid.NewString()
		// a gains a column, a new table is created, and b and c cannot serve theirs: nothing
		// happens, and both are named.
		err := db.EnsureAll(ctx, []Table{{DatasetUUID: a.uuid, Schema: grown()}, {DatasetUUID: b.uuid, Schema: retyped()}, {DatasetUUID: fresh, Schema: alerts()},
			{DatasetUUID: c.uuid, Schema: edit(func(s *pipeline.Schema) { s.Unique = []string{"host"} })}}, nil)
		var inc *IncompatibleError
		if !errors.As(err, &inc) || !errors.Is(err, ErrIncompatible) {
			t.Fatalf("ensure all: %v, want an IncompatibleError", err)
		}
		if got, want := slices.Sorted(maps.Keys(inc.Datasets)), sortedStrings(b.uuid, c.uuid); !slices.Equal(got, want) {
			t.Fatalf("incompatible datasets %v, want %v (%v)", got, want, err)
		}
		if msg := inc.Datasets[b.uuid].Error(); msg != `column "severity" changes type from string to integer; a buffered dataset's table only gains optional columns` {
			t.Errorf("b's reasons: %s", msg)
		}
		if after := datasettest.Dump(t, url); after != before {
			t.Fatalf("a refused EnsureAll changed the database:\n%s", datasettest.Diff(before, after))
		}
		// The same without b and c: every change is made.
		if err := db.EnsureAll(ctx, []Table{{DatasetUUID: a.uuid, Schema: grown()}, {DatasetUUID: b.uuid, Schema: alerts()}, {DatasetUUID: fresh, Schema: alerts()}}, nil); err != nil {
			t.Fatalf("ensure all: %v", err)
		}
		if got := tableColumns(t, db, a.uuid); !slices.Contains(got, "region") {
			t.Errorf("a's columns: %v", got)
		}
		if got := tableColumns(t, db, fresh); len(got) == 0 {
			t.Errorf("the new table was not created")
		}
		if got := keys(c.rows(Query{Tenant: "acme"})); !slices.Equal(got, []string{"k1"}) {
			t.Errorf("c's rows: %v", got)
		}
	})
}

func TestEnsureAllCommitsOnlyWhenDuringSucceeds(t *testing.T) {
	t.Parallel()
	forEachDumpedDriver(t, func(t *testing.T, db *DB, url string, _ func() *DB) {
		ctx := context.Background()
		a := newFixture(t, db, alerts())
		before := datasettest.Dump(t, url)
		fresh := uuid.NewString()
		tables := []Table{{DatasetUUID: a.uuid, Schema: grown()}, {DatasetUUID: fresh, Schema: alerts()}}
		refused := errors.New("the caller's own transaction failed")
		calls := 0
		err := db.EnsureAll(ctx, tables, func(Cleared) error { calls++; return refused })
		if err != refused || calls != 1 {
			t.Fatalf("ensure all: %v after %d calls of during, want during's own error after 1", err, calls)
		}
		if after := datasettest.Dump(t, url); after != before {
			t.Fatalf("EnsureAll committed although during failed:\n%s", datasettest.Diff(before, after))
		}
		// during does not run when a table cannot serve its schema.
		err = db.EnsureAll(ctx, []Table{{DatasetUUID: a.uuid, Schema: retyped()}}, func(Cleared) error { calls++; return nil })
		if !errors.Is(err, ErrIncompatible) || calls != 1 {
			t.Fatalf("ensure all of an incompatible schema: %v, during called %d times", err, calls)
		}
		if err := db.EnsureAll(ctx, tables, func(Cleared) error { calls++; return nil }); err != nil || calls != 2 {
			t.Fatalf("ensure all: %v, during called %d times", err, calls)
		}
		if got := tableColumns(t, db, a.uuid); !slices.Contains(got, "region") {
			t.Errorf("a's columns: %v", got)
		}
		if got := tableColumns(t, db, fresh); len(got) == 0 {
			t.Errorf("the new table was not created")
		}
		// With during, tables that need nothing still run it.
		if err := db.EnsureAll(ctx, tables, func(Cleared) error { calls++; return nil }); err != nil || calls != 3 {
			t.Fatalf("ensure all again: %v, during called %d times", err, calls)
		}
	})
}

// Processes ensuring overlapping sets of datasets, listed in different orders, all succeed: the
// locks are taken in one order.
func TestEnsureAllConcurrently(t *testing.T) {
	t.Parallel()
	forEachDumpedDriver(t, func(t *testing.T, db *DB, _ string, another func() *DB) {
		ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			d := db
			if i%2 == 1 {
				d = another()
			}
			// Each call ensures three of the four datasets, starting at a different one.
			var tables []Table
			for k := range 3 {
				s := alerts()
				if k == 1 {
					s = grown()
				}
				tables = append(tables, Table{DatasetUUID: ids[(i+k)%len(ids)], Schema: s})
			}
			wg.Go(func() { errs[i] = d.EnsureAll(context.Background(), tables, func(Cleared) error { return nil }) })
		}
		wg.Wait()
		for i, err := range errs {
			// A table given grown() by one call and alerts() by a later one keeps its column
			// (the later one is refused, as a removal): either outcome is the order's, not a
			// failure of locking.
			if err != nil && !errors.Is(err, ErrIncompatible) {
				t.Errorf("call %d: %v", i, err)
			}
		}
		for _, id := range ids {
			if cols := tableColumns(t, db, id); len(cols) == 0 {
				t.Errorf("dataset %s has no table", id)
			}
		}
	})
}

func sortedStrings(s ...string) []string {
	slices.Sort(s)
	return s
}

func TestIncompatibleErrorNamesEachDataset(t *testing.T) {
	t.Parallel()
	err := &IncompatibleError{Datasets: map[string]error{"b": fmt.Errorf("%w: y", ErrIncompatible), "a": errors.New("x")}}
	if got, want := err.Error(), "dataset a: x\ndataset b: incompatible dataset schema: y"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// A clear removes one tenant's rows, only when the transaction commits, and keeps the dataset's
// cursor and ledger: a batch loaded before is not loaded again, and the next load's cursor is
// past every earlier one.
func TestEnsureAllClearsOneTenantsRowsAndKeepsCursors(t *testing.T) {
	t.Parallel()
	forEachDumpedDriver(t, func(t *testing.T, db *DB, url string, _ func() *DB) {
		ctx := context.Background()
		a, other := newFixture(t, db, alerts()), newFixture(t, db, alerts())
		a.load("acme", "b1", alert("k1", "high"), alert("k2", "low"))
		a.load("zeta", "z1", alert("k1", "high"))
		last := a.load("acme", "b2", alert("k3", "low"))
		other.load("acme", "o1", alert("k1", "high"))
		clear := []Table{{DatasetUUID: a.uuid, Schema: alerts(), ClearTenant: "acme"}}

		before := datasettest.Dump(t, url)
		refused := errors.New("the caller's own transaction failed")
		var seen Cleared
		err := db.EnsureAll(ctx, clear, func(c Cleared) error { seen = c; return refused })
		if err != refused || seen[a.uuid] != 3 || len(seen) != 1 {
			t.Fatalf("ensure all: %v, during saw %v; want its error, and 3 rows of %s", err, seen, a.uuid)
		}
		if after := datasettest.Dump(t, url); after != before {
			t.Fatalf("a clear whose during failed changed the database:\n%s", datasettest.Diff(before, after))
		}
		if got := keys(a.rows(Query{Tenant: "acme", Limit: 10})); !slices.Equal(got, []string{"k1", "k2", "k3"}) {
			t.Fatalf("acme's rows after a clear whose during failed: %v", got)
		}

		if err := db.EnsureAll(ctx, clear, nil); err != nil {
			t.Fatalf("ensure all: %v", err)
		}
		if got := keys(a.rows(Query{Tenant: "acme", Limit: 10})); len(got) != 0 {
			t.Errorf("acme's rows after the clear: %v", got)
		}
		if got := keys(a.rows(Query{Tenant: "zeta", Limit: 10})); !slices.Equal(got, []string{"k1"}) {
			t.Errorf("zeta's rows after acme's clear: %v", got)
		}
		if got := keys(other.rows(Query{Tenant: "acme", Limit: 10})); !slices.Equal(got, []string{"k1"}) {
			t.Errorf("another dataset's rows after the clear: %v", got)
		}
		if res := a.load("acme", "b1", alert("k1", "high"), alert("k2", "low")); !res.Repeat {
			t.Errorf("a batch loaded before the clear was loaded again: %+v", res)
		}
		res := a.load("acme", "b3", alert("k1", "high"))
		if res.Inserted != 1 || res.Cursor <= last.Cursor {
			t.Errorf("the first load after the clear: %+v; want 1 row and a cursor past %d", res, last.Cursor)
		}
		if got := keys(a.rows(Query{Tenant: "acme", Limit: 10})); !slices.Equal(got, []string{"k1"}) {
			t.Errorf("acme's rows after the next load: %v", got)
		}
	})
}
