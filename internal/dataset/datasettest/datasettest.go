// Package datasettest gives tests a fresh data database per driver and a dump of what one holds,
// to check that an operation refused changed nothing in it.
package datasettest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver

	"github.com/baton-dev/baton/internal/store/storetest"
)

// Drivers are the data databases' drivers, named as storetest names the stores'.
var Drivers = []string{"sqlite", "postgres"}

// URL is a new, empty data database of the driver for the test: a SQLite file in the test's
// temporary directory, or a PostgreSQL database dropped when the test ends (the test is skipped,
// saying why, when BATON_TEST_POSTGRES_URL is unset).
func URL(t testing.TB, driver string) string {
	t.Helper()
	switch driver {
	case "sqlite":
		return filepath.Join(t.TempDir(), "data.db")
	case "postgres":
		return storetest.NewPostgresDatabase(t).URL
	}
	t.Fatalf("no data database driver %q", driver)
	return ""
}

// Dump lists what the data database at url holds besides rows: every table, column, index and
// constraint, with its definition, the rows of baton_dataset_tables (the schema each dataset's
// table was ensured with, and when) and those of baton_dataset_retired (the versions resets
// retired), one line each in a fixed order. Two dumps are equal when the database's structure,
// its record of schemas and its retired versions are.
func Dump(t testing.TB, url string) string {
	t.Helper()
	var queries []string
	driver, dsn := "pgx", url
	postgres := strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") ||
		!strings.Contains(url, "://") && strings.Contains(url, "dbname=")
	if !postgres {
		driver, dsn = "sqlite", strings.TrimPrefix(url, "sqlite://")+"?_pragma=busy_timeout(10000)"
		queries = []string{
			`SELECT type || ' ' || name || ' on ' || tbl_name || ': ' || COALESCE(sql, '') FROM sqlite_master ORDER BY type, name`,
		}
	} else {
		queries = []string{
			`SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' nullable=' || is_nullable ||
				' at ' || ordinal_position || ' identity=' || is_identity || ' default=' || COALESCE(column_default, '')
				FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`,
			`SELECT 'index ' || indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname`,
			`SELECT 'constraint ' || conname || ' on ' || conrelid::regclass::text || ': ' || pg_get_constraintdef(oid)
				FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY conname`,
			`SELECT 'sequence ' || sequence_name FROM information_schema.sequences WHERE sequence_schema = 'public' ORDER BY sequence_name`,
		}
	}
	queries = append(queries, `SELECT 'ensured ' || dataset_uuid || ' at ' || CAST(ensured_at AS TEXT) || ': ' || CAST(schema AS TEXT)
		FROM baton_dataset_tables ORDER BY dataset_uuid`,
		`SELECT 'retired ' || dataset_uuid || ' ' || version FROM baton_dataset_retired ORDER BY dataset_uuid, version`)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	defer db.Close()
	var b strings.Builder
	for _, q := range queries {
		for _, line := range queryLines(t, db, q) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// Tables lists the names of the data database's tables, sorted.
func Tables(t testing.TB, url string) []string {
	t.Helper()
	var names []string
	for _, line := range strings.Split(Dump(t, url), "\n") {
		switch {
		case strings.HasPrefix(line, "table "):
			names = append(names, strings.Fields(line)[1])
		case strings.HasPrefix(line, "column "):
			table, _, _ := strings.Cut(strings.Fields(line)[1], ".")
			if len(names) == 0 || names[len(names)-1] != table {
				names = append(names, table)
			}
		}
	}
	return names
}

func queryLines(t testing.TB, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", q, err))
	}
	return out
}

// Diff is the lines of two dumps that differ: "- line" for one only in before, "+ line" for one
// only in after.
func Diff(before, after string) string {
	was := map[string]bool{}
	for _, line := range strings.Split(before, "\n") {
		was[line] = true
	}
	is := map[string]bool{}
	var b strings.Builder
	for _, line := range strings.Split(after, "\n") {
		is[line] = true
		if !was[line] {
			b.WriteString("+ " + line + "\n")
		}
	}
	for _, line := range strings.Split(before, "\n") {
		if !is[line] {
			b.WriteString("- " + line + "\n")
		}
	}
	return b.String()
}
