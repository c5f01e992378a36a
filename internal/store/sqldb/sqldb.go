// Package sqldb implements store.Store over database/sql with SQL that SQLite and PostgreSQL
// both accept; the driver packages supply the connections, the schema and a Dialect.
package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// MaxParams is the most bind parameters one statement may carry.
	MaxParams int
	// Notify is the statement that announces a ready task to other processes ("" for none).
	Notify string
	// Positional makes multi-row inserts use "?" placeholders. SQLite resolves "$N" by a linear
	// scan of the statement's parameter names, which makes a 20,000-parameter insert quadratic.
	Positional bool
	// IsUnique reports a unique-constraint violation.
	IsUnique func(error) bool
	// IsRetryable reports an error after which the whole transaction may simply be run again.
	IsRetryable func(error) bool
}

// DB is a store.Store. Transactions go to write, queries outside them to read; SQLite gives write
// a single connection, PostgreSQL passes the same pool twice.
type DB struct {
	q       // queries outside transactions, on the read pool
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
	err := db.write.Close()
	if db.read != db.write {
		err = errors.Join(err, db.read.Close())
	}
	for _, c := range db.closers {
		err = errors.Join(err, c())
	}
	return err
}

// maxTxRuns bounds how often InTx re-runs a transaction the database aborted for a retry.
const maxTxRuns = 20

// InTx implements store.Store.
func (db *DB) InTx(ctx context.Context, fn func(store.Tx) error) error {
	for run := 1; ; run++ {
		err := db.runTx(ctx, fn)
		if err == nil || !db.dialect.IsRetryable(err) || run == maxTxRuns {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		// Jitter a little so that the two sides of a deadlock do not collide again.
		time.Sleep(time.Duration(run) * time.Millisecond)
	}
}

func (db *DB) runTx(ctx context.Context, fn func(store.Tx) error) (err error) {
	sqlTx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = sqlTx.Rollback()
		}
	}()
	if err = fn(&tx{q: q{db: sqlTx, d: &db.dialect, inTx: true}}); err != nil {
		return err
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
	db   querier
	d    *Dialect
	inTx bool
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
	if len(rows) == 0 {
		return nil
	}
	perStmt := q.d.MaxParams / len(cols)
	if perStmt > 1000 {
		perStmt = 1000
	}
	head := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES "
	for start := 0; start < len(rows); start += perStmt {
		chunk := rows[start:min(start+perStmt, len(rows))]
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
		if _, err := q.db.ExecContext(ctx, b.String(), args...); err != nil {
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
