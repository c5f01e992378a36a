package api_test

import (
	"net/http"
	"testing"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// Every refusal of the Query Service's own routes is {"error": code, "message": text}, the
// body's too, and changes nothing.
func TestQueryRefusalsCarryACode(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st, defaultOptions())
		for _, c := range []struct {
			method, path string
			body         any
			status       int
			message      string
		}{
			{"POST", "/v1/query", "", 400, "request body is empty: send a JSON object"},
			{"POST", "/v1/query", "[1]", 400, "request body must be a JSON object, not array"},
			{"POST", "/v1/query", `{"sql": 1}`, 400, "body.sql must be a string"},
			{"POST", "/v1/query", `{"sql": ""}`, 400, "body.sql is required: one SELECT statement"},
			{"POST", "/v1/query", `{"sql": "SELECT 1", "limit": 0}`, 400, "body.limit must be an integer from 1 to 10000"},
			{"POST", "/v1/query", `{"sql": "SELECT 1", "format": "csv"}`, 400,
				"body.format is not a member of a query: send sql and, optionally, limit and dataset_id"},
			{"GET", "/v1/query/audit?before=x", nil, 400, "before must be a positive integer"},
			{"GET", "/v1/query/audit?limit=1001", nil, 400, "limit must be an integer from 1 to 1000"},
		} {
			res, err := roundTrip(c.method, a.srv.URL+c.path, c.body, "x-api-key", a.key)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != c.status || res.Body["error"] != "invalid_request" || res.Body["message"] != c.message {
				t.Errorf("%s %s %v: %d %s, want %d invalid_request %q", c.method, c.path, c.body, res.Status, res.Raw, c.status, c.message)
			}
		}
		recs, err := st.QueryAuditList(t.Context(), store.QueryAuditListParams{Tenant: "acme", Limit: 10})
		if err != nil || len(recs) != 0 {
			t.Errorf("refused requests left audit records %+v %v", recs, err)
		}
		// A well-formed query on a server without an engine: 501 with its code.
		res, err := roundTrip("POST", a.srv.URL+"/v1/query", `{"sql": "SELECT 1"}`, "x-api-key", a.key)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != http.StatusNotImplemented || res.Body["error"] != "query_unavailable" {
			t.Errorf("a query without an engine: %d %s", res.Status, res.Raw)
		}
	})
}
