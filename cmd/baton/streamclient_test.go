package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"
)

// A stream-worker client written for Redis Streams, pointed at `baton dev --transport redis`:
// its stream is named like a Redis key (jobs:stream:high), it reads its own fields from payload,
// and after an ack it XACKs the message id it was handed on its own consumer group. The id is the
// real entry id of the task's wake-up; the server settles that entry itself once the outcome is
// committed, and the client's own XACK is harmless.
func TestStreamWorkerClientOverRedis(t *testing.T) {
	tc := redisCase(t)
	ns := "bt" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
	t.Cleanup(func() { tc.cleanUp(t, ns) })
	p, internal := startDevServer(t, tc.args(ns)...)
	opts, err := goredis.ParseURL(tc.url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	const queue = "jobs:stream:high"
	stream := ns + ":wake:" + queue

	jobID := p.submit(`{"tasks":[{"taskId":"fetch","name":"fetch-page","queue":"jobs:stream:high","dependsOn":[],
		"input":{"url":"https://example.com","type":"html"}}]}`)
	waitStreamLen(t, rdb, stream, 1)
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}

	var claim struct {
		Claimed    bool            `json:"claimed"`
		JobID      string          `json:"job_id"`
		AttemptID  int             `json:"attempt_id"`
		LeaseToken string          `json:"lease_token"`
		Stream     string          `json:"stream"`
		MessageID  *string         `json:"message_id"`
		Payload    json.RawMessage `json:"payload"`
	}
	postStreamJSON(t, internal+"/internal/worker/claim", `{"worker_id":"py-worker-1","streams":["jobs:stream:high"],"max_wait_ms":5000}`, &claim)
	if !claim.Claimed || claim.Stream != queue || claim.MessageID == nil || *claim.MessageID != entries[0].ID {
		t.Fatalf("claim %+v; the stream holds %v", claim, entries)
	}
	var payload map[string]any
	if err := json.Unmarshal(claim.Payload, &payload); err != nil || payload["url"] != "https://example.com" || payload["type"] != "html" {
		t.Fatalf("payload %s", claim.Payload)
	}
	var done struct {
		OK  bool `json:"ok"`
		Ack bool `json:"ack"`
	}
	report, _ := json.Marshal(map[string]any{"worker_id": "py-worker-1", "job_id": claim.JobID, "attempt_id": claim.AttemptID,
		"lease_token": claim.LeaseToken, "stream": claim.Stream, "message_id": *claim.MessageID, "result": map[string]any{"status": 200}})
	postStreamJSON(t, internal+"/internal/worker/complete", string(report), &done)
	if !done.OK || !done.Ack {
		t.Fatalf("complete: %+v", done)
	}
	// The client's own XACK, on its own group and its stream name: no error.
	if n, err := rdb.XAck(ctx, claim.Stream, "workers", *claim.MessageID).Result(); err != nil || n != 0 {
		t.Fatalf("client XACK: %d %v", n, err)
	}
	if n, err := rdb.XLen(ctx, stream).Result(); err != nil || n != 0 {
		t.Fatalf("the wake-up is still outstanding after the ack: XLEN %d %v", n, err)
	}
	if job := p.waitJob(jobID, 10*time.Second); job["status"] != "completed" {
		t.Fatalf("job %v", job["status"])
	}

	// The batch endpoints (what the Go SDK uses) settle the wake-ups of acknowledged reports too.
	jobID = p.submit(`{"tasks":[{"taskId":"a","name":"fetch-page","queue":"jobs:stream:high","dependsOn":[]},
		{"taskId":"b","name":"fetch-page","queue":"jobs:stream:high","dependsOn":[]}]}`)
	waitStreamLen(t, rdb, stream, 2)
	var batch struct {
		Claims []struct {
			JobID      string `json:"job_id"`
			AttemptID  int    `json:"attempt_id"`
			LeaseToken string `json:"lease_token"`
			Stream     string `json:"stream"`
			MessageID  string `json:"message_id"`
		} `json:"claims"`
	}
	postStreamJSON(t, internal+"/internal/worker/claim-batch", `{"worker_id":"sdk-1","streams":["jobs:stream:high"],"max_wait_ms":5000,"max_tasks":2}`, &batch)
	for len(batch.Claims) < 2 { // the second task may come with a second poll
		var more = batch
		more.Claims = nil
		postStreamJSON(t, internal+"/internal/worker/claim-batch", `{"worker_id":"sdk-1","streams":["jobs:stream:high"],"max_wait_ms":5000,"max_tasks":1}`, &more)
		batch.Claims = append(batch.Claims, more.Claims...)
	}
	var reports []map[string]any
	for _, c := range batch.Claims {
		reports = append(reports, map[string]any{"type": "complete", "job_id": c.JobID, "attempt_id": c.AttemptID,
			"lease_token": c.LeaseToken, "stream": c.Stream, "message_id": c.MessageID, "result": map[string]any{}})
	}
	body, _ := json.Marshal(map[string]any{"worker_id": "sdk-1", "reports": reports})
	var results struct {
		Results []map[string]any `json:"results"`
	}
	postStreamJSON(t, internal+"/internal/worker/report-batch", string(body), &results)
	for _, r := range results.Results {
		if r["ack"] != true {
			t.Fatalf("report-batch: %v", results.Results)
		}
	}
	waitStreamLen(t, rdb, stream, 0)
	if job := p.waitJob(jobID, 10*time.Second); job["status"] != "completed" {
		t.Fatalf("job %v", job["status"])
	}
}

// waitStreamLen waits until stream holds n entries (the relay of a real server publishes them).
func waitStreamLen(t *testing.T, rdb *goredis.Client, stream string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, err := rdb.XLen(context.Background(), stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d entries, want %d", stream, got, n)
		}
		time.Sleep(50 * time.Millisecond) // a real server's relay
	}
}

func postStreamJSON(t *testing.T, url, body string, into any) {
	t.Helper()
	res, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(res.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, res.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatal(err)
	}
}
