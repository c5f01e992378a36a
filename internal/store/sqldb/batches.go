// Statements over many rows: lists of ids and multi-row inserts, in as few statements as the
// dialect allows.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
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
	args := sqltext.StringArgs(ids)
	return col + " IN (" + sqltext.Placeholders(from, len(args)) + ")", args
}

// execIDs runs a statement over ids with lead as its first arguments: arrayStmt, which takes the
// ids as one array after lead, where the dialect takes arrays; else inHead followed by the ids'
// placeholders and ")", in as many statements as the parameter limit needs. The lists are not
// padded to size classes, so those statements go around the statement cache. It returns how
// many rows the statements affected.
func (t *tx) execIDs(ctx context.Context, arrayStmt, inHead string, ids []int64, lead ...any) (int64, error) {
	if t.d.Arrays {
		args := append(append(make([]any, 0, len(lead)+1), lead...), ids)
		res, err := t.exec(ctx, arrayStmt, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	var total int64
	perStmt := max(t.d.MaxParams-len(lead), 1)
	for start := 0; start < len(ids); start += perStmt {
		chunk := ids[start:min(start+perStmt, len(ids))]
		args := append(make([]any, 0, len(lead)+len(chunk)), lead...)
		for _, id := range chunk {
			args = append(args, id)
		}
		res, err := t.db.ExecContext(ctx, inHead+sqltext.Placeholders(len(lead)+1, len(chunk))+")", args...)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// insertRows runs a multi-row INSERT of rows, each len(cols) values, in as few statements as the
// dialect's parameter limit allows. suffix follows the VALUES list (e.g. an ON CONFLICT clause).
func (q q) insertRows(ctx context.Context, table string, cols []string, rows [][]any, suffix string) error {
	if done, err := q.insertArrays(ctx, table, cols, rows, suffix, nil); done {
		return err
	}
	return q.insertChunks(table, cols, rows, suffix, func(stmt string, args []any, cached bool) error {
		exec := q.db.ExecContext
		if cached {
			exec = q.exec
		}
		_, err := exec(ctx, stmt, args...)
		return err
	})
}

// insertReturning is insertRows with a RETURNING clause at the end of suffix: scan reads each row
// the statements return.
func (q q) insertReturning(ctx context.Context, table string, cols []string, rows [][]any, suffix string,
	scan func(*sql.Rows) error) error {
	if done, err := q.insertArrays(ctx, table, cols, rows, suffix, scan); done {
		return err
	}
	return q.insertChunks(table, cols, rows, suffix, func(stmt string, args []any, cached bool) error {
		query := q.db.QueryContext
		if cached {
			query = q.query
		}
		rs, err := query(ctx, stmt, args...)
		if err != nil {
			return err
		}
		return eachRow(rs, scan)
	})
}

// insertChunks builds the statements of a multi-row INSERT and runs each with do, cached telling
// whether to keep it prepared: where statements are cached, every text is one of a few (a full
// chunk, or a power of two of rows), and parsing a full chunk of 1,000 tasks again was a third
// of the time of creating a job of them on SQLite.
func (q q) insertChunks(table string, cols []string, rows [][]any, suffix string,
	do func(stmt string, args []any, cached bool) error) error {
	if len(rows) == 0 {
		return nil
	}
	perStmt := q.d.MaxParams / len(cols)
	if perStmt > 1000 {
		perStmt = 1000
	}
	head := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES "
	for start := 0; start < len(rows); {
		n := sqltext.ChunkLen(len(rows)-start, perStmt, q.stmts != nil)
		stmt, args := sqltext.Values(head, rows[start:start+n], len(cols), suffix, q.d.Positional)
		start += n
		if err := do(stmt, args, q.stmts != nil); err != nil {
			return fmt.Errorf("insert %s: %w", table, err)
		}
	}
	return nil
}

// insertArrays runs the rows as one unnest statement where the dialect takes arrays: done is
// false, and nothing ran, where it does not or a value is of a kind it does not convert.
func (q q) insertArrays(ctx context.Context, table string, cols []string, rows [][]any, suffix string,
	scan func(*sql.Rows) error) (done bool, err error) {
	if !q.d.Arrays || len(rows) == 0 {
		return false, nil
	}
	stmt, args, ok := sqltext.UnnestInsert(table, cols, rows, suffix)
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
	return true, eachRow(rs, scan)
}
