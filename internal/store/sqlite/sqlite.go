// Package sqlite is the embedded store driver: modernc.org/sqlite (pure Go), WAL, and a single
// writer at a time, so that concurrent transactions queue in Go instead of failing with
// SQLITE_BUSY.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on one SQLite file.
type Store struct{ *sqldb.DB }

var _ store.Store = (*Store)(nil)

// readers is the size of the read pool; WAL lets readers run beside the writer.
const readers = 4

// Open opens (creating if needed) the database file at path and applies the migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	// synchronous(FULL): a commit is on disk before it is acknowledged, even across power loss.
	dsn := path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)"
	write, err := sql.Open("sqlite", dsn+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Writes are serialised by the store's writer lock; the second connection lets statements be
	// prepared for the cache while a transaction holds the first.
	write.SetMaxOpenConns(2)
	write.SetMaxIdleConns(2)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	if err := migrate(ctx, write); err != nil {
		write.Close()
		return nil, err
	}
	read, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	read.SetMaxOpenConns(readers)
	read.SetMaxIdleConns(readers)
	return &Store{sqldb.New(write, read, sqldb.Dialect{
		MaxParams:       32766,
		Positional:      true,
		CacheStatements: true,
		SingleWriter:    true,
		IsUnique:        isUnique,
		Transient:       isBusy,
	})}, nil
}

func migrate(ctx context.Context, db *sql.DB) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

func code(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func isUnique(err error) bool {
	c := code(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isBusy: only another process writing the same file can make the single writer wait past its
// busy timeout; running the transaction again is then safe.
func isBusy(err error) bool {
	return code(err)&0xff == sqlite3.SQLITE_BUSY
}
