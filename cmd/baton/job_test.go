package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

// jobTestServer is a producer API over a real SQLite store in dir (as `baton dev --data-dir dir`
// keeps it), with an API key of tenant acme, and a data database for buffered datasets' rows.
type jobTestServer struct {
	t    *testing.T
	d    *dispatch.Dispatcher
	dp   *dataplane.Plane
	url  string
	key  string
	dir  string
	data *dataset.DB
}

func newJobTestServer(t *testing.T) *jobTestServer {
	t.Helper()
	return newJobTestServerWith(t, nil)
}

// newJobTestServerWith is newJobTestServer whose data plane queries with eng (nil: none, as a
// build without cgo).
func newJobTestServerWith(t *testing.T, eng query.Engine) *jobTestServer {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	data, err := dataset.Open(context.Background(), filepath.Join(dir, dataFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Close() })
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{MaxTasksPerJob: 50, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	dp := dataplane.New(d, dataplane.Config{Tables: dataplane.DatasetDB{DB: data}, Query: eng})
	s := api.New(api.Config{Dispatcher: d, DataPlane: dp, Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Logger: quiet, EventPoll: 20 * time.Millisecond})
	srv := httptest.NewServer(s.ProducerHandler())
	t.Cleanup(srv.Close)
	_, key, err := auth.CreateKey(context.Background(), st, "test", "acme", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &jobTestServer{t: t, d: d, dp: dp, url: srv.URL, key: key, dir: dir, data: data}
}

// job runs "baton job CMD --url ... --api-key ... ARGS..." and returns its exit status and output.
func (s *jobTestServer) job(cmd string, args ...string) (int, string, string) {
	s.t.Helper()
	var stdout, stderr bytes.Buffer
	full := append([]string{cmd, "--url", s.url, "--api-key", s.key}, args...)
	code := ctl.RunJob(context.Background(), full, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// jobExample is the five-task example request (examples/job.json).
const jobExample = `{
  "tasks": [
    { "taskId": "scrape-store", "name": "scrape-store", "dependsOn": [], "input": { "storeId": "store-123", "url": "https://example.com" } },
    { "taskId": "analyze-competitors", "name": "analyze-competitors", "dependsOn": [], "input": { "market": "fashion" } },
    { "taskId": "color-tags", "name": "color-tags", "dependsOn": ["scrape-store"], "input": { "style": "modern" } },
    { "taskId": "font-pairing", "name": "font-pairing", "dependsOn": ["scrape-store"], "input": {} },
    { "taskId": "compile-result", "name": "compile-result", "dependsOn": ["color-tags", "font-pairing"], "input": {} }
  ]
}`

var jobExampleOrder = []string{"scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result"}

func jobWriteFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// submitExample submits the example job with the CLI and returns its id.
func (s *jobTestServer) submitExample() string {
	s.t.Helper()
	code, out, errOut := s.job("submit", "-f", jobWriteFile(s.t, jobExample))
	if code != 0 {
		s.t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	return strings.SplitN(out, "\n", 2)[0]
}

// jobRunTask claims the task with the given taskId and completes (or fails) it through the
// dispatcher, as a worker would; it returns errors so that it can run in a goroutine.
func jobRunTask(d *dispatch.Dispatcher, jobID, key string, fail bool) error {
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
			Outcome: store.OutcomeSucceeded, Output: json.RawMessage(`{}`)}
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

func (s *jobTestServer) runTask(jobID, key string, fail bool) {
	s.t.Helper()
	if err := jobRunTask(s.d, jobID, key, fail); err != nil {
		s.t.Fatal(err)
	}
}

// failExample drives the example job to partial_failure: scrape-store fails, its descendants are
// skipped, analyze-competitors completes.
func (s *jobTestServer) failExample(jobID string) {
	s.t.Helper()
	s.runTask(jobID, "scrape-store", true)
	s.runTask(jobID, "analyze-competitors", false)
}

func TestJobSubmit_PrintsTheJobIDAloneOnStdoutAndTheRootTasksOnStderr(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	file := jobWriteFile(t, jobExample)
	code, out, errOut := s.job("submit", "-f", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	id := strings.TrimSuffix(out, "\n")
	if strings.Contains(id, "\n") {
		t.Fatalf("stdout %q: want one line, the job id", out)
	}
	job, _, err := s.d.GetJob(context.Background(), "", id)
	if err != nil {
		t.Fatalf("stdout %q is not a job: %v", out, err)
	}
	if job.TotalTasks != 5 || !strings.Contains(errOut, "scrape-store, analyze-competitors") {
		t.Errorf("stderr %q", errOut)
	}

	// --json prints the answer; an idempotency key makes a repeat return the same job.
	code, out, errOut = s.job("submit", "-f", file, "--idempotency-key", "k1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		JobID     string   `json:"jobId"`
		Status    string   `json:"status"`
		RootTasks []string `json:"rootTasks"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.JobID == "" || res.Status != "created" || len(res.RootTasks) != 2 {
		t.Fatalf("json %q: %v", out, err)
	}
	code, out, errOut = s.job("submit", "--idempotency-key", "k1", "-f", file)
	if code != 0 || out != res.JobID+"\n" || !strings.Contains(errOut, "replayed") {
		t.Errorf("repeat: exit %d, %q, %q; want job %s replayed", code, out, errOut, res.JobID)
	}
}

// Not parallel: it swaps the package's stdin.
func TestJobSubmit_DashReadsStdin(t *testing.T) {
	old := ctl.Stdin
	ctl.Stdin = strings.NewReader(jobExample)
	t.Cleanup(func() { ctl.Stdin = old })
	s := newJobTestServer(t)
	code, out, errOut := s.job("submit", "-f", "-")
	if code != 0 || !strings.HasPrefix(out, "job-") {
		t.Errorf("exit %d, %q, %q", code, out, errOut)
	}
}

func TestJobSubmit_ValidationErrorsArePrintedAndExit1(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	bad := `{"tasks": [{"taskId": "bad id!", "name": "x"}, {"taskId": "ok", "name": ""}]}`
	code, out, errOut := s.job("submit", "-f", jobWriteFile(t, bad))
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"HTTP 400", "bad id!", "Task ok"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
	if n := strings.Count(errOut, "\n  - "); n < 2 {
		t.Errorf("stderr %q: want every validation error listed", errOut)
	}

	code, _, errOut = s.job("submit", "-f", jobWriteFile(t, `{"tasks": [{"taskId": "a", "name": "a", "dependsOn": ["nope"]}]}`))
	if code != 1 || !strings.Contains(errOut, "nope") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// Not parallel: it clears BATON_API_KEY.
func TestJob_MissingAPIKeyNamesTheVariable(t *testing.T) {
	t.Setenv("BATON_API_KEY", "")
	var stdout, stderr bytes.Buffer
	code := ctl.RunJob(context.Background(), []string{"list", "--url", "http://127.0.0.1:1"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "BATON_API_KEY") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestJob_UsageErrorsExit2(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	for _, args := range [][]string{
		{"get"},
		{"get", "a", "b"},
		{"cancel"},
		{"submit"},
		{"list", "--limit", "many"},
		{"watch", "j", "--interval", "0s"},
		{"explode"},
	} {
		code, _, errOut := s.job(args[0], args[1:]...)
		if code != 2 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := ctl.RunJob(context.Background(), nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "Usage: baton job") {
		t.Errorf("no command: exit %d, %q", code, stderr.String())
	}
}

func TestJobList_PrintsATableAndTheNextCursor(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	var ids []string
	for range 3 {
		ids = append(ids, s.submitExample())
	}
	code, out, errOut := s.job("list", "--limit", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "JOB ID") || !strings.Contains(lines[0], "CREATED") ||
		!strings.HasPrefix(lines[1], ids[2]) || !strings.Contains(lines[1], "processing") || !strings.HasPrefix(lines[2], ids[1]) ||
		!strings.HasPrefix(lines[3], "next cursor: ") {
		t.Fatalf("output:\n%s", out)
	}
	cursor := strings.TrimPrefix(lines[3], "next cursor: ")
	code, out, _ = s.job("list", "--limit", "2", "--cursor", cursor)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], ids[0]) || strings.Contains(out, "next cursor") {
		t.Errorf("last page: exit %d\n%s", code, out)
	}

	code, out, _ = s.job("list", "--status", "completed")
	if code != 0 || strings.TrimSpace(out) != "no jobs" {
		t.Errorf("completed: exit %d, %q", code, out)
	}
	code, _, errOut = s.job("list", "--status", "sleeping")
	if code != 1 || !strings.Contains(errOut, "status must be one of") {
		t.Errorf("bad status: exit %d, %q", code, errOut)
	}

	code, out, _ = s.job("list", "--json")
	var page struct {
		Jobs []struct {
			JobID string `json:"jobId"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Jobs) != 3 {
		t.Errorf("json: exit %d, %v, %q", code, err, out)
	}
}

func TestJobGet_PrintsStatusCountsAndTasks(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	id := s.submitExample()
	s.runTask(id, "scrape-store", false)
	code, out, errOut := s.job("get", id)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Job:", id, "Status:", "processing",
		"Tasks:", "5 (waiting 1, pending 3, completed 1)",
		"TASK", "STATUS", "ATTEMPT", "LAST EVENT",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var scrape string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "scrape-store ") {
			scrape = l
		}
	}
	if f := strings.Fields(scrape); len(f) < 5 || f[1] != "completed" || f[2] != "1" || !strings.Contains(scrape, "Task Completed at ") {
		t.Errorf("scrape-store row %q", scrape)
	}

	// Flags may follow the id.
	code, out, _ = s.job("get", id, "--json")
	var job struct {
		JobID    string         `json:"jobId"`
		Progress map[string]int `json:"progress"`
	}
	if err := json.Unmarshal([]byte(out), &job); code != 0 || err != nil || job.JobID != id || job.Progress["completed"] != 1 {
		t.Errorf("json: exit %d, %v, %q", code, err, out)
	}

	code, out, errOut = s.job("get", "job-nope")
	if code != 1 || out != "" || !strings.Contains(errOut, "Job not found") || !strings.Contains(errOut, "404") {
		t.Errorf("unknown job: exit %d, %q, %q", code, out, errOut)
	}
}

func TestJobCancel_CancelsAProcessingJob(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	id := s.submitExample()
	code, out, errOut := s.job("cancel", id)
	if code != 0 || out != fmt.Sprintf("job %s: canceled\n", id) {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	job, _, err := s.d.GetJob(context.Background(), "", id)
	if err != nil || job.Status != lifecycle.JobCanceled {
		t.Fatalf("job %+v, %v", job, err)
	}
	code, _, errOut = s.job("cancel", id)
	if code != 1 || !strings.Contains(errOut, "Job already finished") || !strings.Contains(errOut, "409") {
		t.Errorf("again: exit %d, %q", code, errOut)
	}
}

func TestJobResume_RerunsAFailedJob(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	id := s.submitExample()
	code, _, errOut := s.job("resume", id)
	if code != 1 || !strings.Contains(errOut, "still processing") {
		t.Errorf("processing job: exit %d, %q", code, errOut)
	}
	s.failExample(id)
	code, out, errOut := s.job("resume", id)
	if code != 0 || !strings.Contains(out, "processing; resumed 4 tasks") || !strings.Contains(out, "scrape-store") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	if job, _, _ := s.d.GetJob(context.Background(), "", id); job.Status != lifecycle.JobProcessing {
		t.Errorf("job status %s", job.Status)
	}
}

func TestJobWatch_ExitsZeroWhenTheJobCompletes(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	id := s.submitExample()
	go func() {
		for _, k := range jobExampleOrder {
			time.Sleep(40 * time.Millisecond)
			if err := jobRunTask(s.d, id, k, false); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	code, out, errOut := s.job("watch", id, "--interval", "10ms")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Not a terminal: one line per change, no carriage returns, then the final counts. The bar is
	// 30 cells wide.
	if strings.Contains(out, "\r") || len(lines) < 3 {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.HasPrefix(lines[0], "[") || !strings.Contains(lines[0], "0/5 done") {
		t.Errorf("first line %q", lines[0])
	}
	if want := "[" + strings.Repeat("=", 30) + "] 5/5 done: completed 5"; lines[len(lines)-2] != want {
		t.Errorf("last progress line %q, want %q", lines[len(lines)-2], want)
	}
	if want := fmt.Sprintf("job %s completed: completed 5", id); lines[len(lines)-1] != want {
		t.Errorf("final line %q, want %q", lines[len(lines)-1], want)
	}
	for i := 1; i < len(lines)-1; i++ {
		if lines[i] == lines[i-1] {
			t.Errorf("line %d repeats %q", i, lines[i])
		}
	}
}

func TestJobWatch_ExitsOneWhenTheJobFails(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	id := s.submitExample()
	s.failExample(id)
	code, out, errOut := s.job("watch", id)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("job %s partial_failure: completed 1, failed 1, skipped 3", id)) {
		t.Errorf("exit %d, %q, %q", code, out, errOut)
	}
	code, _, errOut = s.job("watch", "job-nope")
	if code != 1 || !strings.Contains(errOut, "Job not found") {
		t.Errorf("unknown job: exit %d, %q", code, errOut)
	}
}
