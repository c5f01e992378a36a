// Contract of retention: deleting expired jobs with every row that belongs to them.

package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// expirable is a job of the retention tests with the rows that belong to it.
type expirable struct {
	job   *store.Job
	tasks []*store.Task // a, then b depending on a
}

// finishedJob stores a job of tenant with tasks a and b (b depends on a), each with an attempt,
// an event, a dataset event and a committed buffered publish, and the job's own event. With
// finished set the job and its tasks are completed at finished; else they stay as submitted.
func finishedJob(t *testing.T, st store.Store, tenant string, finished time.Time) *expirable {
	t.Helper()
	job := newJob(tenant)
	byKey := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b", "a"))
	e := &expirable{job: job, tasks: []*store.Task{byKey["a"], byKey["b"]}}
	inTx(t, st, func(tx store.Tx) error {
		ctx := t.Context()
		events := []*store.Event{{JobID: job.ID, Type: "Job Created", At: t0, Data: json.RawMessage(`{}`)}}
		for _, tk := range e.tasks {
			if err := tx.AttemptInsert(ctx, &store.Attempt{TaskID: tk.ID, Attempt: 1, WorkerID: "w", LeaseToken: "l", StartedAt: t0}); err != nil {
				return err
			}
			events = append(events, &store.Event{JobID: job.ID, TaskID: tk.ID, TaskKey: tk.Key, Type: "Task Pending", At: t0, Data: json.RawMessage(`{}`)})
			if _, err := tx.DatasetEventInsertMany(ctx, []*store.DatasetEvent{{DedupeKey: "d-" + tk.ID, JobID: job.ID, TaskID: tk.ID,
				Attempt: 1, DatasetUUID: "ds", DatasetVersion: "v1", CreatedAt: t0}}); err != nil {
				return err
			}
			bp := &store.BufferPublish{TaskID: tk.ID, Attempt: 1, BatchURI: "file:///b/" + tk.ID, JobID: job.ID, Tenant: tenant, CreatedAt: t0}
			if _, err := tx.BufferPublishInsert(ctx, bp); err != nil {
				return err
			}
			bp.State, bp.FinishedAt = store.BufferCommitted, t0
			if err := tx.BufferPublishUpdate(ctx, bp); err != nil {
				return err
			}
		}
		return tx.EventInsertMany(ctx, events)
	})
	if !finished.IsZero() {
		for _, tk := range e.tasks {
			setStatus(t, st, tk.ID, lifecycle.Completed, finished)
		}
		finishJob(t, st, job, lifecycle.JobCompleted, finished)
	}
	return e
}

// finishJob writes a job's finish.
func finishJob(t *testing.T, st store.Store, job *store.Job, status lifecycle.JobStatus, at time.Time) {
	t.Helper()
	job.Status, job.UnfinishedTasks, job.FinishedAt = status, 0, at
	inTx(t, st, func(tx store.Tx) error { return tx.JobUpdate(t.Context(), job) })
}

// deadLetter makes task a of e failed for good, dead-lettered at at, and its job finished then.
func deadLetter(t *testing.T, st store.Store, e *expirable, at time.Time) {
	t.Helper()
	mutate(t, st, e.tasks[0].ID, func(tk *store.Task) {
		tk.Status, tk.FinishedAt, tk.DeadLetteredAt = lifecycle.Failed, at, at
	})
	mutate(t, st, e.tasks[1].ID, func(tk *store.Task) { tk.Status, tk.FinishedAt = lifecycle.Skipped, at })
	finishJob(t, st, e.job, lifecycle.JobPartialFailure, at)
}

func deleteExpired(t *testing.T, st store.Store, p store.RetentionPolicy) store.RetentionCounts {
	t.Helper()
	var n store.RetentionCounts
	inTx(t, st, func(tx store.Tx) error {
		var err error
		n, err = tx.JobDeleteExpired(t.Context(), p)
		return err
	})
	return n
}

// perJob is what deleting one job of finishedJob deletes.
var perJob = store.RetentionCounts{Jobs: 1, Tasks: 2, TaskDeps: 1, Attempts: 2, Events: 3, DatasetEvents: 2, BufferPublishes: 2}

func times(c store.RetentionCounts, n int) store.RetentionCounts {
	var out store.RetentionCounts
	for range n {
		out.Add(c)
	}
	return out
}

// checkGone fails unless every row of e is deleted.
func checkGone(t *testing.T, st store.Store, what string, e *expirable) {
	t.Helper()
	ctx := t.Context()
	if _, err := st.JobGet(ctx, e.job.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: job still there (err %v)", what, err)
	}
	if evs, err := st.EventList(ctx, store.EventListParams{JobID: e.job.ID, Limit: 100}); err != nil || len(evs) != 0 {
		t.Errorf("%s: events = %d, %v; want none", what, len(evs), err)
	}
	for _, tk := range e.tasks {
		if _, err := st.TaskGet(ctx, tk.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: task %s still there (err %v)", what, tk.Key, err)
		}
		if as, err := st.AttemptList(ctx, tk.ID); err != nil || len(as) != 0 {
			t.Errorf("%s: attempts of %s = %d, %v; want none", what, tk.Key, len(as), err)
		}
		if ds, err := st.DatasetEventListByTask(ctx, tk.ID); err != nil || len(ds) != 0 {
			t.Errorf("%s: dataset events of %s = %d, %v; want none", what, tk.Key, len(ds), err)
		}
		if bs, err := st.BufferPublishListByTask(ctx, tk.ID); err != nil || len(bs) != 0 {
			t.Errorf("%s: buffer publishes of %s = %d, %v; want none", what, tk.Key, len(bs), err)
		}
	}
}

// checkKept fails unless every row of e is still there.
func checkKept(t *testing.T, st store.Store, what string, e *expirable) {
	t.Helper()
	ctx := t.Context()
	if _, err := st.JobGet(ctx, e.job.ID); err != nil {
		t.Errorf("%s: job gone: %v", what, err)
		return
	}
	if evs, err := st.EventList(ctx, store.EventListParams{JobID: e.job.ID, Limit: 100}); err != nil || len(evs) != 3 {
		t.Errorf("%s: events = %d, %v; want 3", what, len(evs), err)
	}
	for _, tk := range e.tasks {
		if _, err := st.TaskGet(ctx, tk.ID); err != nil {
			t.Errorf("%s: task %s gone: %v", what, tk.Key, err)
		}
		if as, err := st.AttemptList(ctx, tk.ID); err != nil || len(as) != 1 {
			t.Errorf("%s: attempts of %s = %d, %v; want 1", what, tk.Key, len(as), err)
		}
		if ds, err := st.DatasetEventListByTask(ctx, tk.ID); err != nil || len(ds) != 1 {
			t.Errorf("%s: dataset events of %s = %d, %v; want 1", what, tk.Key, len(ds), err)
		}
		if bs, err := st.BufferPublishListByTask(ctx, tk.ID); err != nil || len(bs) != 1 {
			t.Errorf("%s: buffer publishes of %s = %d, %v; want 1", what, tk.Key, len(bs), err)
		}
	}
	if parents, err := st.TaskParentOutputs(ctx, e.tasks[1].ID); err != nil || len(parents) != 1 {
		t.Errorf("%s: parents of b = %v, %v; want a", what, parents, err)
	}
}

func testRetentionDeletesExpiredJobsOnly(t *testing.T, st store.Store) {
	policy := store.RetentionPolicy{Now: t0, Retention: time.Hour, DeadLetterRetention: 3 * time.Hour,
		Tenants: map[string]time.Duration{"patient": 5 * time.Hour, "archive": 0, "brief": 10 * time.Minute}, Limit: 100}
	expired := finishedJob(t, st, "acme", at(-2*time.Hour))
	canceled := finishedJob(t, st, "acme", at(-3*time.Hour))
	finishJob(t, st, canceled.job, lifecycle.JobCanceled, at(-3*time.Hour))
	brief := finishedJob(t, st, "brief", at(-20*time.Minute)) // its own, shorter retention
	kept := map[string]*expirable{
		"an old job still processing":                 finishedJob(t, st, "acme", time.Time{}),
		"a recently finished job":                     finishedJob(t, st, "acme", at(-30*time.Minute)),
		"a job of a tenant with a longer retention":   finishedJob(t, st, "patient", at(-2*time.Hour)),
		"a job of a tenant kept forever":              finishedJob(t, st, "archive", at(-1000*time.Hour)),
		"a job with a queued buffered publish":        finishedJob(t, st, "acme", at(-2*time.Hour)),
		"a job with a recent dead buffered publish":   finishedJob(t, st, "acme", at(-2*time.Hour)),
		"a dead-lettered job within its retention":    finishedJob(t, st, "acme", time.Time{}),
		"a job finished at the cutoff, not before it": finishedJob(t, st, "acme", at(-time.Hour)),
	}
	deadLetter(t, st, kept["a dead-lettered job within its retention"], at(-2*time.Hour))
	for what, state := range map[string]string{"a job with a queued buffered publish": store.BufferQueued,
		"a job with a recent dead buffered publish": store.BufferDead} {
		inTx(t, st, func(tx store.Tx) error {
			bps, err := tx.BufferPublishListByTask(t.Context(), kept[what].tasks[1].ID)
			if err != nil {
				return err
			}
			bps[0].State, bps[0].FinishedAt = state, at(-2*time.Hour)
			return tx.BufferPublishUpdate(t.Context(), bps[0])
		})
	}

	got := deleteExpired(t, st, policy)
	checkSame(t, "deleted", times(perJob, 3), got)
	checkGone(t, st, "an expired completed job", expired)
	checkGone(t, st, "an expired canceled job", canceled)
	checkGone(t, st, "an expired job of a tenant with a shorter retention", brief)
	for what, e := range kept {
		checkKept(t, st, what, e)
	}
	checkSame(t, "deleted again", store.RetentionCounts{}, deleteExpired(t, st, policy))

	// Later, the dead letter is past its retention too (and so is the dead publish): gone.
	policy.Now = at(2 * time.Hour)
	got = deleteExpired(t, st, policy)
	checkGone(t, st, "a dead-lettered job past its retention", kept["a dead-lettered job within its retention"])
	checkGone(t, st, "a job with a dead publish past its retention", kept["a job with a recent dead buffered publish"])
	checkKept(t, st, "a job with a queued buffered publish, later", kept["a job with a queued buffered publish"])
	checkKept(t, st, "a job of a tenant with a longer retention, later", kept["a job of a tenant with a longer retention"])
	checkKept(t, st, "a job of a tenant kept forever, later", kept["a job of a tenant kept forever"])
	checkGone(t, st, "a job finished recently, later", kept["a recently finished job"])
	checkGone(t, st, "a job finished at the cutoff, later", kept["a job finished at the cutoff, not before it"])
	checkSame(t, "deleted later", times(perJob, 4), got)
	checkKept(t, st, "an old job still processing, later", kept["an old job still processing"])
}

func testRetentionResumedJobFollowsNormalRetention(t *testing.T, st store.Store) {
	policy := store.RetentionPolicy{Now: t0, Retention: time.Hour, DeadLetterRetention: 3 * time.Hour, Limit: 100}
	e := finishedJob(t, st, "acme", time.Time{})
	deadLetter(t, st, e, at(-10*time.Hour))
	// Resumed 2 h ago, finished again 30 min ago: the dead letter is gone, its finish is recent.
	inTx(t, st, func(tx store.Tx) error {
		_, err := tx.TaskResume(t.Context(), e.job.ID, at(-2*time.Hour))
		return err
	})
	for _, tk := range e.tasks {
		setStatus(t, st, tk.ID, lifecycle.Running, time.Time{})
		setStatus(t, st, tk.ID, lifecycle.Completed, at(-30*time.Minute))
	}
	finishJob(t, st, e.job, lifecycle.JobCompleted, at(-30*time.Minute))
	checkSame(t, "deleted within retention", store.RetentionCounts{}, deleteExpired(t, st, policy))
	checkKept(t, st, "a resumed job finished recently", e)

	policy.Now = at(31 * time.Minute) // an hour and a minute after the new finish, well within 3 h of the old dead letter
	checkSame(t, "deleted past retention", perJob, deleteExpired(t, st, policy))
	checkGone(t, st, "a resumed job past its retention", e)
}

func testRetentionBatchLimit(t *testing.T, st store.Store) {
	var jobs []*expirable
	for i := range 5 {
		jobs = append(jobs, finishedJob(t, st, "acme", at(-time.Duration(10-i)*time.Hour)))
	}
	recent := finishedJob(t, st, "acme", at(-time.Minute))
	policy := store.RetentionPolicy{Now: t0, Retention: time.Hour, Limit: 2}
	for i, want := range []int{2, 2, 1, 0} {
		checkSame(t, "batch", times(perJob, want), deleteExpired(t, st, policy))
		// Oldest finish first.
		for j, e := range jobs {
			if j < 2*i+want {
				checkGone(t, st, "an older job", e)
			} else {
				checkKept(t, st, "a later job", e)
			}
		}
	}
	checkKept(t, st, "a recent job", recent)
	policy.Retention = 0
	policy.Now = at(1000 * time.Hour)
	checkSame(t, "retention off", store.RetentionCounts{}, deleteExpired(t, st, policy))
	checkKept(t, st, "a job with retention off", recent)
}

func testRetentionKeepsLatestJobOfPipelineJob(t *testing.T, st store.Store) {
	policy := store.RetentionPolicy{Now: t0, Retention: time.Hour, Limit: 100}
	// Runs of the always_on job etl/extract, as Sources inserts them, all long finished.
	var pipelineRuns []*store.Job
	for i := range 3 {
		j := newJob("acme")
		j.Pipeline, j.PipelineVersion, j.PipelineJob = "etl", "v1", "extract"
		j.IdempotencyKey = "pipeline:etl:extract:always_on:" + string(rune('0'+i))
		j.Status, j.FinishedAt, j.TotalTasks = lifecycle.JobCompleted, at(-time.Duration(5-i)*time.Hour), 0
		inTx(t, st, func(tx store.Tx) error {
			_, err := tx.JobInsertManyIfAbsent(t.Context(), []*store.Job{j})
			return err
		})
		pipelineRuns = append(pipelineRuns, j)
	}
	other := newJob("acme")
	other.Pipeline, other.PipelineVersion, other.PipelineJob = "etl", "v1", "load"
	other.Status, other.FinishedAt = lifecycle.JobCompleted, at(-9*time.Hour)
	inTx(t, st, func(tx store.Tx) error { return tx.JobInsert(t.Context(), other) })

	got := deleteExpired(t, st, policy)
	if got.Jobs != 2 {
		t.Errorf("deleted %d jobs, want the 2 older runs of etl/extract", got.Jobs)
	}
	for i, j := range pipelineRuns {
		_, err := st.JobGet(t.Context(), j.ID)
		if latest := i == 2; latest != (err == nil) {
			t.Errorf("run %d (latest %v): GetJob err %v", i, latest, err)
		}
	}
	if _, err := st.JobGet(t.Context(), other.ID); err != nil {
		t.Errorf("the only job of etl/load: %v", err)
	}
	latest, err := st.PipelineJobLatest(t.Context(), store.PipelineJobKey{Tenant: "acme", Pipeline: "etl", Job: "extract"})
	if err != nil || latest.ID != pipelineRuns[2].ID {
		t.Errorf("LatestPipelineJob = %v, %v; want %s", latest, err, pipelineRuns[2].ID)
	}
	if _, err := st.PipelineJobLatest(t.Context(), store.PipelineJobKey{Tenant: "acme", Pipeline: "etl", Job: "nothing"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestPipelineJob of a job with no runs: %v, want ErrNotFound", err)
	}
}
