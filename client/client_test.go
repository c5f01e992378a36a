package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// server is a producer API over a real SQLite store, and a client of it with a key of tenant acme.
type server struct {
	t   *testing.T
	d   *dispatch.Dispatcher
	url string
	c   *client.Client
}

func newServer(t *testing.T, limits auth.Limits) *server {
	t.Helper()
	return newServerWith(t, limits, dataplane.Config{})
}

// newServerWith is newServer with a data plane of its own configuration (a query engine).
func newServerWith(t *testing.T, limits auth.Limits, dpc dataplane.Config) *server {
	t.Helper()
	st := storetest.OpenSQLite(t)
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{MaxTasksPerJob: 50, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dpc), Auth: auth.NewAuthenticator(st, limits, nil), Logger: quiet, EventPoll: 20 * time.Millisecond})
	srv := httptest.NewServer(s.ProducerHandler())
	t.Cleanup(srv.Close)
	_, key, err := auth.CreateKey(context.Background(), st, "test", "acme", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &server{t: t, d: d, url: srv.URL, c: client.New(srv.URL, key)}
}

// exampleJob is the five-task example request (examples/job.json).
const exampleJob = `{
  "tasks": [
    { "taskId": "scrape-store", "name": "scrape-store", "dependsOn": [], "input": { "storeId": "store-123", "url": "https://example.com" } },
    { "taskId": "analyze-competitors", "name": "analyze-competitors", "dependsOn": [], "input": { "market": "fashion" } },
    { "taskId": "color-tags", "name": "color-tags", "dependsOn": ["scrape-store"], "input": { "style": "modern" } },
    { "taskId": "font-pairing", "name": "font-pairing", "dependsOn": ["scrape-store"], "input": {} },
    { "taskId": "compile-result", "name": "compile-result", "dependsOn": ["color-tags", "font-pairing"], "input": {} }
  ]
}`

var exampleOrder = []string{"scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result"}

func (s *server) submitExample() string {
	s.t.Helper()
	res, err := s.c.SubmitJobJSON(context.Background(), []byte(exampleJob))
	if err != nil {
		s.t.Fatal(err)
	}
	return res.JobID
}

// runTask claims the task with the given taskId and completes (or fails) it through the
// dispatcher, as a worker would. It returns errors rather than failing the test so that it can
// run in a goroutine.
func runTask(d *dispatch.Dispatcher, jobID, key string, fail bool) error {
	ctx := context.Background()
	_, tasks, err := d.GetJob(ctx, "", jobID)
	if err != nil {
		return err
	}
	for _, tk := range tasks {
		if tk.Key != key {
			continue
		}
		c, err := d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: tk.ID, WorkerID: "test-worker"})
		if err != nil {
			return fmt.Errorf("claim %s: %w", key, err)
		}
		p := dispatch.CompleteParams{TaskID: tk.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Output: json.RawMessage(`{"done":"` + key + `"}`)}
		if fail {
			p.Outcome, p.Error = store.OutcomeFailed, &store.TaskError{Category: "DATA_QUALITY", Message: "bad input"}
		}
		if _, err := d.Complete(ctx, p); err != nil {
			return fmt.Errorf("complete %s: %w", key, err)
		}
		return nil
	}
	return fmt.Errorf("no task %s in %s", key, jobID)
}

func (s *server) run(jobID string, keys ...string) {
	s.t.Helper()
	for _, k := range keys {
		if err := runTask(s.d, jobID, k, false); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *server) fail(jobID, key string) {
	s.t.Helper()
	if err := runTask(s.d, jobID, key, true); err != nil {
		s.t.Fatal(err)
	}
}

func apiError(t *testing.T, err error, status int) *client.APIError {
	t.Helper()
	var e *client.APIError
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *APIError", err, err)
	}
	if e.Status != status {
		t.Fatalf("status %d (%s), want %d", e.Status, e.Message, status)
	}
	return e
}

func ptr[T any](v T) *T { return &v }

func TestSubmitJob_CreatesTheJobWithEveryTaskField(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	res, err := s.c.SubmitJob(ctx, client.SubmitJobRequest{Name: "nightly", Tasks: []client.Task{
		{TaskID: "a", Name: "extract", Input: json.RawMessage(`{"n":1}`), Queue: "etl", Priority: 7, Runtime: "pull",
			MaxAttempts: ptr(5), BackoffBaseMs: ptr[int64](100), BackoffMaxMs: ptr[int64](1000),
			TimeoutSeconds: ptr(60), HeartbeatTimeoutSeconds: ptr(30), CancelGraceSeconds: ptr(10)},
		{TaskID: "b", Name: "load", DependsOn: []string{"a"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.JobID == "" || res.Status != "created" || res.TotalTasks != 2 || !slices.Equal(res.RootTasks, []string{"a"}) || res.CreatedAt == 0 || res.Replayed {
		t.Fatalf("response %+v", res)
	}
	task, err := s.c.GetTask(ctx, res.JobID, "a")
	if err != nil {
		t.Fatal(err)
	}
	if task.Queue != "etl" || task.Priority != 7 || task.Runtime != "pull" || task.MaxAttempts != 5 || string(task.Input) != `{"n":1}` || task.Status != client.TaskPending {
		t.Errorf("task %+v", task)
	}
	job, err := s.c.GetJob(ctx, res.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "nightly" {
		t.Errorf("job name %q", job.Name)
	}
}

func TestSubmitJobJSON_IdempotencyKeyReplaysTheSameJob(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	first, err := s.c.SubmitJobJSON(ctx, []byte(exampleJob), client.WithIdempotencyKey("k-1"))
	if err != nil {
		t.Fatal(err)
	}
	if first.TotalTasks != 5 || !slices.Equal(first.RootTasks, []string{"scrape-store", "analyze-competitors"}) || first.Replayed {
		t.Fatalf("first %+v", first)
	}
	again, err := s.c.SubmitJobJSON(ctx, []byte(exampleJob), client.WithIdempotencyKey("k-1"))
	if err != nil {
		t.Fatal(err)
	}
	if again.JobID != first.JobID || !again.Replayed {
		t.Errorf("replay %+v, want job %s replayed", again, first.JobID)
	}
	// The body is sent verbatim, so the same tasks in other bytes are another request.
	_, err = s.c.SubmitJobJSON(ctx, []byte(strings.ReplaceAll(exampleJob, "\n", "")), client.WithIdempotencyKey("k-1"))
	apiError(t, err, http.StatusUnprocessableEntity)
}

func TestSubmitJob_ValidationFailuresAreAnAPIErrorWithEveryMessage(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	_, err := s.c.SubmitJob(context.Background(), client.SubmitJobRequest{Tasks: []client.Task{
		{TaskID: "bad id!", Name: "x"},
		{TaskID: "ok", Name: ""},
	}})
	e := apiError(t, err, http.StatusBadRequest)
	if len(e.Errors) < 2 || e.Message != e.Errors[0] {
		t.Fatalf("message %q, errors %q: want every validation failure", e.Message, e.Errors)
	}
	for _, m := range e.Errors {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("Error() %q lacks %q", err.Error(), m)
		}
	}
}

func TestSubmitJobJSON_MalformedBodyIsAnAPIError(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	_, err := s.c.SubmitJobJSON(context.Background(), []byte(`{"tasks": [`))
	if e := apiError(t, err, http.StatusBadRequest); !strings.Contains(e.Message, "malformed JSON") {
		t.Errorf("message %q", e.Message)
	}
}

func TestUnknownJobAndTaskAreNotFound(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	_, err := s.c.GetJob(ctx, "job-nope")
	if !client.IsNotFound(err) || apiError(t, err, 404).Message != "Job not found" {
		t.Errorf("GetJob: %v", err)
	}
	job := s.submitExample()
	if _, err := s.c.GetTask(ctx, job, "nope"); !client.IsNotFound(err) {
		t.Errorf("GetTask: %v", err)
	}
	if _, err := s.c.CancelJob(ctx, "job-nope"); !client.IsNotFound(err) {
		t.Errorf("CancelJob: %v", err)
	}
	if client.IsNotFound(errors.New("404")) || client.IsNotFound(nil) {
		t.Error("IsNotFound of a non-API error")
	}
}

func TestBadAPIKeyIsUnauthorized(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	_, err := client.New(s.url, "not-a-key").ListJobs(context.Background(), client.ListOptions{})
	if e := apiError(t, err, http.StatusUnauthorized); e.Message != "invalid API key" {
		t.Errorf("message %q", e.Message)
	}
}

func TestNetworkErrorsAreWrapped(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := client.New(url, "k").GetJob(context.Background(), "j")
	var e *client.APIError
	if err == nil || errors.As(err, &e) || !strings.Contains(err.Error(), "GET /jobs/j") {
		t.Errorf("error %v, want a wrapped network error naming the request", err)
	}
}

func TestAddTasks_ExtendsAProcessingJob(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	job := s.submitExample()
	s.run(job, "scrape-store")
	res, err := s.c.AddTasks(ctx, job, []client.Task{
		{TaskID: "extra-analysis", Name: "market-analysis", DependsOn: []string{"scrape-store"}, Input: json.RawMessage(`{"depth":"detailed"}`)},
		{TaskID: "final-report", Name: "compile-report", DependsOn: []string{"extra-analysis", "compile-result"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.JobID != job || res.TotalTasksNow != 7 || !slices.Equal(res.AddedTasks, []string{"extra-analysis", "final-report"}) ||
		!slices.Equal(res.ImmediatelyReady, []string{"extra-analysis"}) {
		t.Errorf("response %+v", res)
	}
	_, err = s.c.AddTasks(ctx, job, []client.Task{{TaskID: "extra-analysis", Name: "again"}})
	apiError(t, err, http.StatusBadRequest)
}

func TestGetJob_ShowsProgressAndTasks(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	job := s.submitExample()
	s.run(job, "scrape-store")
	got, err := s.c.GetJob(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if got.JobID != job || got.Status != client.JobProcessing || got.Finished() || got.TotalTasks != 5 || got.CompletedAt != nil || got.CreatedAt == 0 {
		t.Fatalf("job %+v", got)
	}
	want := map[string]int{"waiting": 1, "pending": 3, "processing": 0, "completed": 1, "failed": 0, "canceled": 0, "skipped": 0}
	for st, n := range want {
		if got.Progress[st] != n {
			t.Errorf("progress %v, want %v", got.Progress, want)
			break
		}
	}
	if len(got.Tasks) != 5 {
		t.Fatalf("%d tasks", len(got.Tasks))
	}
	for _, tk := range got.Tasks {
		if tk.TaskID == "scrape-store" {
			if tk.Status != client.TaskCompleted || tk.Attempt != 1 || tk.LastEventType != "Task Completed" || tk.LastEventAt == nil || tk.ID == "" ||
				string(tk.Output) != `{"done":"scrape-store"}` || tk.Error != nil {
				t.Errorf("scrape-store %+v", tk)
			}
		}
		if tk.TaskID == "compile-result" && (tk.Status != client.TaskWaiting || !slices.Equal(tk.DependsOn, []string{"color-tags", "font-pairing"}) ||
			string(tk.Output) != "null" || tk.Error != nil) {
			t.Errorf("compile-result %+v", tk)
		}
	}
}

func TestListJobs_PagesNewestFirstAndFiltersByStatus(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	var ids []string
	for range 3 {
		ids = append(ids, s.submitExample())
	}
	s.run(ids[0], exampleOrder...)

	page, err := s.c.ListJobs(ctx, client.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 2 || page.Jobs[0].JobID != ids[2] || page.Jobs[1].JobID != ids[1] || page.NextCursor == "" {
		t.Fatalf("first page %+v", page)
	}
	if j := page.Jobs[0]; j.Status != client.JobProcessing || j.TotalTasks != 5 || j.CreatedAt == 0 {
		t.Errorf("summary %+v", j)
	}
	page, err = s.c.ListJobs(ctx, client.ListOptions{Limit: 2, Cursor: page.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].JobID != ids[0] || page.NextCursor != "" {
		t.Fatalf("last page %+v", page)
	}
	page, err = s.c.ListJobs(ctx, client.ListOptions{Status: client.JobCompleted})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].JobID != ids[0] || page.Jobs[0].Status != client.JobCompleted {
		t.Errorf("completed jobs %+v", page.Jobs)
	}
	_, err = s.c.ListJobs(ctx, client.ListOptions{Status: "sleeping"})
	apiError(t, err, http.StatusBadRequest)
}

func TestGetTask_ShowsAttemptsAndOutputs(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	job := s.submitExample()
	s.run(job, "scrape-store")
	task, err := s.c.GetTask(ctx, job, "scrape-store")
	if err != nil {
		t.Fatal(err)
	}
	if task.JobID != job || task.TaskID != "scrape-store" || task.Status != client.TaskCompleted || string(task.Output) != `{"done":"scrape-store"}` ||
		task.AttemptsUsed != 1 || task.FinishedAt == nil || task.Error != nil {
		t.Fatalf("task %+v", task)
	}
	if len(task.Attempts) != 1 {
		t.Fatalf("attempts %+v", task.Attempts)
	}
	if a := task.Attempts[0]; a.Attempt != 1 || a.WorkerID != "test-worker" || a.Outcome != "succeeded" || a.Result != client.TaskCompleted || a.FinishedAt == nil || a.StartedAt == 0 {
		t.Errorf("attempt %+v", a)
	}
	// By global id too, and a child sees its parent's output.
	child, err := s.c.GetTask(ctx, job, "color-tags")
	if err != nil {
		t.Fatal(err)
	}
	byID, err := s.c.GetTask(ctx, job, child.ID)
	if err != nil || byID.TaskID != "color-tags" {
		t.Fatalf("by id: %+v, %v", byID, err)
	}
	if string(child.DependencyOutputs["scrape-store"]) != `{"done":"scrape-store"}` || string(child.Output) != "null" {
		t.Errorf("child outputs %s / %s", child.DependencyOutputs, child.Output)
	}

	s.fail(job, "analyze-competitors")
	failed, err := s.c.GetTask(ctx, job, "analyze-competitors")
	if err != nil {
		t.Fatal(err)
	}
	if failed.Status != client.TaskFailed || failed.Error == nil || failed.Error.Category != "DATA_QUALITY" || failed.Error.Message != "bad input" {
		t.Errorf("failed task %+v (error %+v)", failed, failed.Error)
	}
}

func TestCancelJob_CancelsAndRefusesAFinishedJob(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	job := s.submitExample()
	res, err := s.c.CancelJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.JobID != job || res.Status != client.JobCanceled || res.CancelRequestedAt == nil || res.CompletedAt == nil {
		t.Errorf("cancel %+v", res)
	}
	_, err = s.c.CancelJob(ctx, job)
	apiError(t, err, http.StatusConflict)
}

func TestResumeJob_SendsFailedAndSkippedTasksBack(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	job := s.submitExample()
	_, err := s.c.ResumeJob(ctx, job)
	apiError(t, err, http.StatusConflict) // still processing

	s.fail(job, "scrape-store")
	s.run(job, "analyze-competitors")
	res, err := s.c.ResumeJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.ResumedTasks)
	if res.Status != client.JobProcessing || !slices.Equal(res.ResumedTasks, []string{"color-tags", "compile-result", "font-pairing", "scrape-store"}) {
		t.Errorf("resume %+v", res)
	}
}

func TestEvents_PagesTheAuditLog(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	job := s.submitExample()
	events, next, err := s.c.Events(ctx, job, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[0].Type != "Job Created" || events[0].TaskID != "" || next != events[len(events)-1].ID {
		t.Fatalf("events %+v, next %d", events, next)
	}
	s.run(job, "scrape-store")
	more, next2, err := s.c.Events(ctx, job, next)
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 || more[0].ID <= next || next2 != more[len(more)-1].ID {
		t.Fatalf("more %+v, next %d", more, next2)
	}
	var types []string
	for _, e := range more {
		types = append(types, e.Type)
		if e.At == 0 || len(e.Data) == 0 {
			t.Errorf("event %+v", e)
		}
	}
	if !slices.Contains(types, "Task Completed") {
		t.Errorf("types %q", types)
	}
	none, same, err := s.c.Events(ctx, job, next2)
	if err != nil || len(none) != 0 || same != next2 {
		t.Errorf("nothing new: %v, %d, %v", none, same, err)
	}
	if _, _, err := s.c.Events(ctx, "job-nope", 0); !client.IsNotFound(err) {
		t.Errorf("unknown job: %v", err)
	}
}

func TestStreamEvents_EndsWhenTheJobCompletes(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job := s.submitExample()
	go func() {
		for _, k := range exampleOrder {
			time.Sleep(30 * time.Millisecond)
			if err := runTask(s.d, job, k, false); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var events []client.Event
	err := s.c.StreamEvents(ctx, job, 0, func(e client.Event) error {
		events = append(events, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[0].Type != "Job Created" || events[len(events)-1].Type != "Job Completed" {
		t.Fatalf("events %+v", events)
	}
	completed := 0
	for i, e := range events {
		if i > 0 && e.ID <= events[i-1].ID {
			t.Errorf("event %d after %d", e.ID, events[i-1].ID)
		}
		if e.Type == "Task Completed" {
			completed++
		}
	}
	if completed != 5 {
		t.Errorf("%d Task Completed events", completed)
	}

	// Resuming after an id skips what came before it.
	var tail []client.Event
	after := events[len(events)-3].ID
	if err := s.c.StreamEvents(ctx, job, after, func(e client.Event) error { tail = append(tail, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(tail) != 2 || tail[0].ID != events[len(events)-2].ID {
		t.Errorf("tail %+v", tail)
	}
}

func TestStreamEvents_StopsWithTheCallbacksError(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	job := s.submitExample() // never finishes: only the callback can stop the stream
	stop := errors.New("seen enough")
	err := s.c.StreamEvents(context.Background(), job, 0, func(e client.Event) error { return stop })
	if err != stop {
		t.Errorf("error %v, want the callback's", err)
	}
	if err := s.c.StreamEvents(context.Background(), "job-nope", 0, nil); !client.IsNotFound(err) {
		t.Errorf("unknown job: %v", err)
	}
}

func TestStreamEvents_ContextCancelStops(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	job := s.submitExample()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.c.StreamEvents(ctx, job, 0, func(client.Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the context's", err)
	}
}

func TestWatch_PollsUntilTheJobFinishes(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job := s.submitExample()
	go func() {
		for _, k := range exampleOrder {
			time.Sleep(30 * time.Millisecond)
			if err := runTask(s.d, job, k, false); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	polls := 0
	final, err := s.c.Watch(ctx, job, 10*time.Millisecond, func(j *client.Job) { polls++ })
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != client.JobCompleted || final.Progress[client.TaskCompleted] != 5 || final.CompletedAt == nil || polls < 2 {
		t.Errorf("final %+v after %d polls", final, polls)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.c.Watch(ctx, s.submitExample(), 10*time.Millisecond, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("watch of a job that never ends: %v", err)
	}
}

// With a rate limit of one request a second, a second request at once is refused with 429 and a
// Retry-After of one second.
func TestRateLimit_GetsAndKeyedSubmissionsAreRetriedOtherPostsAreNot(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{RatePerSecond: 1, Burst: 1})
	ctx := context.Background()

	job := s.submitExample()
	start := time.Now()
	if _, err := s.c.GetJob(ctx, job); err != nil {
		t.Fatalf("GET not retried: %v", err)
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Errorf("GET came back after %v: it did not wait for Retry-After", time.Since(start))
	}

	_, err := s.c.SubmitJobJSON(ctx, []byte(exampleJob))
	if e := apiError(t, err, http.StatusTooManyRequests); e.RetryAfter != time.Second {
		t.Errorf("RetryAfter %v", e.RetryAfter)
	}

	if _, err := s.c.SubmitJobJSON(ctx, []byte(exampleJob), client.WithIdempotencyKey("k")); err != nil {
		t.Errorf("keyed submission not retried: %v", err)
	}
}

// stub answers every request with handler and counts them.
func stub(t *testing.T, handler http.HandlerFunc) (string, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

func TestRetry_GivesUpAfterThreeTries(t *testing.T) {
	t.Parallel()
	url, n := stub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":"rate limit exceeded"}`)
	})
	_, err := client.New(url, "k").ListJobs(context.Background(), client.ListOptions{})
	if e := apiError(t, err, http.StatusTooManyRequests); e.Message != "rate limit exceeded" {
		t.Errorf("message %q", e.Message)
	}
	if n.Load() != 3 {
		t.Errorf("%d tries, want 3", n.Load())
	}
}

// A 503 (the server's database unavailable for a moment) is retried like a 429, and only where
// repeating the request is safe.
func TestRetry_ServiceUnavailableIsRetried(t *testing.T) {
	t.Parallel()
	var tries atomic.Int32
	url, n := stub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if tries.Add(1) < 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"The database is unavailable; try again later"}`)
			return
		}
		io.WriteString(w, `{"jobId":"j","status":"processing","progress":{}}`)
	})
	if _, err := client.New(url, "k").GetJob(context.Background(), "j"); err != nil {
		t.Fatalf("GET after two 503s: %v", err)
	}
	if n.Load() != 3 {
		t.Errorf("GET: %d tries, want 3", n.Load())
	}
	// A submission without an idempotency key is not repeated.
	tries.Store(0)
	n.Store(0)
	_, err := client.New(url, "k").SubmitJob(context.Background(), client.SubmitJobRequest{})
	if e := apiError(t, err, http.StatusServiceUnavailable); e.Message != "The database is unavailable; try again later" {
		t.Errorf("message %q", e.Message)
	}
	if n.Load() != 1 {
		t.Errorf("POST without an idempotency key: %d tries, want 1", n.Load())
	}
}

func TestRetry_WaitEndsWithTheContext(t *testing.T) {
	t.Parallel()
	// The context ends once the first try was answered (not after a fixed time, which a loaded
	// machine may spend before the first try): the client, told to wait 30 s, must stop waiting.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, n := stub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
		time.AfterFunc(50*time.Millisecond, cancel)
	})
	start := time.Now()
	_, err := client.New(url, "k").GetJob(ctx, "j")
	if !errors.Is(err, context.Canceled) || time.Since(start) > 20*time.Second || n.Load() != 1 {
		t.Errorf("error %v after %v and %d tries", err, time.Since(start), n.Load())
	}
}

func TestRetry_ALongRetryAfterIsReturnedAtOnce(t *testing.T) {
	t.Parallel()
	url, n := stub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "quota")
	})
	_, err := client.New(url, "k").GetJob(context.Background(), "j")
	if e := apiError(t, err, http.StatusTooManyRequests); e.RetryAfter != time.Hour || e.Message != "quota" || n.Load() != 1 {
		t.Errorf("error %+v after %d tries", e, n.Load())
	}
}

func TestOptions_SetTheHTTPClientAndUserAgent(t *testing.T) {
	t.Parallel()
	var ua, key, path atomic.Value
	url, _ := stub(t, func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.UserAgent())
		key.Store(r.Header.Get("x-api-key"))
		path.Store(r.URL.EscapedPath())
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jobId":"j/1","status":"processing","progress":{}}`)
	})
	used := false
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	c := client.New(url+"/", "secret", client.WithHTTPClient(hc), client.WithUserAgent("batonctl/1"))
	job, err := c.GetJob(context.Background(), "j/1")
	if err != nil {
		t.Fatal(err)
	}
	if job.JobID != "j/1" || !used || ua.Load() != "batonctl/1" || key.Load() != "secret" || path.Load() != "/jobs/j%2F1" {
		t.Errorf("job %+v, custom client used %v, user agent %v, key %v, path %v", job, used, ua.Load(), key.Load(), path.Load())
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// withWidth is pipelinetest.BuildDoc with ranges' config changed.
func withWidth(n int) []byte { return []byte(pipelinetest.BuildDocWidth(n)) }

func TestPipelineBuilds_DeployActivateAndAbandon(t *testing.T) {
	t.Parallel()
	s := newServer(t, auth.Limits{})
	ctx := context.Background()
	const yaml = "application/yaml"
	v1, err := s.c.DeployPipeline(ctx, []byte(pipelinetest.BuildDoc), yaml)
	if err != nil || v1.State != client.DeployActive || v1.BuildingVersion != nil || v1.Build != nil {
		t.Fatalf("first deploy: %+v %v", v1, err)
	}
	if _, err := s.c.DeployPipeline(ctx, withWidth(2), yaml, client.WithActivate("later")); apiError(t, err, http.StatusBadRequest).Message !=
		`activate must be manual, when_ready or immediate, got "later"` {
		t.Errorf("an unknown activate mode: %v", err)
	}

	// A changed config: built beside v1, by the default (manual) mode.
	v2, err := s.c.DeployPipeline(ctx, withWidth(2), yaml)
	if err != nil || v2.State != client.BuildBuilding || v2.Activated || v2.ActiveVersion != v1.Version || v2.Build == nil {
		t.Fatalf("changed deploy: %+v %v", v2, err)
	}
	b := v2.Build
	if b.Version != v2.Version || b.BaseVersion != v1.Version || b.Activate != client.ActivateManual || b.Ready() ||
		len(b.Jobs) != 2 || b.Jobs[0].Name != "ranges" || b.Jobs[0].Reason != "config changed" || b.Jobs[1].Counts["routed"] != 0 ||
		len(b.Datasets) != 1 || b.Datasets[0].DatasetName != "ranges" || b.Datasets[0].CandidateVersion == b.Datasets[0].CurrentVersion {
		t.Fatalf("build: %+v", b)
	}
	p, err := s.c.GetPipeline(ctx, "chain")
	if err != nil || p.BuildingVersion == nil || *p.BuildingVersion != v2.Version || p.Build == nil || p.Build.State != client.BuildBuilding {
		t.Fatalf("get: %+v %v", p, err)
	}
	vs, err := s.c.PipelineVersions(ctx, "chain")
	if err != nil || len(vs) != 2 || vs[0].State != client.VersionBuilding || vs[1].State != client.VersionActive {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	if _, err := s.c.ActivatePipelineVersion(ctx, "chain", v2.Version, false); !strings.Contains(apiError(t, err, http.StatusConflict).Message, "still building") {
		t.Errorf("activate a build that is not ready: %v", err)
	}
	if _, err := s.c.ActivatePipelineVersion(ctx, "chain", "nope", false); !client.IsNotFound(err) {
		t.Errorf("activate an unknown version: %v", err)
	}

	// A newer change replaces the build, which is abandoned.
	v3, err := s.c.DeployPipeline(ctx, withWidth(3), yaml, client.WithActivate(client.ActivateWhenReady))
	if err != nil || v3.State != client.BuildBuilding || v3.Abandoned == nil || v3.Abandoned.Version != v2.Version || v3.Build.Activate != client.ActivateWhenReady {
		t.Fatalf("deploy over a build: %+v %v", v3, err)
	}
	ab, err := s.c.AbandonPipelineVersion(ctx, "chain", v3.Version)
	if err != nil || ab.State != client.VersionAbandoned || ab.Version != v3.Version {
		t.Fatalf("abandon: %+v %v", ab, err)
	}
	if _, err := s.c.AbandonPipelineVersion(ctx, "chain", v3.Version); !strings.Contains(apiError(t, err, http.StatusConflict).Message, "was abandoned") {
		t.Errorf("abandon twice: %v", err)
	}

	// Forced, a build is activated before it is ready.
	v4, err := s.c.DeployPipeline(ctx, withWidth(4), yaml)
	if err != nil || v4.State != client.BuildBuilding {
		t.Fatalf("deploy: %+v %v", v4, err)
	}
	act, err := s.c.ActivatePipelineVersion(ctx, "chain", v4.Version, true)
	if err != nil || !act.Activated || act.ActiveVersion != v4.Version {
		t.Fatalf("activate with force: %+v %v", act, err)
	}
	vs, err = s.c.PipelineVersions(ctx, "chain")
	states := map[string]string{}
	for _, v := range vs {
		states[v.Version] = v.State
	}
	want := map[string]string{v1.Version: client.VersionInactive, v2.Version: client.VersionAbandoned, v3.Version: client.VersionAbandoned, v4.Version: client.VersionActive}
	if err != nil || !maps.Equal(states, want) {
		t.Errorf("versions: %v %v, want %v", states, err, want)
	}
}
