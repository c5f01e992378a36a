package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/maintenance"
	"github.com/baton-dev/baton/internal/push"
	"github.com/baton-dev/baton/internal/pushsig"
	"github.com/baton-dev/baton/internal/secrets"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/transport"
)

// serverFlags are the settings `baton dev` and `baton server` share.
type serverFlags struct {
	listen, internalListen string
	maxTasksPerJob         int
	maxBodyBytes           int64
	bundleMaxBytes         int64
	secretsSpec            string
	secrets                secrets.Provider // opened by bind
	limits                 auth.Limits
	defaults               dispatch.Defaults
	shutdownTimeout        time.Duration
	// The internal listener's mutual TLS: all three files or none.
	internalTLSCert, internalTLSKey, internalTLSClientCA string
	transport                                            transportFlags
	reconcileEvery, reconcileGrace                       time.Duration
	pushTargets, pushSecrets                             listFlag
	publicURL                                            string
	pushTimeout                                          time.Duration
	// lambdaOnPull hands the tasks of a lambda job whose operator has no push target to pull
	// workers of its queue (baton dev); otherwise they wait for a target.
	lambdaOnPull bool
	groupCommit  bool
	committers   int
	corsOrigins  corsFlag
	// Buffered datasets: object storage, the data database and the in-process sink.
	blobURL, dataDatabaseURL string
	// Task credentials minted on an s3:// store through its STS.
	stsEndpoint, credentialsRole string
	credentialsMaxTTL            time.Duration
	sink                         bool
	sinkFlags                    sinkFlags
	http                         server.HTTPLimits // every listener's
	metricsListen                metricsAddr
	// metricsOptional: a metrics address that cannot be bound is not fatal (baton dev): bind
	// takes a nearby free port, or none, and says so.
	metricsOptional bool
	logFormat       logFormat
	otlp            otlpFlag // --otlp-endpoint: traces
	retention       retentionFlags
	query           queryFlags
}

// sinkFlags tune a sink, in baton sink and in a server's own.
type sinkFlags struct {
	gc         string
	workers    int
	visibility time.Duration
}

func (f *sinkFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.gc, "buffer-gc", sink.GCDelete, "what becomes of a batch artifact once its batch is committed: delete or keep")
	fs.IntVar(&f.workers, "sink-workers", 4, "batches a sink loads at once")
	fs.DurationVar(&f.visibility, "sink-visibility", time.Minute, "how long a batch a sink claimed stays its own before another sink may take it over")
}

func (f *sinkFlags) check() error {
	switch {
	case f.gc != sink.GCDelete && f.gc != sink.GCKeep:
		return fmt.Errorf("--buffer-gc %q: want delete or keep", f.gc)
	case f.workers < 1:
		return errors.New("--sink-workers must be at least 1")
	case f.visibility < time.Second:
		return errors.New("--sink-visibility must be at least 1s")
	}
	return nil
}

// corsFlag is --cors-origins, checked as it is parsed.
type corsFlag struct{ origins []string }

func (c *corsFlag) String() string {
	if c == nil || c.origins == nil {
		return api.CORSOff
	}
	return strings.Join(c.origins, ",")
}

func (c *corsFlag) Set(v string) (err error) {
	c.origins, err = api.ParseCORSOrigins(v)
	return err
}

func (f *serverFlags) register(fs *flag.FlagSet) {
	f.http = server.DefaultHTTPLimits
	def := dispatch.DefaultDefaults
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address of the producer API")
	fs.StringVar(&f.internalListen, "internal-listen", "127.0.0.1:8081", "address of the worker-facing /internal/* API")
	fs.IntVar(&f.maxTasksPerJob, "max-tasks-per-job", 50, "most tasks one job may have (0: no cap)")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body accepted")
	fs.Int64Var(&f.bundleMaxBytes, "bundle-max-bytes", bundle.DefaultLimits.Archive, "largest user code bundle (zip) an upload may send")
	fs.StringVar(&f.secretsSpec, "secrets", "env", "where the secrets jobs declare are read: env (monad_rpc_key from BATON_SECRET_MONAD_RPC_KEY), dir:/run/secrets (one file per name, re-read at each use), or both joined by commas (the first that has it wins)")
	fs.Float64Var(&f.limits.RatePerSecond, "rate-limit", auth.DefaultLimits.RatePerSecond, "requests per second per API key (0: unlimited)")
	fs.IntVar(&f.limits.Burst, "rate-burst", auth.DefaultLimits.Burst, "burst of requests per API key")
	fs.Int64Var(&f.limits.DailyQuota, "daily-quota", auth.DefaultLimits.DailyQuota, "requests per API key per UTC day (0: unlimited)")
	fs.DurationVar(&f.defaults.HeartbeatInterval, "heartbeat-interval", def.HeartbeatInterval, "default heartbeat interval told to workers")
	fs.DurationVar(&f.defaults.HeartbeatTimeout, "heartbeat-timeout", def.HeartbeatTimeout, "default lease TTL (at least twice the interval)")
	fs.IntVar(&f.defaults.MaxAttempts, "max-attempts", def.MaxAttempts, "default attempts per task")
	fs.DurationVar(&f.defaults.BackoffBase, "backoff-base", def.BackoffBase, "default retry backoff base")
	fs.DurationVar(&f.defaults.BackoffMax, "backoff-max", def.BackoffMax, "default retry backoff cap")
	fs.DurationVar(&f.defaults.CancelGrace, "cancel-grace", def.CancelGrace, "default time a cancelled task has to stop")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long to let in-flight requests finish on shutdown")
	fs.StringVar(&f.internalTLSCert, "internal-tls-cert", "", "PEM server certificate of the /internal/* listener (with --internal-tls-key and --internal-tls-client-ca: mutual TLS)")
	fs.StringVar(&f.internalTLSKey, "internal-tls-key", "", "PEM private key of --internal-tls-cert")
	fs.StringVar(&f.internalTLSClientCA, "internal-tls-client-ca", "", "PEM CA bundle that worker client certificates must chain to")
	f.transport.register(fs, "how workers are woken: store (they long-poll the server), redis (Redis Streams) or nats (NATS JetStream)")
	fs.DurationVar(&f.reconcileEvery, "reconcile-every", maintenance.DefaultReconcilerConfig.Every, "with --transport redis|nats: how often missing wake-ups are re-published and dead consumers' ones reclaimed")
	fs.DurationVar(&f.reconcileGrace, "reconcile-grace", maintenance.DefaultReconcilerConfig.Grace, "with --transport redis|nats: how long a task may wait ready before its missing wake-up is re-published")
	fs.Var(&f.pushTargets, "push-target", "`NAME=URL`: deliver tasks named NAME with runtime push to the HTTP target URL (repeatable)")
	fs.Var(&f.pushSecrets, "push-secret", "`NAME=SECRET`: authenticate Baton to the push target of NAME: send SECRET as a bearer token and sign every delivery "+
		"with it (headers Baton-Timestamp and Baton-Signature: v1=HMAC-SHA256); NAME=@FILE reads the secret from FILE (repeatable; without it the target gets no authentication)")
	fs.StringVar(&f.publicURL, "public-url", "", "URL at which push targets reach the producer listener's callback API (default: http://<--listen>)")
	fs.DurationVar(&f.pushTimeout, "push-timeout", 30*time.Second, "how long a push target has to accept a task")
	fs.BoolVar(&f.groupCommit, "group-commit", true, "apply transitions that arrive together in one database transaction (--group-commit=false: one each)")
	fs.IntVar(&f.committers, "committers", 0, "group-commit transactions in flight at once (0: 2 on PostgreSQL, 1 on SQLite); more spread the database work over connections but can deadlock")
	fs.StringVar(&f.blobURL, "blob-url", "", "object storage of buffered datasets' batches: file://DIR or s3://BUCKET/PREFIX (env BATON_BLOB_URL; S3 endpoint, region and credentials from the usual AWS_* variables)")
	fs.StringVar(&f.stsEndpoint, "sts-endpoint", "", "with an s3:// --blob-url: the STS endpoint that mints tasks' credentials (env BATON_STS_ENDPOINT; default: the S3 endpoint, where MinIO serves STS, or AWS's regional STS)")
	fs.StringVar(&f.credentialsRole, "task-credentials-role", "", "with an s3:// --blob-url: the role `ARN` assumed to mint tasks' credentials, narrowed to each task's prefixes by a session policy (env BATON_TASK_CREDENTIALS_ROLE; AWS needs one, MinIO ignores it)")
	fs.DurationVar(&f.credentialsMaxTTL, "task-credentials-max-ttl", 12*time.Hour, "the longest STS session a task's credentials get (at least 15m); they never outlive the task's capability token")
	f.sinkFlags.register(fs)
	f.query.register(fs)
	f.corsOrigins = corsFlag{origins: []string{"*"}}
	fs.Var(&f.metricsListen, "metrics-listen", "`ADDRESS` of GET /metrics, the Prometheus metrics, on a listener of its own (empty: none)")
	f.logFormat.register(fs)
	fs.Var(&f.corsOrigins, "cors-origins", "browser `ORIGINS` that may call the producer listener: * (any), a comma-separated list such as https://app.example.com,http://localhost:5173, or none (no CORS headers, no preflight answers)")
	f.otlp.register(fs)
	f.retention.register(fs)
}

// pushTargetMap parses --push-target NAME=URL flags.
func (f *serverFlags) pushTargetMap() (map[string]string, error) {
	targets := map[string]string{}
	for _, kv := range f.pushTargets {
		name, target, ok := strings.Cut(kv, "=")
		u, err := url.Parse(target)
		if !ok || name == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--push-target %q: want NAME=http(s)://host[:port]/path", kv)
		}
		if _, dup := targets[name]; dup {
			return nil, fmt.Errorf("--push-target: task name %q given twice", name)
		}
		targets[name] = target
	}
	return targets, nil
}

// pushSecretMap parses --push-secret NAME=SECRET and NAME=@FILE flags, for task names that have a
// target. A file's secret loses one trailing newline. Messages never repeat a secret.
func (f *serverFlags) pushSecretMap(targets map[string]string) (map[string]string, error) {
	secrets := map[string]string{}
	for _, kv := range f.pushSecrets {
		name, secret, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, errors.New("--push-secret: want NAME=SECRET or NAME=@FILE")
		}
		if _, ok := targets[name]; !ok {
			return nil, fmt.Errorf("--push-secret %s: task name %q has no --push-target %s=URL", name, name, name)
		}
		if _, dup := secrets[name]; dup {
			return nil, fmt.Errorf("--push-secret: task name %q given twice", name)
		}
		from := "--push-secret " + name
		if file, ok := strings.CutPrefix(secret, "@"); ok {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("%s: read the secret: %w", from, err)
			}
			secret = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			from += " (" + file + ")"
		}
		if err := pushsig.CheckSecret(secret); err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		secrets[name] = secret
	}
	return secrets, nil
}

// internalTLSFlags names the flags that turn on mutual TLS for /internal/*.
const internalTLSFlags = "--internal-tls-cert, --internal-tls-key and --internal-tls-client-ca"

// internalTLS reports whether the internal listener is to use mutual TLS: true when all three
// files are set, false when none is, an error when only some are.
func (f *serverFlags) internalTLS() (bool, error) {
	var set, unset []string
	for _, fl := range []struct{ name, value string }{
		{"--internal-tls-cert", f.internalTLSCert},
		{"--internal-tls-key", f.internalTLSKey},
		{"--internal-tls-client-ca", f.internalTLSClientCA},
	} {
		if fl.value == "" {
			unset = append(unset, fl.name)
		} else {
			set = append(set, fl.name)
		}
	}
	switch {
	case len(unset) == 0:
		return true, nil
	case len(set) == 0:
		return false, nil
	}
	return false, fmt.Errorf("mutual TLS for /internal/* needs all of %s; missing %s", internalTLSFlags, strings.Join(unset, ", "))
}

// listeners are bound before anything is printed, so a port in use fails fast and clearly.
// internalTLS says the internal listener requires a client certificate.
type listeners struct {
	producer, internal net.Listener
	metrics            net.Listener // nil: no --metrics-listen
	internalTLS        bool
	transport          transport.Transport // nil: the store transport
	pushTargets        map[string]string
	pushSecrets        map[string]string
	warnings           []string // what bind settled for instead of what was asked (an optional listener's port)
}

// close releases what bind opened, for a caller that will not serve.
func (ls *listeners) close() {
	ls.producer.Close()
	ls.internal.Close()
	if ls.metrics != nil {
		ls.metrics.Close()
	}
	if ls.transport != nil {
		ls.transport.Close()
	}
}

// bind checks what the flags' parse could not, opens the listeners (server.Listen: the internal
// one behind mutual TLS when its TLS flags are set) and connects to the wake-up transport.
func (f *serverFlags) bind(ctx context.Context) (*listeners, error) {
	useTLS, err := f.internalTLS()
	if err != nil {
		return nil, err
	}
	if err := f.transport.check(); err != nil {
		return nil, err
	}
	targets, err := f.pushTargetMap()
	if err != nil {
		return nil, err
	}
	pushSecrets, err := f.pushSecretMap(targets)
	if err != nil {
		return nil, err
	}
	if f.credentialsMaxTTL < 15*time.Minute {
		return nil, fmt.Errorf("--task-credentials-max-ttl %s: STS sessions last 15m at least", f.credentialsMaxTTL)
	}
	if f.stsEndpoint != "" {
		if u, err := url.Parse(f.stsEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("--sts-endpoint %q: want http(s)://host[:port], without credentials", f.stsEndpoint)
		}
	}
	if f.reconcileEvery <= 0 || f.reconcileGrace <= 0 || f.pushTimeout <= 0 || f.committers < 0 {
		return nil, errors.New("--reconcile-every, --reconcile-grace and --push-timeout must be positive, --committers not negative")
	}
	if f.bundleMaxBytes <= 0 {
		return nil, errors.New("--bundle-max-bytes must be positive")
	}
	if f.secrets, err = secrets.Open(f.secretsSpec); err != nil {
		return nil, fmt.Errorf("--secrets: %w", err)
	}
	if f.publicURL != "" {
		if u, err := url.Parse(f.publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--public-url %q: want http(s)://host[:port]", f.publicURL)
		}
	}
	lcfg := server.ListenConfig{Producer: f.listen, Internal: f.internalListen, Metrics: string(f.metricsListen), MetricsNearby: f.metricsOptional}
	if useTLS {
		lcfg.InternalTLSCert, lcfg.InternalTLSKey, lcfg.InternalTLSClientCA = f.internalTLSCert, f.internalTLSKey, f.internalTLSClientCA
	}
	sl, err := server.Listen(lcfg)
	if err != nil {
		return nil, err
	}
	tr, err := f.transport.open(ctx)
	if err != nil {
		sl.Close()
		return nil, err
	}
	return &listeners{producer: sl.Producer, internal: sl.Internal, metrics: sl.Metrics, internalTLS: sl.InternalTLS, transport: tr, pushTargets: targets,
		pushSecrets: pushSecrets, warnings: sl.Warnings}, nil
}

// serverGCPercent is the server's GOGC unless the environment sets one.
const serverGCPercent = 400

// serve runs the server of f on ls and st until ctx ends, then shuts down gracefully (see
// server.Serve).
func serve(ctx context.Context, f *serverFlags, ls *listeners, st store.Store, log *slog.Logger) error {
	if os.Getenv("GOGC") == "" {
		// The live heap of a server is small (tens of MiB) and short-lived garbage is most of
		// what it allocates: collecting at 4x the live heap instead of 2x cut the server's CPU
		// time by a sixth under load (baton bench), for ~40 MiB more at peak. GOGC overrides.
		debug.SetGCPercent(serverGCPercent)
	}
	tracing, stopTracing, err := f.otlp.start(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing() // last: after the listeners and loops stopped
	// The values of the secrets the server delivers are redacted from its log and from what
	// workers report, wherever they appear.
	redactor := secrets.NewRedactor()
	log = slog.New(redactor.Handler(log.Handler()))
	log.Info("secrets", "provider", f.secrets.Name())
	cfg := server.Config{Store: st, Logger: log,
		Dispatch: dispatch.Config{MaxTasksPerJob: f.maxTasksPerJob, Defaults: f.defaults,
			GroupCommit: dispatch.GroupCommit{Off: !f.groupCommit, Committers: f.committers}, Redact: redactor.RedactBytes},
		DataPlane: dataplane.Config{Buffer: bufferqueue.Config{Visibility: f.sinkFlags.visibility}},
		API: api.Config{MaxBodyBytes: f.maxBodyBytes, PushTargets: ls.pushTargets, CORSOrigins: f.corsOrigins.origins,
			Secrets: f.secrets, Redactor: redactor},
		BundleLimits: bundle.Limits{Archive: f.bundleMaxBytes},
		Limits:       f.limits,
		Push:         push.Config{Targets: ls.pushTargets, Secrets: ls.pushSecrets, Timeout: f.pushTimeout, CallbackBaseURL: f.publicURL},
		Transport:    ls.transport, TracerProvider: tracing.TracerProvider(),
		Credentials: grant.MinterOptions{RoleARN: f.credentialsRole, Endpoint: f.stsEndpoint, MaxDuration: f.credentialsMaxTTL},
		Retention:   f.retention.config(),
		Staging:     f.retention.stagingConfig(),
		Reconcile:   maintenance.ReconcilerConfig{Every: f.reconcileEvery, Grace: f.reconcileGrace},
	}
	eng, closeEngine, err := f.query.open(log, f.blobURL)
	if err != nil {
		return err
	}
	defer closeEngine()
	if eng != nil {
		cfg.DataPlane.Query = eng
	}
	if f.lambdaOnPull {
		cfg.DataPlane.LambdaOnPull = func(op string) bool { _, ok := ls.pushTargets[op]; return !ok }
	}
	if f.sink {
		cfg.Sink = &sink.Config{GC: f.sinkFlags.gc, Workers: f.sinkFlags.workers, Visibility: f.sinkFlags.visibility}
	}
	return server.Serve(ctx, server.ServeConfig{Server: cfg,
		Listeners: server.Listeners{Producer: ls.producer, Internal: ls.internal, Metrics: ls.metrics},
		HTTP:      f.http, ShutdownTimeout: f.shutdownTimeout, BlobURL: f.blobURL, DataDatabaseURL: f.dataDatabaseURL,
		TransportURL: f.transport.url(), TransportNamespace: f.transport.namespace})
}

// newLogger is a server's logger: info and above, in format (--log-format).
func newLogger(w io.Writer, format logFormat) *slog.Logger {
	return slog.New(format.handler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// redactURL hides the password of a server URL for logging.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
