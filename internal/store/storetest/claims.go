// Contract of claims: ready ids, claiming, leases, fences, batches and the reaper's due tasks.

package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

func testReadyTaskIDsFilterAndOrder(t *testing.T, st store.Store) {
	job := newJob("tenant")
	mk := func(key, queue string, prio int, avail time.Duration, deps ...string) *store.Task {
		tk := newTask(job.ID, key, deps...)
		tk.Queue, tk.Priority, tk.AvailableAt = queue, prio, at(avail)
		return tk
	}
	ts := seed(t, st, job,
		mk("a", "q1", 0, -10*time.Second),
		mk("b", "q1", 5, 0),
		mk("c", "q1", 5, -5*time.Second),
		mk("d", "q1", 0, -10*time.Second), // ties with a; inserted after it
		mk("future", "q1", 100, time.Millisecond),
		mk("waiting", "q1", 100, -time.Hour, "a"),
		mk("running", "q1", 100, -time.Hour),
		mk("done", "q1", 100, -time.Hour),
		mk("failed", "q1", 100, -time.Hour),
		mk("other-queue", "q2", 100, -time.Hour),
		mk("e", "q1", 0, 0),
		mk("neg", "q1", -1, -time.Hour),
	)
	mustClaim(t, st, ts["running"].ID, t0)
	setStatus(t, st, ts["done"].ID, lifecycle.Completed, t0)
	setStatus(t, st, ts["failed"].ID, lifecycle.Failed, t0)

	id := func(keys ...string) []string {
		var out []string
		for _, k := range keys {
			out = append(out, ts[k].ID)
		}
		return out
	}
	checkIDs(t, "q1 ready", readyIDs(t, st, "q1", t0, 100), id("c", "b", "a", "d", "e", "neg"))
	checkIDs(t, "q1 limit 2", readyIDs(t, st, "q1", t0, 2), id("c", "b"))
	checkIDs(t, "q1 a millisecond later", readyIDs(t, st, "q1", at(time.Millisecond), 100), id("future", "c", "b", "a", "d", "e", "neg"))
	checkIDs(t, "q1 earlier", readyIDs(t, st, "q1", at(-5*time.Second), 100), id("c", "a", "d", "neg"))
	checkIDs(t, "q2", readyIDs(t, st, "q2", t0, 100), id("other-queue"))
	checkIDs(t, "unknown queue", readyIDs(t, st, "q3", t0, 100), nil)
}

// A deliverer lists the ready push tasks of plain jobs whatever their name, and those of pipeline
// jobs only when it has a target for their name; the next available time follows the same rule,
// so that a deliverer without a target does not wake for a task it cannot take.
func testReadyPushTasksWaitForATarget(t *testing.T, st store.Store) {
	job := newJob("tenant")
	mk := func(key, name, runtime string, routed bool, avail time.Duration) *store.Task {
		tk := newTask(job.ID, key)
		tk.Name, tk.Runtime, tk.AvailableAt = name, runtime, at(avail)
		if routed {
			tk.Route = json.RawMessage(`{"job":{"dag_name":"d","name":"j","pipeline_version":"v1"},"inputs":[],"outputs":[]}`)
		}
		return tk
	}
	ts := seed(t, st, job,
		mk("plain", "resize", "push", false, -3*time.Second),
		mk("routed", "resize", "push", true, -2*time.Second),
		mk("other", "thumbnail", "push", true, -4*time.Second),
		mk("pull", "resize", "pull", true, -5*time.Second), // never a push deliverer's
	)
	list := func(targets ...string) []string {
		var ids []string
		inTx(t, st, func(tx store.Tx) error {
			var err error
			ids, err = tx.TaskListReadyPushIDs(t.Context(), store.TaskListReadyPushIDsParams{Now: t0, Limit: 10, Targets: targets})
			return err
		})
		return ids
	}
	id := func(keys ...string) []string {
		var out []string
		for _, k := range keys {
			out = append(out, ts[k].ID)
		}
		return out
	}
	checkIDs(t, "no targets", list(), id("plain"))
	checkIDs(t, "resize", list("resize"), id("plain", "routed"))
	checkIDs(t, "both", list("resize", "thumbnail"), id("other", "plain", "routed"))
	checkIDs(t, "unknown", list("crop"), id("plain"))

	next := func(targets ...string) time.Time {
		when, ok, err := st.TaskNextPushAvailableAt(t.Context(), targets)
		if err != nil || !ok {
			t.Fatalf("next push available with targets %q: %v, %v", targets, ok, err)
		}
		return when
	}
	if got := next(); !got.Equal(at(-3 * time.Second)) {
		t.Errorf("next push available without targets = %v, want the plain task's %v", got, at(-3*time.Second))
	}
	if got := next("thumbnail"); !got.Equal(at(-4 * time.Second)) {
		t.Errorf("next push available for thumbnail = %v, want %v", got, at(-4*time.Second))
	}
}

func testClaimTaskTakesLease(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	noTimeout := newTask(job.ID, "no-timeout")
	shortTimeout := newTask(job.ID, "short-timeout")
	shortTimeout.Timeout = 30 * time.Second
	longTimeout := newTask(job.ID, "long-timeout")
	longTimeout.Timeout = 2 * time.Minute
	longTimeout.HeartbeatTimeout = time.Minute
	retried := newTask(job.ID, "retried")
	ts := seed(t, st, job, noTimeout, shortTimeout, longTimeout, retried)

	now := at(time.Minute)
	// A task retried twice: pending again at attempt 2, available exactly now.
	mutate(t, st, ts["retried"].ID, func(tk *store.Task) {
		tk.Attempt, tk.RetryBase, tk.AvailableAt = 2, 0, now
		tk.Error = &store.TaskError{Category: lifecycle.UserCode, Message: "boom"}
	})

	cases := []struct {
		key      string
		deadline time.Time
		reap     time.Time
	}{
		{"no-timeout", time.Time{}, now.Add(90 * time.Second)},
		{"short-timeout", now.Add(30 * time.Second), now.Add(30 * time.Second)},
		{"long-timeout", now.Add(2 * time.Minute), now.Add(time.Minute)},
		{"retried", time.Time{}, now.Add(90 * time.Second)},
	}
	for _, c := range cases {
		before := getTask(t, st, ts[c.key].ID)
		token := "lease-" + c.key
		var (
			got *store.Task
			ok  bool
		)
		inTx(t, st, func(tx store.Tx) error {
			var err error
			got, ok, err = tx.TaskClaim(ctx, store.ClaimTaskParams{ID: before.ID, Now: now, WorkerID: "worker-" + c.key, LeaseToken: token})
			return err
		})
		if !ok || got == nil {
			t.Errorf("%s: ClaimTask: ok = %v, task = %v", c.key, ok, got)
			continue
		}
		want := *before
		want.Status = lifecycle.Running
		want.Attempt = before.Attempt + 1
		want.LeaseToken = token
		want.WorkerID = "worker-" + c.key
		want.StartedAt = now
		want.HeartbeatAt = now
		want.LeaseExpiresAt = now.Add(before.HeartbeatTimeout)
		want.DeadlineAt = c.deadline
		want.ReapAt = c.reap
		// How a claim records its last event is the dispatcher's business, not this contract's.
		ignore := []string{"LastEventType", "LastEventAt"}
		checkSame(t, c.key+": claimed task returned", &want, got, ignore...)
		stored := getTask(t, st, before.ID)
		checkSame(t, c.key+": claimed task stored", &want, stored, ignore...)
		checkSame(t, c.key+": returned vs stored", stored, got)
	}
}

func testClaimTaskNotClaimable(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job,
		newTask(job.ID, "parent"), newTask(job.ID, "waiting", "parent"),
		newTask(job.ID, "running"), newTask(job.ID, "completed"), newTask(job.ID, "failed"),
		newTask(job.ID, "canceled"), newTask(job.ID, "skipped"), newTask(job.ID, "backing-off"))
	now := at(time.Minute)
	mustClaim(t, st, ts["running"].ID, at(30*time.Second))
	for _, s := range []lifecycle.TaskStatus{lifecycle.Completed, lifecycle.Failed, lifecycle.Canceled, lifecycle.Skipped} {
		setStatus(t, st, ts[string(s)].ID, s, t0)
	}
	mutate(t, st, ts["backing-off"].ID, func(tk *store.Task) {
		tk.Attempt, tk.AvailableAt = 1, now.Add(time.Millisecond)
	})

	for _, key := range []string{"waiting", "running", "completed", "failed", "canceled", "skipped", "backing-off", "unknown"} {
		id := uuid.NewString()
		var before *store.Task
		if tk, ok := ts[key]; ok {
			id = tk.ID
			before = getTask(t, st, id)
		}
		var (
			got *store.Task
			ok  bool
		)
		inTx(t, st, func(tx store.Tx) error {
			var err error
			got, ok, err = tx.TaskClaim(ctx, store.ClaimTaskParams{ID: id, Now: now, WorkerID: "w2", LeaseToken: "other-token"})
			return err
		})
		if ok {
			t.Errorf("%s: ClaimTask ok = true (task %+v), want false", key, got)
		}
		if before != nil {
			checkSame(t, key+": after a refused claim", before, getTask(t, st, id))
		} else if _, err := st.TaskGet(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown: GetTask after the claim: %v, want ErrNotFound", err)
		}
	}
}

// A job's traceparent is stored with it and read back by every job query; its tasks' copies
// come back from TaskGet and from both claims, one by one and in a batch, including a claim under
// a concurrency limit (a statement of its own). A job and tasks without one read as "".
func testTraceparentSurvivesInsertAndClaim(t *testing.T, st store.Store) {
	ctx := t.Context()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	job := newJob("tenant")
	job.IdempotencyKey, job.Traceparent = "traced", tp
	var tasks []*store.Task
	for _, key := range []string{"one", "batch1", "batch2", "limited"} {
		tk := newTask(job.ID, key)
		tk.Traceparent = tp
		tasks = append(tasks, tk)
	}
	tasks[3].ConcurrencyKey, tasks[3].ConcurrencyLimit = "traced-key", 1
	ts := seed(t, st, job, tasks...)
	plain := newJob("tenant")
	pts := seed(t, st, plain, newTask(plain.ID, "untraced"))

	if got := getJob(t, st, job.ID).Traceparent; got != tp {
		t.Errorf("GetJob: traceparent %q, want %q", got, tp)
	}
	if j, err := st.JobGetByIdempotencyKey(ctx, "tenant", "traced"); err != nil || j.Traceparent != tp {
		t.Errorf("JobByIdempotencyKey: %v, traceparent %q, want %q", err, j.Traceparent, tp)
	}
	jobs, err := st.JobList(ctx, store.ListJobsParams{Tenant: "tenant", Limit: 10})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("ListJobs: %d jobs, %v", len(jobs), err)
	}
	for _, j := range jobs {
		if want := map[string]string{job.ID: tp, plain.ID: ""}[j.ID]; j.Traceparent != want {
			t.Errorf("ListJobs: job %s has traceparent %q, want %q", j.ID, j.Traceparent, want)
		}
	}
	if got := getJob(t, st, plain.ID).Traceparent; got != "" {
		t.Errorf("a job inserted without a traceparent reads %q", got)
	}
	if got := getTask(t, st, ts["one"].ID).Traceparent; got != tp {
		t.Errorf("GetTask: traceparent %q, want %q", got, tp)
	}

	now := at(time.Minute)
	if got := mustClaim(t, st, ts["one"].ID, now).Traceparent; got != tp {
		t.Errorf("ClaimTask: traceparent %q, want %q", got, tp)
	}
	if got := mustClaim(t, st, pts["untraced"].ID, now).Traceparent; got != "" {
		t.Errorf("ClaimTask of a task without a traceparent: %q", got)
	}
	var claimed []*store.Task
	inTx(t, st, func(tx store.Tx) error {
		claimed, err = tx.TaskClaimMany(ctx, []store.ClaimTaskParams{
			{ID: ts["batch1"].ID, Now: now, WorkerID: "w", LeaseToken: "t1"},
			{ID: ts["batch2"].ID, Now: now, WorkerID: "w", LeaseToken: "t2"},
			{ID: ts["limited"].ID, Now: now, WorkerID: "w", LeaseToken: "t3"},
		})
		return err
	})
	if len(claimed) != 3 {
		t.Fatalf("ClaimTasks claimed %d tasks, want 3", len(claimed))
	}
	for _, tk := range claimed {
		if tk.Traceparent != tp {
			t.Errorf("ClaimTasks: task %s has traceparent %q, want %q", tk.Key, tk.Traceparent, tp)
		}
	}
}

// TaskClaimMany gives each task of a batch its own worker and lease token, claims a repeated id
// once (for the first request naming it) and leaves tasks that are not claimable alone;
// TaskCompleteMany stores each task's own output (none: NULL) and refuses a batch with a stale
// fence.
func testClaimAndCompleteTasksInBatches(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"), newTask(job.ID, "c"),
		newTask(job.ID, "waiting", "a"))
	now := at(time.Minute)
	var claimed []*store.Task
	inTx(t, st, func(tx store.Tx) error {
		var err error
		claimed, err = tx.TaskClaimMany(ctx, []store.ClaimTaskParams{
			{ID: ts["a"].ID, Now: now, WorkerID: "wa", LeaseToken: "ta"},
			{ID: ts["b"].ID, Now: now, WorkerID: "wb", LeaseToken: "tb"},
			{ID: ts["a"].ID, Now: now, WorkerID: "wa2", LeaseToken: "ta2"},
			{ID: ts["waiting"].ID, Now: now, WorkerID: "ww", LeaseToken: "tw"},
		})
		return err
	})
	got := map[string]string{}
	for _, tk := range claimed {
		got[tk.Key] = tk.WorkerID + "/" + tk.LeaseToken
	}
	if want := map[string]string{"a": "wa/ta", "b": "wb/tb"}; !maps.Equal(got, want) {
		t.Fatalf("ClaimTasks claimed %v, want %v", got, want)
	}
	for key, want := range map[string]string{"a": "wa/ta", "b": "wb/tb"} {
		if tk := getTask(t, st, ts[key].ID); tk.Status != lifecycle.Running || tk.Attempt != 1 || tk.WorkerID+"/"+tk.LeaseToken != want {
			t.Errorf("%s stored as %s attempt %d %s/%s, want running attempt 1 %s", key, tk.Status, tk.Attempt, tk.WorkerID, tk.LeaseToken, want)
		}
	}
	for _, key := range []string{"c", "waiting"} {
		if tk := getTask(t, st, ts[key].ID); tk.Status == lifecycle.Running {
			t.Errorf("%s was claimed", key)
		}
	}

	// A stale attempt in the batch: nothing may be kept.
	err := st.InTx(ctx, func(tx store.Tx) error {
		return tx.TaskCompleteMany(ctx, []store.CompletedTask{
			{ID: ts["a"].ID, Attempt: 1, Output: json.RawMessage(`{"n":1}`)},
			{ID: ts["b"].ID, Attempt: 2, Output: json.RawMessage(`{"n":2}`)},
		}, now)
	})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("CompleteTasks with a stale attempt: %v, want ErrLeaseLost", err)
	}
	inTx(t, st, func(tx store.Tx) error {
		return tx.TaskCompleteMany(ctx, []store.CompletedTask{
			{ID: ts["a"].ID, Attempt: 1, Output: json.RawMessage(`{"n":1,"s":"it's \"quoted\""}`)},
			{ID: ts["b"].ID, Attempt: 1},
		}, now)
	})
	for key, want := range map[string]string{"a": `{"n":1,"s":"it's \"quoted\""}`, "b": ""} {
		tk := getTask(t, st, ts[key].ID)
		if tk.Status != lifecycle.Completed || string(tk.Output) != want {
			t.Errorf("%s stored as %s with output %q, want completed with %q", key, tk.Status, tk.Output, want)
		}
	}
}

func testClaimTaskRaceHasOneWinner(t *testing.T, st store.Store) {
	const rounds = 50
	job := newJob("tenant")
	var tasks []*store.Task
	for i := 0; i < rounds; i++ {
		tasks = append(tasks, newTask(job.ID, fmt.Sprintf("t%d", i)))
	}
	seed(t, st, job, tasks...)
	now := at(time.Minute)
	for i, tk := range tasks {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			won   [2]bool
			errs  [2]error
		)
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[w] = st.InTx(t.Context(), func(tx store.Tx) error {
					_, ok, err := tx.TaskClaim(t.Context(), store.ClaimTaskParams{
						ID: tk.ID, Now: now, WorkerID: fmt.Sprintf("worker-%d", w), LeaseToken: fmt.Sprintf("token-%d", w),
					})
					won[w] = ok // set, not accumulated: fn may run again
					return err
				})
			}()
		}
		close(start)
		wg.Wait()
		for w, err := range errs {
			if err != nil {
				t.Fatalf("round %d: worker %d: InTx: %v", i, w, err)
			}
		}
		if won[0] == won[1] {
			t.Fatalf("round %d: claims won = %v, want exactly one", i, won)
		}
		winner := 0
		if won[1] {
			winner = 1
		}
		got := getTask(t, st, tk.ID)
		if got.Status != lifecycle.Running || got.Attempt != 1 ||
			got.WorkerID != fmt.Sprintf("worker-%d", winner) || got.LeaseToken != fmt.Sprintf("token-%d", winner) {
			t.Fatalf("round %d: task after the race: status %s attempt %d worker %q token %q; winner was %d",
				i, got.Status, got.Attempt, got.WorkerID, got.LeaseToken, winner)
		}
	}
}

func testUpdateTaskStaleFenceIsLeaseLost(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"))
	running := mustClaim(t, st, ts["a"].ID, t0)

	for _, fence := range []store.Fence{
		{Status: lifecycle.Pending, Attempt: 1}, // wrong status
		{Status: lifecycle.Running, Attempt: 0}, // stale attempt
		{Status: lifecycle.Running, Attempt: 2}, // future attempt
		{Status: lifecycle.Completed, Attempt: 1},
	} {
		u := *running
		u.Status = lifecycle.Completed
		u.Output = json.RawMessage(`{"late": true}`)
		u.FinishedAt = at(time.Second)
		u.Attempt = 1
		var updateErr error
		// The transaction commits: the refused write itself must have changed nothing.
		inTx(t, st, func(tx store.Tx) error {
			updateErr = tx.TaskUpdate(ctx, &u, fence)
			return nil
		})
		if !errors.Is(updateErr, store.ErrLeaseLost) {
			t.Errorf("UpdateTask with fence %+v: err = %v, want ErrLeaseLost", fence, updateErr)
		}
		checkSame(t, fmt.Sprintf("after a write fenced on %+v", fence), running, getTask(t, st, running.ID))
	}

	// The current fence still works.
	u := *running
	u.Status = lifecycle.Completed
	u.FinishedAt = at(time.Second)
	inTx(t, st, func(tx store.Tx) error {
		return tx.TaskUpdate(ctx, &u, store.Fence{Status: lifecycle.Running, Attempt: 1})
	})
	if got := getTask(t, st, running.ID); got.Status != lifecycle.Completed {
		t.Errorf("status after the fenced write = %s, want completed", got.Status)
	}
}

// ---------------------------------------------------------------------------------------------
// Reaper queries

func testNextReapAtAndDueTasks(t *testing.T, st store.Store) {
	ctx := t.Context()
	next := func() (time.Time, bool) {
		t.Helper()
		at, ok, err := st.TaskNextReapAt(ctx)
		if err != nil {
			t.Fatalf("NextReapAt: %v", err)
		}
		return at, ok
	}
	due := func(now time.Time, limit int) []string {
		t.Helper()
		ids, err := st.TaskListDue(ctx, now, limit)
		if err != nil {
			t.Fatalf("DueTasks: %v", err)
		}
		return ids
	}
	if _, ok := next(); ok {
		t.Errorf("NextReapAt on an empty store: ok = true")
	}
	job := newJob("tenant")
	short := newTask(job.ID, "short")
	short.Timeout = 20 * time.Second
	mid := newTask(job.ID, "mid")
	mid.HeartbeatTimeout = time.Minute
	ts := seed(t, st, job, newTask(job.ID, "long"), short, mid, newTask(job.ID, "pending"), newTask(job.ID, "done"))
	if _, ok := next(); ok {
		t.Errorf("NextReapAt with nothing running: ok = true")
	}
	if ids := due(at(time.Hour), 10); len(ids) != 0 {
		t.Errorf("DueTasks with nothing running: %v", ids)
	}
	for _, k := range []string{"long", "short", "mid"} {
		mustClaim(t, st, ts[k].ID, t0) // reap at +90s, +20s, +60s
	}
	// Reap times left on tasks that do not run are ignored.
	mutate(t, st, ts["done"].ID, func(tk *store.Task) {
		tk.Status, tk.ReapAt, tk.FinishedAt = lifecycle.Completed, at(time.Second), at(time.Second)
	})
	mutate(t, st, ts["pending"].ID, func(tk *store.Task) { tk.ReapAt = at(time.Second) })

	if got, ok := next(); !ok || !got.Equal(at(20*time.Second)) {
		t.Errorf("NextReapAt = %v, %v; want %v", got, ok, at(20*time.Second))
	}
	checkIDs(t, "due before any", due(at(19*time.Second), 10), nil)
	checkIDs(t, "due at the first", due(at(20*time.Second), 10), []string{ts["short"].ID})
	checkIDs(t, "due at +60s", due(at(60*time.Second), 10), []string{ts["short"].ID, ts["mid"].ID})
	checkIDs(t, "due at +1h", due(at(time.Hour), 10), []string{ts["short"].ID, ts["mid"].ID, ts["long"].ID})
	checkIDs(t, "due at +1h, limit 2", due(at(time.Hour), 2), []string{ts["short"].ID, ts["mid"].ID})

	// Once the earliest stops running, the next one is the earliest.
	setStatus(t, st, ts["short"].ID, lifecycle.Completed, at(10*time.Second))
	if got, ok := next(); !ok || !got.Equal(at(60*time.Second)) {
		t.Errorf("NextReapAt after the first finished = %v, %v; want %v", got, ok, at(60*time.Second))
	}
	checkIDs(t, "due at +1h after the first finished", due(at(time.Hour), 10), []string{ts["mid"].ID, ts["long"].ID})
	for _, k := range []string{"mid", "long"} {
		setStatus(t, st, ts[k].ID, lifecycle.Completed, at(10*time.Second))
	}
	if _, ok := next(); ok {
		t.Errorf("NextReapAt after everything finished: ok = true")
	}
}
