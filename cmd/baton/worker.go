package main

// `baton worker --exec`: the trusted wrapper that runs untrusted programs as Baton tasks. Its
// flags, their checks and its log lines are here; internal/wrapper turns each task into a child
// process (internal/runner does the running).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/secrets"
	"github.com/baton-dev/baton/internal/wrapper"
	"github.com/baton-dev/baton/worker"
)

const workerUsage = `Usage: baton worker --task NAME [--task NAME ...] [--exec 'COMMAND ARGS'] [flags]

Claims tasks of the given names and runs COMMAND once per task, with /bin/sh -c, as a child
process; a task whose pipeline job runs a bundle (its udf) runs the bundle instead, never
COMMAND: the worker downloads it with the task's token, checks its SHA-256 against the one its
deploy pinned, unpacks it into a cache (--bundle-cache) and starts its entrypoint (python3 FILE,
node FILE, ./FILE, or a Lambda-style handler module.function) as the child. Without --exec it
runs bundles only. The child gets the task payload as JSON on stdin and in the file named by
BATON_TASK_PAYLOAD, its capability token in TRACE_TASK_CAPABILITY_TOKEN (for /v1/task/* on
BATON_URL) and nothing else privileged: its environment is built from an allowlist, and when the
wrapper runs as root the child runs as --child-user. The last JSON value the child writes to stdout
is the task's output; a non-zero exit fails the task with the exit status and the end of stderr.
A cancelled or timed-out task's process group gets SIGTERM, then SIGKILL after --grace.

The child's whole environment: PATH, HOME, TMPDIR and PWD (its own work directory), LANG and TZ
(when set), BATON_TASK_PAYLOAD, BATON_URL, TRACE_TASK_CAPABILITY_TOKEN, BATON_TASK_ID,
BATON_TASK_KEY, BATON_TASK_NAME, BATON_JOB_ID, BATON_ATTEMPT, BATON_LEASE_TOKEN,
BATON_BUFFER_DIR, TRACEPARENT (the W3C trace context to put the child's spans under, when the
task's job has one) and --child-env; with S3 object storage also the credentials minted for its
attempt: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_CREDENTIAL_EXPIRATION,
AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL, AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE
(the two files hold the same credentials, renewed before they expire for long tasks).

Containment: the child may read and execute the system's programs and libraries and read a few
files of /etc, write only in its work directory, and connect only to the TCP ports of --url and
the object store; it cannot trace, mount or make namespaces, and runs under an init in PID and
user namespaces of its own, with everything it started killed when it ends; each where the kernel
has it (the log line "untrusted children are contained" says what holds; --min-isolation refuses
less). --child-read, --child-write, --child-exec, --child-connect and --child-network grant more.

Secrets: the child of an ecs_platform job gets the secrets the job declares as environment
variables (monad_rpc_key as MONAD_RPC_KEY), from the server's provider; a bundle, or an ecs_udf
job's child, never does. Their values are redacted from this worker's log and from what it reports.

Object storage: with S3, the credentials read only the task's input prefixes and write only its
own prefixes, listed in the payload's "storage" (scratch_prefix, output_prefixes by dataset
uuid). Buffered datasets: a child adds rows to the buffered dataset NAME by writing them, one JSON
object per line, to the file NAME.jsonl in the directory BATON_BUFFER_DIR; once the child
succeeded, the wrapper writes each such file under the attempt's own prefix (with --blob-url, or
with the minted credentials) and publishes it. A child may also write a batch under its output
prefix itself and call /v1/task/buffer-publish with its token.

Flags:
`

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
func (l *listFlag) Values() []string   { return *l }

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, workerUsage); fs.PrintDefaults() }
	var tasks, queues, childEnv listFlag
	fs.Var(&tasks, "task", "task `NAME` to run (repeatable; at least one)")
	execCmd := fs.String("exec", "", "`COMMAND` run with /bin/sh -c once per task, as the child process (none: bundle tasks only)")
	var cf childFlags
	cf.register(fs)
	internalURL := fs.String("internal-url", "http://127.0.0.1:8081", "URL of the server's /internal/* listener (env BATON_INTERNAL_URL); never given to the child")
	publicURL := fs.String("url", ctl.DefaultURL, "public URL of the server, handed to the child as BATON_URL (env BATON_URL)")
	concurrency := fs.Int("concurrency", 1, "tasks run at once")
	caFile := fs.String("internal-tls-ca", "", "PEM CA bundle that the internal listener's certificate must chain to")
	certFile := fs.String("internal-tls-cert", "", "PEM client certificate for the internal listener (mTLS)")
	keyFile := fs.String("internal-tls-key", "", "PEM private key of --internal-tls-cert; keep it readable only by the wrapper's user (mode 600)")
	workerID := fs.String("worker-id", "", "worker id the server records (default: host name and process id)")
	heartbeat := fs.Duration("heartbeat-interval", 0, "heartbeat at least this often (0: as the server asks)")
	pollWait := fs.Duration("poll-wait", 0, "how long one wait for work lasts: a long poll of the server, or a wait on the transport (0: 20s; at most 1m)")
	shutdown := fs.Duration("shutdown-timeout", 0, "on SIGTERM, how long running tasks may finish before they are stopped and handed back (0: 30s)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	idle := fs.String("idle-timeout", "job", "exit 0 after this long with nothing to claim: job (follow the idle_timeout of the pipeline jobs whose tasks it runs), never, 0 (as soon as the queues are empty), or a duration")
	var logFmt logFormat
	logFmt.register(fs)
	blobURL := fs.String("blob-url", "", "object storage the wrapper writes children's batches to, as the server's --blob-url (env BATON_BLOB_URL; S3 settings from the AWS_* variables)")
	fs.Var(&queues, "queue", "queue `NAME` to claim from (repeatable; default: the task names)")
	var tf transportFlags
	tf.register(fs, "how the worker finds tasks: store (long-poll the server), redis or nats (wait for wake-ups there, then claim by task id); as the server's --transport")
	fs.Var(&childEnv, "child-env", "`NAME=VALUE` set in every child's environment (repeatable; PATH may be overridden; not for secrets)")
	var otlp otlpFlag
	otlp.register(fs)
	if code, ok := configureFlags(ctx, fs, args); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton worker: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q (quote the whole --exec command)", fs.Arg(0))
	case len(tasks) == 0:
		return usageErr("--task NAME is required")
	case *concurrency < 1:
		return usageErr("--concurrency must be at least 1")
	case *heartbeat < 0, *shutdown < 0, *pollWait < 0:
		return usageErr("durations must not be negative")
	}
	if err := cf.check(); err != nil {
		return usageErr("%v", err)
	}
	if err := tf.check(); err != nil {
		return usageErr("%v", err)
	}
	idleOpt, err := idleOption(*idle)
	if err != nil {
		return usageErr("%v", err)
	}
	for _, name := range tasks {
		if name == "" {
			return usageErr("empty --task name")
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageErr("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	// The values of the secrets a trusted operator's task receives are redacted from the log.
	redactor := secrets.NewRedactor()
	log := slog.New(redactor.Handler(logFmt.handler(stderr, &slog.HandlerOptions{Level: level})))
	if u, err := url.Parse(*publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErr("--url %q: want http(s)://host[:port]", *publicURL)
	}
	tlsSet := countSet(*caFile, *certFile, *keyFile)
	if tlsSet != 0 && tlsSet != 3 {
		return usageErr("mTLS needs all of --internal-tls-ca, --internal-tls-cert and --internal-tls-key")
	}
	env := map[string]string{}
	for _, kv := range childEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return usageErr("--child-env %q: want NAME=VALUE", kv)
		}
		if slices.Contains(wrapper.Reserved, k) {
			return usageErr("--child-env may not set %s: the wrapper sets it", k)
		}
		env[k] = v
	}

	wc, usage, err := cf.wrapperConfig(fs, log, *keyFile, ", the client key included")
	switch {
	case usage != nil:
		return usageErr("%v", usage)
	case err != nil:
		fmt.Fprintln(stderr, "baton worker:", err)
		return 1
	}
	wc.PublicURL, wc.Env = *publicURL, env
	if strings.TrimSpace(*execCmd) != "" {
		wc.Command = []string{"/bin/sh", "-c", *execCmd}
	}
	if strings.HasPrefix(*internalURL, "http://") {
		who := "anything that can reach it, children included,"
		if runner.Isolation().Landlock >= 4 && !cf.iso.network {
			who = "anything that can reach it (not the children: they connect to the ports of --url and the object store only)"
		}
		log.Warn("the internal URL is not protected by mTLS: "+who+" can call /internal/*; use https with --internal-tls-* outside development", "internal_url", *internalURL)
	}

	opts := []worker.Option{worker.WithConcurrency(*concurrency), worker.WithLogger(log), worker.WithBlob(*blobURL),
		worker.WithSecretHook(redactor.Add), worker.WithIsolation(runner.Isolation().Level())}
	if idleOpt != nil {
		opts = append(opts, idleOpt)
	}
	if len(queues) > 0 {
		opts = append(opts, worker.WithQueues(queues...))
	}
	if *workerID != "" {
		opts = append(opts, worker.WithWorkerID(*workerID))
	}
	if tlsSet == 3 {
		opts = append(opts, worker.WithClientCert(*caFile, *certFile, *keyFile))
	}
	if *heartbeat > 0 {
		opts = append(opts, worker.WithHeartbeatInterval(*heartbeat))
	}
	if *shutdown > 0 {
		opts = append(opts, worker.WithShutdownTimeout(*shutdown))
	}
	if *pollWait > 0 {
		opts = append(opts, worker.WithPollWait(*pollWait))
	}
	if tf.kind != "store" {
		opts = append(opts, worker.WithWakeups(tf.kind, tf.url()), worker.WithWakeupNamespace(tf.namespace))
		log.Info("waiting for wake-ups", "transport", tf.kind, "url", redactURL(tf.url()), "namespace", tf.namespace)
	}
	tracing, stopTracing, err := otlp.start(ctx, log)
	if err != nil {
		fmt.Fprintln(stderr, "baton worker:", err)
		return 1
	}
	defer stopTracing()
	if tracing.On() {
		opts = append(opts, worker.WithTracerProvider(tracing.TracerProvider()))
	}
	w := wrapper.New(wc)
	wk, err := worker.New(*internalURL, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "baton worker:", err)
		return 1
	}
	for _, name := range tasks {
		wk.Handle(name, w.Handle)
	}
	log.Info("running tasks as child processes", "tasks", []string(tasks), "exec", *execCmd, "bundle_cache", cf.bundleCache, "child_env", w.ChildEnvNames())
	if err := wk.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "baton worker:", err)
		return 1
	}
	return 0
}

// idleOption is the worker option of --idle-timeout; nil for never.
func idleOption(v string) (worker.Option, error) {
	switch v {
	case "job":
		return worker.WithJobIdleTimeout(), nil
	case "never":
		return nil, nil
	case "0":
		return worker.WithIdleTimeout(0), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return nil, fmt.Errorf("--idle-timeout %q: want job, never, 0 or a duration such as 5m", v)
	}
	return worker.WithIdleTimeout(d), nil
}
