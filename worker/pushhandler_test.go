package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/worker"
)

// pushed is a server whose push tasks named resize (and the lambda jobs of operator page) are
// delivered to a PushHandler in this process, which reports on the server's public listener.
type pushed struct {
	*server
	ph     *worker.PushHandler
	public *httptest.Server // the server's producer listener: the envelopes' callbackBaseUrl

	mu         sync.Mutex
	deliveries []*http.Request // as the target received them, bodies readable again
}

func newPushed(t *testing.T, h worker.Handler, opts []worker.PushOption, configure ...func(*batonserver.Config)) *pushed {
	t.Helper()
	p := &pushed{}
	var producer atomic.Pointer[http.Handler]
	p.public = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*producer.Load()).ServeHTTP(w, r) }))
	t.Cleanup(p.public.Close)
	opts = append([]worker.PushOption{worker.WithPushLogger(testLogger(t)), worker.WithPushSecret(pushSecret)}, opts...)
	p.ph = worker.NewPushHandler(h, opts...)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		keep := r.Clone(context.Background())
		keep.Body = io.NopCloser(bytes.NewReader(body))
		p.mu.Lock()
		p.deliveries = append(p.deliveries, keep)
		p.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		p.ph.ServeHTTP(w, r)
	}))
	t.Cleanup(target.Close)
	p.server = newServer(t, append([]func(*batonserver.Config){func(c *batonserver.Config) {
		c.Push.Targets = map[string]string{"resize": target.URL + "/run", "page": target.URL + "/run"}
		c.Push.Secrets = map[string]string{"resize": pushSecret, "page": pushSecret}
		c.Push.CallbackBaseURL = p.public.URL
	}}, configure...)...)
	handler := p.api.ProducerHandler()
	producer.Store(&handler)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.ph.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return p
}

// delivery is the n-th delivery the target received (from 0), sent again as it was.
func (p *pushed) replay(n int) *httptest.ResponseRecorder {
	p.mu.Lock()
	r := p.deliveries[n]
	p.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	again := httptest.NewRequest(http.MethodPost, "/run", bytes.NewReader(body))
	again.Header = r.Header.Clone()
	rec := httptest.NewRecorder()
	p.ph.ServeHTTP(rec, again)
	return rec
}

func TestPushHandlerCompletesWithTheHandlersOutput(t *testing.T) {
	t.Parallel()
	var p *pushed
	p = newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		var in struct{ N int }
		if err := json.Unmarshal(tk.Input, &in); err != nil {
			return nil, err
		}
		return map[string]any{"doubled": 2 * in.N, "task": tk.Name, "key": tk.Key, "reports_to_public": tk.PublicURL == p.public.URL}, nil
	}, nil)
	_, ids := p.submit(spec{key: "thumb", name: "resize", runtime: "push", input: `{"n":7}`})
	tk := p.waitTask(ids["thumb"], "completed", status(lifecycle.Completed))
	if want := `{"doubled":14,"key":"thumb","reports_to_public":true,"task":"resize"}`; string(tk.Output) != want {
		t.Errorf("output %s, want %s", tk.Output, want)
	}
	if as := p.attempts(ids["thumb"]); len(as) != 1 || as[0].Outcome != store.OutcomeSucceeded {
		t.Errorf("attempts = %s", describe(as))
	}
}

func TestPushHandlerFailureCarriesItsCategory(t *testing.T) {
	t.Parallel()
	p := newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		if tk.Key == "bad-row" {
			return nil, worker.Errorf(worker.DataQuality, "row %d is malformed", 7)
		}
		return nil, errors.New("boom")
	}, nil)
	_, ids := p.submit(spec{key: "bad-row", name: "resize", runtime: "push", maxAttempts: 3},
		spec{key: "plain", name: "resize", runtime: "push", maxAttempts: 3})
	tk := p.waitTask(ids["bad-row"], "failed", status(lifecycle.Failed))
	if tk.Error.Category != lifecycle.DataQuality || tk.Error.Message != "row 7 is malformed" {
		t.Errorf("DATA_QUALITY failure (not retried): %+v", tk.Error)
	}
	tk = p.waitTask(ids["plain"], "its failure is recorded", func(tk *store.Task) bool { return tk.Error != nil })
	if tk.Status != lifecycle.Pending || tk.Error.Category != lifecycle.UserCode || tk.Error.Message != "boom" {
		t.Errorf("a plain error is a retried USER_CODE failure: %s %+v", tk.Status, tk.Error)
	}
}

// Heartbeats every heartbeatIntervalMs keep an attempt alive well past its heartbeat timeout.
func TestPushHandlerHeartbeatsKeepALongTaskAlive(t *testing.T) {
	t.Parallel()
	p := newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		select {
		case <-time.After(5 * time.Second):
			return "still mine", nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}, nil)
	_, ids := p.submit(spec{key: "long", name: "resize", runtime: "push", leaseSeconds: 2, maxAttempts: 2})
	tk := p.waitTask(ids["long"], "completed", status(lifecycle.Completed))
	if tk.Attempt != 1 || string(tk.Output) != `"still mine"` {
		t.Errorf("attempt %d, output %s: the lease of 2 s ran out", tk.Attempt, tk.Output)
	}
}

func TestPushHandlerCancellationReachesTheHandler(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	causes := make(chan error, 1)
	p := newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "finished anyway", nil // still reported as cancelled
	}, nil)
	jobID, ids := p.submit(spec{key: "long", name: "resize", runtime: "push", leaseSeconds: 2})
	<-started
	if _, err := p.d.CancelJob(context.Background(), "acme", jobID, ""); err != nil {
		t.Fatal(err)
	}
	tk := p.waitTask(ids["long"], "canceled", status(lifecycle.Canceled))
	if cause := <-causes; !errors.Is(cause, worker.ErrCancelRequested) {
		t.Errorf("cause = %v, want ErrCancelRequested", cause)
	}
	if as := p.attempts(tk.ID); len(as) != 1 || as[0].Outcome != store.OutcomeCanceled {
		t.Errorf("attempts = %s", describe(as))
	}
}

// A delivery that is not Baton's, or no envelope, is refused before anything runs.
func TestPushHandlerRefusesWhatIsNoSignedEnvelope(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	ph := worker.NewPushHandler(func(context.Context, *worker.Task) (any, error) { ran.Add(1); return nil, nil },
		worker.WithPushSecret(pushSecret), worker.WithPushLogger(quiet()))
	envelope := `{"taskId":"t-1","attempt":1,"taskToken":"tok","leaseToken":"lease","callbackBaseUrl":"http://127.0.0.1:1"}` + "\n"
	get := httptest.NewRequest(http.MethodGet, "/run", nil)
	for _, c := range []struct {
		name string
		req  *http.Request
		want int
	}{
		{"signed with another secret", signedPush("whsec-forged", time.Now(), envelope), http.StatusUnauthorized},
		{"stale", signedPush(pushSecret, time.Now().Add(-time.Hour), envelope), http.StatusUnauthorized},
		{"unsigned", httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(envelope)), http.StatusUnauthorized},
		{"not JSON", signedPush(pushSecret, time.Now(), "hello"), http.StatusBadRequest},
		{"no task token", signedPush(pushSecret, time.Now(), `{"taskId":"t-1","attempt":1,"leaseToken":"l"}`), http.StatusBadRequest},
		{"not a POST", get, http.StatusMethodNotAllowed},
	} {
		rec := httptest.NewRecorder()
		ph.ServeHTTP(rec, c.req)
		if rec.Code != c.want || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.want)
		}
	}
	if err := ph.Shutdown(context.Background()); err != nil || ran.Load() != 0 {
		t.Errorf("Shutdown %v; the handler ran %d times", err, ran.Load())
	}
}

// A delivery of an attempt that runs, or ran, is answered 202 and not run again.
func TestPushHandlerRunsARepeatedDeliveryOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	p := newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		calls.Add(1)
		close(started)
		<-release
		return "once", nil
	}, nil)
	_, ids := p.submit(spec{key: "t", name: "resize", runtime: "push"})
	<-started
	if rec := p.replay(0); rec.Code != http.StatusAccepted || !strings.Contains(rec.Body.String(), `"duplicate":true`) {
		t.Errorf("repeat while running: %d %s", rec.Code, rec.Body)
	}
	close(release)
	p.waitTask(ids["t"], "completed", status(lifecycle.Completed))
	if rec := p.replay(0); rec.Code != http.StatusAccepted || !strings.Contains(rec.Body.String(), `"duplicate":true`) {
		t.Errorf("repeat once finished: %d %s", rec.Code, rec.Body)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times", n)
	}
}

// With every slot busy a delivery is answered 503: the server fails that attempt as
// INFRASTRUCTURE, for its retry rule.
func TestPushHandlerRefusesADeliveryWhenEverySlotIsBusy(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 2), make(chan struct{})
	p := newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	}, []worker.PushOption{worker.WithPushConcurrency(1)})
	_, first := p.submit(spec{key: "a", name: "resize", runtime: "push"})
	<-started
	_, second := p.submit(spec{key: "b", name: "resize", runtime: "push", maxAttempts: 3})
	tk := p.waitTask(second["b"], "its failure is recorded", func(tk *store.Task) bool { return tk.Error != nil })
	if tk.Status != lifecycle.Pending || tk.Error.Category != lifecycle.Infrastructure || !strings.Contains(tk.Error.Message, "503") {
		t.Errorf("refused delivery: %s %+v", tk.Status, tk.Error)
	}
	close(release)
	p.waitTask(first["a"], "completed", status(lifecycle.Completed))
}

// Shutdown takes no more deliveries, waits for the running attempts until its context ends, then
// hands them back as retryable INFRASTRUCTURE failures.
func TestPushHandlerShutdownHandsBackRunningTasks(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	causes := make(chan error, 1)
	p := newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, nil)
	_, ids := p.submit(spec{key: "t", name: "resize", runtime: "push", maxAttempts: 3})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.ph.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrShutdown) {
		t.Errorf("cause = %v, want ErrShutdown", cause)
	}
	tk := p.task(ids["t"])
	if tk.Status != lifecycle.Pending || tk.Error == nil || tk.Error.Category != lifecycle.Infrastructure {
		t.Errorf("status %s, error %+v: want pending after an INFRASTRUCTURE hand-back", tk.Status, tk.Error)
	}
	rec := httptest.NewRecorder()
	p.ph.ServeHTTP(rec, signedPush(pushSecret, time.Now(), `{"taskId":"t-2","attempt":1,"taskToken":"tok","leaseToken":"l","callbackBaseUrl":"`+p.public.URL+`"}`))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a delivery after Shutdown: %d %s", rec.Code, rec.Body)
	}
}

// A pushed task's job may declare secrets; the task still gets none: they are delivered on the
// internal listener only.
func TestPushedTaskGetsNoSecrets(t *testing.T) {
	t.Parallel()
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"ok":true}`) }))
	t.Cleanup(public.Close)
	got := make(chan error, 1)
	ph := worker.NewPushHandler(func(ctx context.Context, tk *worker.Task) (any, error) {
		_, err := tk.Secret(ctx, "rpc_key")
		got <- err
		return nil, nil
	}, worker.WithPushLogger(quiet()))
	envelope := `{"taskId":"t-1","attempt":1,"taskToken":"tok","leaseToken":"l","callbackBaseUrl":"` + public.URL +
		`","job":{"dag_name":"p","name":"j","pipeline_version":"v1","secrets":["rpc_key"]},"operator":"op"}`
	rec := httptest.NewRecorder()
	ph.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(envelope)))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("delivery: %d %s", rec.Code, rec.Body)
	}
	var we *worker.Error
	if err := <-got; !errors.Is(err, worker.ErrNoSecretsOnPush) || !errors.As(err, &we) || we.Category != worker.Configuration {
		t.Errorf("Secret: %v, want a CONFIGURATION ErrNoSecretsOnPush", err)
	}
	if err := ph.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}
