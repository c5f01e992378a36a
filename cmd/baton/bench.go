package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/bench"
	"github.com/baton-dev/baton/internal/store/postgres"
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

With --rate N, work-only is skipped and submit-to-done submits its jobs on a steady schedule of N
tasks/s (a job of k tasks k/N seconds after the one before, never ahead): its tasks/s is the rate
achieved, its latencies those of a server under that load, and the table says whether the
submitters kept the schedule. Measure the maximum rate without --rate first, then run at half of
it to read the hand-off latency under a steady load.

Flags:
`

// benchProfileChild is the hidden first argument of `baton bench` with which the bench starts
// its server under the CPU profiler: baton bench profile-child FILE dev|server ...
const benchProfileChild = "profile-child"

// runBench is `baton bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) >= 2 && args[0] == benchProfileChild {
		return runProfiled(ctx, args[1], args[2:], stdout, stderr)
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
	fs.IntVar(&cfg.JobSize, "job-size", 1000, "most tasks in one job; a larger DAG is several jobs of its shape")
	fs.IntVar(&cfg.Workers, "workers", 64, "concurrent workers: SDK slots, dialect goroutines or push handlers")
	fs.StringVar(&cfg.Via, "via", bench.ViaSDK, "worker path: "+strings.Join(bench.Vias, ", ")+
		" (sdk: the Go worker package; stream-worker: /internal/worker/claim and /complete; internal: transport wake-ups, /internal/task-claim and /task-complete; callback: push tasks reported on /v1/tasks/{id}/completed)")
	fs.IntVar(&cfg.Batch, "batch", 8, "sdk: claim requests in flight (worker.WithBatchSize)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "submit-to-done submits this many tasks per second on a steady schedule, and work-only is skipped (0: no limit, both phases)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	dbURL := fs.String("database-url", "", "run `baton server` on this PostgreSQL database (migrated first) instead of `baton dev` on SQLite")
	var tf transportFlags
	tf.register(fs, "the server's wake-up transport: store, redis or nats (--via internal needs redis or nats)")
	url := fs.String("url", "", "use the running server whose producer API is at this URL instead of starting one")
	internalURL := fs.String("internal-url", "", "with --url: the server's internal listener (without TLS)")
	apiKey := fs.String("api-key", "", "with --url: a producer API key (env BATON_API_KEY)")
	serverPID := fs.Int("server-pid", 0, "with --url: the server's process id, to report its CPU time and peak RSS")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	var serverFlags listFlag
	fs.Var(&serverFlags, "server-flag", "`FLAG` passed to the server the bench starts, e.g. --server-flag=--committers=2 (repeatable)")
	verbose := fs.Bool("verbose", false, "print the server's output and the workers' warnings on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server process to this file (go tool pprof FILE)")
	if code, ok := parseFlags(ctx, fs, args); !ok {
		return code
	}
	*apiKey = cmp.Or(*apiKey, os.Getenv("BATON_API_KEY")) // not the default: -h would show it
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
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	if *timeout <= 0 {
		return usageErr("--timeout must be positive")
	}
	if cfg.Rate > 0 {
		if secs := float64(cfg.Tasks) / cfg.Rate; secs >= timeout.Seconds() {
			return usageErr("--rate %g spreads --tasks %d over %.1fs, no less than --timeout %s: raise --rate or --timeout, or lower --tasks",
				cfg.Rate, cfg.Tasks, secs, *timeout)
		}
	}
	external := *url != ""
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

	store := "external"
	var child *bench.Child
	if external {
		cfg.ProducerURL, cfg.InternalURL, cfg.APIKey = strings.TrimRight(*url, "/"), strings.TrimRight(*internalURL, "/"), *apiKey
		cfg.ServerPID = *serverPID
	} else {
		store = "sqlite"
		if *dbURL != "" {
			store = "postgres"
		}
		if cfg.Via == bench.ViaCallback {
			push, err := bench.NewPushTarget(2*cfg.Tasks + 1024)
			if err != nil {
				return fail(err)
			}
			defer push.Close()
			cfg.Push = push
		}
		var output io.Writer
		if *verbose {
			output = stderr
		}
		var dataDir string
		if *dbURL == "" {
			dir, err := os.MkdirTemp("", "baton-bench-")
			if err != nil {
				return fail(err)
			}
			defer os.RemoveAll(dir) // after the server stopped: defers run last in, first out
			dataDir = dir
		}
		var err error
		child, err = startBenchServer(ctx, &cfg, dataDir, *dbURL, tf, *cpuProfile, output, serverFlags)
		if err != nil {
			return fail(err)
		}
		cfg.ServerPID = child.PID()
		defer child.Stop(30 * time.Second)
	}

	res, err := bench.Run(ctx, cfg)
	if child != nil {
		if stopErr := child.Stop(30 * time.Second); stopErr != nil && err == nil {
			err = stopErr
		}
	}
	if err != nil {
		return fail(err)
	}
	res.Store = store
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fail(err)
		}
	} else {
		printBench(stdout, res)
	}
	if p := res.SubmitToDone.Pacing; p != nil && p.Behind {
		fmt.Fprintf(stderr, "baton bench: the submitters fell behind the --rate schedule (%d of %d jobs late, up to %.1f ms): "+
			"the load came in bursts, not at %g tasks/s; lower --rate or raise --job-size\n", p.LateJobs, res.Jobs, p.MaxLagMs, p.RateTasksPerSec)
	}
	if *cpuProfile != "" {
		fmt.Fprintf(stderr, "server CPU profile written to %s (go tool pprof -top %s)\n", *cpuProfile, *cpuProfile)
	}
	return 0
}

// startBenchServer starts this binary as `baton dev` on a fresh SQLite database in dataDir, or as
// `baton server` on dbURL, with free loopback ports, no per-job, rate or quota
// limits, and fills in the server's URLs and API key.
func startBenchServer(ctx context.Context, cfg *bench.Config, dataDir, dbURL string, tf transportFlags, cpuProfile string, output io.Writer, extra []string) (*bench.Child, error) {
	// A free port may be taken by another process between the pick and the child's listen (tests
	// start servers side by side): then the child starts again on other ports.
	for attempt := 1; ; attempt++ {
		c, err := startBenchServerOnce(ctx, cfg, dataDir, dbURL, tf, cpuProfile, output, extra)
		if errors.Is(err, bench.ErrAddrTaken) && attempt < 3 {
			fmt.Fprintf(output, "bench: %v; starting the server again on other ports\n", err)
			continue
		}
		return c, err
	}
}

func startBenchServerOnce(ctx context.Context, cfg *bench.Config, dataDir, dbURL string, tf transportFlags, cpuProfile string, output io.Writer, extra []string) (*bench.Child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start the server: %w", err)
	}
	producer, err := bench.FreeAddr()
	if err != nil {
		return nil, err
	}
	internal, err := bench.FreeAddr()
	if err != nil {
		return nil, err
	}
	common := []string{"--listen", producer, "--internal-listen", internal,
		"--max-tasks-per-job", "0", "--rate-limit", "0", "--daily-quota", "0", "--shutdown-timeout", "10s",
		"--transport", tf.kind, "--redis-url", tf.redisURL, "--nats-url", tf.natsURL, "--transport-namespace", tf.namespace}
	if cfg.Push != nil {
		common = append(common, "--push-target", cfg.TaskName+"="+cfg.Push.URL(), "--public-url", "http://"+producer)
	}
	common = append(common, extra...)
	var args, env []string
	if dbURL == "" {
		if cfg.APIKey == "" {
			cfg.APIKey = "bench-" + randomHex(16)
		}
		// No metrics listener: it would take dev's default port, which a developer's own
		// baton dev may hold.
		args = append([]string{"dev", "--data-dir", dataDir, "--metrics-listen="}, common...)
		env = []string{"BATON_API_KEY=" + cfg.APIKey}
	} else {
		if cfg.APIKey == "" { // made on the first start; a start again on other ports keeps it
			if cfg.APIKey, err = benchPostgresKey(ctx, dbURL, cfg.TaskName); err != nil {
				return nil, err
			}
		}
		args = append([]string{"server", "--database-url", dbURL, "--internal-insecure"}, common...)
	}
	if cpuProfile != "" {
		args = append([]string{"bench", benchProfileChild, cpuProfile}, args...)
	}
	cfg.ProducerURL, cfg.InternalURL = "http://"+producer, "http://"+internal
	return bench.StartChild(ctx, bench.ChildConfig{Path: exe, Args: args, Env: env, ProducerURL: cfg.ProducerURL, APIKey: cfg.APIKey, Output: output})
}

// benchPostgresKey migrates the database and creates an API key on it, as `baton migrate` and
// `baton apikey create` would.
func benchPostgresKey(ctx context.Context, dbURL, name string) (string, error) {
	st, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: 2, Migrate: true})
	if err != nil {
		return "", err
	}
	defer st.Close()
	_, secret, err := auth.CreateKey(ctx, st, name, auth.DefaultTenant, "", time.Now())
	if err != nil {
		return "", fmt.Errorf("create an API key: %w", err)
	}
	return secret, nil
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

// printBench prints the result as one table. With a --rate, the work-only column says it was
// skipped, and a row tells how the submission kept to the rate.
func printBench(w io.Writer, r *bench.Result) {
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	via := r.Via
	if r.Via == bench.ViaSDK {
		via += fmt.Sprintf(" (batch %d)", r.Batch)
	}
	fmt.Fprintf(tw, "store\t%s\n", r.Store)
	fmt.Fprintf(tw, "via\t%s\n", via)
	fmt.Fprintf(tw, "dag\t%s\n", r.DAG)
	fmt.Fprintf(tw, "tasks\t%d per phase, in %d jobs\n", r.Tasks, r.Jobs)
	fmt.Fprintf(tw, "workers\t%d\n", r.Workers)
	if r.RateTasksPerSec != nil {
		fmt.Fprintf(tw, "rate\t%s tasks/s asked\n", fmtRate(*r.RateTasksPerSec))
	}
	fmt.Fprintf(tw, "\twork-only\tsubmit-to-done\n")
	for i, row := range benchRows(r.SubmitToDone.Pacing != nil) {
		a := "n/a"
		switch {
		case r.WorkOnly != nil:
			a = row.cell(*r.WorkOnly)
		case i == 0:
			a = "skipped (--rate)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.name, a, row.cell(r.SubmitToDone))
	}
	fmt.Fprintf(tw, "server CPU seconds\t%s\n", fmtOpt(r.ServerCPUSeconds, func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }))
	fmt.Fprintf(tw, "server peak RSS\t%s\n", fmtOpt(r.ServerPeakRSSBytes, func(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }))
	fmt.Fprintf(tw, "bench CPU seconds\t%s\n", fmtOpt(r.BenchCPUSeconds, func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }))
	tw.Flush()
}

// benchRow is a row of the table's phase columns: its name and a phase's cell.
type benchRow struct {
	name string
	cell func(bench.Phase) string
}

// benchRows are the rows of the phase columns, with the submission's pacing if paced.
func benchRows(paced bool) []benchRow {
	rows := []benchRow{
		{"tasks/s", func(p bench.Phase) string { return fmt.Sprintf("%.0f", p.TasksPerSec) }},
		{"seconds", func(p bench.Phase) string { return fmt.Sprintf("%.3f", p.Seconds) }},
		{"submit seconds", func(p bench.Phase) string { return fmt.Sprintf("%.3f", p.SubmitSeconds) }},
	}
	if paced {
		rows = append(rows, benchRow{"submitted tasks/s", func(p bench.Phase) string { return fmtPacing(p.Pacing) }})
	}
	return append(rows,
		benchRow{"claim ms p50 / p95 / p99", func(p bench.Phase) string { return fmtLatency(p.ClaimLatency) }},
		benchRow{"hand-off ms p50 / p95 / p99", func(p bench.Phase) string { return fmtLatency(p.HandoffLatency) }},
		benchRow{"failed requests", func(p bench.Phase) string { return strconv.Itoa(p.Errors) }},
	)
}

// fmtPacing is the achieved submission rate and whether the submitters kept the schedule.
func fmtPacing(p *bench.Pacing) string {
	if p == nil {
		return "n/a"
	}
	kept := fmt.Sprintf("on schedule (max lag %.1f ms)", p.MaxLagMs)
	if p.Behind {
		kept = fmt.Sprintf("BEHIND schedule: %d jobs late, up to %.1f ms", p.LateJobs, p.MaxLagMs)
	}
	return fmt.Sprintf("%.0f, %s", p.SubmitTasksPerSec, kept)
}

func fmtRate(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fmtLatency(l *bench.Latency) string {
	if l == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f", l.P50, l.P95, l.P99)
}

func fmtOpt[T any](v *T, f func(T) string) string {
	if v == nil {
		return "unknown"
	}
	return f(*v)
}
