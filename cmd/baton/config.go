package main

// Configuration of the serving commands (dev, server, worker, sink). Every flag of theirs can also
// come from the environment variable BATON_<FLAG> or from a key of the YAML file of --config
// (BATON_CONFIG), as internal/config applies them; this file wires that into the commands and
// `baton config print`.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/config"
)

// configNote ends a serving command's -h.
const configNote = `
Every flag can also be set with the environment variable BATON_<FLAG> (upper case, - as _:
--database-url is BATON_DATABASE_URL; a repeatable flag takes a comma-separated list) or as a key
of the YAML file of --config FILE (env BATON_CONFIG), such as "listen: 127.0.0.1:8080" (a list
for a repeatable flag). The command line wins, then the environment, then the file, then the
default. 'baton config print %s [flags]' shows the result.
`

// configCommandNames are the commands configured this way.
var configCommandNames = []string{"dev", "server", "worker", "sink"}

// configMode is how a command's context changes configureFlags: tests inject the environment, and
// `baton config print` and tests stop the command once its configuration is known.
type configMode struct {
	lookupEnv func(string) (string, bool) // nil: the process environment
	print     io.Writer                   // print the effective configuration there and stop
	inspect   func(*flag.FlagSet, *config.Result)
}

type configModeKey struct{}

func withConfigMode(ctx context.Context, m configMode) context.Context {
	return context.WithValue(ctx, configModeKey{}, m)
}

// getenv reads the environment variable name through the context's configMode.lookupEnv when it
// has one, else from the process: commands read their environment here, so that tests can give
// each run its own (a process's environment is one for every test running in parallel).
func getenv(ctx context.Context, name string) string {
	lookup := os.LookupEnv
	if mode, _ := ctx.Value(configModeKey{}).(configMode); mode.lookupEnv != nil {
		lookup = mode.lookupEnv
	}
	v, _ := lookup(name)
	return v
}

// configureFlags parses a serving command's arguments into fs (cmdline.ParseFlags) and completes
// the flags the command line left alone from the environment and the --config file. Unless ok,
// the command is to return code at once: help (0), a usage error (2), or a context that only
// wanted the flag set or the configuration.
func configureFlags(ctx context.Context, fs *flag.FlagSet, args []string) (code int, ok bool) {
	mode, _ := ctx.Value(configModeKey{}).(configMode)
	lookup := mode.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	addConfigFlag(fs)
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
		return code, false
	}
	res, err := config.Apply(fs, lookup, configCommandNames)
	if err != nil {
		var list config.Errors
		if !errors.As(err, &list) {
			list = config.Errors{err}
		}
		for _, e := range list {
			fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), e)
		}
		return 2, false
	}
	switch {
	case mode.inspect != nil:
		mode.inspect(fs, res)
		return 0, false
	case mode.print != nil:
		if err := config.Print(mode.print, fs, res); err != nil {
			fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
			return 1, false
		}
		return 0, false
	}
	return 0, true
}

// addConfigFlag adds --config to fs and the configuration note to its usage.
func addConfigFlag(fs *flag.FlagSet) {
	fs.String(config.Flag, "", "YAML `FILE` of flag values, keyed by flag name (env "+config.Env+")")
	usage := fs.Usage
	fs.Usage = func() {
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		fmt.Fprintf(fs.Output(), configNote, strings.TrimPrefix(fs.Name(), "baton "))
	}
}

// runConfig is `baton config print <command> [flags]`.
func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = `Usage: baton config print <dev|server|worker|sink> [the command's flags]

Prints the command's effective configuration as YAML, a valid --config file: every flag, its
value, and where the value came from (flag, env BATON_<FLAG>, file FILE:LINE or default) as a
comment. Secrets are shown as REDACTED: passwords and tokens in URLs, --push-secret values.
`
	commands := map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"dev": runDev, "server": runServer, "worker": runWorker, "sink": runSink,
	}
	if len(args) == 0 || args[0] != "print" {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprint(stderr, usage)
		return 2
	}
	// config print has no flags of its own: the words after it are a command and its flags.
	fs := flag.NewFlagSet("baton config print", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if code, ok := cmdline.ParseFlags(ctx, fs, args[1:]); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, ok := commands[fs.Arg(0)]
	if !ok {
		fmt.Fprintf(stderr, "baton config print: unknown command %q: want dev, server, worker or sink\n", fs.Arg(0))
		return 2
	}
	mode, _ := ctx.Value(configModeKey{}).(configMode)
	mode.print = stdout
	return cmd(withConfigMode(ctx, mode), fs.Args()[1:], stdout, stderr)
}
