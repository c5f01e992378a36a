package dataplane_test

import (
	"fmt"
	"testing"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// A partition routed during a build to both versions, whose v1 task of a rebuilt job had not
// ended when the build was activated (activation cancels it: "the build ran their updates"),
// must reach v1's job again when v1 is rolled back to and its datasets move back: otherwise the
// restored version of ranges' dataset misses it for good.
// Whether the worker acknowledges the cancel before the rollback or after it: a task whose
// cancel had not ended is resumed by the builds pass once it has.
func TestRollbackAfterActivationRunsAgainWhatActivationCanceled(t *testing.T) {
	for _, ackFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("acknowledged before the rollback %v", ackFirst), func(t *testing.T) {
			testRollbackAfterActivation(t, ackFirst)
		})
	}
}

func testRollbackAfterActivation(t *testing.T, ackFirst bool) {
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
		v2 := res.Version
		// Partition 2 during the build: v1's ranges task for it is claimed and still running
		// when the build is ready; everything else runs.
		e.emit(partition(blocks, bv, 2, 2))
		var held []*dispatch.Claim
		for range 50 {
			if _, err := e.builds.RunOnce(e.Ctx); err != nil {
				t.Fatal(err)
			}
			held = append(held, e.workHolding(func(c *dispatch.Claim) bool {
				return c.Route.Job.Version == v1 && c.Route.Job.Name == "ranges"
			})...)
			if v := e.pipeline("chain"); v.Build != nil && v.Build.State == "ready" {
				break
			}
		}
		if len(held) != 1 || e.ran["ranges "+v2+" 2-2"] != 1 {
			t.Fatalf("held %d v1 ranges tasks, ran %v; want v1's ranges 2-2 held and v2's run", len(held), e.ran)
		}
		if _, canceled, err := e.dp.Activate(e.Ctx, tenant, "chain", v2, false); err != nil || canceled != 1 {
			t.Fatalf("activate: canceled %d, %v; want v1's running ranges task canceled", canceled, err)
		}
		ack := func() {
			if _, err := e.Report(held[0], store.OutcomeCanceled, nil); err != nil {
				t.Fatalf("report the cancel: %v", err)
			}
		}
		if ackFirst {
			ack()
		}
		if _, _, err := e.dp.Rollback(e.Ctx, tenant, "chain", v1); err != nil {
			t.Fatal(err)
		}
		if !ackFirst {
			ack()
			if _, err := e.builds.RunOnce(e.Ctx); err != nil {
				t.Fatal(err)
			}
		}
		if cur := e.current(ranges); cur != r1 {
			t.Fatalf("after the rollback ranges' dataset is at %s, want %s", cur, r1)
		}
		e.work()
		// v1's version of ranges' dataset, current again, has partition 1 but not 2.
		if e.ran["ranges "+v1+" 2-2"] != 1 || e.ran["totals "+v1+" 2-2"] != 1 {
			t.Errorf("after the rollback, v1's ranges and totals ran partition 2-2 %d and %d times, want once each: "+
				"the update activation canceled on v1 (the build had run it) is lost to the dataset version the rollback restores; ran %v",
				e.ran["ranges "+v1+" 2-2"], e.ran["totals "+v1+" 2-2"], e.ran)
		}
	})
}
