package dataplane_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// rangesChanged is chainDoc with a config change to its middle job, ranges: ranges and totals,
// which reads what ranges writes, are rebuilt; the follower, mainnet and testnets are not.
var rangesChanged = strings.Replace(chainDoc, "    operator: range_builder\n", "    operator: range_builder\n    config: {width: 2}\n", 1)

// buildEnv is a pipelineEnv with the builds service and a worker that runs every task, each
// reporting a partition of every output it writes, at the version its route names, for the
// partition that started it.
type buildEnv struct {
	*pipelineEnv
	builds *dataplane.Builds
	// ran counts the completed tasks by "job version partition".
	ran map[string]int
}

func newBuildEnv(t *testing.T, st store.Store) *buildEnv {
	e := &buildEnv{pipelineEnv: newPipelineEnv(t, st), ran: map[string]int{}}
	e.builds = e.dp.NewBuilds(dataplane.BuildConfig{Batch: 2})
	return e
}

var chainQueues = []string{"range_builder", "totals", "alerts", "alerts_test"}

// work routes and runs tasks until none is ready.
func (e *buildEnv) work() {
	e.T.Helper()
	e.workHolding(nil)
}

// workHolding is work, except that the claims hold picks (none when hold is nil) are left
// running, and returned.
func (e *buildEnv) workHolding(hold func(*dispatch.Claim) bool) []*dispatch.Claim {
	e.T.Helper()
	var held []*dispatch.Claim
	for range 100 {
		e.route()
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: chainQueues, WorkerID: "w", Limit: 1000})
		if err != nil {
			e.T.Fatal(err)
		}
		if len(claims) == 0 {
			return held
		}
		for _, c := range claims {
			if hold != nil && hold(c) {
				held = append(held, c)
				continue
			}
			var fired string
			for _, in := range c.Route.Inputs {
				if in.PartitionKey != "" {
					fired = in.PartitionKey
				}
			}
			var events []report.Event
			for _, o := range c.Route.Outputs {
				var start, end int64
				fmt.Sscanf(fired, "%d-%d", &start, &end)
				events = append(events, partition(o.DatasetUUID, o.DatasetVersion, start, end))
			}
			if len(events) > 0 {
				if _, err := e.dp.Intake().Record(e.Ctx, fence(c), events); err != nil {
					e.T.Fatalf("record events of %s: %v", c.Route.Job.Name, err)
				}
			}
			e.Succeed(c)
			e.ran[c.Route.Job.Name+" "+c.Route.Job.Version+" "+fired]++
		}
	}
	e.T.Fatal("tasks kept coming")
	return nil
}

// build runs the builds service, routing and the worker until the build is ready or activated.
func (e *buildEnv) build() *dataplane.PipelineView {
	e.T.Helper()
	for range 50 {
		if _, err := e.builds.RunOnce(e.Ctx); err != nil {
			e.T.Fatalf("builds: %v", err)
		}
		e.work()
		v := e.pipeline("chain")
		if v.Build == nil || v.Build.State == dataplane.BuildReady {
			return v
		}
	}
	e.T.Fatal("the build never got ready")
	return nil
}

func (e *buildEnv) current(uuid string) string {
	e.T.Helper()
	ds, err := e.Store.DatasetGetMany(e.Ctx, []string{uuid})
	if err != nil || len(ds) != 1 {
		e.T.Fatalf("dataset %s: %v %v", uuid, ds, err)
	}
	return ds[0].CurrentVersion
}

// A changed deploy rebuilds the changed job and what reads it beside the live version, which
// keeps routing and serving its own versions; activation moves every rebuilt dataset and the
// pipeline at once; a rollback moves them all back. Every partition runs once per version.
func TestChangedDeployBuildsBesideTheLiveVersionUntilOneCutover(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBuildEnv(t, st)
		v1 := e.view.Pipeline.ActiveVersion
		blocks, bv := e.output("follower", 0)
		ranges, r1 := e.output("ranges", 0)
		e.emit(partition(blocks, bv, 1, 1), partition(blocks, bv, 2, 2))
		e.work()

		res, err := e.dp.Deploy(e.Ctx, tenant, []byte(rangesChanged), "application/yaml")
		if err != nil || !res.Building || res.Activated || !res.Created {
			t.Fatalf("deploy: %+v %v; want a new version building", res, err)
		}
		v2 := res.Version
		view := e.pipeline("chain")
		if view.Pipeline.ActiveVersion != v1 || view.Pipeline.BuildingVersion != v2 || view.Build == nil ||
			view.Build.State != dataplane.BuildBuilding || view.Build.Base != v1 {
			t.Fatalf("after the deploy: %+v build %+v", view.Pipeline, view.Build)
		}
		var rebuilt []string
		for _, j := range view.Build.Jobs {
			rebuilt = append(rebuilt, j.Name)
		}
		if !slices.Equal(rebuilt, []string{"ranges", "totals"}) || len(view.Build.Datasets) != 1 ||
			view.Build.Datasets[0].DatasetUUID != ranges || view.Build.Datasets[0].CurrentVersion != r1 {
			t.Fatalf("build: jobs %v datasets %+v; want ranges and totals, and a new version of ranges' output", rebuilt, view.Build.Datasets)
		}
		r2 := view.Build.Datasets[0].CandidateVersion
		if _, _, err := e.dp.Activate(e.Ctx, tenant, "chain", v2, false); !isConflict(err, "pipeline_version_not_ready") {
			t.Errorf("activate before ready: %v; want 409 pipeline_version_not_ready", err)
		}

		// During the build a new partition reaches both versions; readers see v1's.
		e.emit(partition(blocks, bv, 3, 3))
		got := e.build()
		if got.Build == nil || got.Build.State != dataplane.BuildReady || got.Pipeline.ActiveVersion != v1 {
			t.Fatalf("after the build: %+v %+v", got.Pipeline, got.Build)
		}
		if cur := e.current(ranges); cur != r1 {
			t.Errorf("during the build ranges' dataset is at %s, want v1's %s", cur, r1)
		}
		// Deployed again while ready: nothing changes.
		if again, err := e.dp.Deploy(e.Ctx, tenant, []byte(rangesChanged), "application/yaml"); err != nil || !again.Building || again.Created {
			t.Errorf("deployed again: %+v %v", again, err)
		}

		act, canceled, err := e.dp.Activate(e.Ctx, tenant, "chain", v2, false)
		if err != nil || !act.Activated || canceled != 0 {
			t.Fatalf("activate: %+v canceled %d, %v", act, canceled, err)
		}
		if cur := e.current(ranges); cur != r2 {
			t.Errorf("after activation ranges' dataset is at %s, want the build's %s", cur, r2)
		}
		if cur := e.current(blocks); cur != bv {
			t.Errorf("blocks, not rebuilt, moved to %s", cur)
		}
		// After the cutover the new version routes alone.
		e.emit(partition(blocks, bv, 4, 4))
		e.work()

		want := map[string]int{}
		for _, p := range []string{"1-1", "2-2", "3-3"} {
			for _, j := range []string{"ranges", "totals", "mainnet", "testnets"} {
				want[j+" "+v1+" "+p] = 1
			}
			want["ranges "+v2+" "+p], want["totals "+v2+" "+p] = 1, 1
		}
		for _, j := range []string{"ranges", "totals", "mainnet", "testnets"} {
			want[j+" "+v2+" 4-4"] = 1
		}
		if !mapsEqual(e.ran, want) {
			t.Errorf("ran %v\nwant %v", e.ran, want)
		}

		rb, _, err := e.dp.Rollback(e.Ctx, tenant, "chain", "")
		if err != nil || rb.Version != v1 {
			t.Fatalf("rollback: %+v %v", rb, err)
		}
		if cur := e.current(ranges); cur != r1 {
			t.Errorf("after the rollback ranges' dataset is at %s, want v1's %s again", cur, r1)
		}
		// v1's ranges catches up on what v2 ran in its place (partition 4), and totals after it;
		// mainnet and testnets, whose datasets did not move, do not run it again.
		e.work()
		want["ranges "+v1+" 4-4"], want["totals "+v1+" 4-4"] = 1, 1
		e.emit(partition(blocks, bv, 5, 5))
		e.work()
		for _, j := range []string{"ranges", "totals", "mainnet", "testnets"} {
			want[j+" "+v1+" 5-5"] = 1
		}
		if !mapsEqual(e.ran, want) {
			t.Errorf("after the rollback ran %v\nwant %v", e.ran, want)
		}
		// And forward again: the build's versions come back, with no rebuild; v2 catches up on
		// partition 5 only.
		fwd, err := e.dp.Deploy(e.Ctx, tenant, []byte(rangesChanged), "application/yaml")
		if err != nil || !fwd.Activated || fwd.Building {
			t.Fatalf("deploy v2 again: %+v %v", fwd, err)
		}
		if cur := e.current(ranges); cur != r2 {
			t.Errorf("v2 deployed again: ranges' dataset is at %s, want %s", cur, r2)
		}
		e.work()
		want["ranges "+v2+" 5-5"], want["totals "+v2+" 5-5"] = 1, 1
		if !mapsEqual(e.ran, want) {
			t.Errorf("after v2 again ran %v\nwant %v", e.ran, want)
		}
	})
}

// A build is abandoned by DELETE (Abandon), a newer deploy or a rollback: its tasks are canceled,
// what they report is not routed, and the live version is as it was.
func TestAbandonedBuildLeavesTheLiveVersionAsItWas(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBuildEnv(t, st)
		v1 := e.view.Pipeline.ActiveVersion
		blocks, bv := e.output("follower", 0)
		ranges, r1 := e.output("ranges", 0)
		e.emit(partition(blocks, bv, 1, 1))
		e.work()
		res, err := e.dp.Deploy(e.Ctx, tenant, []byte(rangesChanged), "application/yaml")
		if err != nil || !res.Building {
			t.Fatalf("deploy: %+v %v", res, err)
		}
		if _, err := e.builds.RunOnce(e.Ctx); err != nil {
			t.Fatal(err)
		}
		e.route()
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"range_builder"}, WorkerID: "w"})
		if err != nil || len(claims) != 1 || claims[0].Route.Job.Version != res.Version {
			t.Fatalf("claim of the build's task: %v %v", claims, err)
		}
		canceled, err := e.dp.Abandon(e.Ctx, tenant, "chain", res.Version)
		if err != nil || canceled != 1 {
			t.Fatalf("abandon: canceled %d, %v; want 1", canceled, err)
		}
		hb, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: claims[0].Task.ID, LeaseToken: claims[0].Task.LeaseToken})
		if err != nil || !hb.ShouldCancel {
			t.Errorf("heartbeat of the abandoned build's task: %+v %v; want should_cancel", hb, err)
		}
		// What it reports afterwards is stored, not routed.
		out := claims[0].Route.Outputs[0]
		if _, err := e.dp.Intake().Record(e.Ctx, fence(claims[0]), []report.Event{partition(out.DatasetUUID, out.DatasetVersion, 1, 1)}); err != nil {
			t.Fatal(err)
		}
		if n := e.route(); n != 0 {
			t.Errorf("the abandoned build's event routed %d tasks", n)
		}
		v := e.pipeline("chain")
		if v.Pipeline.ActiveVersion != v1 || v.Pipeline.BuildingVersion != "" || v.Build != nil || e.current(ranges) != r1 {
			t.Errorf("after abandon: %+v build %+v", v.Pipeline, v.Build)
		}
		if _, _, err := e.dp.Activate(e.Ctx, tenant, "chain", res.Version, true); !isConflict(err, "pipeline_version_not_building") {
			t.Errorf("activate an abandoned version: %v; want 409 pipeline_version_not_building", err)
		}
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(rangesChanged), "application/yaml"); !isConflict(err, "pipeline_version_abandoned") {
			t.Errorf("deploy the abandoned text again: %v; want 409 pipeline_version_abandoned", err)
		}
		// A newer deploy abandons the build under way.
		b3, err := e.dp.Deploy(e.Ctx, tenant, []byte(strings.Replace(rangesChanged, "width: 2", "width: 3", 1)), "application/yaml")
		if err != nil || !b3.Building {
			t.Fatalf("deploy v3: %+v %v", b3, err)
		}
		b4, err := e.dp.Deploy(e.Ctx, tenant, []byte(strings.Replace(rangesChanged, "width: 2", "width: 4", 1)), "application/yaml")
		if err != nil || !b4.Building || b4.Abandoned != b3.Version {
			t.Fatalf("deploy v4: %+v %v; want v3 abandoned", b4, err)
		}
		// A rollback abandons it too, and is refused to a version that never ran.
		if _, _, err := e.dp.Rollback(e.Ctx, tenant, "chain", b4.Version); !isConflict(err, "pipeline_version_never_active") {
			t.Errorf("rollback to a building version: %v; want 409", err)
		}
		imm, err := e.dp.DeployBy(e.Ctx, dataplane.Deployer{Tenant: tenant, Activate: dataplane.ActivateImmediate},
			[]byte(strings.Replace(rangesChanged, "width: 2", "width: 5", 1)), "application/yaml")
		if err != nil || !imm.Activated || imm.Building || imm.Abandoned != b4.Version {
			t.Fatalf("deploy with activate=immediate: %+v %v", imm, err)
		}
		if _, err := e.dp.DeployBy(e.Ctx, dataplane.Deployer{Tenant: tenant, Activate: "later"}, []byte(chainDoc), "application/yaml"); !errors.As(err, new(*dispatch.InvalidError)) {
			t.Errorf("activate=later: %v; want 400", err)
		}
	})
}

// A build deployed with activate=when_ready is activated by the builds service when ready.
func TestBuildActivatesWhenReady(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBuildEnv(t, st)
		blocks, bv := e.output("follower", 0)
		ranges, _ := e.output("ranges", 0)
		e.emit(partition(blocks, bv, 1, 1))
		e.work()
		res, err := e.dp.DeployBy(e.Ctx, dataplane.Deployer{Tenant: tenant, Activate: dataplane.ActivateWhenReady}, []byte(rangesChanged), "application/yaml")
		if err != nil || !res.Building {
			t.Fatalf("deploy: %+v %v", res, err)
		}
		e.build()
		if _, err := e.builds.RunOnce(e.Ctx); err != nil {
			t.Fatal(err)
		}
		v := e.pipeline("chain")
		if v.Pipeline.ActiveVersion != res.Version || v.Build != nil {
			t.Fatalf("after ready: %+v %+v; want %s active", v.Pipeline, v.Build, res.Version)
		}
		if cur := e.current(ranges); cur == "" {
			t.Error("no current version")
		}
		if e.ran["ranges "+res.Version+" 1-1"] != 1 || e.ran["totals "+res.Version+" 1-1"] != 1 {
			t.Errorf("ran %v", e.ran)
		}
	})
}

// A change that does not change what a job writes (retries here) takes over at once.
func TestDeployWithoutMaterializingChangeActivatesAtOnce(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBuildEnv(t, st)
		res, err := e.dp.Deploy(e.Ctx, tenant, []byte(strings.Replace(chainDoc, "max_attempts: 2", "max_attempts: 5", 1)), "application/yaml")
		if err != nil || !res.Activated || res.Building {
			t.Fatalf("deploy: %+v %v", res, err)
		}
	})
}

func isConflict(err error, code string) bool {
	var ce *dispatch.ConflictError
	return errors.As(err, &ce) && ce.Code == code
}

// A rebuilt always_on source runs once under the build, beside the active version's runs, which
// go on: the build's run does not count as the active version's.
func TestBuildRunsARebuiltSourceBesideTheLiveOne(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBuildEnv(t, st)
		sources := e.dp.NewSources()
		if n, err := sources.RunOnce(e.Ctx); err != nil || n != 1 {
			t.Fatalf("sources: %d %v; want v1's follower run", n, err)
		}
		res, err := e.dp.Deploy(e.Ctx, tenant, []byte(strings.Replace(chainDoc, "    operator: block_follower\n", "    operator: block_follower\n    config: {start_block: 7}\n", 1)), "application/yaml")
		if err != nil || !res.Building {
			t.Fatalf("deploy: %+v %v", res, err)
		}
		if _, err := e.builds.RunOnce(e.Ctx); err != nil {
			t.Fatal(err)
		}
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"block_follower"}, WorkerID: "w", Limit: 10})
		if err != nil || len(claims) != 2 {
			t.Fatalf("claims: %v %v; want v1's run and the build's", claims, err)
		}
		var live *dispatch.Claim
		for _, c := range claims {
			if c.Route.Job.Version != res.Version {
				live = c
			} else if string(c.Route.Trigger) != `{"kind":"build","version":"`+res.Version+`"}` {
				t.Errorf("the build's run has trigger %s", c.Route.Trigger)
			}
		}
		e.Succeed(live)
		if n, err := sources.RunOnce(e.Ctx); err != nil || n != 1 {
			t.Errorf("sources after v1's run ended, while the build's runs: %d %v; want v1's next run", n, err)
		}
		if _, err := e.builds.RunOnce(e.Ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.pipeline("chain").Build.Jobs[0].Counts["routed"]; got != 1 {
			t.Errorf("the build started %d runs of the follower, want 1", got)
		}
	})
}

// The same changed document deployed at the same moment by many requests makes one build, and
// none of them activates it.
func TestConcurrentDeploysOfAChangeMakeOneBuild(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBuildEnv(t, st)
		v1 := e.view.Pipeline.ActiveVersion
		var wg sync.WaitGroup
		results := make(chan *dataplane.DeployResult, 8)
		for range 8 {
			wg.Go(func() {
				res, err := e.dp.Deploy(e.Ctx, tenant, []byte(rangesChanged), "application/yaml")
				if err != nil {
					t.Errorf("deploy: %v", err)
					return
				}
				results <- res
			})
		}
		wg.Wait()
		close(results)
		created := 0
		for res := range results {
			if res.Created {
				created++
			}
			if !res.Building || res.Activated {
				t.Errorf("a concurrent deploy answered %+v; want building, not activated", res)
			}
		}
		v := e.pipeline("chain")
		if created != 1 || v.Pipeline.ActiveVersion != v1 || v.Build == nil || v.Build.State != dataplane.BuildBuilding {
			t.Errorf("%d created; pipeline %+v build %+v", created, v.Pipeline, v.Build)
		}
	})
}
