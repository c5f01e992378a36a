//go:build cgo

package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

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

func TestGateLetsReadsOfDatasetsThrough(t *testing.T) {
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	for _, c := range []struct {
		sql  string
		rels []string
	}{
		{"SELECT 1", nil},
		{"SELECT * FROM alerts", []string{"alerts"}},
		{"select * from Alerts where severity = 'high';", []string{"alerts"}},
		{"FROM alerts", []string{"alerts"}},
		{"SELECT severity, count(*) FROM alerts GROUP BY ALL ORDER BY 2 DESC LIMIT 5", []string{"alerts"}},
		{"SELECT a.x, b.y FROM alerts a JOIN blocks b ON a.block = b.number", []string{"alerts", "blocks"}},
		{"WITH high AS (SELECT * FROM alerts WHERE severity = 'high') SELECT count(*) FROM high", []string{"alerts"}},
		{"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT * FROM n", nil},
		{"SELECT * FROM alerts WHERE block IN (SELECT number FROM blocks)", []string{"alerts", "blocks"}},
		{"SELECT * FROM range(10)", nil},
		{"SELECT * FROM generate_series(1, 3), alerts", []string{"alerts"}},
		{"SELECT 'https://example.com/x.csv' AS url, '/etc/passwd' AS path", nil},
		{"SELECT row_number() OVER (PARTITION BY severity ORDER BY block) FROM alerts", []string{"alerts"}},
		{`SELECT * FROM "6f1c1e9a-3b0e-4a8e-9b1a-2f4c5d6e7f80"`, []string{"6f1c1e9a-3b0e-4a8e-9b1a-2f4c5d6e7f80"}},
		{"SELECT * FROM alerts UNION SELECT * FROM alerts_archive", []string{"alerts", "alerts_archive"}},
		{"SELECT list_filter([1, 2, 3], x -> x > 1), filter([1], x -> true)", nil},
		{"WITH alerts AS (SELECT 1) SELECT * FROM alerts", nil}, // the CTE, never the dataset
		{"SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(n, s)", nil},
		{"SELECT json_extract(payload, '$.a') FROM alerts", []string{"alerts"}},
	} {
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

// A name a statement defines as a CTE in one place and reads as a table in another may be either:
// the gate leaves it optional, for the caller to attach where it names a readable dataset.
func TestGateLeavesNamesOfCTEsOptional(t *testing.T) {
	g, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	st, err := g.check(t.Context(), "SELECT * FROM alerts, (WITH alerts AS (SELECT 1 AS x) SELECT * FROM alerts) q JOIN blocks ON true")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Relations, []string{"blocks"}) || !slices.Equal(st.Optional, []string{"alerts"}) {
		t.Errorf("relations %q optional %q, want [blocks] and [alerts]", st.Relations, st.Optional)
	}
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
