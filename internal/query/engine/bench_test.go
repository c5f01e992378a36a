//go:build cgo

package engine

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/internal/query"
)

// BenchmarkQueryParquet measures a group-by over 10,000,000 rows of a Parquet dataset version
// read in place (as from a file:// object storage): four files of 2,500,000 rows.
//
//	go test ./internal/query/engine -run '^$' -bench QueryParquet -benchtime 5x
func BenchmarkQueryParquet(b *testing.B) {
	dir := b.TempDir()
	rel := query.Relation{Name: "blocks"}
	for i := range 4 {
		p := filepath.Join(dir, "part-"+string(rune('0'+i))+".parquet")
		writeParquet(b, p, "SELECT range AS number, range % 1000 AS miner, (range * 7) % 100000 AS gas, 'h' || range AS hash "+
			"FROM range("+itoa(i*2_500_000)+", "+itoa((i+1)*2_500_000)+")")
		rel.Files = append(rel.Files, query.File{Key: p, Path: p})
	}
	// The files lie beneath the engine's read roots, as a file:// object storage's do: a spare
	// worker, started before the query, reads them.
	e := newEngine(b, Config{ReadRoots: []string{dir}})
	st, err := e.Check(b.Context(), "SELECT miner % 10 AS m, count(*) AS n, sum(gas) AS gas FROM blocks GROUP BY 1 ORDER BY 1")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res, err := e.Run(b.Context(), st, []query.Relation{rel}, query.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if res.RowCount != 10 {
			b.Fatalf("%d groups", res.RowCount)
		}
	}
	b.ReportMetric(10_000_000*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func itoa(n int) string {
	return fmt.Sprint(n)
}
