// Command baton is the Baton control plane: server, CLI and tools in one binary.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `Usage: baton <command> [flags]

Commands:
  dev       run Baton on this machine: embedded SQLite, producer and worker APIs, background loops
            (dev --demo: also run the five-task example job end to end with real worker processes;
             dev --demo pipeline: the example pipeline of examples/pipeline, the same way)
  server    run a production replica on PostgreSQL (--database-url or BATON_DATABASE_URL)
  migrate   apply the database migrations
  apikey    create, list and revoke producer API keys
  certs     make a development CA and mTLS certificates for /internal/* (certs dev --out DIR)
  worker    run untrusted programs as tasks: baton worker --task NAME --exec 'COMMAND'
  sink      load buffered datasets' batches into their tables (a trusted process, like worker)
  job       submit, list, get, cancel, resume and watch jobs (BATON_URL, BATON_API_KEY)
  pipeline  deploy, list, get, list versions of and roll back pipelines (DAG documents)
  dataset   list and inspect datasets, read a buffered dataset's rows and dead letters; cut over
  bench     measure throughput and latency with no-op tasks (bench --tasks N --via sdk|stream-worker|internal|callback)
  version   print the version

Run 'baton <command> -h' for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// run executes one command and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "dev":
		return runDev(ctx, args[1:], stdout, stderr)
	case "server":
		return runServer(ctx, args[1:], stdout, stderr)
	case "job":
		return runJob(ctx, args[1:], stdout, stderr)
	case "pipeline":
		return runPipeline(ctx, args[1:], stdout, stderr)
	case "dataset":
		return runDataset(ctx, args[1:], stdout, stderr)
	case "worker":
		return runWorker(ctx, args[1:], stdout, stderr)
	case "sink":
		return runSink(ctx, args[1:], stdout, stderr)
	case "demo-task": // hidden: the child program of `baton dev --demo`
		return runDemoTask(ctx, args[1:], stdout, stderr)
	case "apikey":
		return runAPIKey(ctx, args[1:], stdout, stderr)
	case "certs":
		return runCerts(ctx, args[1:], stdout, stderr)
	case "migrate":
		return runMigrate(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "baton", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "baton: unknown command %q\n\n%s", args[0], usage)
	return 2
}
