package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/bench"
	"github.com/baton-dev/baton/internal/cmdline"
)

const benchUsage = `Usage: baton bench [flags]

Starts a Baton server as a child process (baton dev on a fresh SQLite database, or baton server on
PostgreSQL with --database-url), or uses a running one (--url), and measures it with no-op tasks
worked by in-process workers over HTTP on loopback. Two phases of --tasks tasks each, on fresh jobs:
  work-only       everything is submitted first, no worker running; then the workers start:
                  tasks/s from their start to the last acknowledged completion
  submit-to-done  the workers run while the jobs are submitted: tasks/s from the first
                  submission to the last acknowledged completion
Every job is checked completed through the producer API. Latencies are client-side: claim (a
claim request that returned a task, long-poll wait included) and DAG hand-off (a parent's
completion acknowledged → its last-released child got by a worker).

With --worker-command LABEL=CMD (repeatable), the work-only phase runs once more for each command,
on fresh jobs of the same size and shape whose task name (and queue) is the command's own: the
bench starts sh -c CMD in a process group of its own, with BATON_URL (the producer API),
BATON_INTERNAL_URL (the internal listener), BATON_API_KEY, BATON_BENCH_TASK (the task name to work)
and BATON_BENCH_CONCURRENCY (--workers) in its environment, and the command works the tasks with
no-op handlers until SIGTERM. Its tasks/s runs from the first claim of one of its tasks to the last
completion, as the server's events recorded them (to the millisecond), so that the interpreter's
start does not count; the time from the command's start to that first claim is its "ready after".
Once every job finished, the bench reads the CPU time and peak RSS of the command's process tree
from /proc, and stops it: SIGTERM to its group, SIGKILL 10s later. One row per worker, side by
side: the in-process workers, then each command. baton bench worker is the Go SDK's worker as such
a command (see baton bench worker --help).

With --soak DURATION, the bench runs a soak instead of the phases: the one --worker-command works
jobs of --dag's shape and at most --job-size tasks, submitted at a steady --rate (required) for
DURATION, while the bench samples the resident memory of the command's process tree every 2s. It
prints the RSS after --soak-baseline (the first minute), at the end of the schedule, their ratio and
the peak, waits until every job completed, and exits 1 when the RSS grew by more than
--soak-max-growth percent. Without --timeout, a soak gives up DURATION + 10m after it starts.

With --steady DURATION, the bench offers a steady load instead of the phases, as queue benchmarks
do: jobs of independent tasks (--job-size of them, 1 unless given: each task a job of its own)
submitted at --rate (required) tasks/s for DURATION, worked by the in-process SDK workers
(--workers, --batch). As each --window (10s) closes it prints a row: the tasks offered (their
POST /jobs sent) and completed per second; the pickup latency p50 and p99, from a job's POST /jobs
answer to a worker's handler starting its task (0 when the handler came first); the POST /jobs
round trip's p99; and on PostgreSQL the run's tasks ready and not claimed (queue depth) and the
hot tables' dead tuples and total size (pg_stat_user_tables, pg_total_relation_size; the tables the
submission, claims and completions write: jobs, tasks, task_deps, attempts, events, outbox).
With --pin-at D --pin-for P (PostgreSQL: --database-url, or --url with --steady-database-url), D
into the load a session of its own runs BEGIN; SELECT txid_current(), stays idle in that
transaction for P and rolls back: meanwhile vacuum cannot reclaim a dead row version. The pin ends
by the end of DURATION, so that the tables recover under the load that bloated them.
After the load, the windows go on for --steady-after with none offered, then to the first window
end at which every task has completed. A summary follows, and the goals read as met, missed or n/a:
pickup p99 < 100 ms and completions at the offered rate during the pin (over the run without
one), the hot tables back within 10% of their size before the pin within 5m of its end. It is a
measurement: the exit is 0 unless the bench itself failed. Without --timeout, it gives up DURATION
+ --steady-after + 10m after it starts.

With --rate N, work-only is skipped and submit-to-done submits its jobs on a steady schedule of N
tasks/s (a job of k tasks k/N seconds after the one before, never ahead): its tasks/s is the rate
achieved, its latencies those of a server under that load, and the table says whether the
submitters kept the schedule. Measure the maximum rate without --rate first, then run at half of
it to read the hand-off latency under a steady load.

Flags:
`

// runBench is `baton bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) >= 2 && args[0] == bench.ProfileChild {
		return runProfiled(ctx, args[1], args[2:], stdout, stderr)
	}
	if len(args) >= 1 && args[0] == "worker" {
		return runBenchWorker(ctx, args[1:], stderr)
	}
	fs := flag.NewFlagSet("baton bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var cfg bench.Config
	fs.IntVar(&cfg.Tasks, "tasks", 10000, "tasks per phase")
	fs.StringVar(&cfg.DAG, "dag", bench.Flat, "shape of each job: "+strings.Join(bench.DAGs, ", ")+
		" (flat: independent tasks; chain: each task depends on the one before; fanout: a root and its children; diamond: a root, its children and a sink)")
	fs.IntVar(&cfg.JobSize, "job-size", 1000, "most tasks in one job; a larger DAG is several jobs of its shape (with --steady, default 1)")
	fs.IntVar(&cfg.Workers, "workers", 64, "concurrent workers: SDK slots, dialect goroutines or push handlers; a --worker-command's BATON_BENCH_CONCURRENCY")
	fs.StringVar(&cfg.Via, "via", bench.ViaSDK, "worker path: "+strings.Join(bench.Vias, ", ")+
		" (sdk: the Go worker package; stream-worker: /internal/worker/claim and /complete; internal: transport wake-ups, /internal/task-claim and /task-complete; callback: push tasks reported on /v1/tasks/{id}/completed)")
	fs.IntVar(&cfg.Batch, "batch", 8, "sdk: claim requests in flight (worker.WithBatchSize)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "submit-to-done submits this many tasks per second on a steady schedule, and work-only is skipped (0: no limit, both phases); with --soak, the soak's steady rate; with --steady, the offered rate")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	dbURL := fs.String("database-url", "", "run `baton server` on this PostgreSQL database (migrated first) instead of `baton dev` on SQLite")
	var tf transportFlags
	tf.register(fs, "the server's wake-up transport: store, redis or nats (--via internal needs redis or nats)")
	url := fs.String("url", "", "use the running server whose producer API is at this URL instead of starting one")
	internalURL := fs.String("internal-url", "", "with --url: the server's internal listener (without TLS)")
	apiKey := fs.String("api-key", "", "with --url: a producer API key (env BATON_API_KEY)")
	serverPID := fs.Int("server-pid", 0, "with --url: the server's process id, to report its CPU time and peak RSS")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long (with --soak, by default its DURATION + 10m; with --steady, DURATION + --steady-after + 10m)")
	var serverFlags listFlag
	fs.Var(&serverFlags, "server-flag", "`FLAG` passed to the server the bench starts, e.g. --server-flag=--committers=2 (repeatable)")
	verbose := fs.Bool("verbose", false, "print the server's output, the workers' warnings and the worker commands' output on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server process to this file (go tool pprof FILE)")
	var commands workerCommandFlag
	fs.Var(&commands, "worker-command", "run the work-only phase once more with sh -c CMD as the workers, its row named LABEL, for each `LABEL=CMD` given (repeatable)")
	var soak bench.SoakConfig
	fs.DurationVar(&soak.Duration, "soak", 0, "run a soak of this long instead of the phases: the one --worker-command at a steady --rate, its RSS sampled")
	fs.DurationVar(&soak.Baseline, "soak-baseline", time.Minute, "with --soak: the RSS compared with the end's is sampled this long into the soak")
	soak.MaxGrowthPercent = 10
	fs.Var((*percentFlag)(&soak.MaxGrowthPercent), "soak-max-growth", "with --soak: exit 1 when the RSS at the end exceeds the baseline's by more than this `PERCENT` (10 or 10%)")
	var steady bench.SteadyConfig
	fs.DurationVar(&steady.Duration, "steady", 0, "run a steady load of this long instead of the phases: flat jobs at --rate worked by the SDK's workers, read every --window")
	fs.DurationVar(&steady.Window, "window", 10*time.Second, "with --steady: the reporting window")
	fs.DurationVar(&steady.After, "steady-after", 0, "with --steady: go on reading the windows this long after the load, with none offered")
	fs.DurationVar(&steady.PinAt, "pin-at", 0, "with --steady on PostgreSQL: hold the database's xmin horizon with an idle transaction from this far into the load (with --pin-for)")
	fs.DurationVar(&steady.PinFor, "pin-for", 0, "with --steady: how long the pin holds; it ends by the end of --steady")
	steadyDB := fs.String("steady-database-url", "", "with --url and --steady: the server's PostgreSQL database, for its tables' figures and the pin")
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
		return code
	}
	*apiKey = cmp.Or(*apiKey, getenv(ctx, "BATON_API_KEY")) // not the default: -h would show it
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton bench: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	cfg.Transport = tf.kind
	cfg.TransportURL = tf.url()
	cfg.TransportNamespace = tf.namespace
	if err := tf.check(); err != nil {
		return usageErr("%v", err)
	}
	cfg.Commands = commands
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	soaking, steadying := set["soak"], set["steady"]
	if !steadying {
		for _, name := range []string{"window", "steady-after", "pin-at", "pin-for", "steady-database-url"} {
			if set[name] {
				return usageErr("--%s goes with --steady", name)
			}
		}
	}
	external := *url != ""
	if steadying {
		if soaking {
			return usageErr("--soak and --steady are two runs: give one or the other")
		}
		if set["tasks"] {
			return usageErr("--tasks does not apply to --steady, which submits --rate × DURATION tasks")
		}
		if !set["job-size"] {
			cfg.JobSize = 1 // a queue's load: each task a job of its own
		}
		switch {
		case external && *steadyDB != "":
			steady.DatabaseURL = *steadyDB
		case !external && *steadyDB != "":
			return usageErr("--steady-database-url goes with --url; the server the bench starts on --database-url is read on it")
		default:
			steady.DatabaseURL = *dbURL
		}
		if err := steady.Validate(&cfg); err != nil {
			return usageErr("%v", err)
		}
		run := steady.Duration + steady.After
		if !set["timeout"] {
			*timeout = run + 10*time.Minute
		}
		if *timeout <= run {
			return usageErr("--timeout %s is no longer than --steady %s and --steady-after %s", *timeout, steady.Duration, steady.After)
		}
	}
	if soaking {
		for _, name := range []string{"tasks", "via", "batch"} {
			if set[name] {
				return usageErr("--%s does not apply to --soak, which submits --rate × DURATION tasks to its --worker-command", name)
			}
		}
		if err := soak.Validate(&cfg); err != nil {
			return usageErr("%v", err)
		}
		if !set["timeout"] {
			*timeout = soak.Duration + 10*time.Minute
		}
		if *timeout <= soak.Duration {
			return usageErr("--timeout %s is no longer than --soak %s", *timeout, soak.Duration)
		}
	} else {
		for _, name := range []string{"soak-baseline", "soak-max-growth"} {
			if set[name] {
				return usageErr("--%s goes with --soak", name)
			}
		}
		if len(cfg.Commands) > 0 && cfg.Rate > 0 {
			return usageErr("%v", bench.ErrCommandsAtRate)
		}
	}
	if *timeout <= 0 {
		return usageErr("--timeout must be positive")
	}
	if cfg.Rate > 0 && !soaking && !steadying {
		if secs := float64(cfg.Tasks) / cfg.Rate; secs >= timeout.Seconds() {
			return usageErr("--rate %g spreads --tasks %d over %.1fs, no less than --timeout %s: raise --rate or --timeout, or lower --tasks",
				cfg.Rate, cfg.Tasks, secs, *timeout)
		}
	}
	switch {
	case external && *dbURL != "":
		return usageErr("--url uses a running server; --database-url starts one: give one or the other")
	case external && *internalURL == "" && cfg.Via != bench.ViaCallback:
		return usageErr("--url needs --internal-url: the workers claim on the server's internal listener")
	case external && *apiKey == "":
		return usageErr("--url needs --api-key (or BATON_API_KEY)")
	case external && cfg.Via == bench.ViaCallback:
		return usageErr("--via callback needs the server the bench starts: the server must be told the bench's push target when it starts")
	case external && *cpuProfile != "":
		return usageErr("--cpuprofile profiles the server the bench starts; for a running server use its own profiler")
	case !external && (*internalURL != "" || *serverPID != 0):
		return usageErr("--internal-url and --server-pid go with --url")
	case *serverPID < 0:
		return usageErr("--server-pid must be a process id")
	}
	if *serverPID != 0 {
		if _, err := bench.ReadProcStats(*serverPID); err != nil {
			return usageErr("--server-pid %d: %v", *serverPID, err)
		}
	}

	ctx, cancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("--timeout %s passed", *timeout))
	defer cancel()
	logOut := io.Discard
	if *verbose {
		logOut = stderr
	}
	cfg.Log = slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.TaskName = "bench-" + randomHex(4)
	fail := func(err error) int {
		fmt.Fprintln(stderr, "baton bench:", err)
		return 1
	}

	var output io.Writer
	if *verbose {
		output = stderr
		cfg.CommandOutput = stderr
	}
	srv := bench.ServerConfig{DatabaseURL: *dbURL,
		Transport: tf.kind, RedisURL: tf.redisURL, NATSURL: tf.natsURL, TransportNamespace: tf.namespace,
		CPUProfile: *cpuProfile, Flags: serverFlags, Output: output}
	if external {
		cfg.ProducerURL, cfg.InternalURL, cfg.APIKey = strings.TrimRight(*url, "/"), strings.TrimRight(*internalURL, "/"), *apiKey
		cfg.ServerPID = *serverPID
	}
	if soaking {
		return runSoak(ctx, cfg, srv, soak, external, *asJSON, stdout, stderr)
	}
	if steadying {
		return runSteady(ctx, cfg, srv, steady, external, *asJSON, stdout, stderr)
	}

	var res *bench.Result
	var err error
	if external {
		if res, err = bench.Run(ctx, cfg); err == nil {
			res.Store = "external"
		}
	} else {
		res, err = bench.RunServer(ctx, cfg, srv)
	}
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fail(err)
		}
	} else {
		res.WriteTable(stdout)
	}
	if p := res.SubmitToDone.Pacing; p != nil && p.Behind {
		fmt.Fprintf(stderr, "baton bench: the submitters fell behind the --rate schedule (%d of %d jobs late, up to %.1f ms): "+
			"the load came in bursts, not at %g tasks/s; lower --rate or raise --job-size\n", p.LateJobs, res.Jobs, p.MaxLagMs, p.RateTasksPerSec)
	}
	if *cpuProfile != "" {
		fmt.Fprintf(stderr, "server CPU profile written to %s (go tool pprof -top %s)\n", *cpuProfile, *cpuProfile)
	}
	for _, row := range res.WorkOnlyByWorker {
		if row.Command != "" && !cleanStop(row.Stop) {
			fmt.Fprintf(stderr, "baton bench: worker command %s did not stop cleanly on SIGTERM: %s\n", row.Worker, row.Stop)
		}
	}
	return 0
}

// printResult prints a soak's or a steady run's result: as one indented JSON object, or as
// written by its table writer.
func printResult(stdout io.Writer, asJSON bool, res any, writeTable func(io.Writer) error) error {
	if !asJSON {
		return writeTable(stdout)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// runSoak runs a soak and prints it; it fails when the worker's RSS grew more than allowed.
func runSoak(ctx context.Context, cfg bench.Config, srv bench.ServerConfig, soak bench.SoakConfig, external, asJSON bool,
	stdout, stderr io.Writer) int {
	var res *bench.SoakResult
	var err error
	if external {
		if res, err = bench.Soak(ctx, cfg, soak); err == nil {
			res.Store = "external"
		}
	} else {
		res, err = bench.SoakServer(ctx, cfg, srv, soak)
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton bench:", err)
		return 1
	}
	if err := printResult(stdout, asJSON, res, res.WriteTable); err != nil {
		fmt.Fprintln(stderr, "baton bench:", err)
		return 1
	}
	if p := res.Pacing; p != nil && p.Behind {
		fmt.Fprintf(stderr, "baton bench: the submitters fell behind the --rate schedule (%d of %d jobs late, up to %.1f ms)\n", p.LateJobs, res.Jobs, p.MaxLagMs)
	}
	if !cleanStop(res.Stop) {
		fmt.Fprintf(stderr, "baton bench: worker command %s did not stop cleanly on SIGTERM: %s\n", res.Worker, res.Stop)
	}
	if res.Grew() {
		fmt.Fprintf(stderr, "baton bench: worker command %s grew from %.1f MiB after %s to %.1f MiB at the end of the soak: %+.1f%%, more than --soak-max-growth %s%%\n",
			res.Worker, float64(res.BaselineRSSBytes)/(1<<20), soak.Baseline, float64(res.EndRSSBytes)/(1<<20), res.GrowthPercent,
			strconv.FormatFloat(res.MaxGrowthPercent, 'f', -1, 64))
		return 1
	}
	return 0
}

// runSteady runs a steady load and prints it: in a table, each window's row as it closes, or as
// one JSON object at the end. The goals' checks are printed, not enforced: it fails only when the
// bench did.
func runSteady(ctx context.Context, cfg bench.Config, srv bench.ServerConfig, steady bench.SteadyConfig, external, asJSON bool,
	stdout, stderr io.Writer) int {
	if !asJSON {
		steady.Live = stdout
	}
	var res *bench.SteadyResult
	var err error
	if external {
		steady.Store = "external"
		res, err = bench.Steady(ctx, cfg, steady)
	} else {
		res, err = bench.SteadyServer(ctx, cfg, srv, steady)
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton bench:", err)
		return 1
	}
	if err := printResult(stdout, asJSON, res, res.WriteSummary); err != nil {
		fmt.Fprintln(stderr, "baton bench:", err)
		return 1
	}
	if p := res.Pacing; p != nil && p.Behind {
		fmt.Fprintf(stderr, "baton bench: the submitters fell behind the --rate schedule (%d of %d jobs late, up to %.1f ms): "+
			"the load came in bursts, not at %g tasks/s\n", p.LateJobs, res.Jobs, p.MaxLagMs, p.RateTasksPerSec)
	}
	if res.Autovacuum != nil && !*res.Autovacuum {
		fmt.Fprintln(stderr, "baton bench: autovacuum is off on the database server: nothing reclaimed the dead tuples, pin or not")
	}
	return 0
}

// cleanStop says whether a worker command ended as asked: it exited 0 on SIGTERM, or SIGTERM
// ended it.
func cleanStop(stop string) bool { return stop == "exit 0" || stop == "signal: terminated" }

// workerCommandFlag is the repeatable --worker-command LABEL=CMD.
type workerCommandFlag []bench.WorkerCommand

func (f *workerCommandFlag) String() string {
	var parts []string
	for _, c := range *f {
		parts = append(parts, c.Label+"="+c.Command)
	}
	return strings.Join(parts, " ")
}

func (f *workerCommandFlag) Set(v string) error {
	c, err := bench.ParseWorkerCommand(v)
	if err != nil {
		return err
	}
	*f = append(*f, c)
	return nil
}

// percentFlag is a percentage, given as 10 or 10%.
type percentFlag float64

func (p *percentFlag) String() string { return strconv.FormatFloat(float64(*p), 'f', -1, 64) }

func (p *percentFlag) Set(v string) error {
	x, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "%"), 64)
	if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return fmt.Errorf("want a percentage of at least 0, like 10 or 10%%, got %q", v)
	}
	*p = percentFlag(x)
	return nil
}

// runProfiled runs a server command under the CPU profiler, writing the profile when it stops.
func runProfiled(ctx context.Context, file string, args []string, stdout, stderr io.Writer) int {
	f, err := os.Create(file)
	if err != nil {
		fmt.Fprintln(stderr, "baton bench:", err)
		return 1
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(stderr, "baton bench:", err)
		return 1
	}
	code := run(ctx, args, stdout, stderr)
	pprof.StopCPUProfile()
	return code
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
