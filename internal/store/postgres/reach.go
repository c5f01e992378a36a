package postgres

// How long work can wait on a database that stopped answering.
//
// A connection to PostgreSQL that dies quietly (a network partition, a host that vanished, a
// firewall that dropped the connection's state) gives no error: a query sent on it waits for an
// answer that never comes. Nothing in database/sql or pgx bounds that wait but the caller's
// context, and neither a server request (whose context lasts as long as its client waits) nor a
// group commit (which must finish what it started whatever its callers do) has a deadline; so a
// request could hang until the kernel gave up on the connection: about 15 minutes for a query
// whose packets go unacknowledged (tcp_retries2), about 2.5 minutes for one acknowledged by a
// host that then vanished (Go's default keepalives: 15 s, then 9 probes 15 s apart), forever
// behind a proxy or middlebox that holds them. A group commit stuck so held up every transition
// queued behind it.
//
// Two layers bound it, for one dead connection and for a database gone:
//
//   - Every connection is dialled with TCP keepalives of 15 s idle, then every 5 s, 3 probes,
//     and, on Linux, a TCP_USER_TIMEOUT of 20 s: a connection whose peer stopped acknowledging
//     is closed by the kernel after 20 s of unacknowledged data, and an idle one whose peer is
//     gone about 20 s after it last heard from it (the second keepalive goes unanswered).
//     Connecting is bounded by connect_timeout, 10 s unless the URL sets it. Sessions get
//     idle_in_transaction_session_timeout of 60 s unless the URL sets it, so that PostgreSQL
//     rolls back a transaction whose client vanished mid-way and frees its row locks, instead of
//     holding them until its own keepalives notice (two hours by default).
//
//   - With Options.Watch (baton server sets it), a watcher probes the database every 500 ms on a
//     connection of its own, each probe given 1.5 s. A probe whose own connection broke at once
//     opens a new one and tries again (up to three times within its 1.5 s): a reset connection
//     says nothing of the database. When a probe fails below SQL (no answer in time, connection
//     refused, or reset every time), the database is held unreachable: every connection of
//     the pool is closed at once, which ends the queries waiting on them, and new connections
//     fail at once with store.ErrUnreachable without dialling, until a probe succeeds again.
//     Retry loops above (sqldb's, the dispatcher's) see Unreachable and stop retrying, so a
//     request fails in at most about two seconds instead of waiting, and the server answers 503
//     with Retry-After. A probe answered with an SQL error (too many connections, a password
//     refused) says the database is reachable, and changes nothing.
//
// Closing the pool's connections abandons the transactions in flight on them. That is safe for
// the same reason as any lost connection: a transaction either committed or did not, and the
// dispatcher's transitions are fenced or idempotent, so a client that sends its request again
// finds its own result.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-dev/baton/internal/store"
)

const (
	// DefaultProbeEvery is how often a watching store probes its database.
	DefaultProbeEvery = 500 * time.Millisecond
	// DefaultProbeTimeout is how long a probe (connecting included, when it must) may take
	// before the database is held unreachable.
	DefaultProbeTimeout = 1500 * time.Millisecond

	defaultConnectTimeout  = 10 * time.Second
	defaultIdleInTxTimeout = "60s"
	keepAliveIdle          = 15 * time.Second
	keepAliveInterval      = 5 * time.Second
	keepAliveCount         = 3
	userTimeout            = 20 * time.Second
	probeCloseTimeout      = time.Second
	probeRetries           = 3 // new connections a probe tries after its own broke at once
)

// dialer is the dialer of every connection to the database: keepalives, and on Linux a user
// timeout (setUserTimeout).
func dialer() *net.Dialer {
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
		Control:         setUserTimeout,
	}
}

// unreachableError is the error of work refused while the database is held unreachable.
type unreachableError struct {
	since time.Time
	cause error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("the database is unreachable (since %s: %v)", e.since.UTC().Format(time.RFC3339), e.cause)
}

func (e *unreachableError) Is(target error) bool { return target == store.ErrUnreachable }

// gate knows whether the database answers, and holds the pool's connections so that it can close
// them all when it stops answering.
type gate struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	log  *slog.Logger

	mu    sync.Mutex
	down  *unreachableError // nil while reachable
	conns map[*gatedConn]struct{}
}

func newGate(log *slog.Logger) *gate {
	return &gate{dial: dialer().DialContext, log: log, conns: map[*gatedConn]struct{}{}}
}

// err is nil while the database is reachable, else why not.
func (g *gate) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down == nil {
		return nil
	}
	return g.down
}

// dialContext dials a connection of the pool: at once refused while the database is held
// unreachable, tracked otherwise.
func (g *gate) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := g.err(); err != nil {
		return nil, err
	}
	c, err := g.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	gc := &gatedConn{Conn: c, g: g}
	g.mu.Lock()
	if g.down != nil {
		err := g.down
		g.mu.Unlock()
		c.Close()
		return nil, err
	}
	g.conns[gc] = struct{}{}
	g.mu.Unlock()
	return gc, nil
}

// setDown holds the database unreachable because of cause and closes every connection.
func (g *gate) setDown(cause error) {
	g.mu.Lock()
	if g.down != nil {
		g.mu.Unlock()
		return
	}
	g.down = &unreachableError{since: time.Now(), cause: cause}
	conns := g.conns
	g.conns = map[*gatedConn]struct{}{}
	g.mu.Unlock()
	g.log.Warn("database unreachable: failing work at once until it answers again", "connections_closed", len(conns), "err", cause)
	for c := range conns {
		c.Conn.Close()
	}
}

// setUp holds the database reachable again.
func (g *gate) setUp() {
	g.mu.Lock()
	down := g.down
	g.down = nil
	g.mu.Unlock()
	if down != nil {
		g.log.Info("database reachable again", "unreachable_for", time.Since(down.since).Round(time.Millisecond))
	}
}

// gatedConn is a connection of the pool, forgotten by its gate once closed.
type gatedConn struct {
	net.Conn
	g    *gate
	once sync.Once
}

func (c *gatedConn) Close() error {
	c.once.Do(func() {
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
	})
	return c.Conn.Close()
}

// probe pings the database on *conn, connecting it first if it is nil.
func (g *gate) probe(ctx context.Context, conn **pgx.Conn, cfg *pgx.ConnConfig) error {
	if *conn == nil {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		*conn = c
	}
	return (*conn).PgConn().Ping(ctx)
}

// watch probes the database every `every` on a connection of its own (cfg, dialled without the
// gate) until ctx ends, and holds the database unreachable while probes fail below SQL.
func (g *gate) watch(ctx context.Context, cfg *pgx.ConnConfig, every, timeout time.Duration) {
	var conn *pgx.Conn
	closeConn := func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), probeCloseTimeout)
			conn.Close(cctx)
			cancel()
			conn = nil
		}
	}
	defer closeConn()
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		err := func() error {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			err := g.probe(pctx, &conn, cfg)
			var pe *pgconn.PgError
			for try := 1; try <= probeRetries && err != nil && !errors.As(err, &pe) && pctx.Err() == nil; try++ {
				// The probe's own connection broke at once (an administrator terminated it, a
				// reset, also while it was being opened): that says nothing of the database until
				// new ones fail too. Resets in a row (a failover closing connections as they
				// open, on a machine slow to open them) are tried again a few times; a probe
				// that timed out is not.
				closeConn()
				err = g.probe(pctx, &conn, cfg)
			}
			return err
		}()
		if ctx.Err() != nil {
			return
		}
		var pe *pgconn.PgError
		switch {
		case err == nil:
			g.setUp()
		case errors.As(err, &pe):
			// PostgreSQL answered: it is reachable, whatever it said.
			closeConn()
			g.setUp()
		default:
			closeConn()
			g.setDown(fmt.Errorf("probe: %w", err))
		}
		timer.Reset(every)
	}
}
