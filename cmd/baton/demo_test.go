//go:build unix

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets this test binary stand in for `baton` when `baton dev --demo` re-executes itself
// as `worker` and, through the workers, as `demo-task`, and when `baton bench` re-executes itself
// as its server (`dev`, `server`, or `bench profile-child` for a profiled one).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && slices.Contains([]string{"worker", "demo-task", "dev", "server", "bench"}, os.Args[1]) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func TestDemoJobIsTheExample(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("../../examples/seed-001-job.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(file) != demoJob {
		t.Fatal("demoJob differs from examples/seed-001-job.json; keep them equal")
	}
	var job struct {
		Tasks []struct{ Name string } `json:"tasks"`
	}
	if err := json.Unmarshal(file, &job); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range job.Tasks {
		names = append(names, tk.Name)
	}
	if strings.Join(names, ",") != strings.Join(demoTaskNames, ",") {
		t.Fatalf("task names %v, demo workers for %v", names, demoTaskNames)
	}
}

// `baton dev --demo` runs seed 001's example end to end with real worker processes, whose
// children call the task-scoped API with their token, well within a minute; then it stops
// cleanly. Not parallel: it clears BATON_API_KEY.
func TestDevDemo(t *testing.T) {
	t.Setenv("BATON_API_KEY", "")
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--demo", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
			"--internal-listen", "127.0.0.1:0", "--shutdown-timeout", "5s"}, &stdout, &stderr)
	}()
	start := time.Now()
	// The last thing the demo prints once the job has finished.
	for !strings.Contains(stdout.String(), "the workers keep running") {
		select {
		case code := <-done:
			t.Fatalf("baton dev --demo exited %d early\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("the demo job did not complete within a minute\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}
	t.Logf("demo job completed %s after start", time.Since(start).Round(time.Millisecond))
	out := stdout.String()
	for _, want := range []string{"mTLS", "completed in", "started 5 `baton worker` processes", "compile-result       completed",
		`"taskScopedHeartbeat": 200`, `"usedOutputsOf": [`, `"color-tags",`} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(out, `"ranAsUid": 65534`) {
		t.Errorf("as root the demo's children should run as nobody:\n%s", out)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stdout.String(), "stopped") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("baton dev --demo did not stop\nstderr:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "worker exited") {
		t.Errorf("a worker exited before the demo stopped it:\n%s", stderr.String())
	}
}

func TestDevDemoRefusesOwnTLSFlags(t *testing.T) {
	t.Parallel()
	code, _, stderr := runBaton(t, "dev", "--demo", "--data-dir", t.TempDir(), "--internal-tls-cert", "a", "--internal-tls-key", "b",
		"--internal-tls-client-ca", "c")
	if code != 1 || !strings.Contains(stderr, "--demo makes its own certificates") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// demo-task reads its payload from stdin, heartbeats with its token, and prints its output.
func TestDemoTask(t *testing.T) {
	var got struct {
		header string
		body   map[string]any
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/task/heartbeat" {
			http.NotFound(w, r)
			return
		}
		got.header = r.Header.Get("X-Trace-Task-Capability")
		json.NewDecoder(r.Body).Decode(&got.body)
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	t.Setenv(envPublicURL, srv.URL)
	t.Setenv(envCapability, "tok")
	old := demoStdin
	defer func() { demoStdin = old }()
	demoStdin = strings.NewReader(`{"task_id":"id-1","task_key":"compile-result","name":"compile-result","attempt":2,"lease_token":"l",
		"input":{},"dependency_outputs":{"font-pairing":{},"color-tags":{}}}`)
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"demo-task"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
		t.Fatal(err)
	}
	if out["result"] != "compiled the results of color-tags and font-pairing" || out["taskScopedHeartbeat"] != 200.0 {
		t.Fatalf("output %s", stdout.String())
	}
	if got.header != "tok" || got.body["task_id"] != "id-1" || got.body["attempt"] != 2.0 || got.body["lease_token"] != "l" {
		t.Fatalf("heartbeat %+v", got)
	}
}
