package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// boundedClient gives up on a request after 30 s, so that a request that hangs fails the test
// instead of holding it up.
var boundedClient = &http.Client{Timeout: 30 * time.Second}

// timedCall is an answer and how long it took.
type timedCall struct {
	name string
	res  response
	err  error
	took time.Duration
}

func callTimed(name, method, url string, body any, headers ...string) timedCall {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		if s, ok := body.(string); ok {
			raw = []byte(s)
		}
		rd = bytes.NewReader(raw)
	}
	start := time.Now()
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return timedCall{name: name, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := boundedClient.Do(req)
	if err != nil {
		return timedCall{name: name, err: err, took: time.Since(start)}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	out := response{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if err == nil && len(raw) > 0 {
		_ = json.Unmarshal(raw, &out.Body)
	}
	return timedCall{name: name, res: out, err: err, took: time.Since(start)}
}

// TestDatabasePartition runs a server whose PostgreSQL connections go through a proxy, and cuts
// the network between them: readiness, producer and worker requests answer 503 with Retry-After
// within a few seconds instead of hanging, none of them changes anything, and once the network
// heals the same server serves again: the job whose creation was refused exists once sent again,
// and the completion that was refused is applied once when sent again.
func TestDatabasePartition(t *testing.T) {
	pp := storetest.OpenProxiedPostgres(t, postgres.Options{MaxConns: 8, Watch: true})
	w := newWorkerAPI(t, pp.Store)
	key := w.apiKey("acme")
	producer := func(name, method, path string, body any, headers ...string) timedCall {
		return callTimed(name, method, w.public.URL+path, body, append([]string{"x-api-key", key}, headers...)...)
	}
	worker := func(name, op string, body any) timedCall {
		return callTimed(name, "POST", w.internal.URL+"/internal/worker/"+op, body)
	}
	const oneTask = `{"tasks":[{"taskId":"only","name":"partition-q","dependsOn":[],"input":{"n":1}}]}`
	first := producer("create", "POST", "/jobs", oneTask)
	if first.err != nil || first.res.Status != http.StatusCreated {
		t.Fatalf("create before the partition: %v %d %s", first.err, first.res.Status, first.res.Raw)
	}
	jobID := first.res.Body["jobId"].(string)
	claim := w.streamClaimed("w-1", "partition-q")
	complete := streamWith(streamLease(claim), "result", map[string]any{"rows": 3})

	pp.Proxy.Partition(true)
	cut := time.Now()
	const bound = 5 * time.Second // what "fails fast" must mean here; the figures are logged
	calls := []func() timedCall{
		func() timedCall { return callTimed("readyz", "GET", w.public.URL+"/readyz", nil) },
		func() timedCall {
			return producer("POST /jobs", "POST", "/jobs", `{"tasks":[{"taskId":"a","name":"partition-q","dependsOn":[]},`+
				`{"taskId":"b","name":"partition-q","dependsOn":["a"]}]}`, "Idempotency-Key", "partition-1")
		},
		func() timedCall { return producer("GET /jobs/{id}", "GET", "/jobs/"+jobID, nil) },
		func() timedCall {
			return worker("claim", "claim", map[string]any{"worker_id": "w-2", "streams": []string{"partition-q"}, "max_wait_ms": 20000})
		},
		func() timedCall { return worker("complete", "complete", complete) },
	}
	check := func(round string, limit time.Duration) {
		t.Helper()
		results := make([]timedCall, len(calls))
		var wg sync.WaitGroup
		for i, call := range calls {
			wg.Go(func() { results[i] = call() })
		}
		wg.Wait()
		for _, r := range results {
			if r.err != nil {
				t.Fatalf("%s %s: %v after %s", round, r.name, r.err, r.took)
			}
			t.Logf("%s: %s answered %d after %s", round, r.name, r.res.Status, r.took.Round(time.Millisecond))
			if r.res.Status != http.StatusServiceUnavailable || r.took > limit {
				t.Fatalf("%s %s: %d %s after %s; want 503 within %s", round, r.name, r.res.Status, r.res.Raw, r.took, limit)
			}
			switch r.name {
			case "readyz":
				if r.res.Body["status"] != "unavailable" {
					t.Fatalf("readyz: %s", r.res.Raw)
				}
			case "claim", "complete":
				// The worker dialect's refusal: nothing decided, keep the message and retry.
				streamRefused(t, r.res, http.StatusServiceUnavailable, false, "unavailable")
				fallthrough
			default:
				if r.res.Header.Get("Retry-After") == "" {
					t.Fatalf("%s %s: 503 without Retry-After", round, r.name)
				}
			}
		}
	}
	// Requests sent as the network goes wait at most until the store finds it gone.
	check("as the network goes", bound)
	if pp.Store.Unreachable() == nil {
		t.Fatal("the store does not know its database is unreachable")
	}
	t.Logf("the store held the database unreachable within %s", time.Since(cut).Round(time.Millisecond))
	// Once it knows, they fail at once.
	check("while it is gone", time.Second)

	pp.Proxy.Partition(false)
	healed := time.Now()
	for {
		r := callTimed("readyz", "GET", w.public.URL+"/readyz", nil)
		if r.err == nil && r.res.Status == http.StatusOK {
			break
		}
		if time.Since(healed) > 10*time.Second {
			t.Fatalf("not ready 10 s after the network healed: %v %d %s", r.err, r.res.Status, r.res.Raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("ready again %s after the network healed", time.Since(healed).Round(time.Millisecond))

	// Nothing changed: the only job is the first; the task is still running its first attempt.
	ctx := context.Background()
	jobs, _, err := w.d.ListJobs(ctx, dispatch.ListJobsParams{Tenant: "acme", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != jobID {
		t.Fatalf("jobs after the partition: %d, want only %s", len(jobs), jobID)
	}
	taskID := claim["job_id"].(string)
	if tk := w.task(taskID); tk.Status != lifecycle.Running || tk.Attempt != 1 {
		t.Fatalf("task after the partition: %s attempt %d, want running attempt 1", tk.Status, tk.Attempt)
	}
	// The refused creation, sent again, creates the job once and whole.
	again := producer("POST /jobs", "POST", "/jobs", `{"tasks":[{"taskId":"a","name":"partition-q","dependsOn":[]},`+
		`{"taskId":"b","name":"partition-q","dependsOn":["a"]}]}`, "Idempotency-Key", "partition-1")
	if again.err != nil || again.res.Status != http.StatusCreated || again.res.Body["totalTasks"] != float64(2) {
		t.Fatalf("create after the partition: %v %d %s", again.err, again.res.Status, again.res.Raw)
	}
	// The refused completion, sent again, is applied once; a third time is a repeat.
	for i := range 2 {
		r := worker("complete", "complete", complete)
		if r.err != nil || r.res.Status != http.StatusOK || r.res.Body["ack"] != true {
			t.Fatalf("complete #%d after the partition: %v %d %s", i+1, r.err, r.res.Status, r.res.Raw)
		}
	}
	if tk := w.task(taskID); tk.Status != lifecycle.Completed || string(tk.Output) != `{"rows":3}` {
		t.Fatalf("task after the completion: %s %s", tk.Status, tk.Output)
	}
	events, err := pp.Store.EventList(ctx, store.EventListParams{JobID: jobID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	completed := 0
	for _, e := range events {
		if e.Type == dispatch.EventTaskCompleted {
			completed++
		}
	}
	if completed != 1 {
		t.Fatalf("%d Task Completed events, want 1", completed)
	}
}
