package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dataset/datasettest"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// deployServer is the producer listener of a server whose store and data database are of one
// driver, with an API key of tenant acme.
type deployServer struct {
	driver  string
	handler http.Handler
	key     string
	data    string // the data database's URL
	dump    string // datasettest.Dump of it after the last deploy: only deploys change it
	log     *lockedBuffer
}

func newDeployServer(tb testing.TB, driver string) *deployServer {
	tb.Helper()
	ctx := context.Background()
	var st store.Store
	if driver == "sqlite" {
		st = storetest.OpenSQLite(tb)
	} else {
		st = storetest.OpenPostgres(tb)
	}
	s := &deployServer{driver: driver, data: datasettest.URL(tb, driver), log: &lockedBuffer{}}
	data, err := dataset.Open(ctx, s.data)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { data.Close() })
	logger := slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelError}))
	d, err := dispatch.New(st, dispatch.Config{Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	dp := dataplane.New(d, dataplane.Config{Tables: dataplane.DatasetDB{DB: data}})
	s.handler = api.New(api.Config{Dispatcher: d, DataPlane: dp, Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Logger: logger,
		MaxBodyBytes: 2 << 20}).ProducerHandler()
	if _, s.key, err = auth.CreateKey(ctx, st, "fuzz", "acme", "", time.Now()); err != nil {
		tb.Fatal(err)
	}
	s.dump = datasettest.Dump(tb, s.data)
	return s
}

// deploy posts doc and checks the answer: no 5xx, a JSON object with an "error" from 400 on, the
// data database unchanged by a refusal, and a deployed pipeline that reads back.
func (s *deployServer) deploy(t *testing.T, doc []byte, contentType string) {
	t.Helper()
	s.log.reset()
	req := httptest.NewRequest("POST", "/pipelines", bytes.NewReader(doc))
	req.Header.Set("x-api-key", s.key)
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, req)
	var body map[string]any
	decoded := json.Unmarshal(rec.Body.Bytes(), &body) == nil
	switch code := rec.Code; {
	case code >= 500:
		t.Fatalf("%s: POST /pipelines answered %d: %s\nserver log:\n%s", s.driver, code, rec.Body, s.log)
	case code >= 400:
		if msg, _ := body["error"].(string); !decoded || msg == "" {
			t.Fatalf("%s: POST /pipelines answered %d without an error: %s", s.driver, code, rec.Body)
		}
		if after := datasettest.Dump(t, s.data); after != s.dump {
			t.Fatalf("%s: a refused deploy (%d %s) changed the data database:\n%s", s.driver, code, rec.Body,
				datasettest.Diff(s.dump, after))
		}
	case code == http.StatusOK || code == http.StatusCreated:
		s.dump = datasettest.Dump(t, s.data)
		name, _ := body["name"].(string)
		get := httptest.NewRequest("GET", "/pipelines/"+name, nil)
		get.Header.Set("x-api-key", s.key)
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, get)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: the deployed pipeline %q reads back %d: %s", s.driver, name, rec.Code, rec.Body)
		}
	default:
		t.Fatalf("%s: POST /pipelines answered %d: %s", s.driver, code, rec.Body)
	}
}

// FuzzDeploy deploys fuzzed pipeline documents, as YAML or as JSON, through POST /pipelines of a
// server on SQLite (store and data database), and of one on PostgreSQL when
// BATON_TEST_POSTGRES_URL is set. Every input goes to both, whose state grows with the inputs
// deployed before it. Neither may answer a 5xx; an answer from 400 on is a JSON object with an
// "error", and leaves the data database as it was (no table, column, index or recorded schema
// of a refused deploy); a deployed pipeline reads back.
//
//	go test -run '^$' -fuzz '^FuzzDeploy$' -fuzztime 60s ./internal/api
func FuzzDeploy(f *testing.F) {
	servers := []*deployServer{newDeployServer(f, "sqlite")}
	if os.Getenv(storetest.PostgresURLEnv) == "" {
		f.Logf("%s is not set: skipping the PostgreSQL server; deploying on SQLite only", storetest.PostgresURLEnv)
	} else {
		servers = append(servers, newDeployServer(f, "postgres"))
	}
	for _, name := range []string{
		filepath.Join("..", "..", "examples", "pipeline", "pipeline.yaml"),
		filepath.Join("..", "pipeline", "testdata", "valid.yaml"),
		filepath.Join("..", "pipeline", "testdata", "valid.json"),
	} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, strings.HasSuffix(name, ".json"))
	}
	f.Add([]byte(pipelinetest.AlertsDoc), false)
	// Two buffered datasets, then one grows a column while the other's changes type (refused),
	// then it only grows.
	twins := func(a, b string) []byte {
		return []byte(`name: twins
jobs:
  - {name: src, activation: source, runtime: ecs_platform, operator: op, outputs: 1, source: {kind: manual}}
publish:
  a: {from: {job: src, output: 0}, write_mode: buffered, schema: {columns: [{name: k, type: string}, ` + a + `], unique: [k]}}
  b: {from: {job: src, output: 0}, write_mode: buffered, schema: {columns: [{name: k, type: string}, ` + b + `], unique: [k]}}
`)
	}
	f.Add(twins(`{name: n, type: integer}`, `{name: n, type: integer}`), false)
	f.Add(twins(`{name: n, type: integer}, {name: extra, type: string}`, `{name: n, type: string}`), false)
	f.Add(twins(`{name: n, type: integer}, {name: extra, type: string}`, `{name: n, type: integer}`), false)
	small := pipelinetest.Size{Buffered: 2, Columns: 4, Indexes: 2, KeyColumns: 2, Outputs: 3, Datasets: 8}
	f.Add([]byte(pipelinetest.SizedDoc("sized", small)), false)
	small.Indexes = pipeline.MaxIndexes + 1
	f.Add([]byte(pipelinetest.SizedDoc("sized", small)), false)
	f.Add([]byte(pipelinetest.SizedDoc("many", pipelinetest.Size{Outputs: 1000, Datasets: 33 * 1000})), false)
	f.Add([]byte(`{"name": "j", "jobs": [{"name": "a", "activation": "source", "runtime": "ecs_platform", "operator": "op", "outputs": 1,`+
		` "source": {"kind": "manual"}}], "publish": {"d": {"from": {"job": "a", "output": 0}, "write_mode": "buffered",`+
		` "schema": {"columns": [{"name": "k", "type": "string"}], "unique": ["k"]}}}}`), true)
	f.Fuzz(func(t *testing.T, doc []byte, asJSON bool) {
		contentType := "application/yaml"
		if asJSON {
			contentType = "application/json"
		}
		for _, s := range servers {
			s.deploy(t, doc, contentType)
		}
	})
}
