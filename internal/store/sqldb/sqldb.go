// Package sqldb implements store.Store over database/sql with SQL that SQLite and PostgreSQL
// both accept; the driver packages supply the connections, the schema and a Dialect.
//
// Its files follow the store's aggregates (internal/store/aggregates.go) and the contract suite
// (internal/store/storetest): jobs.go, tasks.go, attempts.go... Beside them, this file holds the
// DB and its transactions, statements.go how a statement runs, and batches.go the statements over
// many rows. The text of statements, their placeholders and the conversions of values are
// sqltext's.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	// (batches.go).
	Arrays bool
	// Positional makes statements use "?" placeholders (sqltext.Positional). SQLite resolves "$N" by
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

// tx is a store.Tx.
type tx struct {
	q
	savepoints int   // savepoints taken so far, for unique names
	doomed     error // a nested part failed with a transient error: the transaction fails with it
}

var _ store.Tx = (*tx)(nil)

// Nested implements store.Tx.
func (t *tx) Nested(ctx context.Context, fn func(store.Tx) error) error {
	t.savepoints++
	name := "sp" + strconv.Itoa(t.savepoints)
	if _, err := t.exec(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	ferr := fn(t)
	if ferr == nil {
		if _, err := t.exec(ctx, "RELEASE SAVEPOINT "+name); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
		return nil
	}
	if t.d.Transient(ferr) && t.doomed == nil {
		t.doomed = ferr
	}
	if _, err := t.exec(ctx, "ROLLBACK TO SAVEPOINT "+name); err != nil {
		return errors.Join(ferr, fmt.Errorf("roll back to savepoint: %w", err))
	}
	if _, err := t.exec(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return errors.Join(ferr, fmt.Errorf("release savepoint: %w", err))
	}
	return ferr
}

// RowsLock implements store.Tx: one statement locks the tasks in id order, a second the jobs of
// s.Jobs in id order (see store.LockSet for why that order). Each kind of row set is a part of a
// UNION ALL under "id IN", which the planner turns into index lookups; an OR of the kinds would
// have it scan the table.
func (t *tx) RowsLock(ctx context.Context, s store.LockSet) error {
	if t.d.LockRow == "" || s.Empty() {
		return nil
	}
	if len(s.Keys) > 0 && t.d.LockKeys != "" {
		// The keys in one order: the locks are taken after the sort.
		if _, err := t.exec(ctx, t.d.LockKeys, s.Keys); err != nil {
			return fmt.Errorf("lock idempotency keys: %w", err)
		}
	}
	if len(s.Tasks)+len(s.Releasing)+len(s.Ending)+len(s.Jobs) == 0 {
		return nil
	}
	var (
		args  []any
		with  string
		parts []string
	)
	in := func(col string, ids []string) string {
		cond, a := t.in(col, len(args)+1, ids)
		args = append(args, a...)
		return cond
	}
	if len(s.Tasks) > 0 {
		parts = append(parts, `SELECT id FROM tasks WHERE `+in("id", s.Tasks))
	}
	if len(s.Releasing) > 0 {
		parts = append(parts, `SELECT child_id FROM task_deps WHERE `+in("parent_id", s.Releasing))
	}
	if len(s.Ending) > 0 {
		with = `WITH RECURSIVE below(id) AS (
			SELECT child_id FROM task_deps WHERE ` + in("parent_id", s.Ending) + `
			UNION
			SELECT d.child_id FROM task_deps d JOIN below b ON d.parent_id = b.id
		) `
		parts = append(parts, `SELECT id FROM below`)
	}
	if len(s.Jobs) > 0 {
		parts = append(parts, `SELECT id FROM tasks WHERE `+in("job_id", s.Jobs))
	}
	if _, err := t.ids(ctx, with+`SELECT id FROM tasks WHERE id IN (`+strings.Join(parts, " UNION ALL ")+`)
		ORDER BY id`+t.d.LockRow, args...); err != nil {
		return fmt.Errorf("lock tasks: %w", err)
	}
	if len(s.Jobs) == 0 {
		return nil
	}
	cond, jobs := t.in("id", 1, s.Jobs)
	if _, err := t.ids(ctx, `SELECT id FROM jobs WHERE `+cond+` ORDER BY id`+t.d.LockRow, jobs...); err != nil {
		return fmt.Errorf("lock jobs: %w", err)
	}
	return nil
}
