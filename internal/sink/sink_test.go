package sink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/maintenance"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/dial"
	"github.com/baton-dev/baton/wire"
)

const tenant = "acme"

var quiet = slog.New(slog.DiscardHandler)

// fixture is a dispatcher on a real store, a real data database of the same kind, real object
// storage, the pipeline pipelinetest.AlertsDoc deployed, and a sink reaching the Buffer Queue one
// way or the other.
type fixture struct {
	t       testing.TB
	ctx     context.Context
	st      store.Store
	clock   *clockwork.FakeClock
	d       *dispatch.Dispatcher
	dp      *dataplane.Plane
	blob    *blob.Store
	data    *dataset.DB
	queue   sink.Queue
	sink    *sink.Sink
	dataset *store.Dataset
}

// forEachSetup runs fn for each store driver (with a data database of its kind), each object
// storage (a directory, and the S3-compatible server) and each way to the Buffer Queue (in
// process, and over the internal listener).
func forEachSetup(t *testing.T, fn func(t *testing.T, f *fixture)) {
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			for _, storage := range []string{"file", "s3"} {
				for _, way := range []string{"local", "remote"} {
					t.Run(storage+"/"+way, func(t *testing.T) {
						fn(t, newFixture(t, drv, storage, way))
					})
				}
			}
		})
	}
}

func newFixture(t testing.TB, drv storetest.Driver, storage, way string) *fixture {
	t.Helper()
	return newFixtureWith(t, drv, storage, way, dataplane.Config{})
}

// newFixtureWith is newFixture with a data plane configured as cfg, besides its Blob and Tables.
func newFixtureWith(t testing.TB, drv storetest.Driver, storage, way string, cfg dataplane.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, ctx: ctx, st: drv.Open(t), clock: clockwork.NewFakeClockAt(time.UnixMilli(1_700_000_000_000))}
	dataURL := filepath.Join(t.TempDir(), "data.db")
	if drv.Name == "postgres" {
		dataURL = storetest.NewPostgresDatabase(t).URL
	}
	var err error
	if f.data, err = dataset.Open(ctx, dataURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.data.Close() })
	blobURL, opts := blobtest.File(t), blob.Options{}
	if storage == "s3" {
		blobURL, opts = blobtest.S3(t)
	}
	if f.blob, err = blob.Open(ctx, blobURL, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.blob.Close() })
	f.d, err = dispatch.New(f.st, dispatch.Config{Clock: f.clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Blob, cfg.Tables = f.blob, dataplane.DatasetDB{DB: f.data}
	f.dp = dataplane.New(f.d, cfg)
	f.queue = server.SinkQueue{P: f.dp}
	if way == "remote" {
		s := api.New(api.Config{Dispatcher: f.d, DataPlane: f.dp, Auth: auth.NewAuthenticator(f.st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(f.st, nil), Dispatcher: f.d}), Logger: quiet})
		srv := httptest.NewServer(s.InternalHandler())
		t.Cleanup(srv.Close)
		f.queue = sink.Remote{URL: srv.URL}
	}
	if f.sink, err = sink.New(sink.Config{Queue: f.queue, Blob: f.blob, Data: f.data, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dp.Deploy(ctx, tenant, []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if f.dataset, err = f.st.DatasetGetByName(ctx, tenant, "alert_events"); err != nil {
		t.Fatal(err)
	}
	return f
}

// writer starts a task of the job scan, whose output alert_events is (only its tasks may publish
// into it), and claims it: a running attempt that publishes. Every call starts a task of its own;
// key is its trigger's.
func (f *fixture) writer(key string) *dispatch.Claim {
	f.t.Helper()
	run, err := f.dp.RunSource(f.ctx, dataplane.RunSourceParams{Tenant: tenant, Pipeline: "alerts", Job: "scan",
		Trigger: map[string]any{"key": key}})
	if err != nil {
		f.t.Fatal(err)
	}
	return f.claim(run.TaskID)
}

func (f *fixture) claim(taskID string) *dispatch.Claim {
	f.t.Helper()
	c, err := f.d.ClaimTask(f.ctx, dispatch.ClaimTaskParams{TaskID: taskID, WorkerID: "w"})
	if err != nil {
		f.t.Fatalf("claim: %v", err)
	}
	return c
}

// publish writes rows (JSONL lines) as the batch name of c's attempt and publishes it.
func (f *fixture) publish(c *dispatch.Claim, name string, rows ...string) string {
	f.t.Helper()
	key := blob.BatchPrefix(f.dataset.UUID, c.Task.ID, c.Task.Attempt) + name
	if err := f.blob.Put(f.ctx, key, []byte(strings.Join(rows, "\n")+"\n"), "application/jsonl"); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.dp.Buffers().Publish(f.ctx, bufferqueue.PublishParams{
		Fence: dispatch.Fence{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken}, BatchURI: f.blob.URI(key)}); err != nil {
		f.t.Fatalf("publish: %v", err)
	}
	return key
}

// process has the sink load every message that is claimable now, one at a time.
func (f *fixture) process() int {
	f.t.Helper()
	n := 0
	for {
		msgs, err := f.queue.Claim(f.ctx, wire.SinkClaimRequest{Max: 1})
		if err != nil {
			f.t.Fatalf("claim: %v", err)
		}
		if len(msgs) == 0 {
			return n
		}
		if err := f.sink.Process(f.ctx, msgs[0]); err != nil {
			f.t.Fatalf("process message %d: %v", msgs[0].ID, err)
		}
		n++
	}
}

func (f *fixture) rows(tenant string) []map[string]any {
	f.t.Helper()
	page, err := dataplane.DatasetDB{DB: f.data}.Rows(f.ctx, f.dataset.UUID, schemaOf(f.t, f.dataset), reads.RowQuery{Tenant: tenant, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	return page.Rows
}

func schemaOf(t testing.TB, ds *store.Dataset) *pipeline.Schema {
	t.Helper()
	var s pipeline.Schema
	if err := json.Unmarshal(ds.Schema, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func keys(rows []map[string]any) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprint(r["dedupe_key"]))
	}
	slices.Sort(out)
	return out
}

// route runs a router pass until no event is left, and counts the tasks created per pipeline job.
func (f *fixture) route() map[string]int {
	f.t.Helper()
	r := f.dp.NewRouter(dataplane.RouteConfig{})
	for {
		n, _, err := r.RunOnce(f.ctx)
		if err != nil {
			f.t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	jobs, err := f.st.JobList(f.ctx, store.ListJobsParams{Tenant: tenant, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for _, j := range jobs {
		if j.PipelineJob != "" {
			out[j.PipelineJob]++
		}
	}
	return out
}

// The same batch published three times, by two attempts, yields each row once; a row's own
// org_id is ignored; the committed batch routes a task to each consumer whose where a new row
// matches; its artifact is deleted once committed.
func TestSinkLoadsEachRowOnceUnderThePublishersTenant(t *testing.T) {
	forEachSetup(t, func(t *testing.T, f *fixture) {
		batch := []string{
			`{"dedupe_key":"k1","severity":"high","block":1,"seen_at":"2026-11-24T10:00:00Z"}`,
			`{"dedupe_key":"k2","severity":"low","block":2,"org_id":"evil-corp"}`,
			`{"dedupe_key":"k3","severity":"low"}`,
		}
		first := f.writer("scan")
		key1 := f.publish(first, "batch.jsonl", batch...)
		f.publish(first, "batch.jsonl", batch...) // a repeat: no second message
		// Attempt 1 times out; attempt 2 publishes the same rows under its own prefix.
		f.clock.Advance(91 * time.Second)
		if _, err := f.d.Reap(f.ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(10 * time.Minute) // past the retry's backoff
		second := f.claim(first.Task.ID)
		if second.Task.Attempt != 2 {
			t.Fatalf("second claim is attempt %d", second.Task.Attempt)
		}
		key2 := f.publish(second, "batch.jsonl", batch...)
		if n := f.process(); n != 2 {
			t.Fatalf("processed %d messages, want 2", n)
		}
		rows := f.rows(tenant)
		if got := keys(rows); !slices.Equal(got, []string{"k1", "k2", "k3"}) {
			t.Fatalf("rows %v, want each once", rows)
		}
		if len(f.rows("evil-corp")) != 0 {
			t.Error("a row was stored under the org_id it carried")
		}
		recs, _ := f.st.BufferPublishListByTask(f.ctx, first.Task.ID)
		var inserted []int64
		for _, r := range recs {
			if r.State != store.BufferCommitted || r.RowsInserted == nil {
				t.Fatalf("publish %+v not committed", r)
			}
			inserted = append(inserted, *r.RowsInserted)
		}
		if !slices.Equal(inserted, []int64{3, 0}) {
			t.Errorf("rows inserted per batch %v, want [3 0]", inserted)
		}
		if got := f.route(); got["pager"] != 1 || got["digest"] != 1 {
			t.Errorf("routed %v: want one task each for pager (high) and digest (low)", got)
		}
		for _, k := range []string{key1, key2} {
			if _, err := f.blob.Get(f.ctx, k); !errors.Is(err, blob.ErrNotFound) {
				t.Errorf("artifact %s after commit: %v, want it deleted", k, err)
			}
		}
		// A second batch with one new row and one old: cursor 2, one row added, one task.
		w := f.writer("scan2")
		f.publish(w, "more.jsonl", `{"dedupe_key":"k3","severity":"low"}`, `{"dedupe_key":"k4","severity":"medium"}`)
		f.process()
		if got := keys(f.rows(tenant)); !slices.Equal(got, []string{"k1", "k2", "k3", "k4"}) {
			t.Fatalf("rows after the second batch %v", got)
		}
		if got := f.route(); got["pager"] != 1 || got["digest"] != 2 {
			t.Errorf("routed %v after a medium row: want digest 2, pager still 1", got)
		}
	})
}

// A batch with one bad row is rejected whole, every time it is received, and lands in the
// dead-letter list after 10 receives; nothing of it reaches the table.
func TestSinkRejectsAMalformedBatchWholeAndDeadLettersIt(t *testing.T) {
	forEachSetup(t, func(t *testing.T, f *fixture) {
		w := f.writer("scan")
		key := f.publish(w, "bad.jsonl",
			`{"dedupe_key":"ok1","severity":"high"}`,
			`{"dedupe_key":"bad","severity":7}`,
			`{"dedupe_key":"ok2","severity":"low"}`)
		for i := 1; i <= 10; i++ {
			if n := f.process(); n != 1 {
				t.Fatalf("receive %d: processed %d", i, n)
			}
			f.clock.Advance(time.Minute)
		}
		if n := f.process(); n != 0 {
			t.Fatalf("an eleventh receive")
		}
		if rows := f.rows(tenant); len(rows) != 0 {
			t.Fatalf("rows of a rejected batch reached the table: %v", rows)
		}
		dl, err := f.dp.Buffers().DeadLetters(f.ctx, tenant, "alert_events", 0, 10)
		if err != nil || len(dl) != 1 || dl[0].ReceiveCount != 10 || !strings.Contains(dl[0].LastError, "row 2") ||
			!strings.Contains(dl[0].LastError, "severity") {
			t.Fatalf("dead letters %+v %v", dl, err)
		}
		if r, err := f.blob.Get(f.ctx, key); err != nil {
			t.Errorf("the artifact of a dead-lettered batch is kept for a retry: %v", err)
		} else {
			r.Close()
		}
		// Fixed in place and retried from the dead-letter list, it loads.
		if err := f.blob.Put(f.ctx, key, []byte(`{"dedupe_key":"ok1","severity":"high"}`+"\n"), ""); err != nil {
			t.Fatal(err)
		}
		if _, err := f.dp.Buffers().Retry(f.ctx, tenant, "alert_events", dl[0].ID); err != nil {
			t.Fatal(err)
		}
		if n := f.process(); n != 1 {
			t.Fatalf("after the retry: processed %d", n)
		}
		if got := keys(f.rows(tenant)); !slices.Equal(got, []string{"ok1"}) {
			t.Errorf("rows after the retry %v", got)
		}
	})
}

// The sink reads nothing outside the buffer location, whatever a record says.
func TestSinkRefusesAnArtifactOutsideTheBufferLocation(t *testing.T) {
	forEachSetup(t, func(t *testing.T, f *fixture) {
		w := f.writer("scan")
		// The server refuses such a URI at publish; a record written some other way is refused
		// by the sink too.
		err := f.st.InTx(f.ctx, func(tx store.Tx) error {
			_, err := tx.BufferPublishInsert(f.ctx, &store.BufferPublish{TaskID: w.Task.ID, Attempt: 1, BatchURI: "file:///etc/passwd",
				JobID: w.Task.JobID, Tenant: tenant, DatasetUUID: f.dataset.UUID, DatasetVersion: f.dataset.CurrentVersion, State: store.BufferQueued,
				CreatedAt: f.clock.Now()})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		f.process()
		recs, _ := f.st.BufferPublishListByTask(f.ctx, w.Task.ID)
		if len(recs) != 1 || !strings.Contains(recs[0].LastError, "outside the buffer location") {
			t.Fatalf("records %+v", recs)
		}
	})
}

// With a wake-up transport, the relay publishes a wake-up naming each Buffer Queue message, and a
// running sink claims the message it names and loads it.
func TestSinkLoadsBatchesWokenByTheTransport(t *testing.T) {
	for _, kind := range []string{"redis", "nats"} {
		t.Run(kind, func(t *testing.T) {
			env := map[string]string{"redis": "BATON_TEST_REDIS_URL", "nats": "BATON_TEST_NATS_URL"}[kind]
			url := os.Getenv(env)
			if url == "" {
				t.Skipf("%s is not set; skipping the %s run", env, kind)
			}
			f := newFixture(t, storetest.Drivers()[0], "file", "local")
			tr, err := dial.Open(f.ctx, kind, url, "sinktest"+strconv.FormatInt(time.Now().UnixNano(), 36))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			consumer := tr.NewConsumer("sink-test")
			t.Cleanup(func() { consumer.Close() })
			sk, err := sink.New(sink.Config{Queue: f.queue, Blob: f.blob, Data: f.data, Logger: quiet, Wakeups: consumer})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(f.ctx)
			done := make(chan struct{})
			go func() { defer close(done); sk.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			w := f.writer("scan")
			f.publish(w, "a.jsonl", `{"dedupe_key":"k1","severity":"high"}`, `{"dedupe_key":"k2","severity":"low"}`)
			relay := maintenance.NewRelay(maintenance.Env{Store: f.st, Logger: quiet},
				maintenance.RelayConfig{Publisher: maintenance.TransportPublisher{Transport: tr}})
			if n, err := relay.RunOnce(f.ctx); err != nil || n == 0 {
				t.Fatalf("relay: %d %v", n, err)
			}
			if n, err := tr.Outstanding(f.ctx, transport.BufferQueue); err != nil || n != 1 {
				t.Fatalf("outstanding buffer wake-ups %d %v, want 1", n, err)
			}
			deadline := time.Now().Add(4 * time.Second) // below the sink's own look at the queue (5 s)
			for len(f.rows(tenant)) != 2 {
				if time.Now().After(deadline) {
					t.Fatalf("the woken sink did not load the batch: rows %v", f.rows(tenant))
				}
				time.Sleep(20 * time.Millisecond)
			}
			for deadline := time.Now().Add(5 * time.Second); ; {
				recs, _ := f.st.BufferPublishListByTask(f.ctx, w.Task.ID)
				n, _ := tr.Outstanding(f.ctx, transport.BufferQueue)
				if len(recs) == 1 && recs[0].State == store.BufferCommitted && recs[0].ReceiveCount == 1 && n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("publish %+v, %d wake-ups outstanding: want it committed after one receive, its wake-up acknowledged", recs, n)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// The producer API reads a buffered dataset's rows (tenant-scoped, with where, cursor and pages)
// and its dead letters, and retries one; bad queries are 400s that change nothing.
func TestDatasetRowsAndDeadLettersOverTheAPI(t *testing.T) {
	for _, drv := range storetest.Drivers() {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			testDatasetAPI(t, newFixture(t, drv, "file", "local"))
		})
	}
}

func testDatasetAPI(t *testing.T, f *fixture) {
	_, secret, err := auth.CreateKey(f.ctx, f.st, "t", tenant, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, otherSecret, err := auth.CreateKey(f.ctx, f.st, "t", "other", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: f.d, DataPlane: f.dp, Auth: auth.NewAuthenticator(f.st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(f.st, nil), Dispatcher: f.d}), Logger: quiet})
	srv := httptest.NewServer(s.ProducerHandler())
	t.Cleanup(srv.Close)
	get := func(key, path string) (int, map[string]any) {
		t.Helper()
		return httpCall(t, "GET", srv.URL+path, key)
	}
	w := f.writer("scan")
	var rows []string
	for i := range 5 {
		rows = append(rows, fmt.Sprintf(`{"dedupe_key":"k%d","severity":"%s","block":%d,"seen_at":"2026-11-24T10:00:0%dZ"}`,
			i, []string{"high", "low"}[i%2], i, i))
	}
	f.publish(w, "a.jsonl", rows...)
	f.publish(w, "bad.jsonl", `{"dedupe_key":1}`)
	f.process()

	code, page := get(secret, `/datasets/alert_events/rows?limit=2&where={"severity":"high"}`)
	got := page["rows"].([]any)
	if code != 200 || len(got) != 2 || got[0].(map[string]any)["dedupe_key"] != "k0" || got[1].(map[string]any)["dedupe_key"] != "k2" ||
		got[0].(map[string]any)["_cursor"] != 1.0 || page["next_after"] == nil {
		t.Fatalf("first page: %d %v", code, page)
	}
	code, page = get(secret, fmt.Sprintf(`/datasets/alert_events/rows?limit=2&where={"severity":"high"}&after=%v`, page["next_after"]))
	if got := page["rows"].([]any); code != 200 || len(got) != 1 || got[0].(map[string]any)["dedupe_key"] != "k4" || page["next_after"] != nil {
		t.Fatalf("second page: %d %v", code, page)
	}
	if code, page := get(secret, `/datasets/alert_events/rows?where={"block":[1,3],"severity":"low"}&cursor=1`); code != 200 || len(page["rows"].([]any)) != 2 {
		t.Errorf("where IN and cursor: %d %v", code, page)
	}
	if code, page := get(secret, `/datasets/alert_events/rows?cursor=2`); code != 200 || len(page["rows"].([]any)) != 0 {
		t.Errorf("a cursor no batch has: %d %v", code, page)
	}
	// A where value that no column of its type can hold (an integer beyond 64 bits, a number
	// beyond a float64) is a 400 too, not a failed query (it was a 500).
	for _, bad := range []string{`where={"nope":1}`, `where={"block":"x"}`, `where=[1]`, `limit=0`, `limit=5000`, `after=x`,
		`where={"block":99999999999999999999}`, `where={"block":[1,1e19]}`} {
		if code, body := get(secret, "/datasets/alert_events/rows?"+bad); code != 400 {
			t.Errorf("%s: %d %v, want 400", bad, code, body)
		}
	}
	if code, _ := get(otherSecret, "/datasets/alert_events/rows"); code != 404 {
		t.Errorf("another tenant's dataset: %d, want 404", code)
	}
	if code, body := get(secret, "/datasets/nope/rows"); code != 404 {
		t.Errorf("an unknown dataset: %d %v", code, body)
	}

	// The bad batch, dead after 10 receives, is listed and retried.
	for range 9 {
		f.clock.Advance(time.Minute)
		f.process()
	}
	code, dl := get(secret, "/datasets/alert_events/dead-letters")
	list := dl["dead_letters"].([]any)
	if code != 200 || len(list) != 1 || list[0].(map[string]any)["receive_count"] != 10.0 ||
		!strings.Contains(fmt.Sprint(list[0].(map[string]any)["last_error"]), "row 1") {
		t.Fatalf("dead letters: %d %v", code, dl)
	}
	id := int64(list[0].(map[string]any)["id"].(float64))
	if code, body := httpCall(t, "POST", fmt.Sprintf("%s/datasets/alert_events/dead-letters/%d/retry", srv.URL, id), otherSecret); code != 404 {
		t.Errorf("another tenant's retry: %d %v", code, body)
	}
	code, b := httpCall(t, "POST", fmt.Sprintf("%s/datasets/alert_events/dead-letters/%d/retry", srv.URL, id), secret)
	if code != 200 || b["state"] != "queued" || b["receive_count"] != 0.0 {
		t.Fatalf("retry: %d %v", code, b)
	}
	if code, _ := httpCall(t, "POST", fmt.Sprintf("%s/datasets/alert_events/dead-letters/%d/retry", srv.URL, id), secret); code != 400 {
		t.Errorf("retrying a queued batch: %d, want 400", code)
	}
	if code, _ := get(secret, "/datasets/alert_events/dead-letters"); code != 200 {
		t.Error("dead letters after the retry")
	}
}

func httpCall(t *testing.T, method, url, key string) (int, map[string]any) {
	t.Helper()
	code, v, _ := httpDo(t, method, url, nil, "x-api-key", key)
	return code, v
}

// httpDo sends one request, body (when not nil) encoded as JSON, with headers (name, value
// pairs), and returns the answer's status, its JSON object and its raw bytes.
func httpDo(t *testing.T, method, url string, body any, headers ...string) (int, map[string]any, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	_ = json.Unmarshal(raw, &v)
	return res.StatusCode, v, raw
}
