// Package query is the Query Service's contract: read-only SQL over the datasets a caller may
// read. It names what an engine is given (a checked statement, the relations it reads, the
// limits) and what it answers (columns, rows, and the errors every engine gives the same way).
// The engine itself, DuckDB, lives in query/engine, which needs cgo; this package does not, so
// that everything else builds and links without it.
package query

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Engine runs SQL. It is safe for concurrent use.
type Engine interface {
	// Check gates sql before anything reads it: one read-only SELECT (or WITH … SELECT), which
	// may read only relations by name. A refusal is a *RejectedError saying why.
	Check(ctx context.Context, sql string) (*Statement, error)
	// Run executes a checked statement with exactly rels attached, each under its Name.
	Run(ctx context.Context, st *Statement, rels []Relation, lim Limits) (*Result, error)
	// Stop ends every statement that runs (their Run answers ErrStopped) and refuses new ones:
	// a server that shuts down calls it before its grace ends.
	Stop()
}

// Statement is SQL that passed the gate.
type Statement struct {
	SQL string
	// Relations are the names the statement reads as tables where none of its own CTEs of the
	// name is in scope (a name it defines as a CTE in one place may be a relation in another):
	// each must be attached as a Relation before the statement runs, since a name attached to
	// nothing would be bound by whatever the engine's own catalog holds under it.
	Relations []string
	// Names are the names its column references are made of, lower-cased (a.b.c gives a, b and
	// c), and AllColumns says that it may read columns it does not name (a star, a whole row, a
	// positional reference, a natural join, renamed columns): an engine may attach a relation
	// with only its named columns unless AllColumns, and the statement reads the same rows.
	Names      map[string]bool
	AllColumns bool
}

// Reads says whether st may read column name of a relation.
func (st *Statement) Reads(name string) bool {
	return st.AllColumns || st.Names[strings.ToLower(name)]
}

// Hash is the SHA-256 of sql in hex: what the audit trail and the logs keep instead of the text.
func Hash(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return hex.EncodeToString(sum[:])
}

// Relation is one dataset as a statement reads it: a buffered dataset's rows (Columns and
// Rows), or a Parquet dataset version's files (Files).
type Relation struct {
	Name string
	// Dataset and Version say which dataset version the relation is, for the audit trail.
	Dataset, Version string

	Columns []Column
	Rows    RowSource

	Files []File
}

// Column is a buffered dataset's column: its name and its declared type (string, integer,
// number, boolean, timestamp or json).
type Column struct {
	Name, Type string
}

// RowSource yields a buffered relation's rows from one snapshot: the values of columns (names
// of Columns), in that order. It stops with yield's error when yield fails. A value is nil,
// string, int64, float64, bool, time.Time or, for json, its text.
type RowSource func(ctx context.Context, columns []string, yield func(vals []any) error) error

// File is one Parquet object of a relation: readable in place at Path, or through Open.
type File struct {
	Key  string // its key in the object storage, for messages
	Size int64
	Path string
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// Limits bound one query. Zero fields take DefaultLimits'.
type Limits struct {
	// Tenant is whose query it is: one tenant holds at most its fair share of an engine's
	// slots at once, so that another tenant's query is served while it saturates its share.
	Tenant string
	// Caller is who asks within the tenant (an API key, a task's attempt): an engine that keeps
	// state between queries keeps it for the same caller only.
	Caller string

	Rows    int           // rows answered; more make the answer truncated
	Bytes   int           // JSON bytes of the rows answered; more make it truncated
	Timeout time.Duration // the statement's run time; past it, ErrTimeout
	// RelationRows caps the rows of each buffered relation, and SpillBytes the bytes of Parquet
	// objects fetched for one query: past either, a *TooLargeError before the statement runs.
	RelationRows int64
	SpillBytes   int64
}

// Bounds of Limits.Rows and the defaults.
const (
	DefaultRows = 1000
	MaxRows     = 10000
	MaxBytes    = 10 << 20
	// UserTimeout and TaskTimeout are the statement timeouts of a query with an API key and of
	// a task's query.
	UserTimeout = 60 * time.Second
	TaskTimeout = 300 * time.Second
	// MaxSlotWait bounds how long a query may wait for a slot of an engine before its statement
	// starts.
	MaxSlotWait = 10 * time.Second
)

// DefaultLimits are a user query's limits.
var DefaultLimits = Limits{Rows: DefaultRows, Bytes: MaxBytes, Timeout: UserTimeout,
	RelationRows: 5_000_000, SpillBytes: 4 << 30}

// WithDefaults fills l's zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.Rows <= 0 {
		l.Rows = d.Rows
	}
	if l.Bytes <= 0 {
		l.Bytes = d.Bytes
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.RelationRows <= 0 {
		l.RelationRows = d.RelationRows
	}
	if l.SpillBytes <= 0 {
		l.SpillBytes = d.SpillBytes
	}
	return l
}

// Result is a query's answer.
type Result struct {
	Columns []ResultColumn `json:"columns"`
	// Rows hold JSON values: numbers, strings, booleans, null, and arrays and objects for
	// nested types (see the engine for each type's form).
	Rows      [][]any `json:"rows"`
	Truncated bool    `json:"truncated"`
	RowCount  int     `json:"row_count"`
	Duration  time.Duration
}

// ResultColumn is a column of a Result: its name and the engine's name of its type.
type ResultColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

var (
	// ErrUnavailable: this build has no query engine (it was built without cgo).
	ErrUnavailable = errors.New("the query service is not available in this build of Baton: it was built without cgo (CGO_ENABLED=0), which the DuckDB engine needs")
	// ErrTimeout: the statement ran past its timeout and was stopped.
	ErrTimeout = errors.New("query timed out")
	// ErrBusy: every query slot the caller's tenant may take stayed taken while it waited.
	ErrBusy = errors.New("the query service is busy: every query slot is taken; retry shortly")
	// ErrStopped: the server shut down while the statement ran, or before it could.
	ErrStopped = errors.New("the server is shutting down: the query was stopped; retry it")
)

// RejectedError is SQL the gate refused, with the reason.
type RejectedError struct{ Reason string }

func (e *RejectedError) Error() string { return "sql rejected: " + e.Reason }

// Rejectf is a *RejectedError with a formatted reason.
func Rejectf(format string, args ...any) *RejectedError {
	return &RejectedError{Reason: fmt.Sprintf(format, args...)}
}

// FailedError is a statement that passed the gate and then failed in the engine (an unknown
// column, a type error, a division by zero): the caller's to fix. Message is the engine's.
type FailedError struct{ Message string }

func (e *FailedError) Error() string { return "query failed: " + e.Message }

// TooLargeError is a query past a limit of what it may read or use: its inputs before it runs,
// or its memory, temporary files or CPU time while it runs.
type TooLargeError struct{ Message string }

func (e *TooLargeError) Error() string { return e.Message }

// NotReadableError is a dataset version the engine cannot read (its files are not Parquet).
// Message names the dataset and the version.
type NotReadableError struct{ Message string }

func (e *NotReadableError) Error() string { return e.Message }
