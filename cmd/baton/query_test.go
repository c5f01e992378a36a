package main

import (
	"encoding/csv"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/query/engine"
)

// newQueryTestServer is newJobTestServer with a query engine, and the demo pipeline's buffered
// dataset alert_events loaded with two rows; the test is skipped in a build without cgo.
func newQueryTestServer(t *testing.T) *jobTestServer {
	t.Helper()
	if !engine.Available {
		t.Skip("the query engine needs cgo")
	}
	eng, err := engine.New(engine.Config{SpillDir: t.TempDir(), Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	s := newJobTestServerWith(t, eng)
	s.loadAlerts()
	return s
}

// query runs "baton query --url ... --api-key ... ARGS..." (ARGS[0] "audit": baton query audit).
func (s *jobTestServer) query(args ...string) (int, string, string) {
	s.t.Helper()
	conn := []string{"--url", s.url, "--api-key", s.key}
	if len(args) > 0 && args[0] == "audit" {
		return baton(append(append([]string{"query", "audit"}, conn...), args[1:]...)...)
	}
	return baton(append(append([]string{"query"}, conn...), args...)...)
}

const alertsSQL = "SELECT dedupe_key, block, severity, message, _cursor > 0 AS loaded FROM alert_events ORDER BY block"

// The rows of a buffered dataset, by its name, as a table (NULL shown, a line break quoted so
// the table keeps its lines), as the API's JSON object, and as CSV.
func TestQuery_PrintsRowsAsATableJSONAndCSV(t *testing.T) {
	t.Parallel()
	s := newQueryTestServer(t)

	code, out, errOut := s.query(alertsSQL)
	if code != 0 || !strings.Contains(errOut, "(2 rows, ") {
		t.Fatalf("table: exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !slices.Equal(strings.Fields(lines[0]), []string{"dedupe_key", "block", "severity", "message", "loaded"}) ||
		!slices.Equal(strings.Fields(lines[1]), []string{"k1", "1", "high", `"two\nlines"`, "true"}) ||
		!slices.Equal(strings.Fields(lines[2]), []string{"k2", "2", "low", "NULL", "true"}) {
		t.Errorf("table:\n%s", out)
	}

	code, out, errOut = s.query(alertsSQL, "-o", "json")
	var res client.QueryResult
	if decodeAs(t, ctl.OutputJSON, out, &res); code != 0 || res.RowCount != 2 || res.Truncated || len(res.Columns) != 5 ||
		res.Columns[1] != (client.QueryColumn{Name: "block", Type: "BIGINT"}) || res.Rows[0][3] != "two\nlines" || res.Rows[1][3] != nil {
		t.Errorf("json: exit %d %+v\n%s", code, res, errOut)
	}

	code, out, errOut = s.query(alertsSQL, "-o", "csv")
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != 0 || err != nil || len(recs) != 3 || !slices.Equal(recs[0], []string{"dedupe_key", "block", "severity", "message", "loaded"}) ||
		!slices.Equal(recs[1], []string{"k1", "1", "high", "two\nlines", "true"}) || !slices.Equal(recs[2], []string{"k2", "2", "low", "", "true"}) {
		t.Errorf("csv: exit %d %q %v\n%s", code, recs, err, errOut)
	}

	// --limit truncates, and stderr says so; stdout keeps only the rows.
	code, out, errOut = s.query("--limit", "1", "-o", "csv", alertsSQL)
	if recs, err = csv.NewReader(strings.NewReader(out)).ReadAll(); code != 0 || err != nil || len(recs) != 2 || !strings.Contains(errOut, "truncated") {
		t.Errorf("--limit 1: exit %d %v\n%s%s", code, err, out, errOut)
	}
}

// Not parallel: it swaps the package's stdin.
func TestQuery_DashReadsTheStatementFromStdin(t *testing.T) {
	s := newQueryTestServer(t)
	old := ctl.Stdin
	ctl.Stdin = strings.NewReader("SELECT count(*) AS n\nFROM alert_events\n")
	t.Cleanup(func() { ctl.Stdin = old })
	if code, out, errOut := s.query("-o", "csv", "-"); code != 0 || out != "n\n2\n" {
		t.Errorf("exit %d %q\n%s", code, out, errOut)
	}
}

// A refusal of the server exits 1 with its message and code; a usage mistake exits 2 before any
// request.
func TestQuery_ErrorsExitNonZeroWithTheServersReason(t *testing.T) {
	t.Parallel()
	s := newQueryTestServer(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"SELECT * FROM nope"}, 1, `relation "nope" is not a published dataset of this tenant: a query reads datasets by their names (HTTP 400 unknown_dataset)`},
		{[]string{"DELETE FROM alert_events"}, 1, "sql rejected: only a read-only SELECT (or WITH … SELECT) may run (HTTP 400 sql_rejected)"},
		{[]string{"SELECT nope FROM alert_events"}, 1, "query failed: "},
		{[]string{"SELECT", "1"}, 2, "expected SQL"},
		{nil, 2, "expected SQL"},
		{[]string{"  "}, 2, "the statement is empty"},
		{[]string{"SELECT 1", "--limit", "10001"}, 2, "--limit must be from 1 to 10000"},
		{[]string{"SELECT 1", "-o", "yaml"}, 2, "want table, json or csv"},
		{[]string{"audit", "extra"}, 2, "expected no arguments"},
		{[]string{"audit", "--limit", "5000"}, 1, "limit must be an integer from 1 to 1000 (HTTP 400 invalid_request)"},
	} {
		code, _, errOut := s.query(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, want %d and %q; stderr:\n%s", tc.args, code, tc.code, tc.want, errOut)
		}
	}
}

// A server without the engine answers 501: the command says the server was built without cgo.
func TestQuery_AServerWithoutCgoIsNamed(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	code, out, errOut := s.query("SELECT 1")
	if code != 1 || out != "" || !strings.Contains(errOut, "(HTTP 501 query_unavailable)") ||
		!strings.Contains(errOut, "The server was built without cgo (CGO_ENABLED=0)") {
		t.Errorf("exit %d %q\n%s", code, out, errOut)
	}
}

// baton query audit lists each query, newest first, with its status, its caller and what it
// read, and pages with --before.
func TestQueryAudit_ListsTheQueriesNewestFirst(t *testing.T) {
	t.Parallel()
	s := newQueryTestServer(t)
	for _, sql := range []string{alertsSQL, "SELECT * FROM nope"} {
		s.query(sql)
	}
	code, out, errOut := s.query("audit")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[1], "not_found") ||
		!strings.Contains(lines[2], " ok ") || !strings.Contains(lines[2], " alert_events@") || !strings.Contains(lines[2], "key:") {
		t.Errorf("audit: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = s.query("audit", "--limit", "1", "-o", "json")
	var page client.QueryAuditPage
	if decodeAs(t, ctl.OutputJSON, out, &page); code != 0 || len(page.Queries) != 1 || page.NextBefore == nil || page.Queries[0].Status != "not_found" {
		t.Fatalf("audit --limit 1: exit %d %+v\n%s", code, page, errOut)
	}
	code, out, _ = s.query("audit", "--before", strconv.FormatInt(*page.NextBefore, 10), "-o", "json")
	page = client.QueryAuditPage{}
	if decodeAs(t, ctl.OutputJSON, out, &page); code != 0 || len(page.Queries) != 1 || page.Queries[0].Status != "ok" ||
		len(page.Queries[0].Datasets) != 1 || page.Queries[0].Datasets[0].Name != "alert_events" || page.Queries[0].RowCount != 2 {
		t.Errorf("audit --before: exit %d %+v", code, page)
	}
}
