package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// sinkKillDoc deploys the buffered dataset the kill test loads.
const sinkKillDoc = `
name: loader
jobs:
  - name: scan
    activation: source
    runtime: ecs_platform
    operator: scan
    outputs: 1
    source: {kind: manual}
  - name: reader
    activation: reactive
    runtime: ecs_platform
    operator: read
    outputs: 0
    inputs:
      - from: {dataset: big_events}
publish:
  big_events:
    from: {job: scan, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: severity, type: string, required: true}
        - {name: block, type: integer}
        - {name: note, type: string}
      unique: [dedupe_key]
    filter_fields: [severity]
`

// A `baton sink` process SIGKILLed while it loads a batch leaves no part of it in the table, and
// after a restart the batch is applied exactly once: every row once, one committed publish, one
// dataset event. On PostgreSQL the kill waits until the load's statement runs in the data
// database; on SQLite it comes shortly after the claim.
func TestSinkProcessKilledMidBatchAppliesTheBatchOnce(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			if driver == "postgres" && os.Getenv(storetest.PostgresURLEnv) == "" {
				t.Skipf("%s is not set; skipping the PostgreSQL run", storetest.PostgresURLEnv)
			}
			testSinkKill(t, driver)
		})
	}
}

func testSinkKill(t *testing.T, driver string) {
	dir := t.TempDir()
	blobURL := "file://" + filepath.Join(dir, "blobs")
	addr, internal := freeAddr(t), freeAddr(t)
	key := "bt_test_sinkkill" + strings.ReplaceAll(filepath.Base(dir), "-", "")
	var args, env []string
	var controlURL, dataURL string
	switch driver {
	case "sqlite":
		env = []string{"BATON_API_KEY", key}
		dataURL = filepath.Join(dir, "data", dataFile)
		args = []string{"dev", "--data-dir", filepath.Join(dir, "data"), "--sink=false", "--metrics-listen="}
	case "postgres":
		controlURL = storetest.NewPostgresDatabase(t).URL
		dataURL = storetest.NewPostgresDatabase(t).URL
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"migrate", "--database-url", controlURL}, &out, &errOut); code != 0 {
			t.Fatalf("migrate: %s", errOut.String())
		}
		out.Reset()
		if code := run(context.Background(), []string{"apikey", "create", "--name", "t", "--database-url", controlURL}, &out, &errOut); code != 0 {
			t.Fatalf("apikey: %s", errOut.String())
		}
		key = strings.TrimSpace(out.String())
		args = []string{"server", "--database-url", controlURL, "--data-database-url", dataURL, "--internal-insecure"}
	}
	args = append(args, "--listen", addr, "--internal-listen", internal, "--blob-url", blobURL, "--sink-visibility", "2s")
	ctx, stop := context.WithCancel(envContext(context.Background(), env...))
	var srvErr syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, args, &syncBuffer{}, &srvErr) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			t.Error("the server did not stop")
		}
		if t.Failed() {
			t.Logf("server stderr:\n%s", srvErr.String())
		}
	})
	p := producer{t: t, url: "http://" + addr, key: key}
	p.waitReady()
	call := func(method, url, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(res.Body).Decode(&v)
		return res.StatusCode, v
	}
	req, _ := http.NewRequest("POST", p.url+"/pipelines", strings.NewReader(sinkKillDoc))
	req.Header.Set("x-api-key", key)
	req.Header.Set("Content-Type", "application/yaml")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 201 {
		t.Fatalf("deploy: %v %v", res, err)
	}
	_, ds := call("GET", p.url+"/datasets/big_events", "")
	dsUUID := ds["dataset_uuid"].(string)

	// A running task of the job that publishes the dataset writes a large batch and publishes it.
	code, started := call("POST", p.url+"/pipelines/loader/jobs/scan/run", "")
	if code != 201 {
		t.Fatalf("run scan: %d %v", code, started)
	}
	taskID := started["task_id"].(string)
	code, claim := call("POST", "http://"+internal+"/internal/task-claim", `{"task_id":"`+taskID+`","worker_id":"w"}`)
	if code != 200 || claim["status"] != "Claimed" {
		t.Fatalf("claim: %d %v", code, claim)
	}
	lease := claim["lease_token"].(string)
	// 50,000 rows: on PostgreSQL their COPY and INSERT run for seconds under -race, long enough
	// to be seen running and killed there (200,000 took 40 to 50 s per run in CI, for nothing
	// more); on SQLite, where the sink itself does the inserting, reading and checking them takes
	// far longer than the 200 ms the kill waits for.
	rows := 50_000
	var batch bytes.Buffer
	for i := range rows {
		fmt.Fprintf(&batch, `{"dedupe_key":"k%07d","severity":"%s","block":%d,"note":"row %d of a batch loaded once"}`+"\n",
			i, []string{"high", "low"}[i%2], i, i)
	}
	rel := blob.BatchPrefix(dsUUID, taskID, 1) + "big.jsonl"
	path := filepath.Join(dir, "blobs", filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, batch.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	code, pub := call("POST", "http://"+internal+"/internal/buffer-publish", fmt.Sprintf(
		`{"task_id":"%s","attempt":1,"lease_token":"%s","batch_uri":"%s/%s","record_count":%d}`, taskID, lease, blobURL, rel, rows))
	if code != 200 || pub["duplicate"] != false {
		t.Fatalf("buffer-publish: %d %v", code, pub)
	}

	count := tableCounter(t, driver, dataURL, dsUUID)
	// The first sink's claim lasts 2 s, so that the next takes the batch over soon after the kill.
	// The next one's lasts 30 s, shorter than its load of the batch takes under -race: it extends
	// its claim every 10 s while it loads, and keeps the batch however long the load takes. The
	// deadlines below are only there to end a test that went wrong: they are several times what
	// the steps take on a 2-core machine loaded by other work under -race.
	startSink := func(visibility string) (*exec.Cmd, *syncBuffer) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "sink", "--internal-url", "http://"+internal, "--blob-url", blobURL,
			"--data-database-url", dataURL, "--sink-visibility", visibility, "--log-level", "debug")
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("sink stderr:\n%s", stderr.String())
			}
		})
		return cmd, &stderr
	}

	// The first sink is killed while it loads.
	first, firstLog := startSink("2s")
	loading := loadStarted(t, driver, dataURL, firstLog)
	deadline := time.Now().Add(3 * time.Minute)
	for !loading() {
		if time.Now().After(deadline) {
			t.Fatal("the sink never started loading")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	n := count()
	if n != 0 && n != rows {
		t.Fatalf("after the kill the table holds %d rows: a partial batch", n)
	}
	t.Logf("killed during the load: the table holds %d rows (0: before the load committed)", n)

	// A new sink takes the message over once its visibility ends, and applies it once.
	_, secondLog := startSink("30s")
	deadline = time.Now().Add(10 * time.Minute)
	for {
		_, dl := call("GET", p.url+"/datasets/big_events", "")
		events, _ := dl["recent_events"].([]any)
		if len(events) > 0 {
			if len(events) != 1 || events[0].(map[string]any)["cursor"] != 1.0 {
				t.Fatalf("dataset events %v, want one with cursor 1", events)
			}
			break
		}
		if time.Now().After(deadline) {
			log := secondLog.String()
			t.Fatalf("the batch was not committed after the restart; table holds %d rows; the new sink started %d loads, "+
				"extended its claims %d times, lost %d", count(), strings.Count(log, "sink: loading a batch"),
				strings.Count(log, "sink: claim extended"), strings.Count(log, "sink: lost the claim"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := count(); n != rows {
		t.Fatalf("the table holds %d rows, want %d", n, rows)
	}
	log := secondLog.String()
	t.Logf("%d rows; the new sink started %d loads, extended its claims %d times, lost %d", rows,
		strings.Count(log, "sink: loading a batch"), strings.Count(log, "sink: claim extended"),
		strings.Count(log, "sink: lost the claim"))
	code, page := call("GET", p.url+`/datasets/big_events/rows?limit=2&where={"severity":"low"}`, "")
	if code != 200 || len(page["rows"].([]any)) != 2 || page["rows"].([]any)[0].(map[string]any)["dedupe_key"] != "k0000001" {
		t.Fatalf("rows: %d %v", code, page)
	}
}

// tableCounter counts the rows of a dataset's table in the data database.
func tableCounter(t *testing.T, driver, dataURL, dsUUID string) func() int {
	q := "SELECT count(*) FROM " + dataset.TableName(dsUUID)
	return func() int {
		t.Helper()
		var n int
		var err error
		switch driver {
		case "postgres":
			var conn *pgx.Conn
			if conn, err = pgx.Connect(context.Background(), dataURL); err == nil {
				err = conn.QueryRow(context.Background(), q).Scan(&n)
				conn.Close(context.Background())
			}
		default:
			var db *sql.DB
			if db, err = sql.Open("sqlite", dataURL+"?_pragma=busy_timeout(10000)"); err == nil {
				err = db.QueryRow(q).Scan(&n)
				db.Close()
			}
		}
		if err != nil {
			t.Fatalf("count rows: %v", err)
		}
		return n
	}
}

// loadStarted reports whether a sink is loading a batch: on PostgreSQL, a backend of the data
// database runs the load's COPY or INSERT; on SQLite, whose writer cannot be watched, 200 ms have
// passed since the sink logged that it started on the batch (reading and checking the rows takes
// longer).
func loadStarted(t *testing.T, driver, dataURL string, sinkLog *syncBuffer) func() bool {
	switch driver {
	case "postgres":
		conn, err := pgx.Connect(context.Background(), dataURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return func() bool {
			var n int
			err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
				AND (query ILIKE 'COPY%' OR query ILIKE 'INSERT INTO%ds_%')`).Scan(&n)
			return err == nil && n > 0
		}
	default:
		var since time.Time
		return func() bool {
			if since.IsZero() {
				if strings.Contains(sinkLog.String(), "sink: loading a batch") {
					since = time.Now()
				}
				return false
			}
			return time.Since(since) > 200*time.Millisecond
		}
	}
}
