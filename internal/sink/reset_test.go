package sink_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/wire"
)

// resetDoc is pipelinetest.AlertsDoc whose source job scan resets its outputs; config tells
// versions apart.
func resetDoc(config string) string {
	return strings.Replace(pipelinetest.AlertsDoc, "    source: {kind: manual}\n",
		"    source: {kind: manual}\n    bootstrap: {reset_outputs: true}\n    config: {run: "+config+"}\n", 1)
}

// resetServer is the public API of a server over the fixture's store and data database:
// a dispatcher and data plane of their own, as a restarted server has.
type resetServer struct {
	t   *testing.T
	url string
	key string
}

func (f *fixture) server(t *testing.T, key string) *resetServer {
	t.Helper()
	d, err := dispatch.New(f.st, dispatch.Config{Clock: f.clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	dp := dataplane.New(d, dataplane.Config{Blob: f.blob, Tables: dataplane.DatasetDB{DB: f.data}})
	s := api.New(api.Config{Dispatcher: d, DataPlane: dp, Auth: auth.NewAuthenticator(f.st, auth.Limits{}, nil),
		Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(f.st, nil), Dispatcher: d}), Logger: quiet})
	srv := httptest.NewServer(s.ProducerHandler())
	t.Cleanup(srv.Close)
	return &resetServer{t: t, url: srv.URL, key: key}
}

func (s *resetServer) call(method, path, body string) (int, map[string]any) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewBufferString(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("x-api-key", s.key)
	req.Header.Set("Content-Type", "application/yaml")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(res.Body).Decode(&v)
	return res.StatusCode, v
}

// deploy deploys doc and returns its version and whether the deploy activated it.
func (s *resetServer) deploy(doc string) (string, bool) {
	s.t.Helper()
	code, body := s.call("POST", "/pipelines", doc)
	if code != 201 && code != 200 {
		s.t.Fatalf("deploy: %d %v", code, body)
	}
	return body["version"].(string), body["activated"].(bool)
}

func (s *resetServer) rollback(version string) {
	s.t.Helper()
	if code, body := s.call("POST", "/pipelines/alerts/rollback", `{"version":"`+version+`"}`); code != 200 || body["activated"] != true {
		s.t.Fatalf("rollback to %s: %d %v", version, code, body)
	}
}

// resets is the output resets of the alerts pipeline, newest first, as the store holds them.
func (f *fixture) resets() []*store.OutputReset {
	f.t.Helper()
	rs, err := f.st.OutputResetList(f.ctx, store.OutputResetListParams{Tenant: tenant, Pipeline: "alerts", Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	return rs
}

func (f *fixture) currentVersion() string {
	f.t.Helper()
	ds, err := f.st.DatasetGetByName(f.ctx, tenant, "alert_events")
	if err != nil {
		f.t.Fatal(err)
	}
	return ds.CurrentVersion
}

// Rule: bootstrap.reset_outputs runs once each time a deploy activates a version that holds it:
// the buffered output's rows and queued batches are gone, the dataset starts over at a fresh
// version, and the pipeline's history and the dataset's invalidations say who reset what, when.
// A repeated deploy of the active version, a restarted server and a rollback to the version
// reset nothing; deploying a version anew does.
func TestResetOutputsRunsOncePerActivatingDeploy(t *testing.T) {
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			testResetOutputs(t, newFixture(t, drv, "file", "local"))
		})
	}
}

func testResetOutputs(t *testing.T, f *fixture) {
	keyRec, secret, err := auth.CreateKey(f.ctx, f.st, "deployer", tenant, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := f.server(t, secret)
	_, p := srv.call("GET", "/pipelines/alerts", "")
	v1 := p["active_version"].(string) // AlertsDoc, deployed by the fixture: no reset
	before := f.currentVersion()

	w := f.writer("before")
	f.publish(w, "a.jsonl", `{"dedupe_key":"k1","severity":"high"}`, `{"dedupe_key":"k2","severity":"low"}`,
		`{"dedupe_key":"k3","severity":"low"}`)
	if n := f.process(); n != 1 || len(f.rows(tenant)) != 3 {
		t.Fatalf("loaded %d batches, %d rows; want 1 and 3", n, len(f.rows(tenant)))
	}
	if got := f.route(); got["pager"] != 1 || got["digest"] != 1 {
		t.Fatalf("routed before the reset: %v", got)
	}
	f.publish(w, "late.jsonl", `{"dedupe_key":"k4","severity":"high"}`) // queued, not loaded yet

	// The deploy that activates a version with reset_outputs resets the outputs.
	v2, activated := srv.deploy(resetDoc("one"))
	if !activated {
		t.Fatal("the reset version was not activated")
	}
	if rows := f.rows(tenant); len(rows) != 0 {
		t.Fatalf("rows after the reset: %v", rows)
	}
	if n := f.process(); n != 0 {
		t.Errorf("the sink loaded %d batches queued before the reset", n)
	}
	rs := f.resets()
	if len(rs) != 1 {
		t.Fatalf("%d resets recorded, want 1", len(rs))
	}
	r := rs[0]
	fresh := f.currentVersion()
	if r.Version != v2 || r.Job != "scan" || r.APIKey != keyRec.ID || r.DatasetUUID != f.dataset.UUID || r.DatasetName != "alert_events" ||
		r.PreviousVersion != before || r.DatasetVersion != fresh || fresh == before || r.RowsRemoved != 3 || r.BatchesDiscarded != 1 ||
		!r.At.Equal(f.clock.Now().Truncate(time.Millisecond)) {
		t.Fatalf("reset record %+v; want version %s, key %s, %s → %s, 3 rows, 1 batch", r, v2, keyRec.ID, before, fresh)
	}
	dead, err := f.st.BufferPublishListDeadLetters(f.ctx, store.BufferPublishListDeadLettersParams{DatasetUUID: f.dataset.UUID, Limit: 10})
	if err != nil || len(dead) != 1 || !strings.Contains(dead[0].LastError, "reset its outputs") {
		t.Fatalf("dead letters after the reset: %v %+v", err, dead)
	}

	// The API shows the reset in the pipeline's history and as the dataset's invalidation.
	code, versions := srv.call("GET", "/pipelines/alerts/versions", "")
	list := versions["versions"].([]any)
	if code != 200 || len(list) != 2 {
		t.Fatalf("versions: %d %v", code, versions)
	}
	newest := list[0].(map[string]any)
	resets := newest["resets"].([]any)
	if newest["version"] != v2 || len(resets) != 1 || len(list[1].(map[string]any)["resets"].([]any)) != 0 {
		t.Fatalf("versions' resets: %v", list)
	}
	entry := resets[0].(map[string]any)
	ds := entry["datasets"].([]any)[0].(map[string]any)
	if entry["job"] != "scan" || entry["api_key"] != keyRec.ID || entry["at"] == nil || ds["dataset_name"] != "alert_events" ||
		ds["rows_removed"] != 3.0 || ds["batches_discarded"] != 1.0 || ds["previous_version"] != before || ds["dataset_version"] != fresh {
		t.Errorf("the reset in the versions view: %v", entry)
	}
	code, view := srv.call("GET", "/datasets/alert_events", "")
	inv := view["invalidations"].([]any)
	if code != 200 || len(inv) != 1 || inv[0].(map[string]any)["kind"] != "reset" || inv[0].(map[string]any)["dataset_version"] != fresh ||
		inv[0].(map[string]any)["pipeline_version"] != v2 || view["current_version"] != fresh {
		t.Errorf("the dataset's invalidations: %d %v", code, view)
	}

	// Rows published after the reset load, at a cursor past the earlier ones, and reach the
	// consumers under the fresh version: nothing dedupes them against the tasks routed before.
	after := f.writer("after")
	f.publish(after, "b.jsonl", `{"dedupe_key":"k1","severity":"high"}`)
	if n := f.process(); n != 1 || len(f.rows(tenant)) != 1 {
		t.Fatalf("after the reset: loaded %d batches, rows %v", n, f.rows(tenant))
	}
	if got := f.route(); got["pager"] != 2 {
		t.Errorf("routed after the reset: %v; want a second pager task", got)
	}
	events, err := f.st.DatasetEventListRecent(f.ctx, store.DatasetEventListRecentParams{Tenant: tenant, DatasetUUID: f.dataset.UUID, Limit: 1})
	if err != nil || len(events) != 1 || events[0].DatasetVersion != fresh || *events[0].Cursor != 2 {
		t.Fatalf("the event after the reset: %v %+v; want cursor 2 of version %s", err, events, fresh)
	}

	unchanged := func(when string) {
		t.Helper()
		if got := len(f.resets()); got != 1 {
			t.Errorf("%s: %d resets recorded, want still 1", when, got)
		}
		if rows := f.rows(tenant); len(rows) != 1 {
			t.Errorf("%s: rows %v, want the one loaded after the reset", when, rows)
		}
		if v := f.currentVersion(); v != fresh {
			t.Errorf("%s: current version %s, want still %s", when, v, fresh)
		}
	}
	// The same document again: its version is already active.
	f.clock.Advance(time.Minute)
	if _, activated := srv.deploy(resetDoc("one")); activated {
		t.Fatal("a repeated deploy activated the version again")
	}
	unchanged("a repeated deploy")
	// A restarted server (a new dispatcher and data plane on the same databases) does not run it.
	restarted := f.server(t, secret)
	restarted.deploy(resetDoc("one"))
	unchanged("a restart")
	// A rollback away from the version and back to it re-activates it without resetting.
	restarted.rollback(v1)
	restarted.rollback(v2)
	unchanged("a rollback to the version")

	// A new version deployed resets again; so does deploying the earlier version anew.
	f.clock.Advance(time.Minute)
	v3, _ := restarted.deploy(resetDoc("two"))
	if rs := f.resets(); len(rs) != 2 || rs[0].Version != v3 || rs[0].RowsRemoved != 1 || len(f.rows(tenant)) != 0 {
		t.Fatalf("after deploying %s: resets %+v, rows %v", v3, rs, f.rows(tenant))
	}
	f.clock.Advance(time.Minute)
	if again, activated := restarted.deploy(resetDoc("one")); again != v2 || !activated {
		t.Fatalf("deploying %s anew: version %s, activated %v", v2, again, activated)
	}
	if rs := f.resets(); len(rs) != 3 || rs[0].Version != v2 || rs[0].RowsRemoved != 0 {
		t.Fatalf("after deploying %s anew: %d resets, newest %+v", v2, len(rs), rs[0])
	}
	_, versions = srv.call("GET", "/pipelines/alerts/versions", "")
	for _, v := range versions["versions"].([]any) {
		v := v.(map[string]any)
		want := map[string]int{v1: 0, v2: 2, v3: 1}[v["version"].(string)]
		if got := len(v["resets"].([]any)); got != want {
			t.Errorf("version %v lists %d resets, want %d", v["version"], got, want)
		}
	}
}

// Rule: a batch a sink claimed before a reset_outputs deploy and loads after it loads nothing
// into the emptied table (the data database refuses the version the reset retired), stays
// dead-lettered as the reset left it, and makes no event: nothing is routed. The sink reports
// that the batch is no longer its own (ErrClaimLost). Rows published after the reset load.
func TestSinkLoadsNothingOfABatchHeldAcrossAReset(t *testing.T) {
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			for _, way := range []string{"local", "remote"} {
				t.Run(way, func(t *testing.T) {
					f := newFixture(t, drv, "file", way)
					w := f.writer("before")
					f.publish(w, "held.jsonl", `{"dedupe_key":"k1","severity":"high"}`, `{"dedupe_key":"k2","severity":"low"}`)
					held, err := f.queue.Claim(f.ctx, wire.SinkClaimRequest{Max: 1})
					if err != nil || len(held) != 1 {
						t.Fatalf("claim: %v %v", held, err)
					}
					if res, err := f.dp.Deploy(f.ctx, tenant, []byte(resetDoc("one")), "application/yaml"); err != nil || !res.Activated {
						t.Fatalf("deploy the reset: %+v %v", res, err)
					}
					if err := f.sink.Process(f.ctx, held[0]); !errors.Is(err, sink.ErrClaimLost) {
						t.Fatalf("process the held batch: %v, want ErrClaimLost", err)
					}
					if rows := f.rows(tenant); len(rows) != 0 {
						t.Fatalf("rows of the batch held across the reset: %v", rows)
					}
					rec := f.publishRecord(w.Task.ID)
					if rec.State != store.BufferDead || !strings.Contains(rec.LastError, "reset its outputs") {
						t.Fatalf("the held batch %+v, want dead-lettered by the reset", rec)
					}
					if events, err := f.st.DatasetEventListByTask(f.ctx, w.Task.ID); err != nil || len(events) != 0 {
						t.Fatalf("events of the held batch: %v %+v", err, events)
					}
					if got := f.route(); got["pager"] != 0 || got["digest"] != 0 {
						t.Fatalf("routed: %v, want no consumer task", got)
					}

					after := f.writer("after")
					f.publish(after, "b.jsonl", `{"dedupe_key":"k1","severity":"high"}`)
					if n := f.process(); n != 1 || len(f.rows(tenant)) != 1 {
						t.Fatalf("after the reset: loaded %d batches, rows %v", n, f.rows(tenant))
					}
					if got := f.route(); got["pager"] != 1 || got["digest"] != 0 {
						t.Fatalf("routed after the reset: %v, want one pager task", got)
					}
				})
			}
		})
	}
}
