package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/faultnet"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/worker"
)

// heldHandler is a handler that returns {"done": true} once released, after saying it started.
func heldHandler() (h worker.Handler, started chan struct{}, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	h = func(ctx context.Context, t *worker.Task) (any, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return map[string]any{"done": true}, nil
	}
	return h, started, release
}

// wantOneCompletion checks that the task completed once, with the handler's output, in its
// first attempt.
func (s *server) wantOneCompletion(jobID, taskID string) {
	s.t.Helper()
	tk := s.waitTask(taskID, "completed", status(lifecycle.Completed))
	if string(tk.Output) != `{"done":true}` {
		s.t.Fatalf("output %s", tk.Output)
	}
	if as := s.attempts(taskID); len(as) != 1 || as[0].Outcome != store.OutcomeSucceeded {
		s.t.Fatalf("%d attempts, want one that succeeded: %+v", len(as), as)
	}
	if n := s.events(jobID, dispatch.EventTaskCompleted); n != 1 {
		s.t.Fatalf("%d Task Completed events, want 1", n)
	}
}

// stillRunning checks, for a little while, that the task has not completed: the report is held.
func (s *server) stillRunning(taskID string) {
	s.t.Helper()
	until := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(until) {
		if tk := s.task(taskID); tk.Status != lifecycle.Running {
			s.t.Fatalf("task %s while its report is cut off, want running", tk.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCompletionDuringANetworkPartitionIsDeliveredOnce cuts the network between a worker and
// the server while its handler finishes: the completion, held by the partition, is delivered
// once the network heals (the partition's connections are reset then), exactly once.
func TestCompletionDuringANetworkPartitionIsDeliveredOnce(t *testing.T) {
	s := newServer(t)
	p, err := faultnet.Listen("127.0.0.1:0", s.internal.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() }) // after the worker stopped: it may still be reading an answer
	h, started, release := heldHandler()
	jobID, ids := s.submit(spec{key: "only", name: "cut"})
	start(t, "http://"+p.Addr(), map[string]worker.Handler{"cut": h})
	<-started
	p.Partition(true)
	close(release)
	s.stillRunning(ids["only"])
	p.Partition(false)
	healed := time.Now()
	s.wantOneCompletion(jobID, ids["only"])
	t.Logf("completion delivered %s after the network healed", time.Since(healed).Round(time.Millisecond))
}

// TestCompletionDuringADatabasePartitionIsDeliveredOnce cuts the server off from PostgreSQL
// while a worker's handler finishes: the server answers the completion 503 with Retry-After, the
// worker keeps sending it, and once the database is back it is applied, exactly once.
func TestCompletionDuringADatabasePartitionIsDeliveredOnce(t *testing.T) {
	pp := storetest.OpenProxiedPostgres(t, postgres.Options{MaxConns: 8, Watch: true, Logger: quiet()})
	d, err := dispatch.New(pp.Store, dispatch.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	a := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(pp.Store, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(pp.Store, nil), Dispatcher: d}), Logger: quiet()})
	s := &server{t: t, st: pp.Store, d: d, api: a, internal: httptest.NewServer(a.InternalHandler())}
	t.Cleanup(func() { a.Drain(); s.internal.Close() })

	h, started, release := heldHandler()
	jobID, ids := s.submit(spec{key: "only", name: "db-cut"})
	counter := newProxy(t, s.url(), nil) // counts the worker's requests
	start(t, counter.URL, map[string]worker.Handler{"db-cut": h})
	<-started
	pp.Proxy.Partition(true)
	t.Cleanup(func() { pp.Proxy.Partition(false) }) // before the worker is stopped
	// Wait until the server refuses work, so that the report meets a 503, not a slow answer.
	for deadline := time.Now().Add(10 * time.Second); pp.Store.Unreachable() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store never found its database unreachable")
		}
	}
	close(release)
	// The report is refused (503) for as long as the database is away; look without the store.
	until := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(until) {
		res, err := http.Get(s.url() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("readyz %d while the database is cut off", res.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Retry-After: 2 spaces the worker's tries: without it they would come after 0.1, 0.3, 0.7,
	// 1.5 s (jittered backoff)...
	if n := counter.count("/internal/worker/report-batch"); n < 1 || n > 2 {
		t.Fatalf("%d reports sent in 2.5 s of 503s with Retry-After: 2, want 1 or 2", n)
	}
	pp.Proxy.Partition(false)
	healed := time.Now()
	for deadline := time.Now().Add(10 * time.Second); pp.Store.Unreachable() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store did not find its database again")
		}
	}
	s.wantOneCompletion(jobID, ids["only"])
	t.Logf("completion applied %s after the database came back", time.Since(healed).Round(time.Millisecond))
}
