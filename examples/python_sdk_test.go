package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/buildtest"
)

// TestPythonSDKExamples runs the examples of examples/python, written with the Python SDK
// (sdk/python, on PYTHONPATH), against a real `baton dev`: the SDK's producer submits the
// three-task job of TestPythonExamples (a → b, a+b → c, a sleeping 1.5 s under a 2 s lease) and
// each kind of SDK worker must run it to the outputs it computed, a parent's output reaching its
// child (c's total is 100 + b's 11 + a's 1).
func TestPythonSDKExamples(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; CI must run the Python SDK examples")
		}
		t.Skip("python3 is not installed; skipping the Python SDK examples")
	}
	if out, err := exec.Command(py, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").CombinedOutput(); err != nil {
		t.Fatalf("the Python SDK needs Python 3.9 or newer (%s): %v %s", py, err, out)
	}
	sdk, err := filepath.Abs(filepath.Join("..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", sdk)
	bin := filepath.Join(t.TempDir(), "baton")
	buildtest.Build(t, "..", "./cmd/baton", bin)
	dir, err := filepath.Abs("python")
	if err != nil {
		t.Fatal(err)
	}
	script := func(name string) string { return filepath.Join(dir, name) }

	t.Run("worker", func(t *testing.T) {
		d := startDev(t, bin)
		w := startPython(t, d, py, script("worker.py"), nil, "--task", "py-sdk", "--max-tasks", "4")
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-sdk", "pull", ""), 0)
		checkOutputs(t, job, "sdk-worker", false)
		// A failure with a category: exit status 1 and the category in the final view.
		failed, _ := runProducer(t, d, py, script("producer.py"),
			`{"tasks":[{"taskId":"x","name":"py-sdk","input":{"fail":"DATA_QUALITY"}}]}`, 1)
		task := failed["tasks"].([]any)[0].(map[string]any)
		if failed["status"] != "partial_failure" || task["error"].(map[string]any)["category"] != "DATA_QUALITY" {
			t.Fatalf("failed job: %v", failed)
		}
		waitExit(t, w)
	})

	t.Run("async_worker", func(t *testing.T) {
		d := startDev(t, bin)
		w := startPython(t, d, py, script("async_worker.py"), nil, "--task", "py-sdk-async", "--max-tasks", "3")
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-sdk-async", "pull", ""), 0)
		checkOutputs(t, job, "sdk-async", false)
		waitExit(t, w)
	})

	t.Run("task_child", func(t *testing.T) {
		d := startDev(t, bin)
		// The SDK vendored next to the child, as in a bundle: the wrapper scrubs the child's
		// environment, PYTHONPATH included. Run as root, the wrapper runs the child as nobody.
		vendor, err := os.MkdirTemp("", "py-sdk-child-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(vendor) })
		if out, err := exec.Command(py, "-m", "pip", "install", "--quiet", "--no-index", "--target", vendor, sdk).CombinedOutput(); err != nil {
			t.Fatalf("pip install --target: %v\n%s", err, out)
		}
		src, err := os.ReadFile(script("task_child.py"))
		if err != nil {
			t.Fatal(err)
		}
		child := filepath.Join(vendor, "task_child.py")
		if err := os.WriteFile(child, src, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := filepath.Walk(vendor, func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if info.IsDir() {
				return os.Chmod(p, 0o755)
			}
			return os.Chmod(p, 0o644)
		}); err != nil {
			t.Fatal(err)
		}
		w := buildtest.Start(t, exec.Command(bin, "worker", "--task", "py-sdk-child", "--exec", "python3 "+child, "--child-read", vendor,
			"--internal-url", "http://"+d.internal, "--url", "http://"+d.public, "--worker-id", "py-sdk-wrapper"), nil)
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-sdk-child", "pull", ""), 0)
		checkOutputs(t, job, "sdk-task-scoped", false)
		w.Stop()
	})

	t.Run("push_wsgi", func(t *testing.T) {
		const secret = "s3cret-for-python-sdk-examples"
		target := buildtest.FreeAddr(t)
		w := startPython(t, nil, py, script("push_wsgi.py"), []string{"BATON_PUSH_SECRET=" + secret},
			"--listen", target, "--task", "py-sdk-push", "--max-tasks", "3")
		buildtest.WaitListening(t, target, 10*time.Second)
		d := startDev(t, bin, "--push-target", "py-sdk-push=http://"+target+"/", "--push-secret", "py-sdk-push="+secret)
		job, _ := runProducer(t, d, py, script("producer.py"), dagJob("py-sdk-push", "push", ""), 0)
		checkOutputs(t, job, "sdk-push", false)
		waitExit(t, w)
	})
}
