package dataplane_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/wire"
)

// heldDoc is a source whose cursor events feed a job capped at depth (backpressure: pause).
func heldDoc(depth int, age string) string { return heldDocMode(depth, age, "pause") }

// heldDocMode is heldDoc with backpressure_mode mode.
func heldDocMode(depth int, age, mode string) string {
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
    backpressure_mode: ` + mode + `
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
	return newCappedEnvDoc(t, st, heldDoc(depth, age))
}

// newCappedEnvDoc is newCappedEnv with the pipeline doc, one like heldDocMode's.
func newCappedEnvDoc(t testing.TB, st store.Store, doc string) *cappedEnv {
	e := &cappedEnv{env: newEnv(t.(*testing.T), st)}
	if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml"); err != nil {
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
	var evs []report.Event
	for c := from; c < to; c++ {
		evs = append(evs, cursorEvent(e.feed, e.version, c))
	}
	if _, err := e.dp.Intake().Record(e.Ctx, fence(e.emitter), evs); err != nil {
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
	var out []int64
	for _, in := range e.drainInputs() {
		if in.Cursor == nil {
			e.T.Fatalf("input without a cursor: %+v", in)
		}
		out = append(out, *in.Cursor)
	}
	return out
}

// drainInputs claims and completes every ready task of the capped job and returns their
// inputs, in claim order.
func (e *cappedEnv) drainInputs() []wire.DatasetInput {
	e.T.Helper()
	claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"sink"}, WorkerID: "w", Limit: 1000})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []wire.DatasetInput
	for _, c := range claims {
		var r wire.Route
		if err := json.Unmarshal(c.Task.Route, &r); err != nil || len(r.Inputs) != 1 {
			e.T.Fatalf("route of %s: %s, %v", c.Task.ID, c.Task.Route, err)
		}
		out = append(out, r.Inputs[0])
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

// backpressure_mode coalesce: while the job is paused, the events of consecutive cursors of one
// dataset version join one held routing, so that the job catches up with one task that reads
// them all; nothing is lost and the counts say how many events the routing covers.
func TestBackpressureCoalesceCollapsesConsecutiveCursors(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnvDoc(t, st, heldDocMode(10, "", "coalesce"))
		e.flood(0, 60)
		e.route()
		e.flood(60, 100) // a later pass joins the stored routing
		e.route()
		s := e.state()
		if s.State != "paused" || s.Mode != "coalesce" || s.Depth != 10 || s.Held != 1 || s.HeldEvents != 90 {
			t.Fatalf("after the flood: %+v; want paused, depth 10, 1 routing holding 90 events", s)
		}
		first := e.drain()
		e.route()
		rest := e.drainInputs()
		if len(first) != 10 || len(rest) != 1 {
			t.Fatalf("%d then %d tasks, want 10 then 1", len(first), len(rest))
		}
		if in := rest[0]; in.Cursor == nil || *in.Cursor != 10 || in.CursorEnd == nil || *in.CursorEnd != 99 {
			t.Fatalf("the coalesced task's input: %+v; want cursors 10 to 99", in)
		}
		if s := e.state(); s.State != "open" || s.Held != 0 || s.HeldEvents != 0 {
			t.Errorf("after draining: %+v; want open, nothing held", s)
		}
		// The next pause starts a new routing: the events of a task already routed are never
		// joined again.
		e.flood(100, 115)
		e.route()
		if s := e.state(); s.Held != 1 || s.HeldEvents != 5 {
			t.Fatalf("a second flood: %+v; want 1 routing of 5 events", s)
		}
	})
}

// coalesce keeps one routing per partition: a partition published again while the job is
// paused joins the routing already held for it, whatever was held in between.
func TestBackpressureCoalescePartitions(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnvDoc(t, st, heldDocMode(2, "", "coalesce"))
		parts := []int64{0, 10, 20, 30, 20, 30, 20, 40}
		for _, p := range parts {
			// Each from its own task: a task that reports the same event twice reports it once.
			emitter := e.Claim(e.Submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"}), "emit")
			if _, err := e.dp.Intake().Record(e.Ctx, fence(emitter), []report.Event{partition(e.feed, e.version, p, p+9)}); err != nil {
				t.Fatal(err)
			}
			e.route() // one event per pass: each is routed on its own
		}
		if s := e.state(); s.Depth != 2 || s.Held != 3 || s.HeldEvents != 6 {
			t.Fatalf("after the events: %+v; want 2 queued, 3 routings (20-29, 30-39, 40-49) holding 6 events", s)
		}
		var got []string
		for range 10 {
			e.route()
			ins := e.drainInputs()
			if len(ins) == 0 {
				break
			}
			for _, in := range ins {
				got = append(got, in.PartitionKey)
			}
		}
		if want := []string{"0-9", "10-19", "20-29", "30-39", "40-49"}; !slices.Equal(got, want) {
			t.Fatalf("tasks of partitions %v, want %v", got, want)
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

// With coalesce, two replicas routing one job's events on one PostgreSQL join each event once:
// the tasks' cursor ranges cover every cursor exactly once.
func TestBackpressureCoalesceTwoReplicasOnePostgres(t *testing.T) {
	db := storetest.NewPostgresDatabase(t)
	a := newCappedEnvDoc(t, db.Open(t), heldDocMode(20, "", "coalesce"))
	b := newEnv(t, db.Open(t))
	routers := []*dataplane.Router{a.router, b.dp.NewRouter(dataplane.RouteConfig{Batch: 7})}
	var covered []int64 // every cursor the tasks read, in claim order
	tasks := 0
	drain := func() int {
		ins := a.drainInputs()
		tasks += len(ins)
		for _, in := range ins {
			last := *in.Cursor
			if in.CursorEnd != nil {
				last = *in.CursorEnd
			}
			for c := *in.Cursor; c <= last; c++ {
				covered = append(covered, c)
			}
		}
		return len(ins)
	}
	for round := range int64(10) {
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range int64(5) {
				a.flood(round*100+i*20, round*100+i*20+20)
			}
		})
		for _, r := range routers {
			wg.Go(func() {
				for range 20 {
					if _, _, err := r.RunOnce(a.Ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if s := a.state(); s.Depth > 20 {
			t.Fatalf("backlog %d above the cap 20", s.Depth)
		}
		drain()
	}
	for range 100 {
		a.route()
		if drain() == 0 {
			break
		}
	}
	seen := map[int64]bool{}
	for _, c := range covered {
		if seen[c] {
			t.Fatalf("cursor %d read by two tasks", c)
		}
		seen[c] = true
	}
	if len(covered) != 1000 {
		t.Fatalf("the tasks read %d cursors, want 1000", len(covered))
	}
	if tasks >= 1000 {
		t.Errorf("%d tasks for 1000 cursors: nothing was coalesced", tasks)
	}
	t.Logf("%d tasks for 1000 cursors", tasks)
}
