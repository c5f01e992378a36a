//go:build cgo

package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/baton-dev/baton/internal/query"
)

// hostile are statements the gate must refuse before anything runs: everything that is not one
// read-only SELECT of datasets by name, at any depth, however it is spelled.
var hostile = []string{
	// Statements other than SELECT.
	"COPY alerts TO '/tmp/x.csv'",
	"COPY (SELECT * FROM alerts) TO '/tmp/x.parquet' (FORMAT parquet)",
	"COPY alerts FROM '/etc/passwd'",
	"ATTACH '/tmp/evil.db' AS evil",
	"ATTACH ':memory:' AS m",
	"DETACH evil",
	"INSTALL httpfs",
	"LOAD httpfs",
	"FORCE INSTALL httpfs FROM 'http://example.com'",
	"PRAGMA enable_profiling",
	"PRAGMA database_list",
	"SET enable_external_access = true",
	"SET lock_configuration = false",
	"RESET memory_limit",
	"CREATE TABLE x AS SELECT 1",
	"CREATE MACRO m(a) AS a",
	"CREATE SECRET (TYPE s3, KEY_ID 'a', SECRET 'b')",
	"INSERT INTO alerts VALUES (1)",
	"UPDATE alerts SET a = 1",
	"DELETE FROM alerts",
	"DROP TABLE alerts",
	"ALTER TABLE alerts ADD COLUMN b INT",
	"EXPORT DATABASE '/tmp/out'",
	"IMPORT DATABASE '/tmp/out'",
	"CALL pragma_version()",
	"EXPLAIN SELECT 1",
	"EXPLAIN ANALYZE SELECT * FROM alerts",
	"VACUUM",
	"CHECKPOINT",
	"BEGIN TRANSACTION",
	"USE memory",
	"DESCRIBE alerts",
	"SUMMARIZE alerts",
	"SHOW TABLES",
	"SET VARIABLE x = 1",
	"PREPARE p AS SELECT 1",
	"EXECUTE p",
	// More than one statement, however they are hidden.
	"SELECT 1; SELECT 2",
	"SELECT 1; COPY alerts TO '/tmp/x'",
	"SELECT 1; ; SELECT 2",
	"SELECT * FROM alerts; -- \n DROP TABLE alerts",
	"SELECT 1 /* ; */; INSTALL httpfs",
	// Files as relations, at every depth.
	"SELECT * FROM '/etc/passwd'",
	"FROM '/etc/passwd'",
	"SELECT * FROM 'x.csv'",
	`SELECT * FROM "/etc/passwd"`,
	"SELECT * FROM (SELECT * FROM 'x.csv')",
	"WITH t AS (SELECT * FROM 's3://b/k.parquet') SELECT * FROM t",
	"WITH t AS (SELECT * FROM (SELECT * FROM '/etc/passwd')) SELECT * FROM t",
	"SELECT * FROM alerts WHERE a IN (SELECT * FROM '/etc/passwd')",
	"SELECT (SELECT count(*) FROM '/etc/shadow')",
	"SELECT * FROM alerts JOIN '/etc/passwd' p ON true",
	"SELECT * FROM alerts, '/etc/hosts'",
	"SELECT * FROM alerts UNION ALL SELECT * FROM 'x.csv'",
	"SELECT * FROM main.alerts",
	"SELECT * FROM memory.main.alerts",
	"SELECT * FROM system.main.duckdb_settings",
	// Table functions that read files, settings or other databases.
	"SELECT * FROM read_csv('/etc/passwd')",
	"SELECT * FROM read_csv_auto('/etc/passwd', sep=':')",
	"SELECT * FROM read_text('/etc/passwd')",
	"SELECT * FROM read_blob('/etc/passwd')",
	"SELECT * FROM read_json('/etc/passwd')",
	"SELECT * FROM read_parquet('s3://bucket/key.parquet')",
	"SELECT * FROM parquet_scan('/tmp/x.parquet')",
	"SELECT * FROM parquet_metadata('/tmp/x.parquet')",
	"SELECT * FROM glob('/etc/*')",
	"SELECT * FROM sqlite_scan('/tmp/x.db', 't')",
	"SELECT * FROM postgres_scan('host=x', 'public', 't')",
	"SELECT * FROM duckdb_settings()",
	"SELECT * FROM duckdb_extensions()",
	"SELECT * FROM pragma_table_info('alerts')",
	"SELECT * FROM query('SELECT * FROM read_csv(''/etc/passwd'')')",
	"SELECT * FROM query_table('alerts')",
	"SELECT * FROM (SELECT * FROM read_csv('/etc/passwd'))",
	"WITH t AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM t",
	"SELECT * FROM alerts WHERE EXISTS (SELECT 1 FROM read_blob('/etc/passwd'))",
	`SELECT * FROM "read_csv"('/etc/passwd')`,
	"SELECT * FROM READ_CSV('/etc/passwd')",
	"SELECT * FROM read_csv /* comment */ ('/etc/passwd')",
	// Scalar functions that read the environment or settings, or run SQL of their own.
	"SELECT getenv('HOME')",
	"SELECT GETENV('AWS_SECRET_ACCESS_KEY')",
	`SELECT "getenv"('HOME')`,
	"SELECT current_setting('temp_directory')",
	"SELECT json_execute_serialized_sql('{}')",
	"SELECT * FROM alerts WHERE a = getenv('X')",
	"SELECT main.getenv('HOME')",
	"SELECT list_transform([1], x -> getenv('HOME'))",
	// Malformed: syntax errors, unterminated input, not UTF-8, NUL, empty.
	"",
	"   ",
	"-- only a comment",
	"SELECT 'unterminated",
	"SELECT /* unterminated",
	"SELECT \"unterminated",
	"SELECT \xff\xfe FROM alerts",
	"SELECT 1\x00; DROP TABLE alerts",
	"SELEC 1",
}

func TestGateRefusesHostileStatementsBeforeTheyRun(t *testing.T) {
	if len(hostile) < 60 {
		t.Fatalf("only %d hostile statements", len(hostile))
	}
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	for _, sql := range hostile {
		st, err := g.check(t.Context(), sql)
		var rejected *query.RejectedError
		if !errors.As(err, &rejected) {
			t.Errorf("gate(%q) = %+v, %v; want a refusal", sql, st, err)
			continue
		}
		if rejected.Reason == "" {
			t.Errorf("gate(%q) refused without a reason", sql)
		}
	}
}

// allowed are statements the gate lets through, with the relations each reads: ordinary reads
// of datasets, and names the statement defines as CTEs read in and out of their scope.
var allowed = []struct {
	sql  string
	rels []string
}{
	{sql: "SELECT 1"},
	{sql: "SELECT * FROM alerts", rels: []string{"alerts"}},
	{sql: "select * from Alerts where severity = 'high';", rels: []string{"alerts"}},
	{sql: "FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT severity, count(*) FROM alerts GROUP BY ALL ORDER BY 2 DESC LIMIT 5", rels: []string{"alerts"}},
	{sql: "SELECT a.x, b.y FROM alerts a JOIN blocks b ON a.block = b.number", rels: []string{"alerts", "blocks"}},
	{sql: "WITH high AS (SELECT * FROM alerts WHERE severity = 'high') SELECT count(*) FROM high", rels: []string{"alerts"}},
	{sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT * FROM n"},
	{sql: "SELECT * FROM alerts WHERE block IN (SELECT number FROM blocks)", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM range(10)"},
	{sql: "SELECT * FROM generate_series(1, 3), alerts", rels: []string{"alerts"}},
	{sql: "SELECT 'https://example.com/x.csv' AS url, '/etc/passwd' AS path"},
	{sql: "SELECT row_number() OVER (PARTITION BY severity ORDER BY block) FROM alerts", rels: []string{"alerts"}},
	{sql: `SELECT * FROM "6f1c1e9a-3b0e-4a8e-9b1a-2f4c5d6e7f80"`, rels: []string{"6f1c1e9a-3b0e-4a8e-9b1a-2f4c5d6e7f80"}},
	{sql: "SELECT * FROM alerts UNION SELECT * FROM alerts_archive", rels: []string{"alerts", "alerts_archive"}},
	{sql: "SELECT list_filter([1, 2, 3], x -> x > 1), filter([1], x -> true)"},
	{sql: "WITH alerts AS (SELECT 1) SELECT * FROM alerts"}, // the CTE, never the dataset
	{sql: "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(n, s)"},
	{sql: "SELECT json_extract(payload, '$.a') FROM alerts", rels: []string{"alerts"}},

	// Names the statement defines as CTEs are relations where no CTE of the name is in scope:
	// there they are bound by the catalog of the engine (settings, paths, the databases), so
	// each must name a dataset. TestGateScopesCTEsAsDuckDBDoes holds these rules to DuckDB's.
	{sql: "SELECT * FROM (WITH pg_settings AS (SELECT 1 AS x) SELECT * FROM pg_settings) q, pg_settings", rels: []string{"pg_settings"}},
	{sql: "SELECT * FROM (WITH duckdb_tables AS (SELECT 1 AS x) SELECT * FROM duckdb_tables) q, duckdb_tables", rels: []string{"duckdb_tables"}},
	{sql: "SELECT * FROM (WITH duckdb_columns AS (SELECT 1 AS x) SELECT * FROM duckdb_columns) q, duckdb_columns", rels: []string{"duckdb_columns"}},
	{sql: "SELECT * FROM (WITH pg_class AS (SELECT 1 AS x) SELECT * FROM pg_class) q, pg_class", rels: []string{"pg_class"}},
	{sql: "SELECT * FROM (WITH duckdb_settings AS (SELECT 1 AS x) SELECT * FROM duckdb_settings) q, duckdb_settings", rels: []string{"duckdb_settings"}},
	{sql: "SELECT * FROM pg_settings UNION ALL (WITH pg_settings AS (SELECT 1) SELECT * FROM pg_settings)", rels: []string{"pg_settings"}},
	{sql: "(WITH duckdb_views AS (SELECT 1) SELECT * FROM duckdb_views) UNION ALL SELECT * FROM duckdb_views", rels: []string{"duckdb_views"}},
	{sql: "WITH a AS (SELECT * FROM pg_settings), pg_settings AS (SELECT 1) SELECT * FROM a", rels: []string{"pg_settings"}},
	{sql: "WITH pg_settings AS (SELECT * FROM pg_settings) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT * FROM pg_settings) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT * FROM pg_settings UNION ALL SELECT * FROM pg_settings WHERE false) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT 1 AS x UNION ALL BY NAME SELECT x FROM pg_settings) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH a AS (WITH duckdb_databases AS (SELECT 1) SELECT * FROM duckdb_databases), b AS (SELECT * FROM duckdb_databases) SELECT * FROM a, b", rels: []string{"duckdb_databases"}},
	{sql: "SELECT * FROM alerts, (WITH alerts AS (SELECT 1 AS x) SELECT * FROM alerts) q JOIN blocks ON true", rels: []string{"alerts", "blocks"}},
	{sql: "WITH \u212aey AS (SELECT 1) SELECT * FROM key", rels: []string{"key"}}, // a Kelvin sign: to DuckDB no k
	{sql: "WITH duckdb_views AS (SELECT 1) SELECT * FROM (SELECT * FROM duckdb_views) a, (WITH x AS (SELECT 1) SELECT * FROM duckdb_views) b"},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM pg_settings WHERE v < 3) SELECT * FROM pg_settings"},
	{sql: `WITH "PG_SETTINGS" AS (SELECT 1) SELECT * FROM pg_settings`},
}

func TestGateLetsReadsOfDatasetsThrough(t *testing.T) {
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	for _, c := range allowed {
		st, err := g.check(t.Context(), c.sql)
		if err != nil {
			t.Errorf("gate(%q): %v", c.sql, err)
			continue
		}
		if !slices.Equal(st.Relations, c.rels) {
			t.Errorf("gate(%q) relations %q, want %q", c.sql, st.Relations, c.rels)
		}
	}
}

// A name a statement defines as a CTE in one place and reads as a table in another is a
// relation wherever no CTE of the name is in scope, and the caller must be able to read it.
func TestGateReadsNamesOutsideTheirCTEsScopeAsRelations(t *testing.T) {
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	st, err := g.check(t.Context(), "SELECT * FROM alerts, (WITH alerts AS (SELECT 1 AS x) SELECT * FROM alerts) q JOIN blocks ON true")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Relations, []string{"alerts", "blocks"}) {
		t.Errorf("relations %q, want [alerts blocks]", st.Relations)
	}
	st, err = g.check(t.Context(), "WITH alerts AS (SELECT 1 AS x) SELECT * FROM alerts, (SELECT * FROM alerts) q JOIN blocks ON true")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Relations, []string{"blocks"}) {
		t.Errorf("relations %q, want [blocks]", st.Relations)
	}
}

// plainDuckDB opens an in-memory DuckDB with nothing in it, as a caller's statement would find
// the engine's database but for its relations.
func plainDuckDB(t *testing.T) *sql.DB {
	t.Helper()
	c, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// exec runs statements on db, failing the test on the first error.
func exec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// runAll runs text on db and reads its whole answer.
func runAll(ctx context.Context, db *sql.DB, text string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, text)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// scopes are statements that define CTEs and read tables of the same names, and the relations
// each reads, which TestGateScopesCTEsAsDuckDBDoes holds to what DuckDB binds. Every CTE and
// table has one column, v.
var scopes = []struct {
	sql  string
	rels []string
}{
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t", nil},
	{"SELECT * FROM (WITH t AS (SELECT 1 AS v) SELECT * FROM t) q, t", []string{"t"}},
	// A CTE is in scope in the CTEs defined after it in the same WITH, not before, not in itself.
	{"WITH t AS (SELECT 1 AS v), u AS (SELECT * FROM t) SELECT * FROM u", nil},
	{"WITH u AS (SELECT * FROM t), t AS (SELECT 1 AS v) SELECT * FROM u", []string{"t"}},
	{"WITH t AS (SELECT * FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM (WITH t AS (SELECT v + 1 AS v FROM t) SELECT * FROM t)", nil},
	{"WITH u AS (WITH t AS (SELECT 1 AS v) SELECT * FROM t), w AS (SELECT * FROM t) SELECT * FROM u, w", []string{"t"}},
	// WITH RECURSIVE: only a UNION [ALL] body is recursive, and only its right side sees the CTE;
	// a later CTE stays out of scope.
	{"WITH RECURSIVE t AS (SELECT * FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM t WHERE v < 3) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION SELECT v + 1 FROM t WHERE v < 3) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT * FROM t UNION ALL SELECT v FROM t WHERE v < 0) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM (SELECT * FROM t) s WHERE v < 3) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM t WHERE v < (SELECT 3 FROM t LIMIT 1)) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL (SELECT v + 1 FROM t WHERE v < 3 UNION ALL SELECT 0 WHERE false)) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL BY NAME SELECT v FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v EXCEPT SELECT v FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v INTERSECT SELECT v FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE u AS (SELECT 1 AS v UNION ALL SELECT v FROM w WHERE false), w AS (SELECT * FROM u) SELECT * FROM w", []string{"w"}},
	{"WITH RECURSIVE u AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM u WHERE v < 3), w AS (SELECT * FROM u) SELECT * FROM w", nil},
	{"WITH RECURSIVE u AS (WITH x AS (SELECT 1 AS v) SELECT v FROM x UNION ALL SELECT v FROM x WHERE false) SELECT * FROM u", nil},
	{"WITH RECURSIVE t(v) USING KEY (v) AS (SELECT 1 UNION SELECT v + 1 FROM t WHERE v < 3) SELECT * FROM t", nil},
	// A set operation's CTEs are in scope on both sides; a side's own only on that side.
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t UNION ALL SELECT * FROM t", nil},
	{"(WITH t AS (SELECT 1 AS v) SELECT * FROM t) UNION ALL SELECT * FROM t", []string{"t"}},
	{"SELECT * FROM t UNION ALL (WITH t AS (SELECT 1 AS v) SELECT * FROM t)", []string{"t"}},
	{"SELECT * FROM t EXCEPT SELECT * FROM (WITH t AS (SELECT 2 AS v) SELECT * FROM t)", []string{"t"}},
	// Materialized or not, the same.
	{"WITH t AS MATERIALIZED (SELECT 1 AS v) SELECT * FROM t, (SELECT * FROM t) s", nil},
	{"WITH u AS MATERIALIZED (SELECT * FROM t), t AS NOT MATERIALIZED (SELECT 1 AS v) SELECT * FROM u", []string{"t"}},
	// In scope in every clause of the node, at any depth.
	{"WITH t AS (SELECT 1 AS v) SELECT (SELECT max(v) FROM t), * FROM (SELECT * FROM t) s WHERE EXISTS (SELECT * FROM t) ORDER BY (SELECT min(v) FROM t)", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT count(*) FROM t GROUP BY (SELECT max(v) FROM t) HAVING (SELECT max(v) FROM t) > 0", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t WHERE v IN (SELECT v FROM u)", []string{"u"}},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM range((SELECT max(v) FROM t)) r, LATERAL (SELECT * FROM t) l", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT sum(v) OVER (ORDER BY (SELECT max(v) FROM t)) FROM t QUALIFY (SELECT max(v) FROM t) > 0", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT count(*) FILTER (WHERE (SELECT max(v) FROM t) > 0) FROM t", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM (VALUES ((SELECT max(v) FROM t))) x(v)", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t JOIN u USING (v) JOIN t AS w ON (SELECT max(v) FROM t) = 1", []string{"u"}},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t LIMIT (SELECT max(v) FROM t)", nil},
	{"WITH t AS (SELECT 1 AS v) UNPIVOT t ON v INTO NAME n VALUE w", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t UNPIVOT (w FOR n IN (v))", nil},
	{"SELECT * FROM t UNPIVOT (w FOR n IN (v)), (WITH t AS (SELECT 2 AS v) SELECT * FROM t) s", []string{"t"}},
	// Names are matched with their ASCII letters folded, as DuckDB matches them.
	{"WITH T AS (SELECT 1 AS v) SELECT * FROM t", nil},
	{`WITH "T" AS (SELECT 1 AS v) SELECT * FROM "t"`, nil},
	{"WITH \u212a AS (SELECT 1 AS v) SELECT * FROM k", []string{"k"}},
}

// The gate's rule of CTE scope is DuckDB's: given exactly the relations the gate names, each
// statement binds every other name to a CTE (no "does not exist"), and without any one of them it
// cannot run (the table does not exist, or is a CTE's reference to itself where the CTE is out of
// scope), so that name is no CTE where it is read.
func TestGateScopesCTEsAsDuckDBDoes(t *testing.T) {
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	for _, c := range scopes {
		st, err := g.check(t.Context(), c.sql)
		if err != nil {
			t.Errorf("gate(%q): %v", c.sql, err)
			continue
		}
		if !slices.Equal(st.Relations, c.rels) {
			t.Errorf("gate(%q) relations %q, want %q", c.sql, st.Relations, c.rels)
		}
		for _, without := range append([]string{""}, st.Relations...) {
			db := plainDuckDB(t)
			for _, r := range st.Relations {
				if r != without {
					exec(t, db, "CREATE TABLE "+ident(r)+" AS SELECT 1 AS v")
				}
			}
			err := runAll(t.Context(), db, c.sql)
			switch {
			case without == "" && err != nil:
				t.Errorf("%q with relations %q: %v", c.sql, st.Relations, err)
			case without != "" && (err == nil || !strings.Contains(err.Error(), "Table with name "+without+" does not exist") &&
				!strings.Contains(err.Error(), `Circular reference to CTE "`+without+`"`)):
				t.Errorf("%q without relation %s: %v, want that it does not exist", c.sql, without, err)
			}
		}
	}
}

// Every name of the engine's own catalog (its views, the pg_catalog, information_schema and
// duckdb_ names, its table functions, schemas and databases), read outside the scope of a CTE of
// the name, is a relation the statement needs: the data plane attaches it or refuses the
// statement, and the engine's own object under the name is never read. In a plain DuckDB each
// view of main and pg_catalog is read.
func TestGateReadsCatalogNamesOutsideTheirCTEsAsRelations(t *testing.T) {
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	db := plainDuckDB(t)
	rows, err := db.QueryContext(t.Context(), `
		SELECT view_name, schema_name IN ('main', 'pg_catalog') FROM duckdb_views()
		UNION SELECT function_name, false FROM duckdb_functions()
			WHERE function_type IN ('table', 'table_macro') OR schema_name = 'pg_catalog'
		UNION SELECT schema_name, false FROM duckdb_schemas()
		UNION SELECT database_name, false FROM duckdb_databases()`)
	if err != nil {
		t.Fatal(err)
	}
	reachable := map[string]bool{}
	for rows.Next() {
		var name string
		var view bool
		if err := rows.Scan(&name, &view); err != nil {
			t.Fatal(err)
		}
		reachable[name] = reachable[name] || view
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(reachable) < 150 {
		t.Fatalf("only %d names of the catalog", len(reachable))
	}
	read := 0
	for _, name := range slices.Sorted(maps.Keys(reachable)) {
		text := fmt.Sprintf("SELECT * FROM (WITH %[1]s AS (SELECT 1) SELECT * FROM %[1]s) q, %[1]s", ident(name))
		st, err := g.check(t.Context(), text)
		switch {
		case !relationName.MatchString(lowerASCII(name)):
			if err == nil {
				t.Errorf("gate(%q) let a name that names no dataset through", text)
			}
		case err != nil:
			t.Errorf("gate(%q): %v", text, err)
		case !slices.Equal(st.Relations, []string{lowerASCII(name)}):
			t.Errorf("gate(%q) relations %q, want [%s]", text, st.Relations, name)
		}
		err = runAll(t.Context(), db, text)
		if err == nil {
			read++
		}
		if reachable[name] && err != nil {
			t.Errorf("%q: %v, want the catalog's %s read in a plain DuckDB", text, err, name)
		}
	}
	t.Logf("%d of %d names of the catalog, outside their CTE, read the catalog of a plain DuckDB; the gate names each a relation", read, len(reachable))
}

// FuzzGate: the gate never panics and never lets through a statement that names a file, a
// table function or a function it refuses, whatever the input.
func FuzzGate(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Add("SELECT * FROM alerts WHERE a = 1")
	f.Add("WITH t AS (SELECT 1) SELECT * FROM t")
	g, err := newGate()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.close() })
	f.Fuzz(func(t *testing.T, sql string) {
		st, err := g.check(t.Context(), sql)
		if err != nil {
			var rejected *query.RejectedError
			if !errors.As(err, &rejected) {
				t.Fatalf("gate(%q) failed without a refusal: %v", sql, err)
			}
			return
		}
		for _, r := range st.Relations {
			if !relationName.MatchString(r) {
				t.Fatalf("gate(%q) let relation %q through", sql, r)
			}
		}
		lower := strings.ToLower(sql)
		for _, word := range []string{"copy ", "attach ", "install ", "pragma "} {
			if strings.HasPrefix(strings.TrimSpace(lower), word) {
				t.Fatalf("gate(%q) let a %s statement through", sql, word)
			}
		}
	})
}

// The gate notes the columns a statement names, and when it may read others: an engine then
// attaches a buffered relation with only the named columns, and the statement reads the same.
func TestGateNamesTheColumnsAStatementReads(t *testing.T) {
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	for _, c := range []struct {
		sql   string
		reads []string // columns it must read; "*": all of them
	}{
		{"SELECT severity, count(*) FROM alerts GROUP BY severity", []string{"severity"}},
		{"SELECT count(*) FROM alerts", nil},
		{"SELECT a.block, s.f.g FROM alerts a JOIN blocks b ON a.block = b.number", []string{"block", "number", "s", "f", "g"}},
		{"SELECT x FROM alerts JOIN blocks USING (k)", []string{"x", "k"}},
		{"SELECT * FROM alerts", []string{"*"}},
		{"SELECT * EXCLUDE (a) FROM alerts", []string{"*"}},
		{"SELECT COLUMNS('sev.*') FROM alerts", []string{"*"}},
		{"SELECT a FROM alerts a", []string{"*"}},
		{"SELECT alerts FROM alerts", []string{"*"}},
		{"SELECT #1 FROM alerts", []string{"*"}},
		{"SELECT x FROM alerts NATURAL JOIN blocks", []string{"*"}},
		{"SELECT x FROM alerts AS a(x, y)", []string{"*"}},
		{"WITH t AS (SELECT block FROM alerts) SELECT t FROM t", []string{"*"}},
	} {
		st, err := g.check(t.Context(), c.sql)
		if err != nil {
			t.Errorf("gate(%q): %v", c.sql, err)
			continue
		}
		if len(c.reads) == 1 && c.reads[0] == "*" {
			if !st.AllColumns {
				t.Errorf("gate(%q) does not read every column", c.sql)
			}
			continue
		}
		if st.AllColumns {
			t.Errorf("gate(%q) reads every column, want only %q", c.sql, c.reads)
		}
		for _, col := range c.reads {
			if !st.Reads(col) {
				t.Errorf("gate(%q) does not read %s", c.sql, col)
			}
		}
		if st.Reads("unnamed") {
			t.Errorf("gate(%q) reads a column it never names", c.sql)
		}
	}
}
