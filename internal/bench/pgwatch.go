package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// HotTables are the tables a task's way through the server writes on PostgreSQL: the
// submission inserts its job, its tasks (and their edges) and a Job Submitted event; a claim
// updates the task and inserts its attempt and an event; a completion updates the task, its
// attempt and its job, inserts events and an outbox message, which the relay then marks sent.
// Their dead tuples are what a held xmin horizon keeps vacuum from reclaiming.
var HotTables = []string{"jobs", "tasks", "task_deps", "attempts", "events", "outbox"}

// pgWatch reads a Baton database's figures for a steady run, on a connection of its own.
type pgWatch struct {
	queue string // the run's task name, which is its queue
	// autovacuum is the server's autovacuum setting: off, nothing reclaims dead tuples unless
	// someone runs VACUUM, pin or not.
	autovacuum bool

	mu   sync.Mutex // a pgx.Conn serves one query at a time
	conn *pgx.Conn
}

// openPGWatch connects to the database at url and checks that it holds Baton's tables.
func openPGWatch(ctx context.Context, url, queue string) (*pgWatch, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse the database url: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the database for its statistics: %w", err)
	}
	w := &pgWatch{queue: queue, conn: conn}
	if _, err := w.tables(ctx, 0); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	if err := conn.QueryRow(ctx, "SELECT current_setting('autovacuum')::boolean").Scan(&w.autovacuum); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("read the autovacuum setting: %w", err)
	}
	return w, nil
}

func (w *pgWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conn.Close(context.Background())
}

// tables reads the hot tables' tuples and sizes, at seconds into the run.
func (w *pgWatch) tables(ctx context.Context, at float64) (*TableStats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// to_regclass resolves each name on the connection's search_path, as the server does.
	rows, err := w.conn.Query(ctx, `SELECT t.name, coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
			pg_total_relation_size(c.oid), coalesce(s.autovacuum_count + s.vacuum_count, 0)
		FROM unnest($1::text[]) WITH ORDINALITY AS t(name, i)
		JOIN pg_class c ON c.oid = to_regclass(t.name)
		LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		ORDER BY t.i`, HotTables)
	if err != nil {
		return nil, fmt.Errorf("read the hot tables' statistics: %w", err)
	}
	st := &TableStats{AtSeconds: round(at, 3)}
	for rows.Next() {
		var t TableStat
		if err := rows.Scan(&t.Table, &t.LiveTuples, &t.DeadTuples, &t.SizeBytes, &t.Vacuums); err != nil {
			return nil, fmt.Errorf("read the hot tables' statistics: %w", err)
		}
		st.LiveTuples += t.LiveTuples
		st.DeadTuples += t.DeadTuples
		st.SizeBytes += t.SizeBytes
		st.PerTable = append(st.PerTable, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the hot tables' statistics: %w", err)
	}
	if len(st.PerTable) != len(HotTables) {
		return nil, fmt.Errorf("the database has %d of Baton's tables %v on its search_path: is it the server's database?", len(st.PerTable), HotTables)
	}
	return st, nil
}

// queueDepth counts the run's tasks that are ready to claim and not claimed, as the server's
// claims find them (status pending, available now).
func (w *pgWatch) queueDepth(ctx context.Context) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int
	err := w.conn.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status = 'pending' AND queue = $1
		AND runtime = 'pull' AND available_at <= $2`, w.queue, time.Now().UnixMilli()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the ready tasks: %w", err)
	}
	return n, nil
}

// pinSession is a session of its own that holds the database's xmin horizon: a transaction that
// took a transaction id and then stays idle, as a forgotten session in a client does. While it
// holds, vacuum cannot remove any row version deleted or updated after it began.
type pinSession struct {
	conn *pgx.Conn
}

// openPin connects the session ahead of the pin, so that the pin starts on time.
func openPin(ctx context.Context, url string) (*pinSession, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse the database url: %w", err)
	}
	// A server-side limit on idle transactions would end the pin early.
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect the pinning session: %w", err)
	}
	return &pinSession{conn: conn}, nil
}

func (p *pinSession) close() { p.conn.Close(context.Background()) }

// hold begins the transaction, takes a transaction id, stays idle until until, and rolls back.
// It returns the id and the moments the pin began (the id answered) and ended (the rollback
// sent). A session that was ended meanwhile (by a timeout, or an administrator) fails it.
func (p *pinSession) hold(ctx context.Context, until time.Time) (xid int64, from, to time.Time, err error) {
	if _, err := p.conn.Exec(ctx, "BEGIN"); err != nil {
		return 0, from, to, fmt.Errorf("pin: begin: %w", err)
	}
	if err := p.conn.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		return 0, from, to, fmt.Errorf("pin: take a transaction id: %w", err)
	}
	from = time.Now()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return xid, from, to, fmt.Errorf("pin: %w", context.Cause(ctx))
	}
	to = time.Now()
	if _, err := p.conn.Exec(ctx, "ROLLBACK"); err != nil {
		return xid, from, to, fmt.Errorf("pin: the session ended before the pin did: %w", err)
	}
	return xid, from, to, nil
}

// errNoDatabase is a pin asked for where the bench has no PostgreSQL database to pin.
var errNoDatabase = errors.New("--pin-at holds a transaction open on the server's PostgreSQL database: give --database-url (or, with --url, --steady-database-url)")
