package dataset

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataset/datasettest"
)

// loadVersion loads rows as batch id of acme, of the dataset version version.
func (f *fixture) loadVersion(id, version string, rows ...Row) (Loaded, error) {
	return f.db.Load(context.Background(), Batch{ID: id, Tenant: "acme", DatasetUUID: f.uuid, Version: version, Schema: f.s,
		Rows: rows, FacetFields: []string{"severity"}})
}

// Rule: a reset that retires a version (RetireVersion, with ClearTenant) makes every later load
// of a batch of that version fail with ErrStaleVersion, changing nothing: the emptied table, which
// readers of the next version see, gets none of its rows. Batches of other versions, and of the
// same version into other datasets, load as before; a reset whose transaction fails retires
// nothing.
func TestLoadRefusesAVersionAResetRetired(t *testing.T) {
	t.Parallel()
	forEachDumpedDriver(t, func(t *testing.T, db *DB, url string, _ func() *DB) {
		ctx := context.Background()
		a, other := newFixture(t, db, alerts()), newFixture(t, db, alerts())
		old, fresh := uuid.NewString(), uuid.NewString()
		if _, err := a.loadVersion("b1", old, alert("k1", "high"), alert("k2", "low")); err != nil {
			t.Fatal(err)
		}
		reset := []Table{{DatasetUUID: a.uuid, Schema: alerts(), ClearTenant: "acme", RetireVersion: old}}

		before := datasettest.Dump(t, url)
		refused := errors.New("the caller's own transaction failed")
		if err := db.EnsureAll(ctx, reset, func(Cleared) error { return refused }); err != refused {
			t.Fatalf("ensure all: %v, want during's error", err)
		}
		if after := datasettest.Dump(t, url); after != before {
			t.Fatalf("a reset whose during failed changed the database:\n%s", datasettest.Diff(before, after))
		}
		if res, err := a.loadVersion("b2", old, alert("k3", "high")); err != nil || res.Inserted != 1 {
			t.Fatalf("a load of the version a failed reset would have retired: %+v %v", res, err)
		}

		if err := db.EnsureAll(ctx, reset, nil); err != nil {
			t.Fatalf("reset: %v", err)
		}
		afterReset := datasettest.Dump(t, url)
		for _, rows := range [][]Row{{alert("k4", "high")}, {alert("k1", "high"), alert("k5", "low")}} {
			res, err := a.loadVersion("late", old, rows...)
			if !errors.Is(err, ErrStaleVersion) {
				t.Fatalf("a load of the retired version after the reset: %+v %v, want ErrStaleVersion", res, err)
			}
		}
		if got := keys(a.rows(Query{Tenant: "acme", Limit: 10})); len(got) != 0 {
			t.Fatalf("rows after refused loads of the retired version: %v", got)
		}
		if after := datasettest.Dump(t, url); after != afterReset {
			t.Fatalf("a refused load changed the database:\n%s", datasettest.Diff(afterReset, after))
		}
		// The refused load left no ledger entry: the same batch id loads as a batch of the
		// version that is current now, at the cursor after the loads before the reset.
		res, err := a.loadVersion("late", fresh, alert("k4", "high"))
		if err != nil || res.Repeat || res.Inserted != 1 || res.Cursor != 3 {
			t.Fatalf("the batch id of a refused load, of the fresh version: %+v %v; want 1 new row at cursor 3", res, err)
		}
		if res, err := a.loadVersion("unversioned", "", alert("k6", "high")); err != nil || res.Inserted != 1 {
			t.Fatalf("a batch of no version: %+v %v", res, err)
		}
		if res, err := other.loadVersion("o1", old, alert("k1", "high")); err != nil || res.Inserted != 1 {
			t.Fatalf("a batch of the retired version into another dataset: %+v %v", res, err)
		}
		if got := keys(a.rows(Query{Tenant: "acme", Limit: 10})); !slices.Equal(got, []string{"k4", "k6"}) {
			t.Fatalf("rows after the reset: %v, want k4 and k6", got)
		}
		// A repeat of a batch loaded before the reset changes nothing and is answered as ever.
		if res, err := a.loadVersion("b1", old, alert("k1", "high"), alert("k2", "low")); err != nil || !res.Repeat {
			t.Fatalf("a repeat of a batch loaded before the reset: %+v %v", res, err)
		}
	})
}

// Rule: a load of a retired version that is under way while the reset's transaction is open is
// refused once the reset commits, and the emptied table gets none of its rows. On PostgreSQL the
// load waits for the reset either at a row the reset deleted (a key it inserts again), or, with
// new keys, at the dataset's cursor row, which the reset locked before its delete; on SQLite, for
// the only writer.
func TestALoadWaitingForAResetIsRefusedWhenTheResetCommits(t *testing.T) {
	t.Parallel()
	forEachDumpedDriver(t, func(t *testing.T, db *DB, _ string, _ func() *DB) {
		for _, tc := range []struct {
			name string
			rows []Row
		}{
			{"new keys", []Row{alert("k2", "low"), alert("k3", "high")}},
			{"a deleted key", []Row{alert("k1", "high"), alert("k2", "low")}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				a := newFixture(t, db, alerts())
				old := uuid.NewString()
				if _, err := a.loadVersion(tc.name+" b1", old, alert("k1", "high")); err != nil {
					t.Fatal(err)
				}
				type result struct {
					res Loaded
					err error
				}
				done := make(chan result, 1)
				reset := []Table{{DatasetUUID: a.uuid, Schema: alerts(), ClearTenant: "acme", RetireVersion: old}}
				err := db.EnsureAll(ctx, reset, func(c Cleared) error {
					if c[a.uuid] != 1 {
						t.Errorf("cleared %v, want 1 row", c)
					}
					waiting := waits(t, db)
					go func() {
						res, err := a.loadVersion(tc.name+" in flight", old, tc.rows...)
						done <- result{res, err}
					}()
					// Commit only once the load waits for this transaction.
					for !waiting() {
						select {
						case r := <-done:
							t.Errorf("the load ended while the reset was open: %+v %v", r.res, r.err)
							done <- r
							return nil
						case <-time.After(time.Millisecond):
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("reset: %v", err)
				}
				r := <-done
				if !errors.Is(r.err, ErrStaleVersion) {
					t.Fatalf("the load that waited for the reset: %+v %v, want ErrStaleVersion", r.res, r.err)
				}
				if got := keys(a.rows(Query{Tenant: "acme", Limit: 10})); len(got) != 0 {
					t.Fatalf("rows after the reset: %v, want none", got)
				}
			})
		}
	})
}

// waits returns a function that reports whether a transaction of db waits, from now on: on
// PostgreSQL for a lock another holds, on SQLite for the writing connection.
func waits(t *testing.T, db *DB) func() bool {
	t.Helper()
	switch b := db.b.(type) {
	case *sqlite:
		before := b.write.Stats().WaitCount
		return func() bool { return b.write.Stats().WaitCount > before }
	case *postgres:
		return func() bool {
			var n int
			if _, err := queryRow(t.Context(), b.reader(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`, nil, &n); err != nil {
				t.Error(err)
				return true
			}
			return n > 0
		}
	}
	t.Fatalf("unknown backend %T", db.b)
	return nil
}
