package examples

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
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-dev/baton/internal/buildtest"
	"github.com/baton-dev/baton/internal/query/engine"
)

// TestPythonExamples runs each Python example of examples/python/wire — written from the contract pages
// of docs/contracts alone — against a real `baton dev`: a producer submits a three-task DAG
// (a → b, a+b → c) whose tasks the example worker runs, and the job must complete with the outputs
// the worker computed, a parent's output reaching its child (c's total is 100 + b's 11 + a's 1).
func TestPythonExamples(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; CI must run the Python examples")
		}
		t.Skip("python3 is not installed; skipping the Python examples")
	}
	if out, err := exec.Command(py, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").CombinedOutput(); err != nil {
		t.Fatalf("the Python examples need Python 3.9 or newer (%s): %v %s", py, err, out)
	}
	// The baton binary, built once for every subtest the way this test was built (its race
	// detector included).
	bin := filepath.Join(t.TempDir(), "baton")
	buildtest.Build(t, "..", "./cmd/baton", bin)
	dir, err := filepath.Abs(filepath.Join("python", "wire"))
	if err != nil {
		t.Fatal(err)
	}
	script := func(name string) string { return filepath.Join(dir, name) }

	t.Run("producer", func(t *testing.T) {
		d := startDev(t, bin)
		startPython(t, d, py, script("stream_worker.py"), nil, "--queue", "py-prod", "--max-tasks", "4")
		// Poll mode, an explicit Idempotency-Key, and a replay of it: the same job again.
		job, stderr := runProducer(t, d, py, script("producer.py"), dagJob("py-prod", "pull", ""), 0,
			"--poll", "--idempotency-key", "py-example-1")
		checkOutputs(t, job, "stream-worker", false)
		again, stderr2 := runProducer(t, d, py, script("producer.py"), dagJob("py-prod", "pull", ""), 0,
			"--idempotency-key", "py-example-1")
		if again["jobId"] != job["jobId"] || !strings.Contains(stderr2, "(replayed)") {
			t.Fatalf("a replayed Idempotency-Key gave job %v (first %v); stderr:\n%s", again["jobId"], job["jobId"], stderr2)
		}
		// A job that fails: exit status 1 and the error in the final view.
		failed, _ := runProducer(t, d, py, script("producer.py"),
			`{"tasks":[{"taskId":"x","name":"py-prod","queue":"py-prod","input":{"fail":"DATA_QUALITY"}}]}`, 1)
		task := failed["tasks"].([]any)[0].(map[string]any)
		if failed["status"] != "partial_failure" || task["error"].(map[string]any)["category"] != "DATA_QUALITY" {
			t.Fatalf("failed job: %v\nfirst run's stderr:\n%s", failed, stderr)
		}
	})

	t.Run("stream_worker", func(t *testing.T) {
		d := startDev(t, bin)
		w := startPython(t, d, py, script("stream_worker.py"), nil, "--queue", "py-stream:high", "--queue", "py-stream", "--max-tasks", "3")
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-stream", "pull", "py-stream:high"), 0)
		checkOutputs(t, job, "stream-worker", false)
		waitExit(t, w)
	})

	t.Run("internal_worker", func(t *testing.T) {
		redisURL := os.Getenv("BATON_TEST_REDIS_URL")
		if redisURL == "" {
			t.Skip("BATON_TEST_REDIS_URL is not set; skipping the Redis Streams internal worker (e.g. redis://127.0.0.1:6379/0)")
		}
		ns := fmt.Sprintf("pyex-%d-%d", os.Getpid(), time.Now().UnixNano())
		opts, err := goredis.ParseURL(redisURL)
		if err != nil {
			t.Fatalf("BATON_TEST_REDIS_URL: %v", err)
		}
		rdb := goredis.NewClient(opts)
		t.Cleanup(func() {
			rdb.Del(context.Background(), ns+":wake:py-int", ns+":wakeid:py-int")
			rdb.Close()
		})
		d := startDev(t, bin, "--transport", "redis", "--redis-url", redisURL, "--transport-namespace", ns)
		w := startPython(t, d, py, script("internal_worker.py"),
			[]string{"BATON_REDIS_URL=" + redisURL, "BATON_TRANSPORT_NAMESPACE=" + ns}, "--queue", "py-int", "--max-tasks", "3")
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-int", "pull", ""), 0)
		checkOutputs(t, job, "internal", true)
		waitExit(t, w)
		// Every wake-up was settled (XACK and XDEL): none is left outstanding.
		if n, err := rdb.XLen(context.Background(), ns+":wake:py-int").Result(); err != nil || n != 0 {
			t.Fatalf("XLEN %s:wake:py-int = %d, %v; want 0 (every wake-up settled)", ns, n, err)
		}
	})

	t.Run("push_target", func(t *testing.T) {
		const secret = "s3cret-for-python-examples"
		target := buildtest.FreeAddr(t)
		w := startPython(t, nil, py, script("push_target.py"), []string{"BATON_PUSH_SECRET=" + secret},
			"--listen", target, "--max-tasks", "3")
		buildtest.WaitListening(t, target, time.Minute)
		d := startDev(t, bin, "--push-target", "py-push=http://"+target+"/run", "--push-secret", "py-push="+secret)
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-push", "push", ""), 0)
		checkOutputs(t, job, "push", false)
		waitExit(t, w)
	})

	t.Run("task_scoped", func(t *testing.T) {
		d := startDev(t, bin)
		child := childCopy(t, script("task_scoped.py"))
		// The child reports its event on a dataset of the tenant (an event may name no other).
		status, deployed := apiCall(t, d, "POST", "/pipelines", "application/yaml", sinkPipeline)
		if status != http.StatusCreated {
			t.Fatalf("deploy: %d %v", status, deployed)
		}
		dsUUID := deployed["jobs"].([]any)[0].(map[string]any)["outputs"].([]any)[0].(map[string]any)["dataset_uuid"].(string)
		// The child resolves python3 on its own PATH (an interpreter under /root, e.g. a pyenv
		// shim, is out of nobody's reach).
		w := buildtest.Start(t, exec.Command(bin, "worker", "--task", "py-scoped", "--exec", "python3 "+child, "--child-read", filepath.Dir(child),
			"--internal-url", "http://"+d.internal, "--url", "http://"+d.public, "--worker-id", "py-scoped-wrapper",
			"--child-env", "PY_EVENT_DATASET="+dsUUID), nil)
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-scoped", "pull", ""), 0)
		// The output is the child's own /v1/task/complete (it prints nothing for the wrapper).
		checkOutputs(t, job, "task-scoped", true)
		w.Stop()
		status, view := apiCall(t, d, "GET", "/datasets/py_sink_alerts", "", "")
		if events, _ := view["recent_events"].([]any); status != http.StatusOK || len(events) == 0 {
			t.Fatalf("the children's events on py_sink_alerts: %d %v", status, view["recent_events"])
		}
	})

	t.Run("task_scoped_rows", func(t *testing.T) { testTaskScopedRows(t, bin, py, script) })

	t.Run("sink", func(t *testing.T) { testSink(t, bin, py, script) })
}

// childCopy copies the script at path where the wrapper's child can read it: run as root, the
// wrapper runs the child as nobody.
func childCopy(t *testing.T, path string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "py-child-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(child, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return child
}

// rowsPipeline is sinkPipeline with a consumer, run by task_scoped.py, that reads the high rows.
const rowsPipeline = `name: py_rows
jobs:
  - name: emit
    activation: source
    runtime: ecs_platform
    operator: py-emit
    outputs: 1
    source: {kind: manual}
  - name: read
    activation: reactive
    runtime: ecs_platform
    operator: py-scoped-rows
    outputs: 0
    inputs:
      - from: {dataset: py_rows_alerts}
        where: {severity: high}
publish:
  py_rows_alerts:
    from: {job: emit, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: severity, type: string, required: true}
      unique: [dedupe_key]
    filter_fields: [severity]
`

// testTaskScopedRows has buffer_publisher.py publish a batch, Baton's own sink load it and the
// router start the consumer, which task_scoped.py runs under the wrapper: with only its
// capability token, it must read exactly the batch's high rows through
// GET /v1/task/datasets/{dataset}/rows.
func testTaskScopedRows(t *testing.T, bin, py string, script func(string) string) {
	d := startDev(t, bin, "--sink=true")
	child := childCopy(t, script("task_scoped.py"))
	if status, deployed := apiCall(t, d, "POST", "/pipelines", "application/yaml", rowsPipeline); status != http.StatusCreated {
		t.Fatalf("deploy: %d %v", status, deployed)
	}
	w := buildtest.Start(t, exec.Command(bin, "worker", "--task", "py-scoped-rows", "--exec", "python3 "+child, "--child-read", filepath.Dir(child),
		"--internal-url", "http://"+d.internal, "--url", "http://"+d.public, "--worker-id", "py-rows-wrapper"), nil)
	defer w.Stop()
	status, run := apiCall(t, d, "POST", "/pipelines/py_rows/jobs/emit/run", "application/json",
		`{"batches":[[{"dedupe_key":"r1","severity":"high"},{"dedupe_key":"r2","severity":"low"},{"dedupe_key":"r3","severity":"high"}]]}`)
	if status != http.StatusCreated {
		t.Fatalf("run: %d %v", status, run)
	}
	env := []string{"BATON_INTERNAL_URL=http://" + d.internal, "BATON_BLOB_URL=file://" + filepath.Join(d.dataDir, "blobs") + "/"}
	runPython(t, py, env, 0, script("buffer_publisher.py"), "--task-id", run["task_id"].(string))

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, list := apiCall(t, d, "GET", "/jobs?limit=100", "", "")
		for _, raw := range list["jobs"].([]any) {
			j := raw.(map[string]any)
			if j["name"] != "py_rows.read" || j["status"] != "completed" {
				continue
			}
			_, job := apiCall(t, d, "GET", "/jobs/"+j["jobId"].(string), "", "")
			out, _ := json.Marshal(job["tasks"].([]any)[0].(map[string]any)["output"])
			var got struct {
				Outputs []struct {
					Rows    map[string][]string `json:"rows"`
					Queried map[string][]string `json:"queried"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(out, &got); err != nil || len(got.Outputs) != 1 ||
				!reflect.DeepEqual(got.Outputs[0].Rows, map[string][]string{"py_rows_alerts": {"r1", "r3"}}) {
				t.Fatalf("the consumer's output %s (%v); want the rows r1 and r3 of py_rows_alerts", out, err)
			}
			// The same rows through the Query Service, which a build with cgo has.
			if want := map[string][]string{"py_rows_alerts": {"r1", "r3"}}; engine.Available && !reflect.DeepEqual(got.Outputs[0].Queried, want) {
				t.Fatalf("the consumer's queried rows %v; want %v", got.Outputs[0].Queried, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed py_rows.read job within 30 s: %v", list["jobs"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sinkPipeline has one manual source job whose output 0 is the buffered dataset py_sink_alerts.
const sinkPipeline = `name: py_sink
jobs:
  - name: emit
    activation: source
    runtime: ecs_platform
    operator: py-emit
    outputs: 1
    source: {kind: manual}
publish:
  py_sink_alerts:
    from: {job: emit, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: severity, type: string, required: true}
        - {name: n, type: integer}
        - {name: seen_at, type: timestamp}
      unique: [dedupe_key]
    filter_fields: [severity]
`

// sinkRun is the run's input: the batches buffer_publisher.py writes. The second batch repeats k3
// (its unique key), the third has a bad row on line 2.
const sinkRun = `{"batches":[
 [{"dedupe_key":"k1","severity":"high","n":1,"seen_at":"2026-11-24T23:01:02.5+01:00"},
  {"dedupe_key":"k2","severity":"low","n":2.0,"org_id":"not-the-tenant"},
  {"dedupe_key":"k3","severity":"low","n":2e3}],
 [{"dedupe_key":"k3","severity":"high","n":99},{"dedupe_key":"k4","severity":"high"}],
 [{"dedupe_key":"k5","severity":"high"},{"dedupe_key":"k6","severity":7}]]}`

// testSink deploys a pipeline with a buffered dataset, runs buffer_publisher.py for a task of it,
// then sink.py twice on one SQLite database: first told to crash between its load and its commit,
// then to the end. Each row must be in the database once, the redelivered batch must be committed
// from the sink's ledger, the bad batch failed, and Baton must show the two commits' dataset events.
func testSink(t *testing.T, bin, py string, script func(string) string) {
	d := startDev(t, bin) // --sink=false: Baton's own sink leaves the batches to sink.py
	blobURL := "file://" + filepath.Join(d.dataDir, "blobs") + "/"
	status, deployed := apiCall(t, d, "POST", "/pipelines", "application/yaml", sinkPipeline)
	if status != http.StatusCreated {
		t.Fatalf("deploy: %d %v", status, deployed)
	}
	dsUUID := deployed["jobs"].([]any)[0].(map[string]any)["outputs"].([]any)[0].(map[string]any)["dataset_uuid"].(string)
	status, run := apiCall(t, d, "POST", "/pipelines/py_sink/jobs/emit/run", "application/json", sinkRun)
	if status != http.StatusCreated {
		t.Fatalf("run: %d %v", status, run)
	}
	taskID := run["task_id"].(string)
	env := []string{"BATON_INTERNAL_URL=http://" + d.internal, "BATON_BLOB_URL=" + blobURL}

	out := runPython(t, py, env, 0, script("buffer_publisher.py"), "--task-id", taskID, "--republish")
	lines := jsonLines(t, out)
	if len(lines) != 5 || lines[3]["answer"].(map[string]any)["duplicate"] != true || lines[4]["status"] != "Completed" {
		t.Fatalf("buffer_publisher.py printed %v; want 3 publishes, a duplicate one and Completed", lines)
	}
	for _, l := range lines[:3] {
		if l["answer"].(map[string]any)["duplicate"] != false {
			t.Fatalf("first publish of %v answered %v", l["batch_uri"], l["answer"])
		}
	}

	db := filepath.Join(t.TempDir(), "sink.db")
	runPython(t, py, env, 4, script("sink.py"), "--db", db, "--crash-after-load", "--max", "1", "--visibility", "1", "--wait", "2")
	settled := jsonLines(t, runPython(t, py, env, 0, script("sink.py"), "--db", db, "--max-batches", "3", "--visibility", "1", "--wait", "5"))

	// Each message's first settlement: two commits (one of them the redelivered, already loaded
	// batch, with the ledger's result), and the bad batch failed.
	first := map[float64]map[string]any{}
	for _, s := range settled {
		if _, ok := first[s["id"].(float64)]; !ok {
			first[s["id"].(float64)] = s
		}
	}
	var cursors []float64
	inserted, reloaded := 0.0, 0
	var badID float64
	for id, s := range first {
		switch s["outcome"] {
		case "committed":
			cursors = append(cursors, s["cursor"].(float64))
			inserted += s["inserted"].(float64)
			if s["reloaded"] == true {
				reloaded++
				if s["receive_count"].(float64) < 2 {
					t.Errorf("message %v was reloaded at receive %v", id, s["receive_count"])
				}
			}
		case "failed":
			badID = id
			if s["error"] != `row 2: column "severity" must be a string` {
				t.Errorf("bad batch failed with %q", s["error"])
			}
		default:
			t.Errorf("message %v: %v", id, s)
		}
	}
	sort.Float64s(cursors)
	if len(first) != 3 || badID == 0 || !reflect.DeepEqual(cursors, []float64{1, 2}) || inserted != 4 || reloaded != 1 {
		t.Fatalf("sink.py settled %v; want two commits (cursors 1 and 2, 4 rows, one redelivered) and one failure", settled)
	}

	// The rows, once each, with the claim's tenant (org_id of a row is ignored).
	dump := runPython(t, py, nil, 0, "-c", `import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(json.dumps([list(r) for r in db.execute(
    "SELECT org_id, dedupe_key, severity, n, seen_at FROM ds_`+strings.ReplaceAll(dsUUID, "-", "")+` ORDER BY dedupe_key")]))`, db)
	want := `[["default", "k1", "high", 1, "2026-11-24T22:01:02.500000Z"], ["default", "k2", "low", 2, null], ` +
		`["default", "k3", "low", 2000, null], ["default", "k4", "high", null, null]]`
	if strings.TrimSpace(dump) != want {
		t.Fatalf("sink.db rows:\n%s\nwant\n%s", dump, want)
	}

	// Baton's side: a dataset event per commit that added rows, made by the publishing task; the
	// committed batches are committed (a retry of them is refused as such), the bad one queued.
	_, view := apiCall(t, d, "GET", "/datasets/py_sink_alerts", "", "")
	var eventCursors []float64
	for _, raw := range view["recent_events"].([]any) {
		ev := raw.(map[string]any)
		if ev["task_id"] != taskID {
			t.Errorf("dataset event %v is not the publishing task's", ev)
		}
		eventCursors = append(eventCursors, ev["cursor"].(float64))
	}
	sort.Float64s(eventCursors)
	if !reflect.DeepEqual(eventCursors, []float64{1, 2}) {
		t.Fatalf("dataset events: %v; want cursors 1 and 2", view["recent_events"])
	}
	for id, s := range first {
		state := "committed"
		if id == badID {
			state = "queued"
		}
		status, answer := apiCall(t, d, "POST", fmt.Sprintf("/datasets/py_sink_alerts/dead-letters/%v/retry", id), "", "")
		if msg := fmt.Sprintf("batch %v is %s, not dead-lettered", id, state); status != http.StatusBadRequest || answer["error"] != msg {
			t.Errorf("retry of batch %v (%v): %d %v; want 400 %q", id, s["outcome"], status, answer, msg)
		}
	}
	if _, job := apiCall(t, d, "GET", "/jobs/"+run["job_id"].(string), "", ""); job["status"] != "completed" {
		t.Errorf("the publishing job is %v", job["status"])
	}
}

// apiCall sends a request with the API key to the public listener and decodes the JSON answer.
func apiCall(t *testing.T, d *dev, method, path, contentType, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.public+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", apiKey)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %v", method, path, res.StatusCode, err)
	}
	return res.StatusCode, v
}

// runPython runs a Python program to its end (at most 20 s), expects the exit status and returns
// its stdout.
func runPython(t *testing.T, py string, env []string, wantExit int, args ...string) string {
	t.Helper()
	stdout, _ := runProgram(t, py, env, "", 20*time.Second, wantExit, args...)
	return stdout
}

// runProgram runs a program (python3, node) to its end, within timeout, with stdin, expects the
// exit status and returns its stdout and stderr.
func runProgram(t *testing.T, prog string, env []string, stdin string, timeout time.Duration, wantExit int, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	if code != wantExit {
		t.Fatalf("%v exited %d, want %d; stdout:\n%s\nstderr:\n%s", args, code, wantExit, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// jsonLines decodes one JSON object per line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		lines = append(lines, v)
	}
	return lines
}

// dagJob is the three-task job every Python subtest submits: a → b, and c after both.
func dagJob(name, rt, firstQueue string) string {
	return dagJobOf("py-example", name, rt, firstQueue, true)
}

// dagJobOf is the job named job of three tasks named name: a → b, and c after both, a and c on
// firstQueue when it is not "". a has a 2 s lease; with sleep it lasts 1.5 s, and lives only if
// the worker heartbeats (every second).
func dagJobOf(job, name, rt, firstQueue string, sleep bool) string {
	task := func(id string, deps []string, input string, extra string) string {
		d, _ := json.Marshal(deps)
		return fmt.Sprintf(`{"taskId":%q,"name":%q,"runtime":%q,"dependsOn":%s,"input":%s%s}`, id, name, rt, d, input, extra)
	}
	queue := ""
	if firstQueue != "" {
		queue = fmt.Sprintf(`,"queue":%q`, firstQueue)
	}
	a := `{"n":1}`
	if sleep {
		a = `{"n":1,"sleep":1.5}`
	}
	return fmt.Sprintf(`{"name":%q,"tasks":[`, job) +
		task("a", []string{}, a, `,"heartbeatTimeoutSeconds":2,"maxAttempts":1`+queue) + "," +
		task("b", []string{"a"}, `{"n":10}`, "") + "," +
		task("c", []string{"a", "b"}, `{"n":100}`, queue) + "]}"
}

// checkOutputs checks the completed job's outputs: {by, task, total, parents} per task (inside
// {"outputs": [...]} for the internal and task-scoped dialects, whose completions store that).
func checkOutputs(t *testing.T, job map[string]any, by string, wrapped bool) {
	t.Helper()
	if job["status"] != "completed" {
		t.Fatalf("job %v is %v, not completed: %v", job["jobId"], job["status"], job)
	}
	want := map[string]map[string]any{
		"a": {"by": by, "task": "a", "total": 1.0, "parents": []any{}},
		"b": {"by": by, "task": "b", "total": 11.0, "parents": []any{"a"}},
		"c": {"by": by, "task": "c", "total": 112.0, "parents": []any{"a", "b"}},
	}
	for _, raw := range job["tasks"].([]any) {
		task := raw.(map[string]any)
		var w any = want[task["taskId"].(string)]
		if wrapped {
			w = map[string]any{"outputs": []any{w}}
		}
		if !reflect.DeepEqual(task["output"], w) {
			t.Errorf("task %v: output %v, want %v", task["taskId"], task["output"], w)
		}
	}
}

// apiKey is the API key of every `baton dev` these tests start.
const apiKey = "examples-key-0123456789"

// dev is a running `baton dev`: its public and internal listeners and its data directory.
type dev struct{ public, internal, dataDir string }

// env is the environment a producer or worker talks to d with: its URLs and the API key.
func (d *dev) env() []string {
	return []string{"BATON_URL=http://" + d.public, "BATON_INTERNAL_URL=http://" + d.internal, "BATON_API_KEY=" + apiKey}
}

// startDev starts `baton dev` with the extra flags on free ports with a fresh data directory and
// waits until both listeners answer /readyz (within 15 s in all); an internal listener with mutual
// TLS (--internal-tls-cert among extra), which a plain GET cannot ask, until it accepts a connection.
func startDev(t *testing.T, bin string, extra ...string) *dev {
	t.Helper()
	d := &dev{public: buildtest.FreeAddr(t), internal: buildtest.FreeAddr(t), dataDir: t.TempDir()}
	args := append([]string{"dev", "--data-dir", d.dataDir, "--listen", d.public, "--internal-listen", d.internal,
		"--metrics-listen=", "--sink=false", "--shutdown-timeout", "2s"}, extra...)
	p := buildtest.Start(t, exec.Command(bin, args...), []string{"BATON_API_KEY=" + apiKey})
	deadline := time.Now().Add(90 * time.Second)
	buildtest.WaitReady(t, "http://"+d.public+"/readyz", time.Until(deadline), p)
	if slices.Contains(extra, "--internal-tls-cert") {
		buildtest.WaitListening(t, d.internal, time.Minute)
	} else {
		buildtest.WaitReady(t, "http://"+d.internal+"/readyz", time.Until(deadline), p)
	}
	return d
}

// waitExit waits up to a minute for a worker that was told --max-tasks to exit by itself, successfully.
func waitExit(t *testing.T, p *buildtest.Proc) {
	t.Helper()
	if code, err := p.Wait(time.Minute); err != nil || code != 0 {
		t.Fatalf("%s did not exit successfully after its --max-tasks (exit %d, %v):\n%s", p.Name, code, err, p.Output())
	}
}

// startPython starts a Python example with the server's URLs (when d is not nil) in its environment.
func startPython(t *testing.T, d *dev, py, script string, env []string, args ...string) *buildtest.Proc {
	t.Helper()
	if d != nil {
		env = append([]string{"BATON_URL=http://" + d.public, "BATON_INTERNAL_URL=http://" + d.internal}, env...)
	}
	return buildtest.Start(t, exec.Command(py, append([]string{script}, args...)...), env)
}

// runProducer runs producer.py on the job document, expects the exit status, and returns the
// final job view it printed and its stderr.
func runProducer(t *testing.T, d *dev, py, script, doc string, wantExit int, args ...string) (map[string]any, string) {
	t.Helper()
	env := []string{"BATON_URL=http://" + d.public, "BATON_API_KEY=" + apiKey}
	return produce(t, env, 30*time.Second, doc, wantExit, append([]string{py, script, "--timeout", "25", "-"}, args...)...)
}

// produce runs the producer argv (a program and its arguments) with env, within timeout, on the
// job document (its stdin), expects the exit status, and returns the final job view it printed
// and its stderr.
func produce(t *testing.T, env []string, timeout time.Duration, doc string, wantExit int, argv ...string) (map[string]any, string) {
	t.Helper()
	stdout, stderr := runProgram(t, argv[0], env, doc, timeout, wantExit, argv[1:]...)
	var job map[string]any
	if err := json.Unmarshal([]byte(stdout), &job); err != nil {
		t.Fatalf("%s printed no job view: %v; stdout:\n%s\nstderr:\n%s", filepath.Base(argv[1]), err, stdout, stderr)
	}
	return job, stderr
}
