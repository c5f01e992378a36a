package dataplane_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// benchPipeline has one source whose output one reactive job reads: every event routes one task.
const benchPipeline = `
name: bench
jobs:
  - name: src
    activation: source
    runtime: ecs_platform
    operator: src
    outputs: 1
    source: {kind: manual}
  - name: consume
    activation: reactive
    runtime: ecs_platform
    operator: consume
    outputs: 0
    inputs:
      - from: {job: src, output: 0}
`

// benchRouting deploys benchPipeline on a real-clock dispatcher and returns it with an emitter
// (a running task) and the source output's dataset.
func benchRouting(b *testing.B, st store.Store) (*dispatch.Dispatcher, *dataplane.Plane, dispatch.Fence, *store.Dataset) {
	b.Helper()
	return benchDeploy(b, st, benchPipeline, "bench")
}

// benchDeploy deploys doc, the pipeline name whose first job is a source, for tenant "bench" on a
// real-clock dispatcher, and returns it with an emitter (a running task) and the dataset of the
// source's output.
func benchDeploy(b *testing.B, st store.Store, doc, name string) (*dispatch.Dispatcher, *dataplane.Plane, dispatch.Fence, *store.Dataset) {
	b.Helper()
	ctx := context.Background()
	d, err := dispatch.New(st, dispatch.Config{})
	if err != nil {
		b.Fatal(err)
	}
	dp := dataplane.New(d, dataplane.Config{})
	if _, err := dp.Deploy(ctx, "bench", []byte(doc), "application/yaml"); err != nil {
		b.Fatal(err)
	}
	v, err := dp.GetPipeline(ctx, "bench", name)
	if err != nil {
		b.Fatal(err)
	}
	ds, err := st.DatasetGetMany(ctx, []string{v.Jobs()[0].Outputs[0].DatasetUUID})
	if err != nil || len(ds) != 1 {
		b.Fatal(ds, err)
	}
	res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "bench", Tasks: []lifecycle.TaskSpec{{Key: "emit", Name: "emit", Queue: "emit"}}})
	if err != nil {
		b.Fatal(err)
	}
	tasks, _ := st.TaskListByJob(ctx, res.Job.ID)
	c, err := d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: tasks[0].ID, WorkerID: "emitter"})
	if err != nil {
		b.Fatal(err)
	}
	return d, dp, dispatch.Fence{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken}, ds[0]
}

// BenchmarkRouteEvents times the router turning b.N stored events into b.N tasks (each event one
// task of the consuming job): events/s is the routing throughput.
func BenchmarkRouteEvents(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		b.Run(drv.Name, func(b *testing.B) {
			ctx := context.Background()
			_, dp, fence, ds := benchRouting(b, drv.Open(b))
			for start := 0; start < b.N; start += 1000 {
				events := make([]report.Event, 0, 1000)
				for i := start; i < min(start+1000, b.N); i++ {
					events = append(events, cursorEvent(ds.UUID, ds.CurrentVersion, int64(i)))
				}
				if _, err := dp.Intake().Record(ctx, fence, events); err != nil {
					b.Fatal(err)
				}
			}
			router := dp.NewRouter(dataplane.RouteConfig{})
			b.ResetTimer()
			// Two passes at a time, as Router.Start runs them while a backlog lasts
			// (RouteConfig.Passes).
			var routedN atomic.Int64
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					for {
						n, tasks, err := router.RunOnce(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						routedN.Add(int64(tasks))
						if n == 0 {
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if routed := int(routedN.Load()); routed != b.N {
				b.Fatalf("routed %d tasks for %d events", routedN.Load(), b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkEventToClaimable times, for each of b.N events reported one at a time with the router
// running as in the server, how long after RecordEvents returns a worker long-polling the
// consuming job's queue claims the routed task; it reports the p50 and p99.
func BenchmarkEventToClaimable(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		b.Run(drv.Name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d, dp, fence, ds := benchRouting(b, drv.Open(b))
			router := dp.NewRouter(dataplane.RouteConfig{})
			router.Start(ctx)
			defer router.Stop()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if _, err := dp.Intake().Record(ctx, fence, []report.Event{cursorEvent(ds.UUID, ds.CurrentVersion, int64(i))}); err != nil {
					b.Fatal(err)
				}
				claims, err := d.ClaimWait(ctx, dispatch.ClaimNextParams{Queues: []string{"consume"}, WorkerID: "w"}, 10*time.Second)
				if err != nil || len(claims) != 1 {
					b.Fatalf("claim %d: %v %v", i, claims, err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
