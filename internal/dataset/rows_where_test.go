package dataset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Rule: a where holds at most MaxWhereValues values in all, each a statement parameter (SQLite
// takes at most 32,766), and no string with a NUL (PostgreSQL's text holds none); beyond that it
// is the caller's mistake (ErrBadQuery), never a failure of the database.
func TestRowsWhereLimits(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, db *DB, _ func() *DB) {
		f := newFixture(t, db, everyType())
		f.load("acme", "b1", Row{"id": "k7", "name": "x"}, Row{"id": "k8", "name": "y"})
		list := func(n int) []any {
			l := make([]any, n)
			for i := range l {
				l[i] = fmt.Sprintf("k%d", i)
			}
			return l
		}
		// At the limit: one statement, every value a parameter.
		p := f.rows(Query{Tenant: "acme", Where: map[string]any{"id": list(MaxWhereValues - 1), "name": "x"}})
		if len(p.Rows) != 1 || p.Rows[0]["id"] != "k7" {
			t.Fatalf("rows %v, want k7", p.Rows)
		}
		for name, where := range map[string]map[string]any{
			"one list too long":               {"id": list(MaxWhereValues + 1)},
			"two lists too long together":     {"id": list(MaxWhereValues), "name": []any{"x"}},
			"as long as SQLite's whole limit": {"id": list(32766)},
			"a NUL in a string":               {"name": "x\x00y"},
			"a NUL in a list":                 {"name": []any{"x", "\x00"}},
			"a NUL in a json column's value":  {"doc": "\x00"},
		} {
			_, err := db.Rows(context.Background(), f.uuid, f.s, Query{Tenant: "acme", Where: where})
			if !errors.Is(err, ErrBadQuery) {
				t.Errorf("%s: %v, want ErrBadQuery", name, err)
			}
			if strings.Contains(name, "long") && err != nil && !strings.Contains(err.Error(), "at most 1000 in all") {
				t.Errorf("%s: %v, want it to name the limit", name, err)
			}
		}
	})
}
