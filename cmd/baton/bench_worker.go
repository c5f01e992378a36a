package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/bench"
	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/worker"
)

const benchWorkerUsage = `Usage: baton bench worker [--batch N]

The Go SDK's worker as a program of its own, for ` + "`baton bench --worker-command`" + `: it works the tasks
named $BATON_BENCH_TASK with $BATON_BENCH_CONCURRENCY slots, claiming on $BATON_INTERNAL_URL, each
with a no-op handler that returns {}, until SIGTERM. Its row measures the Go SDK the way the
other languages' worker programs are measured (a process of its own, its CPU and peak RSS):
  baton bench --worker-command go='baton bench worker'

Flags:
`

// runBenchWorker is `baton bench worker`.
func runBenchWorker(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton bench worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchWorkerUsage)
		fs.PrintDefaults()
	}
	batch := fs.Int("batch", 8, "claim requests in flight (worker.WithBatchSize)")
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton bench worker: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if *batch < 1 {
		return fail("--batch must be at least 1, got %d", *batch)
	}
	internalURL := strings.TrimRight(getenv(ctx, bench.EnvInternalURL), "/")
	task := getenv(ctx, bench.EnvTask)
	conc, err := strconv.Atoi(getenv(ctx, bench.EnvConcurrency))
	switch {
	case internalURL == "":
		return fail("%s is not set: run me from baton bench --worker-command", bench.EnvInternalURL)
	case task == "":
		return fail("%s is not set: run me from baton bench --worker-command", bench.EnvTask)
	case err != nil || conc < 1:
		return fail("%s=%q: want a number of slots, at least 1", bench.EnvConcurrency, getenv(ctx, bench.EnvConcurrency))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := worker.New(internalURL, worker.WithConcurrency(conc), worker.WithBatchSize(*batch),
		worker.WithLogger(log), worker.WithShutdownTimeout(5*time.Second))
	if err != nil {
		return fail("%v", err)
	}
	output := json.RawMessage(`{}`)
	w.Handle(task, func(context.Context, *worker.Task) (any, error) { return output, nil })
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "baton bench worker:", err)
		return 1
	}
	return 0
}
