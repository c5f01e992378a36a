package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Where the database takes a whole Go slice as one array parameter (Dialect.Arrays: PostgreSQL),
// the statements over many rows carry one parameter per column instead of one per value:
// "id = ANY($1)" for a list, unnest($1, $2, ...) for rows. Their text is then the same for every
// batch, so the database parses each once per connection and its plan does not depend on the
// batch's size; a list of hundreds of placeholders was a new statement for every size, and an
// UPDATE with a CASE over hundreds of ids compared every row with every id.

// in returns the condition "col is one of ids" with its arguments, whose placeholders start at
// $from: "col = ANY($from)" with ids as one array, or else "col IN ($from, ...)" over ids padded
// to their size class.
func (q q) in(col string, from int, ids []string) (string, []any) {
	if q.d.Arrays {
		return col + " = ANY($" + strconv.Itoa(from) + ")", []any{ids}
	}
	args := stringArgs(ids)
	return col + " IN (" + placeholders(from, len(args)) + ")", args
}

// placeholders returns "$from, $from+1, ..." for n parameters.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// padded is the size class of a list of n items: the next power of two. Lists are padded to it
// with items that match nothing, so that each statement has a few texts, prepared once and
// cached (by the SQLite store's statement cache and by pgx), instead of one per length.
func padded(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// stringArgs returns ss as arguments, padded with "" (no task has the empty id).
func stringArgs(ss []string) []any {
	args := make([]any, padded(len(ss)))
	for i := range args {
		args[i] = ""
		if i < len(ss) {
			args[i] = ss[i]
		}
	}
	return args
}

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

// unnestInsert builds "INSERT INTO table (cols) SELECT ... FROM unnest($1, ...) AS u(...)" +
// suffix for rows, one array parameter per column; a column NULL in every row is inserted as a
// NULL literal. ok is false when a value is of a kind columns does not convert.
func unnestInsert(table string, cols []string, rows [][]any, suffix string) (stmt string, args []any, ok bool) {
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

// insertArrays runs the rows as one unnest statement where the dialect takes arrays: done is
// false, and nothing ran, where it does not or a value is of a kind it does not convert.
func (q q) insertArrays(ctx context.Context, table string, cols []string, rows [][]any, suffix string,
	scan func(*sql.Rows) error) (done bool, err error) {
	if !q.d.Arrays || len(rows) == 0 {
		return false, nil
	}
	stmt, args, ok := unnestInsert(table, cols, rows, suffix)
	if !ok {
		return false, nil
	}
	if scan == nil {
		if _, err := q.exec(ctx, stmt, args...); err != nil {
			return true, fmt.Errorf("insert %s: %w", table, err)
		}
		return true, nil
	}
	rs, err := q.query(ctx, stmt, args...)
	if err != nil {
		return true, fmt.Errorf("insert %s: %w", table, err)
	}
	defer rs.Close()
	for rs.Next() {
		if err := scan(rs); err != nil {
			return true, err
		}
	}
	return true, rs.Err()
}
