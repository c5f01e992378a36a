// Contract of tasks: task rows, their dependencies and results, updates, release and skip.

package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

func testTaskRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	a := newTask(job.ID, "a")
	b := newTask(job.ID, "b")
	b.DependsOn = []string{} // empty, not nil
	c := &store.Task{
		ID:                uuid.NewString(),
		JobID:             job.ID,
		Key:               "transform",
		Name:              "etl.transform",
		Queue:             "gpu",
		Priority:          7,
		Runtime:           "push",
		Input:             json.RawMessage("{\"b\": 1,  \"a\" : [1, 2.50, \"\\u00e9é\"],\n\t\"n\": null}"),
		DependsOn:         []string{"a", "b"},
		UnfinishedParents: 2,
		Status:            lifecycle.Waiting,
		MaxAttempts:       5,
		AvailableAt:       at(2 * time.Second),
		BackoffBase:       1500 * time.Millisecond,
		BackoffMax:        2 * time.Minute,
		Timeout:           45 * time.Second,
		HeartbeatTimeout:  75 * time.Second,
		CancelGrace:       12 * time.Second,
		CreatedAt:         at(-time.Minute),
		LastEventType:     "Job Created",
		LastEventAt:       at(-time.Minute),
	}
	d := newTask(job.ID, "finished")
	d.Status = lifecycle.Skipped
	d.FinishedAt = at(3 * time.Millisecond)
	d.Input = json.RawMessage(`[]`)
	seed(t, st, job, a, b, c, d)

	var prev int64
	for _, want := range []*store.Task{a, b, c, d} {
		got := getTask(t, st, want.ID)
		if got.Seq <= prev {
			t.Errorf("task %s: Seq = %d, want > %d (insertion order)", want.Key, got.Seq, prev)
		}
		prev = got.Seq
		checkSame(t, "GetTask("+want.Key+")", want, got, "Seq")
		if !bytes.Equal(got.Input, want.Input) {
			t.Errorf("task %s: input not verbatim: %q", want.Key, got.Input)
		}
	}
	got := getTask(t, st, c.ID)
	if !slices.Equal(got.DependsOn, []string{"a", "b"}) {
		t.Errorf("DependsOn = %q, want [a b]", got.DependsOn)
	}
	if got.Timeout != 45*time.Second || got.HeartbeatTimeout != 75*time.Second || got.CancelGrace != 12*time.Second ||
		got.BackoffBase != 1500*time.Millisecond || got.BackoffMax != 2*time.Minute {
		t.Errorf("durations = %v %v %v %v %v", got.Timeout, got.HeartbeatTimeout, got.CancelGrace, got.BackoffBase, got.BackoffMax)
	}
	if got.AttemptsUsed() != 0 {
		t.Errorf("AttemptsUsed of a new task = %d", got.AttemptsUsed())
	}
	inTx(t, st, func(tx store.Tx) error {
		got, err := tx.TaskGet(ctx, c.ID)
		if err != nil {
			return err
		}
		checkSame(t, "Tx.GetTask", c, got, "Seq")
		return nil
	})
}

func testJobTasksInInsertionOrder(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	other := newJob("tenant")
	keys := []string{"zeta", "alpha", "mid", "beta", "omega", "aa"}
	var tasks []*store.Task
	for i, k := range keys {
		var deps []string
		if i > 0 {
			deps = []string{keys[i-1]}
		}
		if i > 2 {
			deps = append(deps, keys[0])
		}
		tk := newTask(job.ID, k, deps...)
		tk.Name = "type-" + k
		tasks = append(tasks, tk)
	}
	tasks[2].LastEventType = "Task Pending"
	tasks[2].LastEventAt = at(time.Second)
	seed(t, st, job, tasks[:3]...)
	seed(t, st, other, newTask(other.ID, "x"), newTask(other.ID, "y"))
	// The rest of the job arrives later, in a second TaskInsertMany.
	inTx(t, st, func(tx store.Tx) error { return tx.TaskInsertMany(ctx, tasks[3:]) })
	claimed := mustClaim(t, st, tasks[0].ID, at(time.Minute))

	sums, err := st.TaskListByJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("JobTasks: %v", err)
	}
	if len(sums) != len(tasks) {
		t.Fatalf("JobTasks returned %d tasks, want %d", len(sums), len(tasks))
	}
	for i, s := range sums {
		tk := getTask(t, st, tasks[i].ID)
		want := &store.TaskSummary{ID: tk.ID, Key: tk.Key, Name: tk.Name, DependsOn: tk.DependsOn,
			Status: tk.Status, Attempt: tk.Attempt, LastEventType: tk.LastEventType, LastEventAt: tk.LastEventAt}
		checkSame(t, fmt.Sprintf("summary %d (%s)", i, keys[i]), want, s)
		if !slices.Equal(s.DependsOn, tasks[i].DependsOn) {
			t.Errorf("summary %d DependsOn = %q, want %q", i, s.DependsOn, tasks[i].DependsOn)
		}
	}
	if sums[0].Status != lifecycle.Running || sums[0].Attempt != claimed.Attempt {
		t.Errorf("summary of the claimed task: status %s attempt %d", sums[0].Status, sums[0].Attempt)
	}
	if sums, err := st.TaskListByJob(ctx, "job-"+uuid.NewString()); err != nil || len(sums) != 0 {
		t.Errorf("JobTasks(unknown job) = %d tasks, %v; want none", len(sums), err)
	}
}

// testJobTasksWithResults: the job view carries a completed task's output and a failed task's
// error, and nothing for other tasks, even those that hold a stale result from an earlier run.
func testJobTasksWithResults(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "done"), newTask(job.ID, "broken"), newTask(job.ID, "empty"),
		newTask(job.ID, "retrying"), newTask(job.ID, "resumed"), newTask(job.ID, "waiting", "done"))
	mutate(t, st, ts["done"].ID, func(tk *store.Task) {
		tk.Status, tk.Output, tk.FinishedAt = lifecycle.Completed, json.RawMessage(`{"tags": ["navy", "cream"]}`), t0
	})
	retryable := false
	brokenErr := &store.TaskError{Category: "DATA_QUALITY", Message: "bad input", StackTrace: "at x", Retryable: &retryable}
	mutate(t, st, ts["broken"].ID, func(tk *store.Task) {
		tk.Status, tk.Error, tk.FinishedAt = lifecycle.Failed, brokenErr, t0
	})
	setStatus(t, st, ts["empty"].ID, lifecycle.Completed, t0) // completed without an output
	mutate(t, st, ts["retrying"].ID, func(tk *store.Task) {
		tk.Error = &store.TaskError{Category: "INFRASTRUCTURE", Message: "connection reset"} // pending again
	})
	mutate(t, st, ts["resumed"].ID, func(tk *store.Task) {
		tk.Output = json.RawMessage(`{"old": true}`) // pending again, with a result of its last run
	})

	sums, err := st.TaskListByJobWithResults(ctx, job.ID)
	if err != nil {
		t.Fatalf("JobTasksWithResults: %v", err)
	}
	byKey := map[string]*store.TaskSummary{}
	for _, s := range sums {
		byKey[s.Key] = s
	}
	if len(sums) != 6 || sums[0].Key != "done" || sums[5].Key != "waiting" {
		t.Fatalf("JobTasksWithResults returned %d tasks, not the job's six in order", len(sums))
	}
	if got := byKey["done"]; string(got.Output) != `{"tags": ["navy", "cream"]}` || got.Error != nil || got.Status != lifecycle.Completed {
		t.Errorf("completed task: output %s, error %+v, status %s", got.Output, got.Error, got.Status)
	}
	if got := byKey["broken"]; got.Output != nil || got.Error == nil {
		t.Errorf("failed task: output %s, error %+v", got.Output, got.Error)
	} else {
		checkSame(t, "failed task's error", brokenErr, got.Error)
	}
	for _, k := range []string{"empty", "retrying", "resumed", "waiting"} {
		if got := byKey[k]; got.Output != nil || got.Error != nil {
			t.Errorf("task %s (%s): output %s, error %+v; want neither", k, got.Status, got.Output, got.Error)
		}
	}
	// The plain list reads no results; otherwise it matches.
	plain, err := st.TaskListByJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("JobTasks: %v", err)
	}
	for i, p := range plain {
		if p.Output != nil || p.Error != nil {
			t.Errorf("JobTasks: task %s has a result: %s %+v", p.Key, p.Output, p.Error)
		}
		checkSame(t, "summary "+p.Key, p, sums[i], "Output", "Error")
	}
	inTx(t, st, func(tx store.Tx) error {
		got, err := tx.TaskListByJobWithResults(ctx, job.ID)
		if err != nil {
			return err
		}
		if len(got) != 6 || string(got[0].Output) != `{"tags": ["navy", "cream"]}` {
			t.Errorf("Tx.JobTasksWithResults: %d tasks, first output %s", len(got), got[0].Output)
		}
		return nil
	})
	if sums, err := st.TaskListByJobWithResults(ctx, "job-"+uuid.NewString()); err != nil || len(sums) != 0 {
		t.Errorf("JobTasksWithResults(unknown job) = %d tasks, %v; want none", len(sums), err)
	}
}

func testParentOutputs(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job,
		newTask(job.ID, "a"), newTask(job.ID, "b"), newTask(job.ID, "c"),
		newTask(job.ID, "child", "a", "b", "c"), newTask(job.ID, "other", "a"))
	mutate(t, st, ts["a"].ID, func(tk *store.Task) {
		tk.Status, tk.Output, tk.FinishedAt = lifecycle.Completed, json.RawMessage(`{"x": 1}`), t0
	})
	mutate(t, st, ts["c"].ID, func(tk *store.Task) {
		tk.Status, tk.Output, tk.FinishedAt = lifecycle.Completed, json.RawMessage("[1,  2 ,\"s\"]"), t0
	})
	setStatus(t, st, ts["b"].ID, lifecycle.Completed, t0) // no output

	want := map[string]string{"a": `{"x": 1}`, "b": `null`, "c": "[1,  2 ,\"s\"]"}
	got, err := st.TaskParentOutputs(ctx, ts["child"].ID)
	if err != nil {
		t.Fatalf("ParentOutputs: %v", err)
	}
	if len(got) != len(want) {
		t.Errorf("ParentOutputs has %d entries, want %d: %q", len(got), len(want), got)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || string(g) != w {
			t.Errorf("ParentOutputs[%s] = %q (present %v), want %q", k, g, ok, w)
		}
	}
	got, err = st.TaskParentOutputs(ctx, ts["other"].ID)
	if err != nil || len(got) != 1 || string(got["a"]) != `{"x": 1}` {
		t.Errorf("ParentOutputs(other) = %q, %v", got, err)
	}
	got, err = st.TaskParentOutputs(ctx, ts["a"].ID)
	if err != nil || len(got) != 0 {
		t.Errorf("ParentOutputs(root) = %q, %v; want empty", got, err)
	}
	inTx(t, st, func(tx store.Tx) error {
		got, err := tx.TaskParentOutputs(ctx, ts["child"].ID)
		if err != nil {
			return err
		}
		if len(got) != 3 || string(got["b"]) != "null" {
			t.Errorf("Tx.ParentOutputs = %q", got)
		}
		return nil
	})
}

func testUpdateTaskWritesMutableFields(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"), newTask(job.ID, "c", "a", "b"))
	orig := getTask(t, st, ts["c"].ID)

	retryable := false
	u := *orig
	u.Status = lifecycle.Running
	u.Attempt = 4
	u.RetryBase = 2
	u.MaxAttempts = 7
	u.AvailableAt = at(time.Hour)
	u.LeaseToken = "lease-x"
	u.LeaseExpiresAt = at(91 * time.Second)
	u.WorkerID = "worker-9"
	u.StartedAt = at(time.Second)
	u.HeartbeatAt = at(2 * time.Second)
	u.DeadlineAt = at(3 * time.Second)
	u.ReapAt = at(4 * time.Second)
	u.CancelRequestedAt = at(5 * time.Second)
	u.CancelReason = "user asked"
	u.Output = json.RawMessage("{\"rows\":  12, \"ok\" :true}")
	u.Error = &store.TaskError{Category: lifecycle.Infrastructure, Message: "disk full", StackTrace: "at main()\n\tat x",
		Retryable: &retryable, Reason: "HEARTBEAT_TIMEOUT", Code: "E42"}
	u.FinishedAt = at(6 * time.Second)
	u.DeadLetteredAt = at(7 * time.Second)
	u.LastEventType = "Task Heartbeat"
	u.LastEventAt = at(8 * time.Second)
	u.UnfinishedParents = 1
	inTx(t, st, func(tx store.Tx) error {
		return tx.TaskUpdate(ctx, &u, store.Fence{Status: orig.Status, Attempt: orig.Attempt})
	})
	got := getTask(t, st, orig.ID)
	checkSame(t, "after UpdateTask", &u, got)
	if got.Error == nil || got.Error.Retryable == nil || *got.Error.Retryable {
		t.Errorf("Error.Retryable = %v, want explicit false", got.Error)
	}
	if got.AttemptsUsed() != 2 {
		t.Errorf("AttemptsUsed = %d, want 2", got.AttemptsUsed())
	}

	// Every optional field can be cleared again.
	z := *got
	z.Status = lifecycle.Pending
	z.LeaseToken, z.WorkerID, z.CancelReason, z.LastEventType = "", "", "", ""
	z.LeaseExpiresAt, z.StartedAt, z.HeartbeatAt, z.DeadlineAt, z.ReapAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	z.CancelRequestedAt, z.FinishedAt, z.DeadLetteredAt, z.LastEventAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	z.Output, z.Error = nil, nil
	z.UnfinishedParents = 0
	inTx(t, st, func(tx store.Tx) error {
		return tx.TaskUpdate(ctx, &z, store.Fence{Status: lifecycle.Running, Attempt: 4})
	})
	checkSame(t, "after clearing with UpdateTask", &z, getTask(t, st, orig.ID))
	checkSame(t, "sibling untouched", ts["a"], getTask(t, st, ts["a"].ID), "Seq")
}

// ---------------------------------------------------------------------------------------------
// Releasing and skipping dependents

func releaseChildren(t *testing.T, st store.Store, parentID string, now time.Time) []*store.TaskRef {
	t.Helper()
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.TaskReleaseChildren(t.Context(), parentID, now)
		return err
	})
	return refs
}

// pendingRefs are the refs that report a pending task; every ref must carry its task's status.
func pendingRefs(t *testing.T, st store.Store, what string, refs []*store.TaskRef) []*store.TaskRef {
	t.Helper()
	var out []*store.TaskRef
	for _, r := range refs {
		checkRefMatchesTask(t, st, what, r)
		if r.Status == lifecycle.Pending {
			out = append(out, r)
		}
	}
	return out
}

func testReleaseChildrenWaitsForEveryParent(t *testing.T, st store.Store) {
	job := newJob("tenant")
	child := newTask(job.ID, "child", "a", "b")
	child.Queue = "q-child"
	child.Name = "child-type"
	child.AvailableAt = at(-time.Hour)
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"), child,
		newTask(job.ID, "only-a", "a"), newTask(job.ID, "unrelated", "b"))
	setStatus(t, st, ts["a"].ID, lifecycle.Completed, at(time.Second))

	refs := releaseChildren(t, st, ts["a"].ID, at(time.Second))
	pend := pendingRefs(t, st, "after releasing a", refs)
	checkIDs(t, "pending after releasing a", refIDs(pend), []string{ts["only-a"].ID})
	got := getTask(t, st, ts["child"].ID)
	if got.Status != lifecycle.Waiting || got.UnfinishedParents != 1 {
		t.Errorf("child after one of two parents: status %s, unfinished parents %d; want waiting, 1", got.Status, got.UnfinishedParents)
	}
	if onlyA := getTask(t, st, ts["only-a"].ID); onlyA.Status != lifecycle.Pending || onlyA.UnfinishedParents != 0 ||
		onlyA.AvailableAt.After(at(time.Second)) {
		t.Errorf("only-a after its parent: status %s, unfinished %d, available %v", onlyA.Status, onlyA.UnfinishedParents, onlyA.AvailableAt)
	}

	setStatus(t, st, ts["b"].ID, lifecycle.Completed, at(2*time.Second))
	refs = releaseChildren(t, st, ts["b"].ID, at(2*time.Second))
	pend = pendingRefs(t, st, "after releasing b", refs)
	checkIDs(t, "pending after releasing b", refIDs(pend), sortedIDs(ts["child"], ts["unrelated"]))
	for _, r := range pend {
		if r.ID == ts["child"].ID && (r.Key != "child" || r.Name != "child-type" || r.Queue != "q-child") {
			t.Errorf("child ref = %+v", r)
		}
	}
	got = getTask(t, st, ts["child"].ID)
	if got.Status != lifecycle.Pending || got.UnfinishedParents != 0 {
		t.Errorf("child after both parents: status %s, unfinished parents %d; want pending, 0", got.Status, got.UnfinishedParents)
	}
	// Now claimable: available no later than the release.
	if got.AvailableAt.After(at(2 * time.Second)) {
		t.Errorf("child available at %v, after the release at %v", got.AvailableAt, at(2*time.Second))
	}
	checkIDs(t, "ready in q-child", readyIDs(t, st, "q-child", at(2*time.Second), 10), []string{ts["child"].ID})
}

func testReleaseChildrenLeavesCanceledChild(t *testing.T, st store.Store) {
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"),
		newTask(job.ID, "canceled", "a"), newTask(job.ID, "canceled2", "a", "b"), newTask(job.ID, "waiting", "a", "b"))
	canceled := setStatus(t, st, ts["canceled"].ID, lifecycle.Canceled, t0)
	canceled2 := setStatus(t, st, ts["canceled2"].ID, lifecycle.Canceled, t0)
	setStatus(t, st, ts["a"].ID, lifecycle.Completed, at(time.Second))

	refs := releaseChildren(t, st, ts["a"].ID, at(time.Second))
	checkIDs(t, "pending refs", refIDs(pendingRefs(t, st, "release a", refs)), nil)
	for _, c := range []*store.Task{canceled, canceled2} {
		got := getTask(t, st, c.ID)
		if got.UnfinishedParents != c.UnfinishedParents-1 {
			t.Errorf("%s: unfinished parents = %d, want %d", c.Key, got.UnfinishedParents, c.UnfinishedParents-1)
		}
		checkSame(t, c.Key+" apart from its parent count", c, got, "UnfinishedParents")
	}
	setStatus(t, st, ts["b"].ID, lifecycle.Completed, at(time.Second))
	refs = releaseChildren(t, st, ts["b"].ID, at(2*time.Second))
	checkIDs(t, "pending refs after b", refIDs(pendingRefs(t, st, "release b", refs)), []string{ts["waiting"].ID})
	got := getTask(t, st, canceled2.ID)
	if got.Status != lifecycle.Canceled || got.UnfinishedParents != 0 {
		t.Errorf("canceled2 after both parents: status %s, unfinished %d; want canceled, 0", got.Status, got.UnfinishedParents)
	}
}

func testSkipDescendants(t *testing.T, st store.Store) {
	job := newJob("tenant")
	ts := seed(t, st, job,
		newTask(job.ID, "root"),
		newTask(job.ID, "u"), // unrelated branch
		newTask(job.ID, "a", "root"),
		newTask(job.ID, "b", "root"),
		newTask(job.ID, "d", "a", "b"), // diamond
		newTask(job.ID, "e", "d"),      // deeper level
		newTask(job.ID, "f", "e"),
		newTask(job.ID, "done", "root"),
		newTask(job.ID, "below-done", "done"), // a waiting descendant below a completed one
		newTask(job.ID, "run", "root"),
		newTask(job.ID, "x", "root", "u"), // pending descendant (its other parent is unrelated)
		newTask(job.ID, "v", "u"),
		newTask(job.ID, "w", "v"),
	)
	other := newJob("tenant")
	ots := seed(t, st, other, newTask(other.ID, "p"), newTask(other.ID, "q", "p"))
	setStatus(t, st, ts["root"].ID, lifecycle.Failed, t0)
	setStatus(t, st, ts["done"].ID, lifecycle.Completed, t0)
	mutate(t, st, ts["run"].ID, func(tk *store.Task) { tk.Status, tk.UnfinishedParents = lifecycle.Pending, 0 })
	mustClaim(t, st, ts["run"].ID, t0)
	mutate(t, st, ts["x"].ID, func(tk *store.Task) { tk.Status, tk.UnfinishedParents = lifecycle.Pending, 0 })

	untouched := map[string]*store.Task{}
	for _, k := range []string{"root", "u", "done", "run", "v", "w"} {
		untouched[k] = getTask(t, st, ts[k].ID)
	}
	otherBefore := []*store.Task{getTask(t, st, ots["p"].ID), getTask(t, st, ots["q"].ID)}

	now := at(time.Minute)
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.TaskSkipDescendants(t.Context(), ts["root"].ID, now)
		return err
	})
	skipped := []*store.Task{ts["a"], ts["b"], ts["d"], ts["e"], ts["f"], ts["below-done"], ts["x"]}
	checkRefs(t, st, "SkipDescendants", refs, skipped...)
	for _, s := range skipped {
		got := getTask(t, st, s.ID)
		if got.Status != lifecycle.Skipped || !got.FinishedAt.Equal(now) {
			t.Errorf("%s: status %s finished %v; want skipped at %v", s.Key, got.Status, got.FinishedAt, now)
		}
	}
	for k, before := range untouched {
		checkSame(t, k+" (not skipped)", before, getTask(t, st, before.ID))
	}
	for _, before := range otherBefore {
		checkSame(t, "other job's "+before.Key, before, getTask(t, st, before.ID))
	}

	// A second pass finds nothing left to skip.
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.TaskSkipDescendants(t.Context(), ts["root"].ID, now)
		return err
	})
	checkIDs(t, "second SkipDescendants", refIDs(refs), nil)
}

// ---------------------------------------------------------------------------------------------
// Volume

func testBulkInsertTasksAndDeps(t *testing.T, st store.Store) {
	ctx := t.Context()
	const (
		n     = 5000
		roots = 100
	)
	job := newJob("tenant")
	tasks := make([]*store.Task, n)
	for i := range tasks {
		var deps []string
		if i >= roots {
			deps = []string{fmt.Sprintf("t%04d", i%roots)}
			if i < 2*roots {
				deps = append(deps, fmt.Sprintf("t%04d", (i+1)%roots))
			}
		}
		tk := newTask(job.ID, fmt.Sprintf("t%04d", i), deps...)
		tk.Priority = i % 7
		tk.Input = json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))
		tasks[i] = tk
	}
	byKey := map[string]*store.Task{}
	for _, tk := range tasks {
		byKey[tk.Key] = tk
	}
	var deps []store.Dep
	for _, tk := range tasks {
		for _, p := range tk.DependsOn {
			deps = append(deps, store.Dep{JobID: job.ID, ParentID: byKey[p].ID, ChildID: tk.ID})
		}
	}
	if len(deps) != n {
		t.Fatalf("test setup: %d deps, want %d", len(deps), n)
	}
	job.TotalTasks, job.UnfinishedTasks = n, n
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.JobInsert(ctx, job); err != nil {
			return err
		}
		if err := tx.TaskInsertMany(ctx, tasks); err != nil { // one call
			return err
		}
		return tx.DepInsertMany(ctx, deps) // one call
	})

	sums, err := st.TaskListByJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("JobTasks: %v", err)
	}
	if len(sums) != n {
		t.Fatalf("JobTasks returned %d tasks, want %d", len(sums), n)
	}
	for i, s := range sums {
		if s.ID != tasks[i].ID || s.Key != tasks[i].Key || !equalValue(tasks[i].DependsOn, s.DependsOn) {
			t.Fatalf("JobTasks[%d] = %s (%s) deps %q; want %s (%s) deps %q", i, s.ID, s.Key, s.DependsOn, tasks[i].ID, tasks[i].Key, tasks[i].DependsOn)
		}
	}
	for _, i := range []int{0, 999, 1000, 1001, 2345, 3999, 4000, n - 1} {
		checkSame(t, fmt.Sprintf("task %d", i), tasks[i], getTask(t, st, tasks[i].ID), "Seq")
	}
	// Every dep landed.
	edges := 0
	for _, tk := range tasks[roots:] {
		outs, err := st.TaskParentOutputs(ctx, tk.ID)
		if err != nil {
			t.Fatalf("ParentOutputs(%s): %v", tk.Key, err)
		}
		if len(outs) != len(tk.DependsOn) {
			t.Fatalf("ParentOutputs(%s) has %d parents, want %d", tk.Key, len(outs), len(tk.DependsOn))
		}
		for _, p := range tk.DependsOn {
			if _, ok := outs[p]; !ok {
				t.Fatalf("ParentOutputs(%s) lacks parent %s", tk.Key, p)
			}
		}
		edges += len(outs)
	}
	if edges != n {
		t.Errorf("%d deps found, want %d", edges, n)
	}
	if ids := readyIDs(t, st, "default", t0, 2*n); len(ids) != roots {
		t.Errorf("ReadyTaskIDs: %d ready, want the %d roots", len(ids), roots)
	}
	// The deps drive the DAG queries: skipping below a root reaches its 49 or 50 children.
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.TaskSkipDescendants(ctx, tasks[0].ID, t0)
		return err
	})
	want := 0
	for _, tk := range tasks[roots:] {
		if slices.Contains(tk.DependsOn, "t0000") {
			want++
		}
	}
	if len(refs) != want {
		t.Errorf("SkipDescendants(t0000) skipped %d, want %d", len(refs), want)
	}
}

// testTaskJobsNotCompleted: TaskJobsNotCompleted names the jobs, of those asked about, with a task
// in any state but completed.
func testTaskJobsNotCompleted(t *testing.T, st store.Store) {
	ctx := t.Context()
	done, pending, failed, running, other := newJob("tenant"), newJob("tenant"), newJob("tenant"), newJob("tenant"), newJob("tenant")
	ts := seed(t, st, done, newTask(done.ID, "a"), newTask(done.ID, "b"))
	for _, tk := range ts {
		setStatus(t, st, tk.ID, lifecycle.Completed, at(time.Minute))
	}
	ts = seed(t, st, pending, newTask(pending.ID, "a"), newTask(pending.ID, "b"))
	setStatus(t, st, ts["a"].ID, lifecycle.Completed, at(time.Minute))
	ts = seed(t, st, failed, newTask(failed.ID, "a"))
	setStatus(t, st, ts["a"].ID, lifecycle.Failed, at(time.Minute))
	ts = seed(t, st, running, newTask(running.ID, "a"))
	mustClaim(t, st, ts["a"].ID, at(time.Minute))
	seed(t, st, other, newTask(other.ID, "a")) // pending, but not asked about

	got, err := st.TaskJobsNotCompleted(ctx, []string{done.ID, pending.ID, failed.ID, running.ID, "job-" + uuid.NewString()})
	if err != nil {
		t.Fatalf("TaskJobsNotCompleted: %v", err)
	}
	checkIDs(t, "TaskJobsNotCompleted", sortedStrings(got), sortedStrings([]string{pending.ID, failed.ID, running.ID}))
	if got, err := st.TaskJobsNotCompleted(ctx, []string{done.ID}); err != nil || len(got) != 0 {
		t.Errorf("TaskJobsNotCompleted(a completed job) = %v, %v; want none", got, err)
	}
}
