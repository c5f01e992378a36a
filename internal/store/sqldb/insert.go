// Multi-row inserts, in as few statements as the dialect allows.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

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
		defer rs.Close()
		for rs.Next() {
			if err := scan(rs); err != nil {
				return err
			}
		}
		return rs.Err()
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
		n := min(perStmt, len(rows)-start)
		if q.stmts != nil && n < perStmt {
			// A cached statement for each power of two: a batch of n rows is at most log2(n)
			// statements, none of which the database has to parse again.
			n = 1 << (bits.Len(uint(n)) - 1)
		}
		chunk := rows[start : start+n]
		start += n
		var b strings.Builder
		b.WriteString(head)
		args := make([]any, 0, len(chunk)*len(cols))
		for i, row := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for j := range row {
				if j > 0 {
					b.WriteString(", ")
				}
				if q.d.Positional {
					b.WriteByte('?')
				} else {
					b.WriteByte('$')
					b.WriteString(strconv.Itoa(len(args) + 1))
				}
				args = append(args, row[j])
			}
			b.WriteByte(')')
		}
		b.WriteString(suffix)
		if err := do(b.String(), args, q.stmts != nil); err != nil {
			return fmt.Errorf("insert %s: %w", table, err)
		}
	}
	return nil
}
