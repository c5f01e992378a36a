// Command baton is the Baton control plane: server, CLI and tools in one binary.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/demo"
)

func main() {
	ctl.Version = version // the User-Agent of baton job, pipeline, dataset and query
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
  backup    copy a running baton dev's SQLite databases: backup --out FILE [--data-dir DIR]
  restore   install a backup as a stopped baton dev's databases: restore --from FILE [--data-dir DIR]
  apikey    create, list and revoke producer API keys
  signing-key
            list, rotate and retire the capability-token signing keys
  certs     make a development CA and mTLS certificates for /internal/* (certs dev --out DIR)
  worker    run untrusted programs and bundles as tasks: baton worker --task NAME --exec 'COMMAND'
  udf-runner
            serve push deliveries of bundle tasks, with each task's token only:
            baton udf-runner --listen ADDR --push-secret SECRET
  sink      load buffered datasets' batches into their tables (a trusted process, like worker)
  job       submit, list, get, cancel, resume and watch jobs (BATON_URL, BATON_API_KEY)
  pipeline  deploy, list, get, list versions of and roll back pipelines (DAG documents)
  dataset   list and inspect datasets, read a buffered dataset's rows and dead letters; cut over
  query     run read-only SQL over the tenant's datasets: query 'SELECT ...' (-o table|json|csv);
            query audit lists the queries that ran
  udf       build a user code bundle from a folder, upload, list, get and disable bundles
  bench     measure throughput and latency with no-op tasks (bench --tasks N --via sdk|stream-worker|internal|callback)
  config    print the effective configuration of dev, server, worker or sink (config print server --config FILE)
  version   print the version, VCS commit and Go version (-o json)
  completion
            print a shell completion script: completion bash|zsh|fish (see 'baton completion -h')

Run 'baton <command> -h' for a command's flags.

Scripting:
  -o table|json|yaml  read commands print a table (default) or the API's object; a list is the
                      API's envelope, e.g. {"pipelines": [...]}; --json is -o json;
                      query prints its rows as -o table|json|csv
  ids on stdout       commands that create print only what they created on stdout: job submit
                      the job id, pipeline deploy the version, apikey create the secret,
                      signing-key rotate the kid; details
                      go to stderr (with -o json|yaml: the created object on stdout)
  exit status         0 success; 1 failure (the server refused or failed, not found, network,
                      a file that cannot be read; job watch: the job did not complete);
                      2 usage (unknown command, bad flag or argument, missing API key)
`

// version is set at build time with -ldflags "-X main.version=..."; "dev" means: use the
// module version the Go toolchain recorded (see runVersion).
var version = "dev"

// A command is one word after `baton`. The table (commandTable) drives both dispatch and
// `baton completion`, which builds each command's flag set through flagSetOf: a new command is
// one line there.
type command struct {
	name        string
	run         func(ctx context.Context, args []string, stdout, stderr io.Writer) int
	subcommands []string // the words that must follow name; nil when name itself takes the flags
	// flags: name takes flags (and words) of its own as well as its subcommands (baton query
	// 'SELECT ...', baton query audit).
	flags  bool
	hidden bool // not offered by completion
}

// commandTable is a function, not a variable, because commands call run (bench runs itself).
func commandTable() []command {
	return []command{
		{name: "dev", run: runDev},
		{name: "server", run: runServer},
		{name: "migrate", run: runMigrate},
		{name: "backup", run: runBackup},
		{name: "restore", run: runRestore},
		{name: "apikey", run: runAPIKey, subcommands: apikeyCommands},
		{name: "signing-key", run: runSigningKey, subcommands: signingKeyCommands},
		{name: "certs", run: runCerts, subcommands: []string{"dev"}},
		{name: "worker", run: runWorker},
		{name: "udf-runner", run: runUDFRunner},
		{name: "sink", run: runSink},
		{name: "job", run: ctl.RunJob, subcommands: ctl.JobCommands()},
		{name: "pipeline", run: ctl.RunPipeline, subcommands: ctl.PipelineCommands()},
		{name: "dataset", run: ctl.RunDataset, subcommands: ctl.DatasetCommands()},
		{name: "udf", run: ctl.RunUDF, subcommands: ctl.UDFCommands()},
		{name: "query", run: ctl.RunQuery, subcommands: ctl.QueryCommands(), flags: true},
		{name: "config", run: runConfig, subcommands: []string{"print"}},
		{name: "bench", run: runBench},
		{name: "version", run: runVersion},
		{name: "demo-task", run: demo.RunTask, hidden: true}, // the child program of `baton dev --demo`
	}
}

// run executes one command and returns the process exit code: 0 success, 1 failure, 2 usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "completion":
		return runCompletion(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	for _, c := range commandTable() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "baton: unknown command %q\n\n%s", args[0], usage)
	return 2
}
