package examples

import (
	"os"
	"os/exec"
	"path/filepath"
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
	// producer runs producer.mjs on the job document (on stdin), within 60 s.
	producer := func(t *testing.T, d *dev, doc string, wantExit int, args ...string) (map[string]any, string) {
		t.Helper()
		return produce(t, d.env(), 60*time.Second, doc, wantExit, append([]string{node, script("producer.mjs"), "-"}, args...)...)
	}
	// job is a → b, a+b → c, all named (and queued as) name; a blocks the ts-pull worker's thread
	// for 1.5 s under a 2 s lease, so it lives only if the heartbeats go on meanwhile.
	job := func(name, rt string) string {
		return dagJobOf("ts-example", name, rt, "", rt == "pull" && name == "ts-pull")
	}

	t.Run("producer_and_worker", func(t *testing.T) {
		d := startDev(t, bin)
		buildtest.Start(t, exec.Command(node, script("worker.mjs"), "ts-pull"), d.env())
		j, stderr := producer(t, d, job("ts-pull", "pull"), 0, "--idempotency-key", "ts-example-1")
		checkOutputs(t, j, "typescript-worker", false)
		again, _ := producer(t, d, job("ts-pull", "pull"), 0, "--idempotency-key", "ts-example-1")
		if again["jobId"] != j["jobId"] {
			t.Fatalf("a replayed Idempotency-Key gave job %v, the first %v", again["jobId"], j["jobId"])
		}
		if !strings.Contains(stderr, "Task Completed c") || !strings.Contains(stderr, "job completed") {
			t.Fatalf("the producer did not follow the job's events:\n%s", stderr)
		}
		failed, _ := producer(t, d, `{"tasks":[{"taskId":"x","name":"ts-pull","input":{"fail":"DATA_QUALITY"}}]}`, 1)
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
		d := startDev(t, bin, "--internal-tls-cert", pem("server.pem"), "--internal-tls-key", pem("server-key.pem"),
			"--internal-tls-client-ca", pem("ca.pem"))
		env := append(d.env(), "BATON_INTERNAL_URL=https://"+d.internal, "BATON_CA_FILE="+pem("ca.pem"),
			"BATON_CERT_FILE="+pem("client.pem"), "BATON_KEY_FILE="+pem("client-key.pem"))
		buildtest.Start(t, exec.Command(node, script("worker.mjs"), "ts-pull"), env)
		j, _ := producer(t, d, job("ts-pull", "pull"), 0)
		checkOutputs(t, j, "typescript-worker", false)
	})

	t.Run("push_target", func(t *testing.T) {
		const secret = "s3cret-for-typescript-examples"
		target := buildtest.FreeAddr(t)
		buildtest.Start(t, exec.Command(node, script("push_target.mjs"), "--listen", target), []string{"BATON_PUSH_SECRET=" + secret})
		buildtest.WaitListening(t, target, 10*time.Second)
		d := startDev(t, bin, "--push-target", "ts-push=http://"+target+"/run", "--push-secret", "ts-push="+secret)
		j, _ := producer(t, d, job("ts-push", "push"), 0)
		checkOutputs(t, j, "push", false)
	})

	t.Run("task_scoped_child", func(t *testing.T) {
		d := startDev(t, bin)
		// The child is contained: it may read only the example and the SDK it imports.
		buildtest.Start(t, exec.Command(bin, "worker", "--task", "ts-scoped", "--exec", node+" "+script("scoped_child.mjs"),
			"--child-read", dir, "--child-read", sdk,
			"--internal-url", "http://"+d.internal, "--url", "http://"+d.public, "--worker-id", "ts-scoped-wrapper"), nil)
		j, _ := producer(t, d, job("ts-scoped", "pull"), 0)
		checkOutputs(t, j, "task-scoped", false)
	})
}
