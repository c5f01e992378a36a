package main

// `baton worker --exec`: the trusted wrapper that runs untrusted programs as Baton tasks. It holds
// every privileged credential itself (the mTLS client certificate for /internal/*, its own
// environment and whatever secrets that holds) and runs the command once per task as a child
// process that gets only its task's payload, its capability token and the public URL
// (internal/runner does the running). There is no proxy: the child can reach the server only
// where anyone can, the public listener, and there only /v1/task/* for its own attempt.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/telemetry"
	"github.com/baton-dev/baton/worker"
)

const workerUsage = `Usage: baton worker --task NAME [--task NAME ...] --exec 'COMMAND ARGS' [flags]

Claims tasks of the given names and runs COMMAND once per task, with /bin/sh -c, as a child
process. The child gets the task payload as JSON on stdin and in the file named by
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

Object storage: with S3, the credentials read only the task's input prefixes and write only its
own prefixes, listed in the payload's "storage" (scratch_prefix, output_prefixes by dataset
uuid). Buffered datasets: a child adds rows to the buffered dataset NAME by writing them, one JSON
object per line, to the file NAME.jsonl in the directory BATON_BUFFER_DIR; once the child
succeeded, the wrapper writes each such file under the attempt's own prefix (with --blob-url, or
with the minted credentials) and publishes it. A child may also write a batch under its output
prefix itself and call /v1/task/buffer-publish with its token.

Flags:
`

// Child environment variables set per task, besides runner's HOME, TMPDIR, PWD, PATH and
// BATON_TASK_PAYLOAD.
const (
	envCapability = "TRACE_TASK_CAPABILITY_TOKEN"
	envPublicURL  = "BATON_URL"
	envTaskID     = "BATON_TASK_ID"
	envAttempt    = "BATON_ATTEMPT"
	envLeaseToken = "BATON_LEASE_TOKEN"
	envJobID      = "BATON_JOB_ID"
	envTaskKey    = "BATON_TASK_KEY"
	envTaskName   = "BATON_TASK_NAME"
	// envTraceparent is the W3C trace context the child's spans belong under, when the task has
	// one: the variable of OpenTelemetry's environment carrier.
	envTraceparent = "TRACEPARENT"
)

// passedThrough are the wrapper's own variables a child gets, when set: locale and time zone.
var passedThrough = []string{"LANG", "TZ"}

// Object storage credentials minted for the child: the AWS SDKs' and CLI's variables, and two
// files the wrapper keeps current in the child's work directory.
const (
	envAWSCredentialsFile = "AWS_SHARED_CREDENTIALS_FILE"
	envAWSConfigFile      = "AWS_CONFIG_FILE"
)

var awsChildEnv = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CREDENTIAL_EXPIRATION",
	"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", envAWSCredentialsFile, envAWSConfigFile}

// reservedChildEnv are names --child-env may not set.
var reservedChildEnv = append([]string{envCapability, envPublicURL, envTaskID, envAttempt, envLeaseToken, envJobID,
	envTaskKey, envTaskName, envTraceparent, runner.EnvPayload, runner.EnvHome, runner.EnvTmpDir, runner.EnvPWD, runner.EnvBuffers}, awsChildEnv...)

// childPayload is the JSON a child reads on stdin and from BATON_TASK_PAYLOAD.
type childPayload struct {
	TaskID            string                     `json:"task_id"`
	JobID             string                     `json:"job_id"`
	TaskKey           string                     `json:"task_key"`
	Name              string                     `json:"name"`
	Attempt           int                        `json:"attempt"`
	LeaseToken        string                     `json:"lease_token"`
	Input             json.RawMessage            `json:"input"`
	DependencyOutputs map[string]json.RawMessage `json:"dependency_outputs"`
	TimeoutSeconds    float64                    `json:"timeout_seconds,omitempty"`
	// A pipeline task's data plane, in the worker contracts' task shape; Input is then the
	// job's config, repeated as config.
	Job      *worker.PipelineJob    `json:"job,omitempty"`
	Operator string                 `json:"operator,omitempty"`
	Config   json.RawMessage        `json:"config,omitempty"`
	Inputs   []worker.DatasetInput  `json:"inputs,omitempty"`
	Outputs  []worker.DatasetOutput `json:"outputs,omitempty"`
	Trigger  json.RawMessage        `json:"trigger,omitempty"`
	// Storage is what the minted object storage credentials allow (S3 object storage only).
	Storage *childStorage `json:"storage,omitempty"`
}

// childStorage tells the child where its credentials let it read and write.
type childStorage struct {
	ReadPrefixes  []string `json:"read_prefixes"`
	WritePrefixes []string `json:"write_prefixes"`
	ScratchPrefix string   `json:"scratch_prefix"`
	// OutputPrefixes are the write prefixes of the task's output datasets, by dataset_uuid.
	OutputPrefixes map[string]string `json:"output_prefixes"`
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
func (l *listFlag) Values() []string   { return *l }

// wrapper is a configured `baton worker --exec`.
type wrapper struct {
	command   []string
	publicURL string
	cred      *runner.Credential // nil: children run as the wrapper's user
	baseEnv   map[string]string  // what every child gets besides its task's variables
	workRoot  string
	grace     time.Duration
	log       *slog.Logger
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, workerUsage); fs.PrintDefaults() }
	var tasks, queues, childEnv listFlag
	fs.Var(&tasks, "task", "task `NAME` to run (repeatable; at least one)")
	execCmd := fs.String("exec", "", "`COMMAND` run with /bin/sh -c once per task, as the child process")
	internalURL := fs.String("internal-url", "http://127.0.0.1:8081", "URL of the server's /internal/* listener (env BATON_INTERNAL_URL); never given to the child")
	publicURL := fs.String("url", jobDefaultURL, "public URL of the server, handed to the child as BATON_URL (env BATON_URL)")
	concurrency := fs.Int("concurrency", 1, "tasks run at once")
	childUser := fs.String("child-user", "nobody", "user the child runs as when the wrapper runs as root (never root)")
	grace := fs.Duration("grace", runner.DefaultGrace, "time a stopped child's process group has between SIGTERM and SIGKILL")
	caFile := fs.String("internal-tls-ca", "", "PEM CA bundle that the internal listener's certificate must chain to")
	certFile := fs.String("internal-tls-cert", "", "PEM client certificate for the internal listener (mTLS)")
	keyFile := fs.String("internal-tls-key", "", "PEM private key of --internal-tls-cert; keep it readable only by the wrapper's user (mode 600)")
	workerID := fs.String("worker-id", "", "worker id the server records (default: host name and process id)")
	workRoot := fs.String("work-dir", "", "directory in which each task gets a fresh work directory (default: the system's temporary directory); the child user must be able to traverse it")
	heartbeat := fs.Duration("heartbeat-interval", 0, "heartbeat at least this often (0: as the server asks)")
	pollWait := fs.Duration("poll-wait", 0, "how long one wait for work lasts: a long poll of the server, or a wait on the transport (0: 20s; at most 1m)")
	shutdown := fs.Duration("shutdown-timeout", 0, "on SIGTERM, how long running tasks may finish before they are stopped and handed back (0: 30s)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
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
	case strings.TrimSpace(*execCmd) == "":
		return usageErr("--exec COMMAND is required")
	case *concurrency < 1:
		return usageErr("--concurrency must be at least 1")
	case *grace <= 0:
		return usageErr("--grace must be positive")
	case *heartbeat < 0, *shutdown < 0, *pollWait < 0:
		return usageErr("durations must not be negative")
	}
	if err := tf.check(); err != nil {
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
	log := slog.New(logFmt.handler(stderr, &slog.HandlerOptions{Level: level}))
	if u, err := url.Parse(*publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErr("--url %q: want http(s)://host[:port]", *publicURL)
	}
	tlsSet := countSet(*caFile, *certFile, *keyFile)
	if tlsSet != 0 && tlsSet != 3 {
		return usageErr("mTLS needs all of --internal-tls-ca, --internal-tls-cert and --internal-tls-key")
	}
	explicitUser := false
	fs.Visit(func(f *flag.Flag) { explicitUser = explicitUser || f.Name == "child-user" })

	w := &wrapper{command: []string{"/bin/sh", "-c", *execCmd}, publicURL: *publicURL, workRoot: *workRoot,
		grace: *grace, log: log, baseEnv: map[string]string{}}
	for _, kv := range childEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return usageErr("--child-env %q: want NAME=VALUE", kv)
		}
		if slices.Contains(reservedChildEnv, k) {
			return usageErr("--child-env may not set %s: the wrapper sets it", k)
		}
		w.baseEnv[k] = v
	}
	for _, k := range passedThrough {
		if v, ok := os.LookupEnv(k); ok {
			if _, set := w.baseEnv[k]; !set {
				w.baseEnv[k] = v
			}
		}
	}

	// Who the child runs as.
	if os.Geteuid() == 0 {
		cred, err := runner.LookupChild(*childUser)
		if err != nil {
			fmt.Fprintln(stderr, "baton worker:", err)
			return 1
		}
		if *keyFile != "" {
			if err := runner.CheckPrivate(*keyFile, cred); err != nil {
				fmt.Fprintln(stderr, "baton worker:", err)
				return 1
			}
		}
		w.cred = cred
		log.Info("children run as an unprivileged user", "user", cred.Username, "uid", cred.Uid, "gid", cred.Gid)
	} else {
		me, _ := user.Current()
		name := strconv.Itoa(os.Geteuid())
		if me != nil {
			name = me.Username
		}
		if explicitUser {
			if cred, err := runner.LookupChild(*childUser); err != nil {
				fmt.Fprintln(stderr, "baton worker:", err)
				return 1
			} else if int(cred.Uid) != os.Geteuid() {
				fmt.Fprintf(stderr, "baton worker: --child-user %s: running children as another user needs the wrapper to run as root (it runs as %s)\n", *childUser, name)
				return 1
			}
		} else {
			log.Warn("not running as root: children run as the wrapper's own user and can read every file it can, the client key included; run the wrapper as root to isolate them as --child-user",
				"user", name, "uid", os.Geteuid())
		}
	}
	if err := runner.HideFromSameUser(); err != nil {
		log.Warn("could not make the wrapper's /proc entries private", "err", err)
	}
	if strings.HasPrefix(*internalURL, "http://") {
		log.Warn("the internal URL is not protected by mTLS: anything that can reach it, children included, can call /internal/*; use https with --internal-tls-* outside development", "internal_url", *internalURL)
	}
	if os.Getpid() == 1 {
		log.Warn("the wrapper is PID 1: processes orphaned by killed tasks become its zombies; run it under an init (docker run --init, tini)")
	}

	opts := []worker.Option{worker.WithConcurrency(*concurrency), worker.WithLogger(log), worker.WithBlob(*blobURL)}
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
	wk, err := worker.New(*internalURL, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "baton worker:", err)
		return 1
	}
	for _, name := range tasks {
		wk.Handle(name, w.handle)
	}
	log.Info("running tasks as child processes", "tasks", []string(tasks), "exec", *execCmd, "child_env", w.childEnvNames())
	if err := wk.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "baton worker:", err)
		return 1
	}
	return 0
}

// childEnvNames lists the variables every child gets, for the log: names only.
func (w *wrapper) childEnvNames() []string {
	names := []string{envCapability, envPublicURL, envTaskID, envAttempt, envLeaseToken, envJobID, envTaskKey,
		envTaskName, runner.EnvPayload, runner.EnvHome, runner.EnvTmpDir, runner.EnvPWD, runner.EnvPath, runner.EnvBuffers}
	for k := range w.baseEnv {
		names = append(names, k)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// handle runs one attempt as a child process.
func (w *wrapper) handle(ctx context.Context, t *worker.Task) (any, error) {
	lease := leaseFromToken(t.CapabilityToken)
	p := childPayload{TaskID: t.ID, JobID: t.JobID, TaskKey: t.Key, Name: t.Name, Attempt: t.Attempt, LeaseToken: lease,
		Input: t.Input, DependencyOutputs: t.DependencyOutputs, TimeoutSeconds: t.Timeout.Seconds()}
	if p.DependencyOutputs == nil {
		p.DependencyOutputs = map[string]json.RawMessage{}
	}
	if pt := t.Pipeline; pt != nil {
		p.Job = &pt.Job
		p.Operator, p.Config, p.Inputs, p.Outputs, p.Trigger = pt.Operator, t.Input, pt.Inputs, pt.Outputs, pt.Trigger
	}
	log := w.log.With("task_id", t.ID, "attempt", t.Attempt, "task", t.Name)
	creds, err := t.Credentials(ctx)
	switch {
	case errors.Is(err, worker.ErrNoCredentials):
		creds = nil // object storage in a directory: nothing to mint, and no isolation of files
	case err != nil:
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped (%v) before the child started: %w", context.Cause(ctx), err)
		}
		log.Warn("could not mint the child's object storage credentials", "err", err)
		return nil, worker.Errorf(worker.Infrastructure, "mint the task's object storage credentials: %v", err)
	default:
		p.Storage = &childStorage{ReadPrefixes: creds.ReadPrefixes, WritePrefixes: creds.WritePrefixes,
			ScratchPrefix: creds.ScratchPrefix(), OutputPrefixes: map[string]string{}}
		for _, o := range p.Outputs {
			if prefix := creds.OutputPrefix(o.DatasetUUID); prefix != "" {
				p.Storage.OutputPrefixes[o.DatasetUUID] = prefix
			}
		}
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, worker.Errorf(worker.DataQuality, "encode the payload: %v", err)
	}
	env := make(map[string]string, len(w.baseEnv)+8)
	for k, v := range w.baseEnv {
		env[k] = v
	}
	env[envCapability] = t.CapabilityToken
	env[envPublicURL] = w.publicURL
	env[envTaskID] = t.ID
	env[envAttempt] = strconv.Itoa(t.Attempt)
	env[envLeaseToken] = lease
	env[envJobID] = t.JobID
	env[envTaskKey] = t.Key
	env[envTaskName] = t.Name
	// The child's spans join the task's trace: under the worker's own span of the task when it
	// traces (the child is then a grandchild of the producer's span), else under the producer's.
	if tp := telemetry.Traceparent(trace.SpanContextFromContext(ctx)); tp != "" {
		env[envTraceparent] = tp
	}
	var prepare func(dir string) (map[string]string, error)
	if creds != nil {
		maps.Copy(env, creds.Env())
		refreshCtx, stopRefresh := context.WithCancel(ctx)
		defer stopRefresh()
		prepare = func(dir string) (map[string]string, error) {
			files := awsFiles{credentials: filepath.Join(dir, "aws-credentials"), config: filepath.Join(dir, "aws-config")}
			if err := files.write(creds); err != nil {
				return nil, err
			}
			go w.keepCredentials(refreshCtx, t, files, creds, log)
			return map[string]string{envAWSCredentialsFile: files.credentials, envAWSConfigFile: files.config}, nil
		}
	}
	if lease == "" {
		log.Warn("no lease token in the capability token's claims: the child cannot call /v1/task/*")
	}
	log.Debug("starting the child")
	res, err := runner.Run(ctx, runner.Spec{Command: w.command, Payload: payload, Env: env, Credential: w.cred,
		TempRoot: w.workRoot, Grace: w.grace, Collect: func(dir string) error { return w.publishBatches(ctx, t, dir) },
		Prepare: prepare})
	var f *runner.Failure
	var we *worker.Error
	switch {
	case err == nil:
		log.Info("child succeeded", "pid", res.PID, "took", res.Duration.Round(time.Millisecond), "stopped", res.Stopped)
		return res.Output, nil
	case errors.As(err, &f):
		if ctx.Err() != nil {
			// Cancelled, timed out, lease lost or shutting down: the worker reports what that
			// calls for, whatever this returns.
			log.Info("child stopped", "cause", context.Cause(ctx), "err", f)
			return nil, fmt.Errorf("stopped (%v): %w", context.Cause(ctx), f)
		}
		log.Warn("child failed", "pid", res.PID, "err", f)
		return nil, worker.Errorf(worker.UserCode, "%s", f.Error())
	case errors.As(err, &we) && ctx.Err() == nil:
		// The child succeeded, but what it left cannot be published (a batch of a dataset its
		// job does not write, a bad file): the failure is the child's, as publishBatches says.
		log.Warn("the child's batches were not published", "pid", res.PID, "err", we)
		return nil, we
	default:
		log.Error("could not run the child", "err", err)
		return nil, worker.Errorf(worker.Infrastructure, "%s", err.Error())
	}
}

// awsFiles are the AWS shared credentials and config files of a child's work directory.
type awsFiles struct{ credentials, config string }

// write writes c to the files, each replaced atomically, readable by the child (whose work
// directory no one else can enter).
func (f awsFiles) write(c *worker.Credentials) error {
	creds := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\naws_session_token = %s\n",
		c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	conf := "[default]\nregion = " + c.Region + "\n"
	if c.EndpointURL != "" {
		// An S3-compatible server is addressed path-style (http://host/bucket/key).
		conf += "endpoint_url = " + c.EndpointURL + "\ns3 =\n    addressing_style = path\n"
	}
	if err := replaceFile(f.credentials, []byte(creds)); err != nil {
		return err
	}
	return replaceFile(f.config, []byte(conf))
}

// replaceFile writes data to a new file beside path and renames it over path.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".baton-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// keepCredentials renews a running child's credentials before they expire, for tasks that run
// longer than they last: the environment cannot change under a running process, so the new ones
// go to AWS_SHARED_CREDENTIALS_FILE, which SDKs read when no key is in the environment (and the
// CLI with --profile default). It stops when ctx ends.
func (w *wrapper) keepCredentials(ctx context.Context, t *worker.Task, files awsFiles, c *worker.Credentials, log *slog.Logger) {
	for {
		// Renew when a quarter of their life is left; Task.Credentials mints below a third.
		timer := time.NewTimer(max(time.Until(c.Expiration)*3/4, time.Second))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		next, err := t.Credentials(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("could not renew the child's object storage credentials; retrying", "err", err, "expire", c.Expiration)
			continue // c is unchanged: the next try comes after three quarters of what is left
		case next != c:
			if err := files.write(next); err != nil {
				log.Warn("could not write the child's renewed credentials", "err", err)
				continue
			}
			log.Info("renewed the child's object storage credentials", "expire", next.Expiration)
		}
		c = next
	}
}

// maxBatchFile bounds a batch file a child leaves.
const maxBatchFile = 64 << 20

// publishBatches publishes the batches a successful child left in dir: NAME.jsonl for the buffered
// dataset NAME. Only regular files the child's user owns are read, never through a link, so a
// child cannot make the wrapper publish a file it could not read itself. Every NAME must be a
// buffered output of the task's job (its claim's outputs), as the server requires: otherwise
// nothing is uploaded or published, and the task fails for good.
func (w *wrapper) publishBatches(ctx context.Context, t *worker.Task, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var outputs []string
	if t.Pipeline != nil {
		for _, o := range t.Pipeline.Outputs {
			if o.WriteMode == "buffered" {
				outputs = append(outputs, o.DatasetUUID, o.DatasetName)
			}
		}
	}
	for _, e := range entries {
		dataset, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !e.Type().IsRegular() || dataset == "" || slices.Contains(outputs, dataset) {
			continue
		}
		return worker.Permanent(fmt.Errorf("batch %s: dataset %q is not a buffered output of this task's job: only tasks of "+
			"the pipeline job that publishes a buffered dataset may publish batches into it; no batch was published", e.Name(), dataset))
	}
	for _, e := range entries {
		dataset, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !e.Type().IsRegular() || dataset == "" {
			continue
		}
		data, err := runner.ReadChildFile(filepath.Join(dir, e.Name()), w.cred, maxBatchFile)
		if err != nil {
			return worker.Errorf(worker.UserCode, "batch %s: %v", e.Name(), err)
		}
		b, err := t.PublishJSONL(ctx, dataset, data)
		if err != nil {
			var we *worker.Error
			if errors.As(err, &we) {
				return err
			}
			return fmt.Errorf("publish %s to dataset %q: %w", e.Name(), dataset, err)
		}
		w.log.Info("batch published", "task_id", t.ID, "dataset", dataset, "rows", b.Rows, "uri", b.URI, "duplicate", b.Duplicate)
	}
	return nil
}

// leaseFromToken reads the lease token from the capability token's claims. The child needs it
// for the body of /v1/task/* calls; the token came from the server over the wrapper's own
// connection, so it is not verified here (the server verifies it on every call).
func leaseFromToken(tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		LeaseToken string `json:"lease_token"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return ""
	}
	return c.LeaseToken
}
