package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/worker"
)

func TestSuccessStoresTheOutputAndPassesItToDependents(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(
		spec{key: "parent", name: "parent", input: `{"n":20}`},
		spec{key: "child", name: "child", dependsOn: []string{"parent"}, input: `{"m":1}`},
	)
	var seen atomic.Pointer[worker.Task]
	start(t, s.url(), map[string]worker.Handler{
		"parent": func(ctx context.Context, tk *worker.Task) (any, error) {
			var in struct{ N int }
			if err := json.Unmarshal(tk.Input, &in); err != nil {
				return nil, err
			}
			return map[string]int{"doubled": 2 * in.N}, nil
		},
		"child": func(ctx context.Context, tk *worker.Task) (any, error) {
			seen.Store(tk)
			return json.RawMessage(`{"raw":true}`), nil
		},
	}, worker.WithConcurrency(2))

	parent := s.waitTask(ids["parent"], "completed", status(lifecycle.Completed))
	if got := string(parent.Output); got != `{"doubled":40}` {
		t.Errorf("parent output = %s", got)
	}
	child := s.waitTask(ids["child"], "completed", status(lifecycle.Completed))
	if got := string(child.Output); got != `{"raw":true}` {
		t.Errorf("child output = %s, want the json.RawMessage as it was", got)
	}
	tk := seen.Load()
	if tk.ID != ids["child"] || tk.Key != "child" || tk.Name != "child" || tk.Attempt != 1 || tk.JobID == "" {
		t.Errorf("task = %+v", tk)
	}
	if string(tk.Input) != `{"m":1}` || string(tk.DependencyOutputs["parent"]) != `{"doubled":40}` {
		t.Errorf("input %s, dependency outputs %v", tk.Input, tk.DependencyOutputs)
	}
	if tk.CapabilityToken == "" || !tk.CapabilityTokenExpiresAt.After(time.Now()) {
		t.Errorf("capability token %q expiring %v", tk.CapabilityToken, tk.CapabilityTokenExpiresAt)
	}
	if as := s.attempts(ids["child"]); len(as) != 1 || as[0].Outcome != store.OutcomeSucceeded {
		t.Errorf("attempts = %+v", as)
	}
}

func TestFailureCarriesItsCategoryAndDecidesTheRetry(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	cases := []struct {
		name    string
		err     error
		want    lifecycle.Category
		retried bool
		message string
	}{
		{"user-code", worker.Errorf(worker.UserCode, "bad %s", "thing"), lifecycle.UserCode, true, "bad thing"},
		{"data-quality", worker.Errorf(worker.DataQuality, "row %d is malformed", 7), lifecycle.DataQuality, false, "row 7 is malformed"},
		{"infrastructure", worker.Errorf(worker.Infrastructure, "disk full"), lifecycle.Infrastructure, true, "disk full"},
		{"configuration", worker.Errorf(worker.Configuration, "no API key"), lifecycle.Configuration, false, "no API key"},
		{"timeout", worker.Errorf(worker.Timeout, "upstream too slow"), lifecycle.Timeout, true, "upstream too slow"},
		{"plain-error", errors.New("boom"), lifecycle.UserCode, true, "boom"},
		{"wrapped", fmt.Errorf("load: %w", worker.Errorf(worker.DataQuality, "empty file")), lifecycle.DataQuality, false, "load: empty file"},
		{"permanent", worker.Permanent(errors.New("never works")), lifecycle.UserCode, false, "never works"},
		{"permanent-keeps-category", worker.Permanent(worker.Errorf(worker.Infrastructure, "gone")), lifecycle.Infrastructure, false, "gone"},
		{"explicit-retry", &worker.Error{Category: worker.DataQuality, Message: "try again", Retryable: &yes}, lifecycle.DataQuality, true, "try again"},
		{"explicit-no-retry", &worker.Error{Category: worker.Infrastructure, Message: "stop", Retryable: &no}, lifecycle.Infrastructure, false, "stop"},
	}
	s := newServer(t)
	handlers := map[string]worker.Handler{}
	var specs []spec
	for _, c := range cases {
		handlers[c.name] = func(context.Context, *worker.Task) (any, error) { return nil, c.err }
		specs = append(specs, spec{key: c.name, name: c.name, maxAttempts: 3})
	}
	_, ids := s.submit(specs...)
	start(t, s.url(), handlers, worker.WithConcurrency(4), worker.WithBatchSize(2))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := s.waitTask(ids[c.name], "its failure is recorded", func(tk *store.Task) bool { return tk.Error != nil })
			wantStatus := lifecycle.Failed
			if c.retried {
				wantStatus = lifecycle.Pending
			}
			if tk.Status != wantStatus || tk.Error.Category != c.want || tk.Error.Message != c.message {
				t.Errorf("status %s, error %+v; want %s, %s %q", tk.Status, tk.Error, wantStatus, c.want, c.message)
			}
		})
	}
}

//go:noinline
func panicsInTheHandler() { panic("something broke") }

func TestPanicIsAUserCodeFailureWithItsStack(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "p", name: "p", maxAttempts: 1})
	start(t, s.url(), map[string]worker.Handler{"p": func(context.Context, *worker.Task) (any, error) {
		panicsInTheHandler()
		return nil, nil
	}})
	tk := s.waitTask(ids["p"], "failed", status(lifecycle.Failed))
	e := tk.Error
	if e.Category != lifecycle.UserCode || e.Message != "panic: something broke" {
		t.Errorf("error = %+v", e)
	}
	if !strings.Contains(e.StackTrace, "panicsInTheHandler") {
		t.Errorf("stack does not name the panicking function:\n%s", e.StackTrace)
	}
}

func TestUnknownTaskNameIsANonRetryableConfigurationFailure(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "x", name: "nobody-handles-this", queue: "shared", maxAttempts: 3})
	start(t, s.url(), map[string]worker.Handler{"known": func(context.Context, *worker.Task) (any, error) { return nil, nil }},
		worker.WithQueues("shared"))
	tk := s.waitTask(ids["x"], "failed", status(lifecycle.Failed))
	if tk.Error.Category != lifecycle.Configuration || !strings.Contains(tk.Error.Message, "nobody-handles-this") {
		t.Errorf("error = %+v", tk.Error)
	}
}

func TestHandlerPastItsTimeoutIsTimedOutAndRetried(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "slow", name: "slow", timeout: 1, leaseSeconds: 2, maxAttempts: 2, backoffMs: 50})
	causes := make(chan error, 2)
	start(t, s.url(), map[string]worker.Handler{"slow": func(ctx context.Context, tk *worker.Task) (any, error) {
		if tk.Timeout != time.Second {
			return nil, fmt.Errorf("timeout %s, want 1s", tk.Timeout)
		}
		if tk.Attempt == 2 {
			return "second time lucky", nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}})
	tk := s.waitTask(ids["slow"], "completed", status(lifecycle.Completed))
	if tk.Attempt != 2 || string(tk.Output) != `"second time lucky"` {
		t.Errorf("attempt %d, output %s", tk.Attempt, tk.Output)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrTimeout) {
		t.Errorf("cause = %v, want ErrTimeout", cause)
	}
	as := s.attempts(ids["slow"])
	if len(as) != 2 || as[0].Outcome != store.OutcomeTimedOut || as[0].Error.Reason != lifecycle.ReasonExecutionTimeout ||
		as[0].Error.Category != lifecycle.Timeout || as[1].Outcome != store.OutcomeSucceeded {
		t.Errorf("attempts = %s", describe(as))
	}
}

func TestCancelledJobCancelsTheHandlerAndTheTask(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	jobID, ids := s.submit(spec{key: "long", name: "long", maxAttempts: 3})
	started := make(chan struct{})
	causes := make(chan error, 1)
	start(t, s.url(), map[string]worker.Handler{"long": func(ctx context.Context, tk *worker.Task) (any, error) {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "finished anyway", nil // still reported as cancelled
	}}, worker.WithHeartbeatInterval(50*time.Millisecond))
	<-started
	if _, err := s.d.CancelJob(context.Background(), "acme", jobID, ""); err != nil {
		t.Fatal(err)
	}
	tk := s.waitTask(ids["long"], "canceled", status(lifecycle.Canceled))
	if cause := <-causes; !errors.Is(cause, worker.ErrCancelRequested) {
		t.Errorf("cause = %v, want ErrCancelRequested", cause)
	}
	if as := s.attempts(tk.ID); len(as) != 1 || as[0].Outcome != store.OutcomeCanceled {
		t.Errorf("attempts = %s", describe(as))
	}
	if len(tk.Output) != 0 && string(tk.Output) != "null" {
		t.Errorf("output %s stored for a cancelled task", tk.Output)
	}
}

func TestLostLeaseStopsTheHandlerAndReportsNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "t", name: "t"})
	// The server says the attempt expired (as it does once the reaper timed it out).
	p := newProxy(t, s.url(), func(w http.ResponseWriter, r *http.Request, n int, _ func() *http.Response) bool {
		if r.URL.Path != "/internal/worker/heartbeat" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte(`{"ok":false,"ack":true,"error":"task_expired","message":"abort"}`))
		return true
	})
	causes := make(chan error, 1)
	w := start(t, p.URL, map[string]worker.Handler{"t": func(ctx context.Context, tk *worker.Task) (any, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}}, worker.WithHeartbeatInterval(50*time.Millisecond))
	if cause := <-causes; !errors.Is(cause, worker.ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	if n := p.count("/internal/worker/fail") + p.count("/internal/worker/complete") + p.count("/internal/worker/report-batch") + p.count("/internal/task-complete"); n != 0 {
		t.Errorf("%d reports sent for a lost attempt", n)
	}
	if tk := s.task(ids["t"]); tk.Status != lifecycle.Running {
		t.Errorf("status %s: the server's own view should be untouched", tk.Status)
	}
}

// A server that answers heartbeats slower than the worker's interval still gets them while the
// lease lasts: a heartbeat is waited for up to half the lease, not given up on (and so lost) after
// the interval.
func TestSlowHeartbeatsKeepTheLease(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "t", name: "t", leaseSeconds: 4, maxAttempts: 1})
	// Every heartbeat reaches the server 1.5 s after it was sent, if the worker still waits for it.
	p := newProxy(t, s.url(), func(w http.ResponseWriter, r *http.Request, n int, forward func() *http.Response) bool {
		if r.URL.Path != "/internal/worker/heartbeat" {
			return false
		}
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-r.Context().Done():
			return true
		}
		return false
	})
	start(t, p.URL, map[string]worker.Handler{"t": func(ctx context.Context, tk *worker.Task) (any, error) {
		time.Sleep(6 * time.Second) // past the 4 s lease
		return "done", ctx.Err()
	}}, worker.WithHeartbeatInterval(500*time.Millisecond))
	tk := s.waitTask(ids["t"], "completed", func(tk *store.Task) bool { return tk.Status != lifecycle.Running && tk.Status != lifecycle.Pending })
	if tk.Status != lifecycle.Completed || tk.Attempt != 1 {
		t.Fatalf("task %s on attempt %d (error %+v); want completed on attempt 1, its lease kept by slow heartbeats", tk.Status, tk.Attempt, tk.Error)
	}
}

func TestShutdownWaitsForRunningHandlers(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "t", name: "t"})
	started, release := make(chan struct{}), make(chan struct{})
	w := start(t, s.url(), map[string]worker.Handler{"t": func(ctx context.Context, tk *worker.Task) (any, error) {
		close(started)
		<-release
		return "done", ctx.Err() // the context stays live during a graceful shutdown
	}}, worker.WithShutdownTimeout(20*time.Second))
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- w.stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned %v while a handler was running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if tk := s.task(ids["t"]); tk.Status != lifecycle.Completed || string(tk.Output) != `"done"` {
		t.Errorf("status %s, output %s", tk.Status, tk.Output)
	}
}

func TestShutdownHandsBackUnfinishedTasks(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "t", name: "t", maxAttempts: 3, backoffMs: 50})
	started := make(chan struct{})
	causes := make(chan error, 1)
	w := start(t, s.url(), map[string]worker.Handler{"t": func(ctx context.Context, tk *worker.Task) (any, error) {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}}, worker.WithShutdownTimeout(100*time.Millisecond))
	<-started
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrShutdown) {
		t.Errorf("cause = %v, want ErrShutdown", cause)
	}
	tk := s.task(ids["t"])
	if tk.Status != lifecycle.Pending || tk.Error == nil || tk.Error.Category != lifecycle.Infrastructure {
		t.Fatalf("status %s, error %+v: want pending after an INFRASTRUCTURE hand-back", tk.Status, tk.Error)
	}
	// Another worker picks it up.
	start(t, s.url(), map[string]worker.Handler{"t": func(ctx context.Context, tk *worker.Task) (any, error) { return tk.Attempt, nil }})
	tk = s.waitTask(ids["t"], "completed", status(lifecycle.Completed))
	if string(tk.Output) != "2" {
		t.Errorf("output %s, want attempt 2's", tk.Output)
	}
}

func TestReportsSurviveLostRequestsAndAnswers(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/internal/worker/complete", "/internal/worker/fail"} {
		for _, mode := range []string{"request-lost", "answer-lost", "server-error"} {
			t.Run(strings.TrimPrefix(path, "/internal/worker/")+"/"+mode, func(t *testing.T) {
				t.Parallel()
				s := newServer(t)
				jobID, ids := s.submit(spec{key: "t", name: "t", maxAttempts: 1})
				const drops = 3
				// Reports travel in report-batch requests (each item meaning what path means).
				const wire = "/internal/worker/report-batch"
				p := newProxy(t, s.url(), func(w http.ResponseWriter, r *http.Request, n int, forward func() *http.Response) bool {
					if r.URL.Path != wire || n > drops {
						return false
					}
					switch mode {
					case "request-lost":
						hangUp(w)
					case "answer-lost": // the server applies the report; its answer never arrives
						if res := forward(); res != nil {
							res.Body.Close()
						}
						hangUp(w)
					case "server-error":
						w.WriteHeader(http.StatusServiceUnavailable)
					}
					return true
				})
				start(t, p.URL, map[string]worker.Handler{"t": func(context.Context, *worker.Task) (any, error) {
					if path == "/internal/worker/fail" {
						return nil, worker.Errorf(worker.DataQuality, "bad rows")
					}
					return "ok", nil
				}})
				want, event := lifecycle.Completed, dispatch.EventTaskCompleted
				if path == "/internal/worker/fail" {
					want, event = lifecycle.Failed, dispatch.EventTaskFailed
				}
				s.waitTask(ids["t"], string(want), status(want))
				waitFor(t, "the acknowledged report", func() bool { return p.count(wire) == drops+1 })
				if n := s.events(jobID, event); n != 1 {
					t.Errorf("%d %q events, want 1", n, event)
				}
				if as := s.attempts(ids["t"]); len(as) != 1 {
					t.Errorf("attempts = %s", describe(as))
				}
			})
		}
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		url  string
		opts []worker.Option
	}{
		"no scheme":          {"localhost:8081", nil},
		"negative workers":   {"http://localhost", []worker.Option{worker.WithConcurrency(-1)}},
		"long poll too long": {"http://localhost", []worker.Option{worker.WithPollWait(2 * time.Minute)}},
		"missing cert files": {"https://localhost", []worker.Option{worker.WithClientCert("nope/ca.pem", "nope/c.pem", "nope/k.pem")}},
	} {
		if _, err := worker.New(c.url, c.opts...); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	w, err := worker.New("http://localhost")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("Run without handlers or queues returned nil")
	}
}

func TestErrorHelpers(t *testing.T) {
	t.Parallel()
	base := errors.New("root cause")
	e := worker.Errorf(worker.Infrastructure, "fetch: %w", base)
	if e.Error() != "fetch: root cause" || !errors.Is(e, base) || e.Retryable != nil {
		t.Errorf("Errorf = %+v", e)
	}
	p := worker.Permanent(e)
	if p.Category != worker.Infrastructure || p.Retryable == nil || *p.Retryable || !errors.Is(p, base) {
		t.Errorf("Permanent = %+v", p)
	}
	if worker.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describe(as []*store.Attempt) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "[#%d %s by %s err=%+v] ", a.Attempt, a.Outcome, a.WorkerID, a.Error)
	}
	return b.String()
}

func TestHeartbeatNetworkErrorsDoNotStopTheHandler(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "t", name: "t"})
	const drops = 3
	p := newProxy(t, s.url(), func(w http.ResponseWriter, r *http.Request, n int, _ func() *http.Response) bool {
		if r.URL.Path != "/internal/worker/heartbeat" || n > drops {
			return false
		}
		if n%2 == 0 {
			hangUp(w)
		} else {
			w.WriteHeader(http.StatusBadGateway)
		}
		return true
	})
	beats := func() int { return p.count("/internal/worker/heartbeat") }
	start(t, p.URL, map[string]worker.Handler{"t": func(ctx context.Context, tk *worker.Task) (any, error) {
		for beats() <= drops {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(10 * time.Millisecond):
			}
		}
		return "survived", nil
	}}, worker.WithHeartbeatInterval(20*time.Millisecond))
	if tk := s.waitTask(ids["t"], "completed", status(lifecycle.Completed)); string(tk.Output) != `"survived"` {
		t.Errorf("output %s", tk.Output)
	}
}
