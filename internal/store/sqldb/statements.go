// How a statement runs: prepared statements cached, placeholders made positional where the
// dialect wants them, reads outside a transaction sent again after a transient failure; and the
// helpers that read the rows back and convert a task's error.

package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// q holds the queries, used by DB outside transactions and by tx inside them.
type q struct {
	db    querier
	d     *Dialect
	inTx  bool
	tx    *sql.Tx    // the transaction, when inTx
	stmts *stmtCache // prepared statements of db's pool, or nil
}

// stmtCache holds one prepared statement per query text for a pool; database/sql prepares it on
// each connection once and reuses it there.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache { return &stmtCache{db: db, m: map[string]*sql.Stmt{}} }

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.m[query] = st
	return st, nil
}

// stmt returns the cached statement for query, bound to the transaction if there is one, or nil
// when statements are not cached.
func (q q) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if q.stmts == nil {
		return nil, nil
	}
	st, err := q.stmts.get(ctx, query)
	if err != nil || q.tx == nil {
		return st, err
	}
	return q.tx.StmtContext(ctx, st), nil
}

// prepared lays out query and args for the dialect and returns the cached statement for them,
// nil when statements are not cached.
func (q q) prepared(ctx context.Context, query string, args []any) (string, []any, *sql.Stmt, error) {
	if q.d.Positional {
		query, args = sqltext.Positional(query, args)
	}
	st, err := q.stmt(ctx, query)
	return query, args, st, err
}

func (q q) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query, args, st, err := q.prepared(ctx, query, args)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return st.ExecContext(ctx, args...)
	}
	return q.db.ExecContext(ctx, query, args...)
}

// maxReadTries bounds how often a query outside a transaction is sent again after a transient
// failure. A connection the database ended (a backend terminated, a failover) fails the first
// query sent on it, and every pooled connection may have been ended at once.
const maxReadTries = 20

// readAgain reports whether a query outside a transaction that failed with err, on its tries-th
// try, is to be sent again (reading has no effect to repeat), after pausing for it.
func (q q) readAgain(ctx context.Context, err error, tries int) bool {
	if q.inTx || err == nil || !q.d.Transient(err) || tries >= maxReadTries || ctx.Err() != nil || q.d.unreachable() {
		return false
	}
	pauseBeforeTry(tries + 1)
	return true
}

func (q q) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	for tries := 1; ; tries++ {
		rows, err := q.queryOnce(ctx, query, args...)
		if !q.readAgain(ctx, err, tries) {
			return rows, err
		}
	}
}

func (q q) queryOnce(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query, args, st, err := q.prepared(ctx, query, args)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return st.QueryContext(ctx, args...)
	}
	return q.db.QueryContext(ctx, query, args...)
}

// rowScanner is a row to scan: what QueryRow returns, with a preparation error folded in, or
// one of the rows of a query.
type rowScanner interface{ Scan(...any) error }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (q q) queryRow(ctx context.Context, query string, args ...any) rowScanner {
	for tries := 1; ; tries++ {
		row := q.queryRowOnce(ctx, query, args...)
		if r, ok := row.(*sql.Row); !ok || !q.readAgain(ctx, r.Err(), tries) {
			return row
		}
	}
}

func (q q) queryRowOnce(ctx context.Context, query string, args ...any) rowScanner {
	query, args, st, err := q.prepared(ctx, query, args)
	if err != nil {
		return errRow{err}
	}
	if st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.db.QueryRowContext(ctx, query, args...)
}

// lockRow is the row-lock suffix inside a transaction, nothing outside one.
func (q q) lockRow() string {
	if q.inTx {
		return q.d.LockRow
	}
	return ""
}

// ids runs a query of one string column and returns its values.
func (q q) ids(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// collect scans every row with scan.
func collect[T any](rows *sql.Rows, scan func(rowScanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// each runs a query and calls fn for each row; label names the query in its error.
func (q q) each(ctx context.Context, label, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	return eachRow(rows, fn)
}

// eachRow calls fn for each of rows, then closes them.
func eachRow(rows *sql.Rows, fn func(*sql.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// notFound turns sql.ErrNoRows into store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// errArg is a task's error as an argument: its JSON, NULL for nil.
func errArg(e *store.TaskError) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// fromErr reads a task's error that may be NULL (nil).
func fromErr(s sql.NullString) (*store.TaskError, error) {
	if !s.Valid {
		return nil, nil
	}
	var e store.TaskError
	if err := json.Unmarshal([]byte(s.String), &e); err != nil {
		return nil, fmt.Errorf("decode task error: %w", err)
	}
	return &e, nil
}
