package dataplane_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// ran is one task of a pipeline job, as the rollback tests follow them.
type ran struct {
	job, version, update string // the pipeline job, its version, and the partition its input fired
	status               lifecycle.TaskStatus
	maxAttempts          int
}

// ranTasks lists the tasks of the tenant's pipeline jobs of pipeline p.
func (e *env) ranTasks(p string) []ran {
	e.T.Helper()
	jobs, err := e.Store.JobList(e.Ctx, store.ListJobsParams{Tenant: tenant, Limit: 1000})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []ran
	for _, j := range jobs {
		if j.Pipeline != p {
			continue
		}
		tasks, err := e.Store.TaskListByJob(e.Ctx, j.ID)
		if err != nil || len(tasks) != 1 {
			e.T.Fatalf("tasks of %s: %v %v", j.ID, tasks, err)
		}
		task, err := e.Store.TaskGet(e.Ctx, tasks[0].ID)
		if err != nil {
			e.T.Fatal(err)
		}
		r := ran{job: j.PipelineJob, version: j.PipelineVersion, status: task.Status, maxAttempts: task.MaxAttempts}
		route := dispatch.DecodeRoute(task)
		if route == nil || route.Job.Version != j.PipelineVersion {
			e.T.Fatalf("task of job %s (version %s) has route %+v", j.ID, j.PipelineVersion, route)
		}
		for _, in := range route.Inputs {
			switch {
			case in.PartitionKey != "":
				r.update = in.PartitionKey
			case in.Cursor != nil:
				r.update = fmt.Sprint(*in.Cursor)
			}
		}
		out = append(out, r)
	}
	return out
}

// completed maps "job update" to the versions its completed tasks ran under.
func completed(rs []ran) map[string][]string {
	out := map[string][]string{}
	for _, r := range rs {
		if r.status == lifecycle.Completed {
			out[r.job+" "+r.update] = append(out[r.job+" "+r.update], r.version)
		}
	}
	return out
}

// runAll routes and runs every ready task of the queues until none is left, reporting each
// claimed task done (with no events), and returns how many it ran.
func (e *pipelineEnv) runAll(queues ...string) int {
	e.T.Helper()
	n := 0
	for range 100 {
		e.route()
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: queues, WorkerID: "w", Limit: 1000})
		if err != nil {
			e.T.Fatal(err)
		}
		if len(claims) == 0 {
			return n
		}
		for _, c := range claims {
			e.Succeed(c)
			n++
		}
	}
	e.T.Fatal("tasks kept coming")
	return n
}

// deployDoc deploys doc and returns its version, which must be new and active.
func (e *env) deployDoc(doc string) string {
	e.T.Helper()
	res, err := e.dp.Deploy(e.Ctx, tenant, []byte(doc), "application/yaml")
	if err != nil || !res.Activated {
		e.T.Fatalf("deploy: %+v %v", res, err)
	}
	return res.Version
}

// Issue 50 row 1: a rollback loses no event. What the replaced version had not finished is
// routed again under the restored one, once; what it finished is not; the same event posted
// again routes nothing more.
func TestRollbackRoutesAgainWhatTheReplacedVersionHadNotFinished(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		v1 := e.view.Pipeline.ActiveVersion
		v2 := e.deployDoc(strings.Replace(chainDoc, "max_attempts: 2", "max_attempts: 3", 1))
		blocks, v := e.output("follower", 0)
		e.emit(partition(blocks, v, 1, 1), partition(blocks, v, 2, 2), partition(blocks, v, 3, 3))
		if got := e.route(); got != 9 {
			t.Fatalf("routed %d, want 9 (3 jobs × 3 partitions)", got)
		}
		// v2's ranges job finishes partition 1.
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"range_builder"}, WorkerID: "w"})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v %v", claims, err)
		}
		e.Succeed(claims[0])

		rb, canceled, err := e.dp.Rollback(e.Ctx, tenant, "chain", "")
		if err != nil || rb.Version != v1 || !rb.Activated || canceled != 8 {
			t.Fatalf("rollback: %+v canceled %d, %v; want %s and 8 jobs canceled", rb, canceled, err, v1)
		}
		if got := e.route(); got != 8 {
			t.Errorf("after the rollback routed %d, want the 8 updates v2 had not finished", got)
		}
		// Posted again, under either version's producer: nothing more.
		e.emit(partition(blocks, v, 1, 1), partition(blocks, v, 2, 2), partition(blocks, v, 3, 3))
		if got := e.route(); got != 0 {
			t.Errorf("the same partitions posted again routed %d", got)
		}
		// A rollback again (to v1, which is active) cancels and routes nothing.
		if rb, canceled, err := e.dp.Rollback(e.Ctx, tenant, "chain", v1); err != nil || rb.Activated || canceled != 0 {
			t.Errorf("rollback to the active version: %+v canceled %d, %v", rb, canceled, err)
		}
		if got := e.route(); got != 0 {
			t.Errorf("a repeated rollback routed %d", got)
		}
		e.runAll("range_builder", "alerts", "alerts_test")
		want := map[string][]string{}
		for _, job := range []string{"ranges", "mainnet", "testnets"} {
			for _, p := range []string{"1-1", "2-2", "3-3"} {
				want[job+" "+p] = []string{v1}
			}
		}
		want["ranges 1-1"] = []string{v2}
		got := completed(e.ranTasks("chain"))
		for k, w := range want {
			if !slices.Equal(got[k], w) {
				t.Errorf("%s completed under %v, want %v", k, got[k], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("completed %v, want %v", got, want)
		}
	})
}

// Issue 50 row 2: routings held by backpressure under the replaced version are released after
// the rollback as tasks of the restored version (its pipeline_version and its job's settings).
func TestRollbackReleasesHeldRoutingsUnderTheRestoredVersion(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnv(t, st, 2, "")
		v1, err := e.dp.GetPipeline(e.Ctx, tenant, "capped")
		if err != nil {
			t.Fatal(err)
		}
		v2 := e.deployDoc(strings.Replace(heldDoc(2, ""), "    operator: sink\n", "    operator: sink\n    max_attempts: 7\n", 1))
		e.flood(1, 7)
		e.route()
		if s := e.state(); s.Depth != 2 || s.Held != 4 {
			t.Fatalf("under v2: %+v; want 2 tasks and 4 held", s)
		}
		if _, canceled, err := e.dp.Rollback(e.Ctx, tenant, "capped", ""); err != nil || canceled != 2 {
			t.Fatalf("rollback: canceled %d, %v; want 2", canceled, err)
		}
		var cursors []int64
		for range 20 {
			e.route()
			got := e.drain()
			if len(got) == 0 {
				break
			}
			cursors = append(cursors, got...)
		}
		// What the job held stays ahead of what the rollback routed again: 3..6 first.
		if !slices.Equal(cursors[:4], []int64{3, 4, 5, 6}) || !slices.Equal(slices.Sorted(slices.Values(cursors)), []int64{1, 2, 3, 4, 5, 6}) {
			t.Errorf("ran cursors %v, want 3..6 (held), then 1 and 2 (routed again), each once", cursors)
		}
		for _, r := range e.ranTasks("capped") {
			switch {
			case r.status == lifecycle.Canceled && r.version == v2:
			case r.status == lifecycle.Completed && r.version == v1.Pipeline.ActiveVersion && r.maxAttempts != 7:
			default:
				t.Errorf("task %+v: want v2's canceled, or v1's (max_attempts not 7) completed", r)
			}
		}
	})
}

// Issue 50 row 4: leasing and dispatch stop for the rolled-back version: its pending tasks are
// canceled (a claim answers Canceled), its running ones asked to stop (should_cancel), and what
// they report afterwards is stored, never routed.
func TestRollbackCancelsRunningTasksAndRoutesNothingTheyReport(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		v1 := e.view.Pipeline.ActiveVersion
		e.deployDoc(strings.Replace(chainDoc, "max_attempts: 2", "max_attempts: 3", 1))
		blocks, v := e.output("follower", 0)
		e.emit(partition(blocks, v, 0, 9))
		if got := e.route(); got != 3 {
			t.Fatalf("routed %d, want 3", got)
		}
		running, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"range_builder"}, WorkerID: "w"})
		if err != nil || len(running) != 1 {
			t.Fatalf("claim: %v %v", running, err)
		}
		pending, err := st.PipelineTasksUnfinished(e.Ctx, store.PipelineVersionKey{Tenant: tenant, Pipeline: "chain", Version: running[0].Route.Job.Version})
		if err != nil || len(pending) != 3 {
			t.Fatalf("unfinished: %v %v", pending, err)
		}
		if _, canceled, err := e.dp.Rollback(e.Ctx, tenant, "chain", ""); err != nil || canceled != 3 {
			t.Fatalf("rollback: canceled %d, %v; want 3", canceled, err)
		}
		hb, err := e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: running[0].Task.ID, LeaseToken: running[0].Task.LeaseToken})
		if err != nil || !hb.ShouldCancel || hb.CancelReason != "pipeline_rolled_back" {
			t.Errorf("heartbeat of the running task: %+v %v; want should_cancel (pipeline_rolled_back)", hb, err)
		}
		for _, ref := range pending {
			if ref.TaskID == running[0].Task.ID {
				continue
			}
			_, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: ref.TaskID, WorkerID: "w"})
			if nc := dispatchtest.WantErr[*dispatch.NotClaimedError](t, err); nc != nil && nc.Reason != dispatch.NotClaimedCanceled {
				t.Errorf("claim of a canceled task: %v, want Canceled", nc.Reason)
			}
		}
		if got := e.route(); got != 3 {
			t.Errorf("after the rollback routed %d, want the 3 updates again under v1", got)
		}
		// The running task ignores should_cancel and reports what it wrote: stored, not routed.
		ranges, rv := e.output("ranges", 0)
		c := running[0].Task
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.ID, Attempt: c.Attempt, LeaseToken: c.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{partition(ranges, rv, 0, 9)}}); err != nil {
			t.Fatal(err)
		}
		if evs, err := st.DatasetEventListByTask(e.Ctx, c.ID); err != nil || len(evs) != 1 {
			t.Errorf("stored events of the rolled-back task: %v %v; want its one event", evs, err)
		}
		if got := e.route(); got != 0 {
			t.Errorf("the rolled-back version's event routed %d tasks", got)
		}
		// v1's own ranges task reports the same partition: routed to v1's totals.
		claims, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"range_builder"}, WorkerID: "w"})
		if err != nil || len(claims) != 1 || claims[0].Route.Job.Version != v1 {
			t.Fatalf("claim v1's ranges task: %v %v", claims, err)
		}
		c = claims[0].Task
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.ID, Attempt: c.Attempt, LeaseToken: c.LeaseToken,
			Outcome: store.OutcomeSucceeded, Events: []report.Event{partition(ranges, rv, 0, 9)}}); err != nil {
			t.Fatal(err)
		}
		if got := e.route(); got != 1 {
			t.Errorf("v1's event routed %d tasks, want 1 (totals)", got)
		}
		// Deployed again, the rolled-back version's tasks route again.
		if _, err := e.dp.Deploy(e.Ctx, tenant, []byte(strings.Replace(chainDoc, "max_attempts: 2", "max_attempts: 3", 1)), "application/yaml"); err != nil {
			t.Fatal(err)
		}
		e.emit(partition(blocks, v, 10, 19))
		if got := e.route(); got != 3 {
			t.Errorf("after deploying v2 again routed %d, want 3", got)
		}
	})
}

// rollbackDoc is chainDoc with backpressure on testnets: at most one task waits.
var rollbackDoc = strings.Replace(chainDoc, "    queue: alerts_test\n", "    queue: alerts_test\n    max_queue_depth: 1\n", 1)

// Issue 50: events posted before, during and after a rollback, with routings held by
// backpressure and tasks running across it, each run exactly once per consuming job, under the
// version that was active when it ran to completion.
func TestRollbackEveryEventOnceUnderTheRightVersion(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		pe := &pipelineEnv{env: e, router: e.dp.NewRouter(dataplane.RouteConfig{})}
		v1 := e.deployDoc(rollbackDoc)
		pe.view = pe.pipeline("chain")
		pe.emitter = e.Claim(e.Submit(lifecycle.TaskSpec{Key: "emit", Name: "emit"}), "emit")
		blocks, v := pe.output("follower", 0)
		claimOne := func(queue string) *dispatch.Claim {
			t.Helper()
			cs, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{queue}, WorkerID: "w"})
			if err != nil || len(cs) != 1 {
				t.Fatalf("claim from %s: %v %v", queue, cs, err)
			}
			return cs[0]
		}

		// Before: p0 under v1. Its ranges task completes, its mainnet task runs across the
		// rollback, its testnets task waits (and fills testnets' backlog).
		pe.emit(partition(blocks, v, 0, 0))
		pe.route()
		e.Succeed(claimOne("range_builder"))
		mainnet0 := claimOne("alerts")

		// During: v2 is active; p1 and p2 route to it, testnets' held by backpressure.
		v2 := e.deployDoc(strings.Replace(rollbackDoc, "max_attempts: 2", "max_attempts: 3", 1))
		pe.emit(partition(blocks, v, 1, 1), partition(blocks, v, 2, 2))
		pe.route()
		bp := pe.pipeline("chain").Backpressure["testnets"]
		if bp == nil || bp.Held != 2 {
			t.Fatalf("testnets backpressure %+v, want 2 held", bp)
		}
		e.Succeed(claimOne("range_builder")) // v2 finishes ranges p1
		mainnet1 := claimOne("alerts")       // v2's mainnet p1 runs across the rollback
		if mainnet1.Route.Job.Version != v2 {
			t.Fatalf("mainnet p1 runs under %s, want v2", mainnet1.Route.Job.Version)
		}

		if _, _, err := e.dp.Rollback(e.Ctx, tenant, "chain", ""); err != nil {
			t.Fatal(err)
		}
		// The running tasks: v1's keeps running and completes; v2's acknowledges the cancel.
		e.Succeed(mainnet0)
		if _, err := e.Report(mainnet1, store.OutcomeCanceled, nil); err != nil {
			t.Fatal(err)
		}

		// After: p3, and p1 again.
		pe.emit(partition(blocks, v, 3, 3), partition(blocks, v, 1, 1))
		pe.runAll("range_builder", "alerts", "alerts_test")

		want := map[string][]string{}
		for _, job := range []string{"ranges", "mainnet", "testnets"} {
			for p := range 4 {
				want[fmt.Sprintf("%s %d-%d", job, p, p)] = []string{v1}
			}
		}
		want["ranges 1-1"] = []string{v2}
		got := completed(pe.ranTasks("chain"))
		for k, w := range want {
			if !slices.Equal(got[k], w) {
				t.Errorf("%s completed under %v, want %v", k, got[k], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("completed %v, want %v", got, want)
		}
		if bp := pe.pipeline("chain").Backpressure["testnets"]; bp == nil || bp.Held != 0 {
			t.Errorf("testnets backpressure %+v, want nothing held", bp)
		}
	})
}

// A rollback of a pipeline that does not exist, or to a version it does not have, changes nothing.
func TestRollbackRefusals(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		if _, _, err := e.dp.Rollback(e.Ctx, tenant, "nope", ""); !errors.Is(err, dataplane.ErrPipelineNotFound) {
			t.Errorf("rollback of an unknown pipeline: %v", err)
		}
		if _, _, err := e.dp.Rollback(e.Ctx, tenant, "chain", "nope"); err == nil {
			t.Error("rollback to an unknown version succeeded")
		}
		if _, _, err := e.dp.Rollback(e.Ctx, tenant, "chain", ""); err == nil {
			t.Error("rollback of a pipeline with one version succeeded")
		}
	})
}

// Issue 50 row 6: routings released together become tasks in the order they were held, which
// is the order they are claimed in: cursor 10 after 9, not after 5 as its key's text sorts.
func TestBackpressureReleasesInTheOrderHeld(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newCappedEnv(t, st, 5, "")
		e.flood(1, 13)
		e.route()
		var got []int64
		for range 10 {
			e.route()
			cursors := e.drain()
			if len(cursors) == 0 {
				break
			}
			got = append(got, cursors...)
		}
		if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; !slices.Equal(got, want) {
			t.Errorf("claimed cursors %v, want %v", got, want)
		}
	})
}

// Issue 50 row 4, buffered: a task of a rolled-back version publishes nothing into a buffered
// dataset (409), while a task of the restored version does.
func TestRolledBackVersionsTaskPublishesNoBatch(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newBufferEnv(t, st)
		e.deployDoc(strings.Replace(pipelinetest.AlertsDoc, "    operator: digest\n", "    operator: digest\n    max_attempts: 4\n", 1))
		old := e.runScan()
		if _, _, err := e.dp.Rollback(e.Ctx, tenant, "alerts", ""); err != nil {
			t.Fatal(err)
		}
		_, err := e.dp.Buffers().Publish(e.Ctx, bufferqueue.PublishParams{Fence: fence(old), BatchURI: e.uri(old, e.dataset.UUID, "b.jsonl")})
		if c := dispatchtest.WantErr[*dispatch.ConflictError](t, err); c != nil && c.Code != "pipeline_version_rolled_back" {
			t.Errorf("publish of a rolled-back version's task: %+v", c)
		}
		// e.writer is of the restored version (the first deploy): its publish is recorded.
		e.publish(e.writer, e.uri(e.writer, e.dataset.UUID, "a.jsonl"))
		msgs := e.claimBatches(bufferqueue.ClaimParams{Max: 10})
		if len(msgs) != 1 || !strings.HasSuffix(msgs[0].BatchURI, "a.jsonl") {
			t.Fatalf("queued batches %+v, want the restored version's one", msgs)
		}
	})
}
