// Package demo runs the examples of `baton dev --demo` end to end beside a dev server, with real
// `baton worker` processes whose child program is the hidden `baton demo-task` (RunTask).
//
// `baton dev --demo`: the dev server as usual, plus one `baton worker` process per task name of
// the five-task example job (examples/job.json), each running the hidden `baton demo-task` as its
// child program; the demo submits the example through the producer API, prints its progress until
// it completes (a few seconds), and leaves everything running. The internal listener uses mutual
// TLS with development certificates made for the occasion, so the demo runs the production
// arrangement: the workers hold the client certificate, their children (an unprivileged user when
// run as root) hold only their task's capability token.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/wrapper"
)

// jobJSON is examples/job.json (a test keeps the two equal), built in so that the demo
// runs from any directory.
const jobJSON = `{
  "tasks": [
    {
      "taskId": "scrape-store",
      "name": "scrape-store",
      "dependsOn": [],
      "input": { "storeId": "store-123", "url": "https://example.com" }
    },
    {
      "taskId": "analyze-competitors",
      "name": "analyze-competitors",
      "dependsOn": [],
      "input": { "market": "fashion" }
    },
    {
      "taskId": "color-tags",
      "name": "color-tags",
      "dependsOn": ["scrape-store"],
      "input": { "style": "modern" }
    },
    {
      "taskId": "font-pairing",
      "name": "font-pairing",
      "dependsOn": ["scrape-store"],
      "input": {}
    },
    {
      "taskId": "compile-result",
      "name": "compile-result",
      "dependsOn": ["color-tags", "font-pairing"],
      "input": {}
    }
  ]
}
`

// taskNames are the task names of jobJSON: one worker process each.
var taskNames = []string{"scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result"}

// certsDir is where, under --data-dir, the demo keeps its development certificates.
const certsDir = "demo-certs"

// workerStop bounds how long a demo worker has to stop after SIGTERM.
const workerStop = 15 * time.Second

// WriteCerts makes the demo's development certificates under dataDir (--data-dir); the dev
// server's internal listener must serve mutual TLS with them. It runs before the listeners are
// bound.
func WriteCerts(dataDir string) (mtls.DevCerts, error) {
	dc, err := mtls.WriteDevCerts(filepath.Join(dataDir, certsDir), nil, time.Now(), true)
	if err != nil {
		return mtls.DevCerts{}, fmt.Errorf("demo certificates: %w", err)
	}
	return dc, nil
}

// Config is what a demo needs of the dev server it runs beside.
type Config struct {
	Pipeline           bool     // the example pipeline (`--demo pipeline`), not the five-task job
	Producer, Internal net.Addr // the dev server's public and internal listeners
	BlobURL            string   // the object storage of buffered datasets' batches
	Certs              mtls.DevCerts
	// Store is the dev server's store, where a key is made for this run when APIKey is empty.
	Store store.Store
	// APIKey is the dev key of the banner, when this process knows its secret.
	APIKey         string
	Stdout, Stderr io.Writer
}

// session is a running `baton dev --demo`.
type session struct {
	producerURL, internalURL string
	blobURL                  string // the object storage of buffered datasets' batches
	certs                    mtls.DevCerts
	apiKey                   string
	ownKey                   bool // apiKey was made for this run, not the dev key of the banner
	stdout, stderr           io.Writer
}

// Start starts the demo in the background: a key to submit with (c.APIKey, the banner's key, when
// this process knows its secret; else one made for this run and revoked when it stops), the
// workers, the job or pipeline. The workers are this program run again as `baton worker`, so the
// program must be baton (or a test binary that stands in for it). The returned function stops
// the workers and waits for them; it may be called more than once.
func Start(ctx context.Context, c Config) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d := &session{producerURL: loopbackURL("http", c.Producer), internalURL: loopbackURL("https", c.Internal),
			blobURL: c.BlobURL, certs: c.Certs, apiKey: c.APIKey, stdout: c.Stdout, stderr: c.Stderr}
		if d.apiKey == "" {
			k, secret, err := auth.CreateKey(ctx, c.Store, "dev --demo", auth.DefaultTenant, "", time.Now())
			if err != nil {
				fmt.Fprintln(c.Stderr, "baton dev --demo: create an API key:", err)
				return
			}
			d.apiKey, d.ownKey = secret, true
			defer func() { _ = c.Store.APIKeyRevoke(context.WithoutCancel(ctx), k.ID, time.Now()) }()
		}
		run := d.run
		if c.Pipeline {
			run = d.runPipeline
		}
		if err := run(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintln(c.Stderr, "baton dev --demo:", err)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// keyName says which key the demo submits with: the banner's or its own.
func (d *session) keyName() string {
	if d.ownKey {
		// The banner's key was printed on an earlier start; this one lives as long as this process.
		return "the demo's own API key (revoked when baton dev stops; the dev key printed on the first start works too)"
	}
	return "the dev API key of the banner above"
}

// loopbackURL is the URL to reach a listener from this machine.
func loopbackURL(scheme string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// run starts the workers, submits the job, follows it to the end, and keeps the workers running
// until ctx ends.
func (d *session) run(ctx context.Context) error {
	var workers []workerSpec
	for _, name := range taskNames {
		workers = append(workers, workerSpec{name: name})
	}
	stop, err := d.startWorkers(ctx, workers)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(d.stdout, "demo: started %d `baton worker` processes (one per task name), each running `baton demo-task` as its child program\n", len(workers))

	c := client.New(d.producerURL, d.apiKey)
	res, err := c.SubmitJobJSON(ctx, []byte(jobJSON))
	if err != nil {
		return fmt.Errorf("submit the example job: %w", err)
	}
	start := time.Now()
	fmt.Fprintf(d.stdout, "demo: submitted the example job as job %s (%d tasks; roots %s)\n", res.JobID, res.TotalTasks, strings.Join(res.RootTasks, ", "))
	seen := map[string]string{}
	job, err := c.Watch(ctx, res.JobID, 100*time.Millisecond, func(j *client.Job) {
		for _, t := range j.Tasks {
			status := t.Status
			if t.Status == client.TaskProcessing || t.Attempt > 1 {
				status = fmt.Sprintf("%s (attempt %d)", t.Status, t.Attempt)
			}
			if seen[t.TaskID] != status {
				seen[t.TaskID] = status
				fmt.Fprintf(d.stdout, "demo: %5.1fs  %-20s %s\n", time.Since(start).Seconds(), t.TaskID, status)
			}
		}
	})
	if err != nil {
		return err
	}
	took := time.Since(start).Seconds()
	if job.Status != client.JobCompleted {
		fmt.Fprintf(d.stdout, "demo: job %s ended %s after %.1fs; see `baton job get %s`\n", job.JobID, job.Status, took, job.JobID)
	} else {
		fmt.Fprintf(d.stdout, "demo: job %s completed in %.1fs\n", job.JobID, took)
		if t, err := c.GetTask(ctx, job.JobID, "compile-result"); err == nil {
			var out bytes.Buffer
			if json.Indent(&out, t.Output, "      ", "  ") == nil {
				fmt.Fprintf(d.stdout, "demo: compile-result's output:\n      %s\n", out.String())
			}
		}
	}
	fmt.Fprintf(d.stdout, "demo: the workers keep running; submit the example again with %s:\n      BATON_URL=%s BATON_API_KEY=%s baton job submit -f examples/job.json\n",
		d.keyName(), d.producerURL, d.apiKey)
	<-ctx.Done()
	return nil
}

// workerSpec is one `baton worker` process of a demo: the task name it runs and the queues it
// claims from (default: the task name).
type workerSpec struct {
	name   string
	queues []string
}

// startWorkers starts the demo's workers, each running `baton demo-task` as its child program,
// and returns the function that stops them.
func (d *session) startWorkers(ctx context.Context, workers []workerSpec) (func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program: %w", err)
	}
	taskBin, cleanup, err := taskBinary(self)
	if err != nil {
		return nil, err
	}
	var procs []*process
	stop := func() {
		stopWorkers(procs)
		cleanup()
	}
	for _, w := range workers {
		p, err := d.startWorker(ctx, self, taskBin, w.name, w.queues...)
		if err != nil {
			stop()
			return nil, err
		}
		procs = append(procs, p)
	}
	return stop, nil
}

// taskBinary is the program the workers' children run. As root the children run as an
// unprivileged user, who may not reach this program (`go run` builds it in a private directory),
// so it is copied into a directory everyone can read; the returned function removes the copy.
func taskBinary(self string) (string, func(), error) {
	if os.Geteuid() != 0 {
		return self, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "baton-demo-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	bin := filepath.Join(dir, "baton")
	err = os.Chmod(dir, 0o755)
	if err == nil {
		err = copyFile(self, bin, 0o755)
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("copy the demo task program: %w", err)
	}
	return bin, cleanup, nil
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// workerEnv are the dev server's variables its demo workers keep: the transport they share,
// and how they log and trace.
var workerEnv = []string{"BATON_TRANSPORT", "BATON_REDIS_URL", "BATON_NATS_URL", "BATON_TRANSPORT_NAMESPACE",
	"BATON_LOG_FORMAT", "BATON_OTLP_ENDPOINT"}

// process is one worker process.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startWorker starts `baton worker` for one task name, its output prefixed on stderr.
func (d *session) startWorker(ctx context.Context, self, taskBin, name string, queues ...string) (*process, error) {
	args := []string{"worker", "--task", name, "--exec", shellQuote(taskBin) + " demo-task", "--child-exec", taskBin,
		"--internal-url", d.internalURL, "--url", d.producerURL,
		"--internal-tls-ca", d.certs.CA, "--internal-tls-cert", d.certs.ClientCert, "--internal-tls-key", d.certs.ClientKey,
		"--worker-id", "demo-" + name, "--grace", "3s", "--log-level", "warn", "--blob-url", d.blobURL,
		// Told to stop, a worker gives its running tasks (the block follower never ends by
		// itself) 2 s, then stops their process groups and hands the tasks back: well within
		// workerStop, after which it would be killed and leave its task's children behind.
		"--shutdown-timeout", "2s"}
	for _, q := range queues {
		args = append(args, "--queue", q)
	}
	cmd := exec.Command(self, args...)
	// The worker is configured by its command line, and by the dev server's environment only
	// where the two must agree. The rest of BATON_* is the dev server's: its --config file, or
	// BATON_INTERNAL_TLS_CERT (the server's certificate, the worker's client one) would
	// configure the worker too. Its children never see its environment anyway.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return strings.HasPrefix(k, "BATON_") && !slices.Contains(workerEnv, k)
	})
	out := &prefixWriter{w: d.stderr, prefix: "[worker " + name + "] "}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = runner.TiedToParent(syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s worker: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		out.flush()
		close(p.done)
		// A worker exits 0 when it is told to stop, which a Ctrl-C in the terminal tells every
		// process of the group, possibly before this one's context ends.
		if ctx.Err() == nil && err != nil {
			fmt.Fprintf(d.stderr, "baton dev --demo: the %s worker exited: %v\n", name, err)
		}
	}()
	return p, nil
}

// stopWorkers sends SIGTERM to every worker and waits for them, killing those that take
// longer than workerStop.
func stopWorkers(procs []*process) {
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(workerStop)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// prefixWriter writes whole lines to w, each after prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf)
		p.buf = nil
	}
}

// stdin is what `baton demo-task` reads; tests replace it.
var stdin io.Reader = os.Stdin

// RunTask is the hidden `baton demo-task`, the child program of the demo's workers: it reads
// its payload from stdin, calls the task-scoped heartbeat with its capability token (to show that
// the token is all it needs), takes half a second to a second, and prints its output as JSON.
func RunTask(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "baton demo-task: no arguments expected")
		return 2
	}
	var p wrapper.Payload
	if err := json.NewDecoder(stdin).Decode(&p); err != nil {
		fmt.Fprintln(stderr, "baton demo-task: read the payload from stdin:", err)
		return 1
	}
	if p.Job != nil {
		return runPipelineTask(ctx, p, stdout, stderr)
	}
	heartbeat := taskCall(ctx, p, "/v1/task/heartbeat", nil)
	select {
	case <-time.After(500*time.Millisecond + rand.N(500*time.Millisecond)):
	case <-ctx.Done():
		fmt.Fprintln(stderr, "baton demo-task: stopped")
		return 1
	}
	var in map[string]any
	_ = json.Unmarshal(p.Input, &in)
	deps := make([]string, 0, len(p.DependencyOutputs))
	for k := range p.DependencyOutputs {
		deps = append(deps, k)
	}
	slices.Sort(deps)
	var result string
	switch p.TaskKey {
	case "scrape-store":
		result = fmt.Sprintf("scraped %v at %v: 24 products, 5 colours, 2 typefaces", in["storeId"], in["url"])
	case "analyze-competitors":
		result = fmt.Sprintf("found 3 competitors in the %v market", in["market"])
	case "color-tags":
		result = fmt.Sprintf("tagged the palette from %s as %v", strings.Join(deps, ", "), in["style"])
	case "font-pairing":
		result = fmt.Sprintf("paired the typefaces from %s", strings.Join(deps, ", "))
	case "compile-result":
		result = fmt.Sprintf("compiled the results of %s", strings.Join(deps, " and "))
	default:
		result = fmt.Sprintf("ran %s with %d upstream output(s)", p.Name, len(deps))
	}
	out := map[string]any{
		"task":                p.TaskKey,
		"attempt":             p.Attempt,
		"input":               json.RawMessage(cmpRaw(p.Input)),
		"usedOutputsOf":       deps,
		"result":              result,
		"ranAsUid":            os.Getuid(),
		"taskScopedHeartbeat": heartbeat,
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		fmt.Fprintln(stderr, "baton demo-task:", err)
		return 1
	}
	return 0
}

func cmpRaw(r json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(r)) == 0 {
		return json.RawMessage("null")
	}
	return r
}
