package dispatch_test

import (
	"errors"
	"testing"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// CompleteMany answers every report as Complete would, applying the plain successes together.
func TestCompleteManyAnswersEachReportAsComplete(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		dag := e.Submit(spec("p1"), spec("p2"), spec("child", "p1", "p2"), spec("solo", "p1"), spec("other"))
		flat := e.Submit(spec("x"), spec("y"))
		p1, p2, other := e.Claim(dag, "p1"), e.Claim(dag, "p2"), e.Claim(dag, "other")
		x, y := e.Claim(flat, "x"), e.Claim(flat, "y")
		done := e.Succeed(other) // reported before: repeated below
		if done.Status != lifecycle.Completed {
			t.Fatal(done)
		}
		ok := func(c *dispatch.Claim, out string) dispatch.CompleteParams {
			return dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
				Outcome: store.OutcomeSucceeded, Output: []byte(out)}
		}
		forged := ok(x, `1`)
		forged.LeaseToken = "forged"
		failOther := ok(other, ``)
		failOther.Outcome, failOther.Error = store.OutcomeFailed, &store.TaskError{Category: lifecycle.UserCode, Message: "no"}
		ps := []dispatch.CompleteParams{
			ok(p1, `{"p":1}`),
			ok(p2, `{"p":2}`),
			forged,               // refused: lease mismatch, no effect
			ok(x, `{"x":1}`),     // applied (the forged one before it changed nothing)
			ok(other, `{"n":1}`), // a repeat of an applied report: duplicate
			{TaskID: "no-such-task", Attempt: 1, LeaseToken: "t", Outcome: store.OutcomeSucceeded},
			ok(p1, `{"p":1}`), // the same report twice in one batch: applied once
			failOther,         // a failure goes through Complete: other succeeded, so it conflicts
		}
		results, errs := e.D.CompleteMany(e.Ctx, ps)
		for i, want := range []string{"ok", "ok", "lease", "ok", "dup", "notfound", "dup", "conflict"} {
			err, res := errs[i], results[i]
			switch want {
			case "ok":
				if err != nil || res == nil || res.Status != lifecycle.Completed || res.Duplicate {
					t.Errorf("report %d: %+v, %v; want applied", i, res, err)
				}
			case "dup":
				if err != nil || res == nil || !res.Duplicate || res.Status != lifecycle.Completed {
					t.Errorf("report %d: %+v, %v; want a duplicate", i, res, err)
				}
			case "lease":
				if !errors.Is(err, dispatch.ErrLeaseMismatch) {
					t.Errorf("report %d: %v, want ErrLeaseMismatch", i, err)
				}
			case "notfound":
				if !errors.Is(err, dispatch.ErrTaskNotFound) {
					t.Errorf("report %d: %v, want ErrTaskNotFound", i, err)
				}
			case "conflict":
				if !errors.Is(err, dispatch.ErrOutcomeConflict) {
					t.Errorf("report %d: %v, want ErrOutcomeConflict", i, err)
				}
			}
		}
		e.WantStatus(t, dag, map[string]lifecycle.TaskStatus{"p1": lifecycle.Completed, "p2": lifecycle.Completed,
			"child": lifecycle.Pending, "solo": lifecycle.Pending, "other": lifecycle.Completed})
		if tk := e.Task(dag, "p1"); string(tk.Output) != `{"p":1}` || !tk.LeaseExpiresAt.IsZero() || tk.FinishedAt.IsZero() {
			t.Errorf("p1 after CompleteMany: output %s lease %v finished %v", tk.Output, tk.LeaseExpiresAt, tk.FinishedAt)
		}
		for key, n := range map[string]int{"p1": 1, "p2": 1, "other": 1} {
			if got := count(e.Events(dag, key), dispatch.EventTaskCompleted); got != n {
				t.Errorf("%s: %d Task Completed events, want %d", key, got, n)
			}
		}
		if got := count(e.Events(dag, "child"), dispatch.EventTaskPending); got != 1 {
			t.Errorf("child released %d times, want once (after both parents)", got)
		}
		as, err := st.AttemptList(e.Ctx, p1.Task.ID)
		if err != nil || len(as) != 1 || as[0].Outcome != store.OutcomeSucceeded || as[0].Result != lifecycle.Completed || as[0].FinishedAt.IsZero() {
			t.Errorf("p1's attempt: %+v, %v", as, err)
		}
		// Finishing the rest completes both jobs, with the counts the batch left.
		e.Run(dag, "child", "solo")
		if j := e.Job(dag.ID); j.Status != lifecycle.JobCompleted || j.UnfinishedTasks != 0 {
			t.Errorf("dag job: %s with %d unfinished", j.Status, j.UnfinishedTasks)
		}
		e.Succeed(y)
		if j := e.Job(flat.ID); j.UnfinishedTasks != 0 || j.Status == lifecycle.JobProcessing {
			t.Errorf("flat job: %s with %d unfinished", j.Status, j.UnfinishedTasks)
		}
	})
}

// A transaction that ends tasks of many jobs settles each job as a transaction of its own would:
// its counter, its end once no task is left (completed, canceled or partially failed, with the
// event that says so), and nothing for a job with tasks left.
func TestCompleteManySettlesEachJob(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		one := e.Submit(spec("a"))                    // ends completed
		two := e.Submit(spec("b"), spec("c"))         // keeps c unfinished
		canceled := e.Submit(spec("d"), spec("idle")) // canceled: d still completes
		failed := e.Submit(spec("f"), spec("g"))      // f failed for good: ends partially failed
		a, b, d, g := e.Claim(one, "a"), e.Claim(two, "b"), e.Claim(canceled, "d"), e.Claim(failed, "g")
		if _, err := e.D.CancelJob(e.Ctx, tenant, canceled.ID, "enough"); err != nil {
			t.Fatal(err)
		}
		f := e.Claim(failed, "f")
		e.Fail(f, lifecycle.DataQuality)
		ok := func(c *dispatch.Claim) dispatch.CompleteParams {
			return dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
				Outcome: store.OutcomeSucceeded, Output: []byte(`{}`)}
		}
		if _, errs := e.D.CompleteMany(e.Ctx, []dispatch.CompleteParams{ok(a), ok(b), ok(d), ok(g)}); errors.Join(errs...) != nil {
			t.Fatal(errs)
		}
		for _, c := range []struct {
			job        *store.Job
			status     lifecycle.JobStatus
			unfinished int
			last       string // the job's last event
		}{
			{one, lifecycle.JobCompleted, 0, dispatch.EventJobCompleted},
			{two, lifecycle.JobProcessing, 1, dispatch.EventTaskCompleted},
			{canceled, lifecycle.JobCanceled, 0, dispatch.EventJobCanceled},
			{failed, lifecycle.JobPartialFailure, 0, dispatch.EventTaskCompleted},
		} {
			job := e.Job(c.job.ID)
			if job.Status != c.status || job.UnfinishedTasks != c.unfinished || job.FinishedAt.IsZero() != (c.status == lifecycle.JobProcessing) {
				t.Errorf("job of %s: status %s, %d unfinished, finished at %v; want %s, %d", c.job.ID, job.Status, job.UnfinishedTasks,
					job.FinishedAt, c.status, c.unfinished)
			}
			evs := e.Events(c.job)
			if evs[len(evs)-1] != c.last {
				t.Errorf("job %s: events %q, want the last to be %s", c.job.ID, evs, c.last)
			}
			if n := count(evs, dispatch.EventJobCompleted) + count(evs, dispatch.EventJobCanceled); n > 1 {
				t.Errorf("job %s: events %q end the job %d times", c.job.ID, evs, n)
			}
		}
		if evs := e.Events(failed); count(evs, dispatch.EventJobFailure) != 1 {
			t.Errorf("the failed job's events %q, want one %s", evs, dispatch.EventJobFailure)
		}
	})
}
