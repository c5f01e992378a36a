//go:build cgo

package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/baton-dev/baton/internal/query"
)

// Available says whether this build has the engine.
const Available = true

// Engine runs queries on DuckDB: a fresh in-memory database per query, given only the
// relations the query may read and then locked (see Run). It is safe for concurrent use.
type Engine struct {
	cfg      Config
	gate     *gate
	slots    chan struct{}
	ownSpill bool // New made cfg.SpillDir, and Close removes it
}

// New starts an engine: it makes cfg.SpillDir (without one, a directory of its own under the
// system's temporary directory, removed by Close) and opens the gate's parser.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	own := cfg.SpillDir == ""
	if own {
		dir, err := os.MkdirTemp("", "baton-query-")
		if err != nil {
			return nil, fmt.Errorf("query engine: spill directory: %w", err)
		}
		cfg.SpillDir = dir
	} else if err := os.MkdirAll(cfg.SpillDir, 0o700); err != nil {
		return nil, fmt.Errorf("query engine: spill directory: %w", err)
	}
	g, err := newGate()
	if err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, gate: g, slots: make(chan struct{}, cfg.MaxConcurrent), ownSpill: own}, nil
}

func (c Config) withDefaults() Config {
	if c.Threads <= 0 {
		c.Threads = min(runtime.GOMAXPROCS(0), 4)
	}
	if c.MemoryLimit == "" {
		c.MemoryLimit = "1GB"
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 4
	}
	if c.SlotWait <= 0 {
		c.SlotWait = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Close closes the gate's parser, and removes the spill directory New made.
func (e *Engine) Close() error {
	if e.ownSpill {
		os.RemoveAll(e.cfg.SpillDir)
	}
	return e.gate.close()
}

// Check gates sql (see gate.check).
func (e *Engine) Check(ctx context.Context, sql string) (*query.Statement, error) {
	return e.gate.check(ctx, sql)
}

// Run runs st over rels:
//
//  1. It takes one of the engine's slots, waiting at most Config.SlotWait (query.ErrBusy).
//  2. It makes the query's own spill directory (mode 0700) and fetches into it the Parquet
//     objects that cannot be read in place, at most lim.SpillBytes in all.
//  3. It opens a fresh in-memory DuckDB with extension auto-install and auto-load off, its
//     threads, memory and temporary directory bounded, and attaches each relation: a buffered
//     one as a table filled through the appender (at most lim.RelationRows rows), a Parquet
//     one as a view over its fixed list of files.
//  4. It locks the database: file access only to those files and the spill directory,
//     external access off, the configuration locked, so no statement can widen any of it.
//  5. It runs st under lim.Timeout and answers at most lim.Rows rows and lim.Bytes bytes.
//
// Everything is removed when it returns.
func (e *Engine) Run(ctx context.Context, st *query.Statement, rels []query.Relation, lim query.Limits) (*query.Result, error) {
	lim = lim.WithDefaults()
	start := time.Now()
	if err := e.acquire(ctx); err != nil {
		return nil, err
	}
	defer func() { <-e.slots }()

	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	res, err := e.run(ctx, st, rels, lim)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, query.ErrTimeout
		}
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

func (e *Engine) acquire(ctx context.Context) error {
	select {
	case e.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(e.cfg.SlotWait)
	defer t.Stop()
	select {
	case e.slots <- struct{}{}:
		return nil
	case <-t.C:
		return query.ErrBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) run(ctx context.Context, st *query.Statement, rels []query.Relation, lim query.Limits) (*query.Result, error) {
	dir, err := os.MkdirTemp(e.cfg.SpillDir, "q-")
	if err != nil {
		return nil, fmt.Errorf("query: spill directory: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("query: spill directory: %w", err)
	}
	files, err := fetch(ctx, dir, rels, lim.SpillBytes)
	if err != nil {
		return nil, err
	}

	conn, closeDB, err := e.open(ctx, tmp)
	if err != nil {
		return nil, err
	}
	defer closeDB()
	var allowed []string
	for i, r := range rels {
		if err := attach(ctx, conn, r, project(st, r.Columns), files[i], lim.RelationRows); err != nil {
			return nil, err
		}
		allowed = append(allowed, files[i]...)
	}
	if err := lock(ctx, conn, tmp, allowed); err != nil {
		return nil, err
	}
	return collect(ctx, conn, st.SQL, lim)
}

// open opens a fresh in-memory database with its settings fixed at start, and its one
// connection; closeDB closes both.
func (e *Engine) open(ctx context.Context, tmp string) (*sql.Conn, func(), error) {
	settings := url.Values{
		"autoinstall_known_extensions": {"false"},
		"autoload_known_extensions":    {"false"},
		"allow_community_extensions":   {"false"},
		"allow_unsigned_extensions":    {"false"},
		"threads":                      {strconv.Itoa(e.cfg.Threads)},
		"memory_limit":                 {e.cfg.MemoryLimit},
		"temp_directory":               {tmp},
	}
	connector, err := duckdb.NewConnector("?"+settings.Encode(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("query: open DuckDB: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		connector.Close()
		return nil, nil, fmt.Errorf("query: open DuckDB: %w", err)
	}
	return conn, func() {
		conn.Close()
		db.Close()
		connector.Close()
	}, nil
}

// fetch returns, per relation, the local paths of its files: each file's Path when it has one,
// else a copy in dir fetched through Open. The copies together may hold at most maxBytes.
func fetch(ctx context.Context, dir string, rels []query.Relation, maxBytes int64) ([][]string, error) {
	out := make([][]string, len(rels))
	var total int64
	for i, r := range rels {
		for j, f := range r.Files {
			if f.Path != "" {
				out[i] = append(out[i], f.Path)
				continue
			}
			if f.Open == nil {
				return nil, fmt.Errorf("query: relation %s: file %s can be neither read in place nor opened", r.Name, f.Key)
			}
			p := filepath.Join(dir, fmt.Sprintf("r%d-f%d.parquet", i, j))
			n, err := copyFile(ctx, p, f, maxBytes-total)
			if err != nil {
				return nil, err
			}
			total += n
			out[i] = append(out[i], p)
		}
	}
	return out, nil
}

func copyFile(ctx context.Context, path string, f query.File, room int64) (int64, error) {
	tooLarge := &query.TooLargeError{Message: fmt.Sprintf(
		"the Parquet files this query reads exceed the query service's limit of fetched bytes (at %s)", f.Key)}
	if f.Size > room {
		return 0, tooLarge
	}
	rc, err := f.Open(ctx)
	if err != nil {
		return 0, fmt.Errorf("query: fetch %s: %w", f.Key, err)
	}
	defer rc.Close()
	w, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("query: fetch %s: %w", f.Key, err)
	}
	n, err := io.Copy(w, io.LimitReader(rc, room+1))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return n, fmt.Errorf("query: fetch %s: %w", f.Key, err)
	case n > room:
		return n, tooLarge
	}
	return n, nil
}

// project is the columns of a buffered relation that st may read: those it names, all of them
// when it may read columns it does not name, and at least one (a count of rows reads none).
func project(st *query.Statement, cols []query.Column) []query.Column {
	var out []query.Column
	for _, c := range cols {
		if st.Reads(c.Name) {
			out = append(out, c)
		}
	}
	if len(out) == 0 && len(cols) > 0 {
		out = cols[len(cols)-1:]
	}
	return out
}

// attach makes r a relation of conn under its name: a buffered relation with only cols.
func attach(ctx context.Context, conn *sql.Conn, r query.Relation, cols []query.Column, files []string, maxRows int64) error {
	name := ident(r.Name)
	if r.Rows == nil {
		if len(files) == 0 {
			return fmt.Errorf("query: relation %s has neither rows nor files", r.Name)
		}
		list := make([]string, len(files))
		for i, f := range files {
			list[i] = literal(f)
		}
		_, err := conn.ExecContext(ctx, "CREATE VIEW "+name+" AS SELECT * FROM read_parquet(["+strings.Join(list, ", ")+"])")
		if err != nil {
			return fmt.Errorf("query: attach %s: %w", r.Name, err)
		}
		return nil
	}
	defs, names := make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		t, ok := columnTypes[c.Type]
		if !ok {
			return fmt.Errorf("query: relation %s: column %s has unknown type %q", r.Name, c.Name, c.Type)
		}
		defs[i], names[i] = ident(c.Name)+" "+t, c.Name
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE "+name+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return fmt.Errorf("query: attach %s: %w", r.Name, err)
	}
	return conn.Raw(func(dc any) error {
		a, err := duckdb.NewAppenderFromConn(dc.(driver.Conn), "", r.Name)
		if err != nil {
			return fmt.Errorf("query: attach %s: %w", r.Name, err)
		}
		err = appendRows(ctx, a, r, cols, names, maxRows)
		if cerr := a.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("query: attach %s: %w", r.Name, cerr)
		}
		return err
	})
}

// chunkRows is how many rows the reader of a buffered relation hands the appender at once.
const chunkRows = 2048

// appendRows appends r's rows (of columns names) to a. The rows are read on a goroutine of their
// own and appended as they come, a chunk at a time, so that reading from the data database and
// appending overlap.
func appendRows(ctx context.Context, a *duckdb.Appender, r query.Relation, cols []query.Column, names []string, maxRows int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan [][]driver.Value, 4)
	read := make(chan error, 1)
	go func() {
		defer close(chunks)
		var n int64
		chunk := make([][]driver.Value, 0, chunkRows)
		err := r.Rows(ctx, names, func(vals []any) error {
			if n++; n > maxRows {
				return &query.TooLargeError{Message: fmt.Sprintf(
					"dataset %s holds more than %d rows, the most the query service reads of one buffered dataset", r.Name, maxRows)}
			}
			row := make([]driver.Value, len(vals))
			for i, v := range vals {
				if v != nil && cols[i].Type == "json" {
					v = json.RawMessage(v.(string))
				}
				row[i] = v
			}
			if chunk = append(chunk, row); len(chunk) == chunkRows {
				select {
				case chunks <- chunk:
				case <-ctx.Done():
					return ctx.Err()
				}
				chunk = make([][]driver.Value, 0, chunkRows)
			}
			return nil
		})
		if err == nil && len(chunk) > 0 {
			select {
			case chunks <- chunk:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		read <- err
	}()
	for chunk := range chunks {
		for _, row := range chunk {
			if err := a.AppendRow(row...); err != nil {
				cancel()
				for range chunks { // let the reader end
				}
				<-read
				return fmt.Errorf("query: attach %s: %w", r.Name, err)
			}
		}
	}
	return <-read
}

// columnTypes maps a buffered dataset's column types to DuckDB's.
var columnTypes = map[string]string{
	"string": "VARCHAR", "integer": "BIGINT", "number": "DOUBLE", "boolean": "BOOLEAN",
	"timestamp": "TIMESTAMPTZ", "json": "JSON",
}

// lock confines conn: its files and tmp are all it may read or write, external access is off
// for good, and the configuration is locked so that no statement can change any of it.
func lock(ctx context.Context, conn *sql.Conn, tmp string, files []string) error {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = literal(f)
	}
	for _, s := range []string{
		"SET allowed_directories = [" + literal(tmp+string(filepath.Separator)) + "]",
		"SET allowed_paths = [" + strings.Join(paths, ", ") + "]",
		"SET enable_external_access = false",
		"SET lock_configuration = true",
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("query: lock the database: %w", err)
		}
	}
	return nil
}

// collect runs sql and reads its answer.
func collect(ctx context.Context, conn *sql.Conn, text string, lim query.Limits) (*query.Result, error) {
	rows, err := conn.QueryContext(ctx, text)
	if err != nil {
		return nil, failed(ctx, err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, failed(ctx, err)
	}
	res := &query.Result{Columns: make([]query.ResultColumn, len(types)), Rows: [][]any{}}
	for i, t := range types {
		res.Columns[i] = query.ResultColumn{Name: t.Name(), Type: t.DatabaseTypeName()}
	}
	vals := make([]any, len(types))
	dest := make([]any, len(types))
	for i := range vals {
		dest[i] = &vals[i]
	}
	size := 2 // the brackets of the rows array
	for rows.Next() {
		if len(res.Rows) == lim.Rows {
			res.Truncated = true
			break
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, failed(ctx, err)
		}
		row := make([]any, len(vals))
		for i, v := range vals {
			row[i] = jsonValue(res.Columns[i].Type, v)
		}
		b, err := json.Marshal(row)
		if err != nil {
			return nil, fmt.Errorf("query: encode a row: %w", err)
		}
		if size += len(b) + 1; size > lim.Bytes {
			res.Truncated = true
			break
		}
		res.Rows = append(res.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, failed(ctx, err)
	}
	res.RowCount = len(res.Rows)
	return res, nil
}

// failed is the error of a statement that failed in DuckDB: the caller's (query.FailedError)
// unless the context ended.
func failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var de *duckdb.Error
	if errors.As(err, &de) {
		return &query.FailedError{Message: de.Msg}
	}
	return &query.FailedError{Message: err.Error()}
}

// ident quotes a name as a DuckDB identifier.
func ident(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// literal quotes s as a DuckDB string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
