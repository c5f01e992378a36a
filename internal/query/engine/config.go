// Package engine is the Query Service's engine: DuckDB, embedded through cgo. It gates SQL with
// DuckDB's own parser and runs each query in a fresh, locked-down in-memory database holding
// only the relations the query may read. Built without cgo, New answers
// query.ErrUnavailable and Available is false.
package engine

import (
	"log/slog"
	"time"
)

// Config configures an Engine. Zero fields take their defaults.
type Config struct {
	// SpillDir holds each query's own directory (its fetched Parquet objects and DuckDB's
	// temporary files), removed when the query ends. Default: a directory of the engine's own
	// under $TMPDIR, removed by Close.
	SpillDir string
	// Threads and MemoryLimit bound each query's database: default the smaller of GOMAXPROCS
	// and 4, and "1GB" (DuckDB's spelling of a size).
	Threads     int
	MemoryLimit string
	// MaxConcurrent queries run at once (default 4); a query waits at most SlotWait (default
	// 10 s) for a slot, then gets query.ErrBusy.
	MaxConcurrent int
	SlotWait      time.Duration
	Logger        *slog.Logger
}
