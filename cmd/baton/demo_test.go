//go:build unix

package main

import (
	"context"
	"database/sql"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
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
	if len(os.Args) > 1 && slices.Contains([]string{"worker", "demo-task", "dev", "server", "migrate", "bench", "sink"}, os.Args[1]) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// envContext returns a context whose runs of `run` read the environment as the process has it
// but for the given name, value pairs: tests that run in parallel cannot set the process's
// (t.Setenv), which every test would see.
func envContext(ctx context.Context, kv ...string) context.Context {
	over := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		over[kv[i]] = kv[i+1]
	}
	return withConfigMode(ctx, configMode{lookupEnv: func(name string) (string, bool) {
		if v, ok := over[name]; ok {
			return v, true
		}
		return os.LookupEnv(name)
	}})
}

// `baton dev --demo` runs the five-task example job end to end with real worker processes, whose
// children call the task-scoped API with their token, well within 4 minutes; then it stops
// cleanly.
func TestDevDemo(t *testing.T) {
	t.Parallel()
	out := runDevDemo(t, "the workers keep running", "--demo")
	for _, want := range []string{"mTLS", "completed in", "started 5 `baton worker` processes", "compile-result       completed",
		`"taskScopedHeartbeat": 200`, `"usedOutputsOf": [`, `"color-tags",`} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	// One key: the demo submits with the dev key of the banner and says so.
	banner := regexp.MustCompile(`API key +(bk_\S+)`).FindStringSubmatch(out)
	hint := regexp.MustCompile(`BATON_API_KEY=(\S+) baton job submit`).FindStringSubmatch(out)
	if banner == nil || hint == nil || banner[1] != hint[1] || !strings.Contains(out, "with the dev API key of the banner above") {
		t.Errorf("the banner's key and the demo's differ, or the demo does not say which it uses:\n%s", out)
	}
	if os.Geteuid() == 0 && !strings.Contains(out, `"ranAsUid": 65534`) {
		t.Errorf("as root the demo's children should run as nobody:\n%s", out)
	}
}

// `baton dev --demo pipeline` deploys examples/pipeline and runs it with real worker processes:
// the always_on source's partitions go through every job of the DAG, and the alert rows that
// range_stats writes to the buffered dataset are loaded by the sink and routed to the two readers
// whose where they match (every batch has a low alert, every other one a high one).
func TestDevDemoPipeline(t *testing.T) {
	t.Parallel()
	out := runDevDemo(t, "went through every job", "--demo", "pipeline")
	for _, want := range []string{"deployed pipeline blocks_demo", "started 5 `baton worker` processes",
		"range_totals 10/10, mainnet_alerts 10/10, testnet_alerts 10/10, pager 5/5, digest 10/10"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

// runDevDemo runs `baton dev` with demo flags until it prints done, then stops it and returns
// what it printed.
func runDevDemo(t *testing.T, done string, demo ...string) string {
	t.Helper()
	return runDevDemoInspect(t, done, nil, demo...)
}

// runDevDemoInspect is runDevDemo that calls inspect with what the demo printed once it printed
// done, before stopping it.
func runDevDemoInspect(t *testing.T, done string, inspect func(stdout string), demo ...string) string {
	t.Helper()
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(envContext(context.Background(), "BATON_API_KEY", ""))
	defer cancel()
	exited := make(chan int, 1)
	dataDir := t.TempDir()
	go func() {
		exited <- run(ctx, append([]string{"dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0",
			"--internal-listen", "127.0.0.1:0", "--metrics-listen=", "--shutdown-timeout", "5s"}, demo...), &stdout, &stderr)
	}()
	start := time.Now()
	for !strings.Contains(stdout.String(), done) {
		select {
		case code := <-exited:
			t.Fatalf("baton dev %v exited %d early\nstdout:\n%s\nstderr:\n%s", demo, code, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		// A hang detector, not a speed check: the demo takes ~30 s with -race on a quiet 2-core
		// machine, and several times that beside the rest of the suite.
		if time.Since(start) > 4*time.Minute {
			t.Fatalf("the demo did not finish within 4 minutes\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}
	t.Logf("demo finished %s after start", time.Since(start).Round(time.Millisecond))
	out := stdout.String()
	if inspect != nil {
		inspect(out)
	}
	cancel()
	select {
	case code := <-exited:
		if code != 0 || !strings.Contains(stdout.String(), "stopped") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("baton dev %v did not stop\nstderr:\n%s", demo, stderr.String())
	}
	if strings.Contains(stderr.String(), "worker exited") {
		t.Errorf("a worker exited before the demo stopped it:\n%s", stderr.String())
	}
	// The workers stop before the server does, so a task still running then (the pipeline's
	// block follower never ends by itself) was handed back, not left leased to a worker that
	// is gone.
	if running := runningTasks(t, filepath.Join(dataDir, dbFile)); len(running) > 0 {
		t.Errorf("tasks still running after baton dev stopped: %v\nstderr:\n%s", running, stderr.String())
	}
	return out
}

// runningTasks lists the names of the tasks in the SQLite database at path that are running.
func runningTasks(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM tasks WHERE status = 'running'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestDevDemoRefusesOwnTLSFlags(t *testing.T) {
	t.Parallel()
	code, _, stderr := runBaton(t, "dev", "--demo", "--data-dir", t.TempDir(), "--internal-tls-cert", "a", "--internal-tls-key", "b",
		"--internal-tls-client-ca", "c")
	if code != 1 || !strings.Contains(stderr, "--demo makes its own certificates") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
