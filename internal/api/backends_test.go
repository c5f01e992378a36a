package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// TestTerminatedBackendsGive503NeverLoss drives a server on PostgreSQL with producers (POST /jobs
// with an Idempotency-Key, sent again after a 503 as a client would) and stream workers (claim,
// complete) while every connection of the server to its database is terminated every 150 ms.
// Every answer must be a success or a 503 with Retry-After, never another 5xx; afterwards each
// key made exactly one job, every job completed, and every acknowledged completion stands.
func TestTerminatedBackendsGive503NeverLoss(t *testing.T) {
	db := storetest.NewPostgresDatabase(t)
	st := db.Open(t)
	var retried, groupsAlone atomic.Int64
	logs := slog.New(&countingHandler{counts: map[string]*atomic.Int64{
		"transient database failure; trying again":                             &retried,
		"group commit failed transiently; applying its transitions one by one": &groupsAlone,
	}})
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{Logger: logs, RetryFor: 2 * time.Second,
		// A claim whose commit was cut off may have leased its task to nobody: short leases
		// give such a task back quickly.
		Defaults: dispatch.Defaults{HeartbeatInterval: 500 * time.Millisecond, HeartbeatTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	d.NewReaper().Start(ctx)
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), Dispatcher: d}), Logger: quiet})
	public, internal := httptest.NewServer(s.ProducerHandler()), httptest.NewServer(s.InternalHandler())
	defer public.Close()
	defer internal.Close()
	_, key, err := auth.CreateKey(ctx, st, "test", "acme", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}

	var (
		statuses sync.Map // status → *atomic.Int64
		failed   atomic.Bool
	)
	check := func(what string, res response, err error, ok ...int) bool {
		if err != nil {
			t.Errorf("%s: %v", what, err)
			failed.Store(true)
			return false
		}
		n, _ := statuses.LoadOrStore(res.Status, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		for _, s := range ok {
			if res.Status == s {
				return true
			}
		}
		if res.Status == http.StatusServiceUnavailable {
			if res.Header.Get("Retry-After") == "" {
				t.Errorf("%s: 503 without Retry-After", what)
			}
			return false
		}
		if !failed.Swap(true) {
			t.Errorf("%s: %d %s", what, res.Status, res.Raw)
		}
		return false
	}

	faults := time.Now().Add(4 * time.Second)
	var (
		wg       sync.WaitGroup
		keysMu   sync.Mutex
		jobByKey = map[string]string{}
		killed   atomic.Int64
	)
	wg.Go(func() {
		for time.Now().Before(faults) {
			time.Sleep(150 * time.Millisecond)
			killed.Add(int64(db.TerminateBackends(t)))
		}
	})
	for p := range 2 {
		wg.Go(func() {
			for n := 0; time.Now().Before(faults); n++ {
				k := fmt.Sprintf("p%d-%d", p, n)
				var tasks []map[string]any
				for i := range 8 {
					task := map[string]any{"taskId": fmt.Sprintf("t%d", i), "name": "work", "queue": "q"}
					if i > 0 {
						task["dependsOn"] = []string{fmt.Sprintf("t%d", i-1)}
					}
					tasks = append(tasks, task)
				}
				for try := 0; ; try++ {
					res, err := roundTrip("POST", public.URL+"/jobs", map[string]any{"name": "j", "tasks": tasks},
						"x-api-key", key, "Idempotency-Key", k)
					if check("POST /jobs", res, err, http.StatusCreated, http.StatusOK) {
						keysMu.Lock()
						if prev, seen := jobByKey[k]; seen && prev != res.Body["jobId"] {
							t.Errorf("key %s answered job %v, then %v", k, prev, res.Body["jobId"])
						}
						jobByKey[k], _ = res.Body["jobId"].(string)
						keysMu.Unlock()
						time.Sleep(20 * time.Millisecond)
						break
					}
					if failed.Load() || try == 100 {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	var acked sync.Map // task id → output of the acknowledged completion
	done := make(chan struct{})
	for w := range 6 {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for {
				select {
				case <-done:
					return
				default:
				}
				res, err := roundTrip("POST", internal.URL+"/internal/worker/claim",
					map[string]any{"worker_id": worker, "streams": []string{"q"}, "max_wait_ms": 200})
				if !check("claim", res, err, http.StatusOK) || res.Body["claimed"] != true {
					continue
				}
				taskID := res.Body["task_id"]
				out := map[string]any{"by": worker, "lease": res.Body["lease_token"]}
				body := streamWith(streamLease(res.Body), "worker_id", worker, "result", out)
				for try := 0; ; try++ {
					res, err := roundTrip("POST", internal.URL+"/internal/worker/complete", body)
					if check("complete", res, err, http.StatusOK) {
						acked.Store(taskID, out)
						break
					}
					if failed.Load() || try == 100 {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}

	// Once the faults stop, every job must complete.
	finished := func() bool {
		keysMu.Lock()
		defer keysMu.Unlock()
		for _, id := range jobByKey {
			j, err := st.JobGet(ctx, id)
			if err != nil || j.Status != lifecycle.JobCompleted {
				return false
			}
		}
		return true
	}
	for !failed.Load() && (time.Now().Before(faults) || !finished()) {
		if time.Since(faults) > 30*time.Second {
			t.Error("jobs still unfinished 30 s after the faults stopped")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(done)
	wg.Wait()

	var summary []string
	statuses.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%d×%d", v.(*atomic.Int64).Load(), k))
		return true
	})
	t.Logf("%d jobs, %d backends terminated; answers %v; %d transitions retried, %d group commits redone one by one",
		len(jobByKey), killed.Load(), summary, retried.Load(), groupsAlone.Load())
	if killed.Load() == 0 {
		t.Fatal("no backend was terminated: the test proved nothing")
	}
	// Exactly one job per key: nothing created twice by a retry.
	jobs, err := st.JobList(ctx, store.ListJobsParams{Tenant: "acme", Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(jobByKey) {
		t.Errorf("%d jobs stored for %d idempotency keys", len(jobs), len(jobByKey))
	}
	// Every acknowledged completion stands, with its output.
	acked.Range(func(id, out any) bool {
		tk, err := st.TaskGet(ctx, id.(string))
		if err != nil {
			t.Errorf("task %v: %v", id, err)
			return true
		}
		want := fmt.Sprintf(`{"by":%q,"lease":%q}`, out.(map[string]any)["by"], out.(map[string]any)["lease"])
		if tk.Status != lifecycle.Completed || string(tk.Output) != want {
			t.Errorf("task %v acknowledged as completed with %s is %s with %s", id, want, tk.Status, tk.Output)
		}
		return true
	})
}

// countingHandler counts the log records whose message it knows.
type countingHandler struct{ counts map[string]*atomic.Int64 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if n := h.counts[r.Message]; n != nil {
		n.Add(1)
	}
	return nil
}

// A database that keeps failing transiently is a 503 with Retry-After, never a 500; once it
// answers again, so does the server.
func TestUnavailableDatabaseIs503(t *testing.T) {
	st := &storetest.Faulty{Store: storetest.OpenSQLite(t)}
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{Logger: quiet, RetryFor: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Logger: quiet})
	srv := httptest.NewServer(s.ProducerHandler())
	defer srv.Close()
	_, key, err := auth.CreateKey(context.Background(), st, "test", "acme", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	job := map[string]any{"tasks": []map[string]any{{"taskId": "a", "name": "work"}}}
	st.FailBegin.Store(1 << 30)
	res, err := roundTrip("POST", srv.URL+"/jobs", job, "x-api-key", key)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || res.Body["error"] == nil {
		t.Fatalf("POST /jobs on a failing database: %d %v %s, want 503 with Retry-After and an error", res.Status, res.Header, res.Raw)
	}
	st.FailBegin.Store(0)
	res, err = roundTrip("POST", srv.URL+"/jobs", job, "x-api-key", key)
	if err != nil || res.Status != http.StatusCreated {
		t.Fatalf("POST /jobs once the database answers: %d %s %v", res.Status, res.Raw, err)
	}
}
