package dataplane_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

const cronDoc = `
name: clock
jobs:
  - name: tick
    activation: source
    runtime: dispatcher
    operator: cron_trigger
    outputs: 1
    source: {kind: cron, schedule: rate(5 minutes)}
  - name: on_tick
    activation: reactive
    runtime: ecs_platform
    operator: on_tick
    outputs: 0
    inputs:
      - from: {job: tick, output: 0}
`

// replica is a dispatcher and data plane of its own over a shared store and clock.
func replica(t *testing.T, st store.Store, clock clockwork.Clock) *dataplane.Plane {
	t.Helper()
	d, err := dispatch.New(st, dispatch.Config{Clock: clock, Jitter: func() float64 { return 0.5 }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return dataplane.New(d, dataplane.Config{})
}

func TestCronOneTaskPerTickWithTwoReplicas(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(cronDoc), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		other := replica(t, st, e.Clock)
		sources := []*dataplane.Sources{e.dp.NewSources(), other.NewSources()}
		pass := func() int {
			t.Helper()
			var total atomic.Int64
			var wg sync.WaitGroup
			for _, s := range sources {
				wg.Go(func() {
					n, err := s.RunOnce(e.Ctx)
					if err != nil {
						t.Error(err)
					}
					total.Add(int64(n))
				})
			}
			wg.Wait()
			return int(total.Load())
		}
		// The epoch is 22:13:20; rate(5 minutes) ticks at 22:15:00, 22:20:00, ...
		if got := pass(); got != 0 {
			t.Fatalf("before the first tick: %d tasks", got)
		}
		e.Clock.Advance(100 * time.Second) // 22:15:00
		if got := pass(); got != 1 {
			t.Errorf("at the first tick: %d tasks, want 1", got)
		}
		if got := pass(); got != 0 {
			t.Errorf("the same tick again: %d tasks", got)
		}
		e.Clock.Advance(5 * time.Minute)
		if got := pass(); got != 1 {
			t.Errorf("at the second tick: %d tasks, want 1", got)
		}
		e.Clock.Advance(12 * time.Minute) // 22:32:00: ticks 22:25 and 22:30 passed; only the latest runs
		if got := pass(); got != 1 {
			t.Errorf("after two missed ticks: %d tasks, want 1", got)
		}
		// The server runs the dispatcher job's tasks: each emits its tick on output 0, which
		// routes one on_tick task per tick.
		n, err := e.dp.NewController("server").RunOnce(e.Ctx)
		if err != nil || n != 3 {
			t.Fatalf("controller ran %d tasks: %v", n, err)
		}
		router := e.dp.NewRouter(dataplane.RouteConfig{})
		routed := 0
		for {
			ev, tasks, err := router.RunOnce(e.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			routed += tasks
			if ev == 0 {
				break
			}
		}
		if routed != 3 {
			t.Errorf("routed %d on_tick tasks, want 3", routed)
		}
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"on_tick"}, WorkerID: "w", Limit: 10})
		if err != nil || len(claims) != 3 {
			t.Fatalf("claims %v %v", claims, err)
		}
		var cursors []int64
		for _, c := range claims {
			cursors = append(cursors, *dispatch.DecodeRoute(c.Task).Inputs[0].Cursor)
		}
		first := epoch.Add(100 * time.Second).Unix()
		want := map[int64]bool{first: true, first + 300: true, first + 900: true}
		for _, c := range cursors {
			if !want[c] {
				t.Errorf("cursors %v, want the ticks %v", cursors, want)
				break
			}
		}
	})
}

const alwaysOnDoc = `
name: follow
jobs:
  - name: follower
    activation: source
    runtime: ecs_platform
    operator: follower
    outputs: 1
    heartbeat_timeout_seconds: 30
    max_attempts: 2
    source: {kind: always_on}
`

func TestAlwaysOnKeepsOneTaskAndReplacesIt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(alwaysOnDoc), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		sources := []*dataplane.Sources{e.dp.NewSources(), replica(t, st, e.Clock).NewSources()}
		pass := func() int {
			total := 0
			for _, s := range sources {
				n, err := s.RunOnce(e.Ctx)
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
			return total
		}
		claim := func() *dispatch.Claim {
			t.Helper()
			cs, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"follower"}, WorkerID: "w"})
			if err != nil || len(cs) != 1 {
				t.Fatalf("claim: %v %v", cs, err)
			}
			return cs[0]
		}
		if got := pass(); got != 1 {
			t.Fatalf("first pass: %d tasks, want 1", got)
		}
		first := claim()
		if got := pass(); got != 0 {
			t.Errorf("while it runs: %d tasks", got)
		}
		// Its lease expires: the same task (the source's run) runs again as attempt 2.
		e.Clock.Advance(31 * time.Second)
		e.Reap()
		if got := pass(); got != 0 {
			t.Errorf("after the lease expired: %d new tasks, want the retry only", got)
		}
		e.Clock.Advance(time.Minute) // its retry backoff
		second := claim()
		if second.Task.ID != first.Task.ID || second.Task.Attempt != 2 {
			t.Errorf("retry: task %s attempt %d", second.Task.ID, second.Task.Attempt)
		}
		// Out of attempts: failed for good, and replaced by a new task.
		e.Clock.Advance(31 * time.Second)
		e.Reap()
		if got := pass(); got != 1 {
			t.Errorf("after it failed for good: %d tasks, want 1", got)
		}
		third := claim()
		if third.Task.ID == first.Task.ID {
			t.Error("the replacement is the failed task")
		}
		// A completed run is replaced too.
		e.Succeed(third)
		if got := pass(); got != 1 {
			t.Errorf("after it completed: %d tasks, want 1", got)
		}
	})
}

const cappedDoc = `
name: capped
jobs:
  - name: src
    activation: source
    runtime: ecs_platform
    operator: src
    outputs: 1
    source: {kind: manual}
  - name: work
    activation: reactive
    runtime: ecs_platform
    operator: capped_work
    outputs: 0
    scaling: {max_concurrency: 3}
    inputs:
      - from: {job: src, output: 0}
`

func TestMaxConcurrencyHoldsUnderLoad(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(cappedDoc), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		v, err := e.dp.GetPipeline(e.Ctx, tenant, "capped")
		if err != nil {
			t.Fatal(err)
		}
		ds, _ := st.DatasetGetMany(e.Ctx, []string{v.Jobs()[0].Outputs[0].DatasetUUID})
		emitter := e.Claim(e.Submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"}), "emit")
		const tasks = 24
		var events []report.Event
		for i := range int64(tasks) {
			events = append(events, cursorEvent(ds[0].UUID, ds[0].CurrentVersion, i))
		}
		if _, err := e.dp.Intake().Record(e.Ctx, dispatch.Fence{TaskID: emitter.Task.ID, LeaseToken: emitter.Task.LeaseToken}, events); err != nil {
			t.Fatal(err)
		}
		if _, n, err := e.dp.NewRouter(dataplane.RouteConfig{}).RunOnce(e.Ctx); err != nil || n != tasks {
			t.Fatalf("routed %d: %v", n, err)
		}
		replicas := []*dispatch.Dispatcher{e.D, replica(t, st, e.Clock).Dispatcher()}
		var (
			running, peak atomic.Int64
			done          atomic.Int64
			wg            sync.WaitGroup
		)
		for w := range 8 {
			d := replicas[w%2]
			wg.Go(func() {
				for done.Load() < tasks {
					cs, err := d.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"capped_work"}, WorkerID: "w", Limit: 2})
					if err != nil {
						t.Error(err)
						return
					}
					now := running.Add(int64(len(cs)))
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
					for _, c := range cs {
						running.Add(-1) // before the completion commits: the count never overstates
						if _, err := d.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, LeaseToken: c.Task.LeaseToken,
							Outcome: store.OutcomeSucceeded}); err != nil {
							t.Error(err)
						}
						done.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if p := peak.Load(); p > 3 || p < 2 {
			t.Errorf("peak running %d, want at most 3 (and the cap reached)", p)
		}
		if done.Load() != tasks {
			t.Errorf("completed %d of %d", done.Load(), tasks)
		}
	})
}
