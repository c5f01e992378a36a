package sqltext

import (
	"reflect"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestUnnestInsertTypesColumnsAndNulls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rows   [][]any
		ok     bool
		stmt   string
		arrays []any
	}{
		{
			name:   "kinds, NULLs, a column NULL in every row",
			rows:   [][]any{{"a", nil, int64(1), true, nil}, {nil, 2, int(3), nil, nil}},
			ok:     true,
			stmt:   "INSERT INTO t (s, n, m, b, z) SELECT u_s, u_n, u_m, u_b, NULL FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::boolean[]) AS u(u_s, u_n, u_m, u_b) ON CONFLICT DO NOTHING",
			arrays: []any{[]*string{ptr("a"), nil}, []*int64{nil, ptr(int64(2))}, []*int64{ptr(int64(1)), ptr(int64(3))}, []*bool{ptr(true), nil}},
		},
		{name: "a kind it does not convert", rows: [][]any{{"a", 1, 1.5, true, nil}}},
		{name: "kinds mixed in a column", rows: [][]any{{"a", 1, 1, true, nil}, {"b", "2", 1, true, nil}}},
		{name: "nothing but NULLs", rows: [][]any{{nil, nil, nil, nil, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stmt, args, ok := UnnestInsert("t", []string{"s", "n", "m", "b", "z"}, tc.rows, " ON CONFLICT DO NOTHING")
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if stmt != tc.stmt {
				t.Errorf("statement\n%s\nwant\n%s", stmt, tc.stmt)
			}
			if !reflect.DeepEqual(args, tc.arrays) {
				t.Errorf("arrays %#v, want %#v", args, tc.arrays)
			}
		})
	}
}
