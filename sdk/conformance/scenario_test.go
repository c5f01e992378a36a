package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/buildtest"
)

// run is one SDK's run of the scenario against one server.
type run struct {
	t    *testing.T // the SDK's test, which its workers outlive no step of
	h    *harness
	srv  *server
	sdk  *sdk
	argv []string // the conformance program
	env  []string // its extra environment
	dir  string
	// markers is BATON_CONFORMANCE_DIR, where the handlers leave their marker files.
	markers string

	mu      sync.Mutex
	workers int             // started so far, for their ids
	worker  *buildtest.Proc // the worker the sequential steps act on
}

// scenario runs the steps of README.md as subtests, in three phases, each in step with the other
// SDKs' scenarios: first dag, retry and pipeline, which start programs and run queries, at once;
// then heartbeats and cancel, whose leases a busy machine could break, at once; then kill, refused
// and sigterm, which kill, stop and end their worker, one after another. The steps of the first
// two phases share one worker.
func (r *run) scenario(t *testing.T) {
	r.worker = r.startWorker(t)
	r.together(t, map[string]func(*testing.T){"dag": r.dag, "retry": r.retry, "pipeline": r.pipeline})
	r.h.phases.next()
	r.together(t, map[string]func(*testing.T){"heartbeats": r.heartbeats, "cancel": r.cancel})
	r.h.phases.next()
	t.Run("kill", r.kill)
	t.Run("refused", r.refused)
	t.Run("sigterm", r.sigterm)
}

// together runs steps as subtests at once.
func (r *run) together(t *testing.T, steps map[string]func(*testing.T)) {
	var wg sync.WaitGroup
	for name, fn := range steps {
		wg.Go(func() { t.Run(name, fn) })
	}
	wg.Wait()
}

// startWorker starts a worker of the SDK's conformance program; it is stopped when the SDK's
// test ends, after every step.
func (r *run) startWorker(t *testing.T) *buildtest.Proc {
	t.Helper()
	r.mu.Lock()
	r.workers++
	id := fmt.Sprintf("conf-%s-%s-%d", r.srv.store, r.sdk.name, r.workers)
	r.mu.Unlock()
	env := append(append(r.srv.env(), r.env...), "BATON_CONFORMANCE_QUEUE="+r.sdk.queue(),
		"BATON_CONFORMANCE_DIR="+r.markers, "BATON_WORKER_ID="+id)
	cmd := exec.Command(r.argv[0], append(r.argv[1:], "worker")...)
	cmd.Dir = r.h.root
	return startProc(t, r.t, "worker "+id, cmd, env)
}

// liveWorker is the worker of the sequential steps, started anew if the last one is gone.
func (r *run) liveWorker(t *testing.T) *buildtest.Proc {
	t.Helper()
	if r.worker == nil || r.worker.Exited() {
		r.worker = r.startWorker(t)
	}
	return r.worker
}

// producer runs the SDK's producer program on job, expects its exit status, and returns the job
// view it printed.
func (r *run) producer(t *testing.T, name string, job map[string]any, wantExit int) *client.Job {
	t.Helper()
	doc, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(r.dir, name+".json")
	if err := os.WriteFile(file, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.argv[0], append(r.argv[1:], "producer", file)...)
	cmd.Dir = r.h.root
	cmd.Env = append(append(append(os.Environ(), r.srv.env()...), r.env...), "BATON_CONFORMANCE_QUEUE="+r.sdk.queue())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() >= 0 {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("producer %s: %v\nstdout:\n%s\nstderr:\n%s", file, err, stdout.String(), stderr.String())
	}
	if code != wantExit {
		t.Fatalf("producer %s exited %d, want %d\nstdout:\n%s\nstderr:\n%s", file, code, wantExit, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var view client.Job
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &view); err != nil || view.JobID == "" {
		t.Fatalf("producer %s printed no job view as its last line (%v)\nstdout:\n%s\nstderr:\n%s", file, err, stdout.String(), stderr.String())
	}
	// The view is the server's: the job as GET /jobs/{jobId} answers it now.
	if got := r.job(t, view.JobID); got.Status != view.Status {
		t.Fatalf("producer printed job %s as %s, the server has it %s", view.JobID, view.Status, got.Status)
	}
	return &view
}

// task is a task of the scenario in the producer API's shape: queue and input are the SDK's.
func (r *run) task(key, name string, input any, extra map[string]any) map[string]any {
	m := map[string]any{"taskId": key, "name": name, "queue": r.sdk.queue(), "input": input}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// submit submits a job of tasks through the client and returns its id.
func (r *run) submit(t *testing.T, name string, tasks ...map[string]any) string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "tasks": tasks})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.srv.c.SubmitJobJSON(context.Background(), body)
	if err != nil {
		t.Fatalf("submit %s: %v", name, err)
	}
	return res.JobID
}

func (r *run) job(t *testing.T, id string) *client.Job {
	t.Helper()
	j, err := r.srv.c.GetJob(context.Background(), id)
	if err != nil {
		t.Fatalf("get job %s: %v", id, err)
	}
	return j
}

func (r *run) taskDetail(t *testing.T, jobID, key string) *client.TaskDetail {
	t.Helper()
	d, err := r.srv.c.GetTask(context.Background(), jobID, key)
	if err != nil {
		t.Fatalf("get task %s of job %s: %v", key, jobID, err)
	}
	return d
}

// waitJob waits until the job has finished and returns it.
func (r *run) waitJob(t *testing.T, id string, timeout time.Duration) *client.Job {
	t.Helper()
	var j *client.Job
	waitFor(t, timeout, "job "+id+" to finish", func() (bool, error) {
		j = r.job(t, id)
		return j.Finished(), nil
	})
	return j
}

// marker reports whether the marker file NAME exists.
func (r *run) marker(name string) bool {
	_, err := os.Stat(filepath.Join(r.markers, name))
	return err == nil
}

// waitMarker waits for the marker file NAME; while it waits, w (if not nil) must stay alive.
func (r *run) waitMarker(t *testing.T, name string, timeout time.Duration, w *buildtest.Proc) {
	t.Helper()
	waitFor(t, timeout, "the marker "+name, func() (bool, error) {
		if w != nil && w.Exited() {
			return false, fmt.Errorf("%s exited: %v", w.Name, w.Err())
		}
		return r.marker(name), nil
	})
}

func (r *run) wantMarkers(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if !r.marker(n) {
			t.Errorf("the marker %s is missing from %s", n, r.markers)
		}
	}
}

// wantOutput checks a task's output against the JSON want.
func wantOutput(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("%s: output %s is not JSON: %v", what, got, err)
		return
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		panic(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: output %s, want %s", what, got, want)
	}
}

func jobTask(t *testing.T, j *client.Job, key string) client.JobTask {
	t.Helper()
	for _, tk := range j.Tasks {
		if tk.TaskID == key {
			return tk
		}
	}
	t.Fatalf("job %s has no task %s: %+v", j.JobID, key, j.Tasks)
	return client.JobTask{}
}

// outcomes lists a task's attempts as "N:outcome" for messages and checks.
func outcomes(d *client.TaskDetail) []string {
	var out []string
	for _, a := range d.Attempts {
		out = append(out, fmt.Sprintf("%d:%s", a.Attempt, a.Outcome))
	}
	return out
}

// dag: a → b, a+b → c, submitted and followed by the SDK's producer; c's output is 112.
func (r *run) dag(t *testing.T) {
	job := r.producer(t, "dag", map[string]any{"name": "conf-dag", "tasks": []any{
		r.task("a", "conf.add", map[string]int{"n": 1}, nil),
		r.task("b", "conf.add", map[string]int{"n": 10}, map[string]any{"dependsOn": []string{"a"}}),
		r.task("c", "conf.add", map[string]int{"n": 100}, map[string]any{"dependsOn": []string{"a", "b"}}),
	}}, 0)
	if job.Status != client.JobCompleted {
		t.Fatalf("job %s is %s: %+v", job.JobID, job.Status, job.Tasks)
	}
	for key, want := range map[string]string{"a": `{"sum":1}`, "b": `{"sum":11}`, "c": `{"sum":112}`} {
		tk := jobTask(t, job, key)
		if tk.Status != client.TaskCompleted || tk.Attempt != 1 {
			t.Errorf("task %s: %s on attempt %d, want completed on attempt 1", key, tk.Status, tk.Attempt)
		}
		wantOutput(t, "task "+key, tk.Output, want)
	}
	r.wantMarkers(t, "started-a-1", "started-b-1", "started-c-1")
}

// retry: a retryable TRANSIENT failure is retried, a non-retryable DATA_QUALITY one is not; the
// producer exits 1 for the partly failed job.
func (r *run) retry(t *testing.T) {
	job := r.producer(t, "retry", map[string]any{"name": "conf-retry", "tasks": []any{
		r.task("flaky", "conf.flaky", map[string]any{}, map[string]any{"maxAttempts": 3, "backoffBaseMs": 0, "backoffMaxMs": 0}),
		r.task("fatal", "conf.fatal", map[string]any{}, map[string]any{"maxAttempts": 3, "backoffBaseMs": 0, "backoffMaxMs": 0}),
	}}, 1)
	if job.Status != client.JobPartialFailure {
		t.Fatalf("job %s is %s, want partial_failure: %+v", job.JobID, job.Status, job.Tasks)
	}
	flaky := r.taskDetail(t, job.JobID, "flaky")
	if flaky.Status != client.TaskCompleted || flaky.Attempt != 2 || len(flaky.Attempts) != 2 {
		t.Errorf("flaky: %s on attempt %d (attempts %v), want completed on attempt 2", flaky.Status, flaky.Attempt, outcomes(flaky))
	} else {
		wantOutput(t, "flaky", flaky.Output, `{"attempt":2}`)
		if e := flaky.Attempts[0].Error; flaky.Attempts[0].Outcome != "failed" || e == nil || e.Category != "USER_CODE" || e.Code != "TRANSIENT" ||
			e.Message != "flaky attempt 1" || (e.Retryable != nil && !*e.Retryable) {
			t.Errorf("flaky's attempt 1: %s, error %+v; want failed, USER_CODE with code TRANSIENT, retryable, \"flaky attempt 1\"", flaky.Attempts[0].Outcome, e)
		}
	}
	fatal := r.taskDetail(t, job.JobID, "fatal")
	if fatal.Status != client.TaskFailed || fatal.AttemptsUsed != 1 || len(fatal.Attempts) != 1 {
		t.Errorf("fatal: %s after %d attempts (%v), want failed after 1", fatal.Status, fatal.AttemptsUsed, outcomes(fatal))
	}
	if e := fatal.Error; e == nil || e.Category != "DATA_QUALITY" || e.Message != "bad row" || (e.Retryable != nil && *e.Retryable) {
		t.Errorf("fatal's error %+v; want DATA_QUALITY, not retryable, \"bad row\"", e)
	}
	r.wantMarkers(t, "started-flaky-1", "started-flaky-2", "started-fatal-1")
	if r.marker("started-fatal-2") {
		t.Error("fatal ran a second attempt")
	}
}

// The lease of the cancel and SIGTERM steps, whose tasks live on their heartbeats (every 500 ms)
// while the harness acts: room for a busy machine's pauses.
const liveLease = 4

// heartbeats: a handler that blocks its thread for 5 s lives past its 2 s lease on the worker's
// heartbeats alone (every 500 ms, from their own thread).
func (r *run) heartbeats(t *testing.T) {
	id := r.submit(t, "conf-heartbeats", r.task("block", "conf.block", map[string]int{"seconds": 5},
		map[string]any{"heartbeatTimeoutSeconds": 2, "maxAttempts": 1}))
	job := r.waitJob(t, id, 90*time.Second)
	d := r.taskDetail(t, id, "block")
	if job.Status != client.JobCompleted || d.Status != client.TaskCompleted || len(d.Attempts) != 1 {
		t.Fatalf("block: job %s, task %s, attempts %v (error %+v); want completed on attempt 1", job.Status, d.Status, outcomes(d), d.Error)
	}
	wantOutput(t, "block", d.Output, `{"blocked":5}`)
}

// cancel: the job is cancelled while its task runs; the handler sees it and the task ends
// canceled, reported so by the worker.
func (r *run) cancel(t *testing.T) {
	id := r.submit(t, "conf-cancel", r.task("cancel", "conf.cancel", map[string]any{},
		map[string]any{"heartbeatTimeoutSeconds": liveLease, "maxAttempts": 1, "cancelGraceSeconds": 20}))
	r.waitMarker(t, "started-cancel-1", 60*time.Second, nil)
	if _, err := r.srv.c.CancelJob(context.Background(), id); err != nil {
		t.Fatalf("cancel job %s: %v", id, err)
	}
	job := r.waitJob(t, id, 30*time.Second)
	d := r.taskDetail(t, id, "cancel")
	if job.Status != client.JobCanceled || d.Status != client.TaskCanceled || len(d.Attempts) != 1 || d.Attempts[0].Outcome != "canceled" {
		t.Fatalf("cancel: job %s, task %s, attempts %v (error %+v); want the attempt canceled by its worker", job.Status, d.Status, outcomes(d), d.Error)
	}
	r.waitMarker(t, "aborted-cancel-1", 10*time.Second, nil)
}

// kill: the worker running a task is killed; another worker runs the task's second attempt once
// the server has timed the first out.
func (r *run) kill(t *testing.T) {
	w := r.liveWorker(t)
	id := r.submit(t, "conf-kill", r.task("kill", "conf.kill", map[string]any{},
		map[string]any{"heartbeatTimeoutSeconds": 2, "maxAttempts": 3, "backoffBaseMs": 0, "backoffMaxMs": 0}))
	r.waitMarker(t, "started-kill-1", 60*time.Second, w)
	if err := w.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Wait(10 * time.Second); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the killed worker: %v", err)
	}
	r.worker = r.startWorker(t)
	job := r.waitJob(t, id, 60*time.Second)
	d := r.taskDetail(t, id, "kill")
	if job.Status != client.JobCompleted || d.Attempt != 2 || len(d.Attempts) != 2 || d.Attempts[0].Outcome != "timed_out" {
		t.Fatalf("kill: job %s, task %s on attempt %d, attempts %v; want attempt 1 timed out, completed on attempt 2", job.Status, d.Status, d.Attempt, outcomes(d))
	}
	if e := d.Attempts[0].Error; e == nil || e.Reason != "HEARTBEAT_TIMEOUT" {
		t.Errorf("kill's attempt 1 error %+v; want reason HEARTBEAT_TIMEOUT", e)
	}
	wantOutput(t, "kill", d.Output, `{"attempt":2}`)
	r.wantMarkers(t, "started-kill-2")
}

// refused: the worker is stopped (SIGSTOP) past its task's lease; once continued, its next
// heartbeat is refused, its handler aborted, and the task's second attempt completes it.
func (r *run) refused(t *testing.T) {
	w := r.liveWorker(t)
	// The retry waits 1 s: the stopped worker is continued before attempt 2 can be claimed, so
	// that no claim of it sits unread in a stopped process while its lease runs out.
	id := r.submit(t, "conf-refused", r.task("refused", "conf.refused", map[string]any{},
		map[string]any{"heartbeatTimeoutSeconds": 2, "maxAttempts": 3, "backoffBaseMs": 1000, "backoffMaxMs": 1000}))
	r.waitMarker(t, "started-refused-1", 60*time.Second, w)
	if err := w.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = w.Signal(syscall.SIGCONT)
		}
	}()
	waitFor(t, 30*time.Second, "the server to time attempt 1 of refused out", func() (bool, error) {
		d := r.taskDetail(t, id, "refused")
		return len(d.Attempts) > 0 && d.Attempts[0].FinishedAt != nil, nil
	})
	if err := w.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// Well before the handler's own 30 s: it was aborted by the refused heartbeat.
	r.waitMarker(t, "aborted-refused-1", 15*time.Second, w)
	job := r.waitJob(t, id, 60*time.Second)
	d := r.taskDetail(t, id, "refused")
	if job.Status != client.JobCompleted || d.Attempt != 2 || len(d.Attempts) != 2 || d.Attempts[0].Outcome != "timed_out" {
		t.Fatalf("refused: job %s, task %s on attempt %d, attempts %v; want attempt 1 timed out, completed on attempt 2", job.Status, d.Status, d.Attempt, outcomes(d))
	}
	wantOutput(t, "refused", d.Output, `{"attempt":2}`)
	r.wantMarkers(t, "started-refused-2")
}

// sigterm: SIGTERM while a task runs; the worker finishes it, reports it and exits 0.
func (r *run) sigterm(t *testing.T) {
	w := r.liveWorker(t)
	id := r.submit(t, "conf-sigterm", r.task("term", "conf.term", map[string]any{},
		map[string]any{"heartbeatTimeoutSeconds": liveLease, "maxAttempts": 1}))
	r.waitMarker(t, "started-term-1", 60*time.Second, w)
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := w.Wait(15 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("the worker after SIGTERM: exit %d, %v; want exit 0 within 15 s", code, err)
	}
	// The outcome was reported before the worker exited.
	job := r.job(t, id)
	d := r.taskDetail(t, id, "term")
	if job.Status != client.JobCompleted || d.Status != client.TaskCompleted || len(d.Attempts) != 1 {
		t.Fatalf("term after the worker exited: job %s, task %s, attempts %v (error %+v); want completed on attempt 1", job.Status, d.Status, outcomes(d), d.Error)
	}
	wantOutput(t, "term", d.Output, `{"done":true}`)
}

// pipelineDoc is the SDK's pipeline: a manual source publish writes the buffered dataset
// NAME_rows, and each of its loads starts a task of the reactive job read.
func pipelineDoc(name, queue string) string {
	return fmt.Sprintf(`name: %[1]s
jobs:
  - name: publish
    activation: source
    runtime: ecs_platform
    operator: conf.publish
    queue: %[2]s
    outputs: 1
    source: {kind: manual}
  - name: read
    activation: reactive
    runtime: ecs_platform
    operator: conf.read
    queue: %[2]s
    outputs: 0
    inputs:
      - from: {dataset: %[1]s_rows}
publish:
  %[1]s_rows:
    from: {job: publish, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: k, type: integer, required: true}
        - {name: v, type: string, required: true}
      unique: [k]
`, name, queue)
}

// pipeline: publish writes a batch of three rows into the buffered dataset, the sink loads it,
// and read, started by the load, reads and queries the rows.
func (r *run) pipeline(t *testing.T) {
	ctx := context.Background()
	name := r.sdk.pipeline()
	if _, err := r.srv.c.DeployPipeline(ctx, []byte(pipelineDoc(name, r.sdk.queue())), "application/yaml"); err != nil {
		t.Fatalf("deploy %s: %v", name, err)
	}
	req, err := http.NewRequest(http.MethodPost, r.srv.public+"/pipelines/"+name+"/jobs/publish/run", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", r.srv.apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var started struct {
		JobID string `json:"job_id"`
	}
	err = json.NewDecoder(res.Body).Decode(&started)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusCreated || started.JobID == "" {
		t.Fatalf("run %s.publish: %d %+v %v", name, res.StatusCode, started, err)
	}
	pub := r.waitJob(t, started.JobID, 60*time.Second)
	if pub.Status != client.JobCompleted {
		t.Fatalf("the publish job %s is %s: %+v", pub.JobID, pub.Status, pub.Tasks)
	}
	wantOutput(t, "publish", jobTask(t, pub, "publish").Output, `{"published":3}`)

	// The sink loads the batch; its dataset event starts read, in a job of its own.
	var readID string
	waitFor(t, 60*time.Second, "a job "+name+".read", func() (bool, error) {
		for cursor := ""; ; {
			page, err := r.srv.c.ListJobs(ctx, client.ListOptions{Limit: 100, Cursor: cursor})
			if err != nil {
				return false, err
			}
			for _, j := range page.Jobs {
				if j.Name == name+".read" {
					readID = j.JobID
					return true, nil
				}
			}
			if cursor = page.NextCursor; cursor == "" {
				return false, nil
			}
		}
	})
	read := r.waitJob(t, readID, 60*time.Second)
	tk := jobTask(t, read, "read")
	if read.Status != client.JobCompleted {
		t.Fatalf("the read job %s is %s: %+v (error %+v)", read.JobID, read.Status, tk, tk.Error)
	}
	wantOutput(t, "read", tk.Output, `{"rows":3,"n":3,"s":6}`)
	rows, err := r.srv.c.DatasetRows(ctx, name+"_rows", client.RowsQuery{})
	if err != nil || len(rows.Rows) != 3 {
		t.Errorf("the dataset %s_rows: %v, %v; want its 3 rows", name, rows, err)
	}
	r.wantMarkers(t, "started-publish-1", "started-read-1")
}
