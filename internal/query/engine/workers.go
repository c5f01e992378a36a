//go:build cgo

package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/sandbox"
)

// worker is one query worker process: contained by the operating system, in a directory of its
// own. It serves one caller only (a spare has served none yet), one query at a time.
type worker struct {
	proc   *sandbox.Process
	dir    string
	stdin  *os.File // the server's ends of the worker's stdin and stdout
	stdout *os.File
	stderr *tail
	once   sync.Once

	// Kept by the query that holds the worker: the caller it serves, the queries it ran, the
	// address space it had when it got its first job (its memory cap counts from there), and
	// whether it may serve another.
	caller   string
	queries  int
	base     uint64
	reusable bool
	idle     *time.Timer
}

// end kills the worker (if it still runs), waits for it, and removes its directory.
func (w *worker) end() {
	w.once.Do(func() {
		w.proc.Kill()
		w.proc.Wait()
		w.stdin.Close()
		w.stdout.Close()
		os.RemoveAll(w.dir)
	})
}

// clean removes what a query left in the worker's directory: the files fetched for it, and
// DuckDB's temporary files.
func (w *worker) clean() {
	entries, _ := os.ReadDir(w.dir)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(w.dir, e.Name()))
	}
	os.Mkdir(filepath.Join(w.dir, "tmp"), 0o700)
}

// answer reads the worker's answer.
func (w *worker) answer(maxBytes int) (*answer, error) {
	kind, payload, err := readFrame(w.stdout, nil)
	if err != nil {
		return nil, fmt.Errorf("query worker: read the answer: %w", err)
	}
	if kind != frameAnswer {
		return nil, fmt.Errorf("query worker: a frame of kind %q instead of the answer", kind)
	}
	if len(payload) > 2*maxBytes+(1<<20) {
		return nil, fmt.Errorf("query worker: an answer of %d bytes", len(payload))
	}
	var a answer
	if err := json.Unmarshal(payload, &a); err != nil {
		return nil, fmt.Errorf("query worker: read the answer: %w", err)
	}
	return &a, nil
}

// workers starts an engine's workers, keeps its spares, and keeps a worker that answered for
// its caller's next query a while.
type workers struct {
	e      *Engine
	spares chan *worker

	mu        sync.Mutex
	refilling bool
	closed    bool
	idle      map[string]*worker // by caller
	done      sync.WaitGroup
}

// A worker serves its caller's queries until it ran maxQueries, sat idle for idleTimeout, its
// address space grew by more than half its memory cap, or it used half its CPU budget; it never
// serves another caller.
const (
	maxQueries  = 100
	idleTimeout = 30 * time.Second
)

func newWorkers(e *Engine) *workers {
	return &workers{e: e, spares: make(chan *worker, max(e.cfg.Spares, 0)), idle: map[string]*worker{}}
}

// take is a worker ready for a query of caller over rels: the worker that last served the
// caller, or a spare, when every file rels read in place lies beneath the engine's ReadRoots;
// else one started now, for this query alone, that may read the roots and those files.
func (ws *workers) take(ctx context.Context, caller string, rels []query.Relation) (*worker, error) {
	var outside []string
	for _, r := range rels {
		for _, f := range r.Files {
			if f.Path != "" && !beneath(f.Path, ws.e.cfg.ReadRoots) {
				outside = append(outside, f.Path)
			}
		}
	}
	if len(outside) > 0 {
		w, err := ws.start(ctx, append(outside, ws.e.cfg.ReadRoots...))
		if w != nil {
			w.caller = caller
		}
		return w, err
	}
	ws.mu.Lock()
	w := ws.idle[caller]
	delete(ws.idle, caller)
	ws.mu.Unlock()
	if w != nil && w.idle.Stop() && alive(w) {
		w.reusable = false
		return w, nil
	} else if w != nil {
		w.end()
	}
	defer ws.refill()
	for {
		select {
		case w := <-ws.spares:
			if !alive(w) { // it died waiting
				w.end()
				continue
			}
			w.caller = caller
			return w, nil
		default:
			w, err := ws.start(ctx, ws.e.cfg.ReadRoots)
			if w != nil {
				w.caller = caller
			}
			return w, err
		}
	}
}

func alive(w *worker) bool {
	select {
	case <-w.proc.Done():
		return false
	default:
		return true
	}
}

// put takes back a worker whose query ended: it waits, idle, for its caller's next query when
// it may serve one, else it ends.
func (ws *workers) put(w *worker) {
	if !w.reusable || w.queries >= maxQueries {
		w.end()
		return
	}
	if u, err := w.proc.Usage(); err != nil || u.AddressSpace > w.base+ws.e.memory/2 || u.CPU > ws.e.cpuBudget()/2 {
		w.end() // it keeps memory, or has spent CPU time, its next query would lack
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed || len(ws.idle) >= ws.e.cfg.MaxConcurrent {
		w.end()
		return
	}
	if old := ws.idle[w.caller]; old != nil {
		old.idle.Stop()
		go old.end()
	}
	ws.idle[w.caller] = w
	w.idle = time.AfterFunc(idleTimeout, func() {
		ws.mu.Lock()
		if ws.idle[w.caller] == w {
			delete(ws.idle, w.caller)
		}
		ws.mu.Unlock()
		w.end()
	})
}

// beneath says whether path lies beneath one of roots.
func beneath(path string, roots []string) bool {
	for _, r := range roots {
		if rel, err := filepath.Rel(r, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel) {
			return true
		}
	}
	return false
}

// refill starts spares in the background until there are Config.Spares of them.
func (ws *workers) refill() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.refilling || ws.closed || len(ws.spares) >= cap(ws.spares) {
		return
	}
	ws.refilling = true
	ws.done.Add(1)
	go func() {
		defer ws.done.Done()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			w, err := ws.start(ctx, ws.e.cfg.ReadRoots)
			cancel()
			ws.mu.Lock()
			if err != nil || ws.closed {
				ws.refilling = false
				ws.mu.Unlock()
				if err != nil {
					ws.e.cfg.Logger.Warn("query engine: start a spare worker", "error", err)
				} else {
					w.end()
				}
				return
			}
			select {
			case ws.spares <- w:
			default:
				w.end()
			}
			full := len(ws.spares) >= cap(ws.spares)
			if full {
				ws.refilling = false
			}
			ws.mu.Unlock()
			if full {
				return
			}
		}
	}()
}

// close ends the spares and the idle workers, and any spare that is starting.
func (ws *workers) close() {
	ws.mu.Lock()
	ws.closed = true
	idle := ws.idle
	ws.idle = map[string]*worker{}
	ws.mu.Unlock()
	for _, w := range idle {
		w.idle.Stop()
		w.end()
	}
	ws.done.Wait()
	for {
		select {
		case w := <-ws.spares:
			w.end()
		default:
			return
		}
	}
}

// start starts a worker that may read beneath read, in a new directory of the spill directory,
// and waits until it is ready.
func (ws *workers) start(ctx context.Context, read []string) (*worker, error) {
	cfg := ws.e.cfg
	dir, err := os.MkdirTemp(cfg.SpillDir, "w-")
	if err != nil {
		return nil, fmt.Errorf("query worker: its directory: %w", err)
	}
	w := &worker{dir: dir, stderr: &tail{max: 16 << 10}}
	fail := func(err error) (*worker, error) {
		if w.proc != nil {
			w.end()
		} else {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return fail(fmt.Errorf("query worker: its directory: %w", err))
	}
	// This very program, whatever has become of its file since it started.
	exe := "/proc/self/exe"
	if runtime.GOOS != "linux" {
		if exe, err = os.Executable(); err != nil {
			return fail(fmt.Errorf("query worker: %w", err))
		}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("query worker: %w", err))
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return fail(fmt.Errorf("query worker: %w", err))
	}
	w.stdin, w.stdout = inW, outR
	cmd := exec.Command(exe)
	cmd.Args = []string{"baton-query-worker"}
	// Nothing of the server's environment; HOME is the worker's own directory, where DuckDB
	// would look for its files.
	cmd.Env = []string{workerEnv + "=" + workerVersion, "GORACE=atexit_sleep_ms=0", "HOME=" + dir}
	if tz, ok := os.LookupEnv("TZ"); ok {
		cmd.Env = append(cmd.Env, "TZ="+tz)
	}
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, w.stderr
	// No PID namespace: the engine caps the worker's memory once it has started, counting from
	// what it mapped (Process.SetLimits and Usage), which needs the worker's own pid, not an
	// init's. The worker starts nothing, and its one process is killed with its group.
	w.proc, err = sandbox.Start(cmd, sandbox.Policy{Read: slices.Concat(read, engineReads), ReadWrite: []string{dir},
		Limits:         sandbox.Limits{CPU: ws.e.cpuBudget(), FileSize: uint64(cfg.SpillLimit), Files: 4096},
		NoPIDNamespace: true})
	inR.Close()
	outW.Close()
	if err != nil {
		w.stdin.Close()
		w.stdout.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("query worker: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		kind, _, err := readFrame(w.stdout, nil)
		if err == nil && kind != frameReady {
			err = fmt.Errorf("a frame of kind %q", kind)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		w.proc.Kill()
		<-ready
		err = ctx.Err()
	}
	if err != nil {
		w.end()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("query worker did not start: %w (%s)", err, lastLines(w.stderr.String(), 5))
	}
	return w, nil
}

// engineReads are the files DuckDB reads as it opens a database, whatever it is given: its
// cgroup and the cgroup's limits, to size itself (it fails to open without them).
var engineReads = func() []string {
	out := []string{"/proc/self/cgroup"}
	if _, err := os.Stat("/sys/fs/cgroup"); err == nil {
		out = append(out, "/sys/fs/cgroup")
	}
	return out
}()

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
