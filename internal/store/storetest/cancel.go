// Contract of cancellation and resume: cancelling idle and running work, resuming tasks, dead
// letters.

package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

func cancelIdle(t *testing.T, st store.Store, p store.CancelParams) []*store.TaskRef {
	t.Helper()
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.TaskCancelIdle(t.Context(), p)
		return err
	})
	return refs
}

func requestCancel(t *testing.T, st store.Store, p store.CancelParams) []*store.TaskRef {
	t.Helper()
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.TaskRequestCancel(t.Context(), p)
		return err
	})
	return refs
}

func testCancelIdleJob(t *testing.T, st store.Store) {
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "r"), newTask(job.ID, "w", "r"), newTask(job.ID, "p"),
		newTask(job.ID, "c"), newTask(job.ID, "f"), newTask(job.ID, "backoff"))
	other := newJob("tenant")
	ots := seed(t, st, other, newTask(other.ID, "p"), newTask(other.ID, "w", "p"))
	mustClaim(t, st, ts["r"].ID, t0)
	setStatus(t, st, ts["c"].ID, lifecycle.Completed, t0)
	setStatus(t, st, ts["f"].ID, lifecycle.Failed, t0)
	mutate(t, st, ts["backoff"].ID, func(tk *store.Task) { tk.Attempt, tk.AvailableAt = 1, at(time.Hour) })
	before := snapshot(t, st, ts["r"], ts["c"], ts["f"], ots["p"], ots["w"])

	now := at(time.Minute)
	refs := cancelIdle(t, st, store.CancelParams{JobID: job.ID, Now: now, Reason: "user"})
	checkRefs(t, st, "CancelIdle(job)", refs, ts["w"], ts["p"], ts["backoff"])
	for _, k := range []string{"w", "p", "backoff"} {
		got := getTask(t, st, ts[k].ID)
		if got.Status != lifecycle.Canceled || !got.FinishedAt.Equal(now) {
			t.Errorf("%s: status %s finished %v; want canceled at %v", k, got.Status, got.FinishedAt, now)
		}
	}
	checkUnchanged(t, st, "not idle or other job", before)
	checkIDs(t, "second CancelIdle", refIDs(cancelIdle(t, st, store.CancelParams{JobID: job.ID, Now: now, Reason: "again"})), nil)
}

func testCancelIdleTask(t *testing.T, st store.Store) {
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "p1"), newTask(job.ID, "p2"), newTask(job.ID, "r"), newTask(job.ID, "w", "r"))
	mustClaim(t, st, ts["r"].ID, t0)
	before := snapshot(t, st, ts["p2"], ts["r"], ts["w"])

	now := at(time.Minute)
	refs := cancelIdle(t, st, store.CancelParams{JobID: job.ID, TaskID: ts["p1"].ID, Now: now, Reason: "user"})
	checkRefs(t, st, "CancelIdle(p1)", refs, ts["p1"])
	if got := getTask(t, st, ts["p1"].ID); got.Status != lifecycle.Canceled || !got.FinishedAt.Equal(now) {
		t.Errorf("p1: status %s finished %v; want canceled at %v", got.Status, got.FinishedAt, now)
	}
	checkUnchanged(t, st, "other tasks", before)

	// A running task is not idle.
	refs = cancelIdle(t, st, store.CancelParams{JobID: job.ID, TaskID: ts["r"].ID, Now: now, Reason: "user"})
	checkIDs(t, "CancelIdle(running)", refIDs(refs), nil)
	checkUnchanged(t, st, "after CancelIdle(running)", before)

	refs = cancelIdle(t, st, store.CancelParams{JobID: job.ID, TaskID: ts["w"].ID, Now: now, Reason: "user"})
	checkRefs(t, st, "CancelIdle(waiting)", refs, ts["w"])
	checkUnchanged(t, st, "after CancelIdle(waiting)", before[:2])
}

func testRequestCancelJob(t *testing.T, st store.Store) {
	job := newJob("tenant")
	long := newTask(job.ID, "long") // reap at its lease end, claim+90s
	short := newTask(job.ID, "short")
	short.Timeout = 10 * time.Second // reap at its deadline, claim+10s
	ts := seed(t, st, job, long, short, newTask(job.ID, "already"), newTask(job.ID, "pending"), newTask(job.ID, "done"))
	other := newJob("tenant")
	ots := seed(t, st, other, newTask(other.ID, "r"))
	claimAt := t0
	for _, k := range []string{"long", "short", "already"} {
		mustClaim(t, st, ts[k].ID, claimAt)
	}
	mustClaim(t, st, ots["r"].ID, claimAt)
	mutate(t, st, ts["already"].ID, func(tk *store.Task) {
		tk.CancelRequestedAt, tk.CancelReason, tk.ReapAt = at(time.Second), "first", at(31*time.Second)
	})
	setStatus(t, st, ts["done"].ID, lifecycle.Completed, t0)
	longBefore, shortBefore := getTask(t, st, ts["long"].ID), getTask(t, st, ts["short"].ID)
	before := snapshot(t, st, ts["already"], ts["pending"], ts["done"], ots["r"])

	now := at(5 * time.Second)
	refs := requestCancel(t, st, store.CancelParams{JobID: job.ID, Now: now, Reason: "stop it"})
	checkRefs(t, st, "RequestCancel(job)", refs, ts["long"], ts["short"])

	want := *longBefore
	want.CancelRequestedAt, want.CancelReason = now, "stop it"
	want.ReapAt = now.Add(30 * time.Second) // earlier than claim+90s
	checkSame(t, "long after RequestCancel", &want, getTask(t, st, ts["long"].ID))
	want = *shortBefore
	want.CancelRequestedAt, want.CancelReason = now, "stop it"
	want.ReapAt = claimAt.Add(10 * time.Second) // its deadline comes first
	checkSame(t, "short after RequestCancel", &want, getTask(t, st, ts["short"].ID))
	checkUnchanged(t, st, "not running, already requested or other job", before)
}

func testRequestCancelTask(t *testing.T, st store.Store) {
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "r1"), newTask(job.ID, "r2"), newTask(job.ID, "p"))
	mustClaim(t, st, ts["r1"].ID, t0)
	mustClaim(t, st, ts["r2"].ID, t0)
	r1Before := getTask(t, st, ts["r1"].ID)
	before := snapshot(t, st, ts["r2"], ts["p"])

	now := at(70 * time.Second)
	refs := requestCancel(t, st, store.CancelParams{JobID: job.ID, TaskID: ts["r1"].ID, Now: now, Reason: "one"})
	checkRefs(t, st, "RequestCancel(r1)", refs, ts["r1"])
	want := *r1Before
	want.CancelRequestedAt, want.CancelReason = now, "one"
	// now+grace (100s) is later than the lease end (90s): the reap time stays.
	want.ReapAt = r1Before.ReapAt
	checkSame(t, "r1 after RequestCancel", &want, getTask(t, st, ts["r1"].ID))
	checkUnchanged(t, st, "others", before)

	// Already requested: not touched again.
	refs = requestCancel(t, st, store.CancelParams{JobID: job.ID, TaskID: ts["r1"].ID, Now: at(80 * time.Second), Reason: "two"})
	checkIDs(t, "second RequestCancel(r1)", refIDs(refs), nil)
	checkSame(t, "r1 after a second RequestCancel", &want, getTask(t, st, ts["r1"].ID))

	// Not running: nothing to request.
	refs = requestCancel(t, st, store.CancelParams{JobID: job.ID, TaskID: ts["p"].ID, Now: now, Reason: "p"})
	checkIDs(t, "RequestCancel(pending)", refIDs(refs), nil)
	checkUnchanged(t, st, "others after RequestCancel(pending)", before)
}

func testResumeTasks(t *testing.T, st store.Store) {
	job := newJob("tenant")
	ts := seed(t, st, job,
		newTask(job.ID, "a"),                    // completed
		newTask(job.ID, "b"),                    // failed, dead-lettered
		newTask(job.ID, "c", "a"),               // canceled; parent completed
		newTask(job.ID, "d", "b"),               // skipped; parent failed
		newTask(job.ID, "e", "a", "b"),          // skipped; one parent completed, one failed
		newTask(job.ID, "f", "d", "e"),          // skipped; two unfinished parents
		newTask(job.ID, "g", "a"),               // skipped, only completed parents
		newTask(job.ID, "h", "a"),               // completed
		newTask(job.ID, "pending-root"),         // pending: untouched
		newTask(job.ID, "running"),              // running: untouched
		newTask(job.ID, "canceled-twice-tried"), // canceled at attempt 2
	)
	other := newJob("tenant")
	ots := seed(t, st, other, newTask(other.ID, "f"))

	errFail := &store.TaskError{Category: lifecycle.UserCode, Message: "boom"}
	mutate(t, st, ts["a"].ID, func(tk *store.Task) {
		tk.Status, tk.Attempt, tk.FinishedAt, tk.Output = lifecycle.Completed, 1, at(time.Second), json.RawMessage(`1`)
	})
	mutate(t, st, ts["h"].ID, func(tk *store.Task) {
		tk.Status, tk.Attempt, tk.UnfinishedParents, tk.FinishedAt = lifecycle.Completed, 1, 0, at(time.Second)
	})
	mutate(t, st, ts["b"].ID, func(tk *store.Task) {
		tk.Status, tk.Attempt, tk.FinishedAt, tk.DeadLetteredAt, tk.Error = lifecycle.Failed, 3, at(2*time.Second), at(2*time.Second), errFail
	})
	mutate(t, st, ts["c"].ID, func(tk *store.Task) {
		tk.Status, tk.UnfinishedParents, tk.FinishedAt = lifecycle.Canceled, 0, at(2*time.Second)
		tk.CancelRequestedAt, tk.CancelReason = at(2*time.Second), "user"
	})
	for _, k := range []string{"d", "e", "f"} {
		setStatus(t, st, ts[k].ID, lifecycle.Skipped, at(2*time.Second))
	}
	mutate(t, st, ts["e"].ID, func(tk *store.Task) { tk.UnfinishedParents = 1 })
	mutate(t, st, ts["g"].ID, func(tk *store.Task) {
		tk.Status, tk.UnfinishedParents, tk.FinishedAt = lifecycle.Skipped, 0, at(2*time.Second)
	})
	mutate(t, st, ts["canceled-twice-tried"].ID, func(tk *store.Task) {
		tk.Status, tk.Attempt, tk.RetryBase, tk.FinishedAt, tk.Error = lifecycle.Canceled, 2, 1, at(2*time.Second), errFail
	})
	mustClaim(t, st, ts["running"].ID, t0)
	setStatus(t, st, ots["f"].ID, lifecycle.Failed, t0)
	before := map[string]*store.Task{}
	for k, tk := range ts {
		before[k] = getTask(t, st, tk.ID)
	}
	untouched := snapshot(t, st, ts["a"], ts["h"], ts["pending-root"], ts["running"], ots["f"])

	now := at(time.Hour)
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.TaskResume(t.Context(), job.ID, now)
		return err
	})
	checkRefs(t, st, "ResumeTasks", refs, ts["b"], ts["c"], ts["d"], ts["e"], ts["f"], ts["g"], ts["canceled-twice-tried"])

	want := map[string]struct {
		status     lifecycle.TaskStatus
		unfinished int
	}{
		"b":                    {lifecycle.Pending, 0},
		"c":                    {lifecycle.Pending, 0},
		"d":                    {lifecycle.Waiting, 1},
		"e":                    {lifecycle.Waiting, 1},
		"f":                    {lifecycle.Waiting, 2},
		"g":                    {lifecycle.Pending, 0},
		"canceled-twice-tried": {lifecycle.Pending, 0},
	}
	for k, w := range want {
		b := before[k]
		got := getTask(t, st, b.ID)
		if got.Status != w.status || got.UnfinishedParents != w.unfinished {
			t.Errorf("%s: status %s, unfinished parents %d; want %s, %d", k, got.Status, got.UnfinishedParents, w.status, w.unfinished)
		}
		if got.Attempt != b.Attempt || got.RetryBase != b.Attempt || got.AttemptsUsed() != 0 {
			t.Errorf("%s: attempt %d retry base %d; want attempt %d (unchanged) and retry base = attempt", k, got.Attempt, got.RetryBase, b.Attempt)
		}
		if got.Error != nil || !got.FinishedAt.IsZero() || !got.DeadLetteredAt.IsZero() {
			t.Errorf("%s: error %v, finished %v, dead-lettered %v; want all cleared", k, show(got.Error), got.FinishedAt, got.DeadLetteredAt)
		}
		if w.status == lifecycle.Pending && got.AvailableAt.After(now) {
			t.Errorf("%s: pending but available only at %v, after %v", k, got.AvailableAt, now)
		}
	}
	checkUnchanged(t, st, "not resumable or other job", untouched)

	// The resumed roots are claimable right away.
	checkIDs(t, "ready after resume", sortedStrings(readyIDs(t, st, "default", now, 100)),
		sortedIDs(ts["b"], ts["c"], ts["g"], ts["canceled-twice-tried"], ts["pending-root"]))
}

// ---------------------------------------------------------------------------------------------
// Dead letters

func testListDeadLetters(t *testing.T, st store.Store) {
	ctx := t.Context()
	deadLetter := func(id string, when time.Time) {
		mutate(t, st, id, func(tk *store.Task) {
			tk.Status, tk.FinishedAt, tk.DeadLetteredAt = lifecycle.Failed, when, when
			tk.Error = &store.TaskError{Category: lifecycle.DataQuality, Message: "bad row"}
		})
	}
	j1 := newJob("tenant-a")
	ts1 := seed(t, st, j1, newTask(j1.ID, "f1"), newTask(j1.ID, "failed-not-dl"), newTask(j1.ID, "f2"),
		newTask(j1.ID, "pending-dl"), newTask(j1.ID, "f3"), newTask(j1.ID, "ok"))
	jB := newJob("tenant-b")
	tsB := seed(t, st, jB, newTask(jB.ID, "fb"))
	j2 := newJob("tenant-a")
	ts2 := seed(t, st, j2, newTask(j2.ID, "f4"))

	deadLetter(ts1["f1"].ID, at(4*time.Second)) // dead-lettered times do not decide the order
	deadLetter(ts1["f2"].ID, at(3*time.Second))
	deadLetter(ts1["f3"].ID, at(2*time.Second))
	deadLetter(ts2["f4"].ID, at(1*time.Second))
	deadLetter(tsB["fb"].ID, at(1*time.Second))
	setStatus(t, st, ts1["failed-not-dl"].ID, lifecycle.Failed, t0)
	mutate(t, st, ts1["pending-dl"].ID, func(tk *store.Task) { tk.DeadLetteredAt = t0 })
	setStatus(t, st, ts1["ok"].ID, lifecycle.Completed, t0)

	list := func(tenant string, before int64, limit int) []*store.Task {
		t.Helper()
		tasks, err := st.TaskListDeadLetters(ctx, store.TaskListDeadLettersParams{Tenant: tenant, BeforeSeq: before, Limit: limit})
		if err != nil {
			t.Fatalf("ListDeadLetters: %v", err)
		}
		return tasks
	}
	all := list("tenant-a", 0, 100)
	checkIDs(t, "tenant-a", taskIDs(all), []string{ts2["f4"].ID, ts1["f3"].ID, ts1["f2"].ID, ts1["f1"].ID})
	for _, tk := range all {
		checkSame(t, "dead letter "+tk.Key, getTask(t, st, tk.ID), tk)
	}
	p1 := list("tenant-a", 0, 3)
	checkIDs(t, "tenant-a page 1", taskIDs(p1), []string{ts2["f4"].ID, ts1["f3"].ID, ts1["f2"].ID})
	if len(p1) == 3 {
		checkIDs(t, "tenant-a page 2", taskIDs(list("tenant-a", p1[2].Seq, 3)), []string{ts1["f1"].ID})
		checkIDs(t, "tenant-a before f3", taskIDs(list("tenant-a", p1[1].Seq, 1)), []string{ts1["f2"].ID})
	}
	checkIDs(t, "tenant-b", taskIDs(list("tenant-b", 0, 100)), []string{tsB["fb"].ID})
	checkIDs(t, "tenant-c", taskIDs(list("tenant-c", 0, 100)), nil)

	// Resumed tasks leave the dead-letter view.
	inTx(t, st, func(tx store.Tx) error {
		_, err := tx.TaskResume(ctx, j2.ID, at(time.Hour))
		return err
	})
	checkIDs(t, "tenant-a after resuming f4's job", taskIDs(list("tenant-a", 0, 100)), []string{ts1["f3"].ID, ts1["f2"].ID, ts1["f1"].ID})
}
