package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", "", "PostgreSQL URL (env BATON_DATABASE_URL)")
	sqlitePath := fs.String("sqlite", "", "migrate this SQLite file instead of PostgreSQL")
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
		return code
	}
	*dbURL = cmp.Or(*dbURL, getenv(ctx, "BATON_DATABASE_URL")) // not the default: -h would show its password
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton migrate: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	switch {
	case *sqlitePath != "":
		st, err := sqlite.Open(ctx, *sqlitePath)
		if err != nil {
			fmt.Fprintln(stderr, "baton migrate:", err)
			return 1
		}
		st.Close()
	case *dbURL != "":
		st, err := postgres.Open(ctx, *dbURL, postgres.Options{Migrate: true, MaxConns: 2})
		if err != nil {
			fmt.Fprintln(stderr, "baton migrate:", err)
			return 1
		}
		st.Close()
	default:
		fmt.Fprintln(stderr, "baton migrate: set --database-url (or BATON_DATABASE_URL), or --sqlite FILE")
		return 2
	}
	fmt.Fprintln(stdout, "migrations applied")
	return 0
}
