package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// benchJobSize is the most tasks the benchmarks put in one job.
const benchJobSize = 10000

// benchCreateFlat submits n independent tasks in queue "bench", in jobs of at most benchJobSize.
func benchCreateFlat(b *testing.B, d *dispatch.Dispatcher, n int) {
	b.Helper()
	ctx := context.Background()
	for job := 0; n > 0; job++ {
		size := min(n, benchJobSize)
		specs := make([]lifecycle.TaskSpec, size)
		for i := range specs {
			specs[i] = lifecycle.TaskSpec{Key: fmt.Sprintf("t%d", i), Name: "bench", Queue: "bench"}
		}
		if _, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "bench", Name: fmt.Sprintf("bench-%d", job), Tasks: specs}); err != nil {
			b.Fatalf("create job of %d tasks: %v", size, err)
		}
		n -= size
	}
}

// benchClaimComplete times ClaimNext (limit tasks at a time) and Complete of b.N ready tasks by
// eight concurrent workers.
func benchClaimComplete(b *testing.B, limit int) { benchClaimReport(b, limit, false) }

// benchClaimReport is benchClaimComplete; with many, each claimed batch is reported with one
// CompleteMany, as the SDK's report-batch does.
func benchClaimReport(b *testing.B, limit int, many bool) {
	const workers = 8
	for _, drv := range storetest.Drivers() {
		b.Run(drv.Name, func(b *testing.B) {
			d := stressDispatcher(b, drv.Open(b))
			benchCreateFlat(b, d, b.N)
			ctx := context.Background()
			output := json.RawMessage(`{"ok":true}`)
			var claimed, completed atomic.Int64
			var failed atomic.Bool
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					worker := fmt.Sprintf("w%d", w)
					for claimed.Load() < int64(b.N) && !failed.Load() {
						cls, err := d.ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{"bench"}, WorkerID: worker, Limit: limit})
						if err != nil {
							b.Errorf("claim next: %v", err)
							failed.Store(true)
							return
						}
						if len(cls) == 0 {
							// Every ready task is claimed, or locked by another worker's claim.
							runtime.Gosched()
							continue
						}
						claimed.Add(int64(len(cls)))
						if many {
							ps := make([]dispatch.CompleteParams, len(cls))
							for i, cl := range cls {
								ps[i] = dispatch.CompleteParams{TaskID: cl.Task.ID, Attempt: cl.Task.Attempt,
									LeaseToken: cl.Task.LeaseToken, Outcome: store.OutcomeSucceeded, Output: output}
							}
							_, errs := d.CompleteMany(ctx, ps)
							for _, err := range errs {
								if err != nil {
									b.Errorf("complete many: %v", err)
									failed.Store(true)
									return
								}
							}
							completed.Add(int64(len(cls)))
							continue
						}
						for _, cl := range cls {
							_, err := d.Complete(ctx, dispatch.CompleteParams{TaskID: cl.Task.ID, Attempt: cl.Task.Attempt,
								LeaseToken: cl.Task.LeaseToken, Outcome: store.OutcomeSucceeded, Output: output})
							if err != nil {
								b.Errorf("complete: %v", err)
								failed.Store(true)
								return
							}
							completed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if n := completed.Load(); n != int64(b.N) && !b.Failed() {
				b.Fatalf("completed %d tasks, want %d", n, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

func BenchmarkClaimComplete(b *testing.B) { benchClaimComplete(b, 1) }

func BenchmarkClaimBatchComplete(b *testing.B) { benchClaimComplete(b, 32) }

func BenchmarkClaimBatchCompleteMany(b *testing.B) { benchClaimReport(b, 32, true) }

// benchDiamonds is a job of n tasks: diamonds of five (a root, three middles, a join), plus
// independent tasks for the remainder.
func benchDiamonds(n int) []lifecycle.TaskSpec {
	specs := make([]lifecycle.TaskSpec, 0, n)
	add := func(key string, deps ...string) {
		specs = append(specs, lifecycle.TaskSpec{Key: key, Name: "bench", Queue: "bench", DependsOn: deps})
	}
	for k := 0; len(specs)+5 <= n; k++ {
		root := fmt.Sprintf("d%d-root", k)
		add(root)
		mids := []string{fmt.Sprintf("d%d-a", k), fmt.Sprintf("d%d-b", k), fmt.Sprintf("d%d-c", k)}
		for _, m := range mids {
			add(m, root)
		}
		add(fmt.Sprintf("d%d-join", k), mids...)
	}
	for i := 0; len(specs) < n; i++ {
		add(fmt.Sprintf("x%d", i))
	}
	return specs
}

func BenchmarkCreateJob(b *testing.B) {
	for _, drv := range storetest.Drivers() {
		b.Run(drv.Name, func(b *testing.B) {
			for _, size := range []int{50, 10000} {
				b.Run(fmt.Sprintf("tasks=%d", size), func(b *testing.B) {
					d := stressDispatcher(b, drv.Open(b))
					specs := benchDiamonds(size)
					ctx := context.Background()
					b.ResetTimer()
					for range b.N {
						if _, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "bench", Name: "bench", Tasks: specs}); err != nil {
							b.Fatalf("create job of %d tasks: %v", size, err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "tasks/s")
				})
			}
		})
	}
}
