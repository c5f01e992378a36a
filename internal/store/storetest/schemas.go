package storetest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// PostgreSQL schemas for tests. Migrating a fresh schema costs PostgreSQL about a quarter of a
// CPU second, which, over the few hundred PostgreSQL subtests of a run, was minutes of a 2-core
// machine. So a schema a test is done with is emptied (every table but goose's truncated, its
// identities restarted: what a fresh migration leaves) and handed to the next test of the same
// process, which finds it migrated. A schema is never shared by two tests at once.
//
// A process's pooled schemas outlive it (a test binary has no hook at exit): their names carry
// the process id and a hash of the host's name, and each process drops, once, the pooled schemas
// of this host whose process is gone.

// schemaPrefix starts the name of every pooled schema of this process.
var schemaPrefix = fmt.Sprintf("baton_test_h%08x_p%d_", hostHash(), os.Getpid())

var schemas struct {
	mu       sync.Mutex
	free     []string // emptied, migrated schemas, ready for the next test
	swept    bool     // the schemas of processes that are gone were dropped
	sequence int
}

func hostHash() uint32 {
	name, _ := os.Hostname()
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

// takeSchema returns a schema for t: a pooled one (migrated and empty) or a new one. When t ends,
// after the stores opened on it are closed (cleanups run last first), the schema is emptied and
// pooled, or dropped if that fails or t failed.
func takeSchema(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	schemas.mu.Lock()
	if !schemas.swept {
		schemas.swept = true
		sweepSchemas(ctx)
	}
	var schema string
	if n := len(schemas.free); n > 0 {
		schema, schemas.free = schemas.free[n-1], schemas.free[:n-1]
	} else {
		schemas.sequence++
		schema = schemaPrefix + strconv.Itoa(schemas.sequence)
	}
	schemas.mu.Unlock()
	if _, err := admin.db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			if err := emptySchema(ctx, schema); err == nil {
				schemas.mu.Lock()
				schemas.free = append(schemas.free, schema)
				schemas.mu.Unlock()
				return
			}
		}
		if _, err := admin.db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// emptySchema truncates every table of schema but goose's version table, restarting identities.
func emptySchema(ctx context.Context, schema string) error {
	rows, err := admin.db.QueryContext(ctx, `SELECT quote_ident(tablename) FROM pg_tables
		WHERE schemaname = $1 AND tablename <> 'goose_db_version'`, schema)
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, schema+"."+name)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	if len(tables) == 0 {
		return errors.New("no tables: not a migrated schema")
	}
	// Under a lock timeout: a connection the test left open on the schema fails the truncation,
	// and the schema is dropped instead, rather than the cleanup waiting for it.
	tx, err := admin.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "TRUNCATE "+strings.Join(tables, ", ")+" RESTART IDENTITY CASCADE"); err != nil {
		return err
	}
	return tx.Commit()
}

// sweepSchemas drops the pooled schemas that processes of this host left behind when they
// ended. Errors are ignored: another process may be dropping the same schema.
func sweepSchemas(ctx context.Context) {
	host := fmt.Sprintf("baton_test_h%08x_p", hostHash())
	rows, err := admin.db.QueryContext(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, host)
	if err != nil {
		return
	}
	var gone []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, host), "_", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil {
			if err := p.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
				gone = append(gone, name)
			}
		}
	}
	rows.Close()
	for _, name := range gone {
		_, _ = admin.db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	}
}
