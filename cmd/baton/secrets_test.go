//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
)

// canaryForms are the forms of a secret's value a leak could take.
func canaryForms(v string) map[string]string {
	return map[string]string{
		"value":      v,
		"base64":     base64.StdEncoding.EncodeToString([]byte(v)),
		"base64url":  base64.RawURLEncoding.EncodeToString([]byte(v)),
		"url-escape": url.QueryEscape(v),
		"hex":        hex.EncodeToString([]byte(v)),
	}
}

// leaks names each place where a form of the canary shows in text.
func leaks(t *testing.T, where, text, canary string) {
	t.Helper()
	for form, s := range canaryForms(canary) {
		if strings.Contains(text, s) {
			t.Errorf("the canary secret (%s) leaked into %s", form, where)
		}
	}
}

// secretsPipeline: trusted and failing are platform operators that declare the canary secret;
// untrusted runs user code (ecs_udf) and declares none, and dumper is a bundle.
func secretsPipeline(bundleID string) string {
	return `name: secretive
jobs:
  - {name: trusted, activation: source, runtime: ecs_platform, operator: trusted_op, outputs: 0, source: {kind: manual}, secrets: [canary_key]}
  - {name: failing, activation: source, runtime: ecs_platform, operator: failing_op, outputs: 0, source: {kind: manual}, secrets: [canary_key], max_attempts: 1}
  - {name: untrusted, activation: source, runtime: ecs_udf, operator: untrusted_op, outputs: 0, source: {kind: manual}}
  - {name: dumper, activation: source, runtime: ecs_udf, operator: udf, outputs: 0, source: {kind: manual}, udf: {bundle_id: ` + bundleID + `}}
`
}

// The canary: a secret planted in the server's secret directory reaches the trusted operator
// that declares it, as an environment variable, and nothing else: not the untrusted child, not a
// bundle, and — although the trusted child prints it to stdout and stderr and one of them fails
// with it — no log line of the server or the worker, no event, no stored output or error, no
// metric, the API description, the dashboard, or the database's files.
func TestSecretsReachTrustedOperatorsOnly(t *testing.T) {
	t.Parallel()
	const canary = "canary-7f1e0c9a-s3cr3t/value+==?&"
	secretDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(secretDir, "canary_key"), []byte(canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := sharedDir(t, 0o700)
	d := startDevWith(t, data, "--secrets", "dir:"+secretDir, "--metrics-listen", "127.0.0.1:0")
	key := bannerKey.FindStringSubmatch(d.stdout.String())[1]
	metricsURL := "http://" + bannerMetrics.FindStringSubmatch(d.stdout.String())[1] + "/metrics"
	out := sharedDir(t, 0o777)
	dumper := uploadZip(t, d.producer, key, buildBundleDir(t, map[string]string{"main.py": `import json, os
print(json.dumps({"env": dict(os.environ)}))
`}))
	cl := client.New(d.producer, key)
	if _, err := cl.DeployPipeline(context.Background(), []byte(secretsPipeline(dumper)), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	script := `env > ` + out + `/env-$BATON_TASK_NAME; echo "using $CANARY_KEY" >&2; echo "{\"seen\": \"$CANARY_KEY\"}"; [ "$BATON_TASK_NAME" != failing_op ]`
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	workerErr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"worker", "--task", "trusted_op", "--task", "failing_op", "--task", "untrusted_op",
			"--exec", script, "--internal-url", d.internal, "--url", d.producer, "--log-level", "debug", "--poll-wait", "1s",
			"--child-write", out},
			io.Discard, workerErr)
	}()
	for _, job := range []string{"trusted", "failing", "untrusted", "dumper"} {
		runSource(t, d.producer, key, "secretive", job)
	}
	trusted := finishedTask(t, cl, "secretive.trusted", 60*time.Second)
	failing := finishedTask(t, cl, "secretive.failing", 60*time.Second)
	finishedTask(t, cl, "secretive.untrusted", 60*time.Second)
	dumped := finishedTask(t, cl, "secretive.dumper", 60*time.Second)
	stop()
	<-done

	// The trusted operator received it; the untrusted child and the bundle did not.
	env, err := os.ReadFile(filepath.Join(out, "env-trusted_op"))
	if err != nil || !strings.Contains(string(env), "CANARY_KEY="+canary+"\n") {
		t.Fatalf("the trusted operator's environment lacks its secret: %v\n%s\nworker:\n%s", err, env, workerErr.String())
	}
	untrustedEnv, err := os.ReadFile(filepath.Join(out, "env-untrusted_op"))
	if err != nil {
		t.Fatal(err)
	}
	leaks(t, "the untrusted child's environment", string(untrustedEnv), canary)
	leaks(t, "the bundle's environment", string(dumped.Output), canary)
	if dumped.Status != client.TaskCompleted || !strings.Contains(string(dumped.Output), `"BATON_TASK_ID"`) {
		t.Fatalf("the bundle did not dump its environment: %s %s %+v", dumped.Status, dumped.Output, dumped.Error)
	}
	if trusted.Status != client.TaskCompleted || !strings.Contains(string(trusted.Output), "[REDACTED]") {
		t.Errorf("the trusted task's output: %s %s, want its secret redacted", trusted.Status, trusted.Output)
	}
	if failing.Error == nil || !strings.Contains(failing.Error.Message, "using [REDACTED]") {
		t.Errorf("the failing task's error: %+v, want its stderr with the secret redacted", failing.Error)
	}

	// Nowhere else.
	leaks(t, "the server's log", d.stdout.String()+d.stderr.String(), canary)
	leaks(t, "the worker's log", workerErr.String(), canary)
	leaks(t, "the trusted task's output", string(trusted.Output), canary)
	leaks(t, "the failing task's error", failing.Error.Message, canary)
	page, err := cl.ListJobs(context.Background(), client.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range page.Jobs {
		job, _ := cl.GetJob(context.Background(), j.JobID)
		events, _, _ := cl.Events(context.Background(), j.JobID, 0)
		leaks(t, "job "+j.Name, mustJSON(t, job)+mustJSON(t, events), canary)
	}
	for _, u := range []string{metricsURL, d.producer + "/openapi.json"} {
		leaks(t, u, httpGet(t, http.DefaultClient, u), canary)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	httpGet(t, browser, d.producer+"/ui/login")
	csrf := ""
	u, _ := url.Parse(d.producer + "/ui/")
	for _, c := range jar.Cookies(u) {
		if c.Name == "baton_csrf" {
			csrf = c.Value
		}
	}
	res, err := browser.PostForm(d.producer+"/ui/login", url.Values{"key": {key}, "next": {"/ui/jobs"}, "csrf": {csrf}})
	if err != nil || res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in to the dashboard: %v %v", res, err)
	}
	res.Body.Close()
	pages := []string{"/ui/jobs", "/ui/pipelines/secretive", "/ui/queues"}
	for _, j := range page.Jobs {
		pages = append(pages, "/ui/jobs/"+j.JobID)
	}
	for _, p := range pages {
		leaks(t, "the dashboard's "+p, httpGet(t, browser, d.producer+p), canary)
	}
	d.stop(t)
	files, _ := filepath.Glob(filepath.Join(data, "*.db*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		leaks(t, "the database file "+filepath.Base(f), string(b), canary)
	}
}

func httpGet(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
