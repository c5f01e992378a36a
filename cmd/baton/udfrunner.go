package main

// `baton udf-runner`: a push target that runs the tasks of bundle jobs as `baton worker` runs
// them, with nothing but each task's token: the worker SDK's PushHandler takes the deliveries,
// internal/wrapper runs each bundle as a contained child process.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/pushsig"
	"github.com/baton-dev/baton/internal/wrapper"
	"github.com/baton-dev/baton/worker"
)

const udfRunnerUsage = `Usage: baton udf-runner --listen ADDR [--push-secret SECRET] [flags]

Serves the push deliveries of tasks whose pipeline job runs a user code bundle (its udf): give
the server a push target for the job's operator here (baton server --push-target
OPERATOR=http://ADDR/ --push-secret OPERATOR=SECRET), and it delivers the job's tasks to this
runner instead of waiting for a worker to claim them. A delivery is answered 202 at once (401
when it is not signed with --push-secret, 400 when it is no push envelope, 503 when --concurrency
tasks run already or the runner is stopping: the server then fails that attempt, and its retry
rule decides) and run as baton worker runs a bundle task: the bundle is downloaded with the
task's token, checked against the SHA-256 its deploy pinned, unpacked into --bundle-cache, and
its entrypoint started as a contained child process, with the payload, environment, output,
buffered batches and containment that 'baton worker -h' describes (as root, the child runs as
--child-user; it may connect to the port of the delivery's server, or of --url). A repeated
delivery of an attempt that runs or ran lately is answered 202 and not run again.

The runner heartbeats and reports each outcome through the task-scoped dialect (/v1/task/...)
of the server's public listener (the delivery's callbackBaseUrl, or --url) with the task's
token: it holds no client certificate and never calls /internal/*. A task whose job runs no
bundle fails as a CONFIGURATION error; no task gets a secret. Without --push-secret, --url is
required: an unsigned delivery could otherwise name any server, and so any bundle.

On SIGTERM or Ctrl-C it takes no more deliveries (503) and waits up to --shutdown-timeout for
the running tasks; those still running are then stopped and handed back to the server as
retryable INFRASTRUCTURE failures.

Flags:
`

func runUDFRunner(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton udf-runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, udfRunnerUsage); fs.PrintDefaults() }
	listen := fs.String("listen", "", "`ADDR` (host:port) to serve push deliveries on (required; port 0 picks a free one)")
	secretFlag := fs.String("push-secret", "", "`SECRET` the server signs deliveries with (its --push-secret OPERATOR=SECRET), or @FILE to read it from FILE; without it every delivery is taken")
	publicURL := fs.String("url", "", "public `URL` of the server, for the tasks' calls and bundle downloads and handed to the child as BATON_URL (default: each delivery's callbackBaseUrl, the server's --public-url)")
	var cf childFlags
	cf.register(fs)
	concurrency := fs.Int("concurrency", 8, "tasks run at once; a delivery beyond them is answered 503")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM, how long running tasks may finish before they are stopped and handed back")
	blobURL := fs.String("blob-url", "", "object storage the runner writes children's batches to, as the server's --blob-url (default: env BATON_BLOB_URL; without either, with each task's minted credentials, which needs S3)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	var logFmt logFormat
	logFmt.register(fs)
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton udf-runner: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case *listen == "":
		return usageErr("--listen ADDR is required, e.g. --listen 0.0.0.0:8090")
	case *concurrency < 1:
		return usageErr("--concurrency must be at least 1")
	case *shutdown <= 0:
		return usageErr("--shutdown-timeout must be positive")
	case *publicURL != "" && !isHTTPURL(*publicURL):
		return usageErr("--url %q: want http(s)://host[:port]", *publicURL)
	case *blobURL != "" && !strings.HasPrefix(*blobURL, "file://") && !strings.HasPrefix(*blobURL, "s3://"):
		return usageErr("--blob-url %q: want file://DIR or s3://BUCKET/PREFIX", *blobURL)
	}
	if err := cf.check(); err != nil {
		return usageErr("%v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageErr("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	secret, err := readPushSecret(*secretFlag)
	if err != nil {
		return usageErr("%v", err)
	}
	if secret == "" && *publicURL == "" {
		// An unsigned delivery's callbackBaseUrl could name any server, and with it any bundle.
		return usageErr("without --push-secret, --url is required: an unsigned delivery may come from anyone, so the server whose bundles run here must be this one")
	}
	log := slog.New(logFmt.handler(stderr, &slog.HandlerOptions{Level: level}))
	wc, usage, err := cf.wrapperConfig(fs, log, "", "")
	switch {
	case usage != nil:
		return usageErr("%v", usage)
	case err != nil:
		fmt.Fprintln(stderr, "baton udf-runner:", err)
		return 1
	}
	wc.PublicURL = *publicURL // a delivery's own callbackBaseUrl otherwise (Task.PublicURL)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "baton udf-runner:", err)
		return 1
	}
	opts := []worker.PushOption{worker.WithPushLogger(log), worker.WithPushConcurrency(*concurrency)}
	if secret != "" {
		opts = append(opts, worker.WithPushSecret(secret))
	} else {
		log.Warn("no --push-secret: every delivery is taken (its bundle and reports go to --url only); keep the runner where only the server can reach it")
	}
	if *publicURL != "" {
		opts = append(opts, worker.WithPushPublicURL(*publicURL))
	}
	if *blobURL != "" {
		opts = append(opts, worker.WithPushBlob(*blobURL))
	}
	w := wrapper.New(wc)
	ph := worker.NewPushHandler(w.Handle, opts...)
	srv := &http.Server{Handler: ph, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "baton udf-runner: serving push deliveries of bundle tasks on http://%s/ (bundle cache %s)\n", ln.Addr(), cf.bundleCache)
	log.Info("udf runner started", "listen", ln.Addr().String(), "bundle_cache", cf.bundleCache, "concurrency", *concurrency,
		"child_env", w.ChildEnvNames())

	code := 0
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		fmt.Fprintln(stderr, "baton udf-runner:", err)
		code = 1
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	if err := ph.Shutdown(stopCtx); err != nil {
		fmt.Fprintln(stderr, "baton udf-runner:", err)
		code = 1
	}
	// Deliveries being answered finish; none starts a task any more.
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelHTTP()
	if err := srv.Shutdown(httpCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		srv.Close()
	}
	log.Info("udf runner stopped")
	return code
}

// readPushSecret is --push-secret's secret: SECRET, or the content of FILE for @FILE less one
// trailing newline; "" for none. Messages never repeat a secret.
func readPushSecret(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	from := "--push-secret"
	if file, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--push-secret: read the secret: %w", err)
		}
		v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		from += " (" + file + ")"
	}
	if err := pushsig.CheckSecret(v); err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	return v, nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
