// Package postgres is the production store driver: PostgreSQL through pgx. Several server
// replicas may share one database; row locks and SKIP LOCKED keep them out of each other's way.
package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on a PostgreSQL database.
type Store struct {
	*sqldb.DB
	cfg  *pgx.ConnConfig
	gate *gate
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.Listener     = (*Store)(nil)
	_ store.Reachability = (*Store)(nil)
)

// readyChannel is the NOTIFY channel of task wake-ups between replicas.
const readyChannel = "baton_ready"

// Listen implements store.Listener on a dedicated connection, reconnecting after errors.
func (s *Store) Listen(ctx context.Context, fn func()) error {
	for {
		s.listen(ctx, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A dropped connection may have missed notifications; waking waiters costs only a look.
		fn()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// listen delivers notifications until the connection fails or ctx ends.
func (s *Store) listen(ctx context.Context, fn func()) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg.Copy())
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+readyChannel); err != nil {
		return
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return
		}
		fn()
	}
}

// Options tunes Open.
type Options struct {
	MaxConns int  // connection pool size; default 16
	Migrate  bool // apply pending migrations first; otherwise a schema that is behind is an error
	// Watch probes the database on a connection of its own and, while it does not answer, fails
	// work at once with store.ErrUnreachable instead of letting it wait (reach.go). For servers:
	// it costs a connection and a probe every ProbeEvery.
	Watch        bool
	ProbeEvery   time.Duration // default DefaultProbeEvery
	ProbeTimeout time.Duration // default DefaultProbeTimeout
	Logger       *slog.Logger  // says when the database becomes unreachable and answers again; default slog.Default()
}

// ErrSchemaBehind: the database lacks migrations this binary needs.
var ErrSchemaBehind = errors.New("the database schema is not up to date: run `baton migrate`")

// Open connects to the database at url (a postgres:// URL or key=value string).
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	return openDB(ctx, cfg, opts)
}

// parseConfig reads url and sets what it leaves unset to Baton's defaults.
func parseConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if _, set := cfg.RuntimeParams["plan_cache_mode"]; !set {
		// pgx prepares every statement, and after five runs PostgreSQL may keep a generic plan
		// for it. A plan made while the tables were nearly empty (a new database filling up)
		// scans them, and stays until an ANALYZE invalidates it: locking a claim's tasks by id
		// took 3.5 ms instead of 0.1, and DAG hand-off p99 went from 20 ms to 180. Plan each run.
		// Planning costs a quarter of the database's time on the hot path; on a database that
		// has been analyzed, plan_cache_mode=auto in the URL is up to 16% faster.
		cfg.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	if _, set := cfg.RuntimeParams["jit"]; !set {
		// Recursive queries over the DAG (descendants to skip or lock) get row estimates in the
		// millions, which push their cost past jit_above_cost: PostgreSQL then compiled each one
		// for ~20 ms to run it in well under one. Baton's statements are all short.
		cfg.RuntimeParams["jit"] = "off"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	if _, set := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		// A transaction whose client vanished mid-way is rolled back, and its locks freed (reach.go).
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = defaultIdleInTxTimeout
	}
	return cfg, nil
}

// openDB is the part of Open after the configuration.
func openDB(ctx context.Context, cfg *pgx.ConnConfig, opts Options) (*Store, error) {
	g := newGate(cmp.Or(opts.Logger, slog.Default()))
	probeCfg := cfg.Copy()
	probeCfg.DialFunc = g.dial // the probe's own connection is not closed with the pool's
	cfg.DialFunc = g.dialContext
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(cmpOr(opts.MaxConns, 16))
	db.SetMaxIdleConns(cmpOr(opts.MaxConns, 16))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	if opts.Migrate {
		if err := Migrate(ctx, db); err != nil {
			db.Close()
			return nil, err
		}
	} else if err := checkSchema(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	dialect := sqldb.Dialect{
		Notify:    "SELECT pg_notify('" + readyChannel + "', '')",
		LockRow:   " FOR UPDATE",
		LockSkip:  " FOR UPDATE SKIP LOCKED",
		MaxParams: 65535,
		Arrays:    true,
		// Volatile functions of the select list run after the sort: the locks are taken in
		// hash order.
		LockKeys: `SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h
			FROM unnest($1::text[]) AS k) AS keys ORDER BY h`,
		IsUnique:  func(err error) bool { return pgCode(err) == "23505" },
		Transient: transient,
	}
	var closers []func() error
	if opts.Watch {
		dialect.Unreachable = g.err
		watchCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			g.watch(watchCtx, probeCfg, cmp.Or(opts.ProbeEvery, DefaultProbeEvery), cmp.Or(opts.ProbeTimeout, DefaultProbeTimeout))
		}()
		closers = append(closers, func() error { stop(); <-done; return nil })
	}
	return &Store{DB: sqldb.New(db, db, dialect, closers...), cfg: cfg, gate: g}, nil
}

// Unreachable implements store.Reachability: nil unless Options.Watch found the database not
// answering.
func (s *Store) Unreachable() error { return s.gate.err() }

func provider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

func checkSchema(ctx context.Context, db *sql.DB) error {
	p, err := provider(db)
	if err != nil {
		return err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("check schema version: %w", err)
	}
	if pending {
		return ErrSchemaBehind
	}
	return nil
}

// Migrate applies pending migrations under an advisory lock, so replicas starting together
// migrate once. The lock is per schema, so isolated schemas in one database do not wait on each
// other.
func Migrate(ctx context.Context, db *sql.DB) error {
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("current schema: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte("baton:" + schema))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64()>>1)), lock.WithLockTimeout(1, 600))
	if err != nil {
		return err
	}
	p, err := provider(db, goose.WithSessionLocker(locker))
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// transient: the database, not the request, failed, and the same work may succeed if done
// again. PostgreSQL says so by SQLSTATE (a deadlock or serialization failure aborted the
// transaction; a backend was shut down; the server refuses connections for now); a connection
// that broke or could not be made says so by failing below SQL.
func transient(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", // serialization_failure
			"40P01", // deadlock_detected
			"57P01", // admin_shutdown (pg_terminate_backend, a fast shutdown)
			"57P02", // crash_shutdown
			"57P03", // cannot_connect_now (starting up, shutting down)
			"53300": // too_many_connections
			return true
		}
		return strings.HasPrefix(pe.Code, "08") // connection exceptions
	}
	var (
		netErr     net.Error
		connectErr *pgconn.ConnectError
	)
	return errors.Is(err, store.ErrUnreachable) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.SafeToRetry(err)
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
