// Contract of jobs: round trips, lookups, idempotency keys, listing, cursors and job updates.

package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

func testJobRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	j := &store.Job{
		ID:              "job-" + uuid.NewString(),
		Tenant:          "tenant-a",
		Name:            "nightly import",
		Status:          lifecycle.JobCompleted,
		IdempotencyKey:  "idem-1",
		RequestHash:     "sha256:abc",
		TotalTasks:      7,
		UnfinishedTasks: 3,
		CreatedAt:       at(-time.Hour),
		FinishedAt:      at(1500 * time.Millisecond),
	}
	bare := &store.Job{ID: "job-" + uuid.NewString(), Tenant: "tenant-a", Status: lifecycle.JobProcessing, CreatedAt: t0}
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.JobInsert(ctx, j); err != nil {
			return err
		}
		return tx.JobInsert(ctx, bare)
	})
	if j.Seq <= 0 {
		t.Fatalf("InsertJob set Seq = %d, want > 0", j.Seq)
	}
	if bare.Seq <= j.Seq {
		t.Errorf("Seq of the second job = %d, want > %d", bare.Seq, j.Seq)
	}
	checkSame(t, "GetJob", j, getJob(t, st, j.ID))
	checkSame(t, "GetJob of a job with zero optional fields", bare, getJob(t, st, bare.ID))

	// Inside a transaction too.
	inTx(t, st, func(tx store.Tx) error {
		got, err := tx.JobGet(ctx, j.ID)
		if err != nil {
			return err
		}
		checkSame(t, "Tx.GetJob", j, got)
		return nil
	})
}

func testUnknownIDsAreNotFound(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	tasks := seed(t, st, job, newTask(job.ID, "a"))
	check := func(name string, r store.Reader) {
		if _, err := r.JobGet(ctx, "job-"+uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetJob(unknown): err = %v, want ErrNotFound", name, err)
		}
		if _, err := r.TaskGet(ctx, uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetTask(unknown): err = %v, want ErrNotFound", name, err)
		}
		if _, err := r.AttemptGet(ctx, uuid.NewString(), 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetAttempt(unknown task): err = %v, want ErrNotFound", name, err)
		}
		if _, err := r.AttemptGet(ctx, tasks["a"].ID, 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetAttempt(known task, unknown attempt): err = %v, want ErrNotFound", name, err)
		}
	}
	check("Store", st)
	inTx(t, st, func(tx store.Tx) error {
		check("Tx", tx)
		// The transaction is still usable after the misses.
		_, err := tx.JobGet(ctx, job.ID)
		return err
	})
}

func testIdempotencyKeyConflictPerTenant(t *testing.T, st store.Store) {
	ctx := t.Context()
	first := newJob("tenant-a")
	first.IdempotencyKey = "key-1"
	seed(t, st, first)

	dup := newJob("tenant-a")
	dup.IdempotencyKey = "key-1"
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.JobInsert(ctx, dup) })
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("InsertJob with a used key: err = %v, want ErrConflict", err)
	}
	if _, err := st.JobGet(ctx, dup.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob(conflicting job): err = %v, want ErrNotFound", err)
	}
	checkSame(t, "first job after the conflict", first, getJob(t, st, first.ID))

	other := newJob("tenant-b")
	other.IdempotencyKey = "key-1"
	seed(t, st, other) // the same key under another tenant is fine

	// Jobs without a key never conflict.
	seed(t, st, newJob("tenant-a"))
	seed(t, st, newJob("tenant-a"))
}

func testJobByIdempotencyKey(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := newJob("tenant-a")
	a.IdempotencyKey = "key-1"
	a.RequestHash = "hash-a"
	b := newJob("tenant-b")
	b.IdempotencyKey = "key-1"
	a2 := newJob("tenant-a")
	a2.IdempotencyKey = "key-2"
	seed(t, st, a)
	seed(t, st, b)
	seed(t, st, a2)
	seed(t, st, newJob("tenant-a")) // no key

	for _, want := range []*store.Job{a, b, a2} {
		got, err := st.JobGetByIdempotencyKey(ctx, want.Tenant, want.IdempotencyKey)
		if err != nil {
			t.Errorf("JobByIdempotencyKey(%s, %s): %v", want.Tenant, want.IdempotencyKey, err)
			continue
		}
		checkSame(t, "JobByIdempotencyKey("+want.Tenant+", "+want.IdempotencyKey+")", want, got)
	}
	for _, k := range [][2]string{{"tenant-a", "key-3"}, {"tenant-c", "key-1"}, {"tenant-b", "key-2"}, {"tenant-a", ""}} {
		if _, err := st.JobGetByIdempotencyKey(ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobByIdempotencyKey(%s, %s): err = %v, want ErrNotFound", k[0], k[1], err)
		}
	}
	inTx(t, st, func(tx store.Tx) error {
		got, err := tx.JobGetByIdempotencyKey(ctx, "tenant-b", "key-1")
		if err != nil {
			return err
		}
		checkSame(t, "Tx.JobByIdempotencyKey", b, got)
		return nil
	})
}

// seedJobs inserts one job per status, in order, each in its own transaction.
func seedJobs(t *testing.T, st store.Store, tenant string, statuses ...lifecycle.JobStatus) []*store.Job {
	var jobs []*store.Job
	for _, s := range statuses {
		j := newJob(tenant)
		j.Status = s
		seed(t, st, j)
		jobs = append(jobs, j)
	}
	return jobs
}

func testListJobsNewestFirstWithPaging(t *testing.T, st store.Store) {
	var js []*store.Job
	for i := 0; i < 5; i++ {
		js = append(js, seedJobs(t, st, "tenant-a", lifecycle.JobProcessing)...)
		seedJobs(t, st, "tenant-b", lifecycle.JobProcessing) // interleaved
	}
	for i := 1; i < len(js); i++ {
		if js[i].Seq <= js[i-1].Seq {
			t.Fatalf("Seq not increasing: %d then %d", js[i-1].Seq, js[i].Seq)
		}
	}
	all := listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Limit: 100})
	checkIDs(t, "all, newest first", jobIDs(all), jobIDs([]*store.Job{js[4], js[3], js[2], js[1], js[0]}))
	for _, j := range all {
		for _, want := range js {
			if want.ID == j.ID {
				checkSame(t, "listed job", want, j)
			}
		}
	}

	// Page through two at a time.
	var paged []*store.Job
	before := int64(0)
	for page := 0; page < 10; page++ {
		got := listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", BeforeSeq: before, Limit: 2})
		if len(got) > 2 {
			t.Fatalf("page of limit 2 has %d jobs", len(got))
		}
		if len(got) == 0 {
			break
		}
		paged = append(paged, got...)
		before = got[len(got)-1].Seq
	}
	checkIDs(t, "paged by 2", jobIDs(paged), jobIDs(all))

	got := listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", BeforeSeq: js[3].Seq, Limit: 2})
	checkIDs(t, "before the 4th", jobIDs(got), jobIDs([]*store.Job{js[2], js[1]}))
	got = listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", BeforeSeq: js[0].Seq, Limit: 2})
	checkIDs(t, "before the oldest", jobIDs(got), nil)
	got = listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Limit: 1})
	checkIDs(t, "limit 1", jobIDs(got), []string{js[4].ID})
}

func testListJobsStatusFilter(t *testing.T, st store.Store) {
	js := seedJobs(t, st, "tenant-a", lifecycle.JobProcessing, lifecycle.JobCompleted,
		lifecycle.JobProcessing, lifecycle.JobCanceled, lifecycle.JobProcessing, lifecycle.JobPartialFailure)
	seedJobs(t, st, "tenant-b", lifecycle.JobProcessing, lifecycle.JobCompleted)

	got := listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Status: lifecycle.JobProcessing, Limit: 100})
	checkIDs(t, "processing", jobIDs(got), []string{js[4].ID, js[2].ID, js[0].ID})
	got = listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Status: lifecycle.JobProcessing, Limit: 1})
	checkIDs(t, "processing, limit 1", jobIDs(got), []string{js[4].ID})
	got = listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Status: lifecycle.JobProcessing, BeforeSeq: js[4].Seq, Limit: 1})
	checkIDs(t, "processing, second page", jobIDs(got), []string{js[2].ID})
	got = listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Status: lifecycle.JobCompleted, Limit: 100})
	checkIDs(t, "completed", jobIDs(got), []string{js[1].ID})
	got = listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Status: lifecycle.JobCanceled, Limit: 100})
	checkIDs(t, "canceled", jobIDs(got), []string{js[3].ID})
	got = listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Status: lifecycle.JobPartialFailure, Limit: 100})
	checkIDs(t, "partial_failure", jobIDs(got), []string{js[5].ID})
}

func testListJobsTenantIsolation(t *testing.T, st store.Store) {
	a := seedJobs(t, st, "tenant-a", lifecycle.JobProcessing, lifecycle.JobCompleted)
	b := seedJobs(t, st, "tenant-b", lifecycle.JobProcessing, lifecycle.JobCompleted)
	a = append(a, seedJobs(t, st, "tenant-a", lifecycle.JobProcessing)...)

	checkIDs(t, "tenant-a", jobIDs(listJobs(t, st, store.ListJobsParams{Tenant: "tenant-a", Limit: 100})),
		[]string{a[2].ID, a[1].ID, a[0].ID})
	checkIDs(t, "tenant-b", jobIDs(listJobs(t, st, store.ListJobsParams{Tenant: "tenant-b", Limit: 100})),
		[]string{b[1].ID, b[0].ID})
	checkIDs(t, "tenant-b completed", jobIDs(listJobs(t, st, store.ListJobsParams{Tenant: "tenant-b", Status: lifecycle.JobCompleted, Limit: 100})),
		[]string{b[1].ID})
	checkIDs(t, "unknown tenant", jobIDs(listJobs(t, st, store.ListJobsParams{Tenant: "tenant-c", Limit: 100})), nil)
	// A cursor taken from another tenant's list still only yields this tenant's jobs.
	checkIDs(t, "tenant-b before a tenant-a seq", jobIDs(listJobs(t, st, store.ListJobsParams{Tenant: "tenant-b", BeforeSeq: a[2].Seq, Limit: 100})),
		[]string{b[1].ID, b[0].ID})
}

// testCursorsAreInt64: Seq and ids are 64-bit, so a cursor beyond 2^31 must be accepted (a cursor
// past every row lists from the newest, or nothing after it).
func testCursorsAreInt64(t *testing.T, st store.Store) {
	ctx := t.Context()
	const big = int64(1) << 40
	js := seedJobs(t, st, "tenant", lifecycle.JobProcessing, lifecycle.JobCompleted)
	jobs, err := st.JobList(ctx, store.ListJobsParams{Tenant: "tenant", BeforeSeq: big, Limit: 10})
	if err != nil {
		t.Errorf("ListJobs(BeforeSeq 2^40): %v", err)
	} else {
		checkIDs(t, "ListJobs(BeforeSeq 2^40)", jobIDs(jobs), []string{js[1].ID, js[0].ID})
	}
	jobs, err = st.JobList(ctx, store.ListJobsParams{Tenant: "tenant", Status: lifecycle.JobProcessing, BeforeSeq: big, Limit: 10})
	if err != nil {
		t.Errorf("ListJobs(processing, BeforeSeq 2^40): %v", err)
	} else {
		checkIDs(t, "ListJobs(processing, BeforeSeq 2^40)", jobIDs(jobs), []string{js[0].ID})
	}

	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "f"))
	mutate(t, st, ts["f"].ID, func(tk *store.Task) {
		tk.Status, tk.FinishedAt, tk.DeadLetteredAt = lifecycle.Failed, t0, t0
	})
	dead, err := st.TaskListDeadLetters(ctx, store.TaskListDeadLettersParams{Tenant: "tenant", BeforeSeq: big, Limit: 10})
	if err != nil {
		t.Errorf("ListDeadLetters(beforeSeq 2^40): %v", err)
	} else {
		checkIDs(t, "ListDeadLetters(beforeSeq 2^40)", taskIDs(dead), []string{ts["f"].ID})
	}

	inTx(t, st, func(tx store.Tx) error {
		if err := tx.EventInsertMany(ctx, []*store.Event{{JobID: job.ID, Type: "Job Created", At: t0, Data: json.RawMessage(`{}`)}}); err != nil {
			return err
		}
		return tx.OutboxInsertMany(ctx, []*store.OutboxMessage{{Topic: "x", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0}})
	})
	if evs, err := st.EventList(ctx, store.EventListParams{JobID: job.ID, AfterID: big, Limit: 10}); err != nil || len(evs) != 0 {
		t.Errorf("ListEvents(after 2^40) = %d events, %v; want none", len(evs), err)
	}
	if msgs, err := st.OutboxListAfter(ctx, big, 10); err != nil || len(msgs) != 0 {
		t.Errorf("OutboxAfter(2^40) = %d messages, %v; want none", len(msgs), err)
	}
}

// ---------------------------------------------------------------------------------------------
// Job updates

func testAddUnfinished(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	seed(t, st, job)
	job.UnfinishedTasks = 5
	inTx(t, st, func(tx store.Tx) error { return tx.JobUpdate(ctx, job) })

	var got1, got2 *store.Job
	inTx(t, st, func(tx store.Tx) error {
		var err error
		if got1, err = tx.JobAddUnfinished(ctx, job.ID, -2); err != nil {
			return err
		}
		got2, err = tx.JobAddUnfinished(ctx, job.ID, 4)
		return err
	})
	want := *job
	want.UnfinishedTasks = 3
	checkSame(t, "AddUnfinished(-2)", &want, got1)
	want.UnfinishedTasks = 7
	checkSame(t, "AddUnfinished(+4)", &want, got2)
	checkSame(t, "GetJob after AddUnfinished", &want, getJob(t, st, job.ID))

	err := st.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.JobAddUnfinished(ctx, "job-"+uuid.NewString(), 1)
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddUnfinished(unknown): err = %v, want ErrNotFound", err)
	}
}

// testJobLockMany: JobLockMany reads the jobs of ids that exist, in id order.
func testJobLockMany(t *testing.T, st store.Store) {
	ctx := t.Context()
	jobs := []*store.Job{newJob("tenant"), newJob("tenant"), newJob("other")}
	for _, j := range jobs {
		seed(t, st, j, newTask(j.ID, "a"))
	}
	seed(t, st, newJob("tenant")) // not asked for
	want := slices.Clone(jobs)
	slices.SortFunc(want, func(a, b *store.Job) int { return strings.Compare(a.ID, b.ID) })
	var got []*store.Job
	inTx(t, st, func(tx store.Tx) error {
		var err error
		got, err = tx.JobLockMany(ctx, []string{jobs[2].ID, "job-" + uuid.NewString(), jobs[0].ID, jobs[1].ID})
		return err
	})
	if len(got) != len(want) {
		t.Fatalf("JobLockMany returned %d jobs, want %d", len(got), len(want))
	}
	for i, w := range want {
		checkSame(t, fmt.Sprintf("JobLockMany's job %d", i), w, got[i])
	}
}

// testUpdateJobManyWritesMutableFields: JobUpdateMany writes what JobUpdate writes, of every job
// it is given and of no other; an unknown job makes it ErrNotFound.
func testUpdateJobManyWritesMutableFields(t *testing.T, st store.Store) {
	ctx := t.Context()
	a, b, neighbour := newJob("tenant"), newJob("tenant"), newJob("tenant")
	a.IdempotencyKey, a.RequestHash = "k", "h"
	for _, j := range []*store.Job{a, b, neighbour} {
		seed(t, st, j)
	}
	ua, ub := *a, *b
	ua.Status, ua.TotalTasks, ua.UnfinishedTasks = lifecycle.JobPartialFailure, 12, 0
	ua.FinishedAt, ua.CancelRequestedAt, ua.FailureDetectedAt = at(time.Hour), at(time.Minute), at(30*time.Second)
	ub.Status, ub.UnfinishedTasks, ub.FinishedAt = lifecycle.JobCompleted, 0, at(2*time.Hour)
	inTx(t, st, func(tx store.Tx) error { return tx.JobUpdateMany(ctx, []*store.Job{&ua, &ub}) })
	checkSame(t, "a after UpdateJobMany", &ua, getJob(t, st, a.ID))
	checkSame(t, "b after UpdateJobMany", &ub, getJob(t, st, b.ID))
	checkSame(t, "neighbour", neighbour, getJob(t, st, neighbour.ID))

	// Clearing the optional times.
	za := ua
	za.Status, za.UnfinishedTasks = lifecycle.JobProcessing, 4
	za.FinishedAt, za.CancelRequestedAt, za.FailureDetectedAt = time.Time{}, time.Time{}, time.Time{}
	inTx(t, st, func(tx store.Tx) error { return tx.JobUpdateMany(ctx, []*store.Job{&za}) })
	checkSame(t, "after clearing with UpdateJobMany", &za, getJob(t, st, a.ID))

	unknown := newJob("tenant")
	zb := ub
	zb.Status = lifecycle.JobProcessing
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.JobUpdateMany(ctx, []*store.Job{&zb, unknown}) })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateJobMany(with an unknown job): err = %v, want ErrNotFound", err)
	}
	if _, err := st.JobGet(ctx, unknown.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob after UpdateJobMany(unknown): %v, want ErrNotFound", err)
	}
}

func testUpdateJobWritesMutableFields(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	job.IdempotencyKey, job.RequestHash = "k", "h"
	seed(t, st, newJob("tenant")) // a neighbour that must not change
	seed(t, st, job)
	neighbourList := listJobs(t, st, store.ListJobsParams{Tenant: "tenant", Limit: 10})

	u := *job
	u.Status = lifecycle.JobPartialFailure
	u.TotalTasks = 12
	u.UnfinishedTasks = 0
	u.FinishedAt = at(time.Hour)
	u.CancelRequestedAt = at(time.Minute)
	u.FailureDetectedAt = at(30 * time.Second)
	inTx(t, st, func(tx store.Tx) error { return tx.JobUpdate(ctx, &u) })
	checkSame(t, "after UpdateJob", &u, getJob(t, st, job.ID))
	checkSame(t, "neighbour", neighbourList[1], getJob(t, st, neighbourList[1].ID))

	// Clearing the optional times.
	z := u
	z.Status = lifecycle.JobProcessing
	z.UnfinishedTasks = 4
	z.FinishedAt, z.CancelRequestedAt, z.FailureDetectedAt = time.Time{}, time.Time{}, time.Time{}
	inTx(t, st, func(tx store.Tx) error { return tx.JobUpdate(ctx, &z) })
	checkSame(t, "after clearing with UpdateJob", &z, getJob(t, st, job.ID))
}

func testUpdateJobUnknownIsNotFound(t *testing.T, st store.Store) {
	ctx := t.Context()
	j := newJob("tenant")
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.JobUpdate(ctx, j) })
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateJob(unknown): err = %v, want ErrNotFound", err)
	}
	if _, err := st.JobGet(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob after UpdateJob(unknown): %v, want ErrNotFound", err)
	}
}
