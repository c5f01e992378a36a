package api

import (
	"net/http"
	"strings"

	"github.com/baton-dev/baton/internal/api/apidocs"
	"github.com/baton-dev/baton/internal/telemetry"
)

// Listener is the listener a route is served on.
type Listener string

const (
	// PublicListener is ProducerHandler's: producers, and workers of the task-scoped dialects.
	PublicListener Listener = "public"
	// InternalListener is InternalHandler's: trusted workers and sinks, behind mutual TLS.
	InternalListener Listener = "internal"
)

// Auth is the credential a route requires.
type Auth string

const (
	// AuthNone: no credential; only the health checks, the API description and its reference page.
	AuthNone Auth = "none"
	// AuthAPIKey: a producer API key in x-api-key, which names the tenant (authenticated).
	AuthAPIKey Auth = "api-key"
	// AuthCapabilityToken: the attempt's capability token in X-Trace-Task-Capability.
	AuthCapabilityToken Auth = "capability-token"
	// AuthCallbackToken: the attempt's capability token as "Authorization: Bearer <token>".
	AuthCallbackToken Auth = "callback-token"
	// AuthMTLS: a client certificate of the operator's CA, checked by the internal listener's TLS
	// handshake before any handler runs (mtls.ServerConfig); the handlers check nothing more.
	AuthMTLS Auth = "mtls"
)

// Route is one endpoint of one listener.
type Route struct {
	Method, Pattern string
	Listener        Listener
	Auth            Auth
	h               http.Handler
}

// Routes is the route table of both listeners: ProducerHandler and InternalHandler register
// exactly these routes, and a catch-all that answers 404 or 405. Each constructor below pairs a
// credential with the wrapper that checks it, so that a route's Auth is what its handler does.
func (s *Server) Routes() []Route {
	// The producer API, behind the API key: the handler runs for the key's tenant.
	producer := func(method, pattern string, h handler) Route {
		return Route{method, pattern, PublicListener, AuthAPIKey, s.serve(s.authenticated(h))}
	}
	// The task-scoped dialect (taskscoped.go): not behind the API key, the capability token is its
	// credential, and it must cover the task attempt the body names (tokenFence).
	scoped := func(pattern string, op func(fenceFunc) handler) Route {
		return Route{http.MethodPost, pattern, PublicListener, AuthCapabilityToken,
			s.serve(s.fencedErrors(s.withTaskToken(capabilityHeader, op(s.tokenFence))))}
	}
	// The callback dialect (callback.go): not behind the API key, the task token is its only
	// credential. /api/v1/tasks/... is the newer path of the same contract.
	callback := func(pattern string, h handler) Route {
		endpoint := pattern[strings.LastIndex(pattern, "/")+1:]
		h = s.withTaskToken("Authorization", h)
		return Route{http.MethodPost, pattern, PublicListener, AuthCallbackToken, s.serve(s.callbackRefusals(endpoint, h))}
	}
	// The internal listener: its client certificate vouches for the caller.
	internal := func(method, pattern string, h http.Handler) Route {
		return Route{method, pattern, InternalListener, AuthMTLS, h}
	}
	// The internal worker dialect (internal.go) and the sink's endpoints (sink.go).
	fenced := func(method, pattern string, h handler) Route {
		return internal(method, pattern, s.serve(s.fencedErrors(h)))
	}
	// The stream-worker dialect (stream.go, batch.go).
	stream := func(pattern string, h handler) Route {
		return internal(http.MethodPost, pattern, s.serve(s.streamRefusals(h)))
	}

	return []Route{
		// The producer API (producer.go).
		producer("POST", "/jobs", s.createJob),
		producer("GET", "/jobs", s.listJobs),
		producer("GET", "/jobs/{jobId}", s.getJob),
		producer("POST", "/jobs/{jobId}/tasks", s.addTasks),
		producer("GET", "/jobs/{jobId}/tasks/{taskId}", s.getTask),
		producer("POST", "/jobs/{jobId}/cancel", s.cancelJob),
		producer("POST", "/jobs/{jobId}/resume", s.resumeJob),
		producer("GET", "/jobs/{jobId}/events", s.jobEvents),
		producer("GET", "/jobs/{jobId}/tasks/{taskId}/events", s.taskEvents),
		// Pipelines and datasets (pipelines.go, sink.go).
		producer("POST", "/pipelines", s.deployPipeline),
		producer("GET", "/pipelines", s.listPipelines),
		producer("GET", "/pipelines/{name}", s.getPipeline),
		producer("GET", "/pipelines/{name}/versions", s.pipelineVersions),
		producer("GET", "/pipelines/{name}/versions/{version}", s.pipelineVersion),
		producer("POST", "/pipelines/{name}/versions/{version}/activate", s.activatePipelineVersion),
		producer("DELETE", "/pipelines/{name}/versions/{version}", s.abandonPipelineVersion),
		producer("POST", "/pipelines/{name}/rollback", s.rollbackPipeline),
		producer("POST", "/pipelines/{name}/jobs/{job}/run", s.runPipelineJob),
		producer("POST", "/webhooks/{path...}", s.webhook),
		producer("GET", "/datasets", s.listDatasets),
		producer("GET", "/datasets/{name}", s.getDataset),
		producer("POST", "/datasets/{name}/current", s.setCurrentVersion),
		producer("GET", "/datasets/{name}/rows", s.datasetRows),
		producer("GET", "/datasets/{name}/dead-letters", s.batchDeadLetters),
		producer("POST", "/datasets/{name}/dead-letters/{id}/retry", s.retryBatch),
		// User code bundles (udf.go); an upload's body is capped by the bundle limits, not the API's.
		{"POST", "/v1/udf/bundles", PublicListener, AuthAPIKey, s.serveUpload(s.authenticated(s.uploadBundle))},
		producer("GET", "/v1/udf/bundles", s.listBundles),
		producer("GET", "/v1/udf/bundles/{bundle_id}", s.getBundle),
		producer("POST", "/v1/udf/bundles/{bundle_id}/finalize", s.finalizeBundle),
		producer("POST", "/v1/udf/bundles/{bundle_id}/disable", s.disableBundle),
		// The Query Service (query.go).
		producer("POST", "/v1/query", s.userQuery),
		producer("GET", "/v1/query/audit", s.queryAudit),

		// Unauthenticated on the public listener: the health checks, the API description, and its
		// rendered reference with the script that renders it (apidocs).
		{"GET", "/healthz", PublicListener, AuthNone, http.HandlerFunc(s.healthz)},
		{"GET", "/readyz", PublicListener, AuthNone, http.HandlerFunc(s.readyz)},
		{"GET", "/openapi.json", PublicListener, AuthNone, http.HandlerFunc(serveOpenAPI)},
		{"GET", "/docs/api", PublicListener, AuthNone, http.HandlerFunc(apidocs.ServePage)},
		{"GET", "/docs/api/redoc.standalone.js", PublicListener, AuthNone, http.HandlerFunc(apidocs.ServeScript)},

		scoped("/v1/task/heartbeat", s.fencedHeartbeat),
		scoped("/v1/task/complete", s.fencedComplete),
		scoped("/v1/task/events", s.fencedEvents),
		scoped("/v1/task/buffer-publish", s.fencedBufferPublish),
		scoped("/v1/task/credentials", s.fencedCredentials),
		scoped("/v1/task/query", s.fencedQuery),
		{"GET", "/v1/task/datasets/{dataset}/rows", PublicListener, AuthCapabilityToken,
			s.serve(s.fencedErrors(s.withTaskToken(capabilityHeader, s.taskRows)))},
		{"GET", "/v1/task/bundle", PublicListener, AuthCapabilityToken,
			s.serve(s.fencedErrors(s.withTaskToken(capabilityHeader, s.taskBundle)))},

		callback("/v1/tasks/{task_id}/started", s.callbackStarted),
		callback("/v1/tasks/{task_id}/heartbeat", s.callbackHeartbeat),
		callback("/v1/tasks/{task_id}/completed", s.callbackCompleted),
		callback("/api/v1/tasks/{task_id}/started", s.callbackStarted),
		callback("/api/v1/tasks/{task_id}/heartbeat", s.callbackHeartbeat),
		callback("/api/v1/tasks/{task_id}/completed", s.callbackCompleted),

		internal("GET", "/healthz", http.HandlerFunc(s.healthz)),
		internal("GET", "/readyz", http.HandlerFunc(s.readyz)),
		fenced("POST", "/internal/task-claim", s.internalClaim),
		fenced("GET", "/internal/task-fetch", s.internalFetch),
		fenced("POST", "/internal/heartbeat", s.fencedHeartbeat(bodyFence)),
		fenced("POST", "/internal/task-complete", s.fencedComplete(bodyFence)),
		fenced("POST", "/internal/events", s.fencedEvents(bodyFence)),
		fenced("POST", "/internal/buffer-publish", s.fencedBufferPublish(bodyFence)),
		// A trusted runtime's secrets, at launch (secrets.go): never on the public listener.
		fenced("POST", "/internal/task-secrets", s.taskSecrets),
		// The wrapper exchanges its child's capability token, which must cover the body too.
		fenced("POST", "/internal/task-credentials", s.withTaskToken(capabilityHeader, s.fencedCredentials(s.tokenFence))),
		fenced("GET", "/internal/task-datasets/{dataset}/rows", s.withTaskToken(capabilityHeader, s.taskRows)),
		// A trusted worker's query: mutual TLS and the attempt's capability token, which must
		// cover the body's fence.
		fenced("POST", "/internal/task-query", s.withTaskToken(capabilityHeader, s.fencedQuery(s.tokenFence))),
		fenced("POST", "/internal/sink/claim", s.sinkClaim),
		fenced("POST", "/internal/sink/extend", s.sinkExtend),
		fenced("POST", "/internal/sink/commit", s.sinkCommit),
		fenced("POST", "/internal/sink/fail", s.sinkFail),
		stream("/internal/worker/claim", s.streamClaim),
		stream("/internal/worker/heartbeat", s.streamHeartbeat),
		stream("/internal/worker/complete", s.streamComplete),
		stream("/internal/worker/fail", s.streamFail),
		stream("/internal/worker/claim-batch", s.streamClaimBatch),
		// Each report of a batch answers its own refusal (batch.go); a refusal of the whole request
		// has the dialect's shape, as every other stream-worker endpoint's.
		stream("/internal/worker/report-batch", s.streamReportBatch),
	}
}

// The span of a request is outermost: it gives the request a new context, a copy of the request
// that the ServeMux then sets the matched pattern on; the metrics, inside, see that copy too.

// ProducerHandler serves the public listener: the producer API, /openapi.json and its rendering
// under /docs/api, /healthz and /readyz, and the task-scoped and callback dialects, all behind
// the CORS policy; with tracing on, each request in a server span.
func (s *Server) ProducerHandler() http.Handler {
	return telemetry.Handler(s.tracing, s.metrics.Instrument(string(PublicListener), s.corsPolicy.Handler(s.guard(s.mux(PublicListener)))))
}

// InternalHandler serves the worker-facing listener: health checks and the worker dialects; with
// tracing on, each request in a server span.
func (s *Server) InternalHandler() http.Handler {
	return telemetry.Handler(s.tracing, s.metrics.Instrument(string(InternalListener), s.guard(s.mux(InternalListener))))
}

// mux registers the routes of listener l, and the catch-all of the paths it does not serve.
func (s *Server) mux(l Listener) *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range s.Routes() {
		if rt.Listener == l {
			mux.Handle(rt.Method+" "+rt.Pattern, rt.h)
		}
	}
	if l == PublicListener && s.dashboard != nil {
		mux.Handle("/ui/", s.dashboard)
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusSeeOther))
	}
	mux.Handle("/", s.notFound(mux))
	return mux
}
