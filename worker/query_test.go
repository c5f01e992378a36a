package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/query/engine"
	batonserver "github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/worker"
)

// A consumer queries, through Task.Query, the buffered dataset its event came from: the rows its
// input's where keeps, by the dataset's name or quoted uuid; a dataset its job neither reads nor
// writes is refused, and so is a statement that is not a read-only SELECT.
func TestQueryReadsTheTasksDatasets(t *testing.T) {
	if !engine.Available {
		t.Skip("the query engine needs cgo (CGO_ENABLED=1)")
	}
	t.Parallel()
	ctx := context.Background()
	eng, err := engine.New(engine.Config{SpillDir: t.TempDir(), Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
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
	s := newServer(t, func(c *batonserver.Config) {
		c.Blob, c.Data, c.Sink = bs, data, &sink.Config{}
		c.DataPlane.Query = eng
	})
	if _, err := s.dp.Deploy(ctx, "default", []byte(pipelinetest.AlertsDoc), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.dp.RunSource(ctx, dataplane.RunSourceParams{Tenant: "default", Pipeline: "alerts", Job: "scan"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		byName, byUUID *worker.QueryResult
		forbidden      error
		rejected       error
		err            error
	}
	got := make(chan answer, 1)
	start(t, s.url(), map[string]worker.Handler{
		"scan": func(ctx context.Context, tk *worker.Task) (any, error) {
			_, err := tk.PublishBatch(ctx, "alert_events", []map[string]any{
				{"dedupe_key": "k1", "severity": "high"}, {"dedupe_key": "k2", "severity": "low"}, {"dedupe_key": "k3", "severity": "high"}})
			return nil, err
		},
		"page": func(ctx context.Context, tk *worker.Task) (any, error) {
			var a answer
			in := tk.Pipeline.Inputs[0]
			a.byName, a.err = tk.Query(ctx, "SELECT dedupe_key, severity FROM alert_events ORDER BY dedupe_key", worker.QueryOptions{})
			if a.err == nil {
				a.byUUID, a.err = tk.Query(ctx, fmt.Sprintf(`SELECT count(*) AS n FROM "%s"`, in.DatasetUUID), worker.QueryOptions{Limit: 1})
			}
			_, a.forbidden = tk.Query(ctx, "SELECT * FROM blocks", worker.QueryOptions{})
			_, a.rejected = tk.Query(ctx, "DELETE FROM alert_events", worker.QueryOptions{})
			got <- a
			return nil, a.err
		},
		"digest": func(ctx context.Context, tk *worker.Task) (any, error) { return nil, nil },
	}, worker.WithBlob(blobURL))
	var a answer
	select {
	case a = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("no pager task ran within 60 s")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	// The input's where (severity: high) keeps k1 and k3.
	if want := [][]any{{"k1", "high"}, {"k3", "high"}}; !reflect.DeepEqual(a.byName.Rows, want) || a.byName.RowCount != 2 ||
		len(a.byName.Columns) != 2 || a.byName.Columns[0] != (worker.QueryColumn{Name: "dedupe_key", Type: "VARCHAR"}) {
		t.Errorf("by name: %+v; want the rows %v", a.byName, want)
	}
	if want := [][]any{{json.Number("2")}}; !reflect.DeepEqual(a.byUUID.Rows, want) || a.byUUID.Columns[0].Type != "BIGINT" {
		t.Errorf("by uuid: %+v; want the rows %v", a.byUUID, want)
	}
	if a.forbidden == nil || !strings.Contains(a.forbidden.Error(), "403 forbidden") {
		t.Errorf("a dataset the job does not read: %v; want 403 forbidden", a.forbidden)
	}
	if a.rejected == nil || !strings.Contains(a.rejected.Error(), "sql_rejected") {
		t.Errorf("a DELETE: %v; want sql_rejected", a.rejected)
	}
}

// Query checks its arguments before it calls the server, and needs a claimed task.
func TestQueryRefusesBadArguments(t *testing.T) {
	var tk worker.Task
	for _, c := range []struct {
		sql   string
		limit int
		want  string
	}{{"", 0, "the SQL statement is empty"}, {"SELECT 1", -1, "limit -1"}, {"SELECT 1", 10001, "limit 10001"}, {"SELECT 1", 0, "not claimed"}} {
		_, err := tk.Query(context.Background(), c.sql, worker.QueryOptions{Limit: c.limit})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Query(%q, limit %d): %v; want %q", c.sql, c.limit, err, c.want)
		}
	}
}
