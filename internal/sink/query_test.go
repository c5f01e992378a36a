package sink_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // writes the test's Parquet files

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/query/engine"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// chainDoc publishes blocks, a dataset of Parquet files a source job writes, read by enrich.
const chainDoc = `
name: chain
jobs:
  - name: ingest
    activation: source
    runtime: ecs_platform
    operator: ingest
    outputs: 1
    source: {kind: manual}
  - name: enrich
    activation: reactive
    runtime: ecs_platform
    operator: enrich
    outputs: 0
    inputs:
      - from: {job: ingest, output: 0}
publish:
  blocks:
    from: {job: ingest, output: 0}
`

// A user's query joins a Parquet dataset, registered through datasets_published (its files in
// the object storage), with a buffered dataset's rows; a task's query reads its inputs at the
// versions its token pins, however often the dataset's current version is cut over meanwhile,
// and only them; every query leaves an audit record without its SQL.
func TestQueriesJoinParquetWithBufferedRowsAtPinnedVersions(t *testing.T) {
	if !engine.Available {
		t.Skip("the query engine needs cgo")
	}
	eng, err := engine.New(engine.Config{SpillDir: t.TempDir(), Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			for _, storage := range []string{"file", "s3"} {
				t.Run(storage, func(t *testing.T) {
					testQueries(t, newFixtureWith(t, drv, storage, "local", dataplane.Config{Query: eng}))
				})
			}
		})
	}
}

func testQueries(t *testing.T, f *fixture) {
	s := api.New(api.Config{Dispatcher: f.d, DataPlane: f.dp, Auth: auth.NewAuthenticator(f.st, auth.Limits{}, nil),
		Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(f.st, nil), Dispatcher: f.d}), Logger: quiet})
	public, internal := httptest.NewServer(s.ProducerHandler()), httptest.NewServer(s.InternalHandler())
	t.Cleanup(public.Close)
	t.Cleanup(internal.Close)
	_, key, err := auth.CreateKey(f.ctx, f.st, "q", tenant, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	post := func(url string, body any, headers ...string) (int, map[string]any) {
		t.Helper()
		code, v, _ := httpDo(t, "POST", url, body, headers...)
		return code, v
	}
	userQuery := func(sql string) (int, map[string]any) {
		return post(public.URL+"/v1/query", map[string]any{"sql": sql}, "x-api-key", key)
	}

	// The buffered dataset: five alerts on blocks 1 to 5.
	f.publish(f.writer("a"), "a.jsonl", `{"dedupe_key":"k1","severity":"high","block":1}`, `{"dedupe_key":"k2","severity":"low","block":2}`,
		`{"dedupe_key":"k3","severity":"high","block":3}`, `{"dedupe_key":"k4","severity":"medium","block":4}`, `{"dedupe_key":"k5","severity":"high","block":5}`)
	f.process()

	// The Parquet dataset: each version of blocks is a file of block numbers from ingest.
	if _, err := f.dp.Deploy(f.ctx, tenant, []byte(chainDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	blocks, err := f.st.DatasetGetByName(f.ctx, tenant, "blocks")
	if err != nil {
		t.Fatal(err)
	}
	version := func(v string, lo, hi int) {
		t.Helper()
		f.blocksVersion(t, blocks, v, parquetOf(t, fmt.Sprintf("SELECT range AS number, '%s-' || range AS hash FROM range(%d, %d)", v, lo, hi+1)))
	}
	version("v2", 0, 99)
	if got := f.route(); got["enrich"] != 1 {
		t.Fatalf("routed %v, want one enrich task", got)
	}
	tasks, err := f.st.JobList(f.ctx, store.ListJobsParams{Tenant: tenant, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var enrichTask string
	for _, j := range tasks {
		if j.PipelineJob == "enrich" {
			ts, err := f.st.TaskListByJob(f.ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			enrichTask = ts[0].ID
		}
	}
	code, claim := post(internal.URL+"/internal/task-claim", map[string]any{"task_id": enrichTask, "worker_id": "w"})
	if code != http.StatusOK || claim["status"] != "Claimed" {
		t.Fatalf("claim enrich: %d %v", code, claim)
	}
	token := claim["capability_token"].(string)
	taskQuery := func(base, path, sql string) (int, map[string]any) {
		return post(base+path, map[string]any{"task_id": enrichTask, "attempt": 1, "lease_token": claim["lease_token"], "sql": sql},
			"X-Trace-Task-Capability", token)
	}

	// Cut over to v3: the user's query reads v3, the task's still v2, on both listeners.
	version("v3", 100, 149)
	if code, ans := userQuery(`SELECT a.dedupe_key, b.hash FROM alert_events a JOIN blocks b ON b.number = a.block + 100
		WHERE a.severity = 'high' ORDER BY 1`); code != http.StatusOK || fmt.Sprint(ans["rows"]) != "[[k1 v3-101] [k3 v3-103] [k5 v3-105]]" {
		t.Errorf("the user's join: %d %v", code, ans)
	}
	const count = "SELECT count(*) AS n, min(number) AS lo, min(hash) AS h FROM blocks"
	for _, l := range []struct{ base, path string }{{public.URL, "/v1/task/query"}, {internal.URL, "/internal/task-query"}} {
		if code, ans := taskQuery(l.base, l.path, count); code != http.StatusOK || fmt.Sprint(ans["rows"]) != "[[100 0 v2-0]]" {
			t.Errorf("the task's query (%s) after the cutover: %d %v, want v2's 100 rows", l.path, code, ans)
		}
	}

	// A client of the single-relation contract names its dataset in the body (dataset_id) and
	// reads it as "dataset"; the task dialect ignores members it does not know. A CTE named like
	// a dataset is the CTE where it is in scope and the dataset elsewhere.
	if code, ans := post(public.URL+"/v1/query", map[string]any{"sql": "SELECT count(*) FROM dataset", "dataset_id": "blocks"},
		"x-api-key", key); code != http.StatusOK || fmt.Sprint(ans["rows"]) != "[[50]]" {
		t.Errorf("a user query of dataset_id blocks: %d %v", code, ans)
	}
	if code, ans := post(public.URL+"/v1/task/query", map[string]any{"task_id": enrichTask, "attempt": 1, "lease_token": claim["lease_token"],
		"sql": "SELECT count(*) FROM dataset", "dataset_id": blocks.UUID, "format": "json"},
		"X-Trace-Task-Capability", token); code != http.StatusOK || fmt.Sprint(ans["rows"]) != "[[100]]" {
		t.Errorf("a task query of dataset_id blocks: %d %v", code, ans)
	}
	if code, ans := userQuery("SELECT count(*), max(q.x) FROM blocks, (WITH blocks AS (SELECT 7 AS x) SELECT x FROM blocks) q"); code != http.StatusOK ||
		fmt.Sprint(ans["rows"]) != "[[50 7]]" {
		t.Errorf("a CTE named like a dataset: %d %v", code, ans)
	}

	// Cutovers while queries run: every answer is one whole version, the task's always v2.
	version("v4", 200, 209)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answers []string
	for i := range 6 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, ans := userQuery(count)
			mu.Lock()
			answers = append(answers, "user "+fmt.Sprint(ans["rows"]))
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			_, ans := taskQuery(public.URL, "/v1/task/query", count)
			mu.Lock()
			answers = append(answers, "task "+fmt.Sprint(ans["rows"]))
			mu.Unlock()
		}()
		if _, err := f.dp.SetCurrentVersion(f.ctx, tenant, "blocks", []string{"v3", "v4"}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for _, a := range answers {
		switch a {
		case "user [[50 100 v3-100]]", "user [[10 200 v4-200]]", "task [[100 0 v2-0]]":
		default:
			t.Errorf("an answer during cutovers: %s", a)
		}
	}

	// The task reads only what its token lists; another tenant's task reads nothing of acme's.
	code, ans := taskQuery(public.URL, "/v1/task/query", "SELECT count(*) FROM alert_events")
	if code != http.StatusForbidden || ans["error"] != "forbidden" || !strings.Contains(fmt.Sprint(ans["message"]), `"alert_events"`) {
		t.Errorf("a dataset the token does not list: %d %v", code, ans)
	}
	if code, ans := taskQuery(public.URL, "/v1/task/query", "SELECT * FROM read_csv('/etc/passwd')"); code != http.StatusBadRequest || ans["error"] != "sql_rejected" {
		t.Errorf("a hostile task query: %d %v", code, ans)
	}
	if code, ans := post(public.URL+"/v1/task/query", map[string]any{"task_id": enrichTask, "attempt": 1, "lease_token": claim["lease_token"], "sql": "SELECT 1"}); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %v", code, ans)
	}

	// The audit trail: each query's caller, hash and datasets, never its SQL.
	_, _, raw := httpDo(t, "GET", public.URL+"/v1/query/audit?limit=1000", nil, "x-api-key", key)
	var audit struct {
		Queries []struct {
			Caller   string `json:"caller"`
			Status   string `json:"status"`
			Datasets []struct {
				Name, Version string
			} `json:"datasets"`
			SQLHash string `json:"sql_sha256"`
		} `json:"queries"`
	}
	if err := json.Unmarshal(raw, &audit); err != nil {
		t.Fatalf("audit: %v %s", err, raw)
	}
	if strings.Contains(string(raw), "SELECT") || strings.Contains(string(raw), "passwd") {
		t.Errorf("the audit trail holds SQL text: %s", raw)
	}
	statuses := map[string]int{}
	for _, q := range audit.Queries {
		statuses[q.Status]++
		if q.Status == "ok" && strings.HasPrefix(q.Caller, "task:"+enrichTask+"/1") && (len(q.Datasets) != 1 || q.Datasets[0].Version != "v2") {
			t.Errorf("the task's query read %+v, want blocks v2", q.Datasets)
		}
	}
	if statuses["ok"] != 18 || statuses["forbidden"] != 1 || statuses["rejected"] != 1 {
		t.Errorf("audit statuses %v, want 18 ok, 1 forbidden, 1 rejected", statuses)
	}
}

// parquetOf is the Parquet file of a query's rows.
// blocksVersion publishes v, a version of the chain pipeline's dataset blocks whose one file,
// written by a run of ingest, holds data, and makes it the current version.
func (f *fixture) blocksVersion(t *testing.T, blocks *store.Dataset, v string, data []byte) {
	t.Helper()
	run, err := f.dp.RunSource(f.ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: "chain", Job: "ingest", Trigger: map[string]any{"key": v}})
	if err != nil {
		t.Fatal(err)
	}
	c := f.claim(run.TaskID)
	prefix := grant.DatasetsDir + blocks.UUID + "/" + c.Task.ID + "/" + fmt.Sprint(c.Task.Attempt) + "/"
	if err := f.blob.Put(f.ctx, prefix+"part-0.parquet", data, "application/vnd.apache.parquet"); err != nil {
		t.Fatal(err)
	}
	cursor := int64(1)
	if _, err := f.d.Complete(f.ctx, dispatch.CompleteParams{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken, Outcome: store.OutcomeSucceeded,
		Published: []report.Published{{DatasetUUID: blocks.UUID, DatasetVersion: v, StorageRef: json.RawMessage(fmt.Sprintf("%q", f.blob.URI(prefix)))}},
		Events:    []report.Event{{DatasetUUID: blocks.UUID, DatasetVersion: v, Cursor: &cursor}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dp.SetCurrentVersion(f.ctx, tenant, "blocks", v); err != nil {
		t.Fatal(err)
	}
}

func parquetOf(t *testing.T, selectSQL string) []byte {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := filepath.Join(t.TempDir(), "x.parquet")
	if _, err := db.Exec(fmt.Sprintf("COPY (%s) TO '%s' (FORMAT parquet)", selectSQL, p)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
