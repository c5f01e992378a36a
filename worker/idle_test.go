package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/worker"
)

// runUntilIdle runs a worker of url whose Run is expected to return by itself; it returns Run's
// error, failing the test if Run has not returned after a while.
func runUntilIdle(t *testing.T, url string, handlers map[string]worker.Handler, opts ...worker.Option) error {
	t.Helper()
	opts = append([]worker.Option{worker.WithLogger(testLogger(t)), worker.WithPollWait(200 * time.Millisecond)}, opts...)
	w, err := worker.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		w.Handle(name, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		cancel()
		<-done
		t.Fatal("Run did not return once its queues were empty")
		return nil
	}
}

func ok(context.Context, *worker.Task) (any, error) { return map[string]bool{"ok": true}, nil }

// A batch worker (idle timeout 0) runs every task of its queues, then Run returns nil by itself.
func TestIdleTimeoutZeroDrainsTheQueuesAndReturns(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "a", name: "batch"}, spec{key: "b", name: "batch"}, spec{key: "c", name: "batch", dependsOn: []string{"a"}})
	err := runUntilIdle(t, s.url(), map[string]worker.Handler{"batch": ok}, worker.WithIdleTimeout(0), worker.WithConcurrency(2))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for key, id := range ids {
		if got := s.task(id).Status; got != lifecycle.Completed {
			t.Errorf("task %s is %s after the batch worker returned, want completed", key, got)
		}
	}
}

// A worker that follows its jobs' idle_timeout returns once a job with idle_timeout: 0 has no
// more work, and the claim carries the job's value to the handler.
func TestWorkerFollowsItsJobsIdleTimeout(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	if _, err := s.dp.Deploy(ctx, "default", []byte(pipelinetest.IdleDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	run, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "idle", Job: "ingest"})
	if err != nil {
		t.Fatal(err)
	}
	var carried *float64
	err = runUntilIdle(t, s.url(), map[string]worker.Handler{"ingest": func(ctx context.Context, tk *worker.Task) (any, error) {
		carried = tk.Pipeline.Job.IdleTimeoutSeconds
		return ok(ctx, tk)
	}}, worker.WithJobIdleTimeout())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if carried == nil || *carried != 0 {
		t.Errorf("the claim carried idle_timeout_seconds %v, want 0", carried)
	}
	if got := s.task(run.TaskID).Status; got != lifecycle.Completed {
		t.Errorf("task is %s, want completed", got)
	}
}

// A worker that follows its jobs' idle_timeout stays while the jobs it ran set none (never): it
// keeps claiming after its queue is empty, until its context ends.
func TestWorkerStaysWhenItsJobsSetNoIdleTimeout(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, ids := s.submit(spec{key: "a", name: "plain"})
	p := newProxy(t, s.url(), nil)
	w := start(t, p.URL, map[string]worker.Handler{"plain": ok}, worker.WithJobIdleTimeout(), worker.WithPollWait(100*time.Millisecond))
	s.waitTask(ids["a"], "completed", status(lifecycle.Completed))
	after := p.count("/internal/worker/claim")
	deadline := time.Now().Add(30 * time.Second)
	for p.count("/internal/worker/claim") < after+3 {
		if time.Now().After(deadline) {
			t.Fatal("the worker stopped claiming after its queue emptied, although no job set an idle_timeout")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
