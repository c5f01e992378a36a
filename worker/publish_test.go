package worker_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/worker"
)

// Task.PublishBatch writes the rows as a JSONL batch under the attempt's own prefix in the object
// storage and publishes it: the task never handles storage URLs.
func TestPublishBatchWritesAndPublishesUnderTheAttemptsPrefix(t *testing.T) {
	t.Parallel()
	s, bs, blobURL := newAlertsServer(t, "default")
	ctx := context.Background()
	run, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	type alert struct {
		Key      string `json:"dedupe_key"`
		Severity string `json:"severity"`
	}
	var published atomic.Pointer[worker.PublishedBatch]
	var refusals atomic.Value
	start(t, s.url(), map[string]worker.Handler{
		"scan": func(ctx context.Context, tk *worker.Task) (any, error) {
			b, err := tk.PublishBatch(ctx, "alert_events", []alert{{"k1", "high"}, {"k2", "low"}})
			if err != nil {
				return nil, err
			}
			published.Store(b)
			// A second batch by name of a dataset the job does not write, and bad calls.
			if _, err := tk.PublishBatch(ctx, "alert_events", []map[string]any{{"dedupe_key": "k3"}}); err != nil {
				return nil, err
			}
			var msgs []string
			for _, rows := range []any{"not a slice", []any{func() {}}} {
				_, err := tk.PublishBatch(ctx, "alert_events", rows)
				msgs = append(msgs, err.Error())
			}
			_, err = tk.PublishBatch(ctx, "no_such_dataset", []alert{{"k", "x"}})
			msgs = append(msgs, err.Error())
			refusals.Store(msgs)
			return nil, nil
		},
	}, worker.WithBlob(blobURL))
	s.waitTask(run.TaskID, "completed", status(lifecycle.Completed))
	b := published.Load()
	ds, err := s.st.DatasetGetByName(ctx, "default", "alert_events")
	if err != nil {
		t.Fatal(err)
	}
	want := bs.URI(blob.BatchPrefix(ds.UUID, run.TaskID, 1))
	if b == nil || !strings.HasPrefix(b.URI, want) || b.Rows != 2 || b.Duplicate {
		t.Fatalf("published %+v, want 2 rows under %s", b, want)
	}
	key, err := bs.Key(b.URI)
	if err != nil {
		t.Fatal(err)
	}
	r, err := bs.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r)
	r.Close()
	if string(data) != `{"dedupe_key":"k1","severity":"high"}`+"\n"+`{"dedupe_key":"k2","severity":"low"}`+"\n" {
		t.Errorf("artifact %q", data)
	}
	recs, err := s.st.BufferPublishListByTask(ctx, run.TaskID)
	if err != nil || len(recs) != 2 || recs[0].BatchURI != b.URI || recs[0].DatasetUUID != ds.UUID || *recs[0].RecordCount != 2 {
		t.Fatalf("publish records %+v %v", recs, err)
	}
	msgs, _ := refusals.Load().([]string)
	if len(msgs) != 3 || !strings.Contains(msgs[0], "must be a slice") || !strings.Contains(msgs[1], "row 1") ||
		!strings.Contains(msgs[2], `dataset "no_such_dataset" is not a buffered output of this task's job (its claim's outputs: "alert_events")`) {
		t.Errorf("refusals %q", msgs)
	}
}

// Without object storage, PublishBatch says what to configure.
func TestPublishBatchNeedsObjectStorage(t *testing.T) {
	t.Setenv("BATON_BLOB_URL", "")
	s := newServer(t)
	ctx := context.Background()
	if _, err := s.dp.Deploy(ctx, "default", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	var got atomic.Value
	start(t, s.url(), map[string]worker.Handler{
		"scan": func(ctx context.Context, tk *worker.Task) (any, error) {
			_, err := tk.PublishBatch(ctx, "alert_events", []int{1})
			got.Store(err)
			return nil, nil
		},
	})
	run, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	s.waitTask(run.TaskID, "completed", status(lifecycle.Completed))
	if err, _ := got.Load().(error); !errors.Is(err, worker.ErrNoBlob) {
		t.Errorf("err %v, want ErrNoBlob", err)
	}
}

// Rule: only a task whose job declares the buffered dataset among its outputs may publish into it.
// A task of a plain job (POST /jobs) is refused before anything is written: no batch in the object
// storage, no publish record; the refusal is permanent (retrying cannot help).
func TestPublishBatchRefusesADatasetTheJobDoesNotWrite(t *testing.T) {
	t.Parallel()
	// The plain job's tenant (the harness's) has the buffered dataset.
	s, bs, blobURL := newAlertsServer(t, "acme")
	ctx := context.Background()
	got := make(chan error, 1)
	start(t, s.url(), map[string]worker.Handler{
		"op": func(ctx context.Context, tk *worker.Task) (any, error) {
			_, err := tk.PublishBatch(ctx, "alert_events", []map[string]any{{"dedupe_key": "k1", "severity": "high"}})
			got <- err
			return nil, nil
		},
	}, worker.WithBlob(blobURL))
	_, ids := s.submit(spec{key: "a", name: "op"})
	s.waitTask(ids["a"], "completed", status(lifecycle.Completed))
	err := <-got
	var we *worker.Error
	if !errors.As(err, &we) || we.Retryable == nil || *we.Retryable ||
		!strings.Contains(err.Error(), `dataset "alert_events" is not a buffered output of this task's job (its claim's outputs: no buffered dataset)`) {
		t.Fatalf("err %v, want a permanent refusal naming the dataset", err)
	}
	keys, err := bs.List(ctx, "buffers/")
	if err != nil || len(keys) != 0 {
		t.Fatalf("objects under buffers/: %q %v; want none", keys, err)
	}
	if recs, err := s.st.BufferPublishListByTask(ctx, ids["a"]); err != nil || len(recs) != 0 {
		t.Fatalf("publish records %+v %v; want none", recs, err)
	}
}

// newAlertsServer is a server whose object storage bs is a fresh directory (at blobURL), with
// pipelinetest.AlertsDoc deployed for tenant.
func newAlertsServer(t *testing.T, tenant string) (s *server, bs *blob.Store, blobURL string) {
	t.Helper()
	blobURL = blobtest.File(t)
	bs, err := blob.Open(context.Background(), blobURL, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s = newServer(t, func(c *batonserver.Config) { c.Blob = bs })
	if _, err := s.dp.Deploy(context.Background(), tenant, []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	return s, bs, blobURL
}

// Rule: a task created before a bootstrap.reset_outputs deploy cannot publish batches after it:
// the server refuses them (409 dataset_version_not_current) and records nothing, and the refusal
// is permanent, so the attempt's failure is not retried.
func TestPublishBatchAfterAResetIsRefusedForGood(t *testing.T) {
	t.Parallel()
	s, _, blobURL := newAlertsServer(t, "default")
	ctx := context.Background()
	run, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	reset := strings.Replace(pipelinetest.AlertsDoc, "    source: {kind: manual}\n", "    source: {kind: manual}\n    bootstrap: {reset_outputs: true}\n", 1)
	got := make(chan error, 1)
	start(t, s.url(), map[string]worker.Handler{
		"scan": func(ctx context.Context, tk *worker.Task) (any, error) {
			if _, err := s.dp.Deploy(ctx, "default", []byte(reset), "application/yaml"); err != nil {
				return nil, err
			}
			_, err := tk.PublishBatch(ctx, "alert_events", []map[string]any{{"dedupe_key": "k1", "severity": "high"}})
			got <- err
			return nil, err
		},
	}, worker.WithBlob(blobURL))
	task := s.waitTask(run.TaskID, "failed", status(lifecycle.Failed))
	err = <-got
	var we *worker.Error
	if !errors.As(err, &we) || we.Retryable == nil || *we.Retryable || !strings.Contains(err.Error(), "409 dataset_version_not_current") {
		t.Fatalf("err %v, want a permanent 409 dataset_version_not_current", err)
	}
	if task.Attempt != 1 {
		t.Errorf("the task ran %d attempts, want 1", task.Attempt)
	}
	if recs, err := s.st.BufferPublishListByTask(ctx, run.TaskID); err != nil || len(recs) != 0 {
		t.Fatalf("publish records %+v %v; want none", recs, err)
	}
}
