package api_test

// The harness of the fuzz targets (fuzz_test.go): one server over a SQLite store, built once per
// fuzz target and fuzzing process, and a way to send it a fuzzed request and judge the answer.
//
// A request is written as raw HTTP/1.1 bytes and read back with http.ReadRequest, as a server
// reads it, so that the handlers see only requests net/http could hand them. Fuzzed text may
// name the server's state through placeholders ($JOB, $TASK, $LEASE, $TOKEN...), which are
// replaced before the request is written: committed corpus entries and mutations of them then
// reach the code behind the lookups (a live lease, a valid token), not only the 404s.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/udf"
)

// fuzzAnswerWithin bounds how long one request may take. Long polls do not count against it:
// their waits run on the dispatcher's fake clock, which the harness moves on while a request
// waits, so a one-minute max_wait_ms ends at once.
const fuzzAnswerWithin = 20 * time.Second

// fuzzHarness is a full server over a SQLite store: the public listener (producer API,
// task-scoped and callback dialects) and the internal one (worker, stream-worker and sink
// dialects), with API key, capability tokens, a deployed pipeline with a buffered dataset that
// has rows, and a buffered publish waiting for a sink.
type fuzzHarness struct {
	ctx      context.Context
	st       store.Store
	d        *dispatch.Dispatcher
	dp       *dataplane.Plane
	clock    *clockwork.FakeClock
	tokens   *auth.Tokens
	minter   *grant.Minter // nil without an S3 server to mint on
	public   http.Handler
	internal http.Handler
	log      *lockedBuffer
	key      string   // x-api-key of tenant acme
	fixed    []string // placeholder pairs that hold for the whole run
	waiting  chan struct{}
}

// lockedBuffer collects the server's error log, shown with a failing input.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) reset() {
	l.mu.Lock()
	l.b.Reset()
	l.mu.Unlock()
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fuzzPipeline is the example pipeline of the repository: its buffered dataset alert_events is
// the one the worker dialects publish to.
func fuzzPipeline(tb testing.TB) []byte {
	tb.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "examples", "pipeline", "pipeline.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	return doc
}

// fuzzRows are rows of alert_events, loaded at setup so that row queries find some.
const fuzzRows = `{"dedupe_key": "a1", "chain": "mainnet", "block": 1000001, "severity": "high", "message": "reorg", "seen_at": "2025-01-15T10:00:00Z"}
{"dedupe_key": "a2", "chain": "sepolia", "block": 1000002, "severity": "low"}
{"dedupe_key": "a3", "chain": "mainnet", "block": 1000003, "severity": "medium", "org_id": "ignored"}
`

func newFuzzHarness(f *testing.F) *fuzzHarness {
	f.Helper()
	ctx := context.Background()
	h := &fuzzHarness{ctx: ctx, st: storetest.OpenSQLite(f), log: &lockedBuffer{},
		clock: clockwork.NewFakeClockAt(time.Now()), waiting: make(chan struct{})}
	data, err := dataset.Open(ctx, filepath.Join(f.TempDir(), "data.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { data.Close() })
	// The object storage the worker tests name; nothing is read or written there. With
	// BATON_TEST_S3_URL it is on that server, so that task credentials can be minted.
	opts, minting := blobtest.Server(f)
	if !minting {
		opts = blob.Options{Region: "us-east-1", AccessKey: "x", SecretKey: "y"}
	}
	bs, err := blob.Open(ctx, "s3://trace-scratch", opts)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { bs.Close() })
	if minting {
		if h.minter, err = grant.NewMinter(bs, grant.MinterOptions{}); err != nil {
			f.Fatal(err)
		}
	}
	logger := slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelError}))
	h.d, err = dispatch.New(h.st, dispatch.Config{Clock: h.clock, Logger: logger, MaxTasksPerJob: 50})
	if err != nil {
		f.Fatal(err)
	}
	bundleBlob, err := blob.Open(ctx, blobtest.File(f), blob.Options{})
	if err != nil {
		f.Fatal(err)
	}
	bundles := udf.New(udf.Config{Store: h.st, Blob: bundleBlob, Limits: testBundleLimits, TempDir: f.TempDir()})
	h.dp = dataplane.New(h.d, dataplane.Config{Blob: bs, Tables: dataplane.DatasetDB{DB: data}, Query: queryEngine(f), Bundles: bundles})
	h.tokens = auth.NewTokens(h.st, nil)
	cfg := api.Config{Dispatcher: h.d, DataPlane: h.dp, Auth: auth.NewAuthenticator(h.st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: h.tokens, Dispatcher: h.d, StorageRoot: bs.Root()}), Logger: logger,
		MaxBodyBytes: 64 << 10, EventPoll: 20 * time.Millisecond, CORSOrigins: []string{"https://app.example.com"}, Minter: h.minter,
		Bundles: bundles}
	// The public listener's server is drained, as when it shuts down, so that an event stream of a
	// job that is still running ends after what is there instead of following the job forever.
	public := api.New(cfg)
	public.Drain()
	h.public, h.internal = public.ProducerHandler(), api.New(cfg).InternalHandler()
	if _, h.key, err = auth.CreateKey(ctx, h.st, "fuzz", "acme", "", time.Now()); err != nil {
		f.Fatal(err)
	}

	doc := fuzzPipeline(f)
	dep, err := h.dp.Deploy(ctx, "acme", doc, "application/yaml")
	if err != nil {
		f.Fatal(err)
	}
	if _, err := h.dp.Deploy(ctx, "acme", []byte(sourcesPipeline), "application/yaml"); err != nil {
		f.Fatal(err)
	}
	ds, err := h.st.DatasetGetByName(ctx, "acme", "alert_events")
	if err != nil {
		f.Fatal(err)
	}
	parsed, problems := pipeline.Parse(doc, "application/yaml")
	if problems != nil {
		f.Fatal(problems)
	}
	schema := parsed.Publish["alert_events"].Schema
	rows, err := dataset.ParseBatch(strings.NewReader(fuzzRows), schema, 0)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := data.Load(ctx, dataset.Batch{ID: "setup", Tenant: "acme", DatasetUUID: ds.UUID, Schema: schema, Rows: rows,
		FacetFields: []string{"severity", "chain"}}); err != nil {
		f.Fatal(err)
	}
	h.fixed = []string{"$KEY", h.key, "$VERSION", dep.Version, "$DS_A", ds.UUID, "$VER_BUF", ds.CurrentVersion}
	for _, k := range []string{"$VER_A", "$DS_B", "$VER_B", "$DS_C", "$VER_C"} {
		h.fixed = append(h.fixed, k, uuid.NewString())
	}

	// A buffered publish, for the sink endpoints to claim, commit and fail, by a task of
	// range_stats, whose output alert_events is: a fixture task's event on blocks starts one.
	fx := h.newFixture(f, false)
	blocks, err := h.st.DatasetGetByName(ctx, "acme", "blocks")
	if err != nil {
		f.Fatal(err)
	}
	if _, err := h.dp.Intake().Record(ctx, dispatch.Fence{TaskID: fx.task, Attempt: 1, LeaseToken: fx.lease}, []report.Event{
		{DatasetUUID: blocks.UUID, DatasetVersion: blocks.CurrentVersion, Cursor: &[]int64{1}[0]}}); err != nil {
		f.Fatal(err)
	}
	if _, _, err := h.dp.NewRouter(dataplane.RouteConfig{}).RunOnce(ctx); err != nil {
		f.Fatal(err)
	}
	jobs, err := h.st.JobList(ctx, store.ListJobsParams{Tenant: "acme", Limit: 100})
	if err != nil {
		f.Fatal(err)
	}
	var writer *dispatch.Claim
	for _, j := range jobs {
		if j.PipelineJob == "range_stats" {
			tasks, err := h.st.TaskListByJob(ctx, j.ID)
			if err != nil || len(tasks) != 1 {
				f.Fatalf("range_stats's tasks: %v %d", err, len(tasks))
			}
			if writer, err = h.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: tasks[0].ID, WorkerID: "fuzz"}); err != nil {
				f.Fatal(err)
			}
		}
	}
	if writer == nil {
		f.Fatal("the event on blocks started no task of range_stats")
	}
	n := int64(3)
	if _, err := h.dp.Buffers().Publish(ctx, bufferqueue.PublishParams{
		Fence:       dispatch.Fence{TaskID: writer.Task.ID, Attempt: 1, LeaseToken: writer.Task.LeaseToken},
		BatchURI:    "s3://trace-scratch/" + blob.BatchPrefix(ds.UUID, writer.Task.ID, 1) + "batch.jsonl",
		DatasetUUID: ds.UUID, RecordCount: &n}); err != nil {
		f.Fatal(err)
	}

	// The one goroutine that tells a request in flight that something waits on the fake clock.
	watch, stop := context.WithCancel(ctx)
	f.Cleanup(stop)
	go func() {
		for h.clock.BlockUntilContext(watch, 1) == nil {
			select {
			case h.waiting <- struct{}{}:
			case <-watch.Done():
				return
			}
		}
	}()
	return h
}

// fuzzFixture is the state one input's placeholders name: a job of tenant acme with two running
// attempts (a valid capability token of each, and an expired one of the first), a pending task
// and a waiting one; and a finished (canceled) job.
type fuzzFixture struct {
	job, task, lease, token, task2, lease2, token2, idle, expired, done string
}

// newFixture creates a fixture; done also creates a finished (canceled) job.
func (h *fuzzHarness) newFixture(tb testing.TB, done bool) *fuzzFixture {
	tb.Helper()
	ctx := h.ctx
	res, err := h.d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Name: "fuzz", Tasks: []lifecycle.TaskSpec{
		{Key: "run", Name: "fuzz", Input: json.RawMessage(`{"n":1}`)},
		{Key: "run2", Name: "fuzz"},
		{Key: "idle", Name: "fuzz"},
		{Key: "child", Name: "fuzz-child", DependsOn: []string{"run", "run2"}},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	_, tasks, err := h.d.GetJob(ctx, "", res.Job.ID)
	if err != nil {
		tb.Fatal(err)
	}
	fx := &fuzzFixture{job: res.Job.ID}
	for _, t := range tasks {
		switch t.Key {
		case "run", "run2":
			c, err := h.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: t.ID, WorkerID: "fuzz"})
			if err != nil {
				tb.Fatal(err)
			}
			tok, _, err := h.tokens.Issue(ctx, auth.TaskClaims{Tenant: "acme", JobID: res.Job.ID, TaskID: t.ID,
				Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken}, time.Hour)
			if err != nil {
				tb.Fatal(err)
			}
			if t.Key == "run" {
				fx.task, fx.lease, fx.token = t.ID, c.Task.LeaseToken, tok
				issuedAt := time.Now().Add(-2 * time.Hour)
				old := auth.NewTokens(h.st, func() time.Time { return issuedAt })
				if fx.expired, _, err = old.Issue(ctx, auth.TaskClaims{Tenant: "acme", JobID: res.Job.ID, TaskID: t.ID,
					Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken}, time.Hour); err != nil {
					tb.Fatal(err)
				}
			} else {
				fx.task2, fx.lease2, fx.token2 = t.ID, c.Task.LeaseToken, tok
			}
		case "idle":
			fx.idle = t.ID
		}
	}
	if done {
		res, err := h.d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Tasks: []lifecycle.TaskSpec{{Key: "only", Name: "fuzz-done"}}})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := h.d.CancelJob(ctx, "acme", res.Job.ID, "user_requested"); err != nil {
			tb.Fatal(err)
		}
		fx.done = res.Job.ID
	}
	return fx
}

// expander replaces the placeholders of one input; the fixture is made on first use.
type expander struct {
	h *fuzzHarness
	t *testing.T
	r *strings.Replacer
}

// expand replaces the placeholders in s. Longer names come first, so that $TASK2 is not read as
// $TASK followed by 2.
func (e *expander) expand(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	if e.r == nil {
		fx := e.h.newFixture(e.t, true)
		pairs := append([]string{
			"$EXPIRED", fx.expired,
			"$TOKEN2", fx.token2, "$LEASE2", fx.lease2, "$TASK2", fx.task2,
			"$ATTEMPT", "1", "$TOKEN", fx.token, "$LEASE", fx.lease, "$TASK", fx.task,
			"$IDLE", fx.idle, "$DONE", fx.done, "$JOB", fx.job,
		}, e.h.fixed...)
		e.r = strings.NewReplacer(pairs...)
	}
	return e.r.Replace(s)
}

// fuzzRoute is an endpoint of a listener: a method and a path whose {params} are filled from a
// fuzzed path, with defaults for those it does not give.
type fuzzRoute struct {
	method, path string
	defaults     []string // one per {param}, in order
}

// target builds the request target: each {param} takes the next "/"-separated part of path (or its
// default when there is none), placeholders expanded and escaped as one path segment; a last
// {param...} takes the rest of path, each segment escaped. The query is sent as given, only the
// bytes that cannot be in a request line escaped.
func (rt fuzzRoute) target(e *expander, path, query string) string {
	var parts []string
	if path != "" {
		parts = strings.Split(path, "/")
	}
	segs := strings.Split(rt.path, "/")
	param := 0
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") {
			continue
		}
		v := rt.defaults[min(param, len(rt.defaults)-1)]
		rest := strings.HasSuffix(s, "...}")
		switch {
		case param < len(parts) && rest:
			v = strings.Join(parts[param:], "/")
		case param < len(parts):
			v = parts[param]
		}
		param++
		v = e.expand(v)
		if rest {
			sub := strings.Split(v, "/")
			for k := range sub {
				sub[k] = url.PathEscape(sub[k])
			}
			segs[i] = strings.Join(sub, "/")
		} else {
			segs[i] = url.PathEscape(v)
		}
	}
	target := strings.Join(segs, "/")
	if query != "" {
		target += "?" + requestLineEscape(e.expand(query))
	}
	return target
}

// requestLineEscape %-escapes the bytes a request line cannot carry (spaces and controls).
func requestLineEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// headerLines reads fuzzed "Name: value" lines, dropping what no client can send (a bad name, a
// control character in a value) and the headers that frame the request, which the harness sets.
func headerLines(e *expander, s string) [][2]string {
	var out [][2]string
	for _, line := range strings.Split(s, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || !validHeaderName(name) {
			continue
		}
		switch strings.ToLower(name) {
		case "content-length", "transfer-encoding", "host", "connection", "expect", "trailer", "te":
			continue
		}
		value = strings.Trim(e.expand(value), " \t\r")
		if validHeaderValue(value) {
			out = append(out, [2]string{name, value})
		}
	}
	return out
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// request reads method, target, headers and body back as a server would. ok is false for a
// request that net/http itself refuses before any handler runs.
func request(method, target string, header [][2]string, body []byte) (*http.Request, bool) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: baton.test\r\n", method, target)
	for _, kv := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", kv[0], kv[1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	r, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil {
		return nil, false
	}
	r.RemoteAddr = "192.0.2.1:40000"
	return r, true
}

// serve sends r to handler and checks the answer: no panic, an answer within fuzzAnswerWithin,
// never a 5xx, and for every status from 400 on a JSON object with a non-empty "error". A JSON
// answer below 400 must parse too. It returns the answer's JSON object, nil when there is none.
func (h *fuzzHarness) serve(t *testing.T, handler http.Handler, r *http.Request) map[string]any {
	t.Helper()
	h.log.reset()
	desc := fmt.Sprintf("%s %s", r.Method, r.URL.RequestURI())
	rec := httptest.NewRecorder()
	done := make(chan string, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
				return
			}
			done <- ""
		}()
		handler.ServeHTTP(rec, r)
	}()
	limit := time.NewTimer(fuzzAnswerWithin)
	defer limit.Stop()
wait:
	for {
		select {
		case p := <-done:
			if p != "" {
				t.Fatalf("%s: %s", desc, p)
			}
			break wait
		case <-h.waiting:
			h.clock.Advance(time.Minute) // a long poll waits: let its time pass
		case <-limit.C:
			t.Fatalf("%s: no answer within %s", desc, fuzzAnswerWithin)
		}
	}
	res := rec.Result()
	raw := rec.Body.Bytes()
	// Without an S3 server to mint on (BATON_TEST_S3_URL unset), minting answers that it cannot.
	unminted := res.StatusCode == http.StatusNotImplemented && h.minter == nil && bytes.Contains(raw, []byte(`"credentials_unavailable"`))
	// Bundles are kept in a directory here, which signs no URL for a two-step upload.
	unsigned := res.StatusCode == http.StatusNotImplemented && bytes.Contains(raw, []byte("a two-step upload needs S3"))
	if res.StatusCode >= 500 && !unminted && !unsigned {
		t.Fatalf("%s: answered %d: %s\nserver log:\n%s", desc, res.StatusCode, raw, h.log.String())
	}
	isJSON := res.Header.Get("Content-Type") == "application/json"
	if res.StatusCode >= 400 && !isJSON {
		t.Fatalf("%s: answered %d with Content-Type %q: %s", desc, res.StatusCode, res.Header.Get("Content-Type"), raw)
	}
	if !isJSON {
		return nil
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%s: answered %d with JSON that is no object (%v): %s", desc, res.StatusCode, err, raw)
	}
	if msg, _ := body["error"].(string); res.StatusCode >= 400 && msg == "" {
		t.Fatalf("%s: answered %d without an \"error\": %s", desc, res.StatusCode, raw)
	}
	return body
}

// send builds the request of a route and serves it; it does nothing for a request net/http
// would refuse itself.
func (h *fuzzHarness) send(t *testing.T, handler http.Handler, e *expander, rt fuzzRoute, path, query string,
	header [][2]string, body []byte) map[string]any {
	t.Helper()
	r, ok := request(rt.method, rt.target(e, path, query), header, []byte(e.expand(string(body))))
	if !ok {
		return nil
	}
	return h.serve(t, handler, r)
}

// pickRoute chooses the route of an input.
func pickRoute(routes []fuzzRoute, i uint8) fuzzRoute { return routes[int(i)%len(routes)] }

// exampleBodies reads the example requests of the repository (examples/*.json).
func exampleBodies(f *testing.F) [][]byte {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	slices.Sort(paths)
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		f.Fatal("no examples/*.json")
	}
	return out
}

// statusOf reads a JSON number as a status code.
func statusOf(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case string:
		i, _ := strconv.Atoi(n)
		return i
	}
	return 0
}
