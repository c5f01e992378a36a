//go:build cgo

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/query/gate"
	"github.com/baton-dev/baton/internal/sandbox"
)

// Available says whether this build has the engine.
const Available = true

// Engine runs queries on DuckDB, each in a worker process of its own that the engine starts,
// contains (package sandbox) and kills: at the statement's deadline, when its caller goes
// away, when the server stops. Nothing a statement does, wherever its time and memory go
// (parsing, planning, executing, encoding), happens in the server's process. It is safe for
// concurrent use.
type Engine struct {
	cfg      Config
	gate     *gate.Gate
	slots    *slots
	workers  *workers
	memory   uint64 // bytes: the worker's cap, beyond what it mapped to start
	ownSpill bool   // New made cfg.SpillDir, and Close removes it

	mu      sync.Mutex
	stopped bool
	running map[*worker]bool
}

// New starts an engine: it checks cfg, makes cfg.SpillDir (without one, a directory of its own
// under the system's temporary directory, removed by Close) and opens the gate's parser.
// Workers start on demand; one is kept ready once the first query ran (Config.Spares).
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	limit, err := ParseSize(cfg.MemoryLimit)
	if err != nil {
		return nil, fmt.Errorf("query engine: memory limit %q: %w", cfg.MemoryLimit, err)
	}
	if cfg.TenantSlots > cfg.MaxConcurrent {
		return nil, fmt.Errorf("query engine: a tenant's slots (%d) exceed the slots (%d)", cfg.TenantSlots, cfg.MaxConcurrent)
	}
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
	if cfg.SpillDir, err = filepath.Abs(cfg.SpillDir); err != nil {
		return nil, fmt.Errorf("query engine: spill directory: %w", err)
	}
	g, err := gate.Open()
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, gate: g, slots: newSlots(cfg.MaxConcurrent, cfg.TenantSlots), ownSpill: own,
		memory: limit + workerHeadroom, running: map[*worker]bool{}}
	e.workers = newWorkers(e)
	return e, nil
}

// cpuBudget is a worker's CPU time for its whole life (RLIMIT_CPU, which may only be lowered):
// the operating system's backstop behind the deadline, which kills a statement first. A worker
// that has used half of it serves no more queries, so that each query has at least a task's
// timeout on all its threads.
func (e *Engine) cpuBudget() time.Duration {
	return 2*query.TaskTimeout*time.Duration(e.cfg.Threads) + time.Minute
}

// workerHeadroom is what a worker may map beyond DuckDB's memory limit: the values DuckDB does
// not count against it, the threads' stacks, the answer being encoded.
const workerHeadroom = 512 << 20

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
	if c.TenantSlots <= 0 {
		c.TenantSlots = (c.MaxConcurrent + 1) / 2
	}
	if c.SlotWait <= 0 || c.SlotWait > query.MaxSlotWait {
		c.SlotWait = query.MaxSlotWait
	}
	if c.SpillLimit <= 0 {
		c.SpillLimit = DefaultSpillLimit
	}
	if c.Spares < 0 {
		c.Spares = 0
	} else if c.Spares == 0 {
		c.Spares = 1
	}
	if c.Logger == nil {
		c.Logger = nopLogger
	}
	return c
}

// Close stops the engine (see Stop), ends its spare workers and removes the spill directory
// New made.
func (e *Engine) Close() error {
	e.Stop()
	e.workers.close()
	if e.ownSpill {
		os.RemoveAll(e.cfg.SpillDir)
	}
	return e.gate.Close()
}

// Stop kills the worker of every statement that runs (their Run answers query.ErrStopped, once
// the worker is gone and its files removed) and refuses statements from now on.
func (e *Engine) Stop() {
	e.mu.Lock()
	e.stopped = true
	running := make([]*worker, 0, len(e.running))
	for w := range e.running {
		running = append(running, w)
	}
	e.mu.Unlock()
	for _, w := range running {
		w.proc.Kill()
	}
}

func (e *Engine) isStopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopped
}

// Check gates sql (see gate.Gate.Check).
func (e *Engine) Check(ctx context.Context, sql string) (*query.Statement, error) {
	return e.gate.Check(ctx, sql)
}

// Run runs st over rels:
//
//  1. It takes one of the engine's slots within the tenant's share (Config.TenantSlots),
//     waiting at most Config.SlotWait (query.ErrBusy).
//  2. It takes a worker process (a spare one, ready, or a new one) and fetches into the
//     worker's own directory the Parquet objects that cannot be read in place, at most
//     lim.SpillBytes in all.
//  3. It caps the worker's memory and CPU time, and sends it the job and the rows of its
//     buffered relations (at most lim.RelationRows each). The worker confines itself to the
//     job's files and runs the statement (see job.run).
//  4. It reads the answer: at most lim.Rows rows and lim.Bytes bytes.
//
// The worker is killed at lim.Timeout (query.ErrTimeout), when ctx ends, or when the engine
// stops; it is gone and its directory removed when Run returns.
func (e *Engine) Run(ctx context.Context, st *query.Statement, rels []query.Relation, lim query.Limits) (*query.Result, error) {
	lim = lim.WithDefaults()
	start := time.Now()
	if e.isStopped() {
		return nil, query.ErrStopped
	}
	release, err := e.slots.acquire(ctx, lim.Tenant, e.cfg.SlotWait)
	if err != nil {
		return nil, err
	}
	defer release()

	ctx, cancel := context.WithTimeoutCause(ctx, lim.Timeout, query.ErrTimeout)
	defer cancel()
	res, err := e.run(ctx, st, rels, lim)
	switch {
	case err == nil:
		res.Duration = time.Since(start)
		return res, nil
	case e.isStopped():
		return nil, query.ErrStopped
	case errors.Is(context.Cause(ctx), query.ErrTimeout):
		return nil, query.ErrTimeout
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, err
}

func (e *Engine) run(ctx context.Context, st *query.Statement, rels []query.Relation, lim query.Limits) (*query.Result, error) {
	w, err := e.workers.take(ctx, lim.Tenant+"\x00"+lim.Caller, rels)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		w.end()
		return nil, query.ErrStopped
	}
	e.running[w] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.running, w)
		e.mu.Unlock()
		e.workers.put(w)
	}()
	stop := context.AfterFunc(ctx, w.proc.Kill)
	defer stop()

	files, err := fetch(ctx, w.dir, rels, lim.SpillBytes)
	if err != nil {
		return nil, err
	}
	defer w.clean()
	j := job{SQL: st.SQL, Threads: e.cfg.Threads, MemoryLimit: e.cfg.MemoryLimit, SpillLimit: e.cfg.SpillLimit,
		Dir: w.dir, Rows: lim.Rows, Bytes: lim.Bytes, Relations: make([]jobRelation, len(rels))}
	for i, r := range rels {
		jr := jobRelation{Name: r.Name, Version: r.Version, Buffered: r.Rows != nil}
		if jr.Buffered {
			jr.Columns = project(st, r.Columns)
		} else if len(files[i]) == 0 {
			return nil, fmt.Errorf("query: relation %s has neither rows nor files", r.Name)
		}
		for k, p := range files[i] {
			jr.Files = append(jr.Files, jobFile{Path: p, Key: r.Files[k].Key})
		}
		j.Relations[i] = jr
	}
	// The worker's memory cap counts from what it had mapped when it got its first job (the
	// CPU time of its whole life was capped when it started).
	if w.queries == 0 {
		u, err := w.proc.Usage()
		if err != nil {
			return nil, err
		}
		w.base = u.AddressSpace
		if err := w.proc.SetLimits(sandbox.Limits{Memory: w.base + e.memory}); err != nil {
			return nil, err
		}
	}
	w.queries++
	sendErr := w.send(ctx, &j, rels, lim.RelationRows)
	var tooLarge *query.TooLargeError
	if errors.As(sendErr, &tooLarge) {
		return nil, sendErr
	}
	ans, err := w.answer(lim.Bytes)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case w.proc.Killed(): // by Stop
			return nil, query.ErrStopped
		}
		return nil, e.died(w, errors.Join(sendErr, err))
	}
	// Answered, with every row it was sent: it may serve its caller again.
	w.reusable = sendErr == nil && (ans.Error == nil || ans.Error.Kind != errInternal)
	if ans.Error != nil {
		return nil, ans.Error.err()
	}
	res := &query.Result{Columns: ans.Columns, Rows: make([][]any, len(ans.Rows)), Truncated: ans.Truncated, RowCount: len(ans.Rows)}
	for i, raw := range ans.Rows {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&res.Rows[i]); err != nil {
			return nil, fmt.Errorf("query: read the answer: %w", err)
		}
	}
	return res, nil
}

// died is the error of a worker that ended without answering, and not because it was killed:
// past its memory, CPU time or file size, or a fault of the engine.
func (e *Engine) died(w *worker, cause error) error {
	state, _ := w.proc.Wait()
	stderr := w.stderr.String()
	ws, _ := state.Sys().(syscall.WaitStatus)
	switch {
	case strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "bad_alloc") ||
		strings.Contains(stderr, "cannot allocate memory") || strings.Contains(stderr, "address space"):
		return &query.TooLargeError{Message: fmt.Sprintf(
			"the query needed more than its memory limit of %s and was stopped", e.cfg.MemoryLimit)}
	case ws.Signaled() && (ws.Signal() == syscall.SIGXCPU || ws.Signal() == syscall.SIGKILL):
		return &query.TooLargeError{Message: "the query used more CPU time than its limit and was stopped"}
	case ws.Signaled() && ws.Signal() == syscall.SIGXFSZ:
		return &query.TooLargeError{Message: fmt.Sprintf(
			"the query wrote more than its limit of %d bytes of temporary files", e.cfg.SpillLimit)}
	}
	e.cfg.Logger.Warn("query worker ended without an answer", "state", state.String(), "error", cause.Error(),
		"stderr", lastLines(stderr, 20))
	return &query.FailedError{Message: fmt.Sprintf("the query engine stopped while it ran the statement (%s)", state)}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
