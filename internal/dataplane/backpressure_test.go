package dataplane_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/wire"
)

// heldDoc is a source whose cursor events feed a job capped at depth (backpressure: pause).
func heldDoc(depth int, age string) string {
	extra := fmt.Sprintf("    max_queue_depth: %d\n", depth)
	if age != "" {
		extra += "    max_queue_age: " + age + "\n"
	}
	return `
name: capped
jobs:
  - name: feed
    activation: source
    runtime: ecs_platform
    operator: feed
    outputs: 1
    source: {kind: manual}
  - name: sink
    activation: reactive
    runtime: ecs_platform
    operator: sink
    outputs: 0
    backpressure_mode: pause
` + extra + `    inputs:
      - from: {job: feed, output: 0}
`
}

// cappedEnv is an env with cappedDoc deployed, an emitter of the feed's events and a router.
type cappedEnv struct {
	*env
	router  *dataplane.Router
	emitter *dispatch.Claim
	feed    string // the feed's dataset
	version string
}

func newCappedEnv(t testing.TB, st store.Store, depth int, age string) *cappedEnv {
	e := &cappedEnv{env: newEnv(t.(*testing.T), st)}
	if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(heldDoc(depth, age)), "application/yaml"); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	e.router = e.dp.NewRouter(dataplane.RouteConfig{Batch: 50})
	e.emitter = e.Claim(e.Submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"}), "emit")
	v, err := e.dp.GetPipeline(e.Ctx, tenant, "capped")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := st.DatasetGetMany(e.Ctx, []string{v.Jobs()[0].Outputs[0].DatasetUUID})
	if err != nil || len(ds) != 1 {
		t.Fatalf("feed dataset: %v", err)
	}
	e.feed, e.version = ds[0].UUID, ds[0].CurrentVersion
	return e
}

// flood records cursor events from..to-1 of the feed.
func (e *cappedEnv) flood(from, to int64) {
	e.T.Helper()
	var evs []dispatch.DatasetEvent
	for c := from; c < to; c++ {
		evs = append(evs, cursorEvent(e.feed, e.version, c))
	}
	if _, err := e.D.RecordEvents(e.Ctx, fence(e.emitter), evs); err != nil {
		e.T.Fatalf("record events: %v", err)
	}
}

// route runs the router until the outbox holds no event.
func (e *cappedEnv) route() {
	e.T.Helper()
	for {
		n, _, err := e.router.RunOnce(e.Ctx)
		if err != nil {
			e.T.Fatalf("route: %v", err)
		}
		if n == 0 {
			return
		}
	}
}

func (e *cappedEnv) state() *dataplane.BackpressureView {
	e.T.Helper()
	v, err := e.dp.GetPipeline(e.Ctx, tenant, "capped")
	if err != nil {
		e.T.Fatal(err)
	}
	return v.Jobs()[1].Backpressure
}

// drain claims and completes every ready task of the capped job and returns the cursors of
// their inputs, in claim order.
func (e *cappedEnv) drain() []int64 {
	e.T.Helper()
	claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"sink"}, WorkerID: "w", Limit: 1000})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []int64
	for _, c := range claims {
		var r wire.Route
		if err := json.Unmarshal(c.Task.Route, &r); err != nil || r.Inputs[0].Cursor == nil {
			e.T.Fatalf("route of %s: %s, %v", c.Task.ID, c.Task.Route, err)
		}
		out = append(out, *r.Inputs[0].Cursor)
		e.Succeed(c)
	}
	return out
}

// A job capped at max_queue_depth never has a larger backlog; what it cannot take is held,
// visibly, and released in order as the backlog drains below half the depth, nothing lost.
func TestBackpressurePauseHoldsAndReleasesInOrder(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnv(t, st, 10, "")
		e.flood(0, 100)
		e.route()
		s := e.state()
		if s.State != "paused" || s.Depth != 10 || s.Held != 90 || s.PausedSince == nil || s.LowWater != 5 {
			t.Fatalf("after the flood: %+v; want paused, depth 10, 90 held", s)
		}
		e.Clock.Advance(time.Minute)
		var got []int64
		for range 200 {
			e.route()
			if s := e.state(); s.Depth > 10 {
				t.Fatalf("backlog %d above the cap 10", s.Depth)
			}
			cursors := e.drain()
			if len(cursors) == 0 {
				break
			}
			got = append(got, cursors...)
		}
		if len(got) != 100 {
			t.Fatalf("%d tasks ran, want 100", len(got))
		}
		for i, c := range got {
			if c != int64(i) {
				t.Fatalf("task %d read cursor %d: released out of order (%v)", i, c, got)
			}
		}
		if s := e.state(); s.State != "open" || s.Held != 0 || s.PausedSince != nil {
			t.Errorf("after draining: %+v; want open, nothing held", s)
		}
	})
}

// Held routings wait for the backlog to fall below the low-water mark, half the depth: one
// completion of a full job releases nothing.
func TestBackpressureReleasesBelowLowWater(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnv(t, st, 4, "")
		e.flood(0, 10)
		e.route()
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"sink"}, WorkerID: "w", Limit: 2})
		if err != nil || len(claims) != 2 {
			t.Fatalf("claim 2: %d, %v", len(claims), err)
		}
		e.Succeed(claims[0])
		e.route()
		if s := e.state(); s.Depth != 2 || s.Held != 6 {
			t.Fatalf("backlog 2 of 4 (low water 2): %+v; want nothing released", s)
		}
		e.Succeed(claims[1])
		claims, _ = e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"sink"}, WorkerID: "w", Limit: 1})
		e.Succeed(claims[0])
		e.route()
		if s := e.state(); s.Depth != 4 || s.Held != 3 {
			t.Fatalf("backlog 1 of 4: %+v; want 3 released, filling it to 4", s)
		}
	})
}

// max_queue_age: a job whose oldest ready task has waited that long holds new routings, and
// releases them once its oldest ready task is younger again.
func TestBackpressureAgeHolds(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnv(t, st, 1000, "5m")
		e.flood(0, 3)
		e.route()
		e.Clock.Advance(5 * time.Minute)
		e.flood(3, 5)
		e.route()
		if s := e.state(); s.State != "paused" || s.Depth != 3 || s.Held != 2 {
			t.Fatalf("oldest ready 5m old: %+v; want 2 held", s)
		}
		if got := e.drain(); len(got) != 3 {
			t.Fatalf("drained %v", got)
		}
		e.route()
		if s := e.state(); s.State != "open" || s.Depth != 2 || s.Held != 0 {
			t.Fatalf("after draining: %+v; want the 2 released", s)
		}
	})
}

// Held routings are in the store: a new router (a restart) releases them.
func TestBackpressureHeldSurviveRestart(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnv(t, st, 2, "")
		e.flood(0, 5)
		e.route()
		e.drain()
		e.router = e.dp.NewRouter(dataplane.RouteConfig{})
		e.route()
		if s := e.state(); s.Depth != 2 || s.Held != 1 {
			t.Fatalf("after a restart: %+v; want 2 released, 1 held", s)
		}
	})
}

// Two replicas routing and releasing one job's events on one PostgreSQL never exceed the cap
// and never route a held event twice.
func TestBackpressureTwoReplicasOnePostgres(t *testing.T) {
	db := storetest.NewPostgresDatabase(t)
	a := newCappedEnv(t, db.Open(t), 20, "")
	b := newEnv(t, db.Open(t))
	routers := []*dataplane.Router{a.router, b.dp.NewRouter(dataplane.RouteConfig{Batch: 7})}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range int64(20) {
			a.flood(i*10, i*10+10)
		}
	})
	for _, r := range routers {
		wg.Go(func() {
			for range 100 {
				if _, _, err := r.RunOnce(a.Ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	a.route()
	if s := a.state(); s.Depth != 20 || s.Held != 180 {
		t.Fatalf("after the flood: %+v; want 20 queued, 180 held", s)
	}
	var got []int64
	for range 100 {
		var wg sync.WaitGroup
		for _, r := range routers {
			wg.Go(func() {
				if _, _, err := r.RunOnce(a.Ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if s := a.state(); s.Depth > 20 {
			t.Fatalf("backlog %d above the cap 20", s.Depth)
		}
		cs := a.drain()
		if len(cs) == 0 {
			break
		}
		got = append(got, cs...)
	}
	seen := map[int64]bool{}
	for _, c := range got {
		if seen[c] {
			t.Fatalf("cursor %d routed twice", c)
		}
		seen[c] = true
	}
	if len(got) != 200 {
		t.Fatalf("%d tasks, want 200", len(got))
	}
}
