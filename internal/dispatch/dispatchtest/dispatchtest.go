// Package dispatchtest drives a dispatcher in tests: one dispatcher over a store with a fake
// clock, and the claim, report and reap steps a test strings together.
package dispatchtest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// Tenant is the tenant of the jobs an Env submits.
const Tenant = "acme"

// Epoch is where an Env's fake clock starts.
var Epoch = time.UnixMilli(1_700_000_000_000).UTC()

// Quiet is a logger that writes nothing.
var Quiet = slog.New(slog.DiscardHandler)

// Env is one dispatcher on a store with a fake clock and a fixed backoff jitter of 0.5, which
// makes every backoff exactly base·2^(attempt-1) capped at max.
type Env struct {
	T     testing.TB
	Ctx   context.Context
	Store store.Store
	Clock *clockwork.FakeClock
	D     *dispatch.Dispatcher
}

// New returns an Env over st; configure may change the dispatcher's config before it is built.
func New(t testing.TB, st store.Store, configure ...func(*dispatch.Config)) *Env {
	t.Helper()
	clock := clockwork.NewFakeClockAt(Epoch)
	cfg := dispatch.Config{Clock: clock, Jitter: func() float64 { return 0.5 }, MaxTasksPerJob: 50, Logger: Quiet}
	for _, c := range configure {
		c(&cfg)
	}
	d, err := dispatch.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, Ctx: context.Background(), Store: st, Clock: clock, D: d}
}

// Spec is a task named "work" with key and dependencies deps.
func Spec(key string, deps ...string) lifecycle.TaskSpec {
	return lifecycle.TaskSpec{Key: key, Name: "work", DependsOn: deps}
}

// Submit creates a job of Tenant with specs.
func (e *Env) Submit(specs ...lifecycle.TaskSpec) *store.Job {
	e.T.Helper()
	res, err := e.D.CreateJob(e.Ctx, dispatch.CreateJobParams{Tenant: Tenant, Tasks: specs})
	if err != nil {
		e.T.Fatalf("create job: %v", err)
	}
	return res.Job
}

// Job reads a job.
func (e *Env) Job(id string) *store.Job {
	e.T.Helper()
	j, err := e.Store.JobGet(e.Ctx, id)
	if err != nil {
		e.T.Fatalf("get job: %v", err)
	}
	return j
}

// Task reads the task of job with key.
func (e *Env) Task(job *store.Job, key string) *store.Task {
	e.T.Helper()
	_, tasks, err := e.D.GetJob(e.Ctx, Tenant, job.ID)
	if err != nil {
		e.T.Fatalf("get job: %v", err)
	}
	for _, s := range tasks {
		if s.Key == key {
			t, err := e.Store.TaskGet(e.Ctx, s.ID)
			if err != nil {
				e.T.Fatal(err)
			}
			return t
		}
	}
	e.T.Fatalf("no task %q in job %s", key, job.ID)
	return nil
}

// Status is the status of the task of job with key.
func (e *Env) Status(job *store.Job, key string) lifecycle.TaskStatus {
	e.T.Helper()
	return e.Task(job, key).Status
}

// Claim claims the task of job with key, as worker "w-" + key.
func (e *Env) Claim(job *store.Job, key string) *dispatch.Claim {
	e.T.Helper()
	c, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: e.Task(job, key).ID, WorkerID: "w-" + key})
	if err != nil {
		e.T.Fatalf("claim %s: %v", key, err)
	}
	return c
}

// Report reports how the attempt of c ended, with the output {"by": key}.
func (e *Env) Report(c *dispatch.Claim, outcome store.Outcome, taskErr *store.TaskError) (*dispatch.CompleteResult, error) {
	return e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt,
		LeaseToken: c.Task.LeaseToken, Outcome: outcome, Output: []byte(`{"by":"` + c.Task.Key + `"}`), Error: taskErr})
}

// Succeed reports that the attempt of c succeeded.
func (e *Env) Succeed(c *dispatch.Claim) *dispatch.CompleteResult {
	e.T.Helper()
	res, err := e.Report(c, store.OutcomeSucceeded, nil)
	if err != nil {
		e.T.Fatalf("complete %s: %v", c.Task.Key, err)
	}
	return res
}

// Fail reports that the attempt of c failed with category cat.
func (e *Env) Fail(c *dispatch.Claim, cat lifecycle.Category) *dispatch.CompleteResult {
	e.T.Helper()
	res, err := e.Report(c, store.OutcomeFailed, &store.TaskError{Category: cat, Message: "boom"})
	if err != nil {
		e.T.Fatalf("fail %s: %v", c.Task.Key, err)
	}
	return res
}

// Run claims and completes the tasks of job with keys, in order.
func (e *Env) Run(job *store.Job, keys ...string) {
	e.T.Helper()
	for _, k := range keys {
		e.Succeed(e.Claim(job, k))
	}
}

// Reap runs one reaper pass and returns how many attempts it timed out.
func (e *Env) Reap() int {
	e.T.Helper()
	n, err := e.D.Reap(e.Ctx)
	if err != nil {
		e.T.Fatalf("reap: %v", err)
	}
	return n
}

// Expire lets the lease of the one claimed task run out (the default 90 s heartbeat timeout) and
// the reaper time it out.
func (e *Env) Expire() {
	e.T.Helper()
	e.Clock.Advance(91 * time.Second)
	if n := e.Reap(); n != 1 {
		e.T.Fatalf("reaped %d tasks, want 1", n)
	}
}

// Events lists a job's event types, or with a key only those of that task.
func (e *Env) Events(job *store.Job, key ...string) []string {
	e.T.Helper()
	evs, err := e.D.JobEvents(e.Ctx, Tenant, job.ID, 0, 100000)
	if err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if len(key) == 0 || ev.TaskKey == key[0] {
			out = append(out, ev.Type)
		}
	}
	return out
}

// WantStatus checks the statuses of job's tasks by key.
func (e *Env) WantStatus(t testing.TB, job *store.Job, want map[string]lifecycle.TaskStatus) {
	t.Helper()
	for key, s := range want {
		if got := e.Status(job, key); got != s {
			t.Errorf("task %s: status %s, want %s", key, got, s)
		}
	}
}

// Count is how often s occurs in list.
func Count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// WantErr fails t unless err is (or wraps) a T, and returns it.
func WantErr[T error](t testing.TB, err error) T {
	t.Helper()
	var target T
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T), want %T", err, err, target)
	}
	return target
}

// WantEvents checks a list of event types.
func WantEvents(t testing.TB, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}
