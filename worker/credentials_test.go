package worker_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/worker"
)

// A trusted handler gets its attempt's minted credentials from the SDK and hands them to an AWS
// SDK client: they write under the attempt's scratch prefix and nowhere else; and PublishBatch,
// with no object storage of the worker's own, writes its batch with them.
func TestTaskCredentialsOnS3(t *testing.T) {
	t.Parallel()
	url, opts := blobtest.S3(t)
	ctx := context.Background()
	bs, err := blob.Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	s := newServer(t, func(c *batonserver.Config) { c.Blob = bs })
	if _, err := s.dp.Deploy(ctx, "default", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	run, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	bucket := bs.S3().Bucket
	var report atomic.Value
	start(t, s.url(), map[string]worker.Handler{
		"scan": func(ctx context.Context, tk *worker.Task) (any, error) {
			c, err := tk.Credentials(ctx)
			if err != nil {
				return nil, err
			}
			again, err := tk.Credentials(ctx)
			if err != nil || again != c {
				return nil, errors.New("fresh credentials were minted again")
			}
			client := s3.New(s3.Options{Region: c.Region, BaseEndpoint: aws.String(c.EndpointURL), UsePathStyle: true,
				Credentials: tk.AWSCredentials()})
			put := func(uri string) error {
				key := strings.TrimPrefix(uri, "s3://"+bucket+"/")
				_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("x"))})
				return err
			}
			var r []string
			r = append(r, c.ScratchPrefix(), errText(put(c.ScratchPrefix()+"notes.txt")), errText(put(url+"/scratch/someone-else/1/x")))
			b, err := tk.PublishBatch(ctx, "alert_events", []map[string]any{{"dedupe_key": "k1", "severity": "high"}})
			if err != nil {
				return nil, err
			}
			report.Store(append(r, b.URI))
			return nil, nil
		},
	}, worker.WithBlob(""))
	s.waitTask(run.TaskID, "completed", status(lifecycle.Completed))
	r, _ := report.Load().([]string)
	if len(r) != 4 {
		t.Fatalf("report %q", r)
	}
	if want := url + "/scratch/" + run.TaskID + "/1/"; r[0] != want {
		t.Errorf("scratch prefix %q, want %q", r[0], want)
	}
	if r[1] != "" {
		t.Errorf("write under the scratch prefix: %s", r[1])
	}
	if !strings.Contains(r[2], "StatusCode: 403") {
		t.Errorf("write under another task's prefix: %q, want 403", r[2])
	}
	ds, err := s.st.DatasetGetByName(ctx, "default", "alert_events")
	if err != nil {
		t.Fatal(err)
	}
	if want := bs.URI(blob.BatchPrefix(ds.UUID, run.TaskID, 1)); !strings.HasPrefix(r[3], want) {
		t.Errorf("batch at %q, want it under %s", r[3], want)
	}
	if recs, err := s.st.BufferPublishListByTask(ctx, run.TaskID); err != nil || len(recs) != 1 || recs[0].BatchURI != r[3] {
		t.Errorf("publish records %+v %v", recs, err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Without S3 object storage there is nothing to mint, and the SDK says so.
func TestTaskCredentialsWithoutS3(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	var got atomic.Value
	start(t, s.url(), map[string]worker.Handler{
		"op": func(ctx context.Context, tk *worker.Task) (any, error) {
			_, err := tk.Credentials(ctx)
			got.Store(errText(err))
			return nil, nil
		},
	})
	_, ids := s.submit(spec{key: "a", name: "op"})
	s.waitTask(ids["a"], "completed", status(lifecycle.Completed))
	if msg, _ := got.Load().(string); msg != worker.ErrNoCredentials.Error() {
		t.Errorf("err %q, want ErrNoCredentials", msg)
	}
}
