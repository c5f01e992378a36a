package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

const dbFile = "baton.db"

// runDev is `baton dev`: everything in one process on an embedded SQLite file.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "./.baton", "directory of the SQLite database")
	demo := fs.Bool("demo", false, "also run seed 001's five-task example end to end: one worker process per task name, mTLS on /internal/* with development certificates made under --data-dir")
	var f serverFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton dev: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	path := filepath.Join(*dataDir, dbFile)
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 1
	}
	defer st.Close()
	var demoCerts auth.DevCerts
	if *demo {
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
	keyLine, err := devKey(ctx, st, os.Getenv("BATON_API_KEY"))
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
  worker API    %s
  %s
Press Ctrl-C to stop.
`, path, ls.producer.Addr(), workerLine, keyLine)
	stopDemo := func() {}
	if *demo {
		stopDemo = startDemo(ctx, st, ls, demoCerts, stdout, stderr)
	}
	defer stopDemo()
	if err := serve(ctx, &f, ls, st, newLogger(stderr)); err != nil {
		fmt.Fprintln(stderr, "baton dev:", err)
		return 1
	}
	stopDemo()
	fmt.Fprintln(stdout, "stopped")
	return 0
}

// devKey makes sure the dev server has an API key and says which. BATON_API_KEY, when set, becomes
// a key of the default tenant; otherwise the first start creates one and prints it, once.
func devKey(ctx context.Context, st store.Store, fromEnv string) (string, error) {
	now := time.Now()
	if fromEnv != "" {
		_, err := st.APIKeyByHash(ctx, auth.Hash(fromEnv))
		if errors.Is(err, store.ErrNotFound) {
			_, _, err = auth.CreateKey(ctx, st, "dev (BATON_API_KEY)", auth.DefaultTenant, fromEnv, now)
		}
		if err != nil {
			return "", fmt.Errorf("set up the key from BATON_API_KEY: %w", err)
		}
		return "API key      the value of BATON_API_KEY", nil
	}
	keys, err := st.ListAPIKeys(ctx)
	if err != nil {
		return "", err
	}
	for _, k := range keys {
		if k.RevokedAt.IsZero() {
			return "API key      created on the first start and printed then; make another with `baton apikey create --name NAME`", nil
		}
	}
	_, secret, err := auth.CreateKey(ctx, st, "dev", auth.DefaultTenant, "", now)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("API key      %s\n               (shown only this once: export BATON_API_KEY=%s)", secret, secret), nil
}
