package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/pipeline"
)

// fixture is one dataset of a test's database.
type fixture struct {
	t    *testing.T
	db   *DB
	uuid string
	s    *pipeline.Schema
}

func newFixture(t *testing.T, db *DB, s *pipeline.Schema) *fixture {
	f := &fixture{t: t, db: db, uuid: uuid.NewString(), s: s}
	if err := db.Ensure(context.Background(), f.uuid, s); err != nil {
		t.Fatalf("ensure: %v", err)
	}
	return f
}

// alert is a row of alerts().
func alert(key, severity string) Row { return Row{"dedupe_key": key, "severity": severity} }

// load loads rows as batch id for tenant, reporting severity as a facet when the schema has it.
func (f *fixture) load(tenant, id string, rows ...Row) Loaded {
	f.t.Helper()
	var facets []string
	if _, ok := column(f.s, "severity"); ok {
		facets = []string{"severity"}
	}
	res, err := f.db.Load(context.Background(), Batch{ID: id, Tenant: tenant, DatasetUUID: f.uuid, Schema: f.s, Rows: rows,
		FacetFields: facets})
	if err != nil {
		f.t.Fatalf("load %s: %v", id, err)
	}
	return res
}

func (f *fixture) rows(q Query) Page {
	f.t.Helper()
	p, err := f.db.Rows(context.Background(), f.uuid, f.s, q)
	if err != nil {
		f.t.Fatalf("rows %+v: %v", q, err)
	}
	return p
}

// keys is the dedupe_key of each row of p.
func keys(p Page) []string {
	out := make([]string, len(p.Rows))
	for i, r := range p.Rows {
		out[i] = r["dedupe_key"].(string)
	}
	return out
}

func TestEnsureCreatesTheTable(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		wantCols := []string{"_row", "org_id", "dedupe_key", "severity", "host", "count", "_batch"}
		if got := tableColumns(t, db, f.uuid); !slices.Equal(got, wantCols) {
			t.Fatalf("columns %v, want %v", got, wantCols)
		}
		table := TableName(f.uuid)
		wantIdx := []string{table + "_batch", indexName(table, []string{"severity"})}
		if _, ok := db.b.(*sqlite); ok {
			wantIdx = append(wantIdx, table+"_org")
		}
		slices.Sort(wantIdx)
		if got := tableIndexes(t, db, f.uuid); !slices.Equal(got, wantIdx) {
			t.Fatalf("indexes %v, want %v", got, wantIdx)
		}
		if res := f.load("acme", "b1", alert("k1", "high")); res.Inserted != 1 {
			t.Fatalf("loaded %+v", res)
		}
		if got := keys(f.rows(Query{Tenant: "acme"})); !slices.Equal(got, []string{"k1"}) {
			t.Fatalf("rows %v", got)
		}
	})
}

func TestEnsureIsIdempotent(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, another func() *DB) {
		f := newFixture(t, db, alerts())
		f.load("acme", "b1", alert("k1", "high"))
		if err := db.Ensure(context.Background(), f.uuid, alerts()); err != nil {
			t.Fatalf("ensure again: %v", err)
		}
		if got := keys(f.rows(Query{Tenant: "acme"})); !slices.Equal(got, []string{"k1"}) {
			t.Fatalf("rows %v", got)
		}
	})
}

// Processes starting together each ensure the dataset's table: one creates it, the others find it.
func TestEnsureConcurrently(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, another func() *DB) {
		id := uuid.NewString()
		dbs := []*DB{db, another(), another(), another()}
		grown := edit(func(s *pipeline.Schema) {
			s.Columns = append(s.Columns, pipeline.Column{Name: "region", Type: pipeline.TypeString})
			s.Indexes = append(s.Indexes, []string{"region"})
		})
		for _, s := range []*pipeline.Schema{alerts(), grown} {
			var wg sync.WaitGroup
			errs := make([]error, len(dbs))
			for i, d := range dbs {
				wg.Go(func() { errs[i] = d.Ensure(context.Background(), id, s) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"_row", "org_id", "dedupe_key", "severity", "host", "count", "_batch", "region"}
		if got := tableColumns(t, db, id); !slices.Equal(got, want) {
			t.Fatalf("columns %v, want %v", got, want)
		}
	})
}

func TestEnsureAddsOptionalColumns(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		f.load("acme", "b1", alert("k1", "high"))
		f.s = edit(func(s *pipeline.Schema) {
			s.Columns = append(s.Columns, pipeline.Column{Name: "region", Type: pipeline.TypeString})
			s.Indexes = append(s.Indexes, []string{"region", "severity"})
		})
		if err := db.Ensure(context.Background(), f.uuid, f.s); err != nil {
			t.Fatalf("ensure with a new column: %v", err)
		}
		if !slices.Contains(tableIndexes(t, db, f.uuid), indexName(TableName(f.uuid), []string{"region", "severity"})) {
			t.Fatalf("the new index is missing: %v", tableIndexes(t, db, f.uuid))
		}
		f.load("acme", "b2", Row{"dedupe_key": "k2", "region": "eu"})
		p := f.rows(Query{Tenant: "acme"})
		want := []map[string]any{
			{"dedupe_key": "k1", "severity": "high", "host": nil, "count": nil, "region": nil, "_cursor": int64(1)},
			{"dedupe_key": "k2", "severity": nil, "host": nil, "count": nil, "region": "eu", "_cursor": int64(2)},
		}
		if !reflect.DeepEqual(p.Rows, want) {
			t.Fatalf("rows:\n got  %v\n want %v", p.Rows, want)
		}
		// A sink still on the old schema loads beside it.
		old := &fixture{t: t, db: db, uuid: f.uuid, s: alerts()}
		if res := old.load("acme", "b3", alert("k3", "low")); res.Inserted != 1 {
			t.Fatalf("a load with the old schema: %+v", res)
		}
	})
}

func TestEnsureRefusesAnIncompatibleSchema(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		f.load("acme", "b1", alert("k1", "high"))
		cols, idx := tableColumns(t, db, f.uuid), tableIndexes(t, db, f.uuid)
		bad := edit(func(s *pipeline.Schema) {
			s.Columns[1].Type = pipeline.TypeInteger
			s.Columns = append(s.Columns, pipeline.Column{Name: "region", Type: pipeline.TypeString})
			s.Indexes = append(s.Indexes, []string{"region"})
		})
		err := db.Ensure(context.Background(), f.uuid, bad)
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), `column "severity" changes type from string to integer`) {
			t.Fatalf("ensure an incompatible schema: %v", err)
		}
		if got := tableColumns(t, db, f.uuid); !slices.Equal(got, cols) {
			t.Fatalf("columns %v, were %v", got, cols)
		}
		if got := tableIndexes(t, db, f.uuid); !slices.Equal(got, idx) {
			t.Fatalf("indexes %v, were %v", got, idx)
		}
		old, err := db.ensured(context.Background(), db.b.reader(), dataset{uuid: f.uuid})
		if err != nil || !reflect.DeepEqual(old, alerts()) {
			t.Fatalf("recorded schema %+v (%v), want the first", old, err)
		}
		if err := db.Ensure(context.Background(), f.uuid, alerts()); err != nil {
			t.Fatalf("ensure the first schema again: %v", err)
		}
	})
}

func TestLoadingABatchAgainIsARepeat(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		rows := []Row{alert("k1", "high"), alert("k2", "low"), alert("k3", "high")}
		first := f.load("acme", "b1", rows...)
		want := Loaded{Cursor: 1, Inserted: 3, Facets: map[string][]any{"severity": {"high", "low"}}}
		if !reflect.DeepEqual(first, want) {
			t.Fatalf("first load %+v, want %+v", first, want)
		}
		again := f.load("acme", "b1", append(rows, alert("k4", "low"))...)
		want.Repeat = true
		if !reflect.DeepEqual(again, want) {
			t.Fatalf("second load %+v, want %+v", again, want)
		}
		if got := keys(f.rows(Query{Tenant: "acme"})); !slices.Equal(got, []string{"k1", "k2", "k3"}) {
			t.Fatalf("rows %v", got)
		}
	})
}

func TestLoadInsertsOnlyNewKeys(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		a := f.load("acme", "a", alert("k1", "high"), alert("k2", "high"))
		b := f.load("acme", "b", alert("k2", "low"), alert("k3", "low"), alert("k3", "medium"))
		c := f.load("acme", "c", alert("k1", "low"), alert("k3", "high"))
		if a.Inserted != 2 || b.Inserted != 1 || c.Inserted != 0 {
			t.Fatalf("inserted %d, %d, %d; want 2, 1, 0", a.Inserted, b.Inserted, c.Inserted)
		}
		if a.Cursor != 1 || b.Cursor != 2 || c.Cursor != 0 {
			t.Fatalf("cursors %d, %d, %d; want 1, 2, 0", a.Cursor, b.Cursor, c.Cursor)
		}
		// The facets are those of the rows inserted: k2 "low" was not, k3 "medium" came second.
		if want := map[string][]any{"severity": {"low"}}; !reflect.DeepEqual(b.Facets, want) {
			t.Fatalf("facets %v, want %v", b.Facets, want)
		}
		if want := map[string][]any{"severity": {}}; !reflect.DeepEqual(c.Facets, want) {
			t.Fatalf("facets of a load that inserted nothing %v, want %v", c.Facets, want)
		}
		p := f.rows(Query{Tenant: "acme"})
		got := make([]string, len(p.Rows))
		for i, r := range p.Rows {
			got[i] = fmt.Sprintf("%s=%s@%d", r["dedupe_key"], r["severity"], r["_cursor"])
		}
		if want := []string{"k1=high@1", "k2=high@1", "k3=low@2"}; !slices.Equal(got, want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		if d := f.load("acme", "d"); d.Inserted != 0 || d.Cursor != 0 {
			t.Fatalf("an empty batch: %+v", d)
		}
	})
}

func TestLoadTakesTheTenantFromTheBatch(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		rows, err := ParseBatch(strings.NewReader(`{"dedupe_key": "k1", "org_id": "globex"}`), f.s, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.load("acme", "b1", rows...)
		f.load("acme", "b2", Row{"dedupe_key": "k2", "org_id": "globex"})
		if got := keys(f.rows(Query{Tenant: "acme"})); !slices.Equal(got, []string{"k1", "k2"}) {
			t.Fatalf("acme's rows %v", got)
		}
		if got := f.rows(Query{Tenant: "globex"}); len(got.Rows) != 0 {
			t.Fatalf("globex's rows %v", got.Rows)
		}
	})
}

func TestTenantsAreApart(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		a := f.load("acme", "a", alert("k1", "high"), alert("k2", "high"))
		g := f.load("globex", "g", alert("k1", "low"))
		if a.Inserted != 2 || g.Inserted != 1 {
			t.Fatalf("a tenant's keys are its own: inserted %d and %d", a.Inserted, g.Inserted)
		}
		if got := keys(f.rows(Query{Tenant: "globex"})); !slices.Equal(got, []string{"k1"}) {
			t.Fatalf("globex's rows %v", got)
		}
		if got := f.rows(Query{Tenant: "globex", Cursor: a.Cursor}); len(got.Rows) != 0 {
			t.Fatalf("globex reads acme's load: %v", got.Rows)
		}
		_, err := db.Load(context.Background(), Batch{ID: "a", Tenant: "globex", DatasetUUID: f.uuid, Schema: f.s})
		if !errors.Is(err, ErrBatchConflict) {
			t.Fatalf("another tenant's batch id: %v, want ErrBatchConflict", err)
		}
	})
}

func TestRowsWhere(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, everyType())
		rows, err := ParseBatch(strings.NewReader(strings.Join([]string{
			`{"id": "a", "name": "x", "n": 1, "f": 0.5, "ok": true, "at": "2025-03-01T10:00:00Z", "doc": "red"}`,
			`{"id": "b", "name": "y", "n": 2, "f": 1.5, "ok": false, "at": "2025-03-01T11:00:00.5+01:00"}`,
			`{"id": "c", "name": "x", "n": 3, "ok": true, "at": "2025-03-02T10:00:00.000001Z", "doc": {"k": 1}}`,
		}, "\n")), f.s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res := f.load("acme", "b1", rows...); res.Inserted != 3 {
			t.Fatalf("loaded %+v", res)
		}
		f.load("globex", "g1", Row{"id": "a", "name": "x"})
		cases := []struct {
			where map[string]any
			want  []string
		}{
			{nil, []string{"a", "b", "c"}},
			{map[string]any{"name": "x"}, []string{"a", "c"}},
			{map[string]any{"name": "x", "ok": true}, []string{"a", "c"}},
			{map[string]any{"name": "x", "n": json.Number("3")}, []string{"c"}},
			{map[string]any{"n": []any{json.Number("1"), json.Number("2.0"), 7}}, []string{"a", "b"}},
			{map[string]any{"f": json.Number("1.5")}, []string{"b"}},
			{map[string]any{"ok": false}, []string{"b"}},
			{map[string]any{"at": "2025-03-01T10:00:00.5Z"}, []string{"b"}},
			{map[string]any{"at": []any{"2025-03-01T11:00:00+01:00", "2025-03-02T10:00:00.000001000Z"}}, []string{"a", "c"}},
			{map[string]any{"doc": "red"}, []string{"a"}},
			{map[string]any{"name": []any{"y", "z"}}, []string{"b"}},
			{map[string]any{"name": "nobody"}, []string{}},
		}
		for _, tc := range cases {
			p := f.rows(Query{Tenant: "acme", Where: tc.where})
			got := make([]string, len(p.Rows))
			for i, r := range p.Rows {
				got[i] = r["id"].(string)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("where %v: rows %v, want %v", tc.where, got, tc.want)
			}
		}
		_, err = db.Rows(context.Background(), f.uuid, f.s, Query{Tenant: "acme", Where: map[string]any{"colour": "red"}})
		if !errors.Is(err, ErrBadQuery) {
			t.Errorf("where on an unknown column: %v, want ErrBadQuery", err)
		}
		_, err = db.Rows(context.Background(), f.uuid, f.s, Query{Tenant: "acme", Where: map[string]any{"n": "1; DROP TABLE x"}})
		if !errors.Is(err, ErrBadQuery) {
			t.Errorf("where with a value of another type: %v, want ErrBadQuery", err)
		}
	})
}

// Every type reads back as Rows promises.
func TestRowsReadEveryType(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, everyType())
		rows, err := ParseBatch(strings.NewReader(
			`{"id": "a", "name": "x", "n": -9223372036854775808, "f": 0.1, "ok": true, "at": "2025-03-01T11:00:00.1234567+01:00", "doc": {"b": [1, "two", null], "a": {}}}`+"\n"+
				`{"id": "b", "name": "y"}`), f.s, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.load("acme", "b1", rows...)
		want := []map[string]any{
			{"id": "a", "name": "x", "n": int64(-9223372036854775808), "f": 0.1, "ok": true, "at": "2025-03-01T10:00:00.123456000Z",
				"doc": json.RawMessage(`{"a":{},"b":[1,"two",null]}`), "_cursor": int64(1)},
			{"id": "b", "name": "y", "n": nil, "f": nil, "ok": nil, "at": nil, "doc": nil, "_cursor": int64(1)},
		}
		got := f.rows(Query{Tenant: "acme"}).Rows
		if _, ok := db.b.(*sqlite); ok {
			// SQLite keeps json as written; PostgreSQL orders an object's keys.
			want[0]["doc"] = json.RawMessage(`{"b":[1,"two",null],"a":{}}`)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("rows:\n got  %v\n want %v", got, want)
		}
	})
}

func TestRowsPages(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		var all []string
		for b := range 5 {
			var rows []Row
			for i := range 5 {
				k := fmt.Sprintf("k%d%d", b, i)
				rows = append(rows, alert(k, "high"))
				all = append(all, k)
			}
			f.load("acme", fmt.Sprint("b", b), rows...)
			f.load("globex", fmt.Sprint("g", b), rows...)
		}
		var got []string
		pages := 0
		for after := int64(0); ; pages++ {
			p := f.rows(Query{Tenant: "acme", After: after, Limit: 10})
			got = append(got, keys(p)...)
			if p.Next == 0 {
				break
			}
			after = p.Next
		}
		if !slices.Equal(got, all) || pages != 2 {
			t.Fatalf("%d pages of %v, want 3 of %v", pages+1, got, all)
		}
		if p := f.rows(Query{Tenant: "acme", Limit: 25}); len(p.Rows) != 25 || p.Next != 0 {
			t.Fatalf("a page of exactly every row: %d rows, next %d", len(p.Rows), p.Next)
		}
		if _, err := db.Rows(context.Background(), f.uuid, f.s, Query{Tenant: "acme", Limit: MaxLimit + 1}); !errors.Is(err, ErrBadQuery) {
			t.Fatalf("a limit over the maximum: %v", err)
		}
	})
}

func TestRowsOfOneCursor(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		a := f.load("acme", "a", alert("k1", "high"), alert("k2", "low"))
		f.load("globex", "g", alert("k9", "high"))
		b := f.load("acme", "b", alert("k2", "low"), alert("k3", "low"), alert("k4", "high"))
		if got := keys(f.rows(Query{Tenant: "acme", Cursor: b.Cursor})); !slices.Equal(got, []string{"k3", "k4"}) {
			t.Fatalf("rows of cursor %d: %v", b.Cursor, got)
		}
		if got := keys(f.rows(Query{Tenant: "acme", Cursor: a.Cursor, Where: map[string]any{"severity": "low"}})); !slices.Equal(got, []string{"k2"}) {
			t.Fatalf("rows of cursor %d where low: %v", a.Cursor, got)
		}
		if got := f.rows(Query{Tenant: "acme", Cursor: 99}); len(got.Rows) != 0 {
			t.Fatalf("rows of a cursor never given: %v", got.Rows)
		}
		// A range of cursors, as backpressure's coalesce hands a task: every load from the first
		// to the last, the other tenant's never.
		c := f.load("acme", "c", alert("k5", "low"))
		if got := keys(f.rows(Query{Tenant: "acme", Cursor: b.Cursor, CursorEnd: c.Cursor})); !slices.Equal(got, []string{"k3", "k4", "k5"}) {
			t.Fatalf("rows of cursors %d to %d: %v", b.Cursor, c.Cursor, got)
		}
		if got := keys(f.rows(Query{Tenant: "acme", Cursor: a.Cursor, CursorEnd: c.Cursor, Where: map[string]any{"severity": "low"}})); !slices.Equal(got, []string{"k2", "k3", "k5"}) {
			t.Fatalf("rows of cursors %d to %d where low: %v", a.Cursor, c.Cursor, got)
		}
		if got := keys(f.rows(Query{Tenant: "acme", Cursor: c.Cursor, CursorEnd: a.Cursor})); !slices.Equal(got, []string{"k5"}) {
			t.Fatalf("a range that ends before it starts reads its first cursor: %v", got)
		}
	})
}

func TestFacets(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, everyType())
		var rows []Row
		for i := range MaxFacetValues + 1 {
			rows = append(rows, Row{"id": fmt.Sprint(i), "name": "x", "n": int64(i % 3), "f": float64(i), "ok": i%2 == 0})
		}
		rows[0]["n"] = nil
		res, err := db.Load(context.Background(), Batch{ID: "b1", Tenant: "acme", DatasetUUID: f.uuid, Schema: f.s, Rows: rows,
			FacetFields: []string{"n", "f", "ok", "at"}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]any{"n": {int64(0), int64(1), int64(2)}, "ok": {false, true}, "at": {}}
		if !reflect.DeepEqual(res.Facets, want) {
			t.Fatalf("facets %v, want %v (f has too many values)", res.Facets, want)
		}
	})
}

// Of many loads of one batch at once, one loads it; the others wait for it and repeat it.
func TestConcurrentLoadsOfOneBatch(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, another func() *DB) {
		f := newFixture(t, db, alerts())
		dbs := []*DB{db, another()}
		rows := []Row{alert("k1", "high"), alert("k2", "low")}
		const n = 8
		results := make([]Loaded, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i], errs[i] = dbs[i%2].Load(context.Background(), Batch{ID: "b1", Tenant: "acme", DatasetUUID: f.uuid,
					Schema: f.s, Rows: rows, FacetFields: []string{"severity"}})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		loads := 0
		for _, r := range results {
			if !r.Repeat {
				loads++
			}
			r.Repeat = false
			if want := (Loaded{Cursor: 1, Inserted: 2, Facets: map[string][]any{"severity": {"high", "low"}}}); !reflect.DeepEqual(r, want) {
				t.Errorf("result %+v, want %+v", r, want)
			}
		}
		if loads != 1 {
			t.Fatalf("%d loads were not repeats, want 1", loads)
		}
		if got := keys(f.rows(Query{Tenant: "acme"})); !slices.Equal(got, []string{"k1", "k2"}) {
			t.Fatalf("rows %v", got)
		}
	})
}

// Concurrent loads of different batches, whose keys overlap, each get a cursor of their own, and
// every row is loaded once.
func TestConcurrentLoadsTakeDistinctCursors(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, another func() *DB) {
		f := newFixture(t, db, alerts())
		dbs := []*DB{db, another()}
		const n = 16
		results := make([]Loaded, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			// Batch i holds its own key, and keys shared with its neighbours in both orders.
			rows := []Row{alert(fmt.Sprint("own", i), "high"), alert(fmt.Sprint("shared", i/2), "low"), alert(fmt.Sprint("shared", (i+1)/2), "low")}
			if i%2 == 1 {
				slices.Reverse(rows)
			}
			wg.Go(func() {
				results[i], errs[i] = dbs[i%2].Load(context.Background(), Batch{ID: fmt.Sprint("b", i), Tenant: "acme",
					DatasetUUID: f.uuid, Schema: f.s, Rows: rows})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var cursors []int64
		inserted := 0
		for _, r := range results {
			if r.Cursor == 0 {
				t.Fatalf("a load of new rows got no cursor: %+v", r)
			}
			cursors = append(cursors, r.Cursor)
			inserted += r.Inserted
		}
		slices.Sort(cursors)
		if len(slices.Compact(slices.Clone(cursors))) != n {
			t.Fatalf("cursors %v are not distinct", cursors)
		}
		all := f.rows(Query{Tenant: "acme", Limit: MaxLimit})
		if len(all.Rows) != inserted || inserted != n+n/2+1 {
			t.Fatalf("%d rows, %d inserted; want %d", len(all.Rows), inserted, n+n/2+1)
		}
		for _, r := range results {
			if got := f.rows(Query{Tenant: "acme", Cursor: r.Cursor}); len(got.Rows) != r.Inserted {
				t.Fatalf("cursor %d holds %d rows, its load inserted %d", r.Cursor, len(got.Rows), r.Inserted)
			}
		}
	})
}

func TestLoadRefusesBadBatches(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		for name, b := range map[string]Batch{
			"no id":           {Tenant: "acme", DatasetUUID: f.uuid, Schema: f.s},
			"no tenant":       {ID: "b", DatasetUUID: f.uuid, Schema: f.s},
			"no uuid":         {ID: "b", Tenant: "acme", DatasetUUID: "alerts", Schema: f.s},
			"unknown facet":   {ID: "b", Tenant: "acme", DatasetUUID: f.uuid, Schema: f.s, FacetFields: []string{"colour"}},
			"reserved column": {ID: "b", Tenant: "acme", DatasetUUID: f.uuid, Schema: edit(func(s *pipeline.Schema) { s.Columns[1].Name = "_cursor" })},
		} {
			if _, err := db.Load(context.Background(), b); !errors.Is(err, ErrBadBatch) && !errors.Is(err, ErrBadSchema) {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

// Loads whose keys overlap in opposite orders, at once, wait on each other's keys; they must not
// deadlock.
func TestOverlappingLoadsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		const loaders, rounds, keys = 6, 4, 300
		var wg sync.WaitGroup
		errs := make([]error, loaders)
		for l := range loaders {
			wg.Go(func() {
				for r := range rounds {
					rows := make([]Row, keys)
					for i := range rows {
						rows[i] = alert(fmt.Sprintf("r%d-k%03d", r, i), "high")
					}
					if l%2 == 1 {
						slices.Reverse(rows)
					}
					_, err := db.Load(context.Background(), Batch{ID: fmt.Sprintf("l%d-r%d", l, r), Tenant: "acme",
						DatasetUUID: f.uuid, Schema: f.s, Rows: rows})
					if err != nil {
						errs[l] = err
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		n := 0
		for p := (Page{Next: -1}); p.Next != 0; n += len(p.Rows) {
			p = f.rows(Query{Tenant: "acme", After: max(p.Next, 0), Limit: MaxLimit})
		}
		if n != rounds*keys {
			t.Fatalf("%d rows, want %d", n, rounds*keys)
		}
	})
}

// A schema may list its unique key in another order: the table's key serves it.
func TestUniqueKeyInAnotherOrder(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, edit(func(s *pipeline.Schema) { s.Unique = []string{"dedupe_key", "host"} }))
		f.load("acme", "b1", Row{"dedupe_key": "k1", "host": "h1"})
		f.s = edit(func(s *pipeline.Schema) { s.Unique = []string{"host", "dedupe_key"} })
		if err := db.Ensure(context.Background(), f.uuid, f.s); err != nil {
			t.Fatal(err)
		}
		if res := f.load("acme", "b2", Row{"dedupe_key": "k1", "host": "h1"}, Row{"dedupe_key": "k1", "host": "h2"}); res.Inserted != 1 {
			t.Fatalf("inserted %d, want 1", res.Inserted)
		}
	})
}

// A load that fails part way leaves nothing behind: no rows, no ledger entry, no cursor.
func TestAFailedLoadLeavesNothing(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, alerts())
		bad := []Row{alert("k1", "high"), {"dedupe_key": "k2", "count": "not a number"}}
		if _, err := db.Load(context.Background(), Batch{ID: "b1", Tenant: "acme", DatasetUUID: f.uuid, Schema: f.s, Rows: bad}); err == nil {
			t.Fatal("a row the table refuses was loaded")
		}
		if got := f.rows(Query{Tenant: "acme"}); len(got.Rows) != 0 {
			t.Fatalf("rows of the failed load: %v", got.Rows)
		}
		if res := f.load("acme", "b1", alert("k2", "low")); res.Repeat || res.Inserted != 1 || res.Cursor != 1 {
			t.Fatalf("the batch loaded again: %+v", res)
		}
	})
}
