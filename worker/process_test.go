package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/worker"
)

// The test binary doubles as a worker process: with these variables set, it runs a worker
// instead of the tests.
const (
	childURLEnv  = "BATON_WORKER_TEST_CHILD_URL"
	childIDEnv   = "BATON_WORKER_TEST_CHILD_ID"
	childModeEnv = "BATON_WORKER_TEST_CHILD_MODE" // "block": never finish; "succeed"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childURLEnv); url != "" {
		os.Exit(childWorker(url, os.Getenv(childIDEnv), os.Getenv(childModeEnv)))
	}
	os.Exit(m.Run())
}

// childWorker runs a worker of the "victim" task until SIGTERM.
func childWorker(url, id, mode string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// A short long poll: a retry that becomes due during a poll is only seen at the poll's end.
	w, err := worker.New(url, worker.WithWorkerID(id), worker.WithLogger(log), worker.WithPollWait(time.Second))
	if err != nil {
		log.Error("new worker", "err", err)
		return 2
	}
	w.Handle("victim", func(ctx context.Context, t *worker.Task) (any, error) {
		if mode == "block" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return map[string]any{"worker": id, "attempt": t.Attempt}, nil
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Error("run", "err", err)
		return 1
	}
	return 0
}

// lockedBuffer collects a child's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startChild starts a worker process; its output is logged if the test fails.
func startChild(t *testing.T, url, id, mode string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childURLEnv+"="+url, childIDEnv+"="+id, childModeEnv+"="+mode)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("output of worker %s:\n%s", id, out)
		}
	})
	return cmd
}

func TestKilledWorkersTaskIsRetriedByAnotherAndCompletesOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	jobID, ids := s.submit(spec{key: "v", name: "victim", leaseSeconds: 2, maxAttempts: 3, backoffMs: 50})
	id := ids["v"]

	first := startChild(t, s.url(), "worker-1", "block")
	s.waitTask(id, "running on worker-1", func(tk *store.Task) bool {
		return tk.Status == lifecycle.Running && tk.WorkerID == "worker-1"
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	second := startChild(t, s.url(), "worker-2", "succeed")
	tk := s.waitTask(id, "completed", status(lifecycle.Completed))
	if want := `{"attempt":2,"worker":"worker-2"}`; string(tk.Output) != want {
		t.Errorf("output %s, want %s", tk.Output, want)
	}
	as := s.attempts(id)
	if len(as) != 2 ||
		as[0].WorkerID != "worker-1" || as[0].Outcome != store.OutcomeTimedOut || as[0].Error.Reason != lifecycle.ReasonHeartbeatTimeout ||
		as[1].WorkerID != "worker-2" || as[1].Outcome != store.OutcomeSucceeded {
		t.Errorf("attempts = %s", describe(as))
	}
	if n := s.events(jobID, dispatch.EventTaskCompleted); n != 1 {
		t.Errorf("%d completions, want 1", n)
	}

	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("worker-2 after SIGTERM: %v", err)
	}
}
