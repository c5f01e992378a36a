package api_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/query/engine"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// The authorization matrix: every route of the route table (Server.Routes) × every credential a
// caller without the right one may present. A route whose Auth the matrix does not know, a route
// served without a credential that is not one of authzPublicRoutes, or a producer route the
// matrix has no tenant answer for fails it: a route added later has to say who may call it.

// The columns of the matrix.
const (
	caseNoCredential    = "no credential"
	caseWrongKey        = "wrong key"
	caseRevokedKey      = "revoked key"
	caseOtherTenantKey  = "another tenant's key"
	caseExpiredToken    = "expired token"
	caseOtherTaskToken  = "another task's token"
	caseOldAttemptToken = "another attempt's token"
	caseNoClientCert    = "no client certificate"
)

var authzCases = []string{caseNoCredential, caseWrongKey, caseRevokedKey, caseOtherTenantKey,
	caseExpiredToken, caseOtherTaskToken, caseOldAttemptToken, caseNoClientCert}

// authzKinds are the credentials the matrix knows.
var authzKinds = []api.Auth{api.AuthNone, api.AuthAPIKey, api.AuthCapabilityToken, api.AuthCallbackToken, api.AuthMTLS}

// authzPublicRoutes are the only routes anyone may call without a credential.
var authzPublicRoutes = []string{"GET /healthz", "GET /readyz", "GET /openapi.json", "GET /docs/api", "GET /docs/api/redoc.standalone.js"}

// authzContentTypes are the answers of public routes that are not JSON: the rendered reference.
var authzContentTypes = map[string]string{
	"GET /docs/api":                     "text/html; charset=utf-8",
	"GET /docs/api/redoc.standalone.js": "application/javascript; charset=utf-8",
}

// authzAnswer is an expected answer: its status, its "error" member and, in the worker dialects,
// its "message" member ("" checks nothing), and for a success whatever check says is wrong.
type authzAnswer struct {
	status         int
	contentType    string // "": application/json
	error, message string
	check          func(res response) string
}

// mismatch says how res differs from a, or "".
func (a authzAnswer) mismatch(res response) string {
	switch {
	case res.Status != a.status:
		return fmt.Sprintf("%d %s, want %d %q %q", res.Status, res.Raw, a.status, a.error, a.message)
	case res.Header.Get("Content-Type") != cmp.Or(a.contentType, "application/json"):
		return fmt.Sprintf("Content-Type %q, want %s", res.Header.Get("Content-Type"), cmp.Or(a.contentType, "application/json"))
	case a.error != "" && res.Body["error"] != a.error, a.message != "" && res.Body["message"] != a.message:
		return fmt.Sprintf("%d %s, want error %q message %q", res.Status, res.Raw, a.error, a.message)
	case a.check != nil:
		return a.check(res)
	}
	return ""
}

// authzFixture is tenant acme's world: a key, a producer job, two pipelines with a buffered
// dataset and one of its batches, and three tasks for the worker dialects — target, whose attempt
// 1 failed and whose attempt 2 runs, and other, whose attempt 1 runs (both of a plain job, which
// writes no dataset), and writer, a task of the pipeline job whose output the buffered dataset
// is, whose attempt 1 runs.
type authzFixture struct {
	w                         *workerAPI
	key, wrongKey, revokedKey string
	jobID, idempotencyKey     string // acme's producer job and the Idempotency-Key it was created with
	pipeline, version         string // acme's pipeline with sources, and its version
	dataset                   string // the uuid of acme's buffered dataset
	batchID                   int64  // a batch of it
	target, other, lease2     string
	tok1, tok2, tokOther      string // target's attempts 1 and 2, other's attempt 1
	expired                   string // target's attempt 2, expired an hour ago
	writer, writerLease       string // writer's attempt 1
	writerTok                 string
	bundle, spare             string // acme's bundles: one a job runs, one the last checks disable
	bundleTok                 string // the token of an attempt of the job that runs bundle
	intruders                 int
}

func newAuthzFixture(t *testing.T, w *workerAPI) *authzFixture {
	t.Helper()
	ctx := context.Background()
	f := &authzFixture{w: w, key: w.apiKey("acme"), wrongKey: "bk_this-is-not-a-key-of-this-server", idempotencyKey: "authz-matrix"}
	revokedID, revoked := newSecret(t, w.st, "acme")
	if err := w.st.APIKeyRevoke(ctx, revokedID, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.revokedKey = revoked

	res := w.request("POST", w.public.URL+"/jobs", exampleJob, "x-api-key", f.key, "Idempotency-Key", f.idempotencyKey)
	wantStatus(t, res, http.StatusCreated)
	f.jobID = res.Body["jobId"].(string)
	f.dataset = w.buffered()
	res = w.request("POST", w.public.URL+"/pipelines", sourcesPipeline, "x-api-key", f.key, "Content-Type", "application/yaml")
	wantStatus(t, res, http.StatusCreated)
	f.pipeline, f.version = res.Body["name"].(string), res.Body["version"].(string)

	_, ids := w.submit(callbackSpec("target", "op"), callbackSpec("other", "op"))
	f.target, f.other = ids["target"], ids["other"]
	c1, tok1 := w.claim(f.target)
	c2, tok2 := callbackRetried(t, w, c1)
	_, f.tokOther = w.claim(f.other)
	f.tok1, f.tok2, f.lease2 = tok1, tok2, c2.Task.LeaseToken
	f.expired = callbackExpiredToken(t, w, c2.Task)
	run, err := w.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "acme", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	cw, writerTok := w.claim(run.TaskID)
	f.writer, f.writerLease, f.writerTok = run.TaskID, cw.Task.LeaseToken, writerTok
	wantOK(t, w.post(w.internal.URL, "/internal/buffer-publish", fencedCalls[2].body(w, f.writer, 1, f.writerLease)))
	pubs, err := w.st.BufferPublishListByTask(ctx, f.writer)
	if err != nil || len(pubs) != 1 {
		t.Fatalf("the batch of the fixture: %v %d", err, len(pubs))
	}
	f.batchID = pubs[0].ID
	f.bundle, f.spare = w.uploadBundle("acme", pyBundle(t)), w.uploadBundle("acme", pyBundle(t))
	res = w.request("POST", w.public.URL+"/pipelines", udfPipeline(f.bundle, ""), "x-api-key", f.key, "Content-Type", "application/yaml")
	wantStatus(t, res, http.StatusCreated)
	run, err = w.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "acme", Pipeline: "userland", Job: "evaluate"})
	if err != nil {
		t.Fatal(err)
	}
	_, f.bundleTok = w.claim(run.TaskID)
	return f
}

// intruder is the key of a new tenant that owns nothing.
func (f *authzFixture) intruder(t *testing.T) string {
	t.Helper()
	f.intruders++
	_, secret := newSecret(t, f.w.st, "intruder-"+strconv.Itoa(f.intruders))
	return secret
}

// request is the matrix's request of rt on acme's resources (for the worker dialects: target's
// current attempt): its path, body and headers other than the credential.
func (f *authzFixture) request(t *testing.T, rt api.Route) (target string, body any, headers []string) {
	t.Helper()
	target = pathParam.ReplaceAllStringFunc(rt.Pattern, func(p string) string {
		switch p {
		case "{jobId}":
			return f.jobID
		case "{taskId}":
			return "scrape-store"
		case "{name}":
			if strings.HasPrefix(rt.Pattern, "/datasets/") {
				return f.dataset
			}
			return f.pipeline
		case "{version}":
			return f.version
		case "{job}":
			return "backfill"
		case "{path...}":
			return "github/push"
		case "{id}":
			return strconv.FormatInt(f.batchID, 10)
		case "{task_id}":
			return f.target
		case "{dataset}":
			return f.dataset
		case "{bundle_id}":
			return f.bundle
		}
		t.Fatalf("%s %s: the matrix does not know the path parameter %s: say which of acme's resources it names", rt.Method, rt.Pattern, p)
		return ""
	})
	switch rt.Method + " " + rt.Pattern {
	case "POST /jobs":
		return target, exampleJob, []string{"Idempotency-Key", f.idempotencyKey}
	case "POST /jobs/{jobId}/tasks":
		return target, tasksBody(tk("late", "x")), nil
	case "POST /pipelines":
		return target, sourcesPipeline, []string{"Content-Type", "application/yaml"}
	case "POST /pipelines/{name}/jobs/{job}/run":
		return target, `{"from": 1}`, nil
	case "POST /webhooks/{path...}":
		return target, `{"ref": "main"}`, nil
	case "POST /datasets/{name}/current":
		return target, `{"dataset_version": "v1"}`, nil
	case "POST /v1/task/credentials":
		return target, fencedCalls[0].body(f.w, f.target, 2, f.lease2), nil
	case "POST /v1/query":
		return target, map[string]any{"sql": `SELECT count(*) FROM "` + f.dataset + `"`}, nil
	case "POST /v1/udf/bundles":
		return target, pyBundle(t), []string{"Content-Type", "application/zip"}
	case "POST /v1/task/query":
		return target, fmt.Sprintf(`{"task_id": %q, "attempt": 2, "lease_token": %q, "sql": "SELECT 1"}`, f.target, f.lease2), nil
	}
	switch rt.Auth {
	case api.AuthCapabilityToken:
		if rt.Method == http.MethodGet {
			return target, nil, nil // a read: the token alone names the attempt
		}
		for _, c := range fencedCalls {
			if c.scopedPath == rt.Pattern {
				return target, c.body(f.w, f.target, 2, f.lease2), nil
			}
		}
		t.Fatalf("%s %s: the matrix has no body for this task-scoped route", rt.Method, rt.Pattern)
	case api.AuthCallbackToken:
		switch path.Base(rt.Pattern) {
		case "started":
			return target, callbackStart(2), nil
		case "heartbeat":
			return target, callbackBeat(2), nil
		case "completed":
			return target, callbackSucceeded(2), nil
		}
		t.Fatalf("%s %s: the matrix has no body for this callback route", rt.Method, rt.Pattern)
	case api.AuthMTLS:
		return target, `{}`, nil
	}
	return target, nil, nil
}

// credential is what a caller of case c sends to a route of kind a: a key in x-api-key, or a
// token where the route's dialect reads it (in both places a task dialect reads one, for a route
// of another kind).
func (f *authzFixture) credential(c string, a api.Auth, intruder string) []string {
	var key, token string
	switch c {
	case caseWrongKey:
		key = f.wrongKey
	case caseRevokedKey:
		key = f.revokedKey
	case caseOtherTenantKey:
		key = intruder
	case caseExpiredToken:
		token = f.expired
	case caseOtherTaskToken:
		token = f.tokOther
	case caseOldAttemptToken:
		token = f.tok1
	}
	var h []string
	if key != "" {
		h = append(h, "x-api-key", key)
	}
	switch {
	case token == "":
	case a == api.AuthCapabilityToken:
		h = append(h, "X-Trace-Task-Capability", token)
	case a == api.AuthCallbackToken:
		h = append(h, "Authorization", "Bearer "+token)
	default:
		h = append(h, "X-Trace-Task-Capability", token, "Authorization", "Bearer "+token)
	}
	return h
}

// otherTenant is the answer of each producer route to another tenant's key, for acme's resources:
// 404 for what acme owns, nothing of acme's in a listing, and a creation that is the intruder's
// own (not acme's job of the same Idempotency-Key, not acme's pipeline of the same name).
func (f *authzFixture) otherTenant() map[string]authzAnswer {
	notFound := func(text string) authzAnswer { return authzAnswer{status: http.StatusNotFound, error: text} }
	empty := func(member string) authzAnswer {
		return authzAnswer{status: http.StatusOK, check: func(res response) string {
			if list, ok := res.Body[member].([]any); !ok || len(list) != 0 {
				return "lists " + string(res.Raw)
			}
			return ""
		}}
	}
	return map[string]authzAnswer{
		"POST /jobs": {status: http.StatusCreated, check: func(res response) string {
			if id, _ := res.Body["jobId"].(string); id == "" || id == f.jobID {
				return "answered acme's job of the same Idempotency-Key: " + string(res.Raw)
			}
			return ""
		}},
		"GET /jobs":                               empty("jobs"),
		"GET /jobs/{jobId}":                       notFound("Job not found"),
		"POST /jobs/{jobId}/tasks":                notFound("Job not found"),
		"GET /jobs/{jobId}/tasks/{taskId}":        notFound("Job not found"),
		"POST /jobs/{jobId}/cancel":               notFound("Job not found"),
		"POST /jobs/{jobId}/resume":               notFound("Job not found"),
		"GET /jobs/{jobId}/events":                notFound("Job not found"),
		"GET /jobs/{jobId}/tasks/{taskId}/events": notFound("Job not found"),
		"POST /pipelines": {status: http.StatusCreated, check: func(res response) string {
			if res.Body["created"] != true {
				return "deployed onto acme's pipeline of the same name: " + string(res.Raw)
			}
			return ""
		}},
		"GET /pipelines":                                     empty("pipelines"),
		"GET /pipelines/{name}":                              notFound("Pipeline not found"),
		"GET /pipelines/{name}/versions":                     notFound("Pipeline not found"),
		"GET /pipelines/{name}/versions/{version}":           notFound("Pipeline not found"),
		"POST /pipelines/{name}/rollback":                    notFound("Pipeline not found"),
		"POST /pipelines/{name}/versions/{version}/activate": notFound("Pipeline not found"),
		"DELETE /pipelines/{name}/versions/{version}":        notFound("Pipeline not found"),
		"POST /pipelines/{name}/jobs/{job}/run":              notFound("Pipeline not found"),
		"POST /webhooks/{path...}":                           notFound("No webhook source at this path"),
		"GET /datasets":                                      empty("datasets"),
		"GET /datasets/{name}":                               notFound("Dataset not found"),
		"POST /datasets/{name}/current":                      notFound("Dataset not found"),
		"GET /datasets/{name}/rows":                          notFound("Dataset not found"),
		"GET /datasets/{name}/dead-letters":                  notFound("Dataset not found"),
		"POST /datasets/{name}/dead-letters/{id}/retry":      notFound("Dataset not found"),
		// acme's dataset is no relation another tenant may name (501 in a build without cgo).
		"POST /v1/query": {status: queryStatus(http.StatusBadRequest), check: func(res response) string {
			if engine.Available && res.Body["error"] != "unknown_dataset" {
				return "named acme's dataset: " + string(res.Raw)
			}
			return ""
		}},
		"POST /v1/udf/bundles": {status: http.StatusCreated, check: func(res response) string {
			if id, _ := res.Body["bundle_id"].(string); id == "" || id == f.bundle || id == f.spare {
				return "answered one of acme's bundles: " + string(res.Raw)
			}
			return ""
		}},
		"GET /v1/udf/bundles":                       empty("bundles"),
		"GET /v1/udf/bundles/{bundle_id}":           notFound("Bundle not found"),
		"POST /v1/udf/bundles/{bundle_id}/finalize": notFound("Bundle not found"),
		"POST /v1/udf/bundles/{bundle_id}/disable":  notFound("Bundle not found"),
		"GET /v1/query/audit": {status: http.StatusOK, check: func(res response) string {
			if strings.Contains(string(res.Raw), f.dataset) || strings.Contains(string(res.Raw), `"task:`) {
				return "lists acme's queries: " + string(res.Raw)
			}
			return ""
		}},
	}
}

// queryStatus is the status of a query that reaches the engine: 501 in a build without one.
func queryStatus(status int) int {
	if !engine.Available {
		return http.StatusNotImplemented
	}
	return status
}

// expect is the answer of rt to case c, and false when the case does not apply to it.
func (f *authzFixture) expect(t *testing.T, rt api.Route, target, c string, public map[string]bool) (authzAnswer, bool) {
	key := rt.Method + " " + rt.Pattern
	switch rt.Auth {
	case api.AuthNone:
		// The allowlist is checked by the caller; credentials change nothing.
		return authzAnswer{status: http.StatusOK, contentType: authzContentTypes[key]}, c != caseNoClientCert
	case api.AuthAPIKey:
		switch c {
		case caseWrongKey, caseRevokedKey:
			return authzAnswer{status: http.StatusUnauthorized, error: "invalid API key"}, true
		case caseOtherTenantKey:
			a, ok := f.otherTenant()[key]
			if !ok {
				t.Errorf("the matrix has no answer of %s to another tenant's key: add it to otherTenant", key)
			}
			return a, ok
		case caseNoClientCert:
			return authzAnswer{}, false
		}
		// No key, or a task token, which is no credential here.
		return authzAnswer{status: http.StatusUnauthorized, error: "missing API key: send it in the x-api-key header"}, true
	case api.AuthCapabilityToken, api.AuthCallbackToken:
		refused := func(status int, code, message string) (authzAnswer, bool) {
			return authzAnswer{status: status, error: code, message: message}, true
		}
		read := rt.Method == http.MethodGet // the token alone names the attempt, and its datasets
		switch c {
		case caseExpiredToken:
			return refused(http.StatusUnauthorized, "unauthorized", "task capability token expired")
		case caseOtherTaskToken:
			if rt.Pattern == "/v1/task/bundle" {
				return refused(http.StatusForbidden, "forbidden", "this task's job runs no bundle")
			}
			if read {
				return refused(http.StatusForbidden, "forbidden", fmt.Sprintf("dataset %q is not one this task reads or writes: "+
					"a task reads only its job's inputs and outputs", f.dataset))
			}
			return refused(http.StatusForbidden, "forbidden", "capability token does not cover this task attempt")
		case caseOldAttemptToken:
			if read {
				return refused(http.StatusConflict, "attempt_mismatch", "attempt mismatch: current attempt is 2, got 1")
			}
			return refused(http.StatusForbidden, "forbidden", "capability token does not cover this task attempt")
		case caseNoClientCert:
			return authzAnswer{}, false
		}
		// No token; an API key is no credential here.
		return refused(http.StatusUnauthorized, "unauthorized", "missing task capability token")
	case api.AuthMTLS:
		// The certificate is checked by the TLS handshake (authzMTLS). Without one, the route must
		// not be reachable through the public listener, which asks for none.
		if c != caseNoCredential || public[key] {
			return authzAnswer{}, false
		}
		return authzAnswer{status: http.StatusNotFound, error: "no such endpoint: " + rt.Method + " " + target}, true
	}
	return authzAnswer{}, false // not one of authzKinds: refused by the caller
}

// authzState is everything of acme's that a request could change, as one comparable string.
func authzState(t *testing.T, st store.Store) string {
	t.Helper()
	ctx := context.Background()
	var parts []any
	jobs, err := st.JobList(ctx, store.ListJobsParams{Tenant: "acme", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		tasks, err := st.TaskListByJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		events, err := st.EventList(ctx, store.EventListParams{JobID: j.ID, Limit: 100000})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, j, tasks, events)
		for _, tk := range tasks {
			task, err := st.TaskGet(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			attempts, err := st.AttemptList(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			dsEvents, err := st.DatasetEventListByTask(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			pubs, err := st.BufferPublishListByTask(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, task, attempts, dsEvents, pubs)
		}
	}
	pipelines, err := st.PipelineList(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pipelines {
		versions, err := st.PipelineVersionList(ctx, "acme", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p, versions)
	}
	datasets, err := st.DatasetList(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range datasets {
		versions, err := st.DatasetVersionList(ctx, d.UUID)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, d, versions)
	}
	bundles, err := st.BundleList(ctx, store.BundleListParams{Tenant: "acme", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	parts = append(parts, bundles)
	b, err := json.Marshal(parts)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAuthorizationMatrix(t *testing.T) {
	t.Run(caseNoClientCert, authzMTLS)
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		f := newAuthzFixture(t, w)
		routes := w.server.Routes()
		public := map[string]bool{}
		for _, rt := range routes {
			if rt.Listener == api.PublicListener {
				public[rt.Method+" "+rt.Pattern] = true
			}
		}
		before := authzState(t, w.st)
		checked, skipped := 0, 0
		for _, rt := range routes {
			key := rt.Method + " " + rt.Pattern
			t.Run(string(rt.Listener)+" "+key, func(t *testing.T) {
				if !slices.Contains(authzKinds, rt.Auth) {
					t.Fatalf("Auth %q, which the authorization matrix does not know", rt.Auth)
				}
				switch {
				case rt.Listener == api.InternalListener && rt.Auth != api.AuthMTLS:
					t.Errorf("an internal route with Auth %q: every route of the internal listener is behind its client certificate", rt.Auth)
				case rt.Listener == api.PublicListener && rt.Auth == api.AuthMTLS:
					t.Errorf("a public route with Auth mtls: the public listener asks for no client certificate")
				case rt.Listener != api.PublicListener && rt.Listener != api.InternalListener:
					t.Errorf("listener %q, which the authorization matrix does not know", rt.Listener)
				case rt.Auth == api.AuthNone && !slices.Contains(authzPublicRoutes, key):
					t.Errorf("served without a credential, and not one of the public routes %v", authzPublicRoutes)
				}
				target, body, headers := f.request(t, rt)
				// Every case is sent to the public listener; the internal listener's credential,
				// its client certificate, is the TLS subtest's.
				base := w.public.URL
				for _, c := range authzCases {
					want, ok := f.expect(t, rt, target, c, public)
					if !ok {
						skipped++
						continue
					}
					checked++
					var intruder string
					if c == caseOtherTenantKey {
						intruder = f.intruder(t)
					}
					res, err := roundTrip(rt.Method, base+target, body, append(slices.Clone(headers), f.credential(c, rt.Auth, intruder)...)...)
					if err != nil {
						t.Fatalf("%s: %v", c, err)
					}
					if msg := want.mismatch(res); msg != "" {
						t.Errorf("%s: %s", c, msg)
					}
				}
			})
		}
		checked += authzTaskRefusals(t, f)
		if after := authzState(t, w.st); after != before {
			t.Errorf("refused requests changed acme's state:\n%s\n%s", before, after)
		}
		internal := len(routes) - len(public)
		t.Logf("%d routes × %d cases = %d cells: %d checked here, %d (%q × the internal routes) by the TLS subtest, %d not applicable",
			len(routes), len(authzCases), len(routes)*len(authzCases), checked, internal, caseNoClientCert, skipped-internal)

		// The right credential gets through every route that asks for one: the refusals above are
		// not the answer to everyone. (These change state; they come last.)
		for _, rt := range routes {
			var cred []string
			switch rt.Auth {
			case api.AuthAPIKey:
				cred = []string{"x-api-key", f.key}
			case api.AuthCapabilityToken:
				cred = []string{"X-Trace-Task-Capability", f.tok2}
			case api.AuthCallbackToken:
				cred = []string{"Authorization", "Bearer " + f.tok2}
			default:
				continue
			}
			target, body, headers := f.request(t, rt)
			switch rt.Pattern {
			case "/v1/task/buffer-publish":
				// Only a task of a job that writes the dataset may publish into it.
				cred, body = []string{"X-Trace-Task-Capability", f.writerTok}, fencedCalls[2].body(w, f.writer, 1, f.writerLease)
			case "/v1/task/datasets/{dataset}/rows":
				// Only a task of a job that reads or writes the dataset may read its rows.
				cred = []string{"X-Trace-Task-Capability", f.writerTok}
			case "/v1/task/bundle":
				// Only a task of a job that runs a bundle downloads one.
				cred = []string{"X-Trace-Task-Capability", f.bundleTok}
			case "/v1/udf/bundles/{bundle_id}/disable":
				// The bundle the job runs stays enabled for its download.
				target = strings.Replace(target, f.bundle, f.spare, 1)
			}
			res, err := roundTrip(rt.Method, w.public.URL+target, body, append(headers, cred...)...)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status == http.StatusNotImplemented && rt.Pattern == "/v1/task/credentials" && !w.minting {
				continue // no S3 server to mint on: the credential was accepted all the same
			}
			if res.Status == http.StatusNotImplemented && strings.HasSuffix(rt.Pattern, "/query") && !engine.Available {
				continue // a build without cgo has no query engine: the credential was accepted all the same
			}
			if res.Status == http.StatusUnauthorized || res.Status == http.StatusForbidden || res.Status == http.StatusNotFound || res.Status >= 500 {
				t.Errorf("%s %s with acme's credential: %d %s", rt.Method, target, res.Status, res.Raw)
			}
		}
	})
}

// authzTaskRefusals sends what a task with a valid credential still may not do, on both
// listeners, and returns how many requests it checked: report events on another tenant's dataset
// (refused whole, stored nowhere, never shown to that tenant), publish into a buffered dataset
// its job does not write, or register a version whose files lie outside its dataset's prefix. The
// caller checks that acme's state did not change.
func authzTaskRefusals(t *testing.T, f *authzFixture) int {
	t.Helper()
	w, ctx := f.w, context.Background()
	if _, err := w.dp.Deploy(ctx, "victim", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	victims, err := w.st.DatasetGetByName(ctx, "victim", "alert_events")
	if err != nil {
		t.Fatal(err)
	}
	foreign := []any{map[string]any{"dataset_uuid": victims.UUID, "dataset_version": victims.CurrentVersion, "cursor": 1}}
	eventRefusal := authzAnswer{status: http.StatusBadRequest, error: "invalid_request",
		message: fmt.Sprintf("events[0]: dataset_uuid %q: this tenant has no such dataset", victims.UUID)}
	fence := func(m map[string]any) map[string]any {
		m["task_id"], m["attempt"], m["lease_token"] = f.target, 2, f.lease2
		return m
	}
	outside := "s3://trace-scratch/buffers/"
	cases := []struct {
		name, path string
		body       map[string]any
		want       authzAnswer
	}{
		{"an event on another tenant's dataset", "/v1/task/events", fence(map[string]any{"events": foreign}), eventRefusal},
		{"a final event on another tenant's dataset", "/v1/task/complete", fence(map[string]any{"status": "Completed", "events": foreign}), eventRefusal},
		{"a batch of a dataset the task's job does not write", "/v1/task/buffer-publish", fencedCalls[2].body(w, f.target, 2, f.lease2),
			authzAnswer{status: http.StatusForbidden, error: "forbidden", message: `dataset "alert_events" is not an output of this task's job: ` +
				"only tasks of the pipeline job that publishes a buffered dataset may publish batches into it"}},
		{"a version outside its dataset's prefix", "/v1/task/complete", fence(map[string]any{"status": "Completed", "datasets_published": []any{
			map[string]any{"dataset_uuid": f.dataset, "dataset_version": "v9", "storage_ref": outside}}}),
			authzAnswer{status: http.StatusBadRequest, error: "invalid_request", message: fmt.Sprintf(
				"datasets_published[0].storage_ref: %q is not under the dataset's own prefix s3://trace-scratch/datasets/%s/", outside, f.dataset)}},
	}
	n := 0
	for _, c := range cases {
		for _, l := range []struct {
			base, path string
			cred       []string
		}{
			{w.public.URL, c.path, []string{"X-Trace-Task-Capability", f.tok2}},
			{w.internal.URL, strings.NewReplacer("/v1/task/complete", "/internal/task-complete", "/v1/task/", "/internal/").Replace(c.path), nil},
		} {
			res, err := roundTrip("POST", l.base+l.path, c.body, l.cred...)
			if err != nil {
				t.Fatal(err)
			}
			if msg := c.want.mismatch(res); msg != "" {
				t.Errorf("%s (%s): %s", c.name, l.path, msg)
			}
			n++
		}
	}
	// The victim sees none of it.
	res, err := roundTrip("GET", w.public.URL+"/datasets/alert_events", nil, "x-api-key", w.apiKey("victim"))
	if err != nil {
		t.Fatal(err)
	}
	if evs, ok := res.Body["recent_events"].([]any); res.Status != http.StatusOK || !ok || len(evs) != 0 {
		t.Errorf("the victim's dataset: %d %s, want no recent event", res.Status, res.Raw)
	}
	if evs, _ := w.st.DatasetEventListByTask(ctx, f.target); len(evs) != 0 {
		t.Errorf("refused events were stored: %+v", evs)
	}
	return n
}

// authzMTLS serves the internal listener behind the production mutual TLS (mtls.ServerConfig
// with development certificates): every internal route refuses a client without a certificate at
// the handshake, and answers one with a certificate of the CA.
func authzMTLS(t *testing.T) {
	t.Parallel()
	w := newWorkerAPI(t, storetest.OpenSQLite(t))
	dc, err := mtls.WriteDevCerts(filepath.Join(t.TempDir(), "certs"), nil, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	serverConf, err := mtls.ServerConfig(dc.ServerCert, dc.ServerKey, dc.CA)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(w.server.InternalHandler())
	srv.TLS = serverConf
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	withCert, err := mtls.ClientConfig(dc.CA, dc.ClientCert, dc.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	noCert := withCert.Clone()
	noCert.Certificates = nil
	client := func(conf *tls.Config) *http.Client {
		tr := &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	refused, admitted := client(noCert), client(withCert)
	send := func(c *http.Client, rt api.Route) (*http.Response, error) {
		req, err := http.NewRequest(rt.Method, srv.URL+rt.Pattern, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
		}
		return res, err
	}
	n := 0
	for _, rt := range w.server.Routes() {
		if rt.Listener != api.InternalListener {
			continue
		}
		n++
		res, err := send(refused, rt)
		var opErr *net.OpError
		switch {
		case err == nil:
			t.Errorf("%s %s without a client certificate: HTTP %d, want the TLS handshake refused", rt.Method, rt.Pattern, res.StatusCode)
		case !errors.As(err, &opErr) || opErr.Op == "dial" || (opErr.Op != "remote error" && !errors.Is(err, syscall.ECONNRESET)):
			t.Errorf("%s %s without a client certificate: %v, want the server's TLS alert", rt.Method, rt.Pattern, err)
		}
		res, err = send(admitted, rt)
		if err != nil {
			t.Errorf("%s %s with a client certificate: %v", rt.Method, rt.Pattern, err)
		} else if res.StatusCode >= 500 {
			t.Errorf("%s %s with a client certificate: HTTP %d", rt.Method, rt.Pattern, res.StatusCode)
		}
	}
	if n == 0 {
		t.Fatal("the route table has no internal route")
	}
	t.Logf("%d internal routes over mutual TLS", n)
}
