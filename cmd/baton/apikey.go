package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

// storeFlags choose the database an admin command works on: PostgreSQL when a URL is given,
// else the dev server's SQLite file.
type storeFlags struct{ dataDir, dbURL string }

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", "./.baton", "data directory of `baton dev`")
	fs.StringVar(&f.dbURL, "database-url", "", "PostgreSQL URL (env BATON_DATABASE_URL); overrides --data-dir")
}

func (f *storeFlags) open(ctx context.Context) (store.Store, error) {
	// The environment is read here, not as the flag's default, so that -h never shows a password.
	if url := cmp.Or(f.dbURL, getenv(ctx, "BATON_DATABASE_URL")); url != "" {
		return postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	}
	return sqlite.Open(ctx, filepath.Join(f.dataDir, dbFile))
}

const apikeyUsage = `Usage:
  baton apikey create --name NAME [--tenant TENANT] [-o json|yaml]
                        create a key; stdout: its secret alone (shown this once), stderr: its id
  baton apikey list [-o table|json|yaml]   list keys (never their secrets)
  baton apikey revoke ID                   revoke a key
Each takes --data-dir DIR (the dev server's) or --database-url URL.
`

// apikeyCommands is the subcommands of `baton apikey`.
var apikeyCommands = []string{"create", "list", "revoke"}

// apiKeyView is an API key as -o json and yaml print it; never its secret's hash.
type apiKeyView struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Tenant    string     `json:"tenant"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Secret    string     `json:"secret,omitempty"` // create only
}

func newAPIKeyView(k *store.APIKey) apiKeyView {
	v := apiKeyView{ID: k.ID, Name: k.Name, Tenant: k.Tenant, Prefix: k.Prefix, CreatedAt: k.CreatedAt}
	if !k.RevokedAt.IsZero() {
		v.RevokedAt = &k.RevokedAt
	}
	return v
}

func runAPIKey(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd, code, ok := cmdline.Subcommand("apikey", apikeyUsage, apikeyCommands, args, stdout, stderr)
	if !ok {
		return code
	}
	fs := flag.NewFlagSet("baton apikey "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sf storeFlags
	sf.register(fs)
	var name, tenant *string
	out := new(ctl.Output)
	switch cmd {
	case "create":
		name = fs.String("name", "", "name of the key")
		tenant = fs.String("tenant", auth.DefaultTenant, "tenant the key belongs to")
		out = ctl.RegisterOutput(fs)
	case "list":
		out = ctl.RegisterOutput(fs)
	}
	pos, code, ok := cmdline.ParseWords(ctx, fs, args[1:])
	if !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton apikey %s: %s\n", cmd, fmt.Sprintf(format, a...))
		return 2
	}
	switch {
	case cmd == "create" && *name == "":
		return usageErr("--name is required")
	case cmd == "revoke" && len(pos) != 1:
		return usageErr("give one key ID (see `baton apikey list`)")
	case cmd != "revoke" && len(pos) > 0:
		return usageErr("unexpected argument %q", pos[0])
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "baton apikey %s: %v\n", cmd, err)
		return 1
	}
	st, err := sf.open(ctx)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	switch cmd {
	case "create":
		k, secret, err := auth.CreateKey(ctx, st, *name, *tenant, "", time.Now())
		if err != nil {
			return fail(err)
		}
		v := newAPIKeyView(k)
		v.Secret = secret
		err = ctl.WriteOutput(stdout, *out, v, func() error {
			_, err := fmt.Fprintln(stdout, secret)
			return err
		})
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stderr, "created key %s (%s) for tenant %s; its secret is shown only this once\n", k.ID, k.Name, k.Tenant)
	case "list":
		keys, err := st.APIKeyList(ctx)
		if err != nil {
			return fail(err)
		}
		views := make([]apiKeyView, len(keys))
		for i, k := range keys {
			views[i] = newAPIKeyView(k)
		}
		err = ctl.WriteOutput(stdout, *out, map[string][]apiKeyView{"api_keys": views}, func() error {
			tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tTENANT\tPREFIX\tCREATED\tREVOKED")
			for _, k := range keys {
				revoked := "-"
				if !k.RevokedAt.IsZero() {
					revoked = k.RevokedAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\n", k.ID, k.Name, k.Tenant, k.Prefix, k.CreatedAt.Local().Format(time.DateTime), revoked)
			}
			return tw.Flush()
		})
		if err != nil {
			return fail(err)
		}
	case "revoke":
		if err := st.APIKeyRevoke(ctx, pos[0], time.Now()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fail(fmt.Errorf("no key %q", pos[0]))
			}
			return fail(err)
		}
		fmt.Fprintf(stdout, "revoked %s\n", pos[0])
	}
	return 0
}
