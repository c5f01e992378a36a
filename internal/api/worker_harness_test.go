package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/query/engine"
	"github.com/baton-dev/baton/internal/secrets"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/udf"
)

// workerAPI is a full server over a real store: the producer listener (which also serves the
// task-scoped dialects) and the internal listener, with capability tokens.
type workerAPI struct {
	t        *testing.T
	st       store.Store
	d        *dispatch.Dispatcher
	dp       *dataplane.Plane
	tokens   *auth.Tokens
	server   *api.Server
	public   *httptest.Server
	internal *httptest.Server
	minting  bool // task credentials can be minted (BATON_TEST_S3_URL is set)
	bundles  *udf.Registry
}

// testBundleLimits are the harness's bundle limits: small archives, so that a test of the cap
// sends little.
var testBundleLimits = bundle.Limits{Archive: 256 << 10}

// testSecrets are the values of the harness's secret provider, by logical name.
var testSecrets = map[string]string{"api_key": "s3cr3t-api-key-value"}

// buffered deploys tenant acme's buffered dataset alert_events, whose batches belong under
// s3://trace-scratch/buffers/ (the object storage the contracts' examples use), and returns its
// uuid.
func (w *workerAPI) buffered() string {
	w.t.Helper()
	ctx := context.Background()
	if _, err := w.dp.Deploy(ctx, "acme", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		w.t.Fatal(err)
	}
	ds, err := w.st.DatasetGetByName(ctx, "acme", "alert_events")
	if err != nil {
		w.t.Fatal(err)
	}
	return ds.UUID
}

// bufferedUUID is the uuid of acme's alert_events, which w.buffered deployed.
func (w *workerAPI) bufferedUUID() string {
	w.t.Helper()
	ds, err := w.st.DatasetGetByName(context.Background(), "acme", "alert_events")
	if err != nil {
		w.t.Fatalf("acme's alert_events (deploy it with w.buffered first): %v", err)
	}
	return ds.UUID
}

// bufferedVersion is the current version of acme's alert_events, which w.buffered deployed: the
// version of the batches its writers publish.
func (w *workerAPI) bufferedVersion() string {
	w.t.Helper()
	ds, err := w.st.DatasetGetByName(context.Background(), "acme", "alert_events")
	if err != nil {
		w.t.Fatalf("acme's alert_events (deploy it with w.buffered first): %v", err)
	}
	return ds.CurrentVersion
}

// submitWriters starts, for each spec, a task of tenant acme's pipeline job of the spec's key
// (a manual source, with the spec's name as its operator, and its heartbeat timeout, execution
// timeout and attempts), whose output is the buffered dataset alert_events: a task that may make
// every fenced call, buffer-publish included. It returns each task's job id and task id by key.
// Its retries wait the server's default backoff.
func (w *workerAPI) submitWriters(specs ...lifecycle.TaskSpec) (jobIDs, ids map[string]string) {
	w.t.Helper()
	ctx := context.Background()
	w.buffered()
	jobIDs, ids = map[string]string{}, map[string]string{}
	for _, s := range specs {
		job := fmt.Sprintf("  - {name: %s, activation: source, runtime: ecs_platform, operator: %s, outputs: 1, source: {kind: manual}", s.Key, s.Name)
		for k, v := range map[string]*int{"heartbeat_timeout_seconds": s.HeartbeatTimeoutSeconds, "timeout_seconds": s.TimeoutSeconds,
			"max_attempts": s.MaxAttempts} {
			if v != nil {
				job += fmt.Sprintf(", %s: %d", k, *v)
			}
		}
		doc := "name: writes_" + s.Key + "\njobs:\n" + job + "}\n" + `publish:
  alert_events:
    from: {job: ` + s.Key + `, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: severity, type: string, required: true}
        - {name: block, type: integer}
        - {name: seen_at, type: timestamp}
      unique: [dedupe_key]
    filter_fields: [severity]
`
		if _, err := w.dp.Deploy(ctx, "acme", []byte(doc), "application/yaml"); err != nil {
			w.t.Fatalf("deploy the writer %s: %v\n%s", s.Key, err, doc)
		}
		run, err := w.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "acme", Pipeline: "writes_" + s.Key, Job: s.Key})
		if err != nil {
			w.t.Fatal(err)
		}
		jobIDs[s.Key], ids[s.Key] = run.JobID, run.TaskID
	}
	return jobIDs, ids
}

func newWorkerAPI(t *testing.T, st store.Store) *workerAPI {
	t.Helper()
	return newClockedWorkerAPI(t, st, nil)
}

// newClockedWorkerAPI is newWorkerAPI over a dispatcher that reads clock (nil: the real clock), so
// that a test can move time past leases and backoffs. Capability tokens keep real time.
func newClockedWorkerAPI(t *testing.T, st store.Store, clock clockwork.Clock) *workerAPI {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	// The contracts' examples name s3://trace-scratch; nothing is read or written there. With
	// BATON_TEST_S3_URL the store is on that server, so that task credentials can be minted.
	opts, minting := blobtest.Server(t)
	if !minting {
		opts = blob.Options{Region: "us-east-1", AccessKey: "x", SecretKey: "y"}
	}
	bs, err := blob.Open(context.Background(), "s3://trace-scratch", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	var minter *grant.Minter
	if minting {
		if minter, err = grant.NewMinter(bs, grant.MinterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := dispatch.New(st, dispatch.Config{Clock: clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// Bundles are kept in a directory of their own: the contracts' bucket may be no real one.
	bundleBlob, err := blob.Open(context.Background(), blobtest.File(t), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bundles := udf.New(udf.Config{Store: st, Blob: bundleBlob, Limits: testBundleLimits, TempDir: t.TempDir()})
	dp := dataplane.New(d, dataplane.Config{Blob: bs, Query: queryEngine(t), Bundles: bundles})
	tokens := auth.NewTokens(st, nil)
	s := api.New(api.Config{Dispatcher: d, DataPlane: dp, Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: tokens, Dispatcher: d, StorageRoot: bs.Root()}), Logger: quiet, Minter: minter,
		Bundles: bundles, Workers: st, Secrets: secrets.EnvWith(func(name string) (string, bool) {
			v, ok := testSecrets[strings.ToLower(strings.TrimPrefix(name, secrets.EnvPrefix))]
			return v, ok
		})})
	w := &workerAPI{t: t, st: st, d: d, dp: dp, tokens: tokens, server: s, minting: minting, bundles: bundles,
		public: httptest.NewServer(s.ProducerHandler()), internal: httptest.NewServer(s.InternalHandler())}
	t.Cleanup(w.public.Close)
	t.Cleanup(w.internal.Close)
	return w
}

// forEachClockedWorkerDriver runs fn on SQLite and PostgreSQL with a fake dispatcher clock that
// starts at start.
func forEachClockedWorkerDriver(t *testing.T, start time.Time, fn func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock)) {
	t.Helper()
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		clock := clockwork.NewFakeClockAt(start)
		fn(t, newClockedWorkerAPI(t, st, clock), clock)
	})
}

// forEachWorkerDriver runs fn as parallel subtests on SQLite and PostgreSQL.
func forEachWorkerDriver(t *testing.T, fn func(t *testing.T, w *workerAPI)) {
	t.Helper()
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) { fn(t, newWorkerAPI(t, st)) })
}

// submit creates a job of tenant "acme" through the core and returns the global id of each task
// by its key.
func (w *workerAPI) submit(specs ...lifecycle.TaskSpec) (jobID string, ids map[string]string) {
	w.t.Helper()
	ctx := context.Background()
	res, err := w.d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Tasks: specs})
	if err != nil {
		w.t.Fatal(err)
	}
	_, tasks, err := w.d.GetJob(ctx, "", res.Job.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	ids = map[string]string{}
	for _, tk := range tasks {
		ids[tk.Key] = tk.ID
	}
	return res.Job.ID, ids
}

// claim leases a task through the core (as a push dispatch would) and returns the claim and a
// capability token for it.
func (w *workerAPI) claim(taskID string) (*dispatch.Claim, string) {
	w.t.Helper()
	ctx := context.Background()
	c, err := w.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: taskID, WorkerID: "harness"})
	if err != nil {
		w.t.Fatalf("claim %s: %v", taskID, err)
	}
	return c, w.token(c.Task, time.Hour)
}

// token mints a capability token for an attempt of t with the given lifetime (negative: expired).
func (w *workerAPI) token(t *store.Task, ttl time.Duration) string {
	w.t.Helper()
	ctx := context.Background()
	job, err := w.st.JobGet(ctx, t.JobID)
	if err != nil {
		w.t.Fatal(err)
	}
	issuer := w.tokens
	if ttl < 0 {
		issuedAt := time.Now().Add(2 * ttl) // so that it expired ttl ago
		issuer = auth.NewTokens(w.st, func() time.Time { return issuedAt })
		ttl = -ttl
	}
	tok, _, err := issuer.Issue(ctx, auth.TaskClaims{Tenant: job.Tenant, JobID: t.JobID, TaskID: t.ID, Attempt: t.Attempt, LeaseToken: t.LeaseToken}, ttl)
	if err != nil {
		w.t.Fatal(err)
	}
	return tok
}

// post sends a JSON body to base+path with the given header pairs and decodes the answer.
func (w *workerAPI) post(base, path string, body any, headers ...string) response {
	w.t.Helper()
	return w.request("POST", base+path, body, headers...)
}

func (w *workerAPI) request(method, url string, body any, headers ...string) response {
	w.t.Helper()
	res, err := roundTrip(method, url, body, headers...)
	if err != nil && res.Status == 0 {
		w.t.Fatal(err)
	}
	return res
}

// task reads a task from the store.
func (w *workerAPI) task(id string) *store.Task {
	w.t.Helper()
	t, err := w.st.TaskGet(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return t
}

// queryEngine is a Query Service engine for a test server, or nil in a build without cgo, where
// the Query Service answers 501.
func queryEngine(t testing.TB) query.Engine {
	t.Helper()
	if !engine.Available {
		return nil
	}
	e, err := engine.New(engine.Config{SpillDir: t.TempDir(), Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}
