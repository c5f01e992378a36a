//go:build unix

package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// The shape of BenchmarkRoutedVsSubmitted: each side makes routedTasks tasks, in requests of
// routedBatch (events per POST /internal/events, tasks per POST /jobs), worked by routedClaimers
// workers that claim up to routedClaimMax tasks at a time.
const (
	routedTasks    = 5000
	routedBatch    = 250
	routedClaimers = 8
	routedClaimMax = 64
	routedTenant   = "bench"
)

// routedPipeline has one manual source whose output one reactive job reads: each event of the
// source's output routes one task of consume.
const routedPipeline = `
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

// BenchmarkRoutedVsSubmitted compares routed work with submitted work through the HTTP handlers
// of a whole server (server.New, as baton dev and baton server build it: router, outbox relay,
// group commit, wake-ups through the store), each side on a fresh database:
//
//   - routed: the source's task, claimed as the emitter, posts routedTasks dataset events (new
//     cursors of its output) to /internal/events in requests of routedBatch, while workers claim
//     the routed tasks of consume with claim-batch and complete them with report-batch;
//   - submitted: routedTasks flat tasks are submitted with POST /jobs in jobs of routedBatch
//     tasks, claimed and completed the same way.
//
// Each side is timed from its first request to the last completion acknowledged (the op's time
// is both sides'); events/s and tasks/s are over every iteration, and ratio is events/s over
// tasks/s. The iterations alternate which side runs first. Every task must be claimed and
// completed exactly once, or the benchmark fails.
//
//	go test ./internal/server -run '^$' -bench RoutedVsSubmitted -benchtime 1x -count 3
func BenchmarkRoutedVsSubmitted(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		b.Run(drv.Name, func(b *testing.B) {
			var routed, submitted, routedCPU, submittedCPU time.Duration
			b.StopTimer()
			for i := range b.N {
				runRouted := func() {
					took, cpu := benchRouted(b, drv.Open(b))
					routed, routedCPU = routed+took, routedCPU+cpu
				}
				runSubmitted := func() {
					took, cpu := benchSubmitted(b, drv.Open(b))
					submitted, submittedCPU = submitted+took, submittedCPU+cpu
				}
				if i%2 == 0 {
					runRouted()
					runSubmitted()
				} else {
					runSubmitted()
					runRouted()
				}
			}
			events := float64(b.N*routedTasks) / routed.Seconds()
			tasks := float64(b.N*routedTasks) / submitted.Seconds()
			b.ReportMetric(events, "events/s")
			b.ReportMetric(tasks, "tasks/s")
			b.ReportMetric(events/tasks, "ratio")
			b.ReportMetric(float64(routedCPU.Microseconds())/float64(b.N*routedTasks), "routed-cpu-µs/event")
			b.ReportMetric(float64(submittedCPU.Microseconds())/float64(b.N*routedTasks), "submitted-cpu-µs/task")
		})
	}
}

// benchServer is a whole server over a store, served over loopback HTTP.
type benchServer struct {
	b                  *testing.B
	st                 store.Store
	srv                *server.Server
	producer, internal string
	key                string
	hc                 *http.Client
}

// startBenchServer builds and starts a server on st for the rest of the benchmark, with jobs of
// up to routedBatch tasks, and a producer API key of routedTenant.
func startBenchServer(b *testing.B, st store.Store) *benchServer {
	b.Helper()
	srv, err := server.New(server.Config{Store: st, Logger: quiet, Dispatch: dispatch.Config{MaxTasksPerJob: routedBatch}})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	producer := httptest.NewServer(srv.ProducerHandler())
	internal := httptest.NewServer(srv.InternalHandler())
	b.Cleanup(srv.Stop)
	b.Cleanup(internal.Close)
	b.Cleanup(producer.Close)
	b.Cleanup(srv.Drain) // first: cleanups run last in, first out
	_, key, err := auth.CreateKey(context.Background(), st, "bench", routedTenant, "", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * routedClaimers}}
	b.Cleanup(hc.CloseIdleConnections)
	return &benchServer{b: b, st: st, srv: srv, producer: producer.URL, internal: internal.URL, key: key, hc: hc}
}

// call posts body (JSON, unless it is a string, sent as YAML) to url and decodes the answer into
// out; an answer other than want is an error.
func (s *benchServer) call(ctx context.Context, url string, body any, want int, out any) error {
	var raw []byte
	ctype := "application/json"
	if doc, ok := body.(string); ok {
		raw, ctype = []byte(doc), "application/yaml"
	} else {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("x-api-key", s.key)
	res, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	ans, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("POST %s: %d %s, want %d", url, res.StatusCode, ans, want)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(ans, out); err != nil {
		return fmt.Errorf("POST %s: %w: %s", url, err, ans)
	}
	return nil
}

// benchRouted deploys routedPipeline, claims its source's task as the emitter, and returns how
// long the emitter's routedTasks events took to be routed, claimed and completed, and the CPU
// time this process spent meanwhile.
func benchRouted(b *testing.B, st store.Store) (took, cpu time.Duration) {
	b.Helper()
	s := startBenchServer(b, st)
	ctx := context.Background()
	if err := s.call(ctx, s.producer+"/pipelines", routedPipeline, http.StatusCreated, nil); err != nil {
		b.Fatal(err)
	}
	var run struct {
		TaskID string `json:"task_id"`
	}
	if err := s.call(ctx, s.producer+"/pipelines/bench/jobs/src/run", map[string]any{}, http.StatusCreated, &run); err != nil {
		b.Fatal(err)
	}
	var emitter struct {
		Status     string `json:"status"`
		Attempt    int    `json:"attempt"`
		LeaseToken string `json:"lease_token"`
	}
	if err := s.call(ctx, s.internal+"/internal/task-claim", map[string]any{"task_id": run.TaskID, "worker_id": "emitter"}, http.StatusOK, &emitter); err != nil {
		b.Fatal(err)
	}
	if emitter.Status != "Claimed" {
		b.Fatalf("the source's task: %+v, want it claimed", emitter)
	}
	v, err := s.srv.DataPlane.GetPipeline(ctx, routedTenant, "bench")
	if err != nil {
		b.Fatal(err)
	}
	ds, err := st.DatasetGetMany(ctx, []string{v.Jobs()[0].Outputs[0].DatasetUUID})
	if err != nil || len(ds) != 1 {
		b.Fatalf("the source's output: %v %v", ds, err)
	}
	took, cpu = s.work("consume", func(ctx context.Context) error {
		for start := 0; start < routedTasks; start += routedBatch {
			events := make([]map[string]any, 0, routedBatch)
			for i := start; i < start+routedBatch; i++ {
				events = append(events, map[string]any{"dataset_uuid": ds[0].UUID, "dataset_version": ds[0].CurrentVersion, "cursor": i})
			}
			var ans struct {
				Stored int `json:"stored"`
			}
			body := map[string]any{"task_id": run.TaskID, "attempt": emitter.Attempt, "lease_token": emitter.LeaseToken, "events": events}
			if err := s.call(ctx, s.internal+"/internal/events", body, http.StatusOK, &ans); err != nil {
				return err
			}
			if ans.Stored != routedBatch {
				return fmt.Errorf("events %d to %d: %d stored, want %d", start, start+routedBatch, ans.Stored, routedBatch)
			}
		}
		return nil
	})
	counts, err := st.PipelineTaskCounts(ctx, routedTenant, "bench")
	if err != nil {
		b.Fatal(err)
	}
	completed := 0
	for _, c := range counts {
		if c.Job != "consume" {
			continue
		}
		if c.Status != lifecycle.Completed {
			b.Fatalf("%d routed tasks are %s, want every one completed", c.Count, c.Status)
		}
		completed += c.Count
	}
	if completed != routedTasks {
		b.Fatalf("%d routed tasks completed, want %d", completed, routedTasks)
	}
	return took, cpu
}

// benchSubmitted returns how long routedTasks tasks, submitted in jobs of routedBatch, took to be
// created, claimed and completed, and the CPU time this process spent meanwhile.
func benchSubmitted(b *testing.B, st store.Store) (took, cpu time.Duration) {
	b.Helper()
	s := startBenchServer(b, st)
	took, cpu = s.work("work", func(ctx context.Context) error {
		for start := 0; start < routedTasks; start += routedBatch {
			tasks := make([]map[string]any, 0, routedBatch)
			for i := start; i < start+routedBatch; i++ {
				tasks = append(tasks, map[string]any{"taskId": fmt.Sprintf("t%d", i), "name": "work", "dependsOn": []string{}, "input": map[string]any{}})
			}
			if err := s.call(ctx, s.producer+"/jobs", map[string]any{"tasks": tasks}, http.StatusCreated, nil); err != nil {
				return err
			}
		}
		return nil
	})
	counts, err := st.JobCounts(context.Background(), routedTenant)
	if err != nil {
		b.Fatal(err)
	}
	if want := routedTasks / routedBatch; counts[lifecycle.JobCompleted] != want || len(counts) != 1 {
		b.Fatalf("the submitted jobs: %v, want %d completed and no other", counts, want)
	}
	return took, cpu
}

// claimed is a claim-batch answer's claim, as its report names it.
type claimed struct {
	JobID      string `json:"job_id"`
	AttemptID  int    `json:"attempt_id"`
	LeaseToken string `json:"lease_token"`
}

// work runs produce (which makes routedTasks tasks on queue) while routedClaimers workers claim
// them with claim-batch and complete them with report-batch, and returns the span from produce's
// start to the last completion acknowledged, with the benchmark's timer running over it, and the
// CPU time of this process (server, workers and, on SQLite, the database) over the span. A task
// claimed twice, a report refused, or more than routedTasks tasks fail the benchmark.
func (s *benchServer) work(queue string, produce func(ctx context.Context) error) (time.Duration, time.Duration) {
	b := s.b
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	claimCtx, stopClaims := context.WithCancel(ctx)
	defer stopClaims()
	var (
		mu       sync.Mutex
		seen     = make(map[string]bool, routedTasks)
		done     atomic.Int64
		end      time.Time
		errs     = make(chan error, routedClaimers+1)
		claimers sync.WaitGroup
	)
	fail := func(err error) {
		errs <- err
		stopClaims()
	}
	b.StartTimer()
	start, startCPU := time.Now(), processCPU(b)
	for w := range routedClaimers {
		claimers.Go(func() {
			worker := fmt.Sprintf("w-%d", w)
			for claimCtx.Err() == nil {
				var ans struct {
					Claims []claimed `json:"claims"`
				}
				err := s.call(claimCtx, s.internal+"/internal/worker/claim-batch",
					map[string]any{"worker_id": worker, "streams": []string{queue}, "max_wait_ms": 1000, "max_tasks": routedClaimMax}, http.StatusOK, &ans)
				if claimCtx.Err() != nil {
					return
				}
				if err != nil {
					fail(err)
					return
				}
				if len(ans.Claims) == 0 {
					continue
				}
				reports := make([]map[string]any, len(ans.Claims))
				mu.Lock()
				for i, c := range ans.Claims {
					if seen[c.JobID] {
						mu.Unlock()
						fail(fmt.Errorf("task %s claimed twice", c.JobID))
						return
					}
					seen[c.JobID] = true
					reports[i] = map[string]any{"type": "complete", "job_id": c.JobID, "attempt_id": c.AttemptID, "lease_token": c.LeaseToken, "result": map[string]any{}}
				}
				mu.Unlock()
				var res struct {
					Results []struct {
						Status int  `json:"status"`
						Ack    bool `json:"ack"`
					} `json:"results"`
				}
				if err := s.call(ctx, s.internal+"/internal/worker/report-batch", map[string]any{"worker_id": worker, "reports": reports}, http.StatusOK, &res); err != nil {
					fail(err)
					return
				}
				for i, r := range res.Results {
					if r.Status != http.StatusOK || !r.Ack {
						fail(fmt.Errorf("report of task %s: %+v", ans.Claims[i].JobID, r))
						return
					}
				}
				if len(res.Results) != len(reports) {
					fail(fmt.Errorf("%d results for %d reports", len(res.Results), len(reports)))
					return
				}
				switch n := done.Add(int64(len(reports))); {
				case n == routedTasks:
					mu.Lock()
					end = time.Now()
					mu.Unlock()
					stopClaims()
				case n > routedTasks:
					fail(fmt.Errorf("%d tasks completed, want %d", n, routedTasks))
					return
				}
			}
		})
	}
	if err := produce(ctx); err != nil {
		fail(err)
	}
	claimers.Wait()
	cpu := processCPU(b) - startCPU
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if ctx.Err() != nil {
		b.Fatalf("%d of %d tasks completed before the benchmark gave up", done.Load(), routedTasks)
	}
	if len(seen) != routedTasks {
		b.Fatalf("%d tasks claimed, want %d", len(seen), routedTasks)
	}
	return end.Sub(start), cpu
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
