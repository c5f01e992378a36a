//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
)

// pushedPipeline runs feeder on ecs_udf (baton dev runs it) and evaluate on lambda with operator
// alert_evaluate: with a push target for alert_evaluate, the server pushes its tasks.
func pushedPipeline(feeder, evaluate string) string {
	doc := userlandPipeline(feeder, evaluate, "unused")
	jobs, publish, _ := strings.Cut(doc, "publish:")
	jobs, _, _ = strings.Cut(jobs, "  - name: summarize")
	return jobs + "publish:" + publish
}

// udfRunner is `baton udf-runner` running in this process (its children are real processes).
type udfRunner struct {
	addr           string // host:port it serves on
	stdout, stderr *syncBuffer
}

// startUDFRunner runs `baton udf-runner` on a free port with args until the test ends.
func startUDFRunner(t *testing.T, args ...string) *udfRunner {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &udfRunner{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	exited := make(chan int, 1)
	full := append([]string{"udf-runner", "--listen", "127.0.0.1:0", "--bundle-cache", filepath.Join(sharedDir(t, 0o755), "bundles"),
		"--grace", "500ms", "--shutdown-timeout", "5s", "--log-level", "debug"}, args...)
	go func() { exited <- run(ctx, full, r.stdout, r.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("baton udf-runner exited %d; stderr:\n%s", code, r.stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("baton udf-runner did not stop")
		}
	})
	m := waitForLine(t, r.stdout, regexp.MustCompile(`on http://(\S+)/ \(bundle cache`), exited, r.stderr)
	r.addr = m[1]
	return r
}

// A lambda job's bundle, pushed by baton dev to baton udf-runner, reads its input rows with its
// token and publishes a buffered batch; the runner reports its output with its token alone.
func TestUDFRunnerRunsPushedBundleTasks(t *testing.T) {
	t.Parallel()
	const secret = "udf-runner-s3cret"
	data := sharedDir(t, 0o700)
	blobs := filepath.Join(data, "blobs")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		t.Fatal(err)
	}
	r := startUDFRunner(t, "--push-secret", secret, "--blob-url", "file://"+blobs)
	d := startDevWith(t, data, "--push-target", "alert_evaluate=http://"+r.addr+"/", "--push-secret", "alert_evaluate="+secret)
	key := bannerKey.FindStringSubmatch(d.stdout.String())[1]
	feeder := uploadZip(t, d.producer, key, buildBundleDir(t, feederBundle))
	evaluate := uploadZip(t, d.producer, key, buildBundleDir(t, evaluateBundle, "--entrypoint", "trace.py"))
	cl := client.New(d.producer, key)
	if _, err := cl.DeployPipeline(context.Background(), []byte(pushedPipeline(feeder, evaluate)), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	runSource(t, d.producer, key, "userland", "feed")

	if fed := finishedTask(t, cl, "userland.feed", 60*time.Second); fed.Status != client.TaskCompleted {
		t.Fatalf("feed: %s %+v\n%s", fed.Status, fed.Error, d.stderr.String())
	}
	ev := finishedTask(t, cl, "userland.evaluate", 60*time.Second)
	if ev.Status != client.TaskCompleted || !strings.Contains(string(ev.Output), `"alerts":2`) {
		t.Fatalf("evaluate read the high readings with its token: %s %s %+v\nrunner:\n%s", ev.Status, ev.Output, ev.Error, r.stderr.String())
	}
	// The runner ran it, not baton dev's own bundle runner (logged before the report).
	if log := r.stderr.String(); !strings.Contains(log, `msg="push delivery taken"`) || !strings.Contains(log, "task=alert_evaluate") ||
		!strings.Contains(log, `msg="child succeeded"`) || !strings.Contains(log, `msg="batch published"`) {
		t.Errorf("the runner's log does not show it ran and published the task:\n%s", log)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, err := cl.DatasetRows(context.Background(), "alerts", client.RowsQuery{})
		if err == nil && len(rows.Rows) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the alerts the pushed bundle published: %+v %v", rows, err)
		}
		time.Sleep(50 * time.Millisecond) // the sink loads the batch
	}
}

func TestUDFRunnerFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--listen ADDR is required"},
		{[]string{"--listen", "127.0.0.1:0", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--listen", "127.0.0.1:0", "--concurrency", "0"}, 2, "--concurrency must be at least 1"},
		{[]string{"--listen", "127.0.0.1:0", "--grace", "0s"}, 2, "--grace must be positive"},
		{[]string{"--listen", "127.0.0.1:0", "--shutdown-timeout", "0s"}, 2, "--shutdown-timeout must be positive"},
		{[]string{"--listen", "127.0.0.1:0", "--url", "ftp://x"}, 2, `--url "ftp://x": want http(s)://host[:port]`},
		{[]string{"--listen", "127.0.0.1:0"}, 2, "without --push-secret, --url is required"},
		{[]string{"--listen", "127.0.0.1:0", "--blob-url", "http://x"}, 2, "want file://DIR or s3://BUCKET/PREFIX"},
		{[]string{"--listen", "127.0.0.1:0", "--push-secret", "has space"}, 2, "printable ASCII without spaces"},
		{[]string{"--listen", "127.0.0.1:0", "--push-secret", "@/no/such/file"}, 2, "--push-secret: read the secret"},
		{[]string{"--listen", "127.0.0.1:0", "--log-level", "loud"}, 2, `--log-level "loud"`},
		{[]string{"--listen", "127.0.0.1:0", "--push-secret", "s", "--child-user", "root"}, 1, `refusing to run untrusted children as "root"`},
		{[]string{"--listen", "not-an-address", "--push-secret", "s"}, 1, "not-an-address"},
	} {
		code, _, stderr := runBaton(t, append([]string{"udf-runner"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("baton udf-runner %q: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}
