package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/baton-dev/baton/internal/store/postgres"
)

// runServer is `baton server`: a stateless replica on PostgreSQL.
func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", "", "PostgreSQL URL (env BATON_DATABASE_URL)")
	migrate := fs.Bool("migrate", false, "apply pending migrations before serving (safe with several replicas)")
	maxConns := fs.Int("max-conns", 16, "database connection pool size")
	insecure := fs.Bool("internal-insecure", false, "serve /internal/* WITHOUT TLS or client certificates (only on a private network)")
	var f serverFlags
	f.register(fs)
	fs.StringVar(&f.dataDatabaseURL, "data-database-url", "", "PostgreSQL URL of the data database, where buffered datasets' tables live (env BATON_DATA_DATABASE_URL; default: --database-url)")
	fs.BoolVar(&f.sink, "sink", false, "also run a sink in this process, loading buffered batches (needs --blob-url)")
	if code, ok := configureFlags(ctx, fs, args); !ok {
		return code
	}
	if err := f.sinkFlags.check(); err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 2
	}
	if err := f.retention.check(); err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 2
	}
	if f.sink && f.blobURL == "" {
		fmt.Fprintln(stderr, "baton server: --sink needs --blob-url (or BATON_BLOB_URL): the object storage the batches are in")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton server: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	// Checked before the database: a replica must not come up with an open worker API.
	useTLS, err := f.internalTLS()
	if err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 2
	}
	switch {
	case useTLS && *insecure:
		fmt.Fprintf(stderr, "baton server: --internal-insecure contradicts %s; pass one or the other\n", internalTLSFlags)
		return 2
	case !useTLS && !*insecure:
		fmt.Fprintf(stderr, "baton server: /internal/* requires mutual TLS: set %s\n"+
			"  (development certificates: `baton certs dev --out DIR`),\n"+
			"  or pass --internal-insecure to serve it without TLS on a private network\n", internalTLSFlags)
		return 2
	}
	if *dbURL == "" {
		fmt.Fprintln(stderr, "baton server: set --database-url or BATON_DATABASE_URL (for a database-free start, use `baton dev`)")
		return 2
	}
	if f.dataDatabaseURL == "" {
		f.dataDatabaseURL = *dbURL
	}
	ls, err := f.bind(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 1
	}
	log := newLogger(stderr, f.logFormat)
	// Watch: while the database does not answer, requests fail fast with 503 instead of hanging.
	st, err := postgres.Open(ctx, *dbURL, postgres.Options{MaxConns: *maxConns, Migrate: *migrate, Watch: true, Logger: log})
	if err != nil {
		ls.close()
		fmt.Fprintln(stderr, "baton server:", err)
		return 1
	}
	defer st.Close()
	if ls.internalTLS {
		log.Info("baton server started", "producer", ls.producer.Addr().String(), "internal", ls.internal.Addr().String(), "internal_tls", "mutual TLS, client certificate required", "metrics", metricsLine(ls.metrics))
	} else {
		log.Warn("INSECURE: /internal/* is served WITHOUT TLS and WITHOUT client certificates (--internal-insecure); "+
			"anyone who can reach this address can claim tasks and report results: use only on a private network",
			"internal", ls.internal.Addr().String())
		log.Info("baton server started", "producer", ls.producer.Addr().String(), "internal", ls.internal.Addr().String(), "internal_tls", "none", "metrics", metricsLine(ls.metrics))
	}
	if err := serve(ctx, &f, ls, st, log); err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 1
	}
	return 0
}
