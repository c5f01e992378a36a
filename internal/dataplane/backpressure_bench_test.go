package dataplane_test

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/wire"
)

// BenchmarkBackpressureStorm sends 100,000 events into a job capped at max_queue_depth 1,000
// and drains it, a worker claiming and completing up to 1,000 tasks at a time, with each
// backpressure_mode: it reports the events held after the flood, the tasks that ran, the peak
// heap (runtime.MemStats.HeapAlloc, sampled after every pass), the longest routing pass that
// released held routings once the backlog had drained, and the whole drain's time. Every event's
// cursor must be read by exactly one task. Run it once:
// go test -run '^$' -bench BackpressureStorm -benchtime 1x.
func BenchmarkBackpressureStorm(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		for _, mode := range []string{"pause", "coalesce"} {
			b.Run(drv.Name+"/"+mode, func(b *testing.B) { benchmarkStorm(b, drv, mode) })
		}
	}
}

func benchmarkStorm(b *testing.B, drv storetest.Driver, mode string) {
	const events, depth = 100_000, 1_000
	ctx := context.Background()
	d, dp, fence, feed := benchDeploy(b, drv.Open(b), heldDocMode(depth, "", mode), "capped")
	var peak uint64
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapAlloc)
	}
	state := func() *dataplane.BackpressureView {
		v, err := dp.GetPipeline(ctx, "bench", "capped")
		if err != nil {
			b.Fatal(err)
		}
		return v.Jobs()[1].Backpressure
	}
	router := dp.NewRouter(dataplane.RouteConfig{})
	b.ResetTimer()
	for start := 0; start < events; start += 1000 {
		evs := make([]report.Event, 0, 1000)
		for i := start; i < start+1000; i++ {
			evs = append(evs, cursorEvent(feed.UUID, feed.CurrentVersion, int64(i)))
		}
		if _, err := dp.Intake().Record(ctx, fence, evs); err != nil {
			b.Fatal(err)
		}
	}
	for {
		n, _, err := router.RunOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		sample()
		if n == 0 {
			break
		}
	}
	s := state()
	if s.Depth != depth || s.HeldEvents != events-depth || (mode == "coalesce" && s.Held != 1) {
		b.Fatalf("after the flood: %+v", s)
	}
	held := s.HeldEvents
	drainStart := time.Now()
	var slowest time.Duration
	ran, read := 0, 0 // tasks, and the cursors they read
	seen := make([]bool, events)
	for read < events {
		claims, err := d.ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{"sink"}, WorkerID: "w", Limit: depth})
		if err != nil {
			b.Fatal(err)
		}
		ps := make([]dispatch.CompleteParams, len(claims))
		for i, c := range claims {
			var r wire.Route
			if err := json.Unmarshal(c.Task.Route, &r); err != nil {
				b.Fatal(err)
			}
			first, last := *r.Inputs[0].Cursor, *r.Inputs[0].Cursor
			if r.Inputs[0].CursorEnd != nil {
				last = *r.Inputs[0].CursorEnd
			}
			for cur := first; cur <= last; cur++ {
				if seen[cur] {
					b.Fatalf("cursor %d read twice", cur)
				}
				seen[cur] = true
				read++
			}
			ps[i] = dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
				Outcome: store.OutcomeSucceeded}
		}
		if _, errs := d.CompleteMany(ctx, ps); errs != nil {
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		ran += len(claims)
		t0 := time.Now()
		if _, _, err := router.RunOnce(ctx); err != nil {
			b.Fatal(err)
		}
		slowest = max(slowest, time.Since(t0))
		sample()
		if len(claims) == 0 && state().Held == 0 {
			break
		}
	}
	drain := time.Since(drainStart)
	b.StopTimer()
	if read != events {
		b.Fatalf("the tasks read %d cursors, want %d", read, events)
	}
	b.ReportMetric(float64(held), "held-events")
	b.ReportMetric(float64(ran), "tasks")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(slowest.Seconds()*1000, "max-release-pass-ms")
	b.ReportMetric(drain.Seconds(), "drain-s")
}
