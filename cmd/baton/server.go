package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/baton-dev/baton/internal/store/postgres"
)

// runServer is `baton server`: a stateless replica on PostgreSQL.
func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", os.Getenv("BATON_DATABASE_URL"), "PostgreSQL URL (env BATON_DATABASE_URL)")
	migrate := fs.Bool("migrate", false, "apply pending migrations before serving (safe with several replicas)")
	maxConns := fs.Int("max-conns", 16, "database connection pool size")
	var f serverFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dbURL == "" {
		fmt.Fprintln(stderr, "baton server: set --database-url or BATON_DATABASE_URL (for a database-free start, use `baton dev`)")
		return 2
	}
	st, err := postgres.Open(ctx, *dbURL, postgres.Options{MaxConns: *maxConns, Migrate: *migrate})
	if err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 1
	}
	defer st.Close()
	ls, err := f.bind()
	if err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 1
	}
	log := newLogger(stderr)
	log.Info("baton server started", "producer", ls.producer.Addr().String(), "internal", ls.internal.Addr().String())
	if err := serve(ctx, &f, ls, st, log); err != nil {
		fmt.Fprintln(stderr, "baton server:", err)
		return 1
	}
	return 0
}
