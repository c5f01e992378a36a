// Package bench measures a Baton server end to end, as its users see it: it submits jobs of
// no-op tasks over the producer API and works them with in-process workers over real HTTP,
// through one of the worker paths, timing everything client-side.
//
// A run has two phases of Config.Tasks tasks each, on fresh jobs:
//
//   - work-only: every job is submitted while no worker runs (the submission is timed alone);
//     then the workers start, and the phase lasts until the last completion is acknowledged.
//   - submit-to-done: with the same workers running, the jobs are submitted, and the phase lasts
//     from the first submission to the last acknowledged completion.
//
// With Config.Rate, the run measures the server under a steady load instead: the work-only phase
// is skipped, and the submit-to-done phase submits its jobs on a schedule of Rate tasks per
// second (see pacer), its span running from the schedule's start. Its tasks/s is then the rate
// achieved, and its claim and hand-off latencies are those of a server that keeps up with a
// known rate rather than one that drains a backlog.
//
// Each phase ends with a check through the producer API that every one of its jobs completed.
//
// Instead of the phases, Soak runs a worker command at a steady rate and samples its memory, and
// Steady offers a fixed rate of independent tasks for a while and reads the server window by
// window, on PostgreSQL with the database's xmin horizon held for part of it (SteadyConfig).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/client"
)

// The worker paths.
const (
	// ViaSDK runs the public worker package: one Worker, WithConcurrency(Workers),
	// WithBatchSize(Batch).
	ViaSDK = "sdk"
	// ViaStreamWorker runs Workers goroutines that each claim (/internal/worker/claim, a long
	// poll) and complete (/internal/worker/complete) one task at a time: the stream-worker dialect.
	ViaStreamWorker = "stream-worker"
	// ViaInternal runs Workers goroutines that each take a wake-up from the transport, claim its
	// task by id (/internal/task-claim) and complete it (/internal/task-complete): the internal
	// dialect.
	ViaInternal = "internal"
	// ViaCallback submits push tasks: the server POSTs each to the bench's push target, which
	// answers 202 and has Workers goroutines report /v1/tasks/{id}/completed: the callback dialect.
	ViaCallback = "callback"
)

// Vias lists the paths in the order the usage text gives them.
var Vias = []string{ViaSDK, ViaStreamWorker, ViaInternal, ViaCallback}

// Config is one run against a running server.
type Config struct {
	ProducerURL string // the producer API, e.g. http://127.0.0.1:8080
	InternalURL string // the internal listener (without TLS), for sdk, stream-worker and internal
	APIKey      string

	Tasks   int    // per phase
	DAG     string // Flat, Chain, Fanout or Diamond
	JobSize int    // the most tasks in one job; a larger DAG is several jobs of its shape
	Workers int    // concurrent workers (SDK slots, goroutines, push handlers)
	Via     string
	Batch   int // sdk: claim requests in flight (worker.WithBatchSize)
	// Submitters is how many goroutines submit jobs at once (default 4).
	Submitters int
	// Rate, if not 0, is the rate in tasks per second at which the submit-to-done phase submits
	// its jobs; the work-only phase is then skipped.
	Rate float64

	// The server's wake-up transport: "store" (or "") or "redis" or "nats" with its URL and
	// namespace. Via internal needs one; via sdk uses it too when set.
	Transport, TransportURL, TransportNamespace string

	// TaskName names every task (and so its queue): unique per run, so that nothing else on the
	// server is claimed. Default "bench".
	TaskName string
	// Push is the target the server was told to push TaskName to (Via callback).
	Push *PushTarget
	// ServerPID, if not 0, is the server process whose CPU time and peak RSS Run reports.
	ServerPID int
	// Log receives the workers' warnings; default: discarded.
	Log *slog.Logger

	// Commands are worker programs to measure besides the in-process workers: after the two
	// phases, the work-only phase runs once more for each, on fresh jobs of its own task name,
	// with the command as the workers (see WorkerRow).
	Commands []WorkerCommand
	// CommandOutput, if not nil, receives the commands' output, each line after its label.
	CommandOutput io.Writer
}

// Validate checks the settings a user chooses.
func (c *Config) Validate() error {
	switch {
	case !slices.Contains(DAGs, c.DAG):
		return fmt.Errorf("--dag %q: want %s", c.DAG, orList(DAGs))
	case !slices.Contains(Vias, c.Via):
		return fmt.Errorf("--via %q: want %s", c.Via, orList(Vias))
	case c.Tasks < 1:
		return fmt.Errorf("--tasks must be at least 1, got %d", c.Tasks)
	case c.Workers < 1:
		return fmt.Errorf("--workers must be at least 1, got %d", c.Workers)
	case c.Batch < 1:
		return fmt.Errorf("--batch must be at least 1, got %d", c.Batch)
	case c.JobSize < 1:
		return fmt.Errorf("--job-size must be at least 1, got %d", c.JobSize)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("--rate must be 0 (no limit) or a number of tasks per second above 0, got %v", c.Rate)
	}
	switch c.Transport {
	case "", "store", "redis", "nats":
	default:
		return fmt.Errorf("--transport %q: want store, redis or nats", c.Transport)
	}
	labels := map[string]bool{}
	for _, wc := range c.Commands {
		if labels[strings.ToLower(wc.Label)] {
			return fmt.Errorf("--worker-command: the label %q is given twice", wc.Label)
		}
		labels[strings.ToLower(wc.Label)] = true
	}
	if c.Via == ViaInternal && !c.wakeups() {
		return errors.New("--via internal needs --transport redis or --transport nats: its workers wait for the server's wake-ups on that transport")
	}
	return nil
}

func (c *Config) wakeups() bool { return c.Transport == "redis" || c.Transport == "nats" }

func orList(xs []string) string {
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

// ErrCommandsAtRate refuses worker commands at a rate: they run the work-only phase.
var ErrCommandsAtRate = errors.New("--worker-command runs the work-only phase, which --rate skips: drop --rate, or use --soak to run a command at a steady rate")

// Result is what a run measured. Latencies are nil where they do not apply.
type Result struct {
	Store   string `json:"store"` // sqlite or postgres (set by RunServer), or external (by the caller)
	Via     string `json:"via"`
	DAG     string `json:"dag"`
	Tasks   int    `json:"tasks"` // per phase
	Jobs    int    `json:"jobs"`  // per phase
	Workers int    `json:"workers"`
	Batch   int    `json:"batch"`
	// RateTasksPerSec is Config.Rate, nil without one.
	RateTasksPerSec *float64 `json:"rate_tasks_per_second"`

	WorkOnly     *Phase `json:"work_only"` // nil when skipped (Config.Rate)
	SubmitToDone Phase  `json:"submit_to_done"`
	// WorkOnlyByWorker is the work-only phase per kind of worker: the in-process workers (the
	// figures of WorkOnly), then each Config.Commands; nil when the phase was skipped.
	WorkOnlyByWorker []WorkerRow `json:"work_only_by_worker"`

	// The server process after the in-process workers' two phases, nil when unknown.
	ServerCPUSeconds   *float64 `json:"server_cpu_seconds"`
	ServerPeakRSSBytes *int64   `json:"server_peak_rss_bytes"`
	// BenchCPUSeconds is this process's CPU time during the in-process workers' two phases:
	// its workers and submitters compete with the server for the machine's cores.
	BenchCPUSeconds *float64 `json:"bench_cpu_seconds"`
}

// Phase is what one phase measured.
type Phase struct {
	SubmitSeconds float64 `json:"submit_seconds"` // first submission to the last one answered
	Seconds       float64 `json:"seconds"`        // the phase's measured span (see the package doc)
	TasksPerSec   float64 `json:"tasks_per_second"`
	// ClaimLatency is the client-side duration of the claim requests that returned a task,
	// long-poll wait included (sdk, stream-worker, internal).
	ClaimLatency *Latency `json:"claim_latency"`
	// HandoffLatency is, for each task with parents, the time from the acknowledgement of its
	// last parent's completion to the worker getting it (claim answered, handler called, push
	// received).
	HandoffLatency *Latency `json:"handoff_latency"`
	// Errors counts failed requests of the workers (each retried or moved past).
	Errors int `json:"errors"`
	// Pacing is how the submission kept to Config.Rate; nil without one.
	Pacing *Pacing `json:"pacing"`
}

// bench is one run.
type bench struct {
	cfg  Config
	hc   *http.Client
	pc   *client.Client
	rec  phaseRecorder
	runs string // prefix of job names
	// steady, in a steady run, hears of the submissions and of what the SDK's workers do,
	// instead of rec.
	steady *steadyLog
}

// Run runs both phases and returns what they measured. It gives up when ctx ends.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Via == ViaCallback && cfg.Push == nil {
		return nil, errors.New("--via callback needs a push target the server delivers to")
	}
	if cfg.Via != ViaCallback && cfg.Push != nil {
		return nil, errors.New("a push target is only for --via callback")
	}
	if len(cfg.Commands) > 0 && cfg.Rate > 0 {
		return nil, ErrCommandsAtRate
	}
	b := newBench(cfg)
	defer b.hc.CloseIdleConnections()
	cfg = b.cfg
	if cfg.Push != nil {
		cfg.Push.attach(b)
		defer cfg.Push.attach(nil)
	}
	self, selfErr := ReadProcStats(os.Getpid())

	runtime := ""
	if cfg.Via == ViaCallback {
		runtime = "push"
	}
	jobsB, err := buildJobs(cfg.DAG, cfg.Tasks, cfg.JobSize, cfg.TaskName, runtime, b.runs+"-submit-to-done")
	if err != nil {
		return nil, err
	}
	var jobsA jobBodies
	if cfg.Rate == 0 {
		if jobsA, err = buildJobs(cfg.DAG, cfg.Tasks, cfg.JobSize, cfg.TaskName, runtime, b.runs+"-work-only"); err != nil {
			return nil, err
		}
	}
	res := &Result{Via: cfg.Via, DAG: cfg.DAG, Tasks: cfg.Tasks, Jobs: len(jobsB), Workers: cfg.Workers, Batch: cfg.Batch}
	if cfg.Rate > 0 {
		rate := cfg.Rate
		res.RateTasksPerSec = &rate
	}

	// Work-only: submit everything, then start the workers. At a rate, the workers start straight
	// into submit-to-done.
	recB := newRecorder(cfg.Tasks)
	var workOnly *backlog
	if cfg.Rate == 0 {
		if workOnly, err = b.submitBacklog(ctx, jobsA); err != nil {
			return nil, err
		}
	} else {
		b.rec.set(recB)
	}

	workCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	workersDone := make(chan error, 1)
	server1, self1 := b.serverCPU(), selfCPU()
	t1 := time.Now()
	go func() { workersDone <- b.work(workCtx) }()
	stop := func() error {
		stopWorkers()
		return <-workersDone
	}
	if workOnly != nil {
		p, err := b.finish(ctx, workOnly.rec, workOnly.ids, t1, workOnly.submit, workersDone)
		if err != nil {
			stop()
			return nil, fmt.Errorf("work-only phase: %w", err)
		}
		res.WorkOnly = &p
		res.WorkOnlyByWorker = []WorkerRow{{Worker: "go " + cfg.Via, Task: cfg.TaskName, SubmitSeconds: p.SubmitSeconds,
			Seconds: p.Seconds, TasksPerSec: p.TasksPerSec, CPUSeconds: delta(self1, selfCPU()), ServerCPUSeconds: delta(server1, b.serverCPU())}}
		b.rec.set(recB)
	}

	// Submit-to-done: the workers keep running; the jobs go at the rate if there is one.
	t2 := time.Now()
	pace := newPacer(jobSizes(cfg.Tasks, cfg.JobSize), cfg.Rate, t2)
	idsB, err := b.submit(ctx, jobsB, pace)
	if err != nil {
		stop()
		return nil, err
	}
	submitB := time.Since(t2)
	if res.SubmitToDone, err = b.finish(ctx, recB, idsB, t2, submitB, workersDone); err != nil {
		stop()
		return nil, fmt.Errorf("submit-to-done phase: %w", err)
	}
	res.SubmitToDone.Pacing = pace.report(cfg.Rate, cfg.Tasks, submitB)

	// Read the server's figures before anything stops it.
	if cfg.ServerPID != 0 {
		st, err := ReadProcStats(cfg.ServerPID)
		if err != nil {
			return nil, fmt.Errorf("server statistics: %w", err)
		}
		cpu := round(st.CPUSeconds, 2)
		res.ServerCPUSeconds, res.ServerPeakRSSBytes = &cpu, &st.PeakRSSBytes
	}
	if err := stop(); err != nil {
		return nil, fmt.Errorf("stop the workers: %w", err)
	}
	if now, err := ReadProcStats(os.Getpid()); err == nil && selfErr == nil {
		cpu := round(now.CPUSeconds-self.CPUSeconds, 2)
		res.BenchCPUSeconds = &cpu
	}

	// The work-only phase again, once per worker command.
	for i, wc := range cfg.Commands {
		row, err := b.runCommand(ctx, i, wc)
		if err != nil {
			return nil, err
		}
		res.WorkOnlyByWorker = append(res.WorkOnlyByWorker, row)
	}
	return res, nil
}

// newBench fills in cfg's defaults and makes the bench's clients.
func newBench(cfg Config) *bench {
	if cfg.TaskName == "" {
		cfg.TaskName = "bench"
	}
	if cfg.Submitters < 1 {
		cfg.Submitters = 4
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	hc := newHTTPClient(cfg.Workers + cfg.Submitters)
	return &bench{cfg: cfg, hc: hc, pc: client.New(cfg.ProducerURL, cfg.APIKey, client.WithHTTPClient(hc),
		client.WithUserAgent("baton-bench")), runs: cfg.TaskName}
}

// backlog is the work-only phase's jobs, submitted before any worker runs.
type backlog struct {
	rec    *recorder
	ids    []string
	submit time.Duration // how long the submission took
}

// submitBacklog submits the work-only phase's jobs, with the phase's recorder in place for the
// workers that start next.
func (b *bench) submitBacklog(ctx context.Context, jobs jobBodies) (*backlog, error) {
	rec := newRecorder(b.cfg.Tasks)
	b.rec.set(rec)
	t0 := time.Now()
	ids, err := b.submit(ctx, jobs, nil)
	if err != nil {
		return nil, err
	}
	return &backlog{rec: rec, ids: ids, submit: time.Since(t0)}, nil
}

// finish waits for the phase's last acknowledged completion, checks through the producer API
// that every job completed, and sums the phase up. The span runs from start to the last
// acknowledgement, or, should the check find a job still unfinished, to when it finds them all
// completed.
func (b *bench) finish(ctx context.Context, rec *recorder, jobIDs []string, start time.Time, submit time.Duration,
	workersDone <-chan error) (Phase, error) {
	select {
	case <-rec.done:
	case err := <-workersDone:
		return Phase{}, fmt.Errorf("the workers stopped: %w", cmpErr(err, errors.New("without an error")))
	case <-ctx.Done():
		n, last := rec.errorCount()
		return Phase{}, fmt.Errorf("%d of %d tasks acknowledged when the bench gave up (%w)%s",
			rec.ackedCount(), rec.target, context.Cause(ctx), lastError(n, last))
	}
	end := rec.lastAck()
	if verified, err := b.verify(ctx, jobIDs); err != nil {
		return Phase{}, err
	} else if !verified.IsZero() {
		end = verified
	}
	secs := end.Sub(start).Seconds()
	n, _ := rec.errorCount()
	p := Phase{SubmitSeconds: round(submit.Seconds(), 4), Seconds: round(secs, 4), TasksPerSec: round(float64(rec.target)/secs, 1),
		ClaimLatency: rec.claimLatency(), HandoffLatency: rec.handoffLatency(), Errors: n}
	return p, nil
}

// round rounds x to the given number of decimals, for a readable JSON.
func round(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}

func lastError(n int, err error) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d requests failed, the last with: %v", n, err)
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// verify checks that every job completed with all its tasks. It returns the zero time if they
// all had at the first look; otherwise it looks again until they have, and returns when.
func (b *bench) verify(ctx context.Context, jobIDs []string) (time.Time, error) {
	pending := jobIDs
	for first := true; ; first = false {
		var still []string
		for _, id := range pending {
			job, err := b.pc.GetJob(ctx, id)
			if err != nil {
				return time.Time{}, fmt.Errorf("check job %s: %w", id, err)
			}
			switch {
			case job.Status == client.JobCompleted && job.Progress[client.TaskCompleted] == job.TotalTasks:
			case job.Status == client.JobProcessing:
				still = append(still, id)
			default:
				return time.Time{}, fmt.Errorf("job %s ended %s: %v", id, job.Status, job.Progress)
			}
		}
		if len(still) == 0 {
			if first {
				return time.Time{}, nil
			}
			return time.Now(), nil
		}
		pending = still
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d jobs still processing after every task was acknowledged (%w)", len(still), context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// jobSource gives the POST /jobs bodies of a phase.
type jobSource interface {
	count() int
	body(i int) ([]byte, error)
}

func (j jobBodies) count() int                 { return len(j) }
func (j jobBodies) body(i int) ([]byte, error) { return j[i], nil }

// submit submits the jobs with Submitters goroutines, each job when pace lets it go, and returns
// their ids in order.
func (b *bench) submit(ctx context.Context, jobs jobSource, pace *pacer) ([]string, error) {
	n := jobs.count()
	ids := make([]string, n)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(b.cfg.Submitters, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || !pace.wait(ctx, i) {
					return
				}
				body, err := jobs.body(i)
				if err != nil {
					cancel(err)
					return
				}
				sent := time.Now()
				if b.steady != nil {
					b.steady.sending(i, sent)
				}
				res, err := b.pc.SubmitJobJSON(ctx, body)
				answered := time.Now()
				if err != nil {
					var apiErr *client.APIError
					if errors.As(err, &apiErr) && apiErr.Status == http.StatusTooManyRequests {
						err = fmt.Errorf("%w (the server rate-limits the key: start it with --rate-limit 0 --daily-quota 0)", err)
					}
					cancel(fmt.Errorf("submit job %d of %d: %w", i+1, n, err))
					return
				}
				if b.steady != nil {
					b.steady.submitted(i, res.JobID, sent, answered)
				}
				ids[i] = res.JobID
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return ids, nil
}

// work runs the workers of the chosen path until ctx ends.
func (b *bench) work(ctx context.Context) error {
	switch b.cfg.Via {
	case ViaSDK:
		return b.workSDK(ctx)
	case ViaStreamWorker:
		return b.workStream(ctx)
	case ViaInternal:
		return b.workInternal(ctx)
	case ViaCallback:
		return b.cfg.Push.work(ctx, b)
	}
	return fmt.Errorf("unknown path %q", b.cfg.Via)
}

// newHTTPClient is a client for many concurrent requests to one loopback server: it keeps an
// idle connection per worker (the default transport keeps two per host, so most requests would
// open a new connection) and never uses a proxy.
func newHTTPClient(conns int) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}
}
