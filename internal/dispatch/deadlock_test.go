package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// logRecorder keeps the messages a dispatcher logs at warning level and above.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *logRecorder) WithGroup(string) slog.Handler                 { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logRecorder) matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if strings.Contains(strings.ToLower(m), sub) {
			out = append(out, m)
		}
	}
	return out
}

// overlapDAG is a job whose tasks finish in overlapping waves: a root, a fan-out of 12 that
// joins, and three chains of 5 hanging off the join, 31 tasks in all.
func overlapDAG() []lifecycle.TaskSpec {
	specs := []lifecycle.TaskSpec{spec("root")}
	var mids []string
	for i := range 12 {
		k := fmt.Sprintf("m%d", i)
		specs = append(specs, spec(k, "root"))
		mids = append(mids, k)
	}
	specs = append(specs, spec("join", mids...))
	for c := range 3 {
		prev := "join"
		for i := range 5 {
			k := fmt.Sprintf("c%d-%d", c, i)
			specs = append(specs, spec(k, prev))
			prev = k
		}
	}
	for i := range specs {
		specs[i].Queue = "q"
	}
	return specs
}

// expectedRefusal is an answer a worker or producer may get in this run without anything being
// wrong: the client learns of a race it lost. Any other error would be a 5xx.
func expectedRefusal(err error) bool {
	var terminal *dispatch.TerminalError
	return errors.Is(err, dispatch.ErrJobFinished) || errors.Is(err, dispatch.ErrTaskExpired) ||
		errors.As(err, &terminal)
}

// TestGroupCommitsDoNotDeadlock drives three replicas' group committers (four transactions in
// flight each) with concurrent job creations (some repeating an idempotency key), claims,
// heartbeats, plain and failed completions, batch completions and job cancels, all on the same
// few jobs at once, for a bounded time. PostgreSQL must count no deadlock in the test's own
// database, the dispatchers must log none, and no call may fail with anything but the refusals
// a client expects.
func TestGroupCommitsDoNotDeadlock(t *testing.T) {
	db := storetest.NewPostgresDatabase(t)
	load := 4 * time.Second
	if os.Getenv("BATON_LONG") != "" {
		load = 30 * time.Second
	}
	logs := &logRecorder{}
	var (
		stores []*storeCloser
		ds     []*dispatch.Dispatcher
	)
	for range 3 {
		st := db.Open(t)
		stores = append(stores, &storeCloser{Store: st})
		d, err := dispatch.New(st, dispatch.Config{
			Logger:      slog.New(logs),
			Defaults:    dispatch.Defaults{BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 4},
			GroupCommit: dispatch.GroupCommit{Committers: 4, MaxBatch: 32},
		})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	ctx := context.Background()
	deadline := time.Now().Add(load)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		jobIDs   []string
		failures atomic.Int64
		calls    atomic.Int64
	)
	unexpected := func(what string, err error) {
		calls.Add(1)
		if err == nil || expectedRefusal(err) {
			return
		}
		if failures.Add(1) <= 10 {
			t.Errorf("%s: %v", what, err)
		}
	}
	pick := func(rng *rand.Rand) *dispatch.Dispatcher { return ds[rng.IntN(len(ds))] }

	// Producers: a job every few milliseconds, each idempotency key sent twice at once.
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for n := 0; time.Now().Before(deadline); n++ {
				key := fmt.Sprintf("key-%d-%d", w, n)
				var (
					pair sync.WaitGroup
					got  [2]string
				)
				for i := range 2 {
					d := pick(rng)
					pair.Go(func() {
						res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: tenant, Name: "overlap",
							IdempotencyKey: key, RequestHash: "h", Tasks: overlapDAG()})
						unexpected("create job", err)
						if err == nil {
							got[i] = res.Job.ID
						}
					})
				}
				pair.Wait()
				if got[0] != "" && got[1] != "" && got[0] != got[1] {
					t.Errorf("idempotency key %s created two jobs: %s and %s", key, got[0], got[1])
				}
				mu.Lock()
				jobIDs = append(jobIDs, got[0])
				mu.Unlock()
				time.Sleep(time.Duration(20+rng.IntN(30)) * time.Millisecond)
			}
		})
	}
	// A canceler: now and then one of the running jobs is canceled.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(99, 1))
		for time.Now().Before(deadline) {
			time.Sleep(300 * time.Millisecond)
			mu.Lock()
			var id string
			if len(jobIDs) > 0 {
				id = jobIDs[rng.IntN(len(jobIDs))]
			}
			mu.Unlock()
			if id != "" {
				_, err := pick(rng).CancelJob(ctx, tenant, id, "")
				unexpected("cancel job", err)
			}
		}
	})
	// Workers: claim one to four tasks, heartbeat some, and report: mostly successes, alone or
	// as a batch, some retryable failures.
	var idle atomic.Int64
	for w := range 24 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			worker := fmt.Sprintf("w%d", w)
			for {
				claims, err := pick(rng).ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{"q"}, WorkerID: worker, Limit: 1 + rng.IntN(4)})
				unexpected("claim", err)
				if len(claims) == 0 {
					if time.Now().After(deadline) && idle.Add(1) > 200 {
						return
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				var batch []dispatch.CompleteParams
				for _, cl := range claims {
					tk := cl.Task
					if rng.IntN(4) == 0 {
						_, err := pick(rng).Heartbeat(ctx, dispatch.HeartbeatParams{TaskID: tk.ID, Attempt: tk.Attempt, LeaseToken: tk.LeaseToken})
						unexpected("heartbeat", err)
					}
					p := dispatch.CompleteParams{TaskID: tk.ID, Attempt: tk.Attempt, LeaseToken: tk.LeaseToken,
						Outcome: store.OutcomeSucceeded, Output: []byte(`{"ok":true}`)}
					switch r := rng.IntN(10); {
					case r == 0:
						p.Outcome, p.Output = store.OutcomeFailed, nil
						p.Error = &store.TaskError{Category: lifecycle.Infrastructure, Message: "flaky"}
					case r < 4:
						batch = append(batch, p)
						continue
					}
					_, err := pick(rng).Complete(ctx, p)
					unexpected("complete", err)
				}
				if len(batch) > 0 {
					_, errs := pick(rng).CompleteMany(ctx, batch)
					for _, err := range errs {
						unexpected("complete many", err)
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("drained %s after the load", time.Since(deadline).Round(time.Millisecond))

	// Every job must finish: nothing was lost.
	for _, id := range jobIDs {
		j, err := stores[0].JobGet(ctx, id)
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		if j.Status == lifecycle.JobProcessing {
			t.Errorf("job %s still processing with %d unfinished tasks", id, j.UnfinishedTasks)
		}
	}
	for _, s := range stores {
		s.Close()
	}
	deadlocks := db.Deadlocks(t)
	t.Logf("%d jobs, %d calls, %d unexpected errors, %d deadlocks", len(jobIDs), calls.Load(), failures.Load(), deadlocks)
	if deadlocks != 0 {
		t.Errorf("PostgreSQL counted %d deadlocks in the test database; want none", deadlocks)
	}
	if m := logs.matching("deadlock"); len(m) > 0 {
		t.Errorf("the dispatchers logged %d deadlocks, the first: %s", len(m), m[0])
	}
}

// storeCloser closes its store once, before the test's own cleanup would.
type storeCloser struct {
	store.Store
	once sync.Once
}

func (s *storeCloser) Close() { s.once.Do(func() { s.Store.Close() }) }
