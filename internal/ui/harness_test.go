package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/metrics"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/ui"
	"github.com/baton-dev/baton/worker"
)

// server is a real Baton over SQLite: the dispatcher, the producer listener with the dashboard,
// and the internal listener workers claim from.
type server struct {
	st       store.Store
	d        *dispatch.Dispatcher
	dp       *dataplane.Plane
	public   *httptest.Server
	internal *httptest.Server
	keys     map[string]string // tenant → API key
	metrics  *metrics.Metrics
}

func newServer(t testing.TB) *server {
	t.Helper()
	st := storetest.OpenSQLite(t)
	m := metrics.New()
	bs, err := blob.Open(context.Background(), blobtest.File(t), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := batonserver.New(batonserver.Config{Store: st, Logger: slog.New(slog.DiscardHandler), Metrics: m, Blob: bs,
		UI: ui.Config{Poll: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := &server{st: st, d: b.Dispatcher, dp: b.DataPlane, public: httptest.NewServer(b.ProducerHandler()), internal: httptest.NewServer(b.InternalHandler()),
		keys: map[string]string{}, metrics: m}
	t.Cleanup(func() {
		b.Drain()
		s.public.Close()
		s.internal.Close()
		b.Stop()
	})
	for _, tenant := range []string{"acme", "globex"} {
		_, secret, err := auth.CreateKey(context.Background(), st, "ui test", tenant, "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		s.keys[tenant] = secret
	}
	return s
}

// exampleJob is the five-task example job of the producer API's documentation: two roots, a fan-out
// of one of them and a join (4 dependencies).
func exampleJob(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../../examples/job.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// submit creates a job for tenant with POST /jobs and returns its id.
func (s *server) submit(t testing.TB, tenant string, body []byte) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.public.URL+"/jobs", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", s.keys[tenant])
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var created struct {
		JobID string `json:"jobId"`
	}
	if err := json.NewDecoder(res.Body).Decode(&created); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("POST /jobs: %d, %v", res.StatusCode, err)
	}
	return created.JobID
}

// deploy deploys a pipeline document (YAML) for tenant with POST /pipelines and returns the
// answer: its version, whether it was created or activated, and its state (active, or building
// or ready when it builds beside the active version).
func (s *server) deploy(t testing.TB, tenant, doc string) (res struct {
	Version   string `json:"version"`
	Created   bool   `json:"created"`
	Activated bool   `json:"activated"`
	State     string `json:"state"`
}) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.public.URL+"/pipelines", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", s.keys[tenant])
	req.Header.Set("Content-Type", "application/yaml")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusCreated && r.StatusCode != http.StatusOK {
		t.Fatalf("deploy: %d %s", r.StatusCode, b)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("deploy: %v: %s", err, b)
	}
	return res
}

// runWorker runs an SDK worker whose handlers wait for gate before completing each task (a nil
// gate: at once). It stops when the test ends.
func (s *server) runWorker(t testing.TB, gate <-chan struct{}, names ...string) {
	t.Helper()
	handlers := map[string]worker.Handler{}
	for _, name := range names {
		handlers[name] = func(ctx context.Context, task *worker.Task) (any, error) {
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return map[string]any{"task": task.Key, "ok": true}, nil
		}
	}
	s.runHandlers(t, "ui-test-worker", handlers)
}

// runHandlers runs an SDK worker with the handlers, by task name, until the test ends.
func (s *server) runHandlers(t testing.TB, id string, handlers map[string]worker.Handler) {
	t.Helper()
	w, err := worker.New(s.internal.URL, worker.WithWorkerID(id), worker.WithPollWait(200*time.Millisecond),
		worker.WithLogger(slog.New(slog.DiscardHandler)), worker.WithConcurrency(4), worker.WithShutdownTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		w.Handle(name, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// client is a browser without a browser: a cookie jar, and redirects not followed.
func client(t testing.TB) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// rejected is the dashboard's count of refused keys of a kind (baton_credentials_rejected_total).
func (s *server) rejected(t testing.TB, kind string) float64 {
	t.Helper()
	fs, err := s.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.GetName() != "baton_credentials_rejected_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
