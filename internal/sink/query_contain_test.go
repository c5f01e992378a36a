package sink_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/query/engine"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// nestedSQL is depth nested scalar subqueries: a few hundred bytes whose time goes to the
// engine's planner (27 deep: over a minute), where no interrupt reaches.
func nestedSQL(depth int) string {
	return strings.Repeat("SELECT (", depth) + "1" + strings.Repeat(")", depth)
}

// The Query Service over HTTP, as a hostile tenant and a hostile task use it: a statement ends
// by its deadline wherever its time goes, and its answer reaches the client though the
// listener's write timeout is shorter; one tenant cannot hold every slot; a version whose file
// is not Parquet is refused naming it; no name reaches the engine's catalog and no function
// takes SQL text; the audit records what each client got.
func TestQueriesAreContained(t *testing.T) {
	if !engine.Available {
		t.Skip("the query engine needs cgo")
	}
	eng, err := engine.New(engine.Config{SpillDir: t.TempDir(), Threads: 1, MaxConcurrent: 2, TenantSlots: 1,
		SlotWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			const timeout = 1500 * time.Millisecond
			f := newFixtureWith(t, drv, "file", "local", dataplane.Config{Query: eng, QueryTimeout: timeout, TaskQueryTimeout: timeout})
			s := api.New(api.Config{Dispatcher: f.d, DataPlane: f.dp, Auth: auth.NewAuthenticator(f.st, auth.Limits{}, nil),
				Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(f.st, nil), Dispatcher: f.d}), Logger: quiet})
			// The listener's write timeout is shorter than a statement may run.
			public := httptest.NewUnstartedServer(s.ProducerHandler())
			public.Config.WriteTimeout = 500 * time.Millisecond
			public.Start()
			internal := httptest.NewServer(s.InternalHandler())
			t.Cleanup(public.Close)
			t.Cleanup(internal.Close)
			_, key, err := auth.CreateKey(f.ctx, f.st, "q", tenant, "", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			_, otherKey, err := auth.CreateKey(f.ctx, f.st, "q", "other-tenant", "", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			query := func(key, sql string) (int, map[string]any) {
				code, v, _ := httpDo(t, "POST", public.URL+"/v1/query", map[string]any{"sql": sql}, "x-api-key", key)
				return code, v
			}

			// A planner-bound statement, a user's and a task's: 504 on the wire by the deadline.
			start := time.Now()
			if code, ans := query(key, nestedSQL(27)); code != http.StatusGatewayTimeout || ans["error"] != "query_timeout" {
				t.Errorf("a user's planner-bound statement: %d %v, want 504 query_timeout", code, ans)
			}
			if d := time.Since(start); d > timeout+5*time.Second {
				t.Errorf("the user's statement answered %v after it was sent, its timeout %v", d, timeout)
			}
			run, err := f.dp.RunSource(f.ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: "alerts", Job: "scan", Trigger: map[string]any{"key": "q"}})
			if err != nil {
				t.Fatal(err)
			}
			code, claim, _ := httpDo(t, "POST", internal.URL+"/internal/task-claim", map[string]any{"task_id": run.TaskID, "worker_id": "w"})
			if code != http.StatusOK {
				t.Fatalf("claim: %d %v", code, claim)
			}
			code, ans, _ := httpDo(t, "POST", public.URL+"/v1/task/query", map[string]any{"task_id": run.TaskID, "attempt": 1,
				"lease_token": claim["lease_token"], "sql": nestedSQL(27)}, "X-Trace-Task-Capability", claim["capability_token"].(string))
			if code != http.StatusGatewayTimeout || ans["error"] != "query_timeout" {
				t.Errorf("a task's planner-bound statement: %d %v, want 504 query_timeout", code, ans)
			}

			// One tenant saturates its share (one of two slots): its next query waits and is
			// refused, another tenant's is served.
			busy := make(chan int, 1)
			go func() {
				code, _ := query(key, nestedSQL(27))
				busy <- code
			}()
			time.Sleep(300 * time.Millisecond)
			if code, ans := query(key, "SELECT 1"); code != http.StatusServiceUnavailable || ans["error"] != "query_busy" {
				t.Errorf("the saturating tenant's next query: %d %v, want 503 query_busy", code, ans)
			}
			if code, ans := query(otherKey, "SELECT 1 AS one"); code != http.StatusOK || fmt.Sprint(ans["rows"]) != "[[1]]" {
				t.Errorf("another tenant's query while one saturates its share: %d %v", code, ans)
			}
			if code := <-busy; code != http.StatusGatewayTimeout {
				t.Errorf("the saturating statement: %d, want 504", code)
			}

			// A version whose file is not Parquet: 422, naming the dataset and the version.
			if _, err := f.dp.Deploy(f.ctx, tenant, []byte(chainDoc), "application/yaml"); err != nil {
				t.Fatal(err)
			}
			blocks, err := f.st.DatasetGetByName(f.ctx, tenant, "blocks")
			if err != nil {
				t.Fatal(err)
			}
			f.blocksVersion(t, blocks, "v-csv", []byte("number,hash\n1,a\n"))
			code, ans = query(key, "SELECT count(*) FROM blocks")
			if msg := fmt.Sprint(ans["message"]); code != http.StatusUnprocessableEntity || ans["error"] != "dataset_not_readable" ||
				!strings.Contains(msg, `dataset "blocks"`) || !strings.Contains(msg, `"v-csv"`) || strings.Contains(msg, f.blob.Root()[len("file://"):]) {
				t.Errorf("a version that is not Parquet: %d %v, want 422 dataset_not_readable naming blocks and v-csv, no local path", code, ans)
			}

			// The gate: a catalog name outside the scope of a CTE of that name is a relation, which
			// no dataset of the tenant is; a function that takes SQL text is not on the allowlist;
			// PIVOT is refused.
			for _, c := range []struct{ sql, code string }{
				{"SELECT * FROM (WITH pg_settings AS (SELECT 1 AS x) SELECT * FROM pg_settings) q, pg_settings", "unknown_dataset"},
				{"SELECT * FROM (WITH duckdb_tables AS (SELECT 1 AS x) SELECT * FROM duckdb_tables) q, duckdb_tables", "unknown_dataset"},
				{"SELECT json_serialize_plan('SELECT current_setting(''secret_directory'')', optimize := true)", "sql_rejected"},
				{"SELECT * FROM (PIVOT alert_events ON severity IN ('high', 'low') USING count(*))", "sql_rejected"},
			} {
				if code, ans := query(key, c.sql); code != http.StatusBadRequest || ans["error"] != c.code {
					t.Errorf("%s: %d %v, want 400 %s", c.sql, code, ans, c.code)
				}
			}

			// The audit says what each client got.
			_, audit, _ := httpDo(t, "GET", public.URL+"/v1/query/audit?limit=100", nil, "x-api-key", key)
			statuses := map[string]int{}
			for _, q := range audit["queries"].([]any) {
				statuses[q.(map[string]any)["status"].(string)]++
			}
			if statuses["timeout"] != 3 || statuses["busy"] != 1 || statuses["not_readable"] != 1 || statuses["not_found"] != 2 || statuses["rejected"] != 2 {
				t.Errorf("audit statuses %v, want 3 timeout, 1 busy, 1 not_readable, 2 not_found, 2 rejected", statuses)
			}
		})
	}
}
