//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/bundle/bundletest"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// The bundles of the end-to-end tests. feeder (Python, a program) writes three readings into
// the buffered dataset readings; evaluate (Python, a Lambda-style handler trace.handler, the
// alert_evaluate shape) reads the high ones back with its capability token and publishes an
// alert for each; summarize (Node, a program) counts what fired it.
var (
	feederBundle = map[string]string{"main.py": `import json, os, sys
p = json.load(sys.stdin)
with open(os.path.join(os.environ["BATON_BUFFER_DIR"], "readings.jsonl"), "w") as f:
    for i, level in enumerate(["high", "low", "high"]):
        f.write(json.dumps({"id": "r%d" % i, "level": level, "value": i * 10}) + "\n")
print(json.dumps({"fed": 3, "work_payload": p["work_payload"]}))
`}
	evaluateBundle = map[string]string{"trace.py": `import json, os, urllib.request
from lib import rules

def handler(event, context):
    url = os.environ["BATON_URL"] + "/v1/task/datasets/readings/rows"
    req = urllib.request.Request(url, headers={"X-Trace-Task-Capability": event["capability_token"]})
    rows = json.load(urllib.request.urlopen(req))["rows"]
    alerts = [rules.alert(r) for r in rows]
    with open(os.path.join(os.environ["BATON_BUFFER_DIR"], "alerts.jsonl"), "w") as f:
        for a in alerts:
            f.write(json.dumps(a) + "\n")
    return {"alerts": len(alerts), "request_id": context.aws_request_id}
`, "lib/__init__.py": "", "lib/rules.py": `def alert(row):
    return {"reading": row["id"], "message": "value %d is high" % row["value"]}
`}
	summarizeBundle = map[string]string{"index.mjs": `import { readFileSync } from "node:fs";
const p = JSON.parse(readFileSync(0, "utf8"));
console.log("summarizing");
console.log(JSON.stringify({ node: process.version, inputs: p.inputs.map((i) => i.dataset_name) }));
`}
)

// userlandPipeline runs the three bundles: feeder on ecs_udf, evaluate on lambda (the server
// pulls it: baton dev has no push target for it), summarize on ecs_udf.
func userlandPipeline(feeder, evaluate, summarize string) string {
	return `name: userland
jobs:
  - name: feed
    activation: source
    runtime: ecs_udf
    operator: udf
    outputs: 1
    source: {kind: manual}
    udf: {bundle_id: ` + feeder + `}
  - name: evaluate
    activation: reactive
    runtime: lambda
    operator: alert_evaluate
    outputs: 1
    inputs:
      - from: {dataset: readings}
        where: {level: high}
    udf: {bundle_id: ` + evaluate + `, entrypoint: trace.handler}
  - name: summarize
    activation: reactive
    runtime: ecs_udf
    operator: summarize
    outputs: 0
    inputs:
      - from: {dataset: alerts}
    udf: {bundle_id: ` + summarize + `}
publish:
  readings:
    from: {job: feed, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: id, type: string, required: true}
        - {name: level, type: string, required: true}
        - {name: value, type: integer}
      unique: [id]
    filter_fields: [level]
  alerts:
    from: {job: evaluate, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: reading, type: string, required: true}
        - {name: message, type: string}
      unique: [reading]
`
}

// buildBundleDir writes files into a new folder and builds it with `baton udf build`.
func buildBundleDir(t *testing.T, files map[string]string, flags ...string) string {
	t.Helper()
	dir := bundletest.Dir(t, files)
	zip := dir + ".zip"
	if code, out, errOut := baton(append([]string{"udf", "build", dir, "-o", zip}, flags...)...); code != 0 {
		t.Fatalf("baton udf build: %d %s %s", code, out, errOut)
	}
	return zip
}

// uploadZip uploads a built bundle with `baton udf upload` and returns its id.
func uploadZip(t *testing.T, producer, key, zip string) string {
	t.Helper()
	code, out, errOut := baton("udf", "upload", zip, "--url", producer, "--api-key", key, "-o", "json")
	if code != 0 {
		t.Fatalf("baton udf upload: %d %s %s", code, out, errOut)
	}
	var b client.Bundle
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.BundleID == "" {
		t.Fatalf("baton udf upload printed %q: %v", out, err)
	}
	return b.BundleID
}

// runSource starts a run of a source job and returns its task's global id.
func runSource(t *testing.T, producer, key, pipeline, job string) string {
	t.Helper()
	code, body := postJSON(t, http.DefaultClient, producer+"/pipelines/"+pipeline+"/jobs/"+job+"/run", map[string]any{}, "x-api-key", key)
	if code != http.StatusCreated {
		t.Fatalf("run %s/%s: %d %s", pipeline, job, code, body)
	}
	var res struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal([]byte(body), &res)
	return res.TaskID
}

// finishedTask waits for the first task of a job named name (pipeline.job) to end, and returns it.
func finishedTask(t *testing.T, cl *client.Client, name string, within time.Duration) client.JobTask {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		page, err := cl.ListJobs(ctx, client.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.Name != name {
				continue
			}
			job, err := cl.GetJob(ctx, j.JobID)
			if err != nil {
				t.Fatal(err)
			}
			if tk := job.Tasks[0]; tk.Status == client.TaskCompleted || tk.Status == client.TaskFailed {
				return tk
			}
		}
		time.Sleep(50 * time.Millisecond) // a real server runs real processes
	}
	t.Fatalf("no task of %s ended within %s", name, within)
	return client.JobTask{}
}

// A bare `baton dev` runs bundles itself: a Python program, a Python Lambda-style handler and
// a Node program, chained by routed events, with a buffered publish from inside a bundle and a
// rows read with its token.
func TestDevRunsBundlesOfAPipeline(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: apt-get install nodejs")
	}
	t.Parallel()
	d := startDevWith(t, sharedDir(t, 0o700))
	key := bannerKey.FindStringSubmatch(d.stdout.String())[1]
	feeder := uploadZip(t, d.producer, key, buildBundleDir(t, feederBundle))
	evaluate := uploadZip(t, d.producer, key, buildBundleDir(t, evaluateBundle, "--entrypoint", "trace.py"))
	summarize := uploadZip(t, d.producer, key, buildBundleDir(t, summarizeBundle))
	cl := client.New(d.producer, key)
	if _, err := cl.DeployPipeline(context.Background(), []byte(userlandPipeline(feeder, evaluate, summarize)), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	runSource(t, d.producer, key, "userland", "feed")

	fed := finishedTask(t, cl, "userland.feed", 60*time.Second)
	if fed.Status != client.TaskCompleted || !strings.Contains(string(fed.Output), `"fed":3`) {
		t.Fatalf("feed: %s %s %+v\n%s", fed.Status, fed.Output, fed.Error, d.stderr.String())
	}
	ev := finishedTask(t, cl, "userland.evaluate", 60*time.Second)
	if ev.Status != client.TaskCompleted || !strings.Contains(string(ev.Output), `"alerts":2`) {
		t.Fatalf("evaluate read the high readings with its token: %s %s %+v\n%s", ev.Status, ev.Output, ev.Error, d.stderr.String())
	}
	sum := finishedTask(t, cl, "userland.summarize", 60*time.Second)
	if sum.Status != client.TaskCompleted || !strings.Contains(string(sum.Output), `"inputs":["alerts"]`) {
		t.Fatalf("summarize (node): %s %s %+v\n%s", sum.Status, sum.Output, sum.Error, d.stderr.String())
	}
	rows, err := cl.DatasetRows(context.Background(), "alerts", client.RowsQuery{})
	if err != nil || len(rows.Rows) != 2 {
		t.Fatalf("the alerts the bundle published: %+v %v", rows, err)
	}
}

// An archive changed in the object store after its upload is detected by its hash when a task
// downloads it, and never run: the task fails as an infrastructure failure.
func TestDevRefusesATamperedBundle(t *testing.T) {
	t.Parallel()
	data := sharedDir(t, 0o700)
	d := startDevWith(t, data, "--sink=false")
	key := bannerKey.FindStringSubmatch(d.stdout.String())[1]
	marker := filepath.Join(sharedDir(t, 0o777), "ran")
	good := map[string]string{"main.py": "print('{}')\n"}
	evil := map[string]string{"main.py": "open(" + pyQuote(marker) + ", 'w').write('ran')\nprint('{}')\n"}
	id := uploadZip(t, d.producer, key, buildBundleDir(t, good))
	objects, _ := filepath.Glob(filepath.Join(data, "blobs", "udf-bundles", "*", id+".zip"))
	if len(objects) != 1 {
		t.Fatalf("the bundle's object in the store: %v", objects)
	}
	tampered, err := os.ReadFile(buildBundleDir(t, evil))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(objects[0], tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	cl := client.New(d.producer, key)
	doc := "name: tamper\njobs:\n  - {name: run, activation: source, runtime: ecs_udf, operator: udf, outputs: 0, source: {kind: manual}, udf: {bundle_id: " + id + "}}\n"
	if _, err := cl.DeployPipeline(context.Background(), []byte(doc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	runSource(t, d.producer, key, "tamper", "run")
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(d.stderr.String(), "SHA-256 is not the one pinned") {
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not refuse the tampered bundle:\n%s", d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // a real server runs real processes
	}
	page, err := cl.ListJobs(context.Background(), client.ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if job, err := cl.GetJob(context.Background(), page.Jobs[0].JobID); err != nil || job.Tasks[0].Status == client.TaskCompleted {
		t.Fatalf("the tampered bundle's task: %+v %v", job, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the tampered bundle ran")
	}
}

// pyQuote is s as a Python string literal.
func pyQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// On PostgreSQL, a production server runs no bundle itself: `baton worker` runs them, the
// Python program, the Python handler and the Node program alike, untrusted, with their outputs,
// buffered publishes and token reads as on baton dev.
func TestServerBundlesRunUnderBatonWorker(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: apt-get install nodejs")
	}
	t.Parallel()
	control, data := storetest.NewPostgresDatabase(t).URL, storetest.NewPostgresDatabase(t).URL
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "--database-url", control}, &out, &errOut); code != 0 {
		t.Fatalf("migrate: %s", errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"apikey", "create", "--name", "t", "--database-url", control}, &out, &errOut); code != 0 {
		t.Fatalf("apikey: %s", errOut.String())
	}
	key := strings.TrimSpace(out.String())
	addr, internal := freeAddr(t), freeAddr(t)
	public := "http://" + addr
	srvErr, blobURL := &syncBuffer{}, "file://"+t.TempDir()
	runUntilCleanup(t, []string{"server", "--database-url", control, "--data-database-url", data, "--internal-insecure",
		"--listen", addr, "--internal-listen", internal, "--metrics-listen=", "--blob-url", blobURL, "--sink"},
		&syncBuffer{}, srvErr)
	(&producer{t: t, url: public, key: key}).waitReady()
	feeder := uploadZip(t, public, key, buildBundleDir(t, feederBundle))
	evaluate := uploadZip(t, public, key, buildBundleDir(t, evaluateBundle, "--entrypoint", "trace.py"))
	summarize := uploadZip(t, public, key, buildBundleDir(t, summarizeBundle))
	cl := client.New(public, key)
	// evaluate is a lambda job: without a push target the server holds its tasks for one, so here
	// it runs on ecs_udf, pulled like the others.
	doc := strings.Replace(userlandPipeline(feeder, evaluate, summarize), "runtime: lambda", "runtime: ecs_udf", 1)
	if _, err := cl.DeployPipeline(context.Background(), []byte(doc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	wk := &syncBuffer{}
	runUntilCleanup(t, []string{"worker", "--task", "udf", "--task", "alert_evaluate", "--task", "summarize", "--concurrency", "2",
		"--internal-url", "http://" + internal, "--url", public, "--bundle-cache", filepath.Join(sharedDir(t, 0o755), "cache"),
		"--blob-url", blobURL, "--poll-wait", "1s"}, &syncBuffer{}, wk)
	runSource(t, public, key, "userland", "feed")
	for name, want := range map[string]string{"userland.feed": `"fed":3`, "userland.evaluate": `"alerts":2`, "userland.summarize": `"inputs":["alerts"]`} {
		tk := finishedTask(t, cl, name, 90*time.Second)
		if tk.Status != client.TaskCompleted || !strings.Contains(string(tk.Output), want) {
			t.Fatalf("%s: %s %s %+v\nworker:\n%s\nserver:\n%s", name, tk.Status, tk.Output, tk.Error, wk.String(), srvErr.String())
		}
	}
	rows, err := cl.DatasetRows(context.Background(), "alerts", client.RowsQuery{})
	if err != nil || len(rows.Rows) != 2 {
		t.Fatalf("the alerts the bundle published: %+v %v", rows, err)
	}
}

// baton udf list, get and disable print the bundles; bad uses are usage errors.
func TestUDFCommands(t *testing.T) {
	t.Parallel()
	d := startDevWith(t, sharedDir(t, 0o700), "--sink=false")
	key := bannerKey.FindStringSubmatch(d.stdout.String())[1]
	id := uploadZip(t, d.producer, key, buildBundleDir(t, map[string]string{"main.py": "print('{}')\n", "lib/util.py": "X = 1\n"}))
	flags := []string{"--url", d.producer, "--api-key", key}
	code, out, errOut := baton(append([]string{"udf", "list"}, flags...)...)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "ready") || !strings.Contains(out, "python") {
		t.Errorf("udf list: %d %q %q", code, out, errOut)
	}
	code, out, _ = baton(append([]string{"udf", "get", id}, flags...)...)
	if code != 0 || !strings.Contains(out, "lib/util.py") || !strings.Contains(out, "entrypoint: main.py") {
		t.Errorf("udf get: %d %q", code, out)
	}
	code, out, _ = baton(append([]string{"udf", "disable", id, "-o", "json"}, flags...)...)
	var b client.Bundle
	if code != 0 || json.Unmarshal([]byte(out), &b) != nil || b.State != "disabled" || b.DisabledAt == nil {
		t.Errorf("udf disable: %d %q", code, out)
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"udf", "get"}, 2, "ID"},
		{[]string{"udf", "get", "bndl_nope"}, 1, "Bundle not found"},
		{[]string{"udf", "upload", "/no/such.zip"}, 1, "no such file"},
		{[]string{"udf", "build", "/no/such/dir"}, 1, "is not a folder"},
		{[]string{"udf", "build", t.TempDir()}, 1, "name the entrypoint with --entrypoint"},
		{[]string{"udf", "frobnicate"}, 2, "frobnicate"},
	} {
		args := c.args
		if c.args[1] == "get" {
			args = append(slices.Clone(c.args), flags...)
		}
		code, _, errOut := baton(args...)
		if code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("baton %s: exit %d %q, want %d and %q", strings.Join(c.args, " "), code, errOut, c.code, c.err)
		}
	}
}
