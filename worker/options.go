package worker

import (
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
)

const (
	defaultShutdownTimeout = 30 * time.Second
	defaultPollWait        = 20 * time.Second
	// maxPollWait is the longest long poll the server accepts (max_wait_ms ≤ 60000).
	maxPollWait = time.Minute
)

type config struct {
	onSecret          func(value string) // WithSecretHook
	isolation         string             // WithIsolation
	queues            []string
	concurrency       int
	batchSize         int
	heartbeatInterval time.Duration
	workerID          string
	httpClient        *http.Client
	caFile            string
	certFile          string
	keyFile           string
	logger            *slog.Logger
	shutdownTimeout   time.Duration
	pollWait          time.Duration
	// Wake-ups from a transport instead of long polls (WithWakeups).
	wakeKind, wakeURL, wakeNamespace string
	blobURL                          string // WithBlob
	// tracerProvider starts the task spans (WithTracerProvider); nil: OpenTelemetry's global.
	tracerProvider trace.TracerProvider
	// idleTimeout stops Run after that long with no work (WithIdleTimeout); jobIdle follows the
	// claimed jobs' idle_timeout instead (WithJobIdleTimeout).
	idleTimeout *time.Duration
	jobIdle     bool
}

// Option configures a Worker.
type Option func(*config)

// WithQueues sets the queues to claim from, in priority order. By default a worker claims from
// the queues named after its handlers' task names (a task's queue defaults to its name), as
// registered when Run starts.
func WithQueues(queues ...string) Option {
	return func(c *config) { c.queues = append([]string(nil), queues...) }
}

// WithConcurrency sets how many tasks run at once (default 1). A task's slot is free again once
// its handler returns; its outcome is then reported in the background, with at most as many
// outcomes waiting for the server's answer as the concurrency, so that a worker holds at most
// twice its concurrency in leases.
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// WithBatchSize sets how many claim requests are in flight at once (default 1). The worker never
// claims more tasks than it has free slots, so values above the concurrency do not help. The
// server lets one worker id have 8 claims waiting at once; more are refused (429) and sent again
// a second later.
func WithBatchSize(n int) Option { return func(c *config) { c.batchSize = n } }

// WithHeartbeatInterval caps the interval between heartbeats. The worker heartbeats every
// min(d, the interval the server asks for in each claim); by default it uses the server's.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(c *config) { c.heartbeatInterval = d }
}

// WithWorkerID sets the id the worker claims under (default hostname-pid).
func WithWorkerID(id string) Option { return func(c *config) { c.workerID = id } }

// WithHTTPClient sends requests with hc. Leave its Timeout at zero: claims are long polls, and
// every request already carries its own deadline. By default the worker uses a client that keeps
// an idle connection per concurrent task.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithClientCert authenticates the worker to the server's internal listener with mutual TLS: it
// trusts only the CA in caFile and presents the client certificate in certFile and keyFile.
func WithClientCert(caFile, certFile, keyFile string) Option {
	return func(c *config) { c.caFile, c.certFile, c.keyFile = caFile, certFile, keyFile }
}

// WithSecretHook calls fn with the value of every secret the worker receives for a task (Task.Secret),
// before any handler sees it: a log redactor learns it there.
func WithSecretHook(fn func(value string)) Option { return func(c *config) { c.onSecret = fn } }

// WithIsolation says, with each claim, how contained the untrusted code this worker runs is (an
// isolation level: none, limits, landlock, seccomp, namespaces); the dashboard's worker list
// shows it. `baton worker` says its own.
func WithIsolation(level string) Option { return func(c *config) { c.isolation = level } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithShutdownTimeout sets how long Run waits, once its context ends, for running handlers to
// finish and their outcomes to be reported (default 30 s). Handlers still running then have
// their contexts cancelled and are handed back to the server as retryable INFRASTRUCTURE
// failures.
func WithShutdownTimeout(d time.Duration) Option { return func(c *config) { c.shutdownTimeout = d } }

// WithPollWait sets how long one claim request waits for a task (default 20 s, at most 60 s).
func WithPollWait(d time.Duration) Option { return func(c *config) { c.pollWait = d } }

// WithWakeups makes the worker wait for wake-ups on a transport instead of long-polling the
// server: kind "redis" (Redis Streams; url redis://host:port[/db]) or "nats" (NATS JetStream; url
// nats://host:port), the transport the server runs with (baton server --transport). For each
// wake-up the worker claims the task by id (/internal/task-claim of the internal dialect); a
// wake-up whose task is no longer claimable (NotClaimed) is acknowledged and skipped. A wake-up is
// acknowledged once the attempt's outcome is reported, so one held by a worker that dies is
// redelivered. The server re-publishes missing wake-ups, so the transport losing messages only
// delays tasks.
func WithWakeups(kind, url string) Option {
	return func(c *config) { c.wakeKind, c.wakeURL = kind, url }
}

// WithWakeupNamespace sets the namespace of the wake-up transport's keys and streams (default
// "baton"); it must match the server's --transport-namespace.
func WithWakeupNamespace(ns string) Option { return func(c *config) { c.wakeNamespace = ns } }

// WithTracerProvider sets the OpenTelemetry tracer provider of the span "baton.task <name>" the
// worker starts around each handler call (default: the global one, otel.GetTracerProvider(),
// which does nothing until the program installs one). The span is a child of the trace context
// the producer submitted the task's job under, when it did; the handler's context carries it, so
// that the spans the handler starts are its children.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}
