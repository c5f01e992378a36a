package bench

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// BenchmarkBenchHTTP is the hot path above the dispatcher's own benchmarks: a task's whole life
// over HTTP (submission, claim, completion, the job's completion) with the server in this process,
// so that `go test -bench BenchHTTP -cpuprofile` profiles server and workers together. One
// operation is one task of each phase; the phases' rates are reported as metrics.
func BenchmarkBenchHTTP(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		for _, via := range []string{ViaSDK, ViaStreamWorker} {
			b.Run(drv.Name+"/"+via, func(b *testing.B) {
				producer, internal, key := serveInProcess(b, drv.Open(b))
				b.ResetTimer()
				res, err := Run(context.Background(), Config{ProducerURL: producer, InternalURL: internal, APIKey: key,
					Tasks: b.N, DAG: Flat, JobSize: 1000, Workers: 64, Via: via, Batch: 8})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.WorkOnly.TasksPerSec, "work-only-tasks/s")
				b.ReportMetric(res.SubmitToDone.TasksPerSec, "submit-to-done-tasks/s")
			})
		}
	}
}

// serveInProcess serves the producer API and the internal listener on st from this process until
// the test ends, and returns their URLs and a producer API key.
func serveInProcess(tb testing.TB, st store.Store) (producerURL, internalURL, key string) {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := dispatch.New(st, dispatch.Config{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	s := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil),
		Capabilities: capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), Dispatcher: d}), Logger: log})
	producer := httptest.NewServer(s.ProducerHandler())
	tb.Cleanup(producer.Close)
	internal := httptest.NewServer(s.InternalHandler())
	tb.Cleanup(internal.Close)
	tb.Cleanup(s.Drain) // first: cleanups run last in, first out
	_, key, err = auth.CreateKey(context.Background(), st, "bench", auth.DefaultTenant, "", time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return producer.URL, internal.URL, key
}
