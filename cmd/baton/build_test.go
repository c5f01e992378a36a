package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store/storetest"
)

// buildPipeline: a manual source feeds cursors into ranges, which writes ranges_out; totals reads
// ranges_out and writes totals_out; alerts reads the feed directly. A config change to ranges
// rebuilds ranges and totals (both their datasets), not the feed or alerts.
const buildPipeline = `
name: chain
jobs:
  - {name: feed, activation: source, runtime: ecs_platform, operator: feed, outputs: 1, source: {kind: manual}}
  - name: ranges
    activation: reactive
    runtime: ecs_platform
    operator: ranges
    outputs: 1
    config: {width: 1}
    inputs: [{from: {job: feed, output: 0}}]
  - name: totals
    activation: reactive
    runtime: ecs_platform
    operator: totals
    outputs: 1
    inputs: [{from: {job: ranges, output: 0}}]
  - name: alerts
    activation: reactive
    runtime: ecs_platform
    operator: alerts
    outputs: 0
    inputs: [{from: {job: feed, output: 0}}]
publish:
  ranges_out: {from: {job: ranges, output: 0}}
  totals_out: {from: {job: totals, output: 0}}
`

// buildCluster is one or more servers on one database, used in turn.
type buildCluster struct {
	servers []*metricsServer
	n       int
	// ran counts the completed tasks by "job version cursor".
	ran map[string]int
}

func (c *buildCluster) next() *metricsServer {
	c.n++
	return c.servers[c.n%len(c.servers)]
}

// work claims and completes tasks through the servers in turn until until holds (checked
// between claims) or the deadline passes. Each task reports, for the cursor that started it (a
// source run: the cursors from..to of its trigger's input), an event on each of its outputs at the
// version its claim names, as a real worker does.
func (c *buildCluster) work(t *testing.T, what string, until func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	// until is checked when a claim finds nothing, and every 25 tasks: it reads over the producer
	// API, which rate-limits its key.
	for claimed := 0; claimed%25 != 0 || !until(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after 60 s; ran %v", what, c.ran)
		}
		s := c.next()
		code, cl := postJSONTo(t, s.internal+"/internal/worker/claim", map[string]any{"worker_id": "w", "streams": []string{"feed", "ranges", "totals", "alerts"}, "max_wait_ms": 200})
		if code != 200 {
			t.Fatalf("claim: %d %v", code, cl)
		}
		if cl["claimed"] != true {
			claimed = 0
			continue
		}
		claimed++
		job, _ := cl["job"].(map[string]any)
		var cursors []int
		trigger, _ := cl["trigger"].(map[string]any)
		if trig, ok := trigger["input"].(map[string]any); ok && trig["from"] != nil {
			for i := int(trig["from"].(float64)); i <= int(trig["to"].(float64)); i++ {
				cursors = append(cursors, i)
			}
		}
		for _, in := range cl["inputs"].([]any) {
			if cur, ok := in.(map[string]any)["cursor"].(float64); ok {
				cursors = append(cursors, int(cur))
			}
		}
		var events []map[string]any
		for _, o := range cl["outputs"].([]any) {
			o := o.(map[string]any)
			for _, cur := range cursors {
				events = append(events, map[string]any{"dataset_uuid": o["dataset_uuid"], "dataset_version": o["dataset_version"], "cursor": cur})
			}
		}
		body := map[string]any{"task_id": cl["task_id"], "attempt": cl["attempt_id"], "lease_token": cl["lease_token"], "status": "Completed", "events": events}
		code, res := postJSONTo(t, c.next().internal+"/internal/task-complete", body)
		if code != 200 {
			t.Fatalf("complete %v: %d %v", cl["task_id"], code, res)
		}
		for _, cur := range cursors {
			c.ran[fmt.Sprintf("%s %s %d", job["name"], job["pipeline_version"], cur)]++
		}
	}
}

// api calls the producer API through the next server and fails the test unless the answer is
// want; a 429 (the key's rate limit) is waited out and retried.
func (c *buildCluster) api(t *testing.T, method, path, body string, want int) map[string]any {
	t.Helper()
	for try := 0; ; try++ {
		code, v := c.next().api(t, method, path, body)
		if code == 429 && try < 50 {
			time.Sleep(200 * time.Millisecond) // the limiter refills over time
			continue
		}
		if code != want {
			t.Fatalf("%s %s: %d %v", method, path, code, v)
		}
		return v
	}
}

// feed starts a run of the source that reports cursors from..to.
func (c *buildCluster) feed(t *testing.T, from, to int) {
	t.Helper()
	c.api(t, "POST", "/pipelines/chain/jobs/feed/run", fmt.Sprintf(`{"from": %d, "to": %d}`, from, to), 201)
}

// view reads the pipeline through the next server.
func (c *buildCluster) view(t *testing.T) map[string]any {
	t.Helper()
	return c.api(t, "GET", "/pipelines/chain", "", 200)
}

// current reads the current versions of ranges_out and totals_out.
func (c *buildCluster) current(t *testing.T) [2]string {
	t.Helper()
	var out [2]string
	for i, name := range []string{"ranges_out", "totals_out"} {
		out[i], _ = c.api(t, "GET", "/datasets/"+name, "", 200)["current_version"].(string)
	}
	return out
}

// each reports whether every cursor of from..to ran on job under version.
func (c *buildCluster) each(job, version string, from, to int) bool {
	for i := from; i <= to; i++ {
		if c.ran[fmt.Sprintf("%s %s %d", job, version, i)] == 0 {
			return false
		}
	}
	return true
}

// A changed deploy end to end, on `baton dev` (SQLite) and on two `baton server` replicas on one
// PostgreSQL used in turn: deploy v1 and load it, deploy a config change to its middle job, watch
// the rebuild run beside v1 while readers keep seeing v1's datasets, activate, see both rebuilt
// datasets' new versions current at once, roll back, see v1's again at once; every cursor runs
// exactly once per job and version it is routed to.
func TestChangedDeployEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) []*metricsServer
	}{
		{"dev", func(t *testing.T) []*metricsServer { return []*metricsServer{startMetricsDev(t)} }},
		{"server pair", startServerPair},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &buildCluster{servers: tc.start(t), ran: map[string]int{}}
			v1 := c.api(t, "POST", "/pipelines", buildPipeline, 201)["version"].(string)
			c.feed(t, 1, 20)
			c.work(t, "v1 loads", func() bool { return c.each("totals", v1, 1, 20) && c.each("alerts", v1, 1, 20) })
			before := c.current(t)

			dep := c.api(t, "POST", "/pipelines", strings.Replace(buildPipeline, "width: 1", "width: 2", 1), 201)
			v2 := dep["version"].(string)
			if dep["state"] != "building" || dep["activated"] != false || dep["active_version"] != v1 {
				t.Fatalf("deploy of the change: state %v activated %v active %v", dep["state"], dep["activated"], dep["active_version"])
			}
			c.feed(t, 21, 30) // during the build: both versions get them
			ready := func() bool {
				if now := c.current(t); now != before {
					t.Fatalf("a reader saw %v during the build, want v1's %v", now, before)
				}
				b, _ := c.view(t)["build"].(map[string]any)
				return b != nil && b["state"] == "ready"
			}
			c.work(t, "the build gets ready", ready)
			b := c.view(t)["build"].(map[string]any)
			candidates := map[string]string{}
			for _, d := range b["datasets"].([]any) {
				d := d.(map[string]any)
				candidates[d["dataset_name"].(string)] = d["candidate_version"].(string)
			}
			if len(candidates) != 2 || len(b["jobs"].([]any)) != 2 {
				t.Fatalf("build: %v; want ranges and totals rebuilt, with their two datasets", b)
			}

			act := c.api(t, "POST", "/pipelines/chain/versions/"+v2+"/activate", "", 200)
			if act["active_version"] != v2 {
				t.Fatalf("activate: %v", act)
			}
			if got, want := c.current(t), [2]string{candidates["ranges_out"], candidates["totals_out"]}; got != want {
				t.Fatalf("after activation the datasets are at %v, want the build's %v", got, want)
			}
			c.feed(t, 31, 40)
			c.work(t, "v2 runs", func() bool { return c.each("totals", v2, 1, 40) && c.each("alerts", v2, 31, 40) })

			rb := c.api(t, "POST", "/pipelines/chain/rollback", "", 200)
			if rb["active_version"] != v1 {
				t.Fatalf("rollback: %v", rb)
			}
			if got := c.current(t); got != before {
				t.Fatalf("after the rollback the datasets are at %v, want v1's %v", got, before)
			}
			c.feed(t, 41, 50)
			c.work(t, "v1 catches up and runs", func() bool { return c.each("totals", v1, 1, 50) && c.each("alerts", v1, 41, 50) })
			// Let anything that should not run have a chance to.
			quiet := time.Now().Add(2 * time.Second)
			c.work(t, "quiet", func() bool { return time.Now().After(quiet) })

			want := map[string]int{}
			for i := 1; i <= 50; i++ {
				for _, j := range []string{"ranges", "totals"} {
					want[fmt.Sprintf("%s %s %d", j, v1, i)] = 1 // 31..40 by catching up after the rollback
					if i <= 40 {
						want[fmt.Sprintf("%s %s %d", j, v2, i)] = 1 // 1..20 backfilled, 21..30 during the build
					}
				}
				alerts := v1
				if i > 30 && i <= 40 {
					alerts = v2
				}
				want[fmt.Sprintf("alerts %s %d", alerts, i)] = 1
			}
			for k, n := range c.ran {
				if strings.HasPrefix(k, "feed ") {
					continue
				}
				if want[k] != n {
					t.Errorf("%s ran %d times, want %d", k, n, want[k])
				}
			}
			for k := range want {
				if c.ran[k] == 0 {
					t.Errorf("%s never ran", k)
				}
			}
			t.Logf("%d (job, version, cursor) routings across v1 and v2, each run once", len(want))
		})
	}
}

// startServerPair starts two `baton server` replicas on one fresh PostgreSQL schema, with one
// API key.
func startServerPair(t *testing.T) []*metricsServer {
	url := storetest.NewPostgresSchema(t)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "--database-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("migrate: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"apikey", "create", "--name", "pair", "--tenant", "acme", "--database-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("apikey create: exit %d, %s", code, errOut.String())
	}
	key := strings.TrimSpace(out.String())
	var pair []*metricsServer
	for range 2 {
		s := &metricsServer{key: key, public: "http://" + freeAddr(t), internal: "http://" + freeAddr(t), metrics: freeAddr(t)}
		var stdout, stderr syncBuffer
		exited := runUntilCleanup(t, []string{"server", "--database-url", url, "--internal-insecure",
			"--listen", strings.TrimPrefix(s.public, "http://"), "--internal-listen", strings.TrimPrefix(s.internal, "http://"),
			"--metrics-listen", s.metrics, "--backoff-base", "20ms", "--backoff-max", "50ms", "--log-format", "json"}, &stdout, &stderr)
		waitForLine(t, &stderr, regexp.MustCompile(`"msg":"baton server started"`), exited, &stderr)
		s.stdout, s.stderr = &stdout, &stderr
		pair = append(pair, s)
	}
	return pair
}
