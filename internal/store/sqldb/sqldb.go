// Package sqldb implements store.Store over database/sql with SQL that SQLite and PostgreSQL
// both accept; the driver packages supply the connections, the schema and a Dialect.
package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// Dialect is what differs between the databases.
type Dialect struct {
	// LockRow is appended to a single-row SELECT inside a transaction (" FOR UPDATE", or "" where
	// a single writer makes row locks moot).
	LockRow string
	// LockSkip is appended to a queue SELECT so concurrent claimers skip each other's rows.
	LockSkip string
	// LockKeys is the statement that takes transaction-scoped locks on the strings of its one
	// array parameter, in a fixed order ("" where a single writer makes locks moot).
	LockKeys string
	// MaxParams is the most bind parameters one statement may carry.
	MaxParams int
	// Notify is the statement that announces a ready task to other processes ("" for none).
	Notify string
	// SingleWriter serialises write transactions in this process (SQLite: one writer at a time,
	// so concurrent callers queue here instead of failing with SQLITE_BUSY).
	SingleWriter bool
	// CacheStatements keeps prepared statements for reuse. database/sql with modernc.org/sqlite
	// otherwise parses every statement again, which was a third of the CPU of a completion; pgx
	// caches prepared statements by itself.
	CacheStatements bool
	// Arrays: the driver passes a Go slice as one array parameter and the database has unnest
	// and "= ANY" (PostgreSQL): statements over many rows then carry one parameter per column
	// (arrays.go).
	Arrays bool
	// Positional makes statements use "?" placeholders (positional.go). SQLite resolves "$N" by
	// a linear scan of the statement's parameter names, on every run: a 20,000-parameter insert
	// was quadratic, and the batch statements' binding 16% of the server's CPU.
	Positional bool
	// IsUnique reports a unique-constraint violation.
	IsUnique func(error) bool
	// Transient reports a failure after which the whole transaction may be run again (see
	// store.Store.Transient).
	Transient func(error) bool
	// Unreachable, when set, reports that the database is known not to answer (see
	// store.Reachability): transient failures are then not tried again, as they would only fail
	// again.
	Unreachable func() error
}

// unreachable reports whether the dialect knows the database does not answer.
func (d *Dialect) unreachable() bool { return d.Unreachable != nil && d.Unreachable() != nil }

// DB is a store.Store. Transactions go to write, queries outside them to read; SQLite gives write
// a single connection, PostgreSQL passes the same pool twice.
type DB struct {
	q       // queries outside transactions, on the read pool
	wstmts  *stmtCache
	wmu     sync.Mutex // held by each write transaction when the dialect has a single writer
	write   *sql.DB
	read    *sql.DB
	dialect Dialect
	closers []func() error
}

var _ store.Store = (*DB)(nil)

// New wraps the pools; Close closes them and then runs closers.
func New(write, read *sql.DB, d Dialect, closers ...func() error) *DB {
	db := &DB{write: write, read: read, dialect: d, closers: closers}
	db.q = q{db: read, d: &db.dialect}
	if d.CacheStatements {
		db.q.stmts = newStmtCache(read)
		db.wstmts = newStmtCache(write)
	}
	return db
}

// Ping checks both pools.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.write.PingContext(ctx); err != nil {
		return err
	}
	return db.read.PingContext(ctx)
}

// Close closes the pools.
func (db *DB) Close() error {
	var err error
	for _, c := range []*stmtCache{db.q.stmts, db.wstmts} {
		if c != nil {
			for _, st := range c.m {
				err = errors.Join(err, st.Close())
			}
		}
	}
	err = errors.Join(err, db.write.Close())
	if db.read != db.write {
		err = errors.Join(err, db.read.Close())
	}
	for _, c := range db.closers {
		err = errors.Join(err, c())
	}
	return err
}

// SingleWriter reports whether write transactions run one at a time (SQLite).
func (db *DB) SingleWriter() bool { return db.dialect.SingleWriter }

// InTx implements store.Store.
func (db *DB) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return db.runTx(ctx, func(t *tx) error { return fn(t) })
}

// writeTx runs fn in a write transaction, again (a few times, after a short random pause) when it
// fails transiently. For the store's own small transactions (API keys, signing keys); the
// dispatcher decides for its own.
func (db *DB) writeTx(ctx context.Context, fn func(*tx) error) error {
	for run := 1; ; run++ {
		err := db.runTx(ctx, fn)
		if err == nil || !db.Transient(err) || run == 5 || ctx.Err() != nil || db.dialect.unreachable() {
			return err
		}
		pauseBeforeTry(run + 1)
	}
}

// pauseBeforeTry sleeps before the try-th try of work that failed transiently: not at all before
// the second (a connection the database ended fails at once, and the next one usually works),
// then for a random time below try × 5 ms, so that the two sides of a deadlock, or many callers
// of a restarting database, do not meet again.
func pauseBeforeTry(try int) {
	if try > 2 {
		time.Sleep(time.Duration(rand.Int64N(int64(try) * int64(5*time.Millisecond))))
	}
}

// Transient implements store.Store.
func (db *DB) Transient(err error) bool {
	return err != nil && db.dialect.Transient(err)
}

func (db *DB) runTx(ctx context.Context, fn func(*tx) error) (err error) {
	if db.dialect.SingleWriter {
		db.wmu.Lock()
		defer db.wmu.Unlock()
	}
	sqlTx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = sqlTx.Rollback()
		}
	}()
	t := &tx{q: q{db: sqlTx, d: &db.dialect, inTx: true, tx: sqlTx, stmts: db.wstmts}}
	if err = fn(t); err != nil {
		return err
	}
	if t.doomed != nil {
		// A nested part failed in a way that dooms the whole transaction (a deadlock, say).
		return t.doomed
	}
	if err = sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

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

func (q q) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if q.d.Positional {
		query, args = toPositional(query, args)
	}
	st, err := q.stmt(ctx, query)
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
	if q.d.Positional {
		query, args = toPositional(query, args)
	}
	st, err := q.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return st.QueryContext(ctx, args...)
	}
	return q.db.QueryContext(ctx, query, args...)
}

// rowScanner is what QueryRow returns, with a preparation error folded in.
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
	if q.d.Positional {
		query, args = toPositional(query, args)
	}
	st, err := q.stmt(ctx, query)
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

// Times are stored as Unix milliseconds; NULL is the zero time.

func ms(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func fromMs(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64).UTC()
}

// fromMillis is a NOT NULL time.
func fromMillis(n int64) time.Time { return time.UnixMilli(n).UTC() }

// JSON is stored verbatim as text; NULL is a nil RawMessage.

func jsonArg(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func fromJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

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

func strArg(s string) any {
	if s == "" {
		return nil
	}
	return s
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

// notFound turns sql.ErrNoRows into store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}
