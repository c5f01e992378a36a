package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/blob/blobtest"
)

// childEnvAllowed are the variables a `baton worker --exec` child may hold with S3 object
// storage: the runner's, the task's, and the minted credentials; LANG and TZ pass through.
var childEnvAllowed = []string{"PATH", "HOME", "TMPDIR", "PWD", "LANG", "TZ", "BATON_TASK_PAYLOAD", "BATON_URL",
	"TRACE_TASK_CAPABILITY_TOKEN", "BATON_TASK_ID", "BATON_TASK_KEY", "BATON_TASK_NAME", "BATON_JOB_ID", "BATON_ATTEMPT",
	"BATON_LEASE_TOKEN", "BATON_BUFFER_DIR", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AWS_CREDENTIAL_EXPIRATION", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_SHARED_CREDENTIALS_FILE",
	"AWS_CONFIG_FILE"}

// `baton dev --demo pipeline` with S3 object storage: range_stats's child, an untrusted program
// under `baton worker --exec`, writes its alert batch to the real S3-compatible server itself,
// with the credentials the wrapper minted for its attempt (the AWS CLI's variables), and
// publishes it with its capability token; the sink loads every batch. The server and the
// wrappers hold the root credentials; the children see none of them. Not parallel: it sets the
// AWS variables of this process, which the demo's server and workers inherit.
func TestDevDemoPipelineOnS3(t *testing.T) {
	bucketURL, opts := blobtest.S3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", opts.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", opts.SecretKey)
	t.Setenv("AWS_ENDPOINT_URL", opts.Endpoint)
	t.Setenv("AWS_REGION", opts.Region)
	inspect := func(out string) {
		ctx := context.Background()
		key := regexp.MustCompile(`export BATON_API_KEY=(\S+)\)`).FindStringSubmatch(out)
		addr := regexp.MustCompile(`producer API  (http://\S+)`).FindStringSubmatch(out)
		if key == nil || addr == nil {
			t.Fatalf("no API key or producer address in the banner:\n%s", out)
		}
		c := client.New(addr[1], key[1])
		rows, err := c.DatasetRows(ctx, "alert_events", client.RowsQuery{Limit: 100})
		if err != nil || len(rows.Rows) != 20 {
			t.Fatalf("alert_events rows: %v, %+v; want the 20 the children wrote", err, rows)
		}
		page, err := c.ListJobs(ctx, client.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, j := range page.Jobs {
			if j.Name != "blocks_demo.range_stats" {
				continue
			}
			job, err := c.GetJob(ctx, j.JobID)
			if err != nil || len(job.Tasks) != 1 {
				t.Fatalf("job %s: %v %+v", j.JobID, err, job)
			}
			var o struct {
				BatchURI    string   `json:"batch_uri"`
				Environment []string `json:"environment"`
			}
			if err := json.Unmarshal(job.Tasks[0].Output, &o); err != nil {
				t.Fatalf("range_stats output %s: %v", job.Tasks[0].Output, err)
			}
			if !strings.HasPrefix(o.BatchURI, bucketURL+"/buffers/") {
				t.Errorf("range_stats wrote its batch at %q, want it under %s/buffers/", o.BatchURI, bucketURL)
			}
			for _, name := range o.Environment {
				if !slices.Contains(childEnvAllowed, name) {
					t.Errorf("the child's environment holds %s", name)
				}
			}
			for _, name := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"} {
				if !slices.Contains(o.Environment, name) {
					t.Errorf("the child's environment lacks %s: %v", name, o.Environment)
				}
			}
			checked++
		}
		if checked != 10 {
			t.Errorf("checked %d range_stats tasks, want 10", checked)
		}
	}
	out := runDevDemoInspect(t, "went through every job", inspect, "--blob-url", bucketURL, "--demo", "pipeline")
	if !strings.Contains(out, "pager 5/5, digest 10/10") {
		t.Errorf("stdout lacks the readers' counts:\n%s", out)
	}
}
