package conformance

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx", to make a schema per run

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/buildtest"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// TestConformance runs the scenario of README.md for every SDK against a real `baton dev` on
// SQLite and a real `baton server` on PostgreSQL (BATON_TEST_POSTGRES_URL), one server of each
// for all SDKs, each SDK on a queue and a pipeline of its own; then each SDK's own test suite
// against the same servers. Subtests: TestConformance/{sqlite,postgres}/{go,python,
// python-asyncio,typescript}/{dag,retry,heartbeats,cancel,pipeline,kill,refused,sigterm} and
// .../{python,typescript}/suite.
//
// The scenario runs on 2 s leases, which a machine busy compiling could break: everything is built
// first (baton, the Go program, the TypeScript SDK), then the servers start, then every SDK runs
// its scenario at once (most of its time is spent waiting on leases and sleeps), in phases that
// keep the steps that cost CPU (starting producers, queries) apart from those that time leases;
// only once every scenario has ended do the suites run.
func TestConformance(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{root: root, tmp: t.TempDir()}
	sdks := h.sdks()

	// The builds, at once: baton the way this test was built (its race detector included), and
	// what the selected SDKs need.
	h.baton = filepath.Join(h.tmp, "baton")
	var builds sync.WaitGroup
	var batonErr error
	builds.Go(func() {
		start := time.Now()
		batonErr = h.build("./cmd/baton", h.baton)
		h.timing("built baton in %s", time.Since(start).Round(time.Millisecond))
	})
	for _, s := range sdks {
		if selected(s.name) {
			builds.Go(func() { s.prepared = s.prepare() })
		} else {
			s.prepared = prepared{skip: "not selected by -run"}
		}
	}
	builds.Wait()
	if batonErr != nil {
		t.Fatal(batonErr)
	}

	stores := []string{"sqlite", "postgres"}
	// Every (store, SDK) pair's scenario ends once (done), after which the suites may run.
	dones := map[string]map[string]func(){}
	for _, store := range stores {
		dones[store] = map[string]func(){}
		for _, s := range sdks {
			if !s.sqliteOnly || store == "sqlite" {
				dones[store][s.name] = h.phases.join()
			}
		}
	}
	var wg sync.WaitGroup
	for _, store := range stores {
		wg.Go(func() {
			t.Run(store, func(t *testing.T) {
				srv := h.startServer(t, store)
				var runs sync.WaitGroup
				for _, s := range sdks {
					done, ok := dones[store][s.name]
					if !ok {
						continue
					}
					runs.Go(func() {
						t.Run(s.name, func(t *testing.T) { h.runSDK(t, srv, s, done) })
						done() // a subtest -run did not select
					})
				}
				runs.Wait()
			})
			for _, done := range dones[store] {
				done() // a store that skipped, or that -run did not select
			}
		})
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, line := range h.timings {
		t.Log(line)
	}
}

// selected reports whether go test's -run pattern may select the SDK's subtests
// (TestConformance/STORE/SDK), so that only their builds are made.
func selected(sdk string) bool {
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	pats := splitPattern(f.Value.String())
	for i, name := range []string{"TestConformance", "", sdk} {
		if i >= len(pats) {
			break
		}
		if name == "" { // the store: either may be selected
			continue
		}
		if ok, err := regexp.MatchString(pats[i], name); err != nil || !ok {
			return false
		}
	}
	return true
}

// splitPattern splits a -run pattern into its elements at the slashes outside brackets and
// parentheses, as go test does.
func splitPattern(p string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case '/':
			if depth == 0 {
				out = append(out, p[start:i])
				start = i + 1
			}
		}
	}
	return append(out, p[start:])
}

// phases keeps the scenarios in step: a scenario that calls next waits until every scenario not
// ended yet has called it too (or ended).
type phases struct {
	mu      sync.Mutex
	cond    *sync.Cond
	running int // scenarios not ended
	arrived int // of them, waiting in next
	gen     int // phases passed
}

// join adds a scenario and returns the function that ends it (once, whoever calls it).
func (p *phases) join() func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cond == nil {
		p.cond = sync.NewCond(&p.mu)
	}
	p.running++
	return sync.OnceFunc(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.running--
		p.release()
		p.cond.Broadcast()
	})
}

// next waits until every running scenario has reached the end of the phase.
func (p *phases) next() {
	p.mu.Lock()
	defer p.mu.Unlock()
	gen := p.gen
	p.arrived++
	p.release()
	for gen == p.gen {
		p.cond.Wait()
	}
}

func (p *phases) release() {
	if p.arrived > 0 && p.arrived >= p.running {
		p.arrived = 0
		p.gen++
		p.cond.Broadcast()
	}
}

// waitEnded waits until every scenario has ended.
func (p *phases) waitEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.running > 0 {
		p.cond.Wait()
	}
}

// harness is what the subtests of TestConformance share.
type harness struct {
	root  string // the repository
	tmp   string
	baton string // the built baton binary

	phases phases // the scenarios' phases; the suites wait for every scenario's end

	mu      sync.Mutex
	timings []string // how long things took, for the log
}

func (h *harness) timing(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timings = append(h.timings, fmt.Sprintf(format, args...))
}

// build builds the main package pkg of the repository into out with the test's build flags.
func (h *harness) build(pkg, out string) error {
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, buildtest.Flags()...), pkg)...)
	cmd.Dir = h.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// inCI reports whether the test runs in CI (CI=true), where a missing tool fails instead of
// skipping.
func inCI() bool { return os.Getenv("CI") == "true" }

// need skips the test (fails it in CI) with msg unless ok.
func need(t *testing.T, ok bool, msg string) {
	t.Helper()
	switch {
	case ok:
	case inCI():
		t.Fatal(msg + " (CI=true: CI must run it)")
	default:
		t.Skip(msg)
	}
}

// sdk is an SDK under test: how to start its conformance program.
type sdk struct {
	name       string // go, python, python-asyncio, typescript
	sqliteOnly bool
	// prepare builds what the SDK needs and says how to start its conformance program.
	prepare  func() prepared
	prepared prepared
	// suite, when set, runs the SDK's own test suite against the server (the subtest "suite").
	suite func(t *testing.T, srv *server)
}

// prepared is how to start an SDK's conformance program, or why it cannot run here.
type prepared struct {
	argv, env []string // the program's command line (before its mode) and extra environment
	skip      string   // a tool is missing: the SDK's subtests skip (fail in CI) saying so
	err       error    // the SDK is broken: its subtests fail
}

// check skips or fails t when the SDK cannot run.
func (p prepared) check(t *testing.T) {
	t.Helper()
	if p.err != nil {
		t.Fatal(p.err)
	}
	need(t, p.skip == "", p.skip)
}

// queue is the SDK's queue, and pipeline its pipeline's name.
func (s *sdk) queue() string    { return "conf-" + s.name }
func (s *sdk) pipeline() string { return "conf_" + strings.ReplaceAll(s.name, "-", "_") }

func (h *harness) sdks() []*sdk {
	return []*sdk{
		{name: "go", prepare: h.goProgram},
		{name: "python", prepare: h.pythonProgram(false), suite: h.pythonSuite},
		{name: "python-asyncio", sqliteOnly: true, prepare: h.pythonProgram(true)},
		{name: "typescript", prepare: h.typescriptProgram, suite: h.typescriptSuite},
	}
}

// goProgram builds sdk/conformance/goconf as the test was built.
func (h *harness) goProgram() prepared {
	bin := filepath.Join(h.tmp, "goconf")
	start := time.Now()
	if err := h.build("./sdk/conformance/goconf", bin); err != nil {
		return prepared{err: err}
	}
	h.timing("built goconf in %s", time.Since(start).Round(time.Millisecond))
	return prepared{argv: []string{bin}}
}

// python3 finds the Python interpreter, 3.9 or newer.
func python3() (string, prepared) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", prepared{skip: "python3 is not installed; install Python 3.9 or newer to run the Python SDK's conformance"}
	}
	if out, err := exec.Command(py, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").CombinedOutput(); err != nil {
		return "", prepared{err: fmt.Errorf("the Python SDK needs Python 3.9 or newer (%s): %v %s", py, err, out)}
	}
	return py, prepared{}
}

func (h *harness) pythonEnv() []string {
	return []string{"PYTHONPATH=" + filepath.Join(h.root, "sdk/python"), "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"}
}

func (h *harness) pythonProgram(async bool) func() prepared {
	return func() prepared {
		py, p := python3()
		if py == "" {
			return p
		}
		prog, err := h.file("sdk/python/conformance/conformance.py")
		if err != nil {
			return prepared{err: err}
		}
		env := h.pythonEnv()
		if async {
			env = append(env, "BATON_CONFORMANCE_ASYNC=1")
		}
		return prepared{argv: []string{py, prog}, env: env}
	}
}

// typescriptProgram checks for node, npm and the SDK's node_modules, and builds the SDK (npm run
// build), which its conformance program and tests import from dist/.
func (h *harness) typescriptProgram() prepared {
	node, errNode := exec.LookPath("node")
	_, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		return prepared{skip: "node and npm are not installed; install Node.js 20 or newer to run the TypeScript SDK's conformance"}
	}
	if _, err := os.Stat(filepath.Join(h.root, "sdk/typescript/node_modules")); err != nil {
		return prepared{skip: "sdk/typescript/node_modules is missing: run `npm ci --prefix sdk/typescript` to run the TypeScript SDK's conformance"}
	}
	prog, err := h.file("sdk/typescript/conformance/conformance.mjs")
	if err != nil {
		return prepared{err: err}
	}
	cmd := exec.Command("npm", "--prefix", filepath.Join(h.root, "sdk/typescript"), "run", "build")
	cmd.Dir = h.root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return prepared{err: fmt.Errorf("npm --prefix sdk/typescript run build: %v\n%s", err, out)}
	}
	h.timing("built the TypeScript SDK in %s", time.Since(start).Round(time.Millisecond))
	return prepared{argv: []string{node, prog}}
}

// file is the absolute path of a file of the repository, which must exist.
func (h *harness) file(rel string) (string, error) {
	p := filepath.Join(h.root, rel)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: %v", rel, err)
	}
	return p, nil
}

// pythonSuite runs the Python SDK's unittest suite against srv.
func (h *harness) pythonSuite(t *testing.T, srv *server) {
	if _, err := h.file("sdk/python/tests"); err != nil {
		t.Fatal(err)
	}
	py, _ := python3()
	out := h.runSuite(t, srv, "python", h.pythonEnv(), py, "-m", "unittest", "discover", "-s", "sdk/python/tests", "-t", "sdk/python")
	if !regexp.MustCompile(`(?m)^Ran [1-9][0-9]* tests? in `).MatchString(out) {
		t.Fatalf("the Python suite ran no test:\n%s", out)
	}
	checkSkips(t, out, regexp.MustCompile(`skipped=([0-9]+)`))
}

// typescriptSuite runs the TypeScript SDK's node --test suite against srv.
func (h *harness) typescriptSuite(t *testing.T, srv *server) {
	out := h.runSuite(t, srv, "typescript", nil, "npm", "--prefix", filepath.Join(h.root, "sdk/typescript"), "test")
	if !regexp.MustCompile(`(?m)^(# |ℹ )pass [1-9]`).MatchString(out) {
		t.Fatalf("the TypeScript suite passed no test:\n%s", out)
	}
	checkSkips(t, out, regexp.MustCompile(`(?m)^(?:# |ℹ )skipped ([0-9]+)`))
	// A skipped describe counts as no skipped test: its TAP line says # SKIP.
	if skips := regexp.MustCompile(`(?m)^\s*ok [0-9]+ - .*# SKIP.*$`).FindAllString(out, -1); len(skips) > 0 {
		if inCI() {
			t.Fatalf("the suite skipped (CI=true: nothing may skip):\n%s\n\n%s", strings.Join(skips, "\n"), out)
		}
		t.Logf("the suite skipped:\n%s", strings.Join(skips, "\n"))
	}
}

// checkSkips fails t, in CI, when the suite's output reports skipped tests: every server and tool
// a suite needs is there.
func checkSkips(t *testing.T, out string, re *regexp.Regexp) {
	t.Helper()
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		if n, _ := strconv.Atoi(m[len(m)-1]); n > 0 {
			if inCI() {
				t.Fatalf("the suite skipped %d tests (CI=true: none may skip):\n%s", n, out)
			}
			t.Logf("the suite skipped %d tests", n)
		}
	}
}

// runSuite runs an SDK's test suite in the repository with the server's environment, once every
// scenario has ended, within 150 s; it fails t when the suite fails and returns its output.
func (h *harness) runSuite(t *testing.T, srv *server, sdk string, env []string, name string, args ...string) string {
	t.Helper()
	h.phases.waitEnded()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = h.root
	cmd.Env = append(append(os.Environ(), srv.env()...), env...)
	// npm runs node in a child process: the whole group is stopped at the timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	h.timing("%s: %s's suite took %s", srv.store, sdk, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runSDK runs the scenario, then the SDK's suite, for one SDK against srv; done says the scenario
// has ended.
func (h *harness) runSDK(t *testing.T, srv *server, s *sdk, done func()) {
	defer done()
	s.prepared.check(t)
	dir := t.TempDir()
	r := &run{t: t, h: h, srv: srv, sdk: s, argv: s.prepared.argv, env: s.prepared.env, dir: dir, markers: filepath.Join(dir, "markers")}
	if err := os.Mkdir(r.markers, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r.scenario(t)
	h.timing("%s: %s's scenario took %s", srv.store, s.name, time.Since(start).Round(time.Millisecond))
	done()
	if s.suite != nil {
		t.Run("suite", func(t *testing.T) { s.suite(t, srv) })
	}
}

const devAPIKey = "conformance-key-0123456789"

// server is a running Baton server.
type server struct {
	store            string // sqlite or postgres
	public, internal string // http://host:port
	apiKey, blobURL  string
	c                *client.Client
	proc             *buildtest.Proc
}

// env is the environment a program of the scenario talks to the server with.
func (s *server) env() []string {
	return []string{"BATON_URL=" + s.public, "BATON_INTERNAL_URL=" + s.internal, "BATON_API_KEY=" + s.apiKey, "BATON_BLOB_URL=" + s.blobURL}
}

// startServer starts `baton dev` (sqlite) or `baton server` on a fresh PostgreSQL schema
// (postgres), on free ports, with a file:// object storage and a sink in the process, and waits
// until it is ready; it is stopped when t ends.
func (h *harness) startServer(t *testing.T, store string) *server {
	t.Helper()
	start := time.Now()
	public, internal := buildtest.FreeAddr(t), buildtest.FreeAddr(t)
	blobs := filepath.Join(t.TempDir(), "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &server{store: store, public: "http://" + public, internal: "http://" + internal, blobURL: "file://" + blobs}
	common := []string{"--listen", public, "--internal-listen", internal, "--metrics-listen=", "--blob-url", s.blobURL, "--shutdown-timeout", "2s"}
	var cmd *exec.Cmd
	var env []string
	keyDone := make(chan error, 1)
	switch store {
	case "sqlite":
		s.apiKey = devAPIKey
		keyDone <- nil
		cmd = exec.Command(h.baton, append([]string{"dev", "--data-dir", t.TempDir()}, common...)...)
		env = []string{"BATON_API_KEY=" + devAPIKey}
	case "postgres":
		dbURL := storetest.NewPostgresSchema(t)
		if out, err := exec.Command(h.baton, "migrate", "--database-url", dbURL).CombinedOutput(); err != nil {
			t.Fatalf("baton migrate: %v\n%s", err, out)
		}
		// The key is made while the server starts.
		go func() {
			var stderr bytes.Buffer
			c := exec.Command(h.baton, "apikey", "create", "--name", "conformance", "--tenant", "conformance", "--database-url", dbURL)
			c.Stderr = &stderr
			out, err := c.Output()
			if err != nil {
				keyDone <- fmt.Errorf("baton apikey create: %v\n%s", err, stderr.String())
				return
			}
			s.apiKey = strings.TrimSpace(string(out))
			keyDone <- nil
		}()
		cmd = exec.Command(h.baton, append([]string{"server", "--database-url", dbURL, "--internal-insecure", "--sink"}, common...)...)
	default:
		t.Fatalf("no store %q", store)
	}
	s.proc = startProc(t, t, "baton "+store, cmd, env)
	for _, base := range []string{s.public, s.internal} {
		buildtest.WaitReady(t, base+"/readyz", 60*time.Second, s.proc)
	}
	if err := <-keyDone; err != nil {
		t.Fatal(err)
	}
	s.c = client.New(s.public, s.apiKey)
	h.timing("%s: the server was ready in %s", store, time.Since(start).Round(time.Millisecond))
	return s
}

// waitFor polls cond every 50 ms until it holds, fails, or timeout passes (which fails t).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startProc starts cmd with env added to the test's environment; when owner ends it is stopped
// (SIGCONT, as it may be stopped, and SIGTERM, then SIGKILL after 10 s) and, if owner failed, its
// output logged. t fails if it cannot start.
func startProc(t, owner *testing.T, name string, cmd *exec.Cmd, env []string) *buildtest.Proc {
	t.Helper()
	return buildtest.StartWith(t, cmd, env, buildtest.Options{Name: name, Owner: owner,
		Signals: []os.Signal{syscall.SIGCONT, syscall.SIGTERM}, Grace: 10 * time.Second})
}
