package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/query/engine"
	"github.com/baton-dev/baton/internal/sandbox"
)

// queryFlags configure a server's Query Service.
type queryFlags struct {
	spillDir    string
	memoryLimit string
	spillLimit  sizeFlag
	threads     int
	concurrent  int
	tenantSlots int
}

func (f *queryFlags) register(fs *flag.FlagSet) {
	f.spillLimit = engine.DefaultSpillLimit
	fs.StringVar(&f.spillDir, "query-spill-dir", "", "directory of each query worker's fetched Parquet files and DuckDB's temporary files, removed when the query ends (default: a new directory under $TMPDIR, removed at exit)")
	fs.StringVar(&f.memoryLimit, "query-memory-limit", "1GB", "memory one query's DuckDB may use before it spills to disk, in DuckDB's units (512MB, 4GB, 1GiB); the operating system caps its worker process at this plus 512 MiB")
	fs.Var(&f.spillLimit, "query-spill-limit", "bytes of temporary files one query may write to --query-spill-dir (units B, KB, MB, GB, KiB, MiB, GiB); past it the query is answered 422 query_too_large")
	fs.IntVar(&f.threads, "query-threads", 0, "threads of one query (default: the smaller of the CPUs and 4)")
	fs.IntVar(&f.concurrent, "query-concurrency", 4, "queries that run at once; one more waits up to 10s for a slot, then is answered 503")
	fs.IntVar(&f.tenantSlots, "query-tenant-slots", 0, "of --query-concurrency, how many one tenant's queries may hold at once (default: half, rounded up)")
}

// open starts the query engine; in a build without cgo there is none, and every query is
// answered 501 (query.ErrUnavailable), which the log says once. The files of a file:// object
// storage (blobURL) are read in place by the engine's workers.
func (f *queryFlags) open(log *slog.Logger, blobURL string) (query.Engine, func(), error) {
	if !engine.Available {
		log.Warn("query service unavailable: this baton was built without cgo (CGO_ENABLED=0); POST /v1/query answers 501")
		return nil, func() {}, nil
	}
	switch {
	case f.concurrent < 1 || f.threads < 0:
		return nil, nil, fmt.Errorf("--query-concurrency must be at least 1 and --query-threads not negative")
	case f.tenantSlots < 0 || f.tenantSlots > f.concurrent:
		return nil, nil, fmt.Errorf("--query-tenant-slots must be from 1 to --query-concurrency (%d)", f.concurrent)
	}
	root, err := blob.LocalRoot(blobURL)
	if err != nil {
		return nil, nil, err
	}
	cfg := engine.Config{SpillDir: f.spillDir, MemoryLimit: f.memoryLimit, SpillLimit: int64(f.spillLimit), Threads: f.threads,
		MaxConcurrent: f.concurrent, TenantSlots: f.tenantSlots, Logger: log}
	if root != "" {
		cfg.ReadRoots = []string{root}
	}
	e, err := engine.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--query-memory-limit, --query-spill-dir: %w", err)
	}
	log.Info("query service", "containment", sandbox.Supported().String())
	return e, func() { e.Close() }, nil
}

// sizeFlag is a flag of bytes, written as DuckDB writes sizes (2GiB, 512MB).
type sizeFlag int64

func (s *sizeFlag) String() string {
	n := int64(*s)
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// Get is the flag's bytes.
func (s *sizeFlag) Get() any { return int64(*s) }

func (s *sizeFlag) Set(v string) error {
	n, err := engine.ParseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}
