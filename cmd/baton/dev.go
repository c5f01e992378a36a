package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/backup"
	"github.com/baton-dev/baton/internal/demo"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

const (
	dbFile   = backup.StoreFile
	dataFile = backup.DataFile
)

// runDev is `baton dev`: everything in one process on an embedded SQLite file.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "./.baton", "directory of the SQLite database")
	var demoArg demoFlag
	fs.Var(&demoArg, "demo", "also run an example end to end with real worker processes and mTLS on /internal/* (development certificates made under --data-dir): `--demo` the five-task job example, `--demo pipeline` the pipeline of examples/pipeline")
	var f serverFlags
	f.lambdaOnPull = true
	f.register(fs)
	f.metricsListen, fs.Lookup("metrics-listen").DefValue = devMetricsListen, devMetricsListen
	f.metricsOptional = true // an optional listener never stops the dev server
	fs.BoolVar(&f.sink, "sink", true, "run a sink in this process, loading buffered batches (--sink=false: leave them to `baton sink` processes)")
	if code, ok := configureFlags(ctx, fs, args); !ok {
		return code
	}
	if err := f.sinkFlags.check(); err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 2
	}
	if err := f.retention.check(); err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 2
	}
	rest := fs.Args()
	if demoArg.kind != "" && len(rest) > 0 && rest[0] == demoKindPipeline && !demoArg.explicit {
		demoArg.kind, rest = demoKindPipeline, rest[1:] // --demo pipeline
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "baton dev: unexpected argument %q\n", rest[0])
		return 2
	}
	path := filepath.Join(*dataDir, dbFile)
	// Buffered datasets: batches under the data directory unless --blob-url says otherwise, rows
	// in a SQLite file of their own, loaded by a sink in this process.
	if f.blobURL == "" {
		abs, err := filepath.Abs(filepath.Join(*dataDir, "blobs"))
		if err != nil {
			fmt.Fprintln(stderr, "baton dev:", err)
			return 1
		}
		f.blobURL = "file://" + abs
	}
	f.dataDatabaseURL = filepath.Join(*dataDir, dataFile)
	lock, err := backup.LockDir(*dataDir, false)
	if errors.Is(err, backup.ErrLocked) {
		fmt.Fprintf(stderr, "baton dev: a `baton restore` is replacing the database in %s; start again once it is done\n", *dataDir)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 1
	}
	defer lock.Release()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 1
	}
	defer st.Close()
	var demoCerts mtls.DevCerts
	if demoArg.kind != "" {
		if demoCerts, err = prepareDemo(&f, *dataDir); err != nil {
			fmt.Fprintln(stderr, "baton dev:", err)
			return 1
		}
	}
	ls, err := f.bind(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 1
	}
	if !ls.internalTLS && !isLoopback(ls.internal.Addr()) {
		ls.close()
		fmt.Fprintf(stderr, "baton dev: --internal-listen %s is not a loopback address: without TLS anyone on the network could claim and report tasks; listen on 127.0.0.1, or serve it with mutual TLS (%s)\n", f.internalListen, internalTLSFlags)
		return 2
	}
	for _, w := range ls.warnings {
		fmt.Fprintln(stderr, "baton dev: warning:", w)
	}
	keyLine, devSecret, err := devKey(ctx, st, getenv(ctx, "BATON_API_KEY"))
	if err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 1
	}
	workerLine := fmt.Sprintf("http://%s   /internal/*: loopback only and WITHOUT TLS, for development only", ls.internal.Addr())
	if ls.internalTLS {
		workerLine = fmt.Sprintf("https://%s   /internal/*: mTLS, a client certificate signed by %s is required", ls.internal.Addr(), f.internalTLSClientCA)
	}
	fmt.Fprintf(stdout, `Baton dev server
  database      %s (SQLite)
  producer API  http://%s   (send the key in the x-api-key header)
  dashboard     http://%s/ui/   (sign in with the API key)
  API docs      http://%s/docs/api   (the OpenAPI document: /openapi.json)
  worker API    %s
  datasets      rows in %s, batches in %s%s
  metrics       %s
  %s
Press Ctrl-C to stop.
`, path, ls.producer.Addr(), ls.producer.Addr(), ls.producer.Addr(), workerLine, f.dataDatabaseURL, f.blobURL, map[bool]string{true: " (a sink runs in this process)", false: " (no sink here: --sink=false)"}[f.sink], metricsLine(ls.metrics), keyLine)
	serveCtx := ctx
	stopDemo := func() {}
	if demoArg.kind != "" {
		stopDemo = demo.Start(ctx, demo.Config{Pipeline: demoArg.kind == demoKindPipeline, Producer: ls.producer.Addr(),
			Internal: ls.internal.Addr(), BlobURL: f.blobURL, Certs: demoCerts, Store: st, APIKey: devSecret, Stdout: stdout, Stderr: stderr})
		// On Ctrl-C the demo's workers stop first, while the server still answers them: a worker
		// with a task in flight reports it and exits at once. Stopped after the server, such a
		// worker retried its heartbeats against a closed port until it was killed, 15 s later.
		var stopServing context.CancelFunc
		serveCtx, stopServing = context.WithCancel(context.WithoutCancel(ctx))
		defer stopServing()
		go func() {
			<-ctx.Done()
			stopDemo()
			stopServing()
		}()
	}
	defer stopDemo()
	bundlesCtx, stopBundles := context.WithCancel(serveCtx)
	bundlesDone := make(chan struct{})
	go func() { defer close(bundlesDone); runDevBundles(bundlesCtx, &f, ls, st, *dataDir, demoCerts, stderr) }()
	defer func() { stopBundles(); <-bundlesDone }()
	if err := serve(serveCtx, &f, ls, st, newLogger(stderr, f.logFormat)); err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 1
	}
	stopDemo()
	fmt.Fprintln(stdout, "stopped")
	return 0
}

// devKey makes sure the dev server has an API key and says which: the banner's line, and the
// secret when this process knows it (for the demo to use). BATON_API_KEY, when set, becomes a key
// of the default tenant; otherwise the first start creates one and prints it, once.
func devKey(ctx context.Context, st store.Store, fromEnv string) (line, secret string, err error) {
	now := time.Now()
	if fromEnv != "" {
		_, err := st.APIKeyGetByHash(ctx, auth.Hash(fromEnv))
		if errors.Is(err, store.ErrNotFound) {
			_, _, err = auth.CreateKey(ctx, st, "dev (BATON_API_KEY)", auth.DefaultTenant, fromEnv, now)
		}
		if err != nil {
			return "", "", fmt.Errorf("set up the key from BATON_API_KEY: %w", err)
		}
		return "API key       the value of BATON_API_KEY", fromEnv, nil
	}
	keys, err := st.APIKeyList(ctx)
	if err != nil {
		return "", "", err
	}
	for _, k := range keys {
		if k.RevokedAt.IsZero() {
			return "API key       created on the first start and printed then; make another with `baton apikey create --name NAME`", "", nil
		}
	}
	_, secret, err = auth.CreateKey(ctx, st, "dev", auth.DefaultTenant, "", now)
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("API key       %s\n                (shown only this once: export BATON_API_KEY=%s)", secret, secret), secret, nil
}

// The examples --demo runs.
const (
	demoKindJob      = "job"
	demoKindPipeline = "pipeline"
)

// demoFlag is --demo (the job example), --demo=pipeline or --demo pipeline.
type demoFlag struct {
	kind     string
	explicit bool // given as --demo=VALUE
}

func (f *demoFlag) String() string   { return f.kind }
func (f *demoFlag) IsBoolFlag() bool { return true }

func (f *demoFlag) Set(v string) error {
	switch v {
	case "true":
		f.kind = demoKindJob
	case "false", "":
		f.kind = ""
	case demoKindJob, demoKindPipeline:
		f.kind, f.explicit = v, true
	default:
		return fmt.Errorf("want %s or %s", demoKindJob, demoKindPipeline)
	}
	return nil
}

// prepareDemo makes the demo's development certificates under dataDir and turns on mutual TLS
// for the internal listener with them. It runs before the listeners are bound.
func prepareDemo(f *serverFlags, dataDir string) (mtls.DevCerts, error) {
	if f.internalTLSCert != "" || f.internalTLSKey != "" || f.internalTLSClientCA != "" {
		return mtls.DevCerts{}, fmt.Errorf("--demo makes its own certificates for /internal/*: drop %s", internalTLSFlags)
	}
	dc, err := demo.WriteCerts(dataDir)
	if err != nil {
		return mtls.DevCerts{}, err
	}
	f.internalTLSCert, f.internalTLSKey, f.internalTLSClientCA = dc.ServerCert, dc.ServerKey, dc.CA
	return dc, nil
}

// isLoopback says whether a listener's address is on the loopback interface only.
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
