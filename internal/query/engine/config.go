// Package engine is the Query Service's engine: DuckDB, embedded through cgo. It gates SQL (package
// gate), then runs each query in a worker process of its own (this same program,
// started anew) that the operating system contains (package sandbox) and the engine kills at
// the query's deadline: a fresh, locked-down in-memory database holding only the relations the
// query may read. Built without cgo, New answers query.ErrUnavailable and Available is false.
package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Config configures an Engine. Zero fields take their defaults.
type Config struct {
	// SpillDir holds each worker's own directory (the Parquet objects fetched for its query and
	// DuckDB's temporary files), removed when its query ends. Default: a directory of the
	// engine's own under $TMPDIR, removed by Close.
	SpillDir string
	// ReadRoots are directories where the files of datasets lie that queries read in place (a
	// file:// object storage): spare workers are started ready to read beneath them. A query
	// that reads a file elsewhere gets a worker started for it alone.
	ReadRoots []string
	// Threads and MemoryLimit bound each query's database: default the smaller of GOMAXPROCS
	// and 4, and "1GB" (DuckDB's spelling of a size: KB, MB, GB, TB, KiB, MiB, GiB, TiB). The
	// operating system caps a worker's memory at MemoryLimit plus 512 MiB, whatever holds it.
	Threads     int
	MemoryLimit string
	// SpillLimit caps the bytes of DuckDB's temporary files of one query (default
	// DefaultSpillLimit); the engine's in total are at most MaxConcurrent times that.
	SpillLimit int64
	// MaxConcurrent queries run at once (default 4); a tenant's queries hold at most
	// TenantSlots of them (default half, rounded up). A query waits at most SlotWait (default
	// and most: query.MaxSlotWait) for a slot its tenant may take, then gets query.ErrBusy.
	MaxConcurrent int
	TenantSlots   int
	SlotWait      time.Duration
	// Spares is how many workers are kept started and waiting, so that a query does not wait
	// for one to start (default 1; negative: none).
	Spares int
	Logger *slog.Logger
}

// DefaultSpillLimit is the default cap of one query's temporary files: 2 GiB.
const DefaultSpillLimit = 2 << 30

var nopLogger = slog.New(slog.DiscardHandler)

// ParseSize reads a size as DuckDB spells one: a number and a unit (B, KB, MB, GB, TB in
// powers of 1000, KiB, MiB, GiB, TiB in powers of 1024; case and a space between them do not
// matter).
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, errors.New("want a number and a unit, e.g. 1GB or 512MiB")
	}
	n, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive number and a unit, e.g. 1GB or 512MiB")
	}
	units := map[string]float64{"b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
	unit, ok := units[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB", strings.TrimSpace(t[i:]))
	}
	return uint64(n * unit), nil
}
