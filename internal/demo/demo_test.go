//go:build unix

package demo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/wrapper"
)

func TestDemoJobIsTheExample(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("../../examples/job.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(file) != jobJSON {
		t.Fatal("jobJSON differs from examples/job.json; keep them equal")
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
	if strings.Join(names, ",") != strings.Join(taskNames, ",") {
		t.Fatalf("task names %v, demo workers for %v", names, taskNames)
	}
}

func TestDemoPipelineIsTheExample(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("../../examples/pipeline/pipeline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(file) != PipelineYAML {
		t.Fatal("PipelineYAML differs from examples/pipeline/pipeline.yaml; keep them equal")
	}
	doc, problems := pipeline.Parse(file, "application/yaml")
	if len(problems) > 0 {
		t.Fatalf("the example does not validate: %v", problems)
	}
	operators := map[string]bool{}
	for _, w := range pipelineWorkers {
		operators[w.name] = true
	}
	for _, j := range doc.Jobs {
		if !operators[j.Operator] {
			t.Errorf("no demo worker for operator %s", j.Operator)
		}
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
	t.Setenv(wrapper.EnvPublicURL, srv.URL)
	t.Setenv(wrapper.EnvCapability, "tok")
	old := stdin
	defer func() { stdin = old }()
	stdin = strings.NewReader(`{"task_id":"id-1","task_key":"compile-result","name":"compile-result","attempt":2,"lease_token":"l",
		"input":{},"dependency_outputs":{"font-pairing":{},"color-tags":{}}}`)
	var stdout, stderr strings.Builder
	if code := RunTask(context.Background(), nil, &stdout, &stderr); code != 0 {
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
