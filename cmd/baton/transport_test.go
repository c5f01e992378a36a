package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/dial"
)

// transportCase is a wake-up transport on a real server, for the end-to-end tests.
type transportCase struct {
	kind, url string
	// lose makes the server lose everything the transport keeps for namespace ns: FLUSHDB of the
	// test's own Redis database (FLUSHALL would also wipe what other test packages, running at
	// the same time, keep on the shared server), or deleting the NATS stream.
	lose func(t *testing.T, ns string)
}

// redisTestDB is the Redis database these tests may flush; other packages use database 0.
const redisTestDB = "/7"

func transportCases(t *testing.T) []transportCase {
	var cases []transportCase
	if raw := os.Getenv("BATON_TEST_REDIS_URL"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("BATON_TEST_REDIS_URL: %v", err)
		}
		u.Path = redisTestDB
		cases = append(cases, transportCase{kind: "redis", url: u.String(), lose: func(t *testing.T, _ string) {
			opts, _ := goredis.ParseURL(u.String())
			c := goredis.NewClient(opts)
			defer c.Close()
			if err := c.FlushDB(context.Background()).Err(); err != nil {
				t.Fatalf("FLUSHDB: %v", err)
			}
		}})
	} else {
		t.Log("BATON_TEST_REDIS_URL not set; skipping the Redis Streams transport")
	}
	if raw := os.Getenv("BATON_TEST_NATS_URL"); raw != "" {
		cases = append(cases, transportCase{kind: "nats", url: raw, lose: func(t *testing.T, ns string) {
			nc, err := nats.Connect(raw)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if err := js.DeleteStream(context.Background(), strings.ToUpper(ns)+"_WAKEUPS"); err != nil {
				t.Fatalf("delete the stream: %v", err)
			}
		}})
	} else {
		t.Log("BATON_TEST_NATS_URL not set; skipping the NATS JetStream transport")
	}
	if len(cases) == 0 {
		t.Skip("neither BATON_TEST_REDIS_URL nor BATON_TEST_NATS_URL is set; skipping the transport tests")
	}
	return cases
}

// redisCase is the Redis Streams transport case; the test skips without BATON_TEST_REDIS_URL.
func redisCase(t *testing.T) transportCase {
	t.Helper()
	for _, c := range transportCases(t) {
		if c.kind == "redis" {
			return c
		}
	}
	t.Skip("BATON_TEST_REDIS_URL not set; skipping a test of the Redis Streams transport")
	return transportCase{}
}

// cleanUp removes what a test left on the transport's server under namespace ns.
func (tc transportCase) cleanUp(t *testing.T, ns string) {
	switch tc.kind {
	case "redis":
		deleteRedisKeys(t, tc.url, ns+":")
	case "nats":
		nc, err := nats.Connect(tc.url)
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(context.Background(), strings.ToUpper(ns)+"_WAKEUPS")
		}
	}
}

// transportFlagArgs are the flags selecting tc under namespace ns.
func (tc transportCase) args(ns string) []string {
	return []string{"--transport", tc.kind, "--" + tc.kind + "-url", tc.url, "--transport-namespace", ns}
}

// producer calls a server's producer API with an API key.
type producer struct {
	t        *testing.T
	url, key string
}

func (p producer) call(method, path, body string) (int, map[string]any) {
	p.t.Helper()
	req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
	req.Header.Set("x-api-key", p.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(res.Body).Decode(&v)
	return res.StatusCode, v
}

// jobPatience is how long the end-to-end tests wait for a server to get ready or a job to finish
// before calling it a hang: the race detector's servers and workers, beside the rest of the suite
// on a 2-core machine, take several times what they take alone.
const jobPatience = 4 * time.Minute

// waitReady polls /readyz of a server that is starting in this process or another.
func (p producer) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(jobPatience) // a server built with -race on a loaded machine
	for {
		if code, _ := p.call("GET", "/readyz", ""); code == 200 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("server %s never became ready", p.url)
		}
		time.Sleep(50 * time.Millisecond) // a real server coming up
	}
}

// submit creates a job and returns its id.
func (p producer) submit(job string) string {
	p.t.Helper()
	code, created := p.call("POST", "/jobs", job)
	if code != 201 {
		p.t.Fatalf("create job: %d %v", code, created)
	}
	return created["jobId"].(string)
}

// waitJob waits until the job is finished and returns its view.
func (p producer) waitJob(id string, within time.Duration) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, job := p.call("GET", "/jobs/"+id, "")
		if code == 200 && job["status"] != "processing" && job["status"] != "pending" {
			return job
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("job %s not finished within %s: %v", id, within, job)
		}
		time.Sleep(100 * time.Millisecond) // polling a real server
	}
}

// fanJob is a DAG of root → n middle tasks → sink, all named "step".
func fanJob(n int) string {
	tasks := []map[string]any{{"taskId": "root", "name": "step", "input": map[string]any{}}}
	var mids []string
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		mids = append(mids, id)
		tasks = append(tasks, map[string]any{"taskId": id, "name": "step", "dependsOn": []string{"root"}})
	}
	tasks = append(tasks, map[string]any{"taskId": "sink", "name": "step", "dependsOn": mids})
	b, _ := json.Marshal(map[string]any{"tasks": tasks})
	return string(b)
}

// chainJob is a chain of n tasks named "step".
func chainJob(n int) string {
	var tasks []map[string]any
	for i := range n {
		t := map[string]any{"taskId": fmt.Sprintf("c%02d", i), "name": "step"}
		if i > 0 {
			t["dependsOn"] = []string{fmt.Sprintf("c%02d", i-1)}
		}
		tasks = append(tasks, t)
	}
	b, _ := json.Marshal(map[string]any{"tasks": tasks})
	return string(b)
}

// runLog is a directory in which every run of a task appends a line to a file named after the
// task id, written by `baton worker` children (which may run as nobody).
func runLog(t *testing.T) string {
	dir, err := os.MkdirTemp("", "baton-runs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startWorkerProcesses starts n `baton worker` processes (this test binary standing in for baton)
// that run tasks named "step" with a shell command, woken through the transport.
func startWorkerProcesses(t *testing.T, n int, internalURL, publicURL, runs string, transportArgs []string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `cat >/dev/null; echo "$BATON_ATTEMPT" >> "$RUNS/$BATON_TASK_ID"; sleep 0.05; echo '{"ok":true}'`
	for i := range n {
		args := append([]string{"worker", "--task", "step", "--exec", script, "--internal-url", internalURL,
			"--url", publicURL, "--concurrency", "4", "--child-env", "RUNS=" + runs, "--child-write", runs,
			"--worker-id", fmt.Sprintf("proc-%d", i), "--shutdown-timeout", "5s", "--poll-wait", "2s"}, transportArgs...)
		cmd := exec.Command(exe, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(os.Interrupt)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				<-done
			}
			if t.Failed() || os.Getenv("BATON_TEST_LOG") != "" {
				t.Logf("worker %d stderr:\n%s", i, stderr.String())
			}
		})
	}
}

// startDevServer runs `baton dev` in this process with the given extra flags and returns its
// producer client and internal URL; the server stops when the test ends.
func startDevServer(t *testing.T, extra ...string) (producer, string) {
	key := "bt_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	addr, internal := freeAddr(t), freeAddr(t)
	ctx, stop := context.WithCancel(envContext(context.Background(), "BATON_API_KEY", key))
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	args := append([]string{"dev", "--data-dir", t.TempDir(), "--listen", addr, "--internal-listen", internal,
		"--reconcile-every", "200ms", "--reconcile-grace", "1s", "--metrics-listen="}, extra...)
	go func() { exited <- run(ctx, args, &out, &errOut) }()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("baton dev exited %d: %s", code, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("baton dev did not stop")
		}
		if t.Failed() || os.Getenv("BATON_TEST_LOG") != "" {
			t.Logf("baton dev stderr:\n%s", errOut.String())
		}
	})
	p := producer{t: t, url: "http://" + addr, key: key}
	p.waitReady()
	return p, "http://" + internal
}

// checkRanOnce checks that every task of the finished job completed in its first attempt and
// that its command ran exactly once.
func checkRanOnce(t *testing.T, job map[string]any, runs string) {
	t.Helper()
	if job["status"] != "completed" {
		t.Fatalf("job ended %v, want completed", job["status"])
	}
	for _, raw := range job["tasks"].([]any) {
		tk := raw.(map[string]any)
		id := tk["id"].(string)
		b, err := os.ReadFile(filepath.Join(runs, id))
		if err != nil {
			t.Errorf("task %s (%s): no run recorded: %v", tk["taskId"], id, err)
			continue
		}
		if lines := strings.Fields(string(b)); len(lines) != 1 || lines[0] != "1" {
			t.Errorf("task %s ran %d times (attempts %v), want once", tk["taskId"], len(lines), lines)
		}
	}
}

// Through each transport, with workers in separate processes: a DAG completes, every task runs
// once even with every wake-up delivered several times, and a job still completes after the
// transport lost everything mid-run.
func TestTransportEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range transportCases(t) {
		t.Run(tc.kind, func(t *testing.T) {
			ns := "bt" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
			t.Cleanup(func() { tc.cleanUp(t, ns) }) // after the server and workers stop
			p, internal := startDevServer(t, tc.args(ns)...)
			runs := runLog(t)
			startWorkerProcesses(t, 2, internal, p.url, runs, tc.args(ns))

			t.Run("DAG", func(t *testing.T) {
				p.t = t
				id := p.submit(fanJob(20))
				checkRanOnce(t, p.waitJob(id, jobPatience), runs)
			})

			t.Run("DuplicatedWakeups", func(t *testing.T) {
				p.t = t
				tr, err := dial.Open(t.Context(), tc.kind, tc.url, ns)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				id := p.submit(fanJob(20))
				// While the job runs, deliver every task's wake-up three more times, over and over.
				stopDup := make(chan struct{})
				var wg sync.WaitGroup
				wg.Go(func() {
					for {
						_, job := p.call("GET", "/jobs/"+id, "")
						var wakes []transport.Wakeup
						if tasks, ok := job["tasks"].([]any); ok {
							for _, raw := range tasks {
								tk := raw.(map[string]any)
								for range 3 {
									wakes = append(wakes, transport.Wakeup{ID: int64(len(wakes)), Queue: "step", TaskID: tk["id"].(string)})
								}
							}
						}
						if failed := tr.Publish(t.Context(), wakes); len(failed) > 0 {
							t.Errorf("inject duplicates: %v", failed)
						}
						select {
						case <-stopDup:
							return
						case <-time.After(100 * time.Millisecond):
						}
					}
				})
				job := p.waitJob(id, jobPatience)
				close(stopDup)
				wg.Wait()
				checkRanOnce(t, job, runs)
			})

			t.Run("TransportLostMidRun", func(t *testing.T) {
				p.t = t
				id := p.submit(chainJob(12))
				// Wait until part of the chain is done, then lose the transport's state.
				deadline := time.Now().Add(jobPatience)
				for {
					_, job := p.call("GET", "/jobs/"+id, "")
					done := 0
					for _, raw := range job["tasks"].([]any) {
						if raw.(map[string]any)["status"] == "completed" {
							done++
						}
					}
					if done >= 3 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("chain did not progress: %v", job)
					}
					time.Sleep(20 * time.Millisecond) // polling a real server
				}
				tc.lose(t, ns)
				checkRanOnce(t, p.waitJob(id, jobPatience), runs)
			})
		})
	}
}

// Two `baton server` replicas on one PostgreSQL, each running the relay, the reaper and the
// reconciler, with the Redis Streams transport and workers woken through it: every outbox
// wake-up is published exactly once and no task is claimed twice.
func TestServerReplicasRelayToRedis(t *testing.T) {
	dbURL := storetest.NewPostgresSchema(t)
	tc := redisCase(t)
	ctx := context.Background()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"migrate", "--database-url", dbURL}, &out, &errOut); code != 0 {
		t.Fatalf("migrate: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	if code := run(ctx, []string{"apikey", "create", "--name", "ci", "--database-url", dbURL}, &out, &errOut); code != 0 {
		t.Fatalf("apikey create: exit %d, %s", code, errOut.String())
	}
	key := strings.TrimSpace(out.String())
	ns := "bt" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
	t.Cleanup(func() { tc.cleanUp(t, ns) })

	srvCtx, stop := context.WithCancel(ctx)
	defer stop()
	exits := make(chan int, 2)
	var replicas []producer
	var internals []string
	for range 2 {
		addr, internal := freeAddr(t), freeAddr(t)
		replicas = append(replicas, producer{t: t, url: "http://" + addr, key: key})
		internals = append(internals, "http://"+internal)
		// A long reconcile grace: every wake-up on the stream then comes from the relay.
		args := append([]string{"server", "--database-url", dbURL, "--listen", addr, "--internal-listen", internal,
			"--internal-insecure", "--reconcile-grace", "1h", "--max-tasks-per-job", "0"}, tc.args(ns)...)
		var o, e syncBuffer
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica stderr:\n%s", e.String())
			}
		})
		go func() { exits <- run(srvCtx, args, &o, &e) }()
	}
	for _, p := range replicas {
		p.waitReady()
	}
	runs := runLog(t)
	// One worker process per replica.
	for i := range 2 {
		startWorkerProcesses(t, 1, internals[i], replicas[i].url, runs, tc.args(ns))
	}
	var ids []string
	for i := range 4 {
		ids = append(ids, replicas[i%2].submit(fanJob(30)))
	}
	for i, id := range ids {
		checkRanOnce(t, replicas[(i+1)%2].waitJob(id, 2*jobPatience), runs)
	}

	// Every wake-up written to the outbox was published, once.
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, unsent int
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE sent_at IS NULL) FROM outbox WHERE topic = 'task.ready'`).Scan(&rows, &unsent); err != nil {
			t.Fatal(err)
		}
		if unsent == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the relays run on their own schedule
	}
	if want := 4 * 32; rows != want || unsent != 0 {
		t.Fatalf("outbox: %d task.ready rows (want %d), %d unsent (want 0)", rows, want, unsent)
	}
	opts, _ := goredis.ParseURL(tc.url)
	rc := goredis.NewClient(opts)
	defer rc.Close()
	info, err := rc.XInfoStream(ctx, ns+":wake:step").Result()
	if err != nil {
		t.Fatal(err)
	}
	if info.EntriesAdded != int64(rows) {
		t.Fatalf("the relays added %d wake-ups to the stream for %d outbox rows; want one each", info.EntriesAdded, rows)
	}
	stop()
	for range 2 {
		select {
		case code := <-exits:
			if code != 0 {
				t.Errorf("replica exited %d after shutdown", code)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a replica did not shut down")
		}
	}
}
