package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// jobEvents lists every event of a job through the JSON endpoint.
func (a *testAPI) jobEvents(id string) []map[string]any {
	a.t.Helper()
	res := a.do("GET", "/jobs/"+id+"/events", nil)
	if res.Status != http.StatusOK {
		a.t.Fatalf("GET events: %d %s", res.Status, res.Raw)
	}
	var out []map[string]any
	for _, x := range res.Body["events"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

// eventLine is "type" or "type taskId".
func eventLine(e map[string]any) string {
	if k, _ := e["taskId"].(string); k != "" {
		return e["type"].(string) + " " + k
	}
	return e["type"].(string)
}

// normalized sorts each run of consecutive lines of the same event type: events one transition
// emits together for several tasks (children released at once) come in no particular order.
func normalized(lines []string) []string {
	out := slices.Clone(lines)
	typ := func(s string) string {
		for _, p := range []string{"Task Pending", "Task Processing Started", "Task Completed", "Task Canceled", "Task Skipped"} {
			if strings.HasPrefix(s, p) {
				return p
			}
		}
		return s
	}
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && typ(out[j]) == typ(out[i]) {
			j++
		}
		slices.Sort(out[i:j])
		i = j
	}
	return out
}

// exampleRunEvents is the audit log of the example job run in exampleKeys order.
var exampleRunEvents = []string{
	"Job Created",
	"Task Pending scrape-store",
	"Task Pending analyze-competitors",
	"Task Processing Started scrape-store",
	"Task Completed scrape-store",
	"Task Pending color-tags",
	"Task Pending font-pairing",
	"Task Processing Started analyze-competitors",
	"Task Completed analyze-competitors",
	"Task Processing Started color-tags",
	"Task Completed color-tags",
	"Task Processing Started font-pairing",
	"Task Completed font-pairing",
	"Task Pending compile-result",
	"Task Processing Started compile-result",
	"Task Completed compile-result",
	"Job Completed",
}

func TestJobEventsJSON(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)

		res := a.do("GET", "/jobs/"+id+"/events", nil)
		wantStatus(t, res, http.StatusOK)
		if got := sortedKeys(res.Body); !slices.Equal(got, []string{"events", "nextAfter"}) {
			t.Fatalf("keys %v", got)
		}
		events := a.jobEvents(id)
		if len(events) != 3 {
			t.Fatalf("%d events: %s", len(events), res.Raw)
		}
		for i, e := range events {
			if got := sortedKeys(e); !slices.Equal(got, []string{"at", "data", "id", "taskId", "type"}) {
				t.Fatalf("event keys %v", got)
			}
			// One transition, one time (TestLastEventsMatchTheLog checks it against the job's).
			if jsonInt(t, e["at"]) != jsonInt(t, events[0]["at"]) {
				t.Errorf("event %d at %v, the Job Created event at %v", i, e["at"], events[0]["at"])
			}
			if i > 0 && jsonInt(t, e["id"]) <= jsonInt(t, events[i-1]["id"]) {
				t.Errorf("event ids not increasing: %v", res.Raw)
			}
		}
		if jsonInt(t, res.Body["nextAfter"]) != jsonInt(t, events[2]["id"]) {
			t.Errorf("nextAfter %v, last id %v", res.Body["nextAfter"], events[2]["id"])
		}
		jc := events[0]
		if jc["type"] != "Job Created" || jc["taskId"] != nil {
			t.Errorf("first event %v", jc)
		}
		data := jc["data"].(map[string]any)
		if data["jobId"] != id || jsonInt(t, data["totalTasks"]) != 5 || len(data["tasks"].([]any)) != 5 {
			t.Errorf("Job Created data %v", data)
		}
		if first := data["tasks"].([]any)[0]; !jsonEqual(t, first, `{"taskId":"scrape-store","name":"scrape-store","dependsOn":[],"input":{"storeId":"store-123","url":"https://example.com"}}`) {
			t.Errorf("Job Created task %v", first)
		}
		for i, key := range []string{"scrape-store", "analyze-competitors"} {
			e := events[i+1]
			want := fmt.Sprintf(`{"requestId":%q,"jobId":%q,"name":%q,"dependsOn":[]}`, key, id, key)
			if e["type"] != "Task Pending" || e["taskId"] != key || !jsonEqual(t, e["data"], want) {
				t.Errorf("event %d: %v, want Task Pending %s %s", i+1, e, key, want)
			}
		}

		a.runAll(id, exampleKeys...)
		var lines []string
		for _, e := range a.jobEvents(id) {
			lines = append(lines, eventLine(e))
		}
		if !slices.Equal(normalized(lines), normalized(exampleRunEvents)) {
			t.Errorf("events\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(exampleRunEvents, "\n"))
		}
		// Another job's log is its own.
		if n := len(a.jobEvents(a.createJob(exampleJob))); n != 3 {
			t.Errorf("a new job has %d events", n)
		}
	})
}

func TestJobEventsPaging(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runAll(id, exampleKeys...)
		all := a.jobEvents(id)
		if len(all) != len(exampleRunEvents) {
			t.Fatalf("%d events", len(all))
		}
		for _, limit := range []int{1, 2, 5, 17, 1000} {
			var got []map[string]any
			after := int64(0)
			for pages := 0; ; pages++ {
				res := a.do("GET", fmt.Sprintf("/jobs/%s/events?after=%d&limit=%d", id, after, limit), nil)
				wantStatus(t, res, http.StatusOK)
				page := res.Body["events"].([]any)
				next := jsonInt(t, res.Body["nextAfter"])
				if len(page) > limit {
					t.Fatalf("limit %d: page of %d", limit, len(page))
				}
				if len(page) == 0 {
					if next != after {
						t.Fatalf("empty page: nextAfter %d, want the after it was given (%d)", next, after)
					}
					break
				}
				for _, x := range page {
					got = append(got, x.(map[string]any))
				}
				if next != jsonInt(t, got[len(got)-1]["id"]) {
					t.Fatalf("nextAfter %d is not the page's last id", next)
				}
				after = next
				if pages > len(all) {
					t.Fatal("paging does not end")
				}
			}
			if !reflect.DeepEqual(got, all) {
				t.Errorf("limit %d: pages joined differ from the whole log", limit)
			}
		}
		mid := jsonInt(t, all[7]["id"])
		res := a.do("GET", fmt.Sprintf("/jobs/%s/events?after=%d", id, mid), nil)
		if got := res.Body["events"].([]any); len(got) != len(all)-8 || jsonInt(t, got[0].(map[string]any)["id"]) != jsonInt(t, all[8]["id"]) {
			t.Errorf("after=%d: %s", mid, res.Raw)
		}
	})
}

func TestJobEventsRejectsBadParameters(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		for _, v := range []string{"abc", "-1", "1.5", "1e3"} {
			wantError(t, a.do("GET", "/jobs/"+id+"/events?after="+v, nil), http.StatusBadRequest, "after must be an event id (an integer)")
			wantError(t, a.do("GET", "/jobs/"+id+"/events?after="+v, nil, "x-api-key", a.key, "Accept", "text/event-stream"),
				http.StatusBadRequest, "after must be an event id (an integer)")
		}
		for _, v := range []string{"0", "1001", "x", "-1"} {
			wantError(t, a.do("GET", "/jobs/"+id+"/events?limit="+v, nil), http.StatusBadRequest, "limit must be an integer from 1 to 1000")
		}
		wantStatus(t, a.do("GET", "/jobs/"+id+"/events?limit=1000", nil), http.StatusOK)
		wantError(t, a.do("GET", "/jobs/"+id+"/events", nil, "x-api-key", a.key, "Accept", "text/event-stream", "Last-Event-ID", "abc"),
			http.StatusBadRequest, "Last-Event-ID must be an event id")
		wantError(t, a.do("GET", "/jobs/job-nope/events", nil), http.StatusNotFound, "Job not found")
		wantError(t, a.do("GET", "/jobs/job-nope/events", nil, "x-api-key", a.key, "Accept", "text/event-stream"), http.StatusNotFound, "Job not found")
	})
}

// sseEvent is one Server-Sent Events block.
type sseEvent struct {
	id, event, data string
	fields          []string // the field names in order, to check the block's shape
}

// openStream requests a job's events as a stream; headers are added to the acme key.
func (a *testAPI) openStream(ctx context.Context, path string, headers ...string) *http.Response {
	a.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", a.srv.URL+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("x-api-key", a.key)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(res.Body)
		a.t.Fatalf("GET %s as a stream: %d %s", path, res.StatusCode, raw)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		a.t.Fatalf("Content-Type %q", ct)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
		a.t.Errorf("Cache-Control %q", cc)
	}
	return res
}

// readSSE parses blocks from r onto ch and closes ch at the end of the stream; malformed lines
// become blocks with event "malformed".
func readSSE(r io.Reader, ch chan<- sseEvent) {
	defer close(ch)
	sc := bufio.NewScanner(r)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(cur.fields) > 0 {
				ch <- cur
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"): // a comment (keep-alive)
		default:
			name, value, ok := strings.Cut(line, ": ")
			if !ok {
				ch <- sseEvent{event: "malformed", data: line}
				continue
			}
			cur.fields = append(cur.fields, name)
			switch name {
			case "id":
				cur.id = value
			case "event":
				cur.event = value
			case "data":
				cur.data = value
			}
		}
	}
}

// stream is an open event stream being read.
type stream struct {
	t   *testing.T
	ctx context.Context
	ch  chan sseEvent
}

func (a *testAPI) stream(ctx context.Context, path string, headers ...string) *stream {
	res := a.openStream(ctx, path, headers...)
	ch := make(chan sseEvent, 1000)
	go readSSE(res.Body, ch)
	return &stream{t: a.t, ctx: ctx, ch: ch}
}

// next returns the next block, failing the test if the stream ends or stalls.
func (s *stream) next() sseEvent {
	s.t.Helper()
	select {
	case e, ok := <-s.ch:
		if !ok {
			s.t.Fatal("the event stream ended early")
		}
		return e
	case <-s.ctx.Done():
		s.t.Fatal("timed out waiting for an event")
	}
	return sseEvent{}
}

// event reads the next block, checks it is a well-formed event and returns it as the JSON view.
func (s *stream) event() map[string]any {
	s.t.Helper()
	e := s.next()
	if !slices.Equal(e.fields, []string{"id", "event", "data"}) {
		s.t.Fatalf("block %+v, want id, event and data lines", e)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(e.data), &v); err != nil {
		s.t.Fatalf("data %q: %v", e.data, err)
	}
	id, err := strconv.ParseInt(e.id, 10, 64)
	if err != nil || float64(id) != v["id"] || e.event != v["type"] {
		s.t.Fatalf("block id %q event %q disagree with data %s", e.id, e.event, e.data)
	}
	return v
}

// end reads the closing block, checks it says the job ended with status, and that the stream
// then closes.
func (s *stream) end(jobID, status string) {
	s.t.Helper()
	e := s.next()
	if !slices.Equal(e.fields, []string{"event", "data"}) || e.event != "end" {
		s.t.Fatalf("block %+v, want the end block", e)
	}
	var v any
	if err := json.Unmarshal([]byte(e.data), &v); err != nil {
		s.t.Fatalf("end data %q: %v", e.data, err)
	}
	if want := fmt.Sprintf(`{"jobId":%q,"status":%q}`, jobID, status); !jsonEqual(s.t, v, want) {
		s.t.Fatalf("end data %s, want %s", e.data, want)
	}
	select {
	case extra, ok := <-s.ch:
		if ok {
			s.t.Fatalf("block after end: %+v", extra)
		}
	case <-s.ctx.Done():
		s.t.Fatal("the stream stayed open after its end block")
	}
}

func TestJobEventsStream(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id := a.createJob(exampleJob)
		s := a.stream(ctx, "/jobs/"+id+"/events")

		var got []map[string]any
		for range 3 { // what happened before the stream opened
			got = append(got, s.event())
		}
		// Each transition shows up on the open stream before the next one happens.
		for _, key := range exampleKeys {
			a.runTask(id, key, false)
			for {
				e := s.event()
				got = append(got, e)
				if e["type"] == "Task Completed" && e["taskId"] == key {
					break
				}
			}
		}
		got = append(got, s.event()) // Job Completed
		s.end(id, "completed")

		all := a.jobEvents(id)
		if !reflect.DeepEqual(got, all) {
			t.Fatalf("streamed %d events, the log has %d; streamed:\n%v\nlog:\n%v", len(got), len(all), got, all)
		}
		var lines []string
		for _, e := range got {
			lines = append(lines, eventLine(e))
		}
		if !slices.Equal(normalized(lines), normalized(exampleRunEvents)) {
			t.Errorf("streamed\n%s", strings.Join(lines, "\n"))
		}

		// Resuming after an id sends only what follows it, then ends at once.
		for _, c := range []struct {
			name    string
			path    string
			headers []string
		}{
			{"Last-Event-ID", "/jobs/" + id + "/events", []string{"Last-Event-ID", strconv.FormatInt(jsonInt(t, all[4]["id"]), 10)}},
			{"after", fmt.Sprintf("/jobs/%s/events?after=%d", id, jsonInt(t, all[4]["id"])), nil},
			{"Last-Event-ID wins over after", "/jobs/" + id + "/events?after=1", []string{"Last-Event-ID", strconv.FormatInt(jsonInt(t, all[4]["id"]), 10)}},
		} {
			t.Run(c.name, func(t *testing.T) {
				s := a.on(t).stream(ctx, c.path, c.headers...)
				for _, want := range all[5:] {
					if e := s.event(); !reflect.DeepEqual(e, want) {
						t.Fatalf("got %v, want %v", e, want)
					}
				}
				s.end(id, "completed")
			})
		}
		t.Run("from the last event", func(t *testing.T) {
			s := a.on(t).stream(ctx, "/jobs/"+id+"/events", "Last-Event-ID", strconv.FormatInt(jsonInt(t, all[len(all)-1]["id"]), 10))
			s.end(id, "completed")
		})
	})
}

func TestJobEventsStreamEndsWhenTheJobIsCanceled(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id := a.createJob(exampleJob)
		s := a.stream(ctx, "/jobs/"+id+"/events")
		for range 3 {
			s.event()
		}
		wantStatus(t, a.do("POST", "/jobs/"+id+"/cancel", nil), http.StatusOK)
		var types []string
		for range 6 {
			types = append(types, eventLine(s.event()))
		}
		want := []string{"Task Canceled analyze-competitors", "Task Canceled color-tags", "Task Canceled compile-result",
			"Task Canceled font-pairing", "Task Canceled scrape-store", "Job Canceled"}
		if got := normalized(types); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		s.end(id, "canceled")
	})
}

// complete claims a task by id and completes it; it is safe on any goroutine.
func (a *testAPI) complete(taskID string) error {
	ctx := context.Background()
	c, err := a.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: taskID, WorkerID: "w"})
	if err != nil {
		return fmt.Errorf("claim %s: %w", taskID, err)
	}
	_, err = a.d.Complete(ctx, dispatch.CompleteParams{TaskID: taskID, LeaseToken: c.Task.LeaseToken, Outcome: store.OutcomeSucceeded})
	return err
}

func TestJobEventsStreamUnderConcurrentTransitions(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		tasks := make([]map[string]any, 40)
		for i := range tasks {
			tasks[i] = tk(fmt.Sprintf("t%d", i), "x")
		}
		id := a.createJob(tasksBody(tasks...))
		var ids []string
		for _, x := range a.getJob(id)["tasks"].([]any) {
			ids = append(ids, x.(map[string]any)["id"].(string))
		}
		s := a.stream(ctx, "/jobs/"+id+"/events")

		work := make(chan string, len(ids))
		for _, tid := range ids {
			work <- tid
		}
		close(work)
		var wg sync.WaitGroup
		errs := make(chan error, len(ids))
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tid := range work {
					if err := a.complete(tid); err != nil {
						errs <- err
					}
				}
			}()
		}
		var got []map[string]any
		for {
			e := s.next()
			if e.event == "end" {
				if e.data != fmt.Sprintf(`{"jobId":%q,"status":"completed"}`, id) {
					t.Fatalf("end %q", e.data)
				}
				break
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(e.data), &v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		all := a.jobEvents(id)
		seen := map[float64]int{}
		for _, e := range got {
			seen[e["id"].(float64)]++
		}
		for _, e := range all {
			if n := seen[e["id"].(float64)]; n != 1 {
				t.Errorf("event %v (%s) streamed %d times", e["id"], eventLine(e), n)
			}
		}
		if len(got) != len(all) {
			t.Errorf("streamed %d events, the log has %d", len(got), len(all))
		}
	})
}

// checkLastEvents checks what the job view says against the audit log: each task's lastEventType
// and lastEventAt are those of its latest event (the producer contract derives them from it), the
// job's createdAt is its Job Created event's time and its completedAt that of the event that ended
// it.
func (a *testAPI) checkLastEvents(id, step string) {
	a.t.Helper()
	job, events := a.getJob(id), a.jobEvents(id)
	last := map[string]map[string]any{}
	var created, ended map[string]any
	for _, e := range events {
		switch e["type"] {
		case "Job Created":
			created = e
		case "Job Completed", "Job Canceled":
			ended = e
		case "Job Resumed":
			ended = nil
		}
		if k, ok := e["taskId"].(string); ok {
			last[k] = e
		}
	}
	if created == nil || job["createdAt"] != created["at"] {
		a.t.Errorf("%s: job createdAt %s, Job Created at %s", step, jsonText(job["createdAt"]), jsonText(created["at"]))
	}
	if job["status"] == "completed" || job["status"] == "canceled" {
		if ended == nil || job["completedAt"] != ended["at"] {
			a.t.Errorf("%s: job completedAt %s, its last event %s", step, jsonText(job["completedAt"]), jsonText(ended))
		}
	}
	for _, x := range job["tasks"].([]any) {
		v := x.(map[string]any)
		key := v["taskId"].(string)
		e := last[key]
		if e == nil {
			if v["lastEventType"] != nil || v["lastEventAt"] != nil {
				a.t.Errorf("%s: task %s has lastEvent %v at %s and no event in the log", step, key, v["lastEventType"], jsonText(v["lastEventAt"]))
			}
			continue
		}
		if v["lastEventType"] != e["type"] || v["lastEventAt"] != e["at"] {
			a.t.Errorf("%s: task %s: lastEventType %v at %s; its latest event is %v at %s", step, key, v["lastEventType"], jsonText(v["lastEventAt"]), e["type"], jsonText(e["at"]))
		}
	}
}

func TestLastEventsMatchTheLog(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		a := newAPIWithClock(t, st, defaultOptions(), newTickingClock())
		ctx := context.Background()
		id := a.createJob(exampleJob)
		a.checkLastEvents(id, "created")
		a.runTask(id, "scrape-store", false)
		a.runTask(id, "analyze-competitors", true)
		a.checkLastEvents(id, "ran two tasks")
		wantStatus(t, a.do("POST", "/jobs/"+id+"/tasks", addTasksExample), http.StatusOK)
		a.checkLastEvents(id, "added tasks")
		claim, err := a.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: taskIn(t, a.getJob(id), "color-tags")["id"].(string), WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		a.checkLastEvents(id, "claimed")
		wantStatus(t, a.do("POST", "/jobs/"+id+"/cancel", nil), http.StatusOK)
		a.checkLastEvents(id, "cancel requested")
		if _, err := a.d.Complete(ctx, dispatch.CompleteParams{TaskID: claim.Task.ID, LeaseToken: claim.Task.LeaseToken, Outcome: store.OutcomeCanceled}); err != nil {
			t.Fatal(err)
		}
		a.checkLastEvents(id, "canceled")
		wantStatus(t, a.do("POST", "/jobs/"+id+"/resume", nil), http.StatusOK)
		a.checkLastEvents(id, "resumed")
		a.runAll(id, "analyze-competitors", "color-tags", "font-pairing", "compile-result", "extra-analysis", "final-report")
		if st := a.getJob(id)["status"]; st != "completed" {
			t.Fatalf("job %v", st)
		}
		a.checkLastEvents(id, "completed")
	})
}

// jsonText prints a decoded JSON value as JSON (numbers in full).
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// taskEvents reads one page of a task's events.
func (a *testAPI) taskEvents(path string) ([]map[string]any, int64) {
	a.t.Helper()
	res := a.do("GET", path, nil)
	if res.Status != http.StatusOK {
		a.t.Fatalf("GET %s: %d %s", path, res.Status, res.Raw)
	}
	if got := sortedKeys(res.Body); !slices.Equal(got, []string{"events", "nextAfter"}) {
		a.t.Fatalf("GET %s: keys %v", path, got)
	}
	out := []map[string]any{}
	for _, x := range res.Body["events"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out, jsonInt(a.t, res.Body["nextAfter"])
}

// A task's events are exactly its entries of the job's log, oldest first, by taskId or global id.
func TestTaskEvents(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runTask(id, "scrape-store", false)
		a.runTask(id, "analyze-competitors", true)
		log := a.jobEvents(id)
		job := a.getJob(id)

		for key, want := range map[string][]string{
			"scrape-store":        {"Task Pending", "Task Processing Started", "Task Completed"},
			"analyze-competitors": {"Task Pending", "Task Processing Started", "Task Failed"},
			"color-tags":          {"Task Pending"}, // released by scrape-store
			"compile-result":      {},               // still waiting: no event yet
		} {
			var fromLog []map[string]any
			for _, e := range log {
				if e["taskId"] == key {
					fromLog = append(fromLog, e)
				}
			}
			byKey, next := a.taskEvents("/jobs/" + id + "/tasks/" + key + "/events")
			var types []string
			for _, e := range byKey {
				types = append(types, e["type"].(string))
			}
			if !slices.Equal(types, want) {
				t.Errorf("%s: events %v, want %v", key, types, want)
			}
			if len(fromLog) > 0 && !reflect.DeepEqual(byKey, fromLog) {
				t.Errorf("%s: task events\n%v\nits entries of the job's log\n%v", key, byKey, fromLog)
			}
			wantNext := int64(0)
			if len(byKey) > 0 {
				wantNext = jsonInt(t, byKey[len(byKey)-1]["id"])
			}
			if next != wantNext {
				t.Errorf("%s: nextAfter %d, want %d", key, next, wantNext)
			}
			byID, _ := a.taskEvents("/jobs/" + id + "/tasks/" + taskIn(t, job, key)["id"].(string) + "/events")
			if !reflect.DeepEqual(byID, byKey) {
				t.Errorf("%s: by global id %v, by taskId %v", key, byID, byKey)
			}
		}

		// after and limit page through them, newest last.
		all, _ := a.taskEvents("/jobs/" + id + "/tasks/scrape-store/events")
		var paged []map[string]any
		for after := int64(0); ; {
			page, next := a.taskEvents(fmt.Sprintf("/jobs/%s/tasks/scrape-store/events?after=%d&limit=2", id, after))
			if len(page) > 2 {
				t.Fatalf("a page of limit 2 has %d events", len(page))
			}
			if len(page) == 0 {
				if next != after {
					t.Errorf("empty page: nextAfter %d, want %d", next, after)
				}
				break
			}
			paged = append(paged, page...)
			after = next
		}
		if !reflect.DeepEqual(paged, all) {
			t.Errorf("paged %v, want %v", paged, all)
		}
		if last := all[len(all)-1]; last["type"] != "Task Completed" {
			t.Errorf("the newest event is not last: %v", all)
		}

		// A later event of the task shows up after the earlier ones.
		a.runTask(id, "color-tags", false)
		color, _ := a.taskEvents(fmt.Sprintf("/jobs/%s/tasks/color-tags/events?after=%d", id, jsonInt(t, log[0]["id"])))
		if len(color) != 3 || color[0]["type"] != "Task Pending" || color[2]["type"] != "Task Completed" {
			t.Errorf("color-tags after running: %v", color)
		}

		for _, q := range []string{"after=x", "after=-1", "limit=0", "limit=1001", "limit=x"} {
			res := a.do("GET", "/jobs/"+id+"/tasks/scrape-store/events?"+q, nil)
			wantStatus(t, res, http.StatusBadRequest)
		}
		other := a.createJob(exampleJob)
		otherTask := taskIn(t, a.getJob(other), "scrape-store")["id"].(string)
		for _, path := range []string{
			"/jobs/" + id + "/tasks/nope/events",
			"/jobs/" + id + "/tasks/" + otherTask + "/events", // a task of another job
		} {
			wantError(t, a.do("GET", path, nil), http.StatusNotFound, "Task not found")
		}
		wantError(t, a.do("GET", "/jobs/job-nope/tasks/scrape-store/events", nil), http.StatusNotFound, "Job not found")
		// Another tenant sees no job at all (TestTenantIsolation covers the route too).
		wantError(t, a.do("GET", "/jobs/"+id+"/tasks/scrape-store/events", nil, "x-api-key", a.newKey("other")), http.StatusNotFound, "Job not found")
	})
}
