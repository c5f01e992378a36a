package dataset

import (
	"context"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/pipeline"
)

// DB is the data database.
type DB struct {
	b backend
}

// backend is what differs between PostgreSQL and SQLite: connections, types, locking and the
// bulk insert. Everything else is the same SQL, with the backend's placeholders.
type backend interface {
	begin(ctx context.Context) (tx, error)
	reader() querier // for reads outside a transaction
	close() error

	// ph is the nth (from 1) placeholder of a statement.
	ph(n int) string
	// table is how the database spells a dataset's table (createTable).
	table() tableDialect
	// columnType is the SQL type of a column of a pipeline type.
	columnType(typ string) string
	// lockDatasets serializes Ensure and EnsureAll for each of the datasets until tx ends.
	lockDatasets(ctx context.Context, t tx, ds []dataset) error
	// insertRows inserts the rows that are new, returning how many were and, when ins.returning
	// names columns, their values in the inserted rows.
	insertRows(ctx context.Context, t tx, ins *insertion) (int, [][]any, error)
	// arg is a row's value as a statement argument.
	arg(v any) any
}

// querier runs statements: a transaction, or a pool.
type querier interface {
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	query(ctx context.Context, sql string, args ...any) (rowIter, error)
}

type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type tx interface {
	querier
	commit(ctx context.Context) error
	// rollback ends the transaction unless it is over.
	rollback(ctx context.Context)
}

// insertion is the rows of one load, for insertRows.
type insertion struct {
	table     string
	schema    *pipeline.Schema
	tenant    string
	seq       int64 // the load's ledger entry, stamped on its rows as _batch
	rows      []Row
	returning []string // columns to return of the inserted rows
}

// insertInto is the head of the statement that inserts ins's rows: INSERT INTO table (org_id,
// columns..., _batch).
func (ins *insertion) insertInto() string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + quote(ins.table) + " (org_id")
	for _, c := range ins.schema.Columns {
		b.WriteString(", " + quote(c.Name))
	}
	b.WriteString(", _batch)")
	return b.String()
}

// onConflict is the tail of the insert: skip a row whose key the tenant has, and return the
// columns asked for.
func (ins *insertion) onConflict(returnExpr func(pipeline.Column) string) string {
	s := " ON CONFLICT (org_id, " + quoteList(ins.schema.Unique) + ") DO NOTHING"
	for i, name := range ins.returning {
		c, _ := column(ins.schema, name)
		if i == 0 {
			s += " RETURNING "
		} else {
			s += ", "
		}
		s += returnExpr(c)
	}
	return s
}

// Open opens the data database at url and creates its bookkeeping tables if they are missing:
// PostgreSQL for a postgres:// or postgresql:// URL or a key=value string naming a dbname,
// SQLite for sqlite://PATH or a plain file path.
func Open(ctx context.Context, url string) (*DB, error) {
	var (
		b   backend
		err error
	)
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"),
		!strings.Contains(url, "://") && strings.Contains(url, "dbname="):
		b, err = openPostgres(ctx, url)
	case strings.HasPrefix(url, "sqlite://"):
		b, err = openSQLite(ctx, strings.TrimPrefix(url, "sqlite://"))
	case strings.Contains(url, "://"):
		return nil, fmt.Errorf("data database %q: unknown scheme; use postgres:// or sqlite://", url)
	default:
		b, err = openSQLite(ctx, url)
	}
	if err != nil {
		return nil, err
	}
	return &DB{b: b}, nil
}

// Close closes the database's connections.
func (db *DB) Close() error { return db.b.close() }

// queryRow runs a query expected to return at most one row and scans it; found is false when it
// returned none.
func queryRow(ctx context.Context, q querier, sql string, args []any, dest ...any) (found bool, err error) {
	rows, err := q.query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	if err := rows.Scan(dest...); err != nil {
		return false, err
	}
	return true, rows.Err()
}

// inTx runs fn in a write transaction, committing when it returns nil.
func (db *DB) inTx(ctx context.Context, fn func(tx) error) error {
	t, err := db.b.begin(ctx)
	if err != nil {
		return err
	}
	defer t.rollback(ctx)
	if err := fn(t); err != nil {
		return err
	}
	return t.commit(ctx)
}

// sqlText builds a statement with the backend's placeholders: p() adds an argument and returns
// its placeholder.
type sqlText struct {
	b    backend
	sql  strings.Builder
	args []any
}

func (s *sqlText) p(arg any) string {
	s.args = append(s.args, arg)
	return s.b.ph(len(s.args))
}

func (s *sqlText) add(parts ...string) {
	for _, p := range parts {
		s.sql.WriteString(p)
	}
}

// tableDialect is what differs between the databases in a dataset's table: how its _row column
// is numbered, its types, its primary key and options, and whether org_id needs an index of its
// own to serve a tenant's reads in row order.
type tableDialect struct {
	row        string // the _row column's type and numbering
	batchType  string // the _batch column's type
	primaryKey string // a table constraint before the unique key; "" for none
	options    string // after the table's closing parenthesis
	orgIndex   bool   // index org_id beside the table
}

// createTable is the statements that create the table of dataset d with schema s, with its
// unique key but without the indexes that both databases create alike.
func (db *DB) createTable(d dataset, s *pipeline.Schema) []string {
	t := db.b.table()
	var b strings.Builder
	b.WriteString("CREATE TABLE " + quote(d.table) + " (\n\t_row " + t.row + ",\n\torg_id " + db.b.columnType(pipeline.TypeString) + " NOT NULL")
	for _, c := range s.Columns {
		b.WriteString(",\n\t" + quote(c.Name) + " " + db.b.columnType(c.Type))
		if notNull(s, c) {
			b.WriteString(" NOT NULL")
		}
	}
	b.WriteString(",\n\t_batch " + t.batchType + " NOT NULL,\n\t")
	if t.primaryKey != "" {
		b.WriteString(t.primaryKey + ",\n\t")
	}
	b.WriteString("CONSTRAINT " + quote(d.table+"_key") + " UNIQUE (org_id, " + quoteList(s.Unique) + ")\n)" + t.options)
	ddl := []string{b.String()}
	if t.orgIndex {
		ddl = append(ddl, "CREATE INDEX "+quote(d.table+"_org")+" ON "+quote(d.table)+" (org_id)")
	}
	return ddl
}
