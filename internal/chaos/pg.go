package chaos

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-dev/baton/internal/faultnet"
)

// pgCluster is the run's own PostgreSQL database, on the server the config names.
type pgCluster struct {
	admin string // URL of the config's database, from which the run's is created and dropped
	name  string // the run's database
	url   string // URL of the run's database
}

// startReplicas creates the run's database, migrates it, makes an API key, and starts two
// `baton server` replicas on it, each through a proxy of its own.
func (r *run) startReplicas(ctx context.Context) error {
	pg, err := createDatabase(ctx, r.cfg.PostgresURL, fmt.Sprintf("baton_chaos_%d", r.cfg.Seed%1_000_000_000))
	if err != nil {
		return err
	}
	r.pg = pg
	if out, err := exec.CommandContext(ctx, r.cfg.Baton, "migrate", "--database-url", pg.url).CombinedOutput(); err != nil {
		return fmt.Errorf("baton migrate: %v\n%s", err, out)
	}
	key, err := exec.CommandContext(ctx, r.cfg.Baton, "apikey", "create", "--name", "chaos", "--database-url", pg.url).Output()
	if err != nil {
		return fmt.Errorf("baton apikey create: %w", err)
	}
	r.apiKey = strings.TrimSpace(string(key))
	u, err := url.Parse(pg.url)
	if err != nil {
		return err
	}
	for i := range 2 {
		p, addr, err := newProxy(u.Host)
		if err != nil {
			return err
		}
		via := *u
		via.Host = addr
		q := via.Query()
		q.Set("connect_timeout", "5")
		via.RawQuery = q.Encode()
		s, err := r.newServer(fmt.Sprintf("server-%d", i), []string{"server", "--database-url", via.String(), "--internal-insecure", "--max-conns", "8"}, nil)
		if err != nil {
			p.Close()
			return err
		}
		s.proxy = p
		r.servers = append(r.servers, s)
		if err := s.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// createDatabase creates database name next to the one adminURL names, and returns it.
func createDatabase(ctx context.Context, adminURL, name string) (*pgCluster, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return nil, fmt.Errorf("create the run's database: %w", err)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	return &pgCluster{admin: adminURL, name: name, url: u.String()}, nil
}

// close drops the run's database.
func (pg *pgCluster) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{pg.name}.Sanitize()+" WITH (FORCE)")
}

// pgTerminate ends every server connection to the run's database (and only to it) from the
// PostgreSQL side, as a database restart or an administrator would.
func (r *run) pgTerminate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.pg.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, r.pg.name).Scan(&n)
	r.logf("%s: %d backends", PGTerminate, n)
	return err
}

// randomProxy picks the proxy of a random server.
func (r *run) randomProxy() (*server, proxy) {
	s := r.servers[r.rng.IntN(len(r.servers))]
	return s, s.proxy
}

func (r *run) netLatency(ctx context.Context) error {
	s, p := r.randomProxy()
	lat := 20*time.Millisecond + time.Duration(r.rng.Int64N(int64(200*time.Millisecond)))
	r.logf("%s: %s ↔ PostgreSQL +%s", NetLatency, s.name, lat)
	p.SetLatency(lat)
	r.pause(ctx, 2*time.Second, 5*time.Second)
	p.SetLatency(0)
	return nil
}

func (r *run) netReset(ctx context.Context) error {
	s, p := r.randomProxy()
	r.logf("%s: %s ↔ PostgreSQL", NetReset, s.name)
	p.Reset()
	return nil
}

func (r *run) netPartition(ctx context.Context) error {
	s, p := r.randomProxy()
	d := time.Second + time.Duration(r.rng.Int64N(int64(5*time.Second)))
	r.logf("%s: %s ↔ PostgreSQL for %s", NetPartition, s.name, d.Round(time.Millisecond))
	p.Partition(true)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	p.Partition(false)
	return nil
}

// newProxy starts a fault-injecting proxy to target and returns it with its address.
func newProxy(target string) (proxy, string, error) {
	p, err := faultnet.Listen("127.0.0.1:0", target)
	if err != nil {
		return nil, "", err
	}
	return p, p.Addr(), nil
}
