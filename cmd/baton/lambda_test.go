package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/worker"
)

// On a fresh `baton dev` (no push targets), a lambda job deploys and its tasks run on pull
// workers of the operator's queue, as the deploy answer's warning says.
func TestDevRunsLambdaJobsOnPullWorkers(t *testing.T) {
	p, internal := startDevServer(t)
	doc := `{"name": "thumbs", "jobs": [{"name": "resize", "activation": "source", "runtime": "lambda",
		"operator": "resize", "outputs": 1, "source": {"kind": "manual"}}]}`
	code, res := p.call("POST", "/pipelines", doc)
	if code != 201 {
		t.Fatalf("deploy: %d %v", code, res)
	}
	want := `job resize: no push target for operator "resize": baton dev hands its tasks to pull workers of queue "resize" instead (baton worker --task resize --queue resize)`
	if ws, _ := res["warnings"].([]any); len(ws) != 1 || ws[0] != want {
		t.Fatalf("warnings %v, want [%s]", res["warnings"], want)
	}
	code, run := p.call("POST", "/pipelines/thumbs/jobs/resize/run", `{}`)
	if code != 201 {
		t.Fatalf("run: %d %v", code, run)
	}
	w, err := worker.New(internal, worker.WithPollWait(200*time.Millisecond), worker.WithIdleTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("resize", func(ctx context.Context, tk *worker.Task) (any, error) {
		return map[string]string{"job": tk.Pipeline.Job.Name}, nil
	})
	if err := w.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	job := p.waitJob(run["job_id"].(string), time.Minute)
	if job["status"] != "completed" || !strings.Contains(job["tasks"].([]any)[0].(map[string]any)["output"].(map[string]any)["job"].(string), "resize") {
		t.Fatalf("the lambda job's task on a pull worker: %v", job)
	}
}
