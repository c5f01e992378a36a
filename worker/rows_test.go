package worker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/worker"
)

// A consumer reads, through Task.Rows, the rows its event brought that match its input's where:
// the writer publishes a batch, the server's sink loads it, the router starts the consumer.
func TestRowsReadsTheRowsTheEventBrought(t *testing.T) {
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
	s := newServer(t, func(c *batonserver.Config) { c.Blob, c.Data, c.Sink = bs, data, &sink.Config{} })
	if _, err := s.dp.Deploy(ctx, "default", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "alerts", Job: "scan"}); err != nil {
		t.Fatal(err)
	}
	type read struct {
		all, narrowed []string
		err           error
	}
	got := make(chan read, 1)
	keys := func(tk *worker.Task, opts worker.RowsOptions) ([]string, error) {
		var out []string
		for r, err := range tk.Rows(ctx, tk.Pipeline.Inputs[0], opts) {
			if err != nil {
				return out, err
			}
			out = append(out, fmt.Sprint(r["dedupe_key"]))
		}
		return out, nil
	}
	start(t, s.url(), map[string]worker.Handler{
		"scan": func(ctx context.Context, tk *worker.Task) (any, error) {
			_, err := tk.PublishBatch(ctx, "alert_events", []map[string]any{
				{"dedupe_key": "k1", "severity": "high"}, {"dedupe_key": "k2", "severity": "low"}, {"dedupe_key": "k3", "severity": "high"}})
			return nil, err
		},
		"page": func(ctx context.Context, tk *worker.Task) (any, error) {
			var r read
			r.all, r.err = keys(tk, worker.RowsOptions{PageSize: 1}) // a page per row: every page is read
			if r.err == nil {
				r.narrowed, r.err = keys(tk, worker.RowsOptions{Where: map[string]any{"dedupe_key": "k3"}})
			}
			got <- r
			return nil, r.err
		},
		"digest": func(ctx context.Context, tk *worker.Task) (any, error) { return nil, nil },
	}, worker.WithBlob(blobURL))
	select {
	case r := <-got:
		if r.err != nil || !slices.Equal(r.all, []string{"k1", "k3"}) || !slices.Equal(r.narrowed, []string{"k3"}) {
			t.Fatalf("pager read %v, narrowed %v (%v); want [k1 k3] and [k3]", r.all, r.narrowed, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no pager task ran within 30 s")
	}
}
