package dataset

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/baton-dev/baton/internal/pipeline"
)

// sqlite is the backend on a SQLite file: one writing connection, so that writes queue in Go
// rather than on the file's lock, and a pool of readers beside it (WAL).
type sqlite struct {
	write, read *sql.DB
}

// sqliteMaxParams is SQLite's limit on a statement's parameters.
const sqliteMaxParams = 32766

var sqliteBookkeeping = []string{
	`CREATE TABLE IF NOT EXISTS baton_dataset_tables (
		dataset_uuid TEXT PRIMARY KEY,
		schema TEXT NOT NULL,
		ensured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
	) STRICT`,
	// seq is the rowid, declared so that it cannot change (VACUUM renumbers implicit rowids);
	// AUTOINCREMENT, so that it is never reused.
	`CREATE TABLE IF NOT EXISTS baton_dataset_batches (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		batch_id TEXT NOT NULL UNIQUE,
		dataset_uuid TEXT NOT NULL,
		tenant TEXT NOT NULL,
		cursor INTEGER NOT NULL DEFAULT 0,
		inserted INTEGER NOT NULL DEFAULT 0,
		facets TEXT NOT NULL DEFAULT '{}',
		loaded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
	) STRICT`,
	`CREATE UNIQUE INDEX IF NOT EXISTS baton_dataset_batches_cursor ON baton_dataset_batches (dataset_uuid, cursor) WHERE cursor > 0`,
	`CREATE TABLE IF NOT EXISTS baton_dataset_cursors (
		dataset_uuid TEXT PRIMARY KEY,
		cursor INTEGER NOT NULL
	) STRICT`,
	`CREATE TABLE IF NOT EXISTS baton_dataset_retired (
		dataset_uuid TEXT NOT NULL,
		version TEXT NOT NULL,
		retired_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
		PRIMARY KEY (dataset_uuid, version)
	) STRICT`,
}

func openSQLite(ctx context.Context, path string) (*sqlite, error) {
	if path == "" {
		return nil, errors.New("data database: no SQLite file named")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create the data database's directory: %w", err)
	}
	// synchronous(FULL): a load is on disk before Load returns. _txlock=immediate: a write
	// transaction takes the file's write lock when it begins, so that another process writing
	// makes it wait (busy_timeout) at the start rather than fail in the middle.
	dsn := path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	write, err := sql.Open("sqlite", dsn+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	read, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	read.SetMaxOpenConns(4)
	read.SetMaxIdleConns(4)
	s := &sqlite{write: write, read: read}
	err = func() error {
		t, err := s.begin(ctx)
		if err != nil {
			return err
		}
		defer t.rollback(ctx)
		for _, stmt := range sqliteBookkeeping {
			if _, err := t.exec(ctx, stmt); err != nil {
				return err
			}
		}
		return t.commit(ctx)
	}()
	if err != nil {
		s.close()
		return nil, fmt.Errorf("create the data database's tables in %s: %w", path, err)
	}
	return s, nil
}

func (s *sqlite) close() error {
	return errors.Join(s.write.Close(), s.read.Close())
}

func (s *sqlite) begin(ctx context.Context) (tx, error) {
	t, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &sqlTx{sqlQuerier{t}, t}, nil
}

func (s *sqlite) reader() querier { return sqlQuerier{s.read} }

func (s *sqlite) ph(int) string { return "?" }

func (s *sqlite) columnType(typ string) string {
	switch typ {
	case pipeline.TypeString, pipeline.TypeTimestamp, pipeline.TypeJSON:
		return "TEXT"
	case pipeline.TypeInteger, pipeline.TypeBoolean:
		return "INTEGER"
	case pipeline.TypeNumber:
		return "REAL"
	}
	panic("unknown column type " + typ) // checkSchema refused it
}

// table: _row is the rowid, which every index ends with, so that the index on org_id serves a
// tenant's reads in row order. STRICT: a value of the wrong type is an error, as it is on
// PostgreSQL, rather than stored.
func (s *sqlite) table() tableDialect {
	return tableDialect{row: "INTEGER PRIMARY KEY AUTOINCREMENT", batchType: "INTEGER", options: " STRICT", orgIndex: true}
}

// lockDatasets: the transaction holds the file's write lock already.
func (s *sqlite) lockDatasets(context.Context, tx, []dataset) error { return nil }

func (s *sqlite) arg(v any) any {
	switch v := v.(type) {
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case time.Time:
		return formatTime(v)
	case json.RawMessage:
		return string(v)
	}
	return v
}

// insertRows inserts the rows in statements of as many rows as SQLite's parameter limit allows.
func (s *sqlite) insertRows(ctx context.Context, t tx, ins *insertion) (int, [][]any, error) {
	cols := ins.schema.Columns
	perRow := len(cols) + 2
	chunk := min(sqliteMaxParams/perRow, 1000)
	tail := ins.onConflict(func(c pipeline.Column) string { return quote(c.Name) })
	one := "(?" + strings.Repeat(", ?", perRow-1) + ")"
	var (
		inserted int
		returned [][]any
		args     = make([]any, 0, chunk*perRow)
	)
	for start := 0; start < len(ins.rows); start += chunk {
		rows := ins.rows[start:min(start+chunk, len(ins.rows))]
		args = args[:0]
		for _, r := range rows {
			args = append(args, ins.tenant)
			for _, c := range cols {
				args = append(args, s.arg(r[c.Name]))
			}
			args = append(args, ins.seq)
		}
		stmt := ins.insertInto() + " VALUES " + one + strings.Repeat(", "+one, len(rows)-1) + tail
		if len(ins.returning) == 0 {
			n, err := t.exec(ctx, stmt, args...)
			if err != nil {
				return 0, nil, err
			}
			inserted += int(n)
			continue
		}
		it, err := t.query(ctx, stmt, args...)
		if err != nil {
			return 0, nil, err
		}
		for it.Next() {
			vals := make([]any, len(ins.returning))
			dest := make([]any, len(vals))
			for i := range vals {
				dest[i] = &vals[i]
			}
			if err := it.Scan(dest...); err != nil {
				it.Close()
				return 0, nil, err
			}
			returned = append(returned, vals)
		}
		it.Close()
		if err := it.Err(); err != nil {
			return 0, nil, err
		}
		inserted = len(returned)
	}
	return inserted, returned, nil
}

// sqlRunner is a database/sql pool or transaction.
type sqlRunner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

type sqlQuerier struct{ r sqlRunner }

func (q sqlQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.r.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sqlQuerier) query(ctx context.Context, query string, args ...any) (rowIter, error) {
	rows, err := q.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// sqlRows is *sql.Rows with the Close of pgx.Rows: its error shows in Err.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

type sqlTx struct {
	sqlQuerier
	tx *sql.Tx
}

func (t *sqlTx) commit(context.Context) error { return t.tx.Commit() }

func (t *sqlTx) rollback(context.Context) { _ = t.tx.Rollback() }
