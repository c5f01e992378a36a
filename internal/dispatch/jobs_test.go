package dispatch_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestCreateJobRejectsAnInvalidDAGWithTheValidatorsMessagesAndStoresNothing(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		tooMany := make([]lifecycle.TaskSpec, 51)
		for i := range tooMany {
			tooMany[i] = spec(fmt.Sprintf("t%d", i))
		}
		tests := []struct {
			tasks []lifecycle.TaskSpec
			want  string
		}{
			{nil, "tasks must be a non-empty array"},
			{tooMany, "Too many tasks: 51 (max 50)"},
			{[]lifecycle.TaskSpec{spec("my task!")}, `Invalid taskId: "my task!" — must match /^[a-zA-Z0-9-_]{1,128}$/`},
			{[]lifecycle.TaskSpec{spec("a"), spec("a")}, "Duplicate taskId: a"},
			{[]lifecycle.TaskSpec{spec("a"), spec("color-tags", "unknown-task")}, `Task color-tags depends on "unknown-task" which does not exist`},
			{[]lifecycle.TaskSpec{spec("r"), spec("a", "b"), spec("b", "a")}, "Cycle detected involving: a, b"},
		}
		for _, tc := range tests {
			_, err := e.D.CreateJob(e.Ctx, dispatch.CreateJobParams{Tenant: tenant, Tasks: tc.tasks})
			if v := dispatchtest.WantErr[*dispatch.ValidationError](t, err); len(v.Errors) == 0 || v.Errors[0] != tc.want {
				t.Errorf("errors %q, want first %q", v.Errors, tc.want)
			}
		}
		if jobs, _, _ := e.D.ListJobs(e.Ctx, dispatch.ListJobsParams{Tenant: tenant}); len(jobs) != 0 {
			t.Errorf("invalid submissions stored %d jobs", len(jobs))
		}
	})
}

func TestCreateJobWithIdempotencyKeyReturnsTheSameJob(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		p := dispatch.CreateJobParams{Tenant: tenant, IdempotencyKey: "k1", RequestHash: "h1", Tasks: []lifecycle.TaskSpec{spec("a"), spec("b", "a")}}
		first, err := e.D.CreateJob(e.Ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.D.CreateJob(e.Ctx, p)
		if err != nil || !again.Replayed || again.Job.ID != first.Job.ID || len(again.RootTasks) != 1 {
			t.Fatalf("repeat: %+v, %v", again, err)
		}
		p.RequestHash = "h2"
		if _, err := e.D.CreateJob(e.Ctx, p); !errors.Is(err, dispatch.ErrIdempotencyMismatch) {
			t.Errorf("same key, different body: %v", err)
		}
		p.Tenant, p.RequestHash = "other", "h1"
		if other, err := e.D.CreateJob(e.Ctx, p); err != nil || other.Replayed {
			t.Errorf("another tenant's key: %+v, %v", other, err)
		}
		if jobs, _, _ := e.D.ListJobs(e.Ctx, dispatch.ListJobsParams{Tenant: tenant}); len(jobs) != 1 {
			t.Errorf("%d jobs for the tenant, want 1", len(jobs))
		}
	})
}

func TestAddTasksToARunningJob(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("scrape"), spec("compile", "scrape"), spec("broken"), spec("slow"))
		e.Run(job, "scrape")
		e.Fail(e.Claim(job, "broken"), lifecycle.DataQuality)
		res, err := e.D.AddTasks(e.Ctx, dispatch.AddTasksParams{Tenant: tenant, JobID: job.ID, Tasks: []lifecycle.TaskSpec{
			spec("extra", "scrape"),
			spec("final", "extra", "compile"),
			spec("doomed", "broken"),
			spec("fresh"),
		}})
		if err != nil {
			t.Fatal(err)
		}
		wantEvents(t, res.AddedTasks, "extra", "final", "doomed", "fresh")
		wantEvents(t, res.ImmediatelyReady, "extra", "fresh")
		if res.TotalTasksNow != 8 {
			t.Errorf("total %d, want 8", res.TotalTasksNow)
		}
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{"extra": lifecycle.Pending, "final": lifecycle.Waiting, "doomed": lifecycle.Skipped, "fresh": lifecycle.Pending})
		c := e.Claim(job, "extra")
		if string(c.DependencyOutputs["scrape"]) != `{"by":"scrape"}` {
			t.Errorf("dependency outputs %s", c.DependencyOutputs)
		}
		e.Succeed(c)
		e.Run(job, "compile", "final", "fresh", "slow")
		if j := e.Job(job.ID); j.Status != lifecycle.JobPartialFailure || j.TotalTasks != 8 {
			t.Errorf("job %s with %d tasks", j.Status, j.TotalTasks)
		}
		if n := count(e.Events(job), dispatch.EventJobTasksAdded); n != 1 {
			t.Errorf("%d Job Tasks Added events", n)
		}

		_, err = e.D.AddTasks(e.Ctx, dispatch.AddTasksParams{Tenant: tenant, JobID: job.ID, Tasks: []lifecycle.TaskSpec{spec("late")}})
		if !errors.Is(err, dispatch.ErrJobFinished) {
			t.Errorf("adding to a finished job: %v", err)
		}
	})
}

func TestAddTasksValidatesAgainstTheExistingDAG(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"))
		tests := []struct {
			tasks []lifecycle.TaskSpec
			want  string
		}{
			{[]lifecycle.TaskSpec{spec("a")}, "Duplicate taskId: a"},
			{[]lifecycle.TaskSpec{spec("c", "nope")}, `Task c depends on "nope" which does not exist`},
			{[]lifecycle.TaskSpec{spec("c", "d"), spec("d", "c")}, "Cycle detected involving: c, d"},
		}
		for _, tc := range tests {
			_, err := e.D.AddTasks(e.Ctx, dispatch.AddTasksParams{Tenant: tenant, JobID: job.ID, Tasks: tc.tasks})
			if v := dispatchtest.WantErr[*dispatch.ValidationError](t, err); v.Errors[0] != tc.want {
				t.Errorf("errors %q, want %q", v.Errors, tc.want)
			}
		}
		big := make([]lifecycle.TaskSpec, 49)
		for i := range big {
			big[i] = spec(fmt.Sprintf("n%d", i), "b")
		}
		_, err := e.D.AddTasks(e.Ctx, dispatch.AddTasksParams{Tenant: tenant, JobID: job.ID, Tasks: big})
		if v := dispatchtest.WantErr[*dispatch.ValidationError](t, err); v.Errors[0] != "Too many tasks: 51 (max 50)" {
			t.Errorf("cap: %q", v.Errors)
		}
		if _, err := e.D.AddTasks(e.Ctx, dispatch.AddTasksParams{Tenant: "other", JobID: job.ID, Tasks: []lifecycle.TaskSpec{spec("c")}}); !errors.Is(err, dispatch.ErrJobNotFound) {
			t.Errorf("another tenant: %v", err)
		}
		if j := e.Job(job.ID); j.TotalTasks != 2 {
			t.Errorf("rejected additions changed the job: %d tasks", j.TotalTasks)
		}
	})
}

func TestListJobsNewestFirstWithCursorAndStatusFilter(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		var ids []string
		for i := 0; i < 5; i++ {
			ids = append(ids, e.Submit(spec("a")).ID)
		}
		e.Run(&store.Job{ID: ids[1]}, "a")
		var got []string
		cursor := ""
		for page := 0; ; page++ {
			jobs, next, err := e.D.ListJobs(e.Ctx, dispatch.ListJobsParams{Tenant: tenant, Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				got = append(got, j.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		wantEvents(t, got, ids[4], ids[3], ids[2], ids[1], ids[0])
		done, _, err := e.D.ListJobs(e.Ctx, dispatch.ListJobsParams{Tenant: tenant, Status: lifecycle.JobCompleted})
		if err != nil || len(done) != 1 || done[0].ID != ids[1] {
			t.Errorf("completed jobs: %v, %v", done, err)
		}
		if other, _, _ := e.D.ListJobs(e.Ctx, dispatch.ListJobsParams{Tenant: "other"}); len(other) != 0 {
			t.Errorf("another tenant lists %d jobs", len(other))
		}
		for _, bad := range []string{"%%%", "bm90LWpzb24", "eyJiZWZvcmUiOi0xfQ"} {
			if _, _, err := e.D.ListJobs(e.Ctx, dispatch.ListJobsParams{Tenant: tenant, Cursor: bad}); !errors.Is(err, dispatch.ErrInvalidCursor) {
				t.Errorf("cursor %q: %v", bad, err)
			}
		}
	})
}

func TestJobsOfAnotherTenantAreNotFound(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"))
		id := e.Task(job, "a").ID
		if _, _, err := e.D.GetJob(e.Ctx, "other", job.ID); !errors.Is(err, dispatch.ErrJobNotFound) {
			t.Errorf("get job: %v", err)
		}
		if _, err := e.D.JobEvents(e.Ctx, "other", job.ID, 0, 10); !errors.Is(err, dispatch.ErrJobNotFound) {
			t.Errorf("job events: %v", err)
		}
		if _, err := e.D.GetTask(e.Ctx, "other", id); !errors.Is(err, dispatch.ErrTaskNotFound) {
			t.Errorf("get task: %v", err)
		}
		if _, err := e.D.ResumeJob(e.Ctx, "other", job.ID); !errors.Is(err, dispatch.ErrJobNotFound) {
			t.Errorf("resume: %v", err)
		}
	})
}

func TestGetTaskShowsEveryAttempt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		job := e.Submit(spec("a"), spec("b", "a"))
		e.Run(job, "a")
		c := e.Claim(job, "b")
		e.Fail(c, lifecycle.Infrastructure)
		e.Clock.Advance(e.Task(job, "b").AvailableAt.Sub(e.Clock.Now()))
		e.Run(job, "b")
		detail, err := e.D.GetTask(e.Ctx, tenant, c.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(detail.Attempts) != 2 || detail.Attempts[0].Outcome != store.OutcomeFailed || detail.Attempts[0].Error == nil ||
			detail.Attempts[1].Outcome != store.OutcomeSucceeded || detail.Attempts[1].Result != lifecycle.Completed {
			t.Errorf("attempts %+v", detail.Attempts)
		}
		if string(detail.DependencyOutputs["a"]) != `{"by":"a"}` || string(detail.Task.Output) != `{"by":"b"}` {
			t.Errorf("outputs %s / %s", detail.DependencyOutputs, detail.Task.Output)
		}
	})
}

// A claim hands out its task's job (id, tenant, name) with the lease, read in the claim's own
// transaction, whichever way the task is claimed; a plain task has no route.
func TestClaimCarriesItsJob(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		res, err := e.D.CreateJob(e.Ctx, dispatch.CreateJobParams{Tenant: tenant, Name: "nightly", Tasks: []lifecycle.TaskSpec{spec("a"), spec("b")}})
		if err != nil {
			t.Fatal(err)
		}
		want := dispatch.JobRef{ID: res.Job.ID, Tenant: tenant, Name: "nightly"}
		byID := e.Claim(res.Job, "a")
		next, err := e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{e.Task(res.Job, "b").Queue}, WorkerID: "w"})
		if err != nil || len(next) != 1 {
			t.Fatalf("claim next: %v %v", next, err)
		}
		for _, c := range []*dispatch.Claim{byID, next[0]} {
			if c.Job != want || c.Route != nil {
				t.Errorf("claim of %s: job %+v route %+v; want %+v and no route", c.Task.Key, c.Job, c.Route, want)
			}
		}
	})
}
