package examples

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/buildtest"
)

// TestTypeScriptExamples runs the examples of examples/typescript, which use the TypeScript SDK
// (sdk/typescript, built here with npm), against a real `baton dev`: the producer submits a
// three-task DAG (a → b, a+b → c) that the example worker, the push target or the task-scoped
// child run, and the job must complete with the outputs they computed (c's total is 100 + b's 11
// + a's 1). Without sdk/typescript/node_modules it skips (run `npm ci --prefix sdk/typescript`),
// except under CI=true, where it fails.
func TestTypeScriptExamples(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed; CI must run the TypeScript examples")
		}
		t.Skip("node is not installed; skipping the TypeScript examples")
	}
	sdk, err := filepath.Abs(filepath.Join("..", "sdk", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sdk, "node_modules")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("sdk/typescript/node_modules is missing: CI must run `npm ci --prefix sdk/typescript` before the TypeScript examples")
		}
		t.Skip("sdk/typescript/node_modules is missing; run `npm ci --prefix sdk/typescript` to run the TypeScript examples")
	}
	if out, err := exec.Command("npm", "--prefix", sdk, "run", "build").CombinedOutput(); err != nil {
		t.Fatalf("npm --prefix sdk/typescript run build: %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "baton")
	buildtest.Build(t, "..", "./cmd/baton", bin)
	dir, err := filepath.Abs("typescript")
	if err != nil {
		t.Fatal(err)
	}
	script := func(name string) string { return filepath.Join(dir, name) }

	t.Run("producer_and_worker", func(t *testing.T) {
		d := tsStartDev(t, bin)
		tsStart(t, exec.Command(node, script("worker.mjs"), "ts-pull"), d.env())
		job, stderr := tsProducer(t, d, node, script("producer.mjs"), tsDagJob("ts-pull", "pull"), 0, "--idempotency-key", "ts-example-1")
		tsCheckOutputs(t, job, "typescript-worker")
		again, _ := tsProducer(t, d, node, script("producer.mjs"), tsDagJob("ts-pull", "pull"), 0, "--idempotency-key", "ts-example-1")
		if again["jobId"] != job["jobId"] {
			t.Fatalf("a replayed Idempotency-Key gave job %v, the first %v", again["jobId"], job["jobId"])
		}
		if !strings.Contains(stderr, "Task Completed c") || !strings.Contains(stderr, "job completed") {
			t.Fatalf("the producer did not follow the job's events:\n%s", stderr)
		}
		failed, _ := tsProducer(t, d, node, script("producer.mjs"),
			`{"tasks":[{"taskId":"x","name":"ts-pull","input":{"fail":"DATA_QUALITY"}}]}`, 1)
		task := failed["tasks"].([]any)[0].(map[string]any)
		if failed["status"] != "partial_failure" || task["error"].(map[string]any)["category"] != "DATA_QUALITY" {
			t.Fatalf("failed job: %v", failed)
		}
	})

	t.Run("mtls_worker", func(t *testing.T) {
		certs := t.TempDir()
		if out, err := exec.Command(bin, "certs", "dev", "--out", certs, "--force").CombinedOutput(); err != nil {
			t.Fatalf("baton certs dev: %v\n%s", err, out)
		}
		pem := func(name string) string { return filepath.Join(certs, name) }
		d := tsStartDev(t, bin, "--internal-tls-cert", pem("server.pem"), "--internal-tls-key", pem("server-key.pem"),
			"--internal-tls-client-ca", pem("ca.pem"))
		env := append(d.env(), "BATON_INTERNAL_URL=https://"+d.internal, "BATON_CA_FILE="+pem("ca.pem"),
			"BATON_CERT_FILE="+pem("client.pem"), "BATON_KEY_FILE="+pem("client-key.pem"))
		tsStart(t, exec.Command(node, script("worker.mjs"), "ts-pull"), env)
		job, _ := tsProducer(t, d, node, script("producer.mjs"), tsDagJob("ts-pull", "pull"), 0)
		tsCheckOutputs(t, job, "typescript-worker")
	})

	t.Run("push_target", func(t *testing.T) {
		const secret = "s3cret-for-typescript-examples"
		target := tsFreeAddr(t)
		tsStart(t, exec.Command(node, script("push_target.mjs"), "--listen", target), []string{"BATON_PUSH_SECRET=" + secret})
		tsWaitListening(t, target)
		d := tsStartDev(t, bin, "--push-target", "ts-push=http://"+target+"/run", "--push-secret", "ts-push="+secret)
		job, _ := tsProducer(t, d, node, script("producer.mjs"), tsDagJob("ts-push", "push"), 0)
		tsCheckOutputs(t, job, "push")
	})

	t.Run("task_scoped_child", func(t *testing.T) {
		d := tsStartDev(t, bin)
		// The child is contained: it may read only the example and the SDK it imports.
		tsStart(t, exec.Command(bin, "worker", "--task", "ts-scoped", "--exec", node+" "+script("scoped_child.mjs"),
			"--child-read", dir, "--child-read", sdk,
			"--internal-url", "http://"+d.internal, "--url", "http://"+d.public, "--worker-id", "ts-scoped-wrapper"), nil)
		job, _ := tsProducer(t, d, node, script("producer.mjs"), tsDagJob("ts-scoped", "pull"), 0)
		tsCheckOutputs(t, job, "task-scoped")
	})
}

const tsAPIKey = "ts-examples-key-0123456789"

type tsDev struct{ public, internal string }

func (d *tsDev) env() []string {
	return []string{"BATON_URL=http://" + d.public, "BATON_INTERNAL_URL=http://" + d.internal, "BATON_API_KEY=" + tsAPIKey}
}

// tsDagJob is a → b, a+b → c, all named (and queued as) name; a blocks its worker's thread for
// 1.5 s under a 2 s lease, so it lives only if the heartbeats go on meanwhile.
func tsDagJob(name, runtime string) string {
	task := func(id string, deps []string, input, extra string) string {
		d, _ := json.Marshal(deps)
		return fmt.Sprintf(`{"taskId":%q,"name":%q,"runtime":%q,"dependsOn":%s,"input":%s%s}`, id, name, runtime, d, input, extra)
	}
	sleep := ""
	if runtime == "pull" && name == "ts-pull" {
		sleep = `,"sleep":1.5`
	}
	return `{"name":"ts-example","tasks":[` +
		task("a", []string{}, `{"n":1`+sleep+`}`, `,"heartbeatTimeoutSeconds":2,"maxAttempts":1`) + "," +
		task("b", []string{"a"}, `{"n":10}`, "") + "," +
		task("c", []string{"a", "b"}, `{"n":100}`, "") + "]}"
}

func tsCheckOutputs(t *testing.T, job map[string]any, by string) {
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
		if w := want[task["taskId"].(string)]; !reflect.DeepEqual(task["output"], any(w)) {
			t.Errorf("task %v: output %v, want %v", task["taskId"], task["output"], w)
		}
	}
}

// tsProducer runs producer.mjs on the job document (on stdin), expects the exit status, and
// returns the final job view it printed and its stderr.
func tsProducer(t *testing.T, d *tsDev, node, script, doc string, wantExit int, args ...string) (map[string]any, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script, "-"}, args...)...)
	cmd.Env = append(os.Environ(), d.env()...)
	cmd.Stdin = strings.NewReader(doc)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("producer.mjs: %v\n%s", err, stderr.String())
		}
		code = ee.ExitCode()
	}
	if code != wantExit {
		t.Fatalf("producer.mjs exited %d, want %d; stdout:\n%s\nstderr:\n%s", code, wantExit, stdout.String(), stderr.String())
	}
	var job map[string]any
	if err := json.Unmarshal([]byte(stdout.String()), &job); err != nil {
		t.Fatalf("producer.mjs printed no job view: %v; stdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	return job, stderr.String()
}

// tsStartDev starts `baton dev` on free ports with a fresh data directory and waits until both
// listeners answer /readyz (with mutual TLS on the internal listener: until it listens).
func tsStartDev(t *testing.T, bin string, extra ...string) *tsDev {
	t.Helper()
	d := &tsDev{public: tsFreeAddr(t), internal: tsFreeAddr(t)}
	args := append([]string{"dev", "--data-dir", t.TempDir(), "--listen", d.public, "--internal-listen", d.internal,
		"--metrics-listen=", "--sink=false", "--shutdown-timeout", "2s"}, extra...)
	p := tsStart(t, exec.Command(bin, args...), []string{"BATON_API_KEY=" + tsAPIKey})
	deadline := time.Now().Add(15 * time.Second)
	for _, addr := range []string{d.public, d.internal} {
		if addr == d.internal && slices.Contains(extra, "--internal-tls-cert") {
			tsWaitListening(t, addr) // mutual TLS: a plain GET cannot ask
			continue
		}
		for {
			res, err := http.Get("http://" + addr + "/readyz")
			if err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("baton dev did not become ready on %s: %v\n%s", addr, err, p.out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return d
}

type tsProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// tsStart starts cmd with env added to this process's environment; the test's cleanup stops it
// (SIGINT, then SIGKILL after 5 s) and logs its output if the test failed.
func tsStart(t *testing.T, cmd *exec.Cmd, env []string) *tsProc {
	t.Helper()
	p := &tsProc{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", strings.Join(cmd.Args, " "), p.out.String())
		}
	})
	return p
}

func tsFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tsWaitListening(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s", addr)
		}
	}
}
