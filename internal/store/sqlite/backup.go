package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotDatabase: a file is not a SQLite database (or is one that fails its integrity check).
var ErrNotDatabase = errors.New("not a SQLite database")

// ErrNotBaton: a SQLite database without Baton's migration table.
var ErrNotBaton = errors.New("not a Baton database (no goose_db_version table)")

// ErrTooNew: a database migrated further than this binary's migrations go.
var ErrTooNew = errors.New("database is newer than this binary")

// Copy writes a consistent snapshot of the SQLite database at src into dst, which must not exist
// or be empty, with VACUUM INTO. It reads in one transaction: in WAL mode writers go on meanwhile,
// and the copy holds exactly what was committed when it began. src must exist: Copy never creates
// a database.
func Copy(ctx context.Context, src, dst string) error {
	db, err := openFile(src)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		if code(err)&0xff == sqlite3.SQLITE_NOTADB {
			return fmt.Errorf("%s: %w", src, ErrNotDatabase)
		}
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// Check opens the database file at path, which it may change only by checkpointing it, and
// checks that it is a sound SQLite database (PRAGMA integrity_check).
func Check(ctx context.Context, path string) error {
	db, err := openFile(path)
	if err != nil {
		return err
	}
	defer db.Close()
	return check(ctx, db, path)
}

func check(ctx context.Context, db *sql.DB, path string) error {
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		if c := code(err) & 0xff; c == sqlite3.SQLITE_NOTADB || c == sqlite3.SQLITE_CORRUPT {
			return fmt.Errorf("%s: %w", path, ErrNotDatabase)
		}
		return fmt.Errorf("check %s: %w", path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("check %s: %w", path, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %w: integrity check: %s", path, ErrNotDatabase, strings.Join(problems, "; "))
	}
	return nil
}

// CheckBaton is Check for a Baton store: it also reads the migration level from goose's table and
// returns it; a level past LatestVersion is ErrTooNew.
func CheckBaton(ctx context.Context, path string) (version int64, err error) {
	db, err := openFile(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if err := check(ctx, db, path); err != nil {
		return 0, err
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'goose_db_version'").Scan(&n); err != nil {
		return 0, fmt.Errorf("check %s: %w", path, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: %w", path, ErrNotBaton)
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT max(version_id) FROM goose_db_version WHERE is_applied").Scan(&v); err != nil {
		return 0, fmt.Errorf("check %s: read the migration level: %w", path, err)
	}
	latest, err := LatestVersion()
	if err != nil {
		return 0, err
	}
	if v.Int64 > latest {
		return v.Int64, fmt.Errorf("%s: %w: migrated to version %d, this binary knows versions up to %d; restore it with a newer baton",
			path, ErrTooNew, v.Int64, latest)
	}
	return v.Int64, nil
}

// LatestVersion is the number of the newest migration this binary carries.
func LatestVersion() (int64, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return 0, err
	}
	var latest int64
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		latest = max(latest, v)
	}
	return latest, nil
}

// openFile opens the existing SQLite file at path (never creating one) for a backup's reads.
func openFile(path string) (*sql.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}
