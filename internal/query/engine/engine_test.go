//go:build cgo

package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/query"
)

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.SpillDir == "" {
		cfg.SpillDir = t.TempDir()
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// writeParquet writes the rows of a query as a Parquet file, with a DuckDB of its own.
func writeParquet(t testing.TB, path, selectSQL string) {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf("COPY (%s) TO %s (FORMAT parquet)", selectSQL, literal(path))); err != nil {
		t.Fatal(err)
	}
}

// alerts is a buffered relation of n rows: severity cycles high, low, medium.
func alerts(n int) query.Relation {
	sev := []string{"high", "low", "medium"}
	return query.Relation{Name: "alerts", Dataset: "u-alerts",
		Columns: []query.Column{{Name: "severity", Type: "string"}, {Name: "block", Type: "integer"}, {Name: "score", Type: "number"},
			{Name: "ok", Type: "boolean"}, {Name: "seen", Type: "timestamp"}, {Name: "payload", Type: "json"}, {Name: "_cursor", Type: "integer"}},
		Rows: func(ctx context.Context, columns []string, yield func([]any) error) error {
			row := make([]any, len(columns))
			for i := range n {
				all := map[string]any{"severity": sev[i%3], "block": int64(i), "score": float64(i) / 2, "ok": i%2 == 0,
					"seen": time.Date(2024, 6, 1, 0, 0, i, 0, time.UTC), "payload": fmt.Sprintf(`{"i":%d}`, i), "_cursor": int64(1 + i/10)}
				for j, c := range columns {
					row[j] = all[c]
				}
				if err := yield(row); err != nil {
					return err
				}
			}
			return nil
		}}
}

func run(t *testing.T, e *Engine, sql string, lim query.Limits, rels ...query.Relation) (*query.Result, error) {
	t.Helper()
	st, err := e.Check(t.Context(), sql)
	if err != nil {
		return nil, err
	}
	return e.Run(t.Context(), st, rels, lim)
}

func TestRunJoinsABufferedRelationWithParquetFiles(t *testing.T) {
	e := newEngine(t, Config{})
	dir := t.TempDir()
	local := filepath.Join(dir, "part-0.parquet")
	writeParquet(t, local, "SELECT range AS number, 'h' || range AS hash FROM range(0, 50)")
	remote := filepath.Join(dir, "part-1.parquet")
	writeParquet(t, remote, "SELECT range AS number, 'h' || range AS hash FROM range(50, 100)")
	blocks := query.Relation{Name: "blocks", Dataset: "u-blocks", Version: "v1", Files: []query.File{
		{Key: "datasets/u-blocks/a/part-0.parquet", Path: local},
		{Key: "datasets/u-blocks/a/part-1.parquet", Open: func(context.Context) (io.ReadCloser, error) { return os.Open(remote) }},
	}}
	res, err := run(t, e, `SELECT a.severity, count(*) AS n, max(b.hash) AS top
		FROM alerts a JOIN blocks b ON a.block = b.number GROUP BY a.severity ORDER BY a.severity`, query.Limits{}, alerts(90), blocks)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(res.Rows)
	if want := "[[high 30 h9] [low 30 h88] [medium 30 h89]]"; got != want || res.Truncated || res.RowCount != 3 {
		t.Errorf("rows %s truncated %v count %d, want %s", got, res.Truncated, res.RowCount, want)
	}
	if len(res.Columns) != 3 || res.Columns[1] != (query.ResultColumn{Name: "n", Type: "BIGINT"}) {
		t.Errorf("columns %+v", res.Columns)
	}
	// Nothing of the query is left in the spill directory: no file (the directories of the
	// workers that wait for the caller's next query stay), and nothing once the engine closed.
	filepath.WalkDir(e.cfg.SpillDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("the spill directory still holds %s", path)
		}
		return nil
	})
	e.Close()
	if _, err := os.Stat(e.cfg.SpillDir); err == nil {
		if left, _ := os.ReadDir(e.cfg.SpillDir); len(left) != 0 {
			t.Errorf("the spill directory of a closed engine still holds %d entries", len(left))
		}
	}
}

func TestRunEncodesEachTypeAsJSON(t *testing.T) {
	e := newEngine(t, Config{})
	res, err := run(t, e, `SELECT severity, block, score, ok, seen, payload, _cursor,
		18446744073709551615::UBIGINT AS big, 1.50::DECIMAL(5,2) AS dec, -0.05::DECIMAL(4,3) AS neg, DATE '2024-06-01' AS d,
		TIMESTAMP '2024-06-01 10:00:00.5' AS naive, TIMETZ '10:00:00+02:00' AS tz,
		'inf'::DOUBLE AS inf, [1, 2] AS l, {'k': 'v'} AS s, INTERVAL 3 DAY AS iv, NULL AS n
		FROM alerts WHERE block = 4`, query.Limits{}, alerts(10))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 {
		t.Fatalf("rows %v", res.Rows)
	}
	want := []string{"low", "4", "2", "true", "2024-06-01T00:00:04Z", "map[i:4]", "1",
		"18446744073709551615", "1.50", "-0.050", "2024-06-01", "2024-06-01T10:00:00.5", "10:00:00+02:00", "<nil>", "[1 2]", "map[k:v]", "map[days:3 micros:0 months:0]", "<nil>"}
	for i, v := range res.Rows[0] {
		if got := fmt.Sprint(v); got != want[i] {
			t.Errorf("column %s (%s) = %s (%T), want %s", res.Columns[i].Name, res.Columns[i].Type, got, v, want[i])
		}
	}
}

func TestRunTruncatesAtTheRowAndByteLimits(t *testing.T) {
	e := newEngine(t, Config{})
	res, err := run(t, e, "SELECT * FROM range(100)", query.Limits{Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.RowCount != 10 || !res.Truncated {
		t.Errorf("10 of 100 rows: count %d truncated %v", res.RowCount, res.Truncated)
	}
	res, err = run(t, e, "SELECT * FROM range(10)", query.Limits{Rows: 10})
	if err != nil || res.RowCount != 10 || res.Truncated {
		t.Errorf("exactly 10 rows: %+v, %v", res, err)
	}
	res, err = run(t, e, "SELECT repeat('x', 1000) FROM range(100)", query.Limits{Rows: 1000, Bytes: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	if res.RowCount < 5 || res.RowCount > 10 || !res.Truncated {
		t.Errorf("10 kB of 1 kB rows: count %d truncated %v", res.RowCount, res.Truncated)
	}
}

func TestRunStopsAtItsTimeout(t *testing.T) {
	e := newEngine(t, Config{})
	start := time.Now()
	_, err := run(t, e, "SELECT count(*) FROM range(1000000000000) a", query.Limits{Timeout: 200 * time.Millisecond})
	if !errors.Is(err, query.ErrTimeout) {
		t.Fatalf("a query past its timeout: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the query was stopped only after %v", d)
	}
}

func TestRunRefusesInputsPastTheirLimits(t *testing.T) {
	e := newEngine(t, Config{})
	var tooLarge *query.TooLargeError
	if _, err := run(t, e, "SELECT count(*) FROM alerts", query.Limits{RelationRows: 5}, alerts(6)); !errors.As(err, &tooLarge) {
		t.Errorf("6 rows past a limit of 5: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "big.parquet")
	writeParquet(t, p, "SELECT range AS n FROM range(10000)")
	big := query.Relation{Name: "big", Files: []query.File{{Key: "big.parquet", Open: func(context.Context) (io.ReadCloser, error) { return os.Open(p) }}}}
	if _, err := run(t, e, "SELECT count(*) FROM big", query.Limits{SpillBytes: 100}, big); !errors.As(err, &tooLarge) {
		t.Errorf("a file past the fetch limit: %v", err)
	}
	var failed *query.FailedError
	if _, err := run(t, e, "SELECT nope FROM alerts", query.Limits{}, alerts(1)); !errors.As(err, &failed) || !strings.Contains(failed.Message, "nope") {
		t.Errorf("an unknown column: %v, want a FailedError naming it", err)
	}
}

func TestRunWaitsForASlotThenIsBusy(t *testing.T) {
	e := newEngine(t, Config{MaxConcurrent: 1, SlotWait: 50 * time.Millisecond})
	release, err := e.slots.acquire(t.Context(), "other", time.Second) // the only slot is taken
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, e, "SELECT 1", query.Limits{}); !errors.Is(err, query.ErrBusy) {
		t.Errorf("with every slot taken: %v, want ErrBusy", err)
	}
	release()
	if _, err := run(t, e, "SELECT 1", query.Limits{}); err != nil {
		t.Errorf("with a free slot: %v", err)
	}
}

// The runtime holds without the gate: the statements the gate refuses, run straight on a
// query's locked database, still read no file, reach no network, and change no setting.
func TestHardeningHoldsWithoutTheGate(t *testing.T) {
	e := newEngine(t, Config{})
	secret := filepath.Join(t.TempDir(), "secret.csv")
	if err := os.WriteFile(secret, []byte("name,value\nkey,TOPSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BATON_TEST_SECRET_ENV", "TOPSECRET")
	outside := filepath.Join(t.TempDir(), "written.csv")
	for _, sql := range []string{
		"SELECT * FROM read_csv(" + literal(secret) + ")",
		"SELECT * FROM " + literal(secret),
		"SELECT * FROM (SELECT * FROM " + literal(secret) + ")",
		"WITH t AS (SELECT * FROM read_csv_auto(" + literal(secret) + ")) SELECT * FROM t",
		"SELECT * FROM read_text(" + literal(secret) + ")",
		"SELECT * FROM read_blob(" + literal(secret) + ")",
		"SELECT * FROM read_text('/etc/passwd')",
		"SELECT * FROM glob('/etc/*')",
		"SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')",
		"SELECT * FROM read_csv('https://example.com/x.csv')",
		"SELECT getenv('BATON_TEST_SECRET_ENV')",
		"COPY (SELECT 'TOPSECRET') TO " + literal(outside),
		"ATTACH " + literal(filepath.Join(filepath.Dir(outside), "x.db")) + " AS x",
		"INSTALL httpfs",
		"LOAD httpfs",
		"SET enable_external_access = true",
		"SET allowed_directories = ['/']",
		"SET lock_configuration = false",
		"RESET enable_external_access",
		"PRAGMA enable_external_access",
	} {
		// Straight to the locked database: no gate.
		res, err := e.Run(t.Context(), &query.Statement{SQL: sql}, []query.Relation{alerts(3)}, query.Limits{})
		if err == nil {
			if strings.Contains(fmt.Sprint(res.Rows), "TOPSECRET") || strings.Contains(fmt.Sprint(res.Rows), "root:") {
				t.Errorf("%s read a secret: %v", sql, res.Rows)
			} else {
				t.Errorf("%s ran (%v) on a locked database", sql, res.Rows)
			}
		}
	}
	if _, err := os.Stat(outside); err == nil {
		t.Error("a query wrote a file outside its spill directory")
	}
}

// A relation attached with only the columns a statement names answers as the whole one would.
func TestRunAttachesOnlyTheColumnsAStatementNames(t *testing.T) {
	e := newEngine(t, Config{})
	var asked [][]string
	rel := alerts(30)
	rows := rel.Rows
	rel.Rows = func(ctx context.Context, columns []string, yield func([]any) error) error {
		asked = append(asked, columns)
		return rows(ctx, columns, yield)
	}
	for _, c := range []struct{ sql, want, columns string }{
		{"SELECT severity, count(*) AS n FROM alerts GROUP BY ALL ORDER BY 1", "[[high 10] [low 10] [medium 10]]", "[severity]"},
		{"SELECT count(*) FROM alerts", "[[30]]", "[_cursor]"},
		{"SELECT a.block FROM alerts a WHERE a.block = 7", "[[7]]", "[block]"},
		{"SELECT count(*) FROM alerts a(x, y) WHERE x = 'high'", "[[10]]", "[severity block score ok seen payload _cursor]"},
		{"SELECT max(block) FROM alerts NATURAL JOIN alerts b", "[[29]]", "[severity block score ok seen payload _cursor]"},
	} {
		asked = nil
		res, err := run(t, e, c.sql, query.Limits{}, rel)
		if err != nil {
			t.Errorf("%s: %v", c.sql, err)
			continue
		}
		if got := fmt.Sprint(res.Rows); got != c.want {
			t.Errorf("%s = %s, want %s", c.sql, got, c.want)
		}
		if got := fmt.Sprint(asked[0]); got != c.columns {
			t.Errorf("%s read columns %s, want %s", c.sql, got, c.columns)
		}
	}
}
