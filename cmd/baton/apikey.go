package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

// storeFlags choose the database an admin command works on: PostgreSQL when a URL is given,
// else the dev server's SQLite file.
type storeFlags struct{ dataDir, dbURL string }

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", "./.baton", "data directory of `baton dev`")
	fs.StringVar(&f.dbURL, "database-url", os.Getenv("BATON_DATABASE_URL"), "PostgreSQL URL (env BATON_DATABASE_URL); overrides --data-dir")
}

func (f *storeFlags) open(ctx context.Context) (store.Store, error) {
	if f.dbURL != "" {
		return postgres.Open(ctx, f.dbURL, postgres.Options{MaxConns: 2})
	}
	return sqlite.Open(ctx, filepath.Join(f.dataDir, dbFile))
}

const apikeyUsage = `Usage:
  baton apikey create --name NAME [--tenant TENANT]   create a key and print its secret once
  baton apikey list                                   list keys (never their secrets)
  baton apikey revoke ID                              revoke a key
Each takes --data-dir DIR (the dev server's) or --database-url URL.
`

func runAPIKey(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, apikeyUsage)
		return 2
	}
	fs := flag.NewFlagSet("baton apikey "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sf storeFlags
	sf.register(fs)
	name := fs.String("name", "", "name of the key (create)")
	tenant := fs.String("tenant", auth.DefaultTenant, "tenant the key belongs to (create)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "baton apikey %s: %v\n", args[0], err)
		return 1
	}
	switch args[0] {
	case "create", "list", "revoke":
	default:
		fmt.Fprintf(stderr, "baton apikey: unknown command %q\n\n%s", args[0], apikeyUsage)
		return 2
	}
	if args[0] == "create" && *name == "" {
		fmt.Fprintln(stderr, "baton apikey create: --name is required")
		return 2
	}
	if args[0] == "revoke" && fs.NArg() != 1 {
		fmt.Fprintln(stderr, "baton apikey revoke: give the key ID (see `baton apikey list`)")
		return 2
	}
	st, err := sf.open(ctx)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	switch args[0] {
	case "create":
		k, secret, err := auth.CreateKey(ctx, st, *name, *tenant, "", time.Now())
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s\n", secret)
		fmt.Fprintf(stderr, "created key %s (%s) for tenant %s; the secret above is shown only once\n", k.ID, k.Name, k.Tenant)
	case "list":
		keys, err := st.ListAPIKeys(ctx)
		if err != nil {
			return fail(err)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tTENANT\tPREFIX\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if !k.RevokedAt.IsZero() {
				revoked = k.RevokedAt.Local().Format(time.DateTime)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\n", k.ID, k.Name, k.Tenant, k.Prefix, k.CreatedAt.Local().Format(time.DateTime), revoked)
		}
		tw.Flush()
	case "revoke":
		if err := st.RevokeAPIKey(ctx, fs.Arg(0), time.Now()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fail(fmt.Errorf("no key %q", fs.Arg(0)))
			}
			return fail(err)
		}
		fmt.Fprintf(stdout, "revoked %s\n", fs.Arg(0))
	}
	return 0
}
