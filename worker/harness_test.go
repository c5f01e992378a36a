package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/worker"
)

// server is a real Baton server over SQLite: the dispatcher, its reaper, and the internal
// listener the worker speaks to.
type server struct {
	t        *testing.T
	st       store.Store
	d        *dispatch.Dispatcher
	dp       *dataplane.Plane
	api      *api.Server
	internal *httptest.Server
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testLogger logs to the test's output when BATON_TEST_LOG is set.
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("BATON_TEST_LOG") == "" {
		return quiet()
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// newServerUnstarted makes the server, through the constructor `baton server` uses, without
// starting its internal listener.
func newServerUnstarted(t *testing.T, configure ...func(*batonserver.Config)) *server {
	t.Helper()
	st := storetest.OpenSQLite(t)
	cfg := batonserver.Config{Store: st, Logger: quiet()}
	for _, c := range configure {
		c(&cfg)
	}
	b, err := batonserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := &server{t: t, st: st, d: b.Dispatcher, dp: b.DataPlane, api: b.API, internal: httptest.NewUnstartedServer(b.InternalHandler())}
	t.Cleanup(func() { b.Drain(); srv.internal.Close(); b.Stop() })
	return srv
}

func newServer(t *testing.T, configure ...func(*batonserver.Config)) *server {
	t.Helper()
	s := newServerUnstarted(t, configure...)
	s.internal.Start()
	return s
}

func (s *server) url() string { return s.internal.URL }

// spec is a task of a test job; the zero values of the timing knobs are the server's defaults.
type spec struct {
	key, name, queue string
	dependsOn        []string
	input            string
	maxAttempts      int
	backoffMs        int64 // base and cap of the retry backoff; 0: one hour (no retry in a test)
	timeout          int
	leaseSeconds     int
	cancelGrace      int
	runtime          string // "push": delivered to a push target
}

// submit creates a job and returns its id and its tasks' ids by key.
func (s *server) submit(specs ...spec) (string, map[string]string) {
	s.t.Helper()
	var ts []lifecycle.TaskSpec
	for _, sp := range specs {
		ts_ := lifecycle.TaskSpec{Key: sp.key, Name: sp.name, Queue: sp.queue, DependsOn: sp.dependsOn, Runtime: sp.runtime}
		if sp.input != "" {
			ts_.Input = json.RawMessage(sp.input)
		}
		if sp.maxAttempts > 0 {
			ts_.MaxAttempts = &sp.maxAttempts
		}
		backoff := sp.backoffMs
		if backoff == 0 {
			backoff = time.Hour.Milliseconds()
		}
		ts_.BackoffBaseMs, ts_.BackoffMaxMs = &backoff, &backoff
		if sp.timeout > 0 {
			ts_.TimeoutSeconds = &sp.timeout
		}
		if sp.leaseSeconds > 0 {
			ts_.HeartbeatTimeoutSeconds = &sp.leaseSeconds
		}
		if sp.cancelGrace > 0 {
			ts_.CancelGraceSeconds = &sp.cancelGrace
		}
		ts = append(ts, ts_)
	}
	ctx := context.Background()
	res, err := s.d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Tasks: ts})
	if err != nil {
		s.t.Fatal(err)
	}
	_, tasks, err := s.d.GetJob(ctx, "", res.Job.ID)
	if err != nil {
		s.t.Fatal(err)
	}
	ids := map[string]string{}
	for _, tk := range tasks {
		ids[tk.Key] = tk.ID
	}
	return res.Job.ID, ids
}

func (s *server) task(id string) *store.Task {
	s.t.Helper()
	t, err := s.st.TaskGet(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return t
}

func (s *server) attempts(id string) []*store.Attempt {
	s.t.Helper()
	as, err := s.st.AttemptList(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return as
}

// events counts the job's events of type typ.
func (s *server) events(jobID, typ string) int {
	s.t.Helper()
	evs, err := s.d.JobEvents(context.Background(), "", jobID, 0, 1000)
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// waitTask polls the task until cond holds, failing the test after a while.
func (s *server) waitTask(id string, what string, cond func(*store.Task) bool) *store.Task {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		t := s.task(id)
		if cond(t) {
			return t
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("task %s: timed out waiting until %s; status %s, attempt %d, error %+v", id, what, t.Status, t.Attempt, t.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func status(st lifecycle.TaskStatus) func(*store.Task) bool {
	return func(t *store.Task) bool { return t.Status == st }
}

// running is a worker started by start.
type running struct {
	stop func() error // ends Run's context and returns what Run returned
}

// start runs a worker of url with handlers until the test ends (or stop is called).
func start(t *testing.T, url string, handlers map[string]worker.Handler, opts ...worker.Option) *running {
	t.Helper()
	opts = append([]worker.Option{worker.WithLogger(testLogger(t)), worker.WithPollWait(500 * time.Millisecond)}, opts...)
	w, err := worker.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		w.Handle(name, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err2 error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err2 = <-done:
			case <-time.After(30 * time.Second):
				err2 = errors.New("Run did not return")
			}
		})
		return err2
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
	return &running{stop: stop}
}

// proxy sits between a worker and the server; intercept may answer a request itself (returning
// true) instead of forwarding it.
type proxy struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int // requests seen by path
}

func newProxy(t *testing.T, target string, intercept func(w http.ResponseWriter, r *http.Request, n int, forward func() *http.Response) bool) *proxy {
	t.Helper()
	p := &proxy{calls: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.calls[r.URL.Path]++
		n := p.calls[r.URL.Path]
		p.mu.Unlock()
		forward := func() *http.Response {
			req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, r.Body)
			if err != nil {
				panic(err)
			}
			req.Header = r.Header.Clone()
			res, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				return nil
			}
			return res
		}
		if intercept != nil && intercept(w, r, n, forward) {
			return
		}
		res := forward()
		if res == nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *proxy) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[path]
}

// hangUp closes the client's connection without an answer: a network error for the worker.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}
