package maintenance_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/maintenance"
	"github.com/baton-dev/baton/internal/store"
)

// env is a store with a fake clock, a dispatcher over both that writes the jobs, outbox messages
// and dead letters the services work on, and the logger the services log to.
type env struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	clock *clockwork.FakeClock
	log   *slog.Logger
	d     *dispatch.Dispatcher
}

var quiet = slog.New(slog.DiscardHandler)

var epoch = time.UnixMilli(1_700_000_000_000).UTC()

const tenant = "acme"

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
	return &env{t: t, ctx: context.Background(), st: st, clock: clock, log: cfg.Logger, d: d}
}

// maint is what the maintenance services run on: the env's store, clock and logger.
func (e *env) maint() maintenance.Env {
	return maintenance.Env{Store: e.st, Clock: e.clock, Logger: e.log}
}

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
	j, err := e.st.JobGet(e.ctx, id)
	if err != nil {
		e.t.Fatalf("get job: %v", err)
	}
	return j
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
