package storetest

import (
	"context"
	"net"
	neturl "net/url"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/faultnet"
	"github.com/baton-dev/baton/internal/store/postgres"
)

// ProxiedPostgres is a store whose every connection to PostgreSQL goes through a fault-injecting
// proxy, so that a test can partition the database away from it, or reset its connections.
type ProxiedPostgres struct {
	Store *postgres.Store
	Proxy *faultnet.Proxy
	URL   string // the store's URL: through the proxy, in the test's own schema
}

// OpenProxiedPostgres opens a store in a new schema of the test database (dropped when the test
// ends) through a faultnet proxy. It skips the test when BATON_TEST_POSTGRES_URL is unset, and
// fails it for a key=value connection string (the proxy needs a URL to point at).
func OpenProxiedPostgres(t testing.TB, opts postgres.Options) *ProxiedPostgres {
	t.Helper()
	base := connectAdmin(t)
	u, err := neturl.Parse(base)
	if err != nil || !strings.Contains(base, "://") || u.Host == "" || strings.Contains(u.Host, ",") {
		t.Fatalf("%s must be a postgres:// URL with one host to run through a proxy", PostgresURLEnv)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	p, err := faultnet.Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	schema := uniqueName()
	ctx := context.Background()
	if _, err := admin.db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	url := withSearchPath(u.String(), schema)
	opts.Migrate = true
	st, err := postgres.Open(ctx, url, opts)
	if err != nil {
		t.Fatalf("open postgres through the proxy: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return &ProxiedPostgres{Store: st, Proxy: p, URL: url}
}
