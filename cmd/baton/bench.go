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
	"os"
	"runtime/pprof"
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

	var res *bench.Result
	var err error
	if external {
		cfg.ProducerURL, cfg.InternalURL, cfg.APIKey = strings.TrimRight(*url, "/"), strings.TrimRight(*internalURL, "/"), *apiKey
		cfg.ServerPID = *serverPID
		if res, err = bench.Run(ctx, cfg); err == nil {
			res.Store = "external"
		}
	} else {
		var output io.Writer
		if *verbose {
			output = stderr
		}
		res, err = bench.RunServer(ctx, cfg, bench.ServerConfig{DatabaseURL: *dbURL,
			Transport: tf.kind, RedisURL: tf.redisURL, NATSURL: tf.natsURL, TransportNamespace: tf.namespace,
			CPUProfile: *cpuProfile, Flags: serverFlags, Output: output})
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
	return 0
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
