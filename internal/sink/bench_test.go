package sink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/query/engine"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// BenchmarkSink measures the sink end to end: b.N batches of 1,000 rows each, published and
// waiting, then a running sink (Workers loads at once) claims each, reads its artifact, checks
// every row, loads it into the dataset's table and commits it (which emits its dataset event).
// rows/s counts from the sink's start to the last commit.
//
//	go test ./internal/sink -run '^$' -bench Sink -benchtime 200x
func BenchmarkSink(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		for _, workers := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/workers=%d", drv.Name, workers), func(b *testing.B) {
				f := newFixture(b, drv, "file", "local")
				w := f.writer("scan")
				var rows []string
				for n := range b.N {
					rows = rows[:0]
					for i := range 1000 {
						rows = append(rows, fmt.Sprintf(`{"dedupe_key":"b%d-r%d","severity":"%s","block":%d,"seen_at":"2026-11-24T10:00:00Z"}`,
							n, i, []string{"high", "low", "medium"}[i%3], n*1000+i))
					}
					f.publish(w, fmt.Sprintf("b%06d.jsonl", n), rows...)
				}
				sk, err := sink.New(sink.Config{Queue: f.queue, Blob: f.blob, Data: f.data, Logger: quiet, Workers: workers})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				b.ResetTimer()
				start := time.Now()
				go func() { defer close(done); sk.Run(ctx) }()
				for committed(b, f, w) < b.N {
					time.Sleep(5 * time.Millisecond)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				cancel()
				<-done
				b.ReportMetric(float64(b.N*1000)/elapsed.Seconds(), "rows/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func committed(b *testing.B, f *fixture, w *dispatch.Claim) int {
	recs, err := f.st.BufferPublishListByTask(f.ctx, w.Task.ID)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.State == store.BufferCommitted {
			n++
		} else if r.State == store.BufferDead || strings.TrimSpace(r.LastError) != "" {
			b.Fatalf("batch %d: %s %s", r.ID, r.State, r.LastError)
		}
	}
	return n
}

// BenchmarkQueryBuffered measures a user's query of a buffered dataset end to end through the
// data plane: the rows of 1,000,000 alerts read from the data database in one statement, handed
// to a fresh DuckDB through its appender, and grouped there.
//
//	go test ./internal/sink -run '^$' -bench QueryBuffered -benchtime 3x
func BenchmarkQueryBuffered(b *testing.B) {
	if !engine.Available {
		b.Skip("the query engine needs cgo")
	}
	const rows = 1_000_000
	eng, err := engine.New(engine.Config{SpillDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	for _, drv := range storetest.Drivers() {
		b.Run(drv.Name, func(b *testing.B) {
			f := newFixtureWith(b, drv, "file", "local", dataplane.Config{Query: eng})
			s := schemaOf(b, f.dataset)
			for n := 0; n < rows; n += 50_000 {
				batch := dataset.Batch{ID: fmt.Sprintf("bench-%d", n), Tenant: tenant, DatasetUUID: f.dataset.UUID, Schema: s}
				for i := n; i < n+50_000; i++ {
					batch.Rows = append(batch.Rows, dataset.Row{"dedupe_key": fmt.Sprintf("k%d", i),
						"severity": []string{"high", "low", "medium"}[i%3], "block": int64(i), "seen_at": time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)})
				}
				if _, err := f.data.Load(f.ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				res, err := f.dp.Reads().Query(f.ctx, tenant, "bench", reads.QueryParams{SQL: "SELECT severity, count(*) AS n, avg(block) AS mean FROM alert_events GROUP BY severity"})
				if err != nil {
					b.Fatal(err)
				}
				if res.RowCount != 3 {
					b.Fatalf("%d groups", res.RowCount)
				}
			}
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
