package dispatch_test

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

// env is one dispatcher on a fresh store with a fake clock and a fixed backoff jitter of 0.5,
// which makes every backoff exactly base·2^(attempt-1) capped at max.
type env struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	clock *clockwork.FakeClock
	d     *dispatch.Dispatcher
}

var quiet = slog.New(slog.DiscardHandler)

var epoch = time.UnixMilli(1_700_000_000_000).UTC()

func newEnv(t *testing.T, st store.Store, configure ...func(*dispatch.Config)) *env {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	cfg := dispatch.Config{Clock: clock, Jitter: func() float64 { return 0.5 }, MaxTasksPerJob: 50, Logger: quiet}
	for _, c := range configure {
		c(&cfg)
	}
	d, err := dispatch.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: context.Background(), st: st, clock: clock, d: d}
}

const tenant = "acme"

func spec(key string, deps ...string) lifecycle.TaskSpec {
	return lifecycle.TaskSpec{Key: key, Name: "work", DependsOn: deps}
}

func (e *env) submit(specs ...lifecycle.TaskSpec) *store.Job {
	e.t.Helper()
	res, err := e.d.CreateJob(e.ctx, dispatch.CreateJobParams{Tenant: tenant, Tasks: specs})
	if err != nil {
		e.t.Fatalf("create job: %v", err)
	}
	return res.Job
}

func (e *env) job(id string) *store.Job {
	e.t.Helper()
	j, err := e.st.GetJob(e.ctx, id)
	if err != nil {
		e.t.Fatalf("get job: %v", err)
	}
	return j
}

func (e *env) task(job *store.Job, key string) *store.Task {
	e.t.Helper()
	_, tasks, err := e.d.GetJob(e.ctx, tenant, job.ID)
	if err != nil {
		e.t.Fatalf("get job: %v", err)
	}
	for _, s := range tasks {
		if s.Key == key {
			t, err := e.st.GetTask(e.ctx, s.ID)
			if err != nil {
				e.t.Fatal(err)
			}
			return t
		}
	}
	e.t.Fatalf("no task %q in job %s", key, job.ID)
	return nil
}

func (e *env) status(job *store.Job, key string) lifecycle.TaskStatus {
	e.t.Helper()
	return e.task(job, key).Status
}

func (e *env) claim(job *store.Job, key string) *dispatch.Claim {
	e.t.Helper()
	c, err := e.d.ClaimTask(e.ctx, dispatch.ClaimTaskParams{TaskID: e.task(job, key).ID, WorkerID: "w-" + key})
	if err != nil {
		e.t.Fatalf("claim %s: %v", key, err)
	}
	return c
}

func (e *env) report(c *dispatch.Claim, outcome store.Outcome, taskErr *store.TaskError) (*dispatch.CompleteResult, error) {
	return e.d.Complete(e.ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt,
		LeaseToken: c.Task.LeaseToken, Outcome: outcome, Output: []byte(`{"by":"` + c.Task.Key + `"}`), Error: taskErr})
}

func (e *env) succeed(c *dispatch.Claim) *dispatch.CompleteResult {
	e.t.Helper()
	res, err := e.report(c, store.OutcomeSucceeded, nil)
	if err != nil {
		e.t.Fatalf("complete %s: %v", c.Task.Key, err)
	}
	return res
}

func (e *env) fail(c *dispatch.Claim, cat lifecycle.Category) *dispatch.CompleteResult {
	e.t.Helper()
	res, err := e.report(c, store.OutcomeFailed, &store.TaskError{Category: cat, Message: "boom"})
	if err != nil {
		e.t.Fatalf("fail %s: %v", c.Task.Key, err)
	}
	return res
}

func (e *env) run(job *store.Job, keys ...string) {
	e.t.Helper()
	for _, k := range keys {
		e.succeed(e.claim(job, k))
	}
}

func (e *env) reap() int {
	e.t.Helper()
	n, err := e.d.Reap(e.ctx)
	if err != nil {
		e.t.Fatalf("reap: %v", err)
	}
	return n
}

// events lists a job's event types, or with a key only those of that task.
func (e *env) events(job *store.Job, key ...string) []string {
	e.t.Helper()
	evs, err := e.d.JobEvents(e.ctx, tenant, job.ID, 0, 100000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if len(key) == 0 || ev.TaskKey == key[0] {
			out = append(out, ev.Type)
		}
	}
	return out
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func wantStatus(t *testing.T, e *env, job *store.Job, want map[string]lifecycle.TaskStatus) {
	t.Helper()
	for key, s := range want {
		if got := e.status(job, key); got != s {
			t.Errorf("task %s: status %s, want %s", key, got, s)
		}
	}
}

func wantErr[T error](t *testing.T, err error) T {
	t.Helper()
	var target T
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T), want %T", err, err, target)
	}
	return target
}

func wantEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}
