// Package wrapper is the trusted side of `baton worker --exec`: it turns each claimed task into
// a child process's payload, environment and object storage credentials, runs the child with
// internal/runner, and publishes the batches a successful child leaves.
//
// The wrapper holds every privileged credential itself (the mTLS client certificate for
// /internal/*, its own environment and whatever secrets that holds) and runs the command once
// per task as a child process that gets only its task's payload, its capability token and the
// public URL. There is no proxy: the child can reach the server only where anyone can, the
// public listener, and there only /v1/task/* for its own attempt.
package wrapper

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/telemetry"
	"github.com/baton-dev/baton/worker"
)

// Child environment variables set per task, besides runner's HOME, TMPDIR, PWD, PATH and
// BATON_TASK_PAYLOAD.
const (
	EnvCapability = "TRACE_TASK_CAPABILITY_TOKEN"
	EnvPublicURL  = "BATON_URL"
	EnvTaskID     = "BATON_TASK_ID"
	EnvAttempt    = "BATON_ATTEMPT"
	EnvLeaseToken = "BATON_LEASE_TOKEN"
	EnvJobID      = "BATON_JOB_ID"
	EnvTaskKey    = "BATON_TASK_KEY"
	EnvTaskName   = "BATON_TASK_NAME"
	// EnvTraceparent is the W3C trace context the child's spans belong under, when the task has
	// one: the variable of OpenTelemetry's environment carrier.
	EnvTraceparent = "TRACEPARENT"
)

// PassedThrough are the wrapper's own variables a child gets, when set: locale and time zone.
var PassedThrough = []string{"LANG", "TZ"}

// Object storage credentials minted for the child: the AWS SDKs' and CLI's variables, and two
// files the wrapper keeps current in the child's work directory.
const (
	envAWSCredentialsFile = "AWS_SHARED_CREDENTIALS_FILE"
	envAWSConfigFile      = "AWS_CONFIG_FILE"
)

var awsChildEnv = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CREDENTIAL_EXPIRATION",
	"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", envAWSCredentialsFile, envAWSConfigFile}

// Reserved are the names Config.Env (--child-env) may not set: the wrapper sets them.
var Reserved = append([]string{EnvCapability, EnvPublicURL, EnvTaskID, EnvAttempt, EnvLeaseToken, EnvJobID,
	EnvTaskKey, EnvTaskName, EnvTraceparent, runner.EnvPayload, runner.EnvHome, runner.EnvTmpDir, runner.EnvPWD, runner.EnvBuffers}, awsChildEnv...)

// Payload is the JSON a child reads on stdin and from BATON_TASK_PAYLOAD.
type Payload struct {
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
	Storage *Storage `json:"storage,omitempty"`

	// The members of a Lambda-style invocation, so that code written for one runs unchanged:
	// the capability token, when the attempt must be done by (its timeout), and the work
	// payload (the task's input); BundleURL where the bundle it runs is downloaded from.
	CapabilityToken string          `json:"capability_token"`
	LeaseExpiresAt  string          `json:"lease_expires_at,omitempty"`
	WorkPayload     json.RawMessage `json:"work_payload"`
	BundleURL       string          `json:"bundle_url,omitempty"`
}

// Storage tells the child where its credentials let it read and write.
type Storage struct {
	ReadPrefixes  []string `json:"read_prefixes"`
	WritePrefixes []string `json:"write_prefixes"`
	ScratchPrefix string   `json:"scratch_prefix"`
	// OutputPrefixes are the write prefixes of the task's output datasets, by dataset_uuid.
	OutputPrefixes map[string]string `json:"output_prefixes"`
}

// Config is a `baton worker --exec` or a `baton udf-runner` as its flags configure it.
type Config struct {
	// Command is the child's command line; nil runs bundles only (a task whose job runs none
	// fails as a configuration error).
	Command []string
	// PublicURL is handed to the child as BATON_URL, and bundles are downloaded from it; a
	// task that says where its server is (Task.PublicURL: a push delivery's) uses its own.
	PublicURL  string
	Credential *runner.Credential // nil: children run as the wrapper's user
	// Env is what every child gets besides its task's variables (--child-env); no name of
	// Reserved. PassedThrough variables the wrapper has are added where Env does not set them.
	Env      map[string]string
	WorkRoot string // where each task's work directory is made ("": the system's temporary directory)
	Grace    time.Duration
	Log      *slog.Logger
	// Bundles caches the bundles of tasks whose job runs one; nil fails such tasks.
	Bundles *bundle.Cache
	// BundleLimits are the checks a downloaded bundle passes again (bundle.DefaultLimits if zero).
	BundleLimits bundle.Limits
	// HTTPClient downloads bundles (http.DefaultClient if nil).
	HTTPClient *http.Client
	// Sandbox is what children may read, write, execute and connect to besides what every child
	// may (and the ports of the public URL and the object store), and their limits.
	Sandbox runner.Sandbox
}

// Wrapper is a configured `baton worker --exec` or `baton udf-runner`: its Handle is the worker
// SDK's handler of every task it runs, claimed (worker.Worker) or pushed (worker.PushHandler).
type Wrapper struct {
	command   []string
	publicURL string
	cred      *runner.Credential // nil: children run as the wrapper's user
	baseEnv   map[string]string  // what every child gets besides its task's variables
	workRoot  string
	grace     time.Duration
	log       *slog.Logger
	sandbox   runner.Sandbox

	bundles      *bundle.Cache
	bundleLimits bundle.Limits
	http         *http.Client
}

// New returns the wrapper c configures.
func New(c Config) *Wrapper {
	w := &Wrapper{command: c.Command, publicURL: c.PublicURL, cred: c.Credential, workRoot: c.WorkRoot,
		grace: c.Grace, log: c.Log, baseEnv: map[string]string{}, sandbox: c.Sandbox, bundles: c.Bundles,
		bundleLimits: c.BundleLimits, http: c.HTTPClient}
	if w.http == nil {
		w.http = http.DefaultClient
	}
	maps.Copy(w.baseEnv, c.Env)
	for _, k := range PassedThrough {
		if v, ok := os.LookupEnv(k); ok {
			if _, set := w.baseEnv[k]; !set {
				w.baseEnv[k] = v
			}
		}
	}
	return w
}

// ChildEnvNames lists the variables every child gets, for the log: names only.
func (w *Wrapper) ChildEnvNames() []string {
	names := []string{EnvCapability, EnvPublicURL, EnvTaskID, EnvAttempt, EnvLeaseToken, EnvJobID, EnvTaskKey,
		EnvTaskName, runner.EnvPayload, runner.EnvHome, runner.EnvTmpDir, runner.EnvPWD, runner.EnvPath, runner.EnvBuffers}
	for k := range w.baseEnv {
		names = append(names, k)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Handle runs one attempt as a child process.
func (w *Wrapper) Handle(ctx context.Context, t *worker.Task) (any, error) {
	lease := leaseFromToken(t.CapabilityToken)
	token, _ := t.Token()
	p := Payload{TaskID: t.ID, JobID: t.JobID, TaskKey: t.Key, Name: t.Name, Attempt: t.Attempt, LeaseToken: lease,
		Input: t.Input, DependencyOutputs: t.DependencyOutputs, TimeoutSeconds: t.Timeout.Seconds(),
		CapabilityToken: token, WorkPayload: t.Input}
	if deadline, ok := ctx.Deadline(); ok {
		p.LeaseExpiresAt = deadline.UTC().Format(time.RFC3339Nano)
	}
	if len(p.WorkPayload) == 0 {
		p.WorkPayload = json.RawMessage("{}")
	}
	if p.DependencyOutputs == nil {
		p.DependencyOutputs = map[string]json.RawMessage{}
	}
	if pt := t.Pipeline; pt != nil {
		p.Job = &pt.Job
		p.Operator, p.Config, p.Inputs, p.Outputs, p.Trigger = pt.Operator, t.Input, pt.Inputs, pt.Outputs, pt.Trigger
	}
	log := w.log.With("task_id", t.ID, "attempt", t.Attempt, "task", t.Name)
	command, baseEnv, sb := w.command, w.baseEnv, w.sandbox
	if u := bundleOf(t); u != nil {
		br, err := w.prepareBundle(ctx, t, u)
		if err != nil {
			log.Warn("the task's bundle cannot run", "bundle_id", u.ID, "err", err)
			return nil, err
		}
		defer br.release()
		command, baseEnv, sb = br.command, allowed(w.baseEnv, br.m.EnvAllowlist), bundleSandbox(sb, br)
		// The interpreter is the child's: found in the PATH the child gets, not the wrapper's.
		if command[0], err = lookPath(command[0], cmp.Or(w.baseEnv[runner.EnvPath], runner.DefaultPath)); err != nil {
			br.release()
			return nil, worker.Permanent(worker.Errorf(worker.Configuration, "bundle %s: %v", u.ID, err))
		}
		p.BundleURL = w.publicURLOf(t) + cmpDownload(u)
		log = log.With("bundle_id", u.ID, "sha256", u.SHA256)
	} else if command == nil {
		return nil, worker.Permanent(worker.Errorf(worker.Configuration,
			"this worker runs bundles only (it has no --exec command), and the job of task %s runs none", t.ID))
	}
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
		p.Storage = &Storage{ReadPrefixes: creds.ReadPrefixes, WritePrefixes: creds.WritePrefixes,
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
	env := make(map[string]string, len(baseEnv)+8)
	maps.Copy(env, baseEnv)
	if err := w.secretEnv(ctx, t, env); err != nil {
		return nil, err
	}
	env[EnvCapability] = token
	env[EnvPublicURL] = w.publicURLOf(t)
	env[EnvTaskID] = t.ID
	env[EnvAttempt] = strconv.Itoa(t.Attempt)
	env[EnvLeaseToken] = lease
	env[EnvJobID] = t.JobID
	env[EnvTaskKey] = t.Key
	env[EnvTaskName] = t.Name
	// The child's spans join the task's trace: under the worker's own span of the task when it
	// traces (the child is then a grandchild of the producer's span), else under the producer's.
	if tp := telemetry.Traceparent(trace.SpanContextFromContext(ctx)); tp != "" {
		env[EnvTraceparent] = tp
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
	res, err := runner.Run(ctx, runner.Spec{Command: command, Payload: payload, Env: env, Credential: w.cred,
		TempRoot: w.workRoot, Grace: w.grace, Collect: func(dir string) error { return w.publishBatches(ctx, t, dir) },
		Prepare: prepare, Sandbox: w.childSandbox(sb, w.publicURLOf(t), creds)})
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
		return nil, worker.Errorf(worker.UserCode, "%s%s", f.Error(), containmentHint(f.Stderr))
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

// publicURLOf is the public URL of t's server, without a trailing slash: the task's own when it
// has one (a pushed task), else the configured one.
func (w *Wrapper) publicURLOf(t *worker.Task) string {
	return strings.TrimSuffix(cmp.Or(t.PublicURL, w.publicURL), "/")
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
