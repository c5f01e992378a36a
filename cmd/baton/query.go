package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/query/engine"
)

// queryFlags configure a server's Query Service.
type queryFlags struct {
	spillDir    string
	memoryLimit string
	threads     int
	concurrent  int
}

func (f *queryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.spillDir, "query-spill-dir", "", "directory of each query's fetched Parquet files and DuckDB's temporary files, removed when the query ends (default: a new directory under $TMPDIR, removed at exit)")
	fs.StringVar(&f.memoryLimit, "query-memory-limit", "1GB", "memory one query's DuckDB may use before it spills to disk, in DuckDB's units (512MB, 4GB)")
	fs.IntVar(&f.threads, "query-threads", 0, "threads of one query (default: the smaller of the CPUs and 4)")
	fs.IntVar(&f.concurrent, "query-concurrency", 4, "queries that run at once; one more waits up to 10s for a slot, then is answered 503")
}

// open starts the query engine; in a build without cgo there is none, and every query is
// answered 501 (query.ErrUnavailable), which the log says once.
func (f *queryFlags) open(log *slog.Logger) (query.Engine, func(), error) {
	if !engine.Available {
		log.Warn("query service unavailable: this baton was built without cgo (CGO_ENABLED=0); POST /v1/query answers 501")
		return nil, func() {}, nil
	}
	if f.concurrent < 1 || f.threads < 0 {
		return nil, nil, fmt.Errorf("--query-concurrency must be at least 1 and --query-threads not negative")
	}
	e, err := engine.New(engine.Config{SpillDir: f.spillDir, MemoryLimit: f.memoryLimit, Threads: f.threads,
		MaxConcurrent: f.concurrent, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return e, func() { e.Close() }, nil
}
