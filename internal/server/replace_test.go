package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/staging"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// replaceDoc: a manual source that rewrites partitions of days, and a job per partition of it.
const replaceDoc = `name: daily
jobs:
  - {name: build, activation: source, runtime: ecs_platform, operator: build_days, outputs: 1, update_strategy: replace, source: {kind: manual}}
  - {name: report, activation: reactive, runtime: ecs_platform, operator: report, outputs: 0, execution_strategy: PerPartition,
     inputs: [{from: {dataset: days}}]}
publish:
  days: {from: {job: build, output: 0}}
`

// call sends a JSON request and returns the answer's status and JSON object.
func call(t *testing.T, method, url, body string, headers ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, res.StatusCode, raw, err)
		}
	}
	return res.StatusCode, v
}

// End to end over HTTP, with a directory as object storage: a replace job's task, claimed on
// the internal listener, stages a partition where its capability token lets it write; its event
// is refused on the task-scoped listener until the marker is there, then its completion commits
// the partition, which GET /datasets/{name} lists and the router hands to the consumer.
func TestReplaceOverHTTP(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		bs, err := blob.Open(ctx, blobtest.File(t), blob.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bs.Close() })
		s, err := server.New(server.Config{Store: st, Logger: quiet, Blob: bs,
			Staging: staging.Config{Retention: staging.DefaultRetention}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		public, internal := httptest.NewServer(s.ProducerHandler()), httptest.NewServer(s.InternalHandler())
		t.Cleanup(func() {
			s.Drain()
			public.Close()
			internal.Close()
			s.Stop()
		})
		_, key, err := auth.CreateKey(ctx, st, "deployer", "acme", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		api := func(method, path, body string) (int, map[string]any) {
			t.Helper()
			return call(t, method, public.URL+path, body, "x-api-key", key, "Content-Type", "application/yaml")
		}

		if code, v := api("POST", "/pipelines", replaceDoc); code != 201 {
			t.Fatalf("deploy: %d %v", code, v)
		}
		code, view := api("GET", "/datasets/days", "")
		if code != 200 || view["partitions"] == nil || len(view["partitions"].([]any)) != 0 || view["partitions_truncated"] != false {
			t.Fatalf("the new dataset: %d %v", code, view)
		}
		ds, version := view["dataset_uuid"].(string), view["current_version"].(string)
		code, run := api("POST", "/pipelines/daily/jobs/build/run", "")
		if code != 201 {
			t.Fatalf("run: %d %v", code, run)
		}
		taskID := run["task_id"].(string)
		code, claim := call(t, "POST", internal.URL+"/internal/task-claim", `{"worker_id":"w","task_id":"`+taskID+`"}`)
		if code != 200 || claim["status"] != "Claimed" {
			t.Fatalf("claim: %d %v", code, claim)
		}
		token, lease := claim["capability_token"].(string), claim["lease_token"].(string)

		// The token lets the attempt write its staging folder.
		folder := intake.StagingDir(ds, taskID, 1, "20261101-20261101")
		var claims struct {
			S3 struct {
				WritePrefixes []string `json:"write_prefixes"`
			} `json:"s3"`
		}
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
		if err != nil || json.Unmarshal(payload, &claims) != nil {
			t.Fatalf("the token's claims: %s %v", payload, err)
		}
		if !slices.ContainsFunc(claims.S3.WritePrefixes, func(p string) bool { return strings.HasPrefix(bs.URI(folder), p) }) {
			t.Fatalf("write prefixes %q do not hold the staging folder %s", claims.S3.WritePrefixes, bs.URI(folder))
		}
		if err := bs.Put(ctx, folder+"part-0.parquet", []byte("0123456789"), ""); err != nil {
			t.Fatal(err)
		}

		fenceJSON := `"task_id":"` + taskID + `","attempt":1,"lease_token":"` + lease + `"`
		event := `{"dataset_uuid":"` + ds + `","dataset_version":"` + version + `","partition_key":"20261101-20261101","start":20261101,"end":20261101}`
		code, refused := call(t, "POST", public.URL+"/v1/task/events", `{`+fenceJSON+`,"events":[`+event+`]}`, "X-Trace-Task-Capability", token)
		if code != 400 || refused["error"] != "invalid_request" || !strings.Contains(refused["message"].(string), bs.URI(folder+"_SUCCESS")) {
			t.Fatalf("an event without its marker: %d %v", code, refused)
		}
		if code, v := api("GET", "/datasets/days", ""); code != 200 || len(v["partitions"].([]any)) != 0 || len(v["recent_events"].([]any)) != 0 {
			t.Fatalf("the refused event left %v", v)
		}

		if err := bs.Put(ctx, folder+"_SUCCESS", []byte(`{"row_count": 3}`), "application/json"); err != nil {
			t.Fatal(err)
		}
		code, done := call(t, "POST", public.URL+"/v1/task/complete", `{`+fenceJSON+`,"status":"Completed","events":[`+event+`]}`,
			"X-Trace-Task-Capability", token)
		if code != 200 || done["status"] != "Completed" {
			t.Fatalf("complete: %d %v", code, done)
		}
		code, view = api("GET", "/datasets/days", "")
		parts := view["partitions"].([]any)
		if code != 200 || len(parts) != 1 || view["current_version"] != version {
			t.Fatalf("after the commit: %d %v", code, view)
		}
		p := parts[0].(map[string]any)
		if p["partition_key"] != "20261101-20261101" || p["location"] != bs.URI(folder) || p["row_count"] != 3.0 || p["bytes"] != 10.0 ||
			p["task_id"] != taskID || p["attempt"] != 1.0 || p["committed_at"] == nil {
			t.Errorf("partition %v", p)
		}

		// The router, running in the server, gives report a task for the partition.
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, pl := api("GET", "/pipelines/daily", "")
			routed := 0.0
			for _, j := range pl["jobs"].([]any) {
				if j := j.(map[string]any); j["name"] == "report" {
					routed = j["counts"].(map[string]any)["routed"].(float64)
				}
			}
			if routed == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("report has %v routed tasks, want 1", routed)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
