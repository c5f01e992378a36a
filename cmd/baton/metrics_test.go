package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/baton-dev/baton/internal/metrics/metricstest"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// scrape reads GET /metrics and parses the text exposition.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", res.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricsServer is a running `baton dev` or `baton server` with a metrics listener.
type metricsServer struct {
	public, internal, metrics, key string
	stdout, stderr                 *syncBuffer
}

// realServers are the two ways a user runs Baton: `baton dev` on SQLite and `baton server` on
// PostgreSQL, each started with the given extra flags.
var realServers = []struct {
	name  string
	start func(t *testing.T, extra ...string) *metricsServer
}{
	{"dev", startMetricsDev},
	{"server", startMetricsServer},
}

// forEachRealServer runs fn as a subtest on each of realServers, started with extra.
func forEachRealServer(t *testing.T, fn func(t *testing.T, s *metricsServer), extra ...string) {
	for _, rs := range realServers {
		t.Run(rs.name, func(t *testing.T) { fn(t, rs.start(t, extra...)) })
	}
}

// forEachRealServerWithBlobs is forEachRealServer with a directory of the subtest's own as each
// server's object storage (--blob-url), handed to fn.
func forEachRealServerWithBlobs(t *testing.T, fn func(t *testing.T, s *metricsServer, blobDir string), extra ...string) {
	for _, rs := range realServers {
		t.Run(rs.name, func(t *testing.T) {
			dir := t.TempDir()
			fn(t, rs.start(t, append([]string{"--blob-url", "file://" + dir}, extra...)...), dir)
		})
	}
}

// api calls the producer API with the server's key (a body is sent as YAML, which JSON is too)
// and decodes the JSON answer into a map.
func (s *metricsServer) api(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.public+path, strings.NewReader(body))
	req.Header.Set("x-api-key", s.key)
	req.Header.Set("Content-Type", "application/yaml")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(res.Body).Decode(&v)
	return res.StatusCode, v
}

// mustAPI is api that fails the test unless the answer's status is one of want.
func (s *metricsServer) mustAPI(t *testing.T, method, path, body string, want ...int) map[string]any {
	t.Helper()
	code, v := s.api(t, method, path, body)
	if !slices.Contains(want, code) {
		t.Fatalf("%s %s: %d %v", method, path, code, v)
	}
	return v
}

// claim claims a task of one of queues over the stream-worker dialect, waiting up to 5 s.
func (s *metricsServer) claim(t *testing.T, queues ...string) map[string]any {
	t.Helper()
	code, c := postJSONTo(t, s.internal+"/internal/worker/claim", map[string]any{"worker_id": "w", "streams": queues, "max_wait_ms": 5000})
	if code != 200 || c["claimed"] != true {
		t.Fatalf("claim from %v: %d %v", queues, code, c)
	}
	return c
}

// postJSONTo posts body and decodes the JSON answer into a map.
func postJSONTo(t *testing.T, url string, body any, headers ...string) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(res.Body).Decode(&v)
	return res.StatusCode, v
}

// TestMetricsEndToEnd runs the five-task example job on a real server — `baton dev` on SQLite and
// `baton server` on PostgreSQL — with a worker speaking the stream dialect over HTTP that fails
// one task once, and checks that /metrics moved by exactly what happened.
func TestMetricsEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, extra ...string) *metricsServer
	}{
		{"dev", startMetricsDev},
		{"server", startMetricsServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			before := scrape(t, s.metrics)
			runExampleJob(t, s)
			after := scrape(t, s.metrics)
			delta := func(name string, labels ...string) float64 {
				return metricstest.Sum(after[name], labels...) - metricstest.Sum(before[name], labels...)
			}
			for _, w := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"baton_transitions_total", []string{"kind", "create", "outcome", "ok"}, 1},
				{"baton_transitions_total", []string{"kind", "claim", "outcome", "ok"}, 6},
				{"baton_transitions_total", []string{"kind", "complete", "outcome", "ok"}, 5},
				{"baton_transitions_total", []string{"kind", "fail", "outcome", "ok"}, 1},
				{"baton_transitions_total", []string{"kind", "heartbeat", "outcome", "ok"}, 1},
				{"baton_transitions_total", []string{"outcome", "refused"}, 0},
				{"baton_transitions_total", []string{"outcome", "error"}, 0},
				{"baton_task_retries_total", []string{"category", "INFRASTRUCTURE"}, 1},
				{"baton_task_retries_total", nil, 1},
				{"baton_task_dead_letters_total", nil, 0},
				{"baton_claim_wait_seconds", []string{"result", "claimed"}, 6},
				{"baton_task_handoff_seconds", nil, 6},
				{"baton_http_requests_total", []string{"listener", "public", "route", "/jobs", "method", "POST", "code", "201"}, 1},
				{"baton_http_requests_total", []string{"listener", "public", "route", "/jobs", "method", "GET", "code", "401"}, 1},
				{"baton_http_requests_total", []string{"listener", "internal", "route", "/internal/worker/complete", "method", "POST", "code", "200"}, 5},
				{"baton_http_requests_total", []string{"listener", "internal", "route", "/internal/worker/fail", "method", "POST", "code", "200"}, 1},
				{"baton_http_requests_total", []string{"listener", "internal", "route", "/internal/worker/heartbeat", "method", "POST", "code", "200"}, 1},
				{"baton_http_request_duration_seconds", []string{"listener", "public", "route", "/jobs", "method", "POST"}, 1},
				{"baton_credentials_rejected_total", []string{"kind", "api_key_missing"}, 1},
				{"baton_credentials_rejected_total", nil, 1},
			} {
				if got := delta(w.name, w.labels...); got != w.want {
					t.Errorf("%s%v moved by %v, want %v", w.name, w.labels, got, w.want)
				}
			}
			// Every transition went through group commits (on by default).
			if got := delta("baton_commit_batch_transitions"); got < 1 {
				t.Errorf("no group commit observed")
			}
			// The outbox gauges were set by the background count at startup (the tasks gauge has
			// no series until a count finds tasks; internal/metrics tests it).
			for _, name := range []string{"baton_outbox_unsent_messages", "baton_outbox_oldest_unsent_age_seconds",
				"baton_commit_duration_seconds", "go_goroutines", "process_cpu_seconds_total"} {
				if after[name] == nil {
					t.Errorf("/metrics has no %s", name)
				}
			}
			// A raw path never becomes a route label.
			for _, m := range after["baton_http_requests_total"].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "route" && strings.Contains(l.GetValue(), "job-") {
						t.Errorf("route label %q is a raw path", l.GetValue())
					}
				}
			}
		})
	}
}

// runExampleJob submits the five-task example job and works it off over the stream dialect: one worker that
// fails color-tags' first attempt (INFRASTRUCTURE, retryable) and heartbeats
// analyze-competitors once. It also asks for the job list without a key, once.
func runExampleJob(t *testing.T, s *metricsServer) {
	t.Helper()
	example, err := os.ReadFile("../../examples/job.json")
	if err != nil {
		t.Fatal(err)
	}
	var job map[string]any
	if err := json.Unmarshal(example, &job); err != nil {
		t.Fatal(err)
	}
	code, created := postJSONTo(t, s.public+"/jobs", job, "x-api-key", s.key)
	if code != 201 {
		t.Fatalf("POST /jobs: %d %v", code, created)
	}
	jobID, _ := created["jobId"].(string)
	if res, err := http.Get(s.public + "/jobs"); err != nil || res.StatusCode != 401 {
		t.Fatalf("GET /jobs without a key: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	streams := []string{"scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result"}
	failed := false
	for done := 0; done < 5; {
		code, c := postJSONTo(t, s.internal+"/internal/worker/claim", map[string]any{"worker_id": "w-1", "streams": streams, "max_wait_ms": 2000})
		if code != 200 {
			t.Fatalf("claim: %d %v", code, c)
		}
		if c["claimed"] != true {
			continue // the retry is backing off
		}
		report := map[string]any{"worker_id": "w-1", "job_id": c["job_id"], "attempt_id": c["attempt_id"], "lease_token": c["lease_token"]}
		switch key := c["task_key"]; {
		case key == "color-tags" && !failed:
			failed = true
			report["error"] = map[string]any{"code": "INFRASTRUCTURE", "message": "the GPU went away", "retryable": true}
			if code, res := postJSONTo(t, s.internal+"/internal/worker/fail", report); code != 200 || res["requeued"] != true {
				t.Fatalf("fail color-tags: %d %v", code, res)
			}
			continue
		case key == "analyze-competitors":
			if code, res := postJSONTo(t, s.internal+"/internal/worker/heartbeat", report); code != 200 {
				t.Fatalf("heartbeat: %d %v", code, res)
			}
		}
		report["result"] = map[string]any{"by": "w-1"}
		if code, res := postJSONTo(t, s.internal+"/internal/worker/complete", report); code != 200 {
			t.Fatalf("complete %v: %d %v", c["task_key"], code, res)
		}
		done++
	}
	req, _ := http.NewRequest("GET", s.public+"/jobs/"+jobID, nil)
	req.Header.Set("x-api-key", s.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got map[string]any
	_ = json.NewDecoder(res.Body).Decode(&got)
	if got["status"] != "completed" {
		t.Fatalf("job %s: %v, want completed", jobID, got["status"])
	}
}

// waitForLine waits until out has a line matching re and returns its submatches.
func waitForLine(t *testing.T, out *syncBuffer, re *regexp.Regexp, exited chan int, errOut *syncBuffer) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		select {
		case code := <-exited:
			exited <- code
			t.Fatalf("exited %d before %s; stderr:\n%s", code, re, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s; output:\n%s\nstderr:\n%s", re, out.String(), errOut.String())
		}
	}
}

// runUntilCleanup runs the command until the test ends, and checks it then shuts down cleanly.
func runUntilCleanup(t *testing.T, args []string, stdout, stderr *syncBuffer) chan int {
	t.Helper()
	return runUntilCleanupIn(context.Background(), t, args, stdout, stderr)
}

// runUntilCleanupIn is runUntilCleanup with a context, one that envContext made, say.
func runUntilCleanupIn(ctx context.Context, t *testing.T, args []string, stdout, stderr *syncBuffer) chan int {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, args, stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("%s exited %d; stderr:\n%s", args[0], code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not shut down", args[0])
		}
	})
	return exited
}

var (
	bannerProducer = regexp.MustCompile(`producer API\s+http://(\S+)`)
	bannerWorker   = regexp.MustCompile(`worker API\s+http://(\S+)`)
	bannerMetrics  = regexp.MustCompile(`metrics\s+http://(\S+)/metrics`)
)

// startMetricsDev starts `baton dev` with a metrics listener on a free port, JSON logs and a
// short retry backoff; extra flags follow.
func startMetricsDev(t *testing.T, extra ...string) *metricsServer {
	key := "bk_metrics_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var stdout, stderr syncBuffer
	exited := runUntilCleanupIn(envContext(context.Background(), "BATON_API_KEY", key), t, append([]string{"dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0", "--backoff-base", "20ms", "--backoff-max", "50ms", "--sink=false", "--log-format", "json"}, extra...), &stdout, &stderr)
	waitForLine(t, &stdout, regexp.MustCompile("Press Ctrl-C"), exited, &stderr)
	banner := stdout.String()
	s := &metricsServer{key: key, stdout: &stdout, stderr: &stderr}
	s.public = "http://" + bannerProducer.FindStringSubmatch(banner)[1]
	s.internal = "http://" + bannerWorker.FindStringSubmatch(banner)[1]
	m := bannerMetrics.FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner does not name the metrics listener:\n%s", banner)
	}
	s.metrics = m[1]
	t.Cleanup(func() { checkJSONLines(t, &stderr) })
	return s
}

// startMetricsServer starts `baton server` on a fresh PostgreSQL schema with a metrics listener
// and JSON logs; its started line names the metrics URL.
func startMetricsServer(t *testing.T, extra ...string) *metricsServer {
	url := storetest.NewPostgresSchema(t)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "--database-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("migrate: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"apikey", "create", "--name", "metrics", "--tenant", "acme", "--database-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("apikey create: exit %d, %s", code, errOut.String())
	}
	s := &metricsServer{key: strings.TrimSpace(out.String()), public: "http://" + freeAddr(t), internal: "http://" + freeAddr(t), metrics: freeAddr(t)}
	var stdout, stderr syncBuffer
	exited := runUntilCleanup(t, append([]string{"server", "--database-url", url, "--internal-insecure",
		"--listen", strings.TrimPrefix(s.public, "http://"), "--internal-listen", strings.TrimPrefix(s.internal, "http://"),
		"--metrics-listen", s.metrics, "--backoff-base", "20ms", "--backoff-max", "50ms", "--log-format", "json"}, extra...), &stdout, &stderr)
	started := waitForLine(t, &stderr, regexp.MustCompile(`\{[^\n]*"msg":"baton server started"[^\n]*\}`), exited, &stderr)
	var line map[string]any
	if err := json.Unmarshal([]byte(started[0]), &line); err != nil {
		t.Fatalf("the started line is not JSON (--log-format json): %v\n%s", err, started[0])
	}
	if want := "http://" + s.metrics + "/metrics"; line["metrics"] != want {
		t.Errorf("the started line says metrics %v, want %s", line["metrics"], want)
	}
	s.stdout, s.stderr = &stdout, &stderr
	t.Cleanup(func() { checkJSONLines(t, &stderr) })
	return s
}

// checkJSONLines checks that every line logged is a JSON object with a message.
func checkJSONLines(t *testing.T, stderr *syncBuffer) {
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil || v["msg"] == nil {
			t.Errorf("a log line is not a JSON object with msg (--log-format json): %s", sc.Text())
		}
	}
}

// TestObservabilityFlags checks that bad --log-format and --metrics-listen values are usage
// errors of every command that has them, and that a metrics port in use fails a server fast.
func TestObservabilityFlags(t *testing.T) {
	t.Parallel()
	busy := busyAddr(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"dev log format", []string{"dev", "--log-format", "xml"}, 2, `invalid value "xml" for flag -log-format: want text or json`},
		{"server log format", []string{"server", "--log-format", "JSON"}, 2, `invalid value "JSON" for flag -log-format: want text or json`},
		{"worker log format", []string{"worker", "--log-format", "logfmt"}, 2, `invalid value "logfmt" for flag -log-format: want text or json`},
		{"sink log format", []string{"sink", "--log-format", ""}, 2, `invalid value "" for flag -log-format: want text or json`},
		{"dev metrics address", []string{"dev", "--metrics-listen", "9090"}, 2, `invalid value "9090" for flag -metrics-listen: want HOST:PORT`},
		{"server metrics port", []string{"server", "--metrics-listen", "127.0.0.1:99999"}, 2, `invalid value "127.0.0.1:99999" for flag -metrics-listen: port "99999"`},
		{"metrics port in use", []string{"server", "--database-url", unusedDatabaseURL, "--internal-insecure", "--listen", "127.0.0.1:0",
			"--internal-listen", "127.0.0.1:0", "--metrics-listen", busy}, 1, "--metrics-listen " + busy + ":"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args[0] == "dev" {
				args = append(args, "--data-dir", t.TempDir())
			}
			code, _, stderr := runBaton(t, args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("baton %s: exit %d, want %d with %q; stderr:\n%s", strings.Join(args, " "), code, tc.code, tc.stderr, stderr)
			}
		})
	}
}

// busyAddr is an address of this host that a listener holds until the test ends.
func busyAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// TestDevMetricsPortInUse checks that a busy metrics port does not stop the dev server (a
// Prometheus, or another baton dev, may hold it): dev serves the metrics on the next free port
// and its banner names that one.
func TestDevMetricsPortInUse(t *testing.T) {
	t.Parallel()
	busy := busyAddr(t)
	banner := startDev(t, "--metrics-listen", busy)
	m := regexp.MustCompile(`(?m)^\s+metrics\s+(http://\S+/metrics)$`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner names no metrics URL:\n%s", banner)
	}
	if m[1] == "http://"+busy+"/metrics" {
		t.Fatalf("the banner names the busy address %s:\n%s", busy, banner)
	}
	res, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", m[1], res.Status)
	}
}

// TestDevMetricsOff checks that `--metrics-listen ""` turns dev's metrics off and says so.
func TestDevMetricsOff(t *testing.T) {
	t.Parallel()
	banner := startDev(t) // startDev passes --metrics-listen=
	if !regexp.MustCompile(`(?m)^\s+metrics\s+off$`).MatchString(banner) {
		t.Fatalf("the banner does not say the metrics are off:\n%s", banner)
	}
	// Serving (the banner comes before the server has opened everything).
	ready := "http://" + bannerProducer.FindStringSubmatch(banner)[1] + "/readyz"
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := http.Get(ready)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200: %v", ready, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
