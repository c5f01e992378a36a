package worker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/lifecycle"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/worker"
)

// pagesDoc is the alerts pipeline whose pager is a lambda job (pushed to its operator's target)
// that writes the buffered dataset pages.
const pagesDoc = `
name: alerts
jobs:
  - {name: scan, activation: source, runtime: ecs_platform, operator: scan, outputs: 1, source: {kind: manual}}
  - name: pager
    activation: reactive
    runtime: lambda
    operator: page
    outputs: 1
    inputs:
      - from: {dataset: alert_events}
        where: {severity: high}
publish:
  alert_events:
    from: {job: scan, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: severity, type: string, required: true}
      unique: [dedupe_key]
    filter_fields: [severity]
  pages:
    from: {job: pager, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
      unique: [dedupe_key]
`

// A pushed task of a pipeline's lambda job reads the rows its event brought and publishes a batch,
// with its token alone, on the public listener.
func TestPushHandlerRunsALambdaJobOfAPipeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	blobURL := blobtest.File(t)
	bs, err := blob.Open(ctx, blobURL, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := dataset.Open(ctx, filepath.Join(t.TempDir(), "data.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Close() })
	type page struct {
		taskID string
		read   []string
		pub    *worker.PublishedBatch
		creds  error
	}
	got := make(chan page, 1)
	p := newPushed(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		pg := page{taskID: tk.ID}
		for r, err := range tk.Rows(ctx, tk.Pipeline.Inputs[0], worker.RowsOptions{}) {
			if err != nil {
				return nil, err
			}
			pg.read = append(pg.read, fmt.Sprint(r["dedupe_key"]))
		}
		_, pg.creds = tk.Credentials(ctx)
		var err error
		if pg.pub, err = tk.PublishBatch(ctx, "pages", []map[string]any{{"dedupe_key": "p-" + pg.read[0]}}); err != nil {
			return nil, err
		}
		got <- pg
		return map[string]any{"paged": len(pg.read)}, nil
	}, []worker.PushOption{worker.WithPushBlob(blobURL)}, func(c *batonserver.Config) { c.Blob, c.Data, c.Sink = bs, data, &sink.Config{} })
	if _, err := p.dp.Deploy(ctx, "default", []byte(pagesDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	run, err := p.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "alerts", Job: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p.url(), map[string]worker.Handler{"scan": func(ctx context.Context, tk *worker.Task) (any, error) {
		_, err := tk.PublishBatch(ctx, "alert_events", []map[string]any{
			{"dedupe_key": "k1", "severity": "high"}, {"dedupe_key": "k2", "severity": "low"}, {"dedupe_key": "k3", "severity": "high"}})
		return nil, err
	}}, worker.WithBlob(blobURL))
	var pg page
	select {
	case pg = <-got:
	case <-time.After(30 * time.Second):
		t.Fatalf("no pager task was pushed within 30 s; scan: %+v", p.task(run.TaskID))
	}
	if !slices.Equal(pg.read, []string{"k1", "k3"}) || !errors.Is(pg.creds, worker.ErrNoCredentials) {
		t.Errorf("read %v (want the high rows k1 k3); credentials: %v (want ErrNoCredentials: a directory store)", pg.read, pg.creds)
	}
	if pg.pub == nil || pg.pub.Rows != 1 || pg.pub.Duplicate {
		t.Errorf("published %+v", pg.pub)
	}
	tk := p.waitTask(pg.taskID, "completed", func(tk *store.Task) bool { return tk.Status == lifecycle.Completed })
	if string(tk.Output) != `{"paged":2}` {
		t.Errorf("output %s", tk.Output)
	}
	if recs, err := p.st.BufferPublishListByTask(ctx, pg.taskID); err != nil || len(recs) != 1 || recs[0].BatchURI != pg.pub.URI {
		t.Errorf("publish records %+v %v", recs, err)
	}
}
