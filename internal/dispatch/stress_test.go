package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// These tests drive the dispatcher core with concurrent workers on the real clock: no sleeps, no
// reaper (leases are the default 90 s and nothing fails), so every task must be claimed and
// completed exactly once.

const stressTenant = "stress"

// stressDispatcher is a dispatcher with no cap on job size.
func stressDispatcher(tb testing.TB, st store.Store) *dispatch.Dispatcher {
	tb.Helper()
	d, err := dispatch.New(st, dispatch.Config{MaxTasksPerJob: 0})
	if err != nil {
		tb.Fatalf("new dispatcher: %v", err)
	}
	return d
}

// stressDAG accumulates the task specs of one job.
type stressDAG struct{ specs []lifecycle.TaskSpec }

func (g *stressDAG) add(key, queue string, deps ...string) {
	g.specs = append(g.specs, lifecycle.TaskSpec{Key: key, Name: "work", Queue: queue, DependsOn: deps})
}

// stressJobs is the mix of TestConcurrentWorkersCompleteEveryTaskOnce: 2,000 tasks in five jobs
// over queues "q" and "q2".
func stressJobs() [][]lifecycle.TaskSpec {
	var jobs [][]lifecycle.TaskSpec

	// Four chains of 50.
	var chains stressDAG
	for c := range 4 {
		for i := range 50 {
			var deps []string
			if i > 0 {
				deps = []string{fmt.Sprintf("c%d-%d", c, i-1)}
			}
			chains.add(fmt.Sprintf("c%d-%d", c, i), "q", deps...)
		}
	}
	jobs = append(jobs, chains.specs)

	// Twenty diamonds: a root, eight middles, a join; the diamonds alternate queues.
	var diamonds stressDAG
	for k := range 20 {
		q := []string{"q", "q2"}[k%2]
		root := fmt.Sprintf("d%d-root", k)
		diamonds.add(root, q)
		var mids []string
		for m := range 8 {
			mid := fmt.Sprintf("d%d-m%d", k, m)
			diamonds.add(mid, []string{"q", "q2"}[m%2], root)
			mids = append(mids, mid)
		}
		diamonds.add(fmt.Sprintf("d%d-join", k), q, mids...)
	}
	jobs = append(jobs, diamonds.specs)

	// A fan-out of 398 children of one root, all joined by one task.
	var fan stressDAG
	fan.add("root", "q2")
	var kids []string
	for i := range 398 {
		kid := fmt.Sprintf("f%d", i)
		fan.add(kid, []string{"q", "q2"}[i%2], "root")
		kids = append(kids, kid)
	}
	fan.add("join", "q", kids...)
	jobs = append(jobs, fan.specs)

	// 600 independent tasks.
	var flat stressDAG
	for i := range 600 {
		flat.add(fmt.Sprintf("flat%d", i), []string{"q", "q2"}[i%3/2])
	}
	jobs = append(jobs, flat.specs)

	// 600 tasks of a random layered DAG: 60 roots, then each task has one to three earlier
	// parents.
	var random stressDAG
	rng := rand.New(rand.NewPCG(2000, 1))
	for i := range 600 {
		var deps []string
		if i >= 60 {
			n := 1 + rng.IntN(3)
			for len(deps) < n {
				p := fmt.Sprintf("r%d", rng.IntN(i))
				if !slices.Contains(deps, p) {
					deps = append(deps, p)
				}
			}
		}
		random.add(fmt.Sprintf("r%d", i), []string{"q", "q2"}[i%2], deps...)
	}
	jobs = append(jobs, random.specs)
	return jobs
}

// stressAttempt is one claim as the worker that holds it sees it.
type stressAttempt struct {
	TaskID, Key, JobID, Worker, Token string
	Attempt                           int
	Output                            json.RawMessage
}

func (a stressAttempt) complete() dispatch.CompleteParams {
	return dispatch.CompleteParams{TaskID: a.TaskID, Attempt: a.Attempt, LeaseToken: a.Token,
		Outcome: store.OutcomeSucceeded, Output: a.Output}
}

// stressLedger is what the test saw the workers do.
type stressLedger struct {
	mu          sync.Mutex
	claims      map[string]int             // successful claims per task id
	completions map[string][]stressAttempt // non-duplicate successful completes per task id
	claimed     []string                   // every task id ever claimed, for duplicate claims
	completed   []stressAttempt            // every completed attempt, for repeated reports
	duplicates  struct{ claims, completes, racedCompletes, claimTaskWins int }
}

func newStressLedger() *stressLedger {
	return &stressLedger{claims: map[string]int{}, completions: map[string][]stressAttempt{}}
}

// claim records a claim and returns how many times the task has now been claimed.
func (l *stressLedger) claim(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims[id]++
	l.claimed = append(l.claimed, id)
	return l.claims[id]
}

func (l *stressLedger) complete(a stressAttempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completions[a.TaskID] = append(l.completions[a.TaskID], a)
	l.completed = append(l.completed, a)
}

func (l *stressLedger) randomClaimed(rng *rand.Rand) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.claimed[rng.IntN(len(l.claimed))]
}

func (l *stressLedger) randomCompleted(rng *rand.Rand) stressAttempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.completed[rng.IntN(len(l.completed))]
}

func (l *stressLedger) count(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// stressRun is the shared state of one run of TestConcurrentWorkersCompleteEveryTaskOnce.
type stressRun struct {
	t      *testing.T
	d      *dispatch.Dispatcher
	ctx    context.Context
	cancel context.CancelFunc
	jobIDs []string
	done   []atomic.Bool // per job: seen completed
	all    atomic.Bool   // every job completed
	ledger *stressLedger
}

// fail reports an error from any goroutine and stops the run, unless the run is already over
// (errors caused by the cancellation itself are not news).
func (r *stressRun) fail(format string, args ...any) {
	if r.ctx.Err() != nil {
		return
	}
	r.t.Errorf(format, args...)
	r.cancel()
}

// allDone polls the jobs not yet seen completed.
func (r *stressRun) allDone() bool {
	if r.all.Load() {
		return true
	}
	for i, id := range r.jobIDs {
		if r.done[i].Load() {
			continue
		}
		job, err := r.d.Store().JobGet(r.ctx, id)
		if err != nil {
			r.fail("poll job %s: %v", id, err)
			return false
		}
		switch job.Status {
		case lifecycle.JobCompleted:
			r.done[i].Store(true)
		case lifecycle.JobProcessing:
			return false
		default:
			r.fail("job %s ended %s", id, job.Status)
			return false
		}
	}
	r.all.Store(true)
	return true
}

// expectNotClaimed checks that a claim of a task that was already claimed is refused.
func (r *stressRun) expectNotClaimed(what string, cl *dispatch.Claim, err error, reasons ...dispatch.NotClaimedReason) {
	var nc *dispatch.NotClaimedError
	switch {
	case err == nil:
		r.fail("%s: claimed again as attempt %d by %s", what, cl.Task.Attempt, cl.Task.WorkerID)
	case !errors.As(err, &nc):
		r.fail("%s: want *dispatch.NotClaimedError, got %T: %v", what, err, err)
	case !slices.Contains(reasons, nc.Reason):
		r.fail("%s: reason %s, want one of %v", what, nc.Reason, reasons)
	}
}

// worker claims with ClaimNext until every job is completed.
func (r *stressRun) worker(n int) {
	w := fmt.Sprintf("w%d", n)
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	queues := []string{"q", "q2"}
	if n%2 == 1 {
		queues = []string{"q2", "q"}
	}
	for iter := 0; r.ctx.Err() == nil; iter++ {
		// Now and then, claim by id a task that a job view lists as pending, as a worker does after
		// a wake-up: it races the ClaimNext of the others, and exactly one of them may win.
		if iter%25 == 24 {
			r.claimListed(w, rng)
		}
		claims, err := r.d.ClaimNext(r.ctx, dispatch.ClaimNextParams{Queues: queues, WorkerID: w, Limit: 1 + rng.IntN(4)})
		if err != nil {
			r.fail("%s: claim next: %v", w, err)
			return
		}
		if len(claims) == 0 {
			if r.allDone() {
				return
			}
			runtime.Gosched()
			continue
		}
		for _, cl := range claims {
			if !r.process(w, rng, cl) {
				return
			}
		}
	}
}

// claimListed tries ClaimTask on up to two tasks that a random job lists as pending.
func (r *stressRun) claimListed(w string, rng *rand.Rand) {
	i := rng.IntN(len(r.jobIDs))
	if r.done[i].Load() {
		return
	}
	_, tasks, err := r.d.GetJob(r.ctx, stressTenant, r.jobIDs[i])
	if err != nil {
		r.fail("%s: get job: %v", w, err)
		return
	}
	tried := 0
	for _, ts := range tasks {
		if ts.Status != lifecycle.Pending || tried == 2 {
			continue
		}
		tried++
		cl, err := r.d.ClaimTask(r.ctx, dispatch.ClaimTaskParams{TaskID: ts.ID, WorkerID: w})
		if err == nil {
			r.ledger.count(func() { r.ledger.duplicates.claimTaskWins++ })
			r.process(w, rng, cl)
			continue
		}
		// Pending when listed, so someone else claimed it since.
		r.expectNotClaimed(fmt.Sprintf("%s: claim of listed pending task %s", w, ts.Key), nil, err,
			dispatch.NotClaimedAlreadyRunning, dispatch.NotClaimedCompleted)
	}
}

// process runs one claim: heartbeat, duplicate claims, completion (sometimes two identical
// reports racing), and sometimes a repeated report. It returns false when the run is failing.
func (r *stressRun) process(w string, rng *rand.Rand, cl *dispatch.Claim) bool {
	task := cl.Task
	if task.Status != lifecycle.Running || task.Attempt != 1 || task.LeaseToken == "" || task.WorkerID != w {
		r.fail("%s: claim of %s: status %s attempt %d token %q worker %q", w, task.Key, task.Status, task.Attempt, task.LeaseToken, task.WorkerID)
		return false
	}
	if n := r.ledger.claim(task.ID); n != 1 {
		r.fail("%s: task %s (%s) claimed %d times", w, task.Key, task.ID, n)
		return false
	}
	hb, err := r.d.Heartbeat(r.ctx, dispatch.HeartbeatParams{TaskID: task.ID, Attempt: task.Attempt, LeaseToken: task.LeaseToken})
	if err != nil {
		r.fail("%s: heartbeat %s: %v", w, task.Key, err)
		return false
	}
	if hb.ShouldCancel {
		r.fail("%s: heartbeat %s: shouldCancel", w, task.Key)
	}

	// Duplicate claims: of the task this worker holds, and of any task claimed so far.
	if rng.IntN(4) == 0 {
		again, err := r.d.ClaimTask(r.ctx, dispatch.ClaimTaskParams{TaskID: task.ID, WorkerID: w + "-dup"})
		r.expectNotClaimed(fmt.Sprintf("%s: duplicate claim of held task %s", w, task.Key), again, err, dispatch.NotClaimedAlreadyRunning)
		r.ledger.count(func() { r.ledger.duplicates.claims++ })
	}
	if rng.IntN(3) == 0 {
		id := r.ledger.randomClaimed(rng)
		again, err := r.d.ClaimTask(r.ctx, dispatch.ClaimTaskParams{TaskID: id, WorkerID: w + "-dup"})
		r.expectNotClaimed(fmt.Sprintf("%s: duplicate claim of %s", w, id), again, err, dispatch.NotClaimedAlreadyRunning, dispatch.NotClaimedCompleted)
		r.ledger.count(func() { r.ledger.duplicates.claims++ })
	}

	a := stressAttempt{TaskID: task.ID, Key: task.Key, JobID: task.JobID, Worker: w, Token: task.LeaseToken, Attempt: task.Attempt,
		Output: json.RawMessage(fmt.Sprintf(`{"worker":%q,"attempt":%d,"task":%q}`, w, task.Attempt, task.Key))}
	if rng.IntN(10) == 0 {
		// The same report sent twice at once: exactly one applies, the other is a duplicate.
		var (
			wg   sync.WaitGroup
			res  [2]*dispatch.CompleteResult
			errs [2]error
		)
		for i := range 2 {
			wg.Go(func() { res[i], errs[i] = r.d.Complete(r.ctx, a.complete()) })
		}
		wg.Wait()
		applied := 0
		for i := range 2 {
			if errs[i] != nil {
				r.fail("%s: raced complete %s: %v", w, task.Key, errs[i])
				return false
			}
			if res[i].Status != lifecycle.Completed {
				r.fail("%s: raced complete %s: status %s", w, task.Key, res[i].Status)
			}
			if !res[i].Duplicate {
				applied++
			}
		}
		if applied != 1 {
			r.fail("%s: raced complete %s: %d of 2 identical reports applied, want 1", w, task.Key, applied)
			return false
		}
		r.ledger.count(func() { r.ledger.duplicates.racedCompletes++ })
	} else {
		res, err := r.d.Complete(r.ctx, a.complete())
		if err != nil {
			r.fail("%s: complete %s: %v", w, task.Key, err)
			return false
		}
		if res.Duplicate || res.Status != lifecycle.Completed {
			r.fail("%s: complete %s: duplicate=%v status %s, want a first completion", w, task.Key, res.Duplicate, res.Status)
			return false
		}
	}
	r.ledger.complete(a)

	// A repeated report, of this attempt or of any completed one: acknowledged, no effect.
	if rng.IntN(5) == 0 {
		again := a
		if rng.IntN(2) == 0 {
			again = r.ledger.randomCompleted(rng)
		}
		res, err := r.d.Complete(r.ctx, again.complete())
		switch {
		case err != nil:
			r.fail("%s: repeated complete of %s by %s: %v", w, again.Key, again.Worker, err)
		case !res.Duplicate || res.Status != lifecycle.Completed || res.Requeued || res.DeadLettered:
			r.fail("%s: repeated complete of %s by %s: %+v, want a duplicate of a completion", w, again.Key, again.Worker, *res)
		}
		r.ledger.count(func() { r.ledger.duplicates.completes++ })
	}
	return r.ctx.Err() == nil
}

// stressEvents returns every event of a job.
func stressEvents(ctx context.Context, t *testing.T, d *dispatch.Dispatcher, jobID string) []*store.Event {
	t.Helper()
	var all []*store.Event
	after := int64(0)
	for {
		page, err := d.JobEvents(ctx, stressTenant, jobID, after, 1000)
		if err != nil {
			t.Fatalf("events of %s: %v", jobID, err)
		}
		all = append(all, page...)
		if len(page) < 1000 {
			return all
		}
		after = page[len(page)-1].ID
	}
}

// stressJobReport describes a job's tasks by status, for a run that did not finish.
func stressJobReport(ctx context.Context, d *dispatch.Dispatcher, jobID string) string {
	job, tasks, err := d.GetJob(ctx, stressTenant, jobID)
	if err != nil {
		return fmt.Sprintf("job %s: %v", jobID, err)
	}
	by := map[lifecycle.TaskStatus]int{}
	for _, ts := range tasks {
		by[ts.Status]++
	}
	return fmt.Sprintf("job %s: %s, unfinished %d of %d, tasks by status %v", jobID, job.Status, job.UnfinishedTasks, job.TotalTasks, by)
}

// untilStalled returns a context that ends once progress has not grown for idle, or after limit
// in all. A machine loaded by other work makes a run slower, which is no failure; a run that
// stops making progress is.
func untilStalled(idle, limit time.Duration, progress func() int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, since := progress(), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if n := progress(); n != last {
				last, since = n, time.Now()
			} else if time.Since(since) > idle {
				cancel()
				return
			}
		}
	}()
	return ctx, cancel
}

func TestConcurrentWorkersCompleteEveryTaskOnce(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		ledger := newStressLedger()
		ctx, cancel := untilStalled(time.Minute, 10*time.Minute, func() int {
			ledger.mu.Lock()
			defer ledger.mu.Unlock()
			return len(ledger.completed)
		})
		defer cancel()
		d := stressDispatcher(t, st)

		jobs := stressJobs()
		total := 0
		for _, specs := range jobs {
			total += len(specs)
		}
		if total != 2000 {
			t.Fatalf("the job mix has %d tasks, want 2000", total)
		}
		r := &stressRun{t: t, d: d, ctx: ctx, cancel: cancel, done: make([]atomic.Bool, len(jobs)), ledger: ledger}
		start := time.Now()
		for i, specs := range jobs {
			res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: stressTenant, Name: fmt.Sprintf("stress-%d", i), Tasks: specs})
			if err != nil {
				t.Fatalf("create job %d: %v", i, err)
			}
			r.jobIDs = append(r.jobIDs, res.Job.ID)
		}
		created := time.Since(start)

		start = time.Now()
		var wg sync.WaitGroup
		for n := range 8 {
			wg.Go(func() { r.worker(n) })
		}
		wg.Wait()
		elapsed := time.Since(start)
		if t.Failed() {
			t.FailNow()
		}
		if ctx.Err() != nil {
			var report []string
			for _, id := range r.jobIDs {
				report = append(report, stressJobReport(context.Background(), d, id))
			}
			t.Fatalf("the jobs did not complete (%v; no completion for a minute, or 10 minutes in all); %d tasks completed:\n%v",
				elapsed, len(r.ledger.completions), report)
		}
		dup := r.ledger.duplicates
		t.Logf("created 5 jobs in %v; ran 2000 tasks by 8 workers in %v (%.0f tasks/s); %d duplicate claims, %d repeated and %d raced completions, %d tasks claimed by id",
			created.Round(time.Millisecond), elapsed.Round(time.Millisecond), 2000/elapsed.Seconds(), dup.claims, dup.completes, dup.racedCompletes, dup.claimTaskWins)
		start = time.Now()
		defer func() { t.Logf("verified in %v", time.Since(start).Round(time.Millisecond)) }()

		// Verify with a fresh context: the run's context may be close to its deadline.
		ctx = context.Background()
		if len(r.ledger.completions) != total {
			t.Errorf("%d tasks completed, want %d", len(r.ledger.completions), total)
		}
		for i, id := range r.jobIDs {
			specs := jobs[i]
			job, tasks, err := d.GetJob(ctx, stressTenant, id)
			if err != nil {
				t.Fatalf("get job %s: %v", id, err)
			}
			if job.Status != lifecycle.JobCompleted || job.UnfinishedTasks != 0 || job.TotalTasks != len(specs) || job.FinishedAt.IsZero() {
				t.Errorf("job %d (%s): status %s, unfinished %d, total %d, finished at %v; want completed, 0, %d, set",
					i, id, job.Status, job.UnfinishedTasks, job.TotalTasks, job.FinishedAt, len(specs))
			}
			if len(tasks) != len(specs) {
				t.Errorf("job %d lists %d tasks, want %d", i, len(tasks), len(specs))
			}
			for _, ts := range tasks {
				if ts.Status != lifecycle.Completed || ts.Attempt != 1 {
					t.Errorf("job %d task %s: status %s attempt %d, want completed 1", i, ts.Key, ts.Status, ts.Attempt)
					continue
				}
				done := r.ledger.completions[ts.ID]
				if len(done) != 1 {
					t.Errorf("job %d task %s completed %d times, want once", i, ts.Key, len(done))
					continue
				}
				a := done[0]
				if n := r.ledger.claims[ts.ID]; n != 1 {
					t.Errorf("job %d task %s claimed %d times, want once", i, ts.Key, n)
				}
				detail, err := d.GetTask(ctx, stressTenant, ts.ID)
				if err != nil {
					t.Fatalf("get task %s: %v", ts.Key, err)
				}
				stored := detail.Task
				if stored.Attempt != a.Attempt || stored.LeaseToken != a.Token || stored.WorkerID != a.Worker {
					t.Errorf("job %d task %s: stored attempt %d token %s worker %s, but completed by attempt %d token %s worker %s",
						i, ts.Key, stored.Attempt, stored.LeaseToken, stored.WorkerID, a.Attempt, a.Token, a.Worker)
				}
				if string(stored.Output) != string(a.Output) {
					t.Errorf("job %d task %s: stored output %s, want %s", i, ts.Key, stored.Output, a.Output)
				}
				if len(detail.Attempts) != 1 || detail.Attempts[0].Outcome != store.OutcomeSucceeded ||
					detail.Attempts[0].Result != lifecycle.Completed || detail.Attempts[0].LeaseToken != a.Token {
					t.Errorf("job %d task %s: attempts %+v, want one succeeded attempt with token %s", i, ts.Key, detail.Attempts, a.Token)
				}
			}

			// The audit trail: each task pending, started, heartbeat (first beat) and completed
			// exactly once; the job created and completed once, its completion last.
			events := stressEvents(ctx, t, d, id)
			perTask := map[string]map[string]int{}
			jobEvents := map[string]int{}
			for _, e := range events {
				if e.TaskID == "" {
					jobEvents[e.Type]++
					continue
				}
				if perTask[e.TaskKey] == nil {
					perTask[e.TaskKey] = map[string]int{}
				}
				perTask[e.TaskKey][e.Type]++
			}
			if jobEvents[dispatch.EventJobCreated] != 1 || jobEvents[dispatch.EventJobCompleted] != 1 || len(jobEvents) != 2 {
				t.Errorf("job %d: job events %v, want one %q and one %q", i, jobEvents, dispatch.EventJobCreated, dispatch.EventJobCompleted)
			}
			if last := events[len(events)-1]; last.Type != dispatch.EventJobCompleted {
				t.Errorf("job %d: last event is %q of %q, want %q", i, last.Type, last.TaskKey, dispatch.EventJobCompleted)
			}
			want := map[string]int{dispatch.EventTaskPending: 1, dispatch.EventTaskStarted: 1, dispatch.EventTaskHeartbeat: 1, dispatch.EventTaskCompleted: 1}
			for _, s := range specs {
				if got := perTask[s.Key]; !maps.Equal(got, want) {
					t.Errorf("job %d task %s: events %v, want %v", i, s.Key, got, want)
				}
			}
			if len(perTask) != len(specs) {
				t.Errorf("job %d: events name %d tasks, want %d", i, len(perTask), len(specs))
			}
		}
	})
}

// stressWake is an in-process wake-up, like the SQLite store transport's: a completion may have
// made tasks ready, so a worker that found none waits for the next one instead of spinning on
// empty claims that compete with the workers that have work for the database.
type stressWake struct {
	mu sync.Mutex
	ch chan struct{}
}

func newStressWake() *stressWake { return &stressWake{ch: make(chan struct{})} }

// wait returns a channel closed by the next notify; take it before looking for work, so that a
// completion in between is not missed.
func (w *stressWake) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *stressWake) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.ch)
	w.ch = make(chan struct{})
}

// tenThousandDAG is one job of 10,000 tasks: eight chains of 500 (priority 10, so the critical
// path runs beside the bulk), a root with 3,000 children, two fan-ins of 1,200 and 1,000 of those
// children, 2,996 independent tasks, and a sink joining the fan-ins and the chain tails.
func tenThousandDAG() (specs []lifecycle.TaskSpec, fanIns []string) {
	var g stressDAG
	var sinkDeps []string
	for c := range 8 {
		for i := range 500 {
			var deps []string
			if i > 0 {
				deps = []string{fmt.Sprintf("chain%d-%d", c, i-1)}
			}
			g.add(fmt.Sprintf("chain%d-%d", c, i), "q", deps...)
			g.specs[len(g.specs)-1].Priority = 10
		}
		sinkDeps = append(sinkDeps, fmt.Sprintf("chain%d-499", c))
	}
	g.add("root", "q")
	var fan []string
	for i := range 3000 {
		fan = append(fan, fmt.Sprintf("fan%d", i))
		g.add(fan[i], "q", "root")
	}
	g.add("join-a", "q", fan[:1200]...)
	g.add("join-b", "q", fan[2000:]...)
	fanIns = []string{"join-a", "join-b"}
	sinkDeps = append(sinkDeps, fanIns...)
	for i := range 2996 {
		g.add(fmt.Sprintf("flat%d", i), "q")
	}
	g.add("sink", "q", sinkDeps...)
	return g.specs, fanIns
}

func TestTenThousandTaskDAGRunsToCompletion(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		var (
			mu          sync.Mutex
			claims      = map[string]int{}
			completions = map[string]int{}
		)
		ctx, cancel := untilStalled(time.Minute, 10*time.Minute, func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(completions)
		})
		defer cancel()
		d := stressDispatcher(t, st)
		specs, fanIns := tenThousandDAG()
		if len(specs) != 10000 {
			t.Fatalf("the DAG has %d tasks, want 10000", len(specs))
		}
		parents := map[string][]string{}
		roots := 0
		for _, s := range specs {
			parents[s.Key] = s.DependsOn
			if len(s.DependsOn) == 0 {
				roots++
			}
		}
		output := func(key string) string { return `{"key":"` + key + `"}` }

		start := time.Now()
		res, err := d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: stressTenant, Name: "ten-thousand", Tasks: specs})
		created := time.Since(start)
		if err != nil {
			t.Fatalf("create a job of 10,000 tasks: %v", err)
		}
		if res.Job.TotalTasks != 10000 || res.Job.UnfinishedTasks != 10000 || res.Job.Status != lifecycle.JobProcessing || len(res.RootTasks) != roots {
			t.Fatalf("created job: total %d, unfinished %d, status %s, %d roots; want 10000, 10000, processing, %d",
				res.Job.TotalTasks, res.Job.UnfinishedTasks, res.Job.Status, len(res.RootTasks), roots)
		}
		jobID := res.Job.ID

		var (
			depsChecked = map[string]int{} // fan-in key → parents whose output its claim carried
			done        atomic.Bool
			wake        = newStressWake()
		)
		fail := func(format string, args ...any) {
			if ctx.Err() == nil {
				t.Errorf(format, args...)
				cancel()
			}
		}
		worker := func(w string) {
			for ctx.Err() == nil {
				woken := wake.wait()
				cls, err := d.ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{"q"}, WorkerID: w, Limit: 50})
				if err != nil {
					fail("%s: claim next: %v", w, err)
					return
				}
				if len(cls) == 0 {
					if done.Load() {
						return
					}
					job, err := d.Store().JobGet(ctx, jobID)
					if err != nil {
						fail("%s: poll job: %v", w, err)
						return
					}
					if job.Status != lifecycle.JobProcessing {
						done.Store(true)
						return
					}
					// Nothing is ready until another worker completes a task.
					select {
					case <-woken:
					case <-ctx.Done():
					}
					continue
				}
				for _, cl := range cls {
					task := cl.Task
					// Every claim carries the output of every parent.
					want := parents[task.Key]
					if len(cl.DependencyOutputs) != len(want) {
						fail("%s: claim of %s carried %d dependency outputs, want %d", w, task.Key, len(cl.DependencyOutputs), len(want))
						return
					}
					for _, p := range want {
						if got := string(cl.DependencyOutputs[p]); got != output(p) {
							fail("%s: claim of %s: output of parent %s is %q, want %q", w, task.Key, p, got, output(p))
							return
						}
					}
					mu.Lock()
					claims[task.ID]++
					if slices.Contains(fanIns, task.Key) {
						depsChecked[task.Key] = len(cl.DependencyOutputs)
					}
					mu.Unlock()
					r, err := d.Complete(ctx, dispatch.CompleteParams{TaskID: task.ID, Attempt: task.Attempt, LeaseToken: task.LeaseToken,
						Outcome: store.OutcomeSucceeded, Output: json.RawMessage(output(task.Key))})
					if err != nil {
						fail("%s: complete %s: %v", w, task.Key, err)
						return
					}
					if r.Duplicate || r.Status != lifecycle.Completed {
						fail("%s: complete %s: duplicate=%v status %s", w, task.Key, r.Duplicate, r.Status)
						return
					}
					wake.notify()
					mu.Lock()
					completions[task.ID]++
					mu.Unlock()
				}
			}
		}
		start = time.Now()
		var wg sync.WaitGroup
		for n := range 4 {
			wg.Go(func() { worker(fmt.Sprintf("w%d", n)) })
		}
		wg.Wait()
		ran := time.Since(start)
		if t.Failed() {
			t.FailNow()
		}
		if ctx.Err() != nil {
			t.Fatalf("the job did not complete (%v; no completion for a minute, or 10 minutes in all); %d tasks completed; %s",
				ran, len(completions), stressJobReport(context.Background(), d, jobID))
		}
		t.Logf("created 10,000 tasks in %v (%.0f tasks/s); ran them with 4 workers in %v (%.0f tasks/s)",
			created.Round(time.Millisecond), 10000/created.Seconds(), ran.Round(time.Millisecond), 10000/ran.Seconds())

		ctx = context.Background()
		job, tasks, err := d.GetJob(ctx, stressTenant, jobID)
		if err != nil {
			t.Fatal(err)
		}
		if job.Status != lifecycle.JobCompleted || job.UnfinishedTasks != 0 {
			t.Errorf("job: status %s, unfinished %d; want completed, 0", job.Status, job.UnfinishedTasks)
		}
		if len(tasks) != 10000 {
			t.Errorf("job lists %d tasks, want 10000", len(tasks))
		}
		for _, ts := range tasks {
			if ts.Status != lifecycle.Completed || ts.Attempt != 1 || claims[ts.ID] != 1 || completions[ts.ID] != 1 {
				t.Errorf("task %s: status %s attempt %d, claimed %d and completed %d times; want completed, 1, once, once",
					ts.Key, ts.Status, ts.Attempt, claims[ts.ID], completions[ts.ID])
			}
		}
		if len(completions) != 10000 {
			t.Errorf("%d tasks completed, want 10000", len(completions))
		}
		for _, k := range fanIns {
			if depsChecked[k] != len(parents[k]) || depsChecked[k] < 1000 {
				t.Errorf("fan-in %s: its claim carried %d dependency outputs, want %d (≥1000)", k, depsChecked[k], len(parents[k]))
			}
		}
		events := stressEvents(ctx, t, d, jobID)
		count := map[string]int{}
		for _, e := range events {
			count[e.Type]++
		}
		if count[dispatch.EventTaskCompleted] != 10000 || count[dispatch.EventJobCompleted] != 1 {
			t.Errorf("events by type %v, want 10000 %q and one %q", count, dispatch.EventTaskCompleted, dispatch.EventJobCompleted)
		}
	})
}
