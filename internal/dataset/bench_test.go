package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/pipeline"
)

// benchSchema is a buffered dataset as a pipeline would declare one: a dedupe key, a filter field
// with its index, and a few columns of payload.
func benchSchema() *pipeline.Schema {
	return &pipeline.Schema{
		Columns: []pipeline.Column{
			{Name: "dedupe_key", Type: pipeline.TypeString, Required: true},
			{Name: "severity", Type: pipeline.TypeString, Required: true},
			{Name: "host", Type: pipeline.TypeString},
			{Name: "count", Type: pipeline.TypeInteger},
			{Name: "seen_at", Type: pipeline.TypeTimestamp},
			{Name: "detail", Type: pipeline.TypeJSON},
		},
		Unique:  []string{"dedupe_key"},
		Indexes: [][]string{{"severity"}},
	}
}

const benchBatchRows = 1000

// benchBatch is a batch of benchBatchRows rows, whose keys renew rekeys for each load.
type benchBatch struct {
	rows []Row
	key  []byte
}

func newBenchBatch() *benchBatch {
	severities := []string{"low", "medium", "high", "critical"}
	detail := json.RawMessage(`{"rule":"cpu.saturation","threshold":0.95,"labels":{"team":"infra","zone":"eu-west-1a"}}`)
	at := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	bb := &benchBatch{rows: make([]Row, benchBatchRows)}
	for i := range bb.rows {
		bb.rows[i] = Row{
			"severity": severities[i%len(severities)],
			"host":     fmt.Sprintf("host-%03d.example.internal", i%200),
			"count":    int64(i),
			"seen_at":  at.Add(time.Duration(i) * time.Millisecond),
			"detail":   detail,
		}
	}
	return bb
}

// rekey gives every row a key no load has used: batch n's row i is "n-i" after prefix.
func (bb *benchBatch) rekey(prefix string, n int64) {
	for i, r := range bb.rows {
		bb.key = append(bb.key[:0], prefix...)
		bb.key = strconv.AppendInt(bb.key, n, 10)
		bb.key = append(bb.key, '-')
		bb.key = strconv.AppendInt(bb.key, int64(i), 10)
		r["dedupe_key"] = string(bb.key)
	}
}

// BenchmarkLoad loads batches of 1,000 new rows, one after another and, on PostgreSQL, from
// several goroutines at once into one dataset.
func BenchmarkLoad(b *testing.B) {
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			db, _ := d.open(b)
			id := benchDataset(b, db)
			bb := newBenchBatch()
			b.ResetTimer()
			for n := range b.N {
				bb.rekey("", int64(n))
				benchLoad(b, db, id, fmt.Sprint("b", n), bb.rows)
			}
			b.ReportMetric(float64(b.N*benchBatchRows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
	b.Run("postgres-parallel", func(b *testing.B) {
		db, _ := openPostgresTest(b)
		id := benchDataset(b, db)
		var next, loader atomic.Int64
		b.SetParallelism(2) // two loaders per CPU, as many as the pool's default connections on two CPUs
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			bb := newBenchBatch()
			prefix := fmt.Sprint("p", loader.Add(1), "-")
			for pb.Next() {
				n := next.Add(1)
				bb.rekey(prefix, n)
				benchLoad(b, db, id, fmt.Sprint("b", n), bb.rows)
			}
		})
		b.ReportMetric(float64(b.N*benchBatchRows)/b.Elapsed().Seconds(), "rows/s")
	})
}

func benchDataset(b *testing.B, db *DB) string {
	id := uuid.NewString()
	if err := db.Ensure(context.Background(), id, benchSchema()); err != nil {
		b.Fatal(err)
	}
	return id
}

func benchLoad(b *testing.B, db *DB, id, batch string, rows []Row) {
	res, err := db.Load(context.Background(), Batch{ID: batch, Tenant: "acme", DatasetUUID: id, Schema: benchSchema(),
		Rows: rows, FacetFields: []string{"severity"}})
	if err != nil {
		b.Error(err)
		return
	}
	if res.Inserted != len(rows) {
		b.Errorf("batch %s inserted %d rows of %d", batch, res.Inserted, len(rows))
	}
}
