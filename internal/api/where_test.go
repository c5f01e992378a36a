package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dataset/datasettest"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// rowsServer is the producer listener of a server whose store and data database are of one driver,
// with tenant acme's buffered dataset alert_events (pipelinetest.AlertsDoc) holding three rows.
type rowsServer struct {
	handler http.Handler
	key     string
	log     *lockedBuffer // the server's error log
}

func newRowsServer(tb testing.TB, driver string) *rowsServer {
	tb.Helper()
	ctx := context.Background()
	var st store.Store
	if driver == "sqlite" {
		st = storetest.OpenSQLite(tb)
	} else {
		st = storetest.OpenPostgres(tb)
	}
	data, err := dataset.Open(ctx, datasettest.URL(tb, driver))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { data.Close() })
	s := &rowsServer{log: &lockedBuffer{}}
	logger := slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelError}))
	d, err := dispatch.New(st, dispatch.Config{Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	dp := dataplane.New(d, dataplane.Config{Tables: dataplane.DatasetDB{DB: data}})
	s.handler = api.New(api.Config{Dispatcher: d, DataPlane: dp, Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Logger: logger}).ProducerHandler()
	if _, s.key, err = auth.CreateKey(ctx, st, "rows", "acme", "", time.Now()); err != nil {
		tb.Fatal(err)
	}
	if _, err := dp.Deploy(ctx, "acme", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		tb.Fatal(err)
	}
	ds, err := st.DatasetGetByName(ctx, "acme", "alert_events")
	if err != nil {
		tb.Fatal(err)
	}
	doc, problems := pipeline.Parse([]byte(pipelinetest.AlertsDoc), "application/yaml")
	if problems != nil {
		tb.Fatal(problems)
	}
	schema := doc.Publish["alert_events"].Schema
	rows, err := dataset.ParseBatch(strings.NewReader(`{"dedupe_key":"a1","severity":"high","block":1}
{"dedupe_key":"a2","severity":"low","block":2}
{"dedupe_key":"a3","severity":"medium","block":3}
`), schema, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := data.Load(ctx, dataset.Batch{ID: "setup", Tenant: "acme", DatasetUUID: ds.UUID, Schema: schema, Rows: rows,
		FacetFields: []string{"severity"}}); err != nil {
		tb.Fatal(err)
	}
	return s
}

// rows reads GET /datasets/alert_events/rows with the raw where (query-escaped here).
func (s *rowsServer) rows(tb testing.TB, where string) response {
	tb.Helper()
	req := httptest.NewRequest("GET", "/datasets/alert_events/rows?where="+url.QueryEscape(where), nil)
	req.Header.Set("x-api-key", s.key)
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, req)
	res := response{Status: rec.Code, Header: rec.Header(), Raw: rec.Body.Bytes()}
	if err := json.Unmarshal(res.Raw, &res.Body); err != nil {
		tb.Fatalf("where %.80q: answer %d is not a JSON object: %s", where, rec.Code, res.Raw)
	}
	return res
}

// numbers is a where list of n integers, 0 to n-1.
func numbers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i)
	}
	return "[" + b.String() + "]"
}

// Rule: a rows where is exactly one JSON object, with no key twice, no NUL in a string, and at
// most 1,000 values in all; anything else is a 400 saying which, on either store (SQLite refused a
// list longer than its 32,766 statement parameters, PostgreSQL a NUL, both with a 500).
func TestRowsWhereIsOneObjectWithinLimits(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			s := newRowsServer(t, driver)
			for where, want := range map[string]string{
				`{"severity":"high"} x`:                             "where must be exactly one JSON object, with nothing after it",
				`{"severity":"high"}{"severity":"low"}`:             "where must be exactly one JSON object, with nothing after it",
				`{"severity":"high"} []`:                            "where must be exactly one JSON object, with nothing after it",
				`{"severity":"low","severity":"high"}`:              `where: duplicate key "severity"`,
				`{"severity":["high"],"severity":"low"}`:            `where: duplicate key "severity"`,
				`{"severity":"\u0000"}`:                             `where must not contain \u0000 (a NUL character) in a string`,
				`{"severity":["low","a\u0000b"]}`:                   `where must not contain \u0000 (a NUL character) in a string`,
				`{"sev\u0000erity":"high"}`:                         `where must not contain \u0000 (a NUL character) in a string`,
				`{"block":` + numbers(32766) + `}`:                  "where holds more than 1000 values; at most 1000 in all (a list counts each of its values)",
				`{"block":` + numbers(1000) + `,"severity":"high"}`: "where holds more than 1000 values; at most 1000 in all (a list counts each of its values)",
				`[]`:                   `where must be a JSON object such as {"severity":"high"}`,
				`null`:                 `where must be a JSON object such as {"severity":"high"}`,
				`{"severity":"high"`:   `where must be a JSON object such as {"severity":"high"}`,
				`{"severity":"high",}`: `where must be a JSON object such as {"severity":"high"}`,
			} {
				res := s.rows(t, where)
				if res.Status != http.StatusBadRequest || res.Body["error"] != want {
					t.Errorf("where %.80q: %d %.300s, want 400 %q", where, res.Status, res.Raw, want)
				}
			}
			// At the limit it works, and so does a plain clause.
			for where, want := range map[string]string{
				`{"block":` + numbers(999) + `,"severity":"high"}`: "a1",
				`{"severity":["low","medium"],"block":3}`:          "a3",
			} {
				res := s.rows(t, where)
				got, _ := res.Body["rows"].([]any)
				if res.Status != http.StatusOK || len(got) != 1 || got[0].(map[string]any)["dedupe_key"] != want {
					t.Errorf("where %.80q: %d %.300s, want the row %s", where, res.Status, res.Raw, want)
				}
			}
			if log := s.log.String(); log != "" {
				t.Errorf("the server logged errors:\n%s", log)
			}
		})
	}
}

// Rule: a completion lists at most 1,000 datasets_published entries; more is a 400 that records
// nothing, and the attempt can still complete (33,000 entries answered 500 and left the task
// running).
func TestCompletionWithTooManyPublishedVersionsIsRefused(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		ds := w.buffered()
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		id := ids["t"]
		c := claimInternal(t, w, id)
		complete := func(n int) response {
			published := make([]map[string]any, n)
			for i := range published {
				published[i] = map[string]any{"dataset_uuid": ds, "dataset_version": fmt.Sprintf("v%d", i)}
			}
			return w.post(w.internal.URL, "/internal/task-complete", map[string]any{"task_id": id, "attempt": c["attempt"],
				"lease_token": c["lease_token"], "status": "Completed", "datasets_published": published})
		}
		for _, n := range []int{1001, 33000} {
			wantFencedError(t, complete(n), http.StatusBadRequest, "invalid_request",
				fmt.Sprintf("datasets_published holds %d entries; at most 1000 per completion", n))
		}
		if tk := w.task(id); tk.Status != lifecycle.Running {
			t.Fatalf("after refused completions the task is %s", tk.Status)
		}
		if vs, _ := w.st.DatasetVersionList(context.Background(), ds); len(vs) != 1 {
			t.Fatalf("refused completions registered %d versions", len(vs)-1)
		}
		if r := wantOK(t, complete(1000)); r["status"] != "Completed" {
			t.Fatalf("complete: %v", r)
		}
		if vs, _ := w.st.DatasetVersionList(context.Background(), ds); len(vs) != 1001 {
			t.Fatalf("registered %d versions, want 1000", len(vs)-1)
		}
	})
}
