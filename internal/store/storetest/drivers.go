// Package storetest holds what tests need to run against every store driver: a fresh, isolated
// store per test for each driver, and the contract suite all drivers must pass unchanged.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for schema setup

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

// PostgresURLEnv names the environment variable that points the tests at a PostgreSQL database.
const PostgresURLEnv = "BATON_TEST_POSTGRES_URL"

// Driver opens a fresh, empty store for one test and closes it when the test ends.
type Driver struct {
	Name string
	Open func(t testing.TB) store.Store
}

// Drivers lists every driver. The PostgreSQL one skips its test, saying why, when
// BATON_TEST_POSTGRES_URL is unset.
func Drivers() []Driver {
	return []Driver{{"sqlite", OpenSQLite}, {"postgres", OpenPostgres}}
}

// ForEachDriver runs fn as a parallel subtest per driver.
func ForEachDriver(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Helper()
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, d.Open(t))
		})
	}
}

// OpenSQLite opens a store on a new file in the test's temporary directory. The file starts as
// a copy of one migrated once per test process: the migrations ran against an identical file,
// and running them again for every test was most of what a test of a few milliseconds cost
// (a third of a second each under the race detector).
func OpenSQLite(t testing.TB) store.Store {
	t.Helper()
	image, err := migratedSQLite()
	if err != nil {
		t.Fatalf("migrate a template sqlite database: %v", err)
	}
	path := filepath.Join(t.TempDir(), "baton.db")
	if err := os.WriteFile(path, image, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var sqliteTemplate struct {
	once  sync.Once
	image []byte
	err   error
}

// migratedSQLite returns the bytes of a freshly migrated SQLite store, made once per process.
// Closing the store checkpoints its write-ahead log into the file, so the file alone is the
// whole database.
func migratedSQLite() ([]byte, error) {
	sqliteTemplate.once.Do(func() {
		dir, err := os.MkdirTemp("", "baton-storetest-")
		if err != nil {
			sqliteTemplate.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "template.db")
		st, err := sqlite.Open(context.Background(), path)
		if err != nil {
			sqliteTemplate.err = err
			return
		}
		if err := st.Close(); err != nil {
			sqliteTemplate.err = err
			return
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			if _, err := os.Stat(path + suffix); err == nil {
				sqliteTemplate.err = fmt.Errorf("closing %s left its %s file behind", path, suffix)
				return
			}
		}
		sqliteTemplate.image, sqliteTemplate.err = os.ReadFile(path)
	})
	return sqliteTemplate.image, sqliteTemplate.err
}

var admin struct {
	once sync.Once
	db   *sql.DB
	err  error
}

// OpenPostgres opens a store in a schema of the test database that no other test uses while
// this one runs, empty and migrated, so tests can run in parallel on one database.
func OpenPostgres(t testing.TB) store.Store {
	t.Helper()
	return OpenPostgresReplicas(t, 1)[0]
}

// connectAdmin returns BATON_TEST_POSTGRES_URL, with the admin connection (for creating and
// dropping schemas and databases) open on it; it skips the test, saying why, when it is unset.
func connectAdmin(t testing.TB) string {
	t.Helper()
	url := os.Getenv(PostgresURLEnv)
	if url == "" {
		t.Skipf("%s is not set; skipping the PostgreSQL run (e.g. %s=postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", PostgresURLEnv, PostgresURLEnv)
	}
	admin.once.Do(func() { admin.db, admin.err = sql.Open("pgx", url) })
	if admin.err != nil {
		t.Fatalf("connect to %s: %v", url, admin.err)
	}
	return url
}

// uniqueName is a fresh name for a test's schema or database.
func uniqueName() string { return "baton_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16] }

// OpenPostgresReplicas opens n stores on one schema of the test's own, empty and migrated (see
// takeSchema), as n server replicas sharing a database would.
func OpenPostgresReplicas(t testing.TB, n int) []store.Store {
	t.Helper()
	url := connectAdmin(t)
	ctx := context.Background()
	schema := takeSchema(t)
	stores := make([]store.Store, n)
	for i := range stores {
		st, err := postgres.Open(ctx, withSearchPath(url, schema), postgres.Options{MaxConns: 10, Migrate: true})
		if err != nil {
			t.Fatalf("open postgres: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
	}
	return stores
}

// withSearchPath adds a search_path runtime parameter to a URL or key=value connection string.
func withSearchPath(url, schema string) string {
	if strings.Contains(url, "://") {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		return url + sep + "search_path=" + schema
	}
	return fmt.Sprintf("%s search_path=%s", url, schema)
}

// NewPostgresSchema creates an empty schema (not migrated) in the test PostgreSQL database and
// returns the URL that connects to it, as a process started by the test (`baton migrate`,
// `baton server`) would be given; the schema is dropped when the test ends. It skips the test
// when BATON_TEST_POSTGRES_URL is unset.
func NewPostgresSchema(t testing.TB) string {
	t.Helper()
	url := connectAdmin(t)
	ctx := context.Background()
	schema := uniqueName()
	if _, err := admin.db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return withSearchPath(url, schema)
}

// PostgresDatabase is a database of its own for one test, for figures PostgreSQL keeps per
// database (deadlocks, for one) that other tests sharing a database would blur.
type PostgresDatabase struct {
	Name string
	URL  string // connects to it
}

// NewPostgresDatabase creates a database for the test, dropped (with its connections) when the
// test ends. It skips the test when BATON_TEST_POSTGRES_URL is unset.
func NewPostgresDatabase(t testing.TB) *PostgresDatabase {
	t.Helper()
	url := connectAdmin(t)
	ctx := context.Background()
	name := uniqueName()
	if _, err := admin.db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.db.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return &PostgresDatabase{Name: name, URL: withDatabase(t, url, name)}
}

// withDatabase points a URL or key=value connection string at another database.
func withDatabase(t testing.TB, conn, name string) string {
	if !strings.Contains(conn, "://") {
		return conn + " dbname=" + name
	}
	u, err := neturl.Parse(conn)
	if err != nil {
		t.Fatalf("parse %s: %v", conn, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Open opens a store on the database, migrating it first.
func (p *PostgresDatabase) Open(t testing.TB) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), p.URL, postgres.Options{MaxConns: 10, Migrate: true})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Deadlocks is how many deadlocks PostgreSQL has counted in the database. Backends report their
// counts when a transaction ends after a quiet second, or when they exit: close the stores first
// and the figure settles (it is read until it stops changing).
func (p *PostgresDatabase) Deadlocks(t testing.TB) int64 {
	t.Helper()
	var last int64 = -1
	for stable := 0; stable < 3; {
		var n int64
		if err := admin.db.QueryRow(`SELECT deadlocks FROM pg_stat_database WHERE datname = $1`, p.Name).Scan(&n); err != nil {
			t.Fatalf("read deadlocks: %v", err)
		}
		if n == last {
			stable++
		} else {
			stable, last = 0, n
		}
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// TerminateBackends ends every connection to the database but the caller's own, as an operator's
// pg_terminate_backend or a failover would, and returns how many it ended.
func (p *PostgresDatabase) TerminateBackends(t testing.TB) int {
	t.Helper()
	var n int
	err := admin.db.QueryRow(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()) AS ended`, p.Name).Scan(&n)
	if err != nil {
		t.Errorf("terminate backends of %s: %v", p.Name, err)
	}
	return n
}
