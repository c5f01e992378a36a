package api_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// replicas starts n API servers, each with its own dispatcher and authenticator, on n stores
// sharing one PostgreSQL schema, all answering to one acme key.
func replicas(t *testing.T, n int, opts apiOptions) []*testAPI {
	t.Helper()
	stores := storetest.OpenPostgresReplicas(t, n)
	out := make([]*testAPI, n)
	for i, st := range stores {
		out[i] = newAPI(t, st, opts)
	}
	for _, r := range out[1:] {
		r.key = out[0].key
	}
	return out
}

func TestReplicasShareOneJob(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 2, defaultOptions())
	a, b := rs[0], rs[1]

	id := a.createJob(exampleJob)
	if !reflect.DeepEqual(a.getJob(id), b.getJob(id)) {
		t.Fatal("the replicas disagree on a new job")
	}

	// Workers of either replica claim and complete the tasks.
	a.runTask(id, "scrape-store", false)
	b.runTask(id, "analyze-competitors", false)
	a.runTask(id, "color-tags", false)

	res := b.do("POST", "/jobs/"+id+"/tasks", addTasksExample)
	wantStatus(t, res, http.StatusOK)
	if !jsonEqual(t, res.Body, `{"jobId":"`+id+`","addedTasks":["extra-analysis","final-report"],"immediatelyReady":["extra-analysis"],"totalTasksNow":7}`) {
		t.Fatalf("add tasks through B: %s", res.Raw)
	}
	if n := jsonInt(t, a.getJob(id)["totalTasks"]); n != 7 {
		t.Fatalf("A sees %d tasks", n)
	}

	wantStatus(t, a.do("POST", "/jobs/"+id+"/cancel", nil), http.StatusOK)
	if st := b.getJob(id)["status"]; st != "canceled" {
		t.Fatalf("B sees %v after A canceled", st)
	}
	wantError(t, b.do("POST", "/jobs/"+id+"/cancel", nil), http.StatusConflict, "Job already finished")
	res = b.do("POST", "/jobs/"+id+"/resume", nil)
	wantStatus(t, res, http.StatusOK)
	resumed := jsonStrings(t, res.Body["resumedTasks"])
	slices.Sort(resumed)
	if !slices.Equal(resumed, []string{"compile-result", "extra-analysis", "final-report", "font-pairing"}) {
		t.Fatalf("resumed %v", resumed)
	}
	wantError(t, a.do("POST", "/jobs/"+id+"/resume", nil), http.StatusConflict, "Job is still processing; only a finished job can be resumed")

	b.runTask(id, "font-pairing", false)
	a.runTask(id, "extra-analysis", false)
	b.runTask(id, "compile-result", false)
	a.runTask(id, "final-report", false)

	ja, jb := a.getJob(id), b.getJob(id)
	if !reflect.DeepEqual(ja, jb) {
		t.Fatalf("final views differ:\nA %v\nB %v", ja, jb)
	}
	if ja["status"] != "completed" || !jsonEqual(t, ja["progress"], `{"waiting":0,"pending":0,"processing":0,"completed":7,"failed":0,"canceled":0,"skipped":0}`) {
		t.Fatalf("final job %v", ja)
	}
	if ea, eb := a.jobEvents(id), b.jobEvents(id); !reflect.DeepEqual(ea, eb) || ea[len(ea)-1]["type"] != "Job Completed" {
		t.Fatalf("event logs differ or do not end in Job Completed: %d vs %d events", len(ea), len(eb))
	}
	for _, key := range []string{"final-report", "compile-result"} {
		ta := a.do("GET", "/jobs/"+id+"/tasks/"+key, nil)
		tb := b.do("GET", "/jobs/"+id+"/tasks/"+key, nil)
		if ta.Status != http.StatusOK || !reflect.DeepEqual(ta.Body, tb.Body) {
			t.Fatalf("task %s: A %s\nB %s", key, ta.Raw, tb.Raw)
		}
	}
	la, _ := a.listIDs("")
	lb, _ := b.listIDs("status=completed")
	if !slices.Equal(la, []string{id}) || !slices.Equal(lb, []string{id}) {
		t.Fatalf("lists: A %v, B %v", la, lb)
	}
}

func TestReplicasIdempotencyKeyRace(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 2, defaultOptions())
	const rounds, perReplica = 5, 4
	for round := range rounds {
		key := fmt.Sprintf("race-%d", round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results = make([]response, 2*perReplica)
			errs    = make([]error, 2*perReplica)
		)
		for i := range results {
			r := rs[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = r.send("POST", "/jobs", exampleJob, "x-api-key", r.key, "Idempotency-Key", key)
			}()
		}
		close(start)
		wg.Wait()
		ids := map[any]int{}
		fresh := 0
		for i, res := range results {
			if errs[i] != nil {
				t.Fatalf("round %d, request %d: %v", round, i, errs[i])
			}
			if res.Status != http.StatusCreated {
				t.Fatalf("round %d, request %d to replica %d: %d %s", round, i, i%2, res.Status, res.Raw)
			}
			ids[res.Body["jobId"]]++
			if res.Header.Get("Idempotent-Replayed") != "true" {
				fresh++
			}
		}
		if len(ids) != 1 || fresh != 1 {
			t.Fatalf("round %d: job ids %v, %d answers not marked replayed; want one job created once", round, ids, fresh)
		}
	}
	for _, r := range rs {
		if got, _ := r.listIDs("limit=100"); len(got) != rounds {
			t.Fatalf("%d jobs stored for %d idempotency keys", len(got), rounds)
		}
	}
}

func TestReplicasShareTheDailyQuota(t *testing.T) {
	t.Parallel()
	opts := defaultOptions()
	opts.limits = auth.Limits{DailyQuota: 5}
	rs := replicas(t, 2, opts)
	for i := range 5 {
		if res := rs[i%2].do("GET", "/jobs", nil); res.Status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, res.Status, res.Raw)
		}
	}
	for _, r := range rs {
		wantError(t, r.do("GET", "/jobs", nil), http.StatusTooManyRequests, "daily request quota exceeded")
	}
}

func TestReplicasConcurrentTransitionsApplyOnce(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 2, defaultOptions())
	a, b := rs[0], rs[1]
	id := a.createJob(exampleJob)

	// both sends the same request through each replica n times at once.
	both := func(n int, method, path, body string) map[int]int {
		t.Helper()
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			out   = make([]response, 2*n)
			errs  = make([]error, 2*n)
		)
		for i := range out {
			r := rs[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out[i], errs[i] = r.send(method, path, body, "x-api-key", r.key)
			}()
		}
		close(start)
		wg.Wait()
		count := map[int]int{}
		for i := range out {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			count[out[i].Status]++
		}
		return count
	}
	if got := both(3, "POST", "/jobs/"+id+"/tasks", tasksBody(tk("x", "x", "scrape-store"))); got[http.StatusOK] != 1 || got[http.StatusBadRequest] != 5 {
		t.Fatalf("additions: %v", got)
	}
	// Both replicas' workers race for every ready task; each is claimed once.
	claims := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, x := range a.getJob(id)["tasks"].([]any) {
		v := x.(map[string]any)
		if v["status"] != "pending" {
			continue
		}
		for _, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := r.d.ClaimTask(context.Background(), dispatch.ClaimTaskParams{TaskID: v["id"].(string), WorkerID: "w"}); err == nil {
					mu.Lock()
					claims[v["taskId"].(string)]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(claims) != 2 || claims["scrape-store"] != 1 || claims["analyze-competitors"] != 1 {
		t.Fatalf("claims %v", claims)
	}
	if got := both(3, "POST", "/jobs/"+id+"/cancel", ""); got[http.StatusOK] != 6 {
		t.Fatalf("cancels of a job with running tasks: %v", got)
	}
	count := map[string]int{}
	for _, e := range b.jobEvents(id) {
		count[eventLine(e)]++
	}
	if count["Job Tasks Added"] != 1 || count["Task Canceled x"] != 1 || count["Task Canceled compile-result"] != 1 || count["Job Canceled"] != 0 {
		t.Fatalf("event counts %v", count)
	}
	if got := statuses(a.getJob(id)); got["scrape-store"] != "processing" || got["color-tags"] != "canceled" {
		t.Fatalf("statuses %v", got)
	}
}
