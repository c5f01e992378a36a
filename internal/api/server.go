// Package api holds the HTTP adapters: one file per wire dialect, each translating its shapes into
// dispatcher calls, and one place (this file) that maps errors to status codes.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/cors"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/secrets"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/udf"
)

// DefaultMaxBodyBytes caps request bodies (4 MiB).
const DefaultMaxBodyBytes = 4 << 20

// Config configures a Server.
type Config struct {
	Dispatcher *dispatch.Dispatcher
	// DataPlane is the data plane over Dispatcher, which the server's composition built (and made
	// the dispatcher's hook); nil serves no data-plane route.
	DataPlane *dataplane.Plane
	Auth      *auth.Authenticator
	// Capabilities mints and checks the capability tokens of the worker dialects, built where the
	// server is composed (it is handed to push delivery too); nil: no token is minted or accepted.
	Capabilities *capability.Issuer
	Logger       *slog.Logger
	MaxBodyBytes int64 // default DefaultMaxBodyBytes
	// EventPoll is how often an event stream looks for new events; default 250 ms.
	EventPoll time.Duration
	// PushTargets, when not nil, are the push targets by task name (push.Config.Targets): a submitted
	// push task whose name has none is refused with a 400.
	PushTargets map[string]string
	// Wakeups, when not nil, is the wake-up transport's view of its messages (Redis Streams):
	// stream-worker claims hand out a task's wake-up entry id, and reports settle it.
	Wakeups transport.MessageIDs
	// CORSOrigins are the browser origins that may call the public listener (internal/cors): {"*"}
	// for every origin, as the producer contract's own API allows (the command line's default), or
	// origins such as "https://app.example.com" (ParseCORSOrigins reads and checks a list).
	// Empty: no CORS.
	CORSOrigins []string
	// MaxPollsPerWorker caps the claim long polls one worker id may have waiting at once (more
	// are answered 429 with Retry-After); 0: DefaultMaxPollsPerWorker, negative: no cap.
	MaxPollsPerWorker int
	// Minter mints the credentials of POST /v1/task/credentials and /internal/task-credentials;
	// nil (object storage that is not S3) answers 501.
	Minter *grant.Minter
	// Dashboard, when set, is the web dashboard (internal/ui): the public listener serves it under
	// /ui/ and redirects / there.
	Dashboard http.Handler
	// Metrics, when not nil, counts the requests of both listeners and the refused credentials.
	Metrics *metrics.Metrics
	// Secrets reads the values of the secrets trusted runtimes receive (POST
	// /internal/task-secrets); nil: a job that declares secrets cannot get them (501).
	Secrets secrets.Provider
	// Redactor learns every value delivered, so that the logs it redacts never show one; nil:
	// a redactor of the server's own, which nothing else uses.
	Redactor *secrets.Redactor
	// Workers records what workers say of themselves when they claim (their isolation level);
	// nil records nothing.
	Workers store.Workers
	// Bundles keeps the tenants' user code bundles; nil: bundles cannot be uploaded (501) and
	// none exists.
	Bundles *udf.Registry
	// TracerProvider, when not nil, gives every request of both listeners a server span
	// (telemetry.Handler); nil traces nothing.
	TracerProvider trace.TracerProvider
}

// CORSOff is the ParseCORSOrigins value that turns CORS off.
const CORSOff = cors.Off

// ParseCORSOrigins reads the Config.CORSOrigins the command line gives (cors.ParseOrigins).
func ParseCORSOrigins(v string) ([]string, error) { return cors.ParseOrigins(v) }

// Server serves Baton's HTTP APIs.
type Server struct {
	d       *dispatch.Dispatcher
	dp      *dataplane.Plane
	auth    *auth.Authenticator
	caps    *capability.Issuer
	log     *slog.Logger
	maxBody int64
	poll    time.Duration

	pushTargets map[string]string
	wakeups     transport.MessageIDs
	corsPolicy  cors.Policy
	polls       *request.Waiting

	minter    *grant.Minter
	dashboard http.Handler
	metrics   *metrics.Metrics

	drainCtx context.Context // ends when the server starts shutting down
	drain    context.CancelFunc

	tracing  trace.TracerProvider // nil: off
	bundles  *udf.Registry        // nil: no bundles
	secrets  secrets.Provider
	redactor *secrets.Redactor
	workers  store.Workers
	notes    workerNotes
}

// Drain ends waiting long polls and event streams: call it when shutdown begins, before
// http.Server.Shutdown waits for in-flight requests.
func (s *Server) Drain() { s.drain() }

// New returns a Server.
func New(cfg Config) *Server {
	s := &Server{d: cfg.Dispatcher, dp: cfg.DataPlane, auth: cfg.Auth, caps: cfg.Capabilities, log: cfg.Logger, maxBody: cfg.MaxBodyBytes, poll: cfg.EventPoll,
		pushTargets: cfg.PushTargets, wakeups: cfg.Wakeups, corsPolicy: cors.NewPolicy(cfg.CORSOrigins),
		polls: newPollCounter(cfg.MaxPollsPerWorker), minter: cfg.Minter, dashboard: cfg.Dashboard,
		metrics: cfg.Metrics}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.poll <= 0 {
		s.poll = 250 * time.Millisecond
	}
	if s.caps == nil {
		s.caps = capability.Disabled
	}
	s.drainCtx, s.drain = context.WithCancel(context.Background())
	s.tracing = cfg.TracerProvider
	s.bundles = cfg.Bundles
	s.secrets, s.redactor, s.workers = cfg.Secrets, cfg.Redactor, cfg.Workers
	if s.redactor == nil {
		s.redactor = secrets.NewRedactor()
	}
	return s
}

// created marks a response that answers 201.
type created struct{ body any }

// handler is an endpoint: it returns what to write as JSON, or an error.
type handler func(w http.ResponseWriter, r *http.Request) (any, error)

// serve wraps an endpoint: it caps the body, writes the JSON answer, and maps errors.
func (s *Server) serve(h handler) http.HandlerFunc { return s.serveCapped(s.maxBody, h) }

// serveUpload is serve for the upload of a bundle, whose body may be as large as an archive may
// be, streamed to a file rather than held.
func (s *Server) serveUpload(h handler) http.HandlerFunc {
	limit := s.maxBody
	if s.bundles != nil {
		limit = max(limit, s.bundles.Limits().Archive+1) // one more: the registry says what is too large
	}
	return s.serveCapped(limit, h)
}

// serveCapped is serve with the body capped at limit bytes.
func (s *Server) serveCapped(limit int64, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		res, err := h(w, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if res == nil { // the handler wrote the response itself (e.g. a stream)
			return
		}
		status := http.StatusOK
		if c, ok := res.(created); ok {
			status, res = http.StatusCreated, c.body
		}
		request.WriteJSON(w, status, res)
	}
}

// writeError answers err with its status code and a JSON body that always has an "error" field.
// Internal errors are logged, and the client sees only a generic text. A 501 is a deliberate
// answer (this server is not set up for what was asked, such as storage credentials without
// STS), not a failure: it is not logged as one.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	he := s.toHTTP(err)
	if he.Status >= 500 && he.Status != http.StatusNotImplemented {
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	for k, v := range he.Header {
		w.Header()[k] = v
	}
	request.WriteJSON(w, he.Status, he.Body)
}

// retryAfterUnavailable is the Retry-After, in seconds, of a 503 for a database that failed.
const retryAfterUnavailable = 2

func (s *Server) toHTTP(err error) *request.Error {
	var (
		he       *request.Error
		invalid  *dispatch.ValidationError
		bad      *dispatch.InvalidError
		conflict *dispatch.ConflictError
		limit    *auth.LimitError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &invalid):
		return &request.Error{Status: http.StatusBadRequest, Body: map[string]any{"error": invalid.Errors[0], "errors": invalid.Errors}}
	case errors.As(err, &bad):
		return request.Errorf(http.StatusBadRequest, "%s", bad.Message)
	case errors.As(err, &conflict):
		return request.Errorf(http.StatusConflict, "%s", conflict.Message)
	case errors.As(err, &tooLarge):
		return request.Errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %d bytes", tooLarge.Limit)
	case errors.Is(err, auth.ErrNoKey):
		return request.Errorf(http.StatusUnauthorized, "missing API key: send it in the x-api-key header")
	case errors.Is(err, auth.ErrBadKey):
		return request.Errorf(http.StatusUnauthorized, "invalid API key")
	case errors.As(err, &limit):
		he := request.Errorf(http.StatusTooManyRequests, "rate limit exceeded")
		if limit.Quota {
			he = request.Errorf(http.StatusTooManyRequests, "daily request quota exceeded")
		}
		secs := int((limit.RetryAfter + time.Second - 1) / time.Second)
		he.Header = http.Header{"Retry-After": {strconv.Itoa(max(secs, 1))}}
		return he
	case errors.Is(err, dispatch.ErrJobNotFound):
		return request.Errorf(http.StatusNotFound, "Job not found")
	case errors.Is(err, dataplane.ErrPipelineVersionNotFound):
		return request.Errorf(http.StatusNotFound, "Pipeline version not found")
	case errors.Is(err, dataplane.ErrPipelineNotFound):
		return request.Errorf(http.StatusNotFound, "Pipeline not found")
	case errors.Is(err, dataplane.ErrPipelineJobNotFound):
		return request.Errorf(http.StatusNotFound, "Pipeline job not found")
	case errors.Is(err, dataplane.ErrWebhookNotFound):
		return request.Errorf(http.StatusNotFound, "No webhook source at this path")
	case errors.Is(err, reads.ErrDatasetNotFound):
		return request.Errorf(http.StatusNotFound, "Dataset not found")
	case errors.Is(err, dispatch.ErrTaskNotFound):
		return request.Errorf(http.StatusNotFound, "Task not found")
	case errors.Is(err, bufferqueue.ErrNotFound):
		return request.Errorf(http.StatusNotFound, "Buffer batch not found")
	case errors.Is(err, bufferqueue.ErrNotClaimed):
		return request.Errorf(http.StatusConflict, "The buffer batch is not claimed by this receive (another receive took it over, or it is settled)")
	case errors.Is(err, dispatch.ErrJobFinished):
		return request.Errorf(http.StatusConflict, "Job already finished")
	case errors.Is(err, dispatch.ErrJobNotFinished):
		return request.Errorf(http.StatusConflict, "Job is still processing; only a finished job can be resumed")
	case errors.Is(err, dispatch.ErrNothingToResume):
		return request.Errorf(http.StatusConflict, "Job has no failed, canceled or skipped tasks to resume")
	case errors.Is(err, dispatch.ErrIdempotencyMismatch):
		return request.Errorf(http.StatusUnprocessableEntity, "Idempotency-Key was already used with a different request body")
	case errors.Is(err, dispatch.ErrInvalidCursor):
		return request.Errorf(http.StatusBadRequest, "invalid cursor: pass the nextCursor of a previous page")
	case errors.Is(err, auth.ErrTokenMissing):
		return request.Errorf(http.StatusUnauthorized, "missing task capability token")
	case errors.Is(err, auth.ErrTokenExpired):
		return request.Errorf(http.StatusUnauthorized, "task capability token expired")
	case errors.Is(err, auth.ErrTokenInvalid):
		return request.Errorf(http.StatusUnauthorized, "invalid task capability token")
	case errors.Is(err, auth.ErrTokenScope):
		return request.Errorf(http.StatusForbidden, "capability token does not cover this task attempt")
	case errors.Is(err, context.Canceled):
		return request.Errorf(499, "request canceled")
	case s.d.Unavailable(err):
		// The database failed transiently and kept failing while the dispatcher retried: the
		// request changed nothing and may be sent again.
		he := request.Errorf(http.StatusServiceUnavailable, "The database is unavailable; try again later")
		he.Header = http.Header{"Retry-After": {strconv.Itoa(retryAfterUnavailable)}}
		return he
	}
	return request.Errorf(http.StatusInternalServerError, "Internal server error")
}
