package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/query/engine"
)

// newQueryServer is a server with a query engine; the test is skipped in a build without cgo,
// which has none.
func newQueryServer(t *testing.T) *server {
	t.Helper()
	if !engine.Available {
		t.Skip("the query engine needs cgo")
	}
	eng, err := engine.New(engine.Config{SpillDir: t.TempDir(), Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return newServerWith(t, auth.Limits{}, dataplane.Config{Query: eng})
}

// A server without an engine (built without cgo) answers every query 501 query_unavailable,
// which the client returns as an *APIError with that code and the server's reason; not retried.
func TestQuery_WithoutAnEngineIsQueryUnavailable(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	_, err := s.c.Query(context.Background(), "SELECT 1")
	e := apiError(t, err, http.StatusNotImplemented)
	if e.Code != client.CodeQueryUnavailable || !strings.Contains(e.Message, "built without cgo") {
		t.Errorf("code %q, message %q", e.Code, e.Message)
	}
	if !strings.Contains(err.Error(), "501 Not Implemented (query_unavailable): ") {
		t.Errorf("error text %q", err)
	}
	page, err := s.c.QueryAudit(context.Background(), client.QueryAuditOptions{})
	if err != nil || len(page.Queries) != 0 || page.NextBefore != nil {
		t.Errorf("audit: %+v, %v", page, err)
	}
}

// The answer is typed: columns with the engine's types, rows in their order with numbers kept
// exact, and a limit that truncates.
func TestQuery_AnswersTypedColumnsAndRowsUpToTheLimit(t *testing.T) {
	t.Parallel()
	s := newQueryServer(t)
	res, err := s.c.Query(context.Background(),
		"SELECT range AS n, 'x' || range AS s, 9007199254740993 + range AS big, range % 2 = 0 AS even, NULL AS nothing FROM range(5) ORDER BY n",
		client.WithRowLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	cols := []client.QueryColumn{{Name: "n", Type: "BIGINT"}, {Name: "s", Type: "VARCHAR"}, {Name: "big", Type: "BIGINT"},
		{Name: "even", Type: "BOOLEAN"}, {Name: "nothing", Type: "INTEGER"}}
	if len(res.Columns) != len(cols) {
		t.Fatalf("columns %+v", res.Columns)
	}
	for i, c := range cols {
		// NULL's type is the engine's choice; the name is ours.
		if res.Columns[i].Name != c.Name || (c.Name != "nothing" && res.Columns[i].Type != c.Type) {
			t.Errorf("column %d: %+v, want %+v", i, res.Columns[i], c)
		}
	}
	if !res.Truncated || res.RowCount != 2 || len(res.Rows) != 2 || res.Duration() < 0 {
		t.Fatalf("truncated %v, row_count %d, %d rows, duration %v", res.Truncated, res.RowCount, len(res.Rows), res.Duration())
	}
	want := []any{json.Number("1"), "x1", json.Number("9007199254740994"), false, nil}
	for i, v := range res.Rows[1] {
		if v != want[i] {
			t.Errorf("row 1 column %d: %#v, want %#v", i, v, want[i])
		}
	}

	res, err = s.c.Query(context.Background(), "SELECT 1 AS one")
	if err != nil || res.Truncated || res.RowCount != 1 || res.Rows[0][0] != json.Number("1") {
		t.Errorf("SELECT 1: %+v, %v", res, err)
	}
}

// Each refusal is an *APIError with the status and code of its kind and the server's message.
func TestQuery_RefusalsCarryTheirCode(t *testing.T) {
	t.Parallel()
	s := newQueryServer(t)
	for _, tc := range []struct {
		sql    string
		opts   []client.QueryOption
		status int
		code   string
		msg    string
	}{
		{"DELETE FROM alerts", nil, http.StatusBadRequest, client.CodeSQLRejected, "sql rejected: "},
		{"SELECT * FROM read_csv('/etc/passwd')", nil, http.StatusBadRequest, client.CodeSQLRejected, "read_csv"},
		{"SELECT * FROM nope", nil, http.StatusBadRequest, client.CodeUnknownDataset, `relation "nope" is not a published dataset of this tenant`},
		{"SELECT no_such_column", nil, http.StatusBadRequest, client.CodeQueryFailed, "query failed: "},
		{"SELECT 1", []client.QueryOption{client.WithRowLimit(10001)}, http.StatusBadRequest, client.CodeInvalidRequest, "body.limit must be an integer from 1 to 10000"},
		{"", nil, http.StatusBadRequest, client.CodeInvalidRequest, "body.sql is required"},
		// The relation "dataset" is the body's dataset_id.
		{"SELECT * FROM dataset", []client.QueryOption{client.WithDatasetID("no_such_dataset")}, http.StatusBadRequest,
			client.CodeUnknownDataset, `relation "no_such_dataset" is not a published dataset`},
	} {
		_, err := s.c.Query(context.Background(), tc.sql, tc.opts...)
		e := apiError(t, err, tc.status)
		if e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%q: code %q, message %q; want %q, %q", tc.sql, e.Code, e.Message, tc.code, tc.msg)
		}
	}
}

// Every query that reached the engine leaves an audit record, newest first, paged by Before:
// its status and hash, never its text.
func TestQueryAudit_ListsEveryQueryNewestFirst(t *testing.T) {
	t.Parallel()
	s := newQueryServer(t)
	ctx := context.Background()
	if _, err := s.c.Query(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Query(ctx, "SELECT * FROM nope"); err == nil {
		t.Fatal("unknown dataset: no error")
	}
	if _, err := s.c.Query(ctx, "DROP TABLE x"); err == nil {
		t.Fatal("DROP: no error")
	}
	page, err := s.c.QueryAudit(ctx, client.QueryAuditOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Queries) != 2 || page.NextBefore == nil || *page.NextBefore != page.Queries[1].ID {
		t.Fatalf("first page: %+v", page)
	}
	if q := page.Queries[0]; q.Status != "rejected" || !strings.HasPrefix(q.Caller, "key:") || len(q.SQLSHA256) != 64 || q.At.IsZero() {
		t.Errorf("newest: %+v", q)
	}
	if q := page.Queries[1]; q.Status != "not_found" {
		t.Errorf("second: %+v", q)
	}
	page, err = s.c.QueryAudit(ctx, client.QueryAuditOptions{Before: *page.NextBefore, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Queries) != 1 || page.NextBefore != nil {
		t.Fatalf("last page: %+v", page)
	}
	if q := page.Queries[0]; q.Status != "ok" || q.RowCount != 1 || q.Datasets == nil || len(q.Datasets) != 0 {
		t.Errorf("oldest: %+v", q)
	}
	_, err = s.c.QueryAudit(ctx, client.QueryAuditOptions{Limit: 1001})
	if e := apiError(t, err, http.StatusBadRequest); !strings.Contains(e.Message, "limit must be an integer from 1 to 1000") {
		t.Errorf("limit 1001: %q", e.Message)
	}
}
