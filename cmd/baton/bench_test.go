package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-dev/baton/internal/bench"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// runBenchJSON runs `baton bench` with args and --json, and decodes its result. The bench starts its
// server as a child process: this test binary, which TestMain turns into `baton dev`/`server`.
func runBenchJSON(t *testing.T, args ...string) *bench.Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	code := run(ctx, append([]string{"bench", "--json", "--timeout", "90s"}, args...), &stdout, &stderr)
	t.Logf("baton bench %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	var res bench.Result
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("decode the result: %v\n%s", err, stdout.String())
	}
	return &res
}

// checkBench checks that every figure is there and plausible.
func checkBench(t *testing.T, res *bench.Result, store, via, dag string, tasks int, serverKnown bool) {
	t.Helper()
	if res.Store != store || res.Via != via || res.DAG != dag || res.Tasks != tasks || res.Jobs < 1 || res.Workers < 1 {
		t.Errorf("header: %+v", res)
	}
	phases := map[string]bench.Phase{"submit-to-done": res.SubmitToDone}
	paced := res.RateTasksPerSec != nil
	switch {
	case paced && res.WorkOnly != nil:
		t.Errorf("work-only phase %+v at --rate %v: should be skipped", res.WorkOnly, *res.RateTasksPerSec)
	case !paced && res.WorkOnly == nil:
		t.Error("no work-only phase without --rate")
	case !paced:
		phases["work-only"] = *res.WorkOnly
	}
	for name, p := range phases {
		if p.TasksPerSec <= 0 || p.Seconds <= 0 || p.SubmitSeconds <= 0 || p.Errors != 0 {
			t.Errorf("%s: %+v", name, p)
		}
		if (p.Pacing != nil) != (paced && name == "submit-to-done") {
			t.Errorf("%s: pacing %+v, want it for the submit-to-done phase at a --rate only", name, p.Pacing)
		}
		if p.Seconds < p.SubmitSeconds && name == "submit-to-done" {
			t.Errorf("%s: done after %.3fs, before the submission ended at %.3fs", name, p.Seconds, p.SubmitSeconds)
		}
		switch l := p.ClaimLatency; {
		case via == bench.ViaCallback:
			if l != nil {
				t.Errorf("%s: claim latency %+v for pushed tasks", name, l)
			}
		case l == nil || l.Samples != tasks || l.P50 <= 0 || l.P50 > l.P95 || l.P95 > l.P99:
			t.Errorf("%s: claim latency %+v, want one sample per task", name, l)
		}
		// Every task but a root has parents: one root per job.
		switch l := p.HandoffLatency; {
		case dag == bench.Flat:
			if l != nil {
				t.Errorf("%s: hand-off latency %+v without edges", name, l)
			}
		case l == nil || l.Samples != tasks-res.Jobs || l.P50 < 0 || l.P50 > l.P95 || l.P95 > l.P99:
			t.Errorf("%s: hand-off latency %+v, want %d samples", name, l, tasks-res.Jobs)
		}
	}
	if serverKnown != (res.ServerCPUSeconds != nil) || serverKnown != (res.ServerPeakRSSBytes != nil) {
		t.Errorf("server statistics %v, %v: want known=%v", res.ServerCPUSeconds, res.ServerPeakRSSBytes, serverKnown)
	}
	if serverKnown && (*res.ServerCPUSeconds <= 0 || *res.ServerPeakRSSBytes < 1<<20) {
		t.Errorf("server CPU %.2f s, peak RSS %d bytes", *res.ServerCPUSeconds, *res.ServerPeakRSSBytes)
	}
	if res.BenchCPUSeconds == nil || *res.BenchCPUSeconds <= 0 {
		t.Errorf("bench CPU %v", res.BenchCPUSeconds)
	}
}

// The bench on SQLite, through each pull path and the push path, on DAGs with and without edges.
func TestBenchSQLite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		via, dag string
		tasks    int
	}{
		{bench.ViaSDK, bench.Flat, 300},
		{bench.ViaSDK, bench.Diamond, 300},
		{bench.ViaStreamWorker, bench.Flat, 300},
		{bench.ViaStreamWorker, bench.Diamond, 300},
		{bench.ViaCallback, bench.Fanout, 100},
	} {
		t.Run(c.via+"-"+c.dag, func(t *testing.T) {
			t.Parallel()
			res := runBenchJSON(t, "--tasks", fmt.Sprint(c.tasks), "--job-size", "100", "--workers", "16", "--via", c.via, "--dag", c.dag)
			checkBench(t, res, "sqlite", c.via, c.dag, c.tasks, true)
		})
	}
}

// The table has a row for every figure, with numbers where they apply and n/a where not.
func TestBenchTable(t *testing.T) {
	t.Parallel()
	out := runBenchTable(t, "--tasks", "50", "--workers", "8", "--dag", "chain")
	for _, row := range []string{
		`store +sqlite`, `via +sdk \(batch 8\)`, `dag +chain`, `tasks +50 per phase, in 1 jobs`, `workers +8`,
		` +work-only +submit-to-done`,
		`tasks/s +` + numRe + ` +` + numRe, `seconds +` + numRe + ` +` + numRe, `submit seconds +` + numRe + ` +` + numRe,
		`claim ms p50 / p95 / p99 +` + latRe + ` +` + latRe, `hand-off ms p50 / p95 / p99 +` + latRe + ` +` + latRe,
		`failed requests +0 +0`, `server CPU seconds +` + numRe, `server peak RSS +` + numRe + ` MiB`, `bench CPU seconds +` + numRe,
	} {
		if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(out) {
			t.Errorf("no row %q in\n%s", row, out)
		}
	}
	for _, row := range []string{`rate`, `submitted tasks/s`} {
		if regexp.MustCompile(`(?m)^` + row + ` `).MatchString(out) {
			t.Errorf("a row %q without --rate in\n%s", row, out)
		}
	}
}

// At a --rate, the table names the rate, marks the work-only column skipped, and tells the rate
// the submission achieved and whether it kept the schedule.
func TestBenchTableRate(t *testing.T) {
	t.Parallel()
	out := runBenchTable(t, "--tasks", "100", "--job-size", "10", "--workers", "8", "--dag", "chain", "--rate", "500")
	for _, row := range []string{
		`tasks +100 per phase, in 10 jobs`, `rate +500 tasks/s asked`, ` +work-only +submit-to-done`,
		`tasks/s +skipped \(--rate\) +` + numRe, `seconds +n/a +` + numRe, `submit seconds +n/a +` + numRe,
		`submitted tasks/s +n/a +` + numRe + `, (on schedule \(max lag ` + numRe + ` ms\)|BEHIND schedule: [0-9]+ jobs late, up to ` + numRe + ` ms)`,
		`claim ms p50 / p95 / p99 +n/a +` + latRe, `hand-off ms p50 / p95 / p99 +n/a +` + latRe,
		`failed requests +n/a +0`, `server CPU seconds +` + numRe,
	} {
		if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(out) {
			t.Errorf("no row %q in\n%s", row, out)
		}
	}
}

// A number and a latency's three percentiles, as the table prints them.
const (
	numRe = `[0-9]+(\.[0-9]+)?`
	latRe = numRe + " / " + numRe + " / " + numRe
)

// runBenchTable runs `baton bench` with args and returns the table it printed.
func runBenchTable(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code := run(ctx, append([]string{"bench"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// At a --rate, the bench skips the work-only phase and submits on schedule: the submission of
// 200 tasks at 400/s lasts at least half a second, and never goes faster than the rate.
func TestBenchRate(t *testing.T) {
	t.Parallel()
	res := runBenchJSON(t, "--tasks", "200", "--job-size", "10", "--workers", "8", "--dag", "chain", "--rate", "400")
	checkBench(t, res, "sqlite", bench.ViaSDK, bench.Chain, 200, true)
	if res.RateTasksPerSec == nil || *res.RateTasksPerSec != 400 {
		t.Errorf("rate %v, want 400", res.RateTasksPerSec)
	}
	p := res.SubmitToDone
	if p.SubmitSeconds < 0.5 || p.TasksPerSec > 400 {
		t.Errorf("submitted in %.4f s, %.1f tasks/s: want at least 0.5 s, at most 400 tasks/s", p.SubmitSeconds, p.TasksPerSec)
	}
	if pc := p.Pacing; pc == nil || pc.RateTasksPerSec != 400 || pc.SubmitTasksPerSec > 400 || pc.Behind != (pc.LateJobs > 0) {
		t.Errorf("pacing %+v", pc)
	}
}

// --url measures a server that runs already; its CPU and memory are unknown unless its pid is
// given.
func TestBenchRunningServer(t *testing.T) {
	t.Parallel()
	producer, internal, dir := freeAddr(t), freeAddr(t), t.TempDir()
	code, keyOut, stderr := runBaton(t, "apikey", "create", "--name", "bench", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("apikey create: exit %d: %s", code, stderr)
	}
	key := strings.TrimSpace(keyOut)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	exited := make(chan int, 1)
	var srvOut, srvErr syncBuffer
	go func() {
		exited <- run(ctx, []string{"dev", "--data-dir", dir, "--listen", producer, "--internal-listen", internal,
			"--max-tasks-per-job", "0", "--rate-limit", "0", "--daily-quota", "0", "--metrics-listen="}, &srvOut, &srvErr)
	}()
	// The bench waits for nothing: wait until the server listens.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(srvOut.String(), "Press Ctrl-C"); {
		if time.Now().After(deadline) {
			t.Fatalf("the dev server did not start:\n%s\n%s", srvOut.String(), srvErr.String())
		}
		time.Sleep(20 * time.Millisecond) // a server starting in the background
	}
	args := []string{"--url", "http://" + producer, "--internal-url", "http://" + internal, "--api-key", key,
		"--tasks", "50", "--workers", "8", "--via", "stream-worker", "--dag", "fanout"}
	checkBench(t, runBenchJSON(t, args...), "external", bench.ViaStreamWorker, bench.Fanout, 50, false)
	// The server runs in this very process here.
	checkBench(t, runBenchJSON(t, append(args, "--server-pid", fmt.Sprint(os.Getpid()))...), "external", bench.ViaStreamWorker, bench.Fanout, 50, true)
	stop()
	if code := <-exited; code != 0 {
		t.Errorf("dev server exited %d: %s", code, srvErr.String())
	}
}

func TestBenchPostgres(t *testing.T) {
	t.Parallel()
	url := storetest.NewPostgresSchema(t)
	res := runBenchJSON(t, "--database-url", url, "--tasks", "150", "--job-size", "50", "--workers", "16", "--via", "sdk", "--dag", "diamond")
	checkBench(t, res, "postgres", bench.ViaSDK, bench.Diamond, 150, true)
}

func TestBenchInternalRedis(t *testing.T) {
	t.Parallel()
	redisURL := os.Getenv("BATON_TEST_REDIS_URL")
	if redisURL == "" {
		t.Skip("BATON_TEST_REDIS_URL not set; skipping the --via internal run on Redis Streams (e.g. redis://127.0.0.1:6379/0)")
	}
	ns := "baton-bench-test-" + randomHex(4)
	t.Cleanup(func() { deleteRedisKeys(t, redisURL, ns+":") })
	res := runBenchJSON(t, "--via", "internal", "--transport", "redis", "--redis-url", redisURL,
		"--transport-namespace", ns, "--tasks", "150", "--job-size", "50", "--workers", "16", "--dag", "diamond")
	checkBench(t, res, "sqlite", bench.ViaInternal, bench.Diamond, 150, true)
}

// Bad flags are refused with a message that names the flag, before anything starts.
func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dag", "zigzag"}, `--dag "zigzag": want flat, chain, fanout or diamond`},
		{[]string{"--tasks", "0"}, "--tasks must be at least 1"},
		{[]string{"--via", "internal"}, "--via internal needs --transport redis or --transport nats"},
		{[]string{"--via", "carrier-pigeon"}, `--via "carrier-pigeon": want sdk, stream-worker, internal or callback`},
		{[]string{"--workers", "-1"}, "--workers must be at least 1"},
		{[]string{"--transport", "kafka"}, `--transport "kafka"`},
		{[]string{"--url", "http://127.0.0.1:1", "--api-key", "k"}, "--url needs --internal-url"},
		{[]string{"--url", "http://127.0.0.1:1", "--internal-url", "http://127.0.0.1:1", "--api-key", "k", "--via", "callback"}, "--via callback needs the server the bench starts"},
		{[]string{"--server-pid", "1"}, "--internal-url and --server-pid go with --url"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--rate", "-1"}, "--rate must be 0 (no limit) or a number of tasks per second above 0, got -1"},
		{[]string{"--rate", "NaN"}, "--rate must be 0 (no limit) or a number of tasks per second above 0, got NaN"},
		{[]string{"--rate", "fast"}, `invalid value "fast" for flag -rate`},
		{[]string{"--rate", "1", "--tasks", "1000", "--timeout", "5m"}, "--rate 1 spreads --tasks 1000 over 1000.0s, no less than --timeout 5m0s: raise --rate or --timeout, or lower --tasks"},
		{[]string{"--worker-command", "python3 worker.py"}, `invalid value "python3 worker.py" for flag -worker-command: want LABEL=COMMAND`},
		{[]string{"--worker-command", "py thon=python3 worker.py"}, `the label "py thon" must be 1 to 32 letters`},
		{[]string{"--worker-command", "py="}, `want LABEL=COMMAND`},
		{[]string{"--worker-command", "py=a", "--worker-command", "PY=b"}, `--worker-command: the label "PY" is given twice`},
		{[]string{"--worker-command", "py=a", "--rate", "100"}, "--worker-command runs the work-only phase, which --rate skips"},
		{[]string{"--soak", "10s", "--rate", "100"}, "--soak runs one --worker-command, got 0"},
		{[]string{"--soak", "10s", "--rate", "100", "--worker-command", "a=x", "--worker-command", "b=y"}, "--soak runs one --worker-command, got 2"},
		{[]string{"--soak", "10s", "--worker-command", "a=x"}, "--soak needs --rate"},
		{[]string{"--soak", "-1s", "--rate", "100", "--worker-command", "a=x"}, "--soak must be a positive duration, got -1s"},
		{[]string{"--soak", "30s", "--rate", "100", "--worker-command", "a=x"}, "--soak-baseline 1m0s must be above 0 and below --soak 30s"},
		{[]string{"--soak", "2m", "--rate", "100", "--worker-command", "a=x", "--tasks", "10"}, "--tasks does not apply to --soak"},
		{[]string{"--soak", "2m", "--rate", "100", "--worker-command", "a=x", "--timeout", "1m"}, "--timeout 1m0s is no longer than --soak 2m0s"},
		{[]string{"--soak", "2m", "--rate", "0.001", "--worker-command", "a=x"}, "--rate 0.001 for --soak 2m0s submits no task"},
		{[]string{"--soak-max-growth", "5"}, "--soak-max-growth goes with --soak"},
		{[]string{"--soak", "2m", "--rate", "100", "--worker-command", "a=x", "--soak-max-growth", "-5%"}, `invalid value "-5%" for flag -soak-max-growth: want a percentage of at least 0`},
	} {
		code, stdout, stderr := runBaton(t, append([]string{"bench"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("bench %v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

// deleteRedisKeys removes the keys a test left under prefix.
func deleteRedisKeys(t *testing.T, url, prefix string) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Errorf("redis url: %v", err)
		return
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("clean up redis keys %s*: %v", prefix, err)
	}
}

// benchWorkerCommand is the command line of `baton bench worker` in this test binary, which
// TestMain turns into baton for it.
func benchWorkerCommand(t *testing.T, args ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_./-]+$`).MatchString(exe) {
		t.Skipf("the test binary's path %q needs quoting in a shell command", exe)
	}
	return strings.Join(append([]string{exe, "bench", "worker"}, args...), " ")
}

// --worker-command runs the work-only phase again with each command as the workers, on jobs of
// their own, and reports one row per worker: the in-process SDK first. One command is run
// through a shell that stays between the bench and the worker.
func TestBenchWorkerCommands(t *testing.T) {
	t.Parallel()
	worker := benchWorkerCommand(t)
	res := runBenchJSON(t, "--tasks", "200", "--job-size", "50", "--workers", "8", "--dag", "diamond",
		"--worker-command", "go="+worker, "--worker-command", "go-batch1=true && "+benchWorkerCommand(t, "--batch", "1"))
	checkBench(t, res, "sqlite", bench.ViaSDK, bench.Diamond, 200, true)
	rows := res.WorkOnlyByWorker
	if len(rows) != 3 {
		t.Fatalf("%d rows, want the in-process workers and two commands: %+v", len(rows), rows)
	}
	sdk := rows[0]
	if sdk.Worker != "go sdk" || sdk.Command != "" || sdk.TasksPerSec != res.WorkOnly.TasksPerSec || sdk.Seconds != res.WorkOnly.Seconds ||
		sdk.CPUSeconds == nil || sdk.ServerCPUSeconds == nil || sdk.PeakRSSBytes != nil || sdk.ReadySeconds != nil || sdk.Stop != "" {
		t.Errorf("in-process row %+v, want the work-only phase's figures", sdk)
	}
	tasks := map[string]bool{sdk.Task: true}
	for i, want := range []struct{ label, stop string }{{"go", "exit 0"}, {"go-batch1", "signal: terminated"}} {
		row := rows[i+1]
		if row.Worker != want.label || !strings.Contains(row.Command, "bench worker") || tasks[row.Task] {
			t.Errorf("row %d: %+v, want %s with a task name of its own", i+1, row, want.label)
		}
		tasks[row.Task] = true
		if row.TasksPerSec <= 0 || row.Seconds <= 0 || row.SubmitSeconds <= 0 {
			t.Errorf("%s: %+v", row.Worker, row)
		}
		if row.ReadySeconds == nil || *row.ReadySeconds < 0 {
			t.Errorf("%s: ready after %v", row.Worker, row.ReadySeconds)
		}
		if row.CPUSeconds == nil || *row.CPUSeconds <= 0 || row.PeakRSSBytes == nil || *row.PeakRSSBytes < 1<<20 {
			t.Errorf("%s: CPU %v s, peak RSS %v bytes", row.Worker, row.CPUSeconds, row.PeakRSSBytes)
		}
		if row.ServerCPUSeconds == nil || *row.ServerCPUSeconds <= 0 {
			t.Errorf("%s: server CPU %v", row.Worker, row.ServerCPUSeconds)
		}
		// The first command is exec'd by its shell and exits 0 on SIGTERM; the second's shell
		// stays, and SIGTERM ends it.
		if row.Stop != want.stop {
			t.Errorf("%s stopped %q, want %q", row.Worker, row.Stop, want.stop)
		}
	}

	// The table puts the rows side by side.
	out := runBenchTable(t, "--tasks", "50", "--workers", "4", "--worker-command", "go="+worker)
	for _, row := range []string{
		`work-only by worker +tasks/s +seconds +ready after s +worker CPU s +worker peak RSS +server CPU s +stop`,
		`go sdk +` + numRe + ` +` + numRe + ` +n/a +` + numRe + ` +n/a +` + numRe + ` +n/a`,
		`go +` + numRe + ` +` + numRe + ` +` + numRe + ` +` + numRe + ` +` + numRe + ` MiB +` + numRe + ` +exit 0`,
	} {
		if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(out) {
			t.Errorf("no row %q in\n%s", row, out)
		}
	}
}

// A worker command that exits before its tasks are done fails the run, with its output.
func TestBenchWorkerCommandExits(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, []string{"bench", "--tasks", "20", "--workers", "4", "--worker-command", `broken=echo "no worker here: $BATON_BENCH_TASK"; exit 3`}, &stdout, &stderr)
	if code != 1 || !regexp.MustCompile(`worker command broken exited \(exit status 3\) before its tasks were done; its output:\nno worker here: bench-[0-9a-f]+-cmd1`).MatchString(stderr.String()) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// A soak runs the worker command at a steady rate and compares its RSS at the end with its RSS
// at the baseline; a worker that grows more than --soak-max-growth fails it.
func TestBenchSoak(t *testing.T) {
	t.Parallel()
	worker := benchWorkerCommand(t)
	soak := func(t *testing.T, command string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		code := run(ctx, append([]string{"bench", "--soak", "4s", "--soak-baseline", "1s", "--rate", "100", "--job-size", "10",
			"--workers", "4", "--worker-command", command}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	t.Run("steady", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := soak(t, "go="+worker, "--json", "--soak-max-growth", "1000%")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		var res bench.SoakResult
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("decode the result: %v\n%s", err, stdout)
		}
		if res.Store != "sqlite" || res.Worker != "go" || res.Tasks != 400 || res.Jobs != 40 || res.DurationSeconds != 4 ||
			res.RateTasksPerSec != 100 || res.BaselineSeconds != 1 || res.MaxGrowthPercent != 1000 || res.Stop != "exit 0" {
			t.Errorf("header: %+v", res)
		}
		if res.Pacing == nil || res.Pacing.RateTasksPerSec != 100 || res.Pacing.SubmitTasksPerSec > 100 {
			t.Errorf("pacing %+v", res.Pacing)
		}
		if len(res.Samples) < 2 || res.BaselineRSSBytes < 1<<20 || res.EndRSSBytes < 1<<20 || res.PeakRSSBytes < max(res.BaselineRSSBytes, res.EndRSSBytes) {
			t.Errorf("RSS: baseline %d, end %d, peak %d, samples %+v", res.BaselineRSSBytes, res.EndRSSBytes, res.PeakRSSBytes, res.Samples)
		}
		if want := math.Round((float64(res.EndRSSBytes)/float64(res.BaselineRSSBytes)-1)*10000) / 100; res.GrowthPercent != want {
			t.Errorf("growth %v%%, want %v%%", res.GrowthPercent, want)
		}
		if res.WorkerCPUSeconds == nil || *res.WorkerCPUSeconds <= 0 || res.ServerCPUSeconds == nil || res.ServerPeakRSSBytes == nil {
			t.Errorf("CPU and memory: %v %v %v", res.WorkerCPUSeconds, res.ServerCPUSeconds, res.ServerPeakRSSBytes)
		}
	})
	t.Run("growing", func(t *testing.T) {
		t.Parallel()
		// The worker's process group holds a tail that keeps 32 MiB more of a pipe every tenth of
		// a second (up to 400 MiB): its RSS at the end is well above its RSS after a second.
		hog := `(while :; do head -c 32M /dev/zero; sleep 0.1; done | tail -c 400M >/dev/null) & ` + worker
		code, stdout, stderr := soak(t, "hog="+hog)
		if code != 1 || !regexp.MustCompile(`worker command hog grew from `+numRe+` MiB after 1s to `+numRe+` MiB at the end of the soak: \+`+numRe+`%, more than --soak-max-growth 10%`).MatchString(stderr) {
			t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		for _, row := range []string{`RSS after 1s +` + numRe + ` MiB`, `RSS at the end +` + numRe + ` MiB`,
			`end / baseline +` + numRe + ` \(\+` + numRe + `%, ABOVE the --soak-max-growth of 10%\)`, `peak RSS +` + numRe + ` MiB \(the highest of [0-9]+ samples\)`} {
			if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(stdout) {
				t.Errorf("no row %q in\n%s", row, stdout)
			}
		}
	})
}

// Bad steady-run flags are refused with a message that names the flag, before anything starts.
func TestBenchSteadyRefusesBadFlags(t *testing.T) {
	t.Parallel()
	running := []string{"--url", "http://127.0.0.1:1", "--internal-url", "http://127.0.0.1:1", "--api-key", "k"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--steady", "10s"}, "--steady needs --rate"},
		{[]string{"--steady", "-1s", "--rate", "100"}, "--steady must be a positive duration, got -1s"},
		{[]string{"--steady", "10s", "--rate", "100", "--tasks", "10"}, "--tasks does not apply to --steady"},
		{[]string{"--steady", "10s", "--rate", "100", "--soak", "10s"}, "--soak and --steady are two runs"},
		{[]string{"--steady", "10s", "--rate", "100", "--dag", "chain"}, "--dag chain does not apply (flat)"},
		{[]string{"--steady", "10s", "--rate", "100", "--via", "stream-worker"}, "--via stream-worker does not apply (sdk)"},
		{[]string{"--steady", "10s", "--rate", "100", "--worker-command", "a=x"}, "--worker-command does not go with --steady"},
		{[]string{"--steady", "10s", "--rate", "100", "--window", "20s"}, "--window 20s must be above 0 and at most --steady 10s"},
		{[]string{"--steady", "10s", "--rate", "100", "--steady-after", "-1s"}, "--steady-after must be 0 or more"},
		{[]string{"--steady", "10s", "--rate", "100", "--pin-at", "1s"}, "--pin-at needs --pin-for"},
		{[]string{"--steady", "10s", "--rate", "100", "--pin-at", "1s", "--pin-for", "2s"}, "--pin-at holds a transaction open on the server's PostgreSQL database: give --database-url"},
		{append([]string{"--steady", "10s", "--rate", "100", "--pin-at", "1s", "--pin-for", "2s"}, running...), "give --database-url (or, with --url, --steady-database-url)"},
		{[]string{"--steady", "10s", "--rate", "100", "--pin-at", "5s", "--pin-for", "6s", "--database-url", "postgres://127.0.0.1:1/none"},
			"the pin (--pin-at 5s, --pin-for 6s) must end by the end of --steady 10s"},
		{[]string{"--steady", "10s", "--rate", "100", "--steady-database-url", "postgres://127.0.0.1:1/none"}, "--steady-database-url goes with --url"},
		{[]string{"--steady", "10s", "--rate", "100", "--timeout", "10s"}, "--timeout 10s is no longer than --steady 10s and --steady-after 0s"},
		{[]string{"--steady", "10s", "--rate", "0.01"}, "--rate 0.01 for --steady 10s submits no task"},
		{[]string{"--steady", "10s", "--rate", "100", "--soak-baseline", "1s"}, "--soak-baseline goes with --soak"},
		{[]string{"--window", "5s"}, "--window goes with --steady"},
		{[]string{"--pin-for", "5s"}, "--pin-for goes with --steady"},
		{[]string{"--steady-after", "5m"}, "--steady-after goes with --steady"},
	} {
		code, stdout, stderr := runBaton(t, append([]string{"bench"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("bench %v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

// A short steady run: its windows cover the run back to back, their counts add up to the tasks
// submitted, and on PostgreSQL each has the queue depth and the hot tables, and the pin is marked
// on the window it held in. Speed is not checked.
func TestBenchSteady(t *testing.T) {
	t.Parallel()
	steady := func(t *testing.T, args ...string) *bench.SteadyResult {
		t.Helper()
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args = append([]string{"bench", "--json", "--timeout", "90s", "--steady", "3s", "--rate", "200", "--window", "1s", "--workers", "16"}, args...)
		if code := run(ctx, args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
		var res bench.SteadyResult
		dec := json.NewDecoder(&stdout)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("decode the result: %v\n%s", err, stdout.String())
		}
		if res.Tasks != 600 || res.Jobs != 600 || res.JobSize != 1 || res.RateTasksPerSec != 200 || res.DurationSeconds != 3 ||
			res.WindowSeconds != 1 || res.Via != bench.ViaSDK || res.Workers != 16 {
			t.Errorf("header: %+v", res)
		}
		if len(res.Windows) < 3 {
			t.Fatalf("%d windows for a run of 3 s in windows of 1 s", len(res.Windows))
		}
		offered, completed, picked := 0, 0, 0
		for i, w := range res.Windows {
			if w.StartSeconds != float64(i) || w.EndSeconds != float64(i+1) ||
				w.OfferedPerSec != float64(w.OfferedTasks) || w.CompletedPerSec != float64(w.CompletedTasks) {
				t.Errorf("window %d: %+v", i, w)
			}
			offered += w.OfferedTasks
			completed += w.CompletedTasks
			if w.Pickup != nil {
				picked += w.Pickup.Samples
			}
		}
		if offered != 600 || completed != 600 || picked != 600 {
			t.Errorf("the windows offered %d, completed %d and picked up %d tasks; want 600 each", offered, completed, picked)
		}
		s := res.Summary
		if s.OfferedPerSec != 200 || s.ScheduleCompletedTasks > 600 || s.Pickup == nil || s.Pickup.Samples != 600 || res.Pacing == nil {
			t.Errorf("summary %+v, pacing %+v", s, res.Pacing)
		}
		if len(res.Checks) != 3 {
			t.Errorf("checks: %+v", res.Checks)
		}
		for _, c := range res.Checks {
			if c.Status != "met" && c.Status != "missed" && c.Status != "n/a" {
				t.Errorf("check %+v", c)
			}
		}
		return &res
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		res := steady(t)
		if res.Store != "sqlite" || res.Pin != nil || res.HotTables != nil || res.Autovacuum != nil {
			t.Errorf("store %s, pin %+v, hot tables %v, autovacuum %v", res.Store, res.Pin, res.HotTables, res.Autovacuum)
		}
		for i, w := range res.Windows {
			if w.PinHeld || w.QueueDepth != nil || w.Tables != nil {
				t.Errorf("window %d on SQLite: %+v", i, w)
			}
		}
		if res.Checks[2].Status != "n/a" {
			t.Errorf("a size check without a pin: %+v", res.Checks[2])
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		res := steady(t, "--database-url", storetest.NewPostgresSchema(t), "--pin-at", "1s", "--pin-for", "1s")
		p := res.Pin
		if res.Store != "postgres" || res.Autovacuum == nil || p == nil || p.AtSeconds != 1 || p.ForSeconds != 1 || p.XID <= 0 ||
			p.HeldFromSeconds < 1 || p.HeldToSeconds < p.HeldFromSeconds || p.TablesBefore == nil || p.TablesAtEnd == nil {
			t.Fatalf("store %s, pin %+v", res.Store, p)
		}
		for i, w := range res.Windows {
			if w.PinHeld != (i == 1) {
				t.Errorf("window %d: pin held %v; the pin holds from 1 s to 2 s", i, w.PinHeld)
			}
			if w.QueueDepth == nil || *w.QueueDepth < 0 || w.Tables == nil || len(w.Tables.PerTable) != len(bench.HotTables) {
				t.Fatalf("window %d: depth %v, tables %+v", i, w.QueueDepth, w.Tables)
			}
			var size int64
			for j, tb := range w.Tables.PerTable {
				if tb.Table != bench.HotTables[j] || tb.SizeBytes <= 0 {
					t.Errorf("window %d, table %d: %+v", i, j, tb)
				}
				size += tb.SizeBytes
			}
			if size != w.Tables.SizeBytes {
				t.Errorf("window %d: the tables' size %d, their sum %d", i, w.Tables.SizeBytes, size)
			}
		}
		s := res.Summary
		if s.PickupPinned == nil || s.SizeBeforePinBytes == nil || s.SizeAtPinEndBytes == nil || s.SizeAtEndBytes == nil ||
			*s.SizeBeforePinBytes <= 0 || s.ObservedAfterPinSeconds == nil || s.PinnedOfferedTasks <= 0 {
			t.Errorf("summary %+v", s)
		}
	})
}
