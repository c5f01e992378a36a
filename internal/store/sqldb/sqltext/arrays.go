package sqltext

import (
	"strconv"
	"strings"
)

// columns turns rows into one array per column for unnest: the SQL type of each (empty for a
// column that is NULL in every row) and its values, NULL as a nil pointer. ok is false when a
// value is of a kind it does not convert; the first value that is not NULL sets a column's kind.
func columns(rows [][]any, ncols int) (types []string, arrays []any, ok bool) {
	types = make([]string, ncols)
	arrays = make([]any, ncols)
	for j := range ncols {
		var first any
		for _, row := range rows {
			if first = row[j]; first != nil {
				break
			}
		}
		switch first.(type) {
		case nil:
			continue
		case string:
			types[j] = "text[]"
			arrays[j], ok = column(rows, j, func(v any) (s string, ok bool) { s, ok = v.(string); return })
		case int, int64:
			types[j] = "bigint[]"
			arrays[j], ok = column(rows, j, asInt64)
		case bool:
			types[j] = "boolean[]"
			arrays[j], ok = column(rows, j, func(v any) (b bool, ok bool) { b, ok = v.(bool); return })
		default:
			ok = false
		}
		if !ok {
			return nil, nil, false
		}
	}
	return types, arrays, true
}

// column is column j of rows as a []*T, nil for NULL; ok is false when conv refuses a value.
func column[T any](rows [][]any, j int, conv func(any) (T, bool)) (col []*T, ok bool) {
	col = make([]*T, len(rows))
	for i, row := range rows {
		if row[j] == nil {
			continue
		}
		v, ok := conv(row[j])
		if !ok {
			return nil, false
		}
		col[i] = &v
	}
	return col, true
}

func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

// UnnestInsert builds "INSERT INTO table (cols) SELECT ... FROM unnest($1, ...) AS u(...)" +
// suffix for rows, one array parameter per column, for a database that takes a whole Go slice as
// one array parameter (PostgreSQL): its text is the same whatever the number of rows. A column
// NULL in every row is inserted as a NULL literal. ok is false when a value is of a kind columns
// does not convert.
func UnnestInsert(table string, cols []string, rows [][]any, suffix string) (stmt string, args []any, ok bool) {
	types, arrays, ok := columns(rows, len(cols))
	if !ok {
		return "", nil, false
	}
	var sel, params, names []string
	for j, c := range cols {
		if types[j] == "" {
			sel = append(sel, "NULL")
			continue
		}
		args = append(args, arrays[j])
		params = append(params, "$"+strconv.Itoa(len(args))+"::"+types[j])
		names = append(names, "u_"+c)
		sel = append(sel, "u_"+c)
	}
	if len(args) == 0 {
		return "", nil, false // nothing but NULLs: leave it to the VALUES form
	}
	return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(sel, ", ") +
		" FROM unnest(" + strings.Join(params, ", ") + ") AS u(" + strings.Join(names, ", ") + ")" + suffix, args, true
}
