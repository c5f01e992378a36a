//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqlite"
	"github.com/baton-dev/baton/internal/wrapper"
)

// execServer is a Baton server in this process over SQLite: the public listener (producer and
// task-scoped APIs) and the internal listener behind mutual TLS, with development certificates.
type execServer struct {
	st       store.Store
	d        *dispatch.Dispatcher
	dp       *dataplane.Plane
	public   *httptest.Server
	internal *httptest.Server
	certs    mtls.DevCerts
}

func newExecServer(t *testing.T, configure ...func(*server.Config)) *execServer {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "baton.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := server.Config{Store: st, Logger: slog.New(slog.DiscardHandler)}
	for _, c := range configure {
		c(&cfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	d := s.Dispatcher
	// The certificates sit in a directory every user may enter: only the key file's own mode
	// (0600, as WriteDevCerts writes it) keeps the child out.
	certs, err := mtls.WriteDevCerts(sharedDir(t, 0o755), nil, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := mtls.ServerConfig(certs.ServerCert, certs.ServerKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	srv := &execServer{st: st, d: d, dp: s.DataPlane, certs: certs, public: httptest.NewServer(s.ProducerHandler()),
		internal: httptest.NewUnstartedServer(s.InternalHandler())}
	srv.internal.TLS = tlsConf
	srv.internal.StartTLS()
	t.Cleanup(srv.public.Close)
	t.Cleanup(srv.internal.Close)
	t.Cleanup(s.Drain) // first: long polls end before the listeners close
	return srv
}

// sharedDir is a fresh directory outside the test's private temporary directory, so that the
// child's user can reach it, with the given mode.
func sharedDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "baton-worker-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// submit creates a job of tenant "acme" and returns its id and its tasks' global ids by key.
func (s *execServer) submit(t *testing.T, specs ...lifecycle.TaskSpec) (string, map[string]string) {
	t.Helper()
	ctx := context.Background()
	res, err := s.d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Tasks: specs})
	if err != nil {
		t.Fatal(err)
	}
	_, tasks, err := s.d.GetJob(ctx, "", res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, tk := range tasks {
		ids[tk.Key] = tk.ID
	}
	return res.Job.ID, ids
}

// waitTask waits for the task to satisfy ok.
func (s *execServer) waitTask(t *testing.T, id string, within time.Duration, ok func(*store.Task) bool) *store.Task {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		tk, err := s.st.TaskGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(tk) {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s (%s): still %s after %s; error %+v", tk.Key, id, tk.Status, within, tk.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func terminal(tk *store.Task) bool { return tk.Status.Terminal() }

// execWorker is `baton worker` running in this process (its children are real processes).
type execWorker struct {
	cancel func()
	done   chan int
	stderr *syncBuffer
}

// startExecWorker runs `baton worker` against s with mTLS, the given task names and script.
func startExecWorker(t *testing.T, s *execServer, script string, args ...string) *execWorker {
	t.Helper()
	full := []string{"worker", "--exec", script, "--url", s.public.URL,
		"--internal-tls-ca", s.certs.CA, "--internal-tls-cert", s.certs.ClientCert, "--internal-tls-key", s.certs.ClientKey,
		"--heartbeat-interval", "100ms", "--grace", "500ms", "--shutdown-timeout", "5s", "--log-level", "debug"}
	if os.Getenv("BATON_INTERNAL_URL") != s.internal.URL {
		full = append(full, "--internal-url", s.internal.URL)
	}
	full = append(full, args...)
	ctx, cancel := context.WithCancel(context.Background())
	w := &execWorker{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	go func() { w.done <- run(ctx, full, io.Discard, w.stderr) }()
	t.Cleanup(func() {
		if code := w.stop(t); code != 0 {
			t.Errorf("baton worker exited %d; stderr:\n%s", code, w.stderr.String())
		}
	})
	return w
}

// waitExit waits for the worker to exit by itself, with code want.
func (w *execWorker) waitExit(t *testing.T, want int) {
	t.Helper()
	select {
	case code := <-w.done:
		w.done <- code
		if code != want {
			t.Fatalf("baton worker exited %d, want %d; stderr:\n%s", code, want, w.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("baton worker did not exit by itself; stderr:\n%s", w.stderr.String())
	}
}

func (w *execWorker) stop(t *testing.T) int {
	w.cancel()
	select {
	case code := <-w.done:
		w.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("baton worker did not stop; stderr:\n%s", w.stderr.String())
		return -1
	}
}

// readWhenWritten waits for a file the child writes (a line ending in a newline).
func readWhenWritten(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			return string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the child did not write %s", path)
	return ""
}

// processAlive reports whether pid runs (a zombie does not count).
func processAlive(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func waitGone(t *testing.T, within time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for processAlive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still runs %s later", pid, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func intp(n int) *int { return &n }

// A child that succeeds: its last JSON value on stdout is the output, and it got the payload on
// stdin and in BATON_TASK_PAYLOAD. A child that exits non-zero: a USER_CODE failure with the exit
// status and the end of stderr.
func TestWorkerExecOutputAndFailure(t *testing.T) {
	t.Parallel()
	s := newExecServer(t)
	script := `payload=$(cat)
case "$BATON_TASK_NAME" in
good)
	same=false; [ "$(cat "$BATON_TASK_PAYLOAD")" = "$payload" ] && same=true
	echo "starting (a log line on stdout)"
	printf '{"payload":%s,"payloadFileSame":%s,"uid":%s}\n' "$payload" "$same" "$(id -u)" ;;
bad)
	i=0; while [ $i -lt 1000 ]; do echo "noise line $i" >&2; i=$((i+1)); done
	echo "bad input: no widgets" >&2
	exit 4 ;;
esac`
	_, ids := s.submit(t,
		lifecycle.TaskSpec{Key: "g", Name: "good", Input: json.RawMessage(`{"n":2}`)},
		lifecycle.TaskSpec{Key: "after-g", Name: "good", DependsOn: []string{"g"}},
		lifecycle.TaskSpec{Key: "b", Name: "bad", MaxAttempts: intp(1)},
	)
	w := startExecWorker(t, s, script, "--task", "good", "--task", "bad", "--concurrency", "2")

	g := s.waitTask(t, ids["g"], 20*time.Second, terminal)
	if g.Status != lifecycle.Completed {
		t.Fatalf("g: %s %+v; worker:\n%s", g.Status, g.Error, w.stderr.String())
	}
	var out struct {
		Payload         map[string]any `json:"payload"`
		PayloadFileSame bool           `json:"payloadFileSame"`
		UID             int            `json:"uid"`
	}
	if err := json.Unmarshal(g.Output, &out); err != nil {
		t.Fatalf("output %s: %v", g.Output, err)
	}
	p := out.Payload
	if p["task_id"] != ids["g"] || p["task_key"] != "g" || p["name"] != "good" || p["attempt"] != 1.0 ||
		p["lease_token"] == "" || p["job_id"] == "" || !out.PayloadFileSame {
		t.Fatalf("payload seen by the child: %s", g.Output)
	}
	if in, _ := json.Marshal(p["input"]); string(in) != `{"n":2}` {
		t.Fatalf("input %s", in)
	}
	if os.Geteuid() == 0 && out.UID == 0 {
		t.Fatal("the child ran as root")
	}
	after := s.waitTask(t, ids["after-g"], 20*time.Second, terminal)
	var ap struct {
		Payload struct {
			DependencyOutputs map[string]json.RawMessage `json:"dependency_outputs"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(after.Output, &ap); err != nil || !bytes.Equal(ap.Payload.DependencyOutputs["g"], g.Output) {
		t.Fatalf("after-g saw dependency outputs %s; g's output is %s", after.Output, g.Output)
	}

	b := s.waitTask(t, ids["b"], 20*time.Second, terminal)
	if b.Status != lifecycle.Failed || b.Error == nil || b.Error.Category != "USER_CODE" {
		t.Fatalf("b: %s %+v", b.Status, b.Error)
	}
	msg := b.Error.Message
	if !strings.HasPrefix(msg, "exit status 4: …") || !strings.HasSuffix(msg, "bad input: no widgets") || len(msg) > 4200 {
		t.Fatalf("b's error message (%d bytes): %q", len(msg), msg)
	}
}

// A batch worker (--idle-timeout 0) runs what its queue holds and exits 0 by itself; by default
// (--idle-timeout job) a worker that ran a task of a pipeline job with idle_timeout: 0 does the
// same, and one whose jobs set none stays.
func TestWorkerExitsWhenIdle(t *testing.T) {
	t.Parallel()
	s := newExecServer(t)
	ctx := context.Background()
	_, ids := s.submit(t, lifecycle.TaskSpec{Key: "a", Name: "batch"}, lifecycle.TaskSpec{Key: "b", Name: "batch", DependsOn: []string{"a"}})
	w := startExecWorker(t, s, `echo '{"ok":true}'`, "--task", "batch", "--idle-timeout", "0", "--poll-wait", "200ms")
	w.waitExit(t, 0)
	for key, id := range ids {
		if tk := s.waitTask(t, id, 5*time.Second, terminal); tk.Status != lifecycle.Completed {
			t.Errorf("task %s is %s after the batch worker exited", key, tk.Status)
		}
	}

	if _, err := s.dp.Deploy(ctx, "acme", []byte(pipelinetest.IdleDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	run, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "acme", Pipeline: "idle", Job: "ingest"})
	if err != nil {
		t.Fatal(err)
	}
	stays := startExecWorker(t, s, `echo '{"ok":true}'`, "--task", "stays", "--poll-wait", "200ms")
	follows := startExecWorker(t, s, `echo '{"ok":true}'`, "--task", "ingest", "--poll-wait", "200ms")
	follows.waitExit(t, 0)
	if tk := s.waitTask(t, run.TaskID, 5*time.Second, terminal); tk.Status != lifecycle.Completed {
		t.Errorf("the pipeline task is %s after its worker exited", tk.Status)
	}
	select {
	case code := <-stays.done:
		t.Fatalf("a worker whose jobs set no idle_timeout exited %d; stderr:\n%s", code, stays.stderr.String())
	default:
	}
}

// Rule: a child may leave batches only for the buffered datasets its task's job writes. A batch
// of any other dataset — from a task of a plain job, or beside a batch of the job's own output —
// fails the task for good before the wrapper uploads or publishes anything.
func TestWorkerExecRefusesBatchesOfADatasetItsJobDoesNotWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bs, err := blob.Open(ctx, "file://"+sharedDir(t, 0o755), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	s := newExecServer(t, func(c *server.Config) { c.Blob = bs })
	if _, err := s.dp.Deploy(ctx, "acme", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	// Every child leaves a batch of alert_events; asked by its trigger, one of another dataset too.
	script := `cat > /dev/null
printf '{"dedupe_key":"%s","severity":"high"}\n' "$BATON_TASK_ID" > "$BATON_BUFFER_DIR/alert_events.jsonl"
if grep -q '"also_other"' "$BATON_TASK_PAYLOAD"; then
	echo '{"dedupe_key":"x","severity":"low"}' > "$BATON_BUFFER_DIR/other_events.jsonl"
fi
echo '{"ok":true}'`
	_, ids := s.submit(t, lifecycle.TaskSpec{Key: "plain", Name: "scan", MaxAttempts: intp(3)})
	own, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "acme", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	both, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "acme", Pipeline: "alerts", Job: "scan",
		Trigger: map[string]any{"also_other": true}})
	if err != nil {
		t.Fatal(err)
	}
	w := startExecWorker(t, s, script, "--task", "scan", "--blob-url", bs.Root())

	// The pipeline task of the dataset's own job publishes it.
	if tk := s.waitTask(t, own.TaskID, 20*time.Second, terminal); tk.Status != lifecycle.Completed {
		t.Fatalf("the job's own task: %s %+v; worker:\n%s", tk.Status, tk.Error, w.stderr.String())
	}
	if recs, err := s.st.BufferPublishListByTask(ctx, own.TaskID); err != nil || len(recs) != 1 {
		t.Fatalf("the job's own task published %+v %v, want its one batch", recs, err)
	}
	for id, want := range map[string]string{
		ids["plain"]: `batch alert_events.jsonl: dataset "alert_events" is not a buffered output of this task's job`,
		both.TaskID:  `batch other_events.jsonl: dataset "other_events" is not a buffered output of this task's job`,
	} {
		tk := s.waitTask(t, id, 20*time.Second, terminal)
		if tk.Status != lifecycle.Failed || tk.Error == nil || tk.Error.Category != "USER_CODE" || tk.Attempt != 1 ||
			!strings.Contains(tk.Error.Message, want) {
			t.Fatalf("task %s: %s attempt %d %+v; want a failure for good saying %q", tk.Key, tk.Status, tk.Attempt, tk.Error, want)
		}
		if recs, err := s.st.BufferPublishListByTask(ctx, id); err != nil || len(recs) != 0 {
			t.Fatalf("task %s published %+v %v; want nothing", tk.Key, recs, err)
		}
		keys, err := bs.List(ctx, "buffers/")
		if err != nil || slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, id) }) {
			t.Fatalf("objects %q (%v): a batch of the refused task %s was uploaded", keys, err, tk.Key)
		}
	}
}

// stubborn is a child that notes SIGTERM but keeps running, with a grandchild that ignores it.
// It writes their process ids as this test sees them (in a PID namespace of its own, $$ and $!
// are the namespace's), and so needs childSees(dir).
func stubborn(dir string) string {
	return `D=` + dir + `; K=$BATON_TASK_KEY
trap 'echo TERM >> $D/term-$K' TERM
(trap '' TERM; read -r pid _ < /proc/self/stat; echo $pid > $D/grandchild-$K; exec sleep 300) &
read -r pid _ < /proc/self/stat; echo $pid > $D/child-$K
while :; do sleep 0.05; done`
}

// childSees are the flags that let a test's children write to dir and read /proc, which their
// sandbox does not grant by default.
func childSees(dir string) []string { return []string{"--child-write", dir, "--child-read", "/proc"} }

func childPIDs(t *testing.T, dir, key string) (int, int) {
	t.Helper()
	child, err1 := strconv.Atoi(strings.TrimSpace(readWhenWritten(t, filepath.Join(dir, "child-"+key))))
	grandchild, err2 := strconv.Atoi(strings.TrimSpace(readWhenWritten(t, filepath.Join(dir, "grandchild-"+key))))
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if !processAlive(child) || !processAlive(grandchild) {
		t.Fatal("the child and grandchild are not running")
	}
	return child, grandchild
}

// Past the task's timeout the child's process group gets SIGTERM, then SIGKILL after the grace
// period: the child and its grandchild are both gone.
func TestWorkerExecTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	s := newExecServer(t)
	dir := sharedDir(t, 0o777)
	_, ids := s.submit(t, lifecycle.TaskSpec{Key: "slow", Name: "slow", TimeoutSeconds: intp(1), MaxAttempts: intp(1)})
	w := startExecWorker(t, s, stubborn(dir), append(childSees(dir), "--task", "slow")...)
	child, grandchild := childPIDs(t, dir, "slow")
	waitGone(t, time.Minute, child, grandchild)
	if term, _ := os.ReadFile(filepath.Join(dir, "term-slow")); !strings.Contains(string(term), "TERM") {
		t.Fatalf("the child never saw SIGTERM; worker:\n%s", w.stderr.String())
	}
	tk := s.waitTask(t, ids["slow"], 20*time.Second, terminal)
	if tk.Status != lifecycle.Failed || tk.Error == nil || tk.Error.Category != "TIMEOUT" {
		t.Fatalf("slow: %s %+v", tk.Status, tk.Error)
	}
}

// Cancelling the job reaches the child the same way: SIGTERM, then SIGKILL to the whole group.
func TestWorkerExecCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	s := newExecServer(t)
	dir := sharedDir(t, 0o777)
	jobID, ids := s.submit(t, lifecycle.TaskSpec{Key: "long", Name: "long"})
	w := startExecWorker(t, s, stubborn(dir), append(childSees(dir), "--task", "long")...)
	child, grandchild := childPIDs(t, dir, "long")
	if _, err := s.d.CancelJob(context.Background(), "acme", jobID, ""); err != nil {
		t.Fatal(err)
	}
	waitGone(t, time.Minute, child, grandchild)
	if term, _ := os.ReadFile(filepath.Join(dir, "term-long")); !strings.Contains(string(term), "TERM") {
		t.Fatalf("the child never saw SIGTERM; worker:\n%s", w.stderr.String())
	}
	if tk := s.waitTask(t, ids["long"], 20*time.Second, terminal); tk.Status != lifecycle.Canceled {
		t.Fatalf("long: %s %+v", tk.Status, tk.Error)
	}
}

// The acceptance test: the child of `baton worker` cannot see the wrapper's credentials (neither
// in its environment nor in files it can open, nor through inherited file descriptors), and its
// token works only for its own task. Not parallel: it sets the wrapper's environment.
func TestWorkerChildCannotSeeWrapperCredentials(t *testing.T) {
	s := newExecServer(t)
	// The wrapper's own secrets: in its environment, and its internal URL from there too.
	t.Setenv("BATON_SECRET_X", "hunter2-secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
	t.Setenv("BATON_INTERNAL_URL", s.internal.URL)
	keyBytes, err := os.ReadFile(s.certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(s.certs.ClientKey); fi.Mode().Perm() != 0o600 {
		t.Fatalf("client key mode %v, want 0600", fi.Mode().Perm())
	}
	dir := sharedDir(t, 0o777)
	// It reads /proc (which it may here) by the pids this test sees: in a PID namespace of its
	// own, $$ and $PPID are the namespace's.
	script := `D=` + dir + `
read -r pid _ < /proc/self/stat
tr '\0' '\n' < /proc/$pid/environ > $D/env
if cat ` + s.certs.ClientKey + ` > $D/key-content 2> $D/key-err; then echo readable > $D/key; else echo denied > $D/key; fi
if cat /proc/` + strconv.Itoa(os.Getpid()) + `/environ > /dev/null 2> $D/wrapper-env-err; then echo readable > $D/wrapper-env; else echo denied > $D/wrapper-env; fi
echo $pid > $D/pid
while [ ! -e $D/go ]; do sleep 0.05; done
echo '{"probe":"done"}'`
	_, ids := s.submit(t,
		lifecycle.TaskSpec{Key: "probe", Name: "probe"},
		lifecycle.TaskSpec{Key: "other", Name: "other-kind"}, // no handler here: claimed below
	)
	w := startExecWorker(t, s, script, append(childSees(dir), "--task", "probe")...)

	// Its environment: the allowlist and nothing else.
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(readWhenWritten(t, filepath.Join(dir, "env"))), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := []string{"BATON_ATTEMPT", "BATON_JOB_ID", "BATON_LEASE_TOKEN", "BATON_TASK_ID", "BATON_TASK_KEY", "BATON_TASK_NAME",
		"BATON_TASK_PAYLOAD", "BATON_URL", "HOME", "PATH", "PWD", "TMPDIR", "TRACE_TASK_CAPABILITY_TOKEN", "BATON_BUFFER_DIR"}
	for _, k := range wrapper.PassedThrough {
		if _, ok := os.LookupEnv(k); ok {
			want = append(want, k)
		}
	}
	slices.Sort(want)
	var got []string
	for k := range env {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("child environment %v, want exactly %v", got, want)
	}
	internalHost := strings.TrimPrefix(s.internal.URL, "https://")
	for k, v := range env {
		for _, secret := range []string{"hunter2-secret", "aws-secret-value", internalHost, s.certs.Dir, "PRIVATE KEY"} {
			if strings.Contains(v, secret) {
				t.Errorf("child variable %s carries %q", k, secret)
			}
		}
	}
	if env["BATON_URL"] != s.public.URL || env["BATON_TASK_ID"] != ids["probe"] {
		t.Fatalf("child env BATON_URL=%s BATON_TASK_ID=%s", env["BATON_URL"], env["BATON_TASK_ID"])
	}

	// Its file descriptors: stdin, stdout, stderr, none of them a socket.
	pid := strings.TrimSpace(readWhenWritten(t, filepath.Join(dir, "pid")))
	entries, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range entries {
		fds = append(fds, e.Name())
		if target, _ := os.Readlink("/proc/" + pid + "/fd/" + e.Name()); strings.HasPrefix(target, "socket:") {
			t.Errorf("child fd %s is a socket (%s)", e.Name(), target)
		}
	}
	if !slices.Equal(fds, []string{"0", "1", "2"}) {
		t.Errorf("child fds %v, want 0 1 2", fds)
	}

	// The wrapper's process environment is out of reach too (another user's, or, for the same
	// user, a process that made itself not dumpable).
	if r := readWhenWritten(t, filepath.Join(dir, "wrapper-env")); r != "denied\n" {
		t.Errorf("the child could read the wrapper's /proc/PID/environ")
	}

	t.Run("key file", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("not running as root: the child runs as the test's own user and can read its files; run the tests as root to check that the child user cannot read the client key")
		}
		r := readWhenWritten(t, filepath.Join(dir, "key"))
		errText, _ := os.ReadFile(filepath.Join(dir, "key-err"))
		leaked, _ := os.ReadFile(filepath.Join(dir, "key-content"))
		if r != "denied\n" || !strings.Contains(string(errText), "Permission denied") || len(leaked) > 0 || bytes.Contains(leaked, keyBytes) {
			t.Fatalf("the child read the client key: %q, %q", r, errText)
		}
	})

	// Its token works for its own task on the task-scoped API...
	token := env["TRACE_TASK_CAPABILITY_TOKEN"]
	attempt, _ := strconv.Atoi(env["BATON_ATTEMPT"])
	own := map[string]any{"task_id": env["BATON_TASK_ID"], "attempt": attempt, "lease_token": env["BATON_LEASE_TOKEN"]}
	if code, body := postJSON(t, http.DefaultClient, s.public.URL+"/v1/task/heartbeat", own, "X-Trace-Task-Capability", token); code != http.StatusOK {
		t.Fatalf("heartbeat of its own task: %d %s", code, body)
	}
	// ... and not for another task, even one that is running with a live lease.
	c, err := s.d.ClaimTask(context.Background(), dispatch.ClaimTaskParams{TaskID: ids["other"], WorkerID: "someone-else"})
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]any{"task_id": c.Task.ID, "attempt": c.Task.Attempt, "lease_token": c.Task.LeaseToken}
	for _, path := range []string{"/v1/task/heartbeat", "/v1/task/complete"} {
		body := mergeIf(other, map[string]any{"status": "Completed"}, path == "/v1/task/complete")
		if code, answer := postJSON(t, http.DefaultClient, s.public.URL+path, body, "X-Trace-Task-Capability", token); code != http.StatusForbidden {
			t.Fatalf("%s of another task with the child's token: %d %s", path, code, answer)
		}
	}
	// /internal/* is not reachable with what the child holds: no client certificate, so no TLS
	// session, whatever the token (and the child was not told where it is).
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(s.certs.CA)
	pool.AppendCertsFromPEM(caPEM)
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	hb := map[string]any{"worker_id": "x", "job_id": env["BATON_TASK_ID"], "lease_token": env["BATON_LEASE_TOKEN"]}
	if code, answer := postJSON(t, noCert, s.internal.URL+"/internal/worker/heartbeat", hb, "X-Trace-Task-Capability", token); code != 0 {
		t.Fatalf("/internal/* answered a caller without a client certificate: %d %s", code, answer)
	}

	// Let it finish: its output is stored.
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tk := s.waitTask(t, ids["probe"], 20*time.Second, terminal)
	if tk.Status != lifecycle.Completed || string(tk.Output) != `{"probe":"done"}` {
		t.Fatalf("probe: %s %s %+v; worker:\n%s", tk.Status, tk.Output, tk.Error, w.stderr.String())
	}
}

// mergeIf returns a copy of a with b's entries added when add is set.
func mergeIf(a, b map[string]any, add bool) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	if add {
		for k, v := range b {
			out[k] = v
		}
	}
	return out
}

// postJSON posts body and returns the status and answer; status 0 when no answer came (the error
// as the answer).
func postJSON(t *testing.T, hc *http.Client, u string, body any, headers ...string) (int, string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return 0, ue.Err.Error()
		}
		return 0, err.Error()
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(answer)
}

func TestWorkerFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--task NAME is required"},
		{[]string{"--task", "x", "--bundle-cache-size", "0"}, 2, "--bundle-cache-size must be positive"},
		{[]string{"--task", "x", "--exec", "true", "extra"}, 2, "quote the whole --exec command"},
		{[]string{"--task", "x", "--exec", "true", "--grace", "0s"}, 2, "--grace must be positive"},
		{[]string{"--task", "x", "--exec", "true", "--idle-timeout", "soon"}, 2, `--idle-timeout "soon": want job, never, 0 or a duration such as 5m`},
		{[]string{"--task", "x", "--exec", "true", "--idle-timeout", "-1m"}, 2, `--idle-timeout "-1m"`},
		{[]string{"--task", "x", "--exec", "true", "--internal-tls-cert", "c.pem"}, 2, "mTLS needs all of"},
		{[]string{"--task", "x", "--exec", "true", "--child-env", "HOME=/root"}, 2, "may not set HOME"},
		{[]string{"--task", "x", "--exec", "true", "--child-env", "NOEQUALS"}, 2, "want NAME=VALUE"},
		{[]string{"--task", "x", "--exec", "true", "--url", "ftp://x"}, 2, "--url"},
		{[]string{"--task", "x", "--exec", "true", "--min-isolation", "max"}, 2, `--min-isolation "max": want one of none, limits, landlock, seccomp, namespaces`},
		{[]string{"--task", "x", "--exec", "true", "--child-connect", "0"}, 2, `--child-connect "0": want a TCP port`},
		{[]string{"--task", "x", "--exec", "true", "--child-user", "root"}, 1, "refusing to run untrusted children as \"root\""},
		{[]string{"--task", "x", "--exec", "true", "--child-user", "0"}, 1, "refusing to run untrusted children"},
	} {
		code, _, stderr := runBaton(t, append([]string{"worker"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("baton worker %q: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// As root, a client key that the child user could read is refused.
func TestWorkerRefusesReadableKey(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("not running as root: the child runs as the wrapper's user anyway")
	}
	certs, err := mtls.WriteDevCerts(t.TempDir(), nil, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(certs.ClientKey, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBaton(t, "worker", "--task", "x", "--exec", "true", "--internal-url", "https://127.0.0.1:1",
		"--internal-tls-ca", certs.CA, "--internal-tls-cert", certs.ClientCert, "--internal-tls-key", certs.ClientKey)
	if code != 1 || !strings.Contains(stderr, "readable by every user") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
