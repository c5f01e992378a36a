package sqltext

import (
	"slices"
	"testing"
)

func TestToPositional(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		args        []any
		want        string
		wantArgs    []any
	}{
		{"in order", "SELECT a FROM t WHERE b = $1 AND c = $2", []any{1, 2},
			"SELECT a FROM t WHERE b = ? AND c = ?", []any{1, 2}},
		{"repeated and out of order", "UPDATE t SET a = $2, b = $1 + $2 WHERE c = $10", []any{1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
			"UPDATE t SET a = ?, b = ? + ? WHERE c = ?", []any{2, 1, 2, 10}},
		{"quoted dollars stay", `SELECT json_extract(d, '$.a'), "x$1" FROM t WHERE b = $1 -- not $2` + "\nAND c = 'it''s $1'", []any{7},
			`SELECT json_extract(d, '$.a'), "x$1" FROM t WHERE b = ? -- not $2` + "\nAND c = 'it''s $1'", []any{7}},
		{"already positional", "INSERT INTO t VALUES (?, ?)", []any{1, 2}, "INSERT INTO t VALUES (?, ?)", []any{1, 2}},
		{"no placeholders", "SELECT 1", nil, "SELECT 1", nil},
		{"a lone dollar", "SELECT '$' || $1, $ FROM t", []any{"x"}, "SELECT '$' || ?, $ FROM t", []any{"x"}},
		{"too few arguments", "SELECT $1, $3", []any{1, 2}, "SELECT $1, $3", []any{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, args := Positional(tc.query, tc.args)
			if got != tc.want || !slices.Equal(args, tc.wantArgs) {
				t.Fatalf("Positional(%q, %v) = %q, %v; want %q, %v", tc.query, tc.args, got, args, tc.want, tc.wantArgs)
			}
		})
	}
}
