//go:build cgo

package engine

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/sandbox"
)

// A query worker is this same program, started by the engine with workerEnv set: before main
// (or a test's TestMain) runs, init serves one job and exits. Its environment holds nothing
// else of the server's.
const (
	workerEnv     = "BATON_QUERY_WORKER"
	workerVersion = "1" // the protocol; a worker of another version refuses to start
)

func init() {
	if v, ok := os.LookupEnv(workerEnv); ok {
		if v != workerVersion {
			fmt.Fprintf(os.Stderr, "query worker: protocol %q, this build speaks %q\n", v, workerVersion)
			os.Exit(2)
		}
		os.Exit(serveWorker(os.Stdin, os.Stdout))
	}
}

// serveWorker says it is ready, then runs the jobs it is sent, one at a time, and answers each.
// It exits 0 when its stdin ends (the server is done with it).
func serveWorker(in io.Reader, out io.Writer) int {
	// A temporary file past the size limit fails its write instead of killing the worker, and
	// a server gone makes a write fail.
	signal.Ignore(syscall.SIGXFSZ, syscall.SIGPIPE)
	w := bufio.NewWriterSize(out, 64<<10)
	if writeFrame(w, frameReady, nil) != nil || w.Flush() != nil {
		return 1
	}
	r := bufio.NewReaderSize(in, 256<<10)
	var buf []byte
	for {
		kind, payload, err := readFrame(r, buf)
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil || kind != frameJob {
			return 1
		}
		buf = payload[:0]
		var j job
		var ans *answer
		if err := json.Unmarshal(payload, &j); err != nil {
			ans = internal(fmt.Errorf("read the job: %w", err))
		} else {
			ans = j.runOnAThreadOfItsOwn(r)
		}
		b, err := json.Marshal(ans)
		if err != nil {
			b, _ = json.Marshal(internal(fmt.Errorf("encode the answer: %w", err)))
		}
		if writeFrame(w, frameAnswer, b) != nil || w.Flush() != nil {
			return 1
		}
	}
}

// runOnAThreadOfItsOwn runs j on a new OS thread, which ends with it: the confinement of one
// job (its files) never reaches another.
func (j *job) runOnAThreadOfItsOwn(in io.Reader) *answer {
	done := make(chan *answer)
	go func() {
		// Never unlocked: the thread, and those DuckDB starts from it, carry the job's
		// confinement, and end when this goroutine does.
		runtime.LockOSThread()
		done <- j.run(in)
	}()
	return <-done
}

func internal(err error) *answer {
	return &answer{Error: &answerError{Kind: errInternal, Message: err.Error()}}
}

// run runs the job on this thread, which it confines with Landlock to the job's files and the
// worker's own directory, with every thread DuckDB starts from it (the caller has locked its
// goroutine to the thread, for good):
//
//  1. It opens a fresh in-memory DuckDB with extension auto-install and auto-load off, its
//     threads, memory, temporary directory and the size of its temporary files bounded.
//  2. It attaches each relation: a buffered one as a table filled through the appender from
//     the rows that follow the job, a Parquet one as a view over its fixed list of files.
//  3. It locks the database: file access only to those files and the temporary directory,
//     external access off, the configuration locked.
//  4. It runs the statement and answers at most j.Rows rows and j.Bytes bytes of them.
func (j *job) run(in io.Reader) *answer {
	read := append([]string(nil), engineReads...)
	for _, r := range j.Relations {
		for _, f := range r.Files {
			read = append(read, f.Path)
		}
	}
	if err := sandbox.RestrictThread(sandbox.Policy{Read: read, ReadWrite: []string{j.Dir}}); err != nil {
		return internal(err)
	}
	ctx := context.Background() // the server kills this process at the deadline
	tmp := filepath.Join(j.Dir, "tmp")
	conn, closeDB, err := j.open(ctx, tmp)
	if err != nil {
		return internal(err)
	}
	defer closeDB()
	frames := &frameReader{r: in}
	for _, r := range j.Relations {
		if err := attach(ctx, conn, r, frames); err != nil {
			return j.failure(err, &r)
		}
	}
	if err := lock(ctx, conn, tmp, read[len(engineReads):]); err != nil {
		return internal(err)
	}
	ans, err := collect(ctx, conn, j.SQL, j.Rows, j.Bytes)
	if err != nil {
		return j.failure(err, nil)
	}
	return ans
}

// open opens a fresh in-memory database with its settings fixed at start, and its one
// connection; closeDB closes both.
func (j *job) open(ctx context.Context, tmp string) (*sql.Conn, func(), error) {
	settings := url.Values{
		"autoinstall_known_extensions": {"false"},
		"autoload_known_extensions":    {"false"},
		"allow_community_extensions":   {"false"},
		"allow_unsigned_extensions":    {"false"},
		"threads":                      {strconv.Itoa(j.Threads)},
		"memory_limit":                 {j.MemoryLimit},
		"temp_directory":               {tmp},
		"max_temp_directory_size":      {strconv.FormatInt(max(j.SpillLimit>>10, 1), 10) + "KiB"},
	}
	connector, err := duckdb.NewConnector("?"+settings.Encode(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("open DuckDB: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		connector.Close()
		return nil, nil, fmt.Errorf("open DuckDB: %w", err)
	}
	return conn, func() {
		conn.Close()
		db.Close()
		connector.Close()
	}, nil
}

// failure is the answer to err, an error of the engine while it attached relation r (nil: while
// the statement ran). Local paths in its message are replaced by the files' keys, the worker's
// directory by "(spill directory)". A Parquet file the engine cannot read makes its relation
// not readable; the limits of temporary files and memory make the query too large.
func (j *job) failure(err error, r *jobRelation) *answer {
	var fe *query.FailedError
	var te *query.TooLargeError
	switch {
	case errors.As(err, &te):
		return &answer{Error: &answerError{Kind: errTooLarge, Message: te.Message}}
	case !errors.As(err, &fe):
		return internal(err)
	}
	msg := fe.Message
	if r == nil {
		// Which relation's file, if any, the message is about.
		for i := range j.Relations {
			for _, f := range j.Relations[i].Files {
				if strings.Contains(msg, f.Path) {
					r = &j.Relations[i]
				}
			}
		}
	}
	for _, rel := range j.Relations {
		for _, f := range rel.Files {
			msg = strings.ReplaceAll(msg, f.Path, f.Key)
		}
	}
	msg = strings.ReplaceAll(msg, j.Dir, "(spill directory)")
	switch {
	case strings.Contains(msg, "max_temp_directory_size") || strings.Contains(msg, "File too large"):
		return &answer{Error: &answerError{Kind: errTooLarge, Message: fmt.Sprintf(
			"the query wrote more than its limit of %d bytes of temporary files (%s)", j.SpillLimit, msg)}}
	case strings.HasPrefix(msg, "Out of Memory Error"):
		return &answer{Error: &answerError{Kind: errTooLarge, Message: fmt.Sprintf(
			"the query needed more than its memory limit of %s (%s)", j.MemoryLimit, msg)}}
	case r != nil && !r.Buffered && unreadable(msg):
		version := ""
		if r.Version != "" {
			version = fmt.Sprintf(" %q", r.Version)
		}
		return &answer{Error: &answerError{Kind: errNotReadable, Message: fmt.Sprintf(
			"dataset %q: its version%s is not readable: %s", r.Name, version, msg)}}
	}
	return &answer{Error: &answerError{Kind: errFailed, Message: msg}}
}

// unreadable says whether msg, an engine's message about a file, says the file is no Parquet
// file it can read (rather than, say, a column the statement names and the file lacks).
func unreadable(msg string) bool {
	for _, s := range []string{"IO Error", "Invalid Input Error", "Invalid Error", "Serialization Error",
		"Corrupt", "corrupt", "magic bytes", "Parquet", "parquet"} {
		if strings.Contains(msg, s) && !strings.HasPrefix(msg, "Binder Error") {
			return true
		}
	}
	return false
}

// attach makes r a relation of conn under its name.
func attach(ctx context.Context, conn *sql.Conn, r jobRelation, frames *frameReader) error {
	name := ident(r.Name)
	if !r.Buffered {
		list := make([]string, len(r.Files))
		for i, f := range r.Files {
			list[i] = literal(f.Path)
		}
		_, err := conn.ExecContext(ctx, "CREATE VIEW "+name+" AS SELECT * FROM read_parquet(["+strings.Join(list, ", ")+"])")
		return failed(ctx, err)
	}
	defs := make([]string, len(r.Columns))
	for i, c := range r.Columns {
		t, ok := columnTypes[c.Type]
		if !ok {
			return fmt.Errorf("relation %s: column %s has unknown type %q", r.Name, c.Name, c.Type)
		}
		defs[i] = ident(c.Name) + " " + t
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE "+name+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return fmt.Errorf("attach %s: %w", r.Name, err)
	}
	return conn.Raw(func(dc any) error {
		a, err := duckdb.NewAppenderFromConn(dc.(driver.Conn), "", r.Name)
		if err != nil {
			return fmt.Errorf("attach %s: %w", r.Name, err)
		}
		err = appendRows(a, r, frames)
		if cerr := a.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("attach %s: %w", r.Name, cerr)
		}
		return err
	})
}

// frameReader reads the frames of rows that follow a job.
type frameReader struct {
	r   io.Reader
	buf []byte
}

// appendRows appends the rows of r that follow, up to its end frame, to a.
func appendRows(a *duckdb.Appender, r jobRelation, frames *frameReader) error {
	row := make([]driver.Value, len(r.Columns))
	for {
		kind, payload, err := readFrame(frames.r, frames.buf)
		if err != nil {
			return fmt.Errorf("read the rows of %s: %w", r.Name, err)
		}
		frames.buf = payload[:0]
		switch kind {
		case frameEnd:
			return nil
		case frameRows:
		default:
			return fmt.Errorf("read the rows of %s: a frame of kind %q", r.Name, kind)
		}
		vr := valueReader{b: payload}
		n := vr.uvarint()
		for range n {
			for i, c := range r.Columns {
				v := vr.value()
				if s, ok := v.(string); ok && c.Type == "json" {
					v = json.RawMessage(s)
				}
				row[i] = v
			}
			if vr.err != nil {
				return fmt.Errorf("read the rows of %s: %w", r.Name, vr.err)
			}
			if err := a.AppendRow(row...); err != nil {
				return fmt.Errorf("attach %s: %w", r.Name, err)
			}
		}
	}
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
			return fmt.Errorf("lock the database: %w", err)
		}
	}
	return nil
}

// collect runs text and reads its answer: at most maxRows rows, and as many as fit in
// maxBytes of JSON.
func collect(ctx context.Context, conn *sql.Conn, text string, maxRows, maxBytes int) (*answer, error) {
	rows, err := conn.QueryContext(ctx, text)
	if err != nil {
		return nil, failed(ctx, err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, failed(ctx, err)
	}
	ans := &answer{Columns: make([]query.ResultColumn, len(types)), Rows: []json.RawMessage{}}
	for i, t := range types {
		ans.Columns[i] = query.ResultColumn{Name: t.Name(), Type: t.DatabaseTypeName()}
	}
	vals := make([]any, len(types))
	dest := make([]any, len(types))
	for i := range vals {
		dest[i] = &vals[i]
	}
	row := make([]any, len(vals))
	size := 2 // the brackets of the rows array
	for rows.Next() {
		if len(ans.Rows) == maxRows {
			ans.Truncated = true
			break
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, failed(ctx, err)
		}
		for i, v := range vals {
			row[i] = jsonValue(ans.Columns[i].Type, v)
		}
		b, err := json.Marshal(row)
		if err != nil {
			return nil, fmt.Errorf("encode a row: %w", err)
		}
		if size += len(b) + 1; size > maxBytes {
			ans.Truncated = true
			break
		}
		ans.Rows = append(ans.Rows, b)
	}
	if err := rows.Err(); err != nil {
		return nil, failed(ctx, err)
	}
	return ans, nil
}

// failed is the error of a statement that failed in DuckDB: the caller's (query.FailedError)
// unless the context ended.
func failed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
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
