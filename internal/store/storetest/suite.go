package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// Run is the contract suite every store driver must pass unchanged. Each behaviour is a parallel
// subtest on a fresh store from open.
func Run(t *testing.T, open func(t testing.TB) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		{"JobRoundTrip", testJobRoundTrip},
		{"UnknownIDsAreNotFound", testUnknownIDsAreNotFound},
		{"IdempotencyKeyConflictPerTenant", testIdempotencyKeyConflictPerTenant},
		{"JobByIdempotencyKey", testJobByIdempotencyKey},
		{"ListJobsNewestFirstWithPaging", testListJobsNewestFirstWithPaging},
		{"ListJobsStatusFilter", testListJobsStatusFilter},
		{"ListJobsTenantIsolation", testListJobsTenantIsolation},
		{"CursorsAreInt64", testCursorsAreInt64},
		{"TaskRoundTrip", testTaskRoundTrip},
		{"JobTasksInInsertionOrder", testJobTasksInInsertionOrder},
		{"JobTasksWithResults", testJobTasksWithResults},
		{"ParentOutputs", testParentOutputs},
		{"ReadyTaskIDsFilterAndOrder", testReadyTaskIDsFilterAndOrder},
		{"ClaimTaskTakesLease", testClaimTaskTakesLease},
		{"ClaimTaskNotClaimable", testClaimTaskNotClaimable},
		{"ClaimTaskRaceHasOneWinner", testClaimTaskRaceHasOneWinner},
		{"ClaimAndCompleteTasksInBatches", testClaimAndCompleteTasksInBatches},
		{"TraceparentSurvivesInsertAndClaim", testTraceparentSurvivesInsertAndClaim},
		{"UpdateTaskWritesMutableFields", testUpdateTaskWritesMutableFields},
		{"UpdateTaskStaleFenceIsLeaseLost", testUpdateTaskStaleFenceIsLeaseLost},
		{"ReleaseChildrenWaitsForEveryParent", testReleaseChildrenWaitsForEveryParent},
		{"ReleaseChildrenLeavesCanceledChild", testReleaseChildrenLeavesCanceledChild},
		{"SkipDescendants", testSkipDescendants},
		{"CancelIdleJob", testCancelIdleJob},
		{"CancelIdleTask", testCancelIdleTask},
		{"RequestCancelJob", testRequestCancelJob},
		{"RequestCancelTask", testRequestCancelTask},
		{"ResumeTasks", testResumeTasks},
		{"AddUnfinished", testAddUnfinished},
		{"UpdateJobWritesMutableFields", testUpdateJobWritesMutableFields},
		{"UpdateJobUnknownIsNotFound", testUpdateJobUnknownIsNotFound},
		{"Attempts", testAttempts},
		{"PutAttemptsInsertsOrReplaces", testPutAttemptsInsertsOrReplaces},
		{"EventsBulkInsertAndList", testEventsBulkInsertAndList},
		{"ListTaskEvents", testListTaskEvents},
		{"Outbox", testOutbox},
		{"NextReapAtAndDueTasks", testNextReapAtAndDueTasks},
		{"ListDeadLetters", testListDeadLetters},
		{"JobCounts", testJobCounts},
		{"QueueStats", testQueueStats},
		{"InTxRollsBackOnError", testInTxRollsBackOnError},
		{"InTxCommitIsVisibleToReaders", testInTxCommitIsVisibleToReaders},
		{"BulkInsertTasksAndDeps", testBulkInsertTasksAndDeps},
		{"TaskCounts", testTaskCounts},
		{"OutboxBacklog", testOutboxBacklog},
		{"RetentionDeletesExpiredJobsOnly", testRetentionDeletesExpiredJobsOnly},
		{"RetentionResumedJobFollowsNormalRetention", testRetentionResumedJobFollowsNormalRetention},
		{"RetentionBatchLimit", testRetentionBatchLimit},
		{"RetentionKeepsLatestJobOfPipelineJob", testRetentionKeepsLatestJobOfPipelineJob},
		{"ExtendBufferPublishIsFencedByTheReceipt", testExtendBufferPublishIsFencedByTheReceipt},
		{"InsertBufferPublishIsIdempotent", testInsertBufferPublishIsIdempotent},
		{"ClaimableBufferPublishesFilterAndOrder", testClaimableBufferPublishes},
		{"ClaimableBufferPublishesSkipsHeldRows", testClaimableBufferPublishesSkipsHeldRows},
		{"UpdateBufferPublishWritesQueueFields", testUpdateBufferPublishWritesQueueFields},
		{"ListBufferDeadLettersPaging", testListBufferDeadLetters},
		{"PutPipelineInsertsAndActivates", testPutPipelineInsertsAndActivates},
		{"ListPipelinesByTenant", testListPipelinesByTenant},
		{"PipelineVersions", testPipelineVersions},
		{"ConsumersFollowTheActiveVersion", testConsumersFollowTheActiveVersion},
		{"InsertJobsIfAbsent", testInsertJobsIfAbsent},
		{"PipelineJobQueries", testPipelineJobQueries},
		{"DatasetLookups", testDatasetLookups},
		{"InsertDatasetsSkipsExistingProducers", testInsertDatasetsSkipsExistingProducers},
		{"DatasetNamesAreUniquePerTenant", testDatasetNamesAreUniquePerTenant},
		{"UpdateDatasetWritesItsFields", testUpdateDatasetWritesItsFields},
		{"ListDatasetsNamedFirst", testListDatasetsNamedFirst},
		{"DatasetVersions", testDatasetVersions},
		{"DatasetEvents", testDatasetEvents},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
	t.Run("OutboxRelayQueries", func(t *testing.T) {
		t.Parallel()
		testOutboxRelayQueries(t, open(t))
	})
}

// t0 is the fixed "now" of the suite; the store keeps milliseconds in UTC.
var t0 = time.UnixMilli(1_700_000_000_000).UTC()

func at(d time.Duration) time.Time { return t0.Add(d) }

// ---------------------------------------------------------------------------------------------
// Fixtures

func newJob(tenant string) *store.Job {
	return &store.Job{
		ID:        "job-" + uuid.NewString(),
		Tenant:    tenant,
		Name:      "job",
		Status:    lifecycle.JobProcessing,
		CreatedAt: t0,
	}
}

// newTask is a task as a submission creates it: pending without parents, else waiting.
func newTask(jobID, key string, deps ...string) *store.Task {
	status := lifecycle.Pending
	if len(deps) > 0 {
		status = lifecycle.Waiting
	}
	return &store.Task{
		ID:                uuid.NewString(),
		JobID:             jobID,
		Key:               key,
		Name:              "work",
		Queue:             "default",
		Runtime:           "pull",
		Input:             json.RawMessage(`{}`),
		DependsOn:         deps,
		UnfinishedParents: len(deps),
		Status:            status,
		MaxAttempts:       3,
		AvailableAt:       t0,
		BackoffBase:       10 * time.Second,
		BackoffMax:        10 * time.Minute,
		HeartbeatTimeout:  90 * time.Second,
		CancelGrace:       30 * time.Second,
		CreatedAt:         t0,
	}
}

// inTx runs fn in a transaction and fails the test if it returns an error. fn must not call
// t.Fatal; it returns errors instead.
func inTx(t testing.TB, st store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := st.InTx(t.Context(), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

// seed inserts a job and its tasks in one transaction, with a dep for every key the tasks'
// DependsOn name, and returns the tasks by key.
func seed(t testing.TB, st store.Store, job *store.Job, tasks ...*store.Task) map[string]*store.Task {
	t.Helper()
	byKey := map[string]*store.Task{}
	for _, tk := range tasks {
		byKey[tk.Key] = tk
	}
	var deps []store.Dep
	for _, tk := range tasks {
		for _, p := range tk.DependsOn {
			parent, ok := byKey[p]
			if !ok {
				t.Fatalf("seed: task %s depends on unknown key %s", tk.Key, p)
			}
			deps = append(deps, store.Dep{JobID: job.ID, ParentID: parent.ID, ChildID: tk.ID})
		}
	}
	job.TotalTasks = len(tasks)
	job.UnfinishedTasks = len(tasks)
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.InsertJob(t.Context(), job); err != nil {
			return err
		}
		if err := tx.InsertTasks(t.Context(), tasks); err != nil {
			return err
		}
		return tx.InsertDeps(t.Context(), deps)
	})
	return byKey
}

func getTask(t testing.TB, st store.Store, id string) *store.Task {
	t.Helper()
	tk, err := st.GetTask(t.Context(), id)
	if err != nil {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return tk
}

func getJob(t testing.TB, st store.Store, id string) *store.Job {
	t.Helper()
	j, err := st.GetJob(t.Context(), id)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", id, err)
	}
	return j
}

// mutate reads a task, lets fn change it and writes it back fenced on what it read; it returns
// the task as stored afterwards.
func mutate(t testing.TB, st store.Store, id string, fn func(tk *store.Task)) *store.Task {
	t.Helper()
	inTx(t, st, func(tx store.Tx) error {
		tk, err := tx.GetTask(t.Context(), id)
		if err != nil {
			return err
		}
		fence := store.Fence{Status: tk.Status, Attempt: tk.Attempt}
		fn(tk)
		return tx.UpdateTask(t.Context(), tk, fence)
	})
	return getTask(t, st, id)
}

func setStatus(t testing.TB, st store.Store, id string, s lifecycle.TaskStatus, now time.Time) *store.Task {
	t.Helper()
	return mutate(t, st, id, func(tk *store.Task) {
		tk.Status = s
		if s.Terminal() {
			tk.FinishedAt = now
		}
	})
}

// claim claims a task in its own transaction.
func claim(t testing.TB, st store.Store, id string, now time.Time, worker string) (*store.Task, bool) {
	t.Helper()
	var (
		got *store.Task
		ok  bool
	)
	inTx(t, st, func(tx store.Tx) error {
		var err error
		got, ok, err = tx.ClaimTask(t.Context(), store.ClaimTaskParams{
			ID: id, Now: now, WorkerID: worker, LeaseToken: "token-" + uuid.NewString(),
		})
		return err
	})
	return got, ok
}

func mustClaim(t testing.TB, st store.Store, id string, now time.Time) *store.Task {
	t.Helper()
	tk, ok := claim(t, st, id, now, "worker-1")
	if !ok {
		t.Fatalf("ClaimTask(%s) at %v: not claimed", id, now)
	}
	return tk
}

// ---------------------------------------------------------------------------------------------
// Comparison

// diff compares two structs (or pointers to structs) field by field and describes each field
// that differs, ignoring the named fields. Times compare with Equal, JSON byte for byte, and a nil
// slice equals an empty one.
func diff(want, got any, ignore ...string) []string {
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	if wv.Kind() == reflect.Pointer {
		if wv.IsNil() || gv.IsNil() {
			if wv.IsNil() && gv.IsNil() {
				return nil
			}
			return []string{fmt.Sprintf("want %v, got %v", want, got)}
		}
		wv, gv = wv.Elem(), gv.Elem()
	}
	var out []string
	for i := 0; i < wv.NumField(); i++ {
		name := wv.Type().Field(i).Name
		if slices.Contains(ignore, name) {
			continue
		}
		w, g := wv.Field(i).Interface(), gv.Field(i).Interface()
		if !equalValue(w, g) {
			out = append(out, fmt.Sprintf("%s: want %s, got %s", name, show(w), show(g)))
		}
	}
	return out
}

func equalValue(w, g any) bool {
	switch w := w.(type) {
	case time.Time:
		return w.Equal(g.(time.Time))
	case json.RawMessage:
		g := g.(json.RawMessage)
		return (w == nil) == (g == nil) && bytes.Equal(w, g)
	case []string:
		g := g.([]string)
		return len(w) == len(g) && (len(w) == 0 || reflect.DeepEqual(w, g))
	}
	return reflect.DeepEqual(w, g)
}

func show(v any) string {
	switch v := v.(type) {
	case time.Time:
		if v.IsZero() {
			return "zero time"
		}
		return v.Format(time.RFC3339Nano)
	case json.RawMessage:
		if v == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", string(v))
	case *store.TaskError:
		if v == nil {
			return "nil"
		}
		b, _ := json.Marshal(v)
		return string(b)
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%v", v)
}

func checkSame(t testing.TB, what string, want, got any, ignore ...string) {
	t.Helper()
	if d := diff(want, got, ignore...); len(d) > 0 {
		t.Errorf("%s differs:\n  %s", what, joinLines(d))
	}
}

func joinLines(lines []string) string {
	var b bytes.Buffer
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(l)
	}
	return b.String()
}

func checkIDs(t testing.TB, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func jobIDs(jobs []*store.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

func taskIDs(tasks []*store.Task) []string {
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = tk.ID
	}
	return ids
}

func refIDs(refs []*store.TaskRef) []string {
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	sort.Strings(ids)
	return ids
}

func sortedIDs(tasks ...*store.Task) []string {
	ids := taskIDs(tasks)
	sort.Strings(ids)
	return ids
}

// checkRefs checks that refs name exactly want (any order), each with the task's current key,
// name, queue, status and available-at.
func checkRefs(t testing.TB, st store.Store, what string, refs []*store.TaskRef, want ...*store.Task) {
	t.Helper()
	checkIDs(t, what+": refs", refIDs(refs), sortedIDs(want...))
	for _, r := range refs {
		checkRefMatchesTask(t, st, what, r)
	}
}

func checkRefMatchesTask(t testing.TB, st store.Store, what string, r *store.TaskRef) {
	t.Helper()
	tk, err := st.GetTask(t.Context(), r.ID)
	if err != nil {
		t.Errorf("%s: ref %s: GetTask: %v", what, r.ID, err)
		return
	}
	want := &store.TaskRef{ID: tk.ID, JobID: tk.JobID, Key: tk.Key, Name: tk.Name, Queue: tk.Queue, Runtime: tk.Runtime, Status: tk.Status, AvailableAt: tk.AvailableAt}
	checkSame(t, what+": ref "+tk.Key, want, r)
}

// ---------------------------------------------------------------------------------------------
// Jobs

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
		if err := tx.InsertJob(ctx, j); err != nil {
			return err
		}
		return tx.InsertJob(ctx, bare)
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
		got, err := tx.GetJob(ctx, j.ID)
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
		if _, err := r.GetJob(ctx, "job-"+uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetJob(unknown): err = %v, want ErrNotFound", name, err)
		}
		if _, err := r.GetTask(ctx, uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetTask(unknown): err = %v, want ErrNotFound", name, err)
		}
		if _, err := r.GetAttempt(ctx, uuid.NewString(), 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetAttempt(unknown task): err = %v, want ErrNotFound", name, err)
		}
		if _, err := r.GetAttempt(ctx, tasks["a"].ID, 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s GetAttempt(known task, unknown attempt): err = %v, want ErrNotFound", name, err)
		}
	}
	check("Store", st)
	inTx(t, st, func(tx store.Tx) error {
		check("Tx", tx)
		// The transaction is still usable after the misses.
		_, err := tx.GetJob(ctx, job.ID)
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
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.InsertJob(ctx, dup) })
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("InsertJob with a used key: err = %v, want ErrConflict", err)
	}
	if _, err := st.GetJob(ctx, dup.ID); !errors.Is(err, store.ErrNotFound) {
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
		got, err := st.JobByIdempotencyKey(ctx, want.Tenant, want.IdempotencyKey)
		if err != nil {
			t.Errorf("JobByIdempotencyKey(%s, %s): %v", want.Tenant, want.IdempotencyKey, err)
			continue
		}
		checkSame(t, "JobByIdempotencyKey("+want.Tenant+", "+want.IdempotencyKey+")", want, got)
	}
	for _, k := range [][2]string{{"tenant-a", "key-3"}, {"tenant-c", "key-1"}, {"tenant-b", "key-2"}, {"tenant-a", ""}} {
		if _, err := st.JobByIdempotencyKey(ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobByIdempotencyKey(%s, %s): err = %v, want ErrNotFound", k[0], k[1], err)
		}
	}
	inTx(t, st, func(tx store.Tx) error {
		got, err := tx.JobByIdempotencyKey(ctx, "tenant-b", "key-1")
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

func listJobs(t *testing.T, st store.Store, p store.ListJobsParams) []*store.Job {
	t.Helper()
	jobs, err := st.ListJobs(t.Context(), p)
	if err != nil {
		t.Fatalf("ListJobs(%+v): %v", p, err)
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
	jobs, err := st.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant", BeforeSeq: big, Limit: 10})
	if err != nil {
		t.Errorf("ListJobs(BeforeSeq 2^40): %v", err)
	} else {
		checkIDs(t, "ListJobs(BeforeSeq 2^40)", jobIDs(jobs), []string{js[1].ID, js[0].ID})
	}
	jobs, err = st.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant", Status: lifecycle.JobProcessing, BeforeSeq: big, Limit: 10})
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
	dead, err := st.ListDeadLetters(ctx, "tenant", big, 10)
	if err != nil {
		t.Errorf("ListDeadLetters(beforeSeq 2^40): %v", err)
	} else {
		checkIDs(t, "ListDeadLetters(beforeSeq 2^40)", taskIDs(dead), []string{ts["f"].ID})
	}

	inTx(t, st, func(tx store.Tx) error {
		if err := tx.InsertEvents(ctx, []*store.Event{{JobID: job.ID, Type: "Job Created", At: t0, Data: json.RawMessage(`{}`)}}); err != nil {
			return err
		}
		return tx.InsertOutbox(ctx, []*store.OutboxMessage{{Topic: "x", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0}})
	})
	if evs, err := st.ListEvents(ctx, job.ID, big, 10); err != nil || len(evs) != 0 {
		t.Errorf("ListEvents(after 2^40) = %d events, %v; want none", len(evs), err)
	}
	if msgs, err := st.OutboxAfter(ctx, big, 10); err != nil || len(msgs) != 0 {
		t.Errorf("OutboxAfter(2^40) = %d messages, %v; want none", len(msgs), err)
	}
}

// ---------------------------------------------------------------------------------------------
// Tasks

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
		got, err := tx.GetTask(ctx, c.ID)
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
	// The rest of the job arrives later, in a second InsertTasks.
	inTx(t, st, func(tx store.Tx) error { return tx.InsertTasks(ctx, tasks[3:]) })
	claimed := mustClaim(t, st, tasks[0].ID, at(time.Minute))

	sums, err := st.JobTasks(ctx, job.ID)
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
	if sums, err := st.JobTasks(ctx, "job-"+uuid.NewString()); err != nil || len(sums) != 0 {
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

	sums, err := st.JobTasksWithResults(ctx, job.ID)
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
	plain, err := st.JobTasks(ctx, job.ID)
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
		got, err := tx.JobTasksWithResults(ctx, job.ID)
		if err != nil {
			return err
		}
		if len(got) != 6 || string(got[0].Output) != `{"tags": ["navy", "cream"]}` {
			t.Errorf("Tx.JobTasksWithResults: %d tasks, first output %s", len(got), got[0].Output)
		}
		return nil
	})
	if sums, err := st.JobTasksWithResults(ctx, "job-"+uuid.NewString()); err != nil || len(sums) != 0 {
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
	got, err := st.ParentOutputs(ctx, ts["child"].ID)
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
	got, err = st.ParentOutputs(ctx, ts["other"].ID)
	if err != nil || len(got) != 1 || string(got["a"]) != `{"x": 1}` {
		t.Errorf("ParentOutputs(other) = %q, %v", got, err)
	}
	got, err = st.ParentOutputs(ctx, ts["a"].ID)
	if err != nil || len(got) != 0 {
		t.Errorf("ParentOutputs(root) = %q, %v; want empty", got, err)
	}
	inTx(t, st, func(tx store.Tx) error {
		got, err := tx.ParentOutputs(ctx, ts["child"].ID)
		if err != nil {
			return err
		}
		if len(got) != 3 || string(got["b"]) != "null" {
			t.Errorf("Tx.ParentOutputs = %q", got)
		}
		return nil
	})
}

func readyIDs(t *testing.T, st store.Store, queue string, now time.Time, limit int) []string {
	t.Helper()
	var ids []string
	inTx(t, st, func(tx store.Tx) error {
		var err error
		ids, err = tx.ReadyTaskIDs(t.Context(), queue, now, limit)
		return err
	})
	return ids
}

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
			got, ok, err = tx.ClaimTask(ctx, store.ClaimTaskParams{ID: before.ID, Now: now, WorkerID: "worker-" + c.key, LeaseToken: token})
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
			got, ok, err = tx.ClaimTask(ctx, store.ClaimTaskParams{ID: id, Now: now, WorkerID: "w2", LeaseToken: "other-token"})
			return err
		})
		if ok {
			t.Errorf("%s: ClaimTask ok = true (task %+v), want false", key, got)
		}
		if before != nil {
			checkSame(t, key+": after a refused claim", before, getTask(t, st, id))
		} else if _, err := st.GetTask(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown: GetTask after the claim: %v, want ErrNotFound", err)
		}
	}
}

// A job's traceparent is stored with it and read back by every job query; its tasks' copies
// come back from GetTask and from both claims, one by one and in a batch, including a claim under
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
	if j, err := st.JobByIdempotencyKey(ctx, "tenant", "traced"); err != nil || j.Traceparent != tp {
		t.Errorf("JobByIdempotencyKey: %v, traceparent %q, want %q", err, j.Traceparent, tp)
	}
	jobs, err := st.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant", Limit: 10})
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
		claimed, err = tx.ClaimTasks(ctx, []store.ClaimTaskParams{
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

// ClaimTasks gives each task of a batch its own worker and lease token, claims a repeated id
// once (for the first request naming it) and leaves tasks that are not claimable alone;
// CompleteTasks stores each task's own output (none: NULL) and refuses a batch with a stale fence.
func testClaimAndCompleteTasksInBatches(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"), newTask(job.ID, "c"),
		newTask(job.ID, "waiting", "a"))
	now := at(time.Minute)
	var claimed []*store.Task
	inTx(t, st, func(tx store.Tx) error {
		var err error
		claimed, err = tx.ClaimTasks(ctx, []store.ClaimTaskParams{
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
		return tx.CompleteTasks(ctx, []store.CompletedTask{
			{ID: ts["a"].ID, Attempt: 1, Output: json.RawMessage(`{"n":1}`)},
			{ID: ts["b"].ID, Attempt: 2, Output: json.RawMessage(`{"n":2}`)},
		}, now)
	})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("CompleteTasks with a stale attempt: %v, want ErrLeaseLost", err)
	}
	inTx(t, st, func(tx store.Tx) error {
		return tx.CompleteTasks(ctx, []store.CompletedTask{
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
					_, ok, err := tx.ClaimTask(t.Context(), store.ClaimTaskParams{
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
		return tx.UpdateTask(ctx, &u, store.Fence{Status: orig.Status, Attempt: orig.Attempt})
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
		return tx.UpdateTask(ctx, &z, store.Fence{Status: lifecycle.Running, Attempt: 4})
	})
	checkSame(t, "after clearing with UpdateTask", &z, getTask(t, st, orig.ID))
	checkSame(t, "sibling untouched", ts["a"], getTask(t, st, ts["a"].ID), "Seq")
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
			updateErr = tx.UpdateTask(ctx, &u, fence)
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
		return tx.UpdateTask(ctx, &u, store.Fence{Status: lifecycle.Running, Attempt: 1})
	})
	if got := getTask(t, st, running.ID); got.Status != lifecycle.Completed {
		t.Errorf("status after the fenced write = %s, want completed", got.Status)
	}
}

func releaseChildren(t *testing.T, st store.Store, parentID string, now time.Time) []*store.TaskRef {
	t.Helper()
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.ReleaseChildren(t.Context(), parentID, now)
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
		refs, err = tx.SkipDescendants(t.Context(), ts["root"].ID, now)
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
		refs, err = tx.SkipDescendants(t.Context(), ts["root"].ID, now)
		return err
	})
	checkIDs(t, "second SkipDescendants", refIDs(refs), nil)
}

// ---------------------------------------------------------------------------------------------
// Cancellation and resume

func cancelIdle(t *testing.T, st store.Store, p store.CancelParams) []*store.TaskRef {
	t.Helper()
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.CancelIdle(t.Context(), p)
		return err
	})
	return refs
}

func requestCancel(t *testing.T, st store.Store, p store.CancelParams) []*store.TaskRef {
	t.Helper()
	var refs []*store.TaskRef
	inTx(t, st, func(tx store.Tx) error {
		var err error
		refs, err = tx.RequestCancel(t.Context(), p)
		return err
	})
	return refs
}

func snapshot(t *testing.T, st store.Store, tasks ...*store.Task) []*store.Task {
	t.Helper()
	var out []*store.Task
	for _, tk := range tasks {
		out = append(out, getTask(t, st, tk.ID))
	}
	return out
}

func checkUnchanged(t *testing.T, st store.Store, what string, before []*store.Task) {
	t.Helper()
	for _, b := range before {
		checkSame(t, what+": "+b.Key, b, getTask(t, st, b.ID))
	}
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
		refs, err = tx.ResumeTasks(t.Context(), job.ID, now)
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

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// ---------------------------------------------------------------------------------------------
// Job updates

func testAddUnfinished(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	seed(t, st, job)
	job.UnfinishedTasks = 5
	inTx(t, st, func(tx store.Tx) error { return tx.UpdateJob(ctx, job) })

	var got1, got2 *store.Job
	inTx(t, st, func(tx store.Tx) error {
		var err error
		if got1, err = tx.AddUnfinished(ctx, job.ID, -2); err != nil {
			return err
		}
		got2, err = tx.AddUnfinished(ctx, job.ID, 4)
		return err
	})
	want := *job
	want.UnfinishedTasks = 3
	checkSame(t, "AddUnfinished(-2)", &want, got1)
	want.UnfinishedTasks = 7
	checkSame(t, "AddUnfinished(+4)", &want, got2)
	checkSame(t, "GetJob after AddUnfinished", &want, getJob(t, st, job.ID))

	err := st.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.AddUnfinished(ctx, "job-"+uuid.NewString(), 1)
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddUnfinished(unknown): err = %v, want ErrNotFound", err)
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
	inTx(t, st, func(tx store.Tx) error { return tx.UpdateJob(ctx, &u) })
	checkSame(t, "after UpdateJob", &u, getJob(t, st, job.ID))
	checkSame(t, "neighbour", neighbourList[1], getJob(t, st, neighbourList[1].ID))

	// Clearing the optional times.
	z := u
	z.Status = lifecycle.JobProcessing
	z.UnfinishedTasks = 4
	z.FinishedAt, z.CancelRequestedAt, z.FailureDetectedAt = time.Time{}, time.Time{}, time.Time{}
	inTx(t, st, func(tx store.Tx) error { return tx.UpdateJob(ctx, &z) })
	checkSame(t, "after clearing with UpdateJob", &z, getJob(t, st, job.ID))
}

func testUpdateJobUnknownIsNotFound(t *testing.T, st store.Store) {
	ctx := t.Context()
	j := newJob("tenant")
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.UpdateJob(ctx, j) })
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateJob(unknown): err = %v, want ErrNotFound", err)
	}
	if _, err := st.GetJob(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob after UpdateJob(unknown): %v, want ErrNotFound", err)
	}
}

// ---------------------------------------------------------------------------------------------
// Attempts, events, outbox

func testAttempts(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"))
	yes := true
	a1 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 1, WorkerID: "w1", LeaseToken: "tok-1", StartedAt: at(time.Second)}
	a2 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 2, WorkerID: "w2", LeaseToken: "tok-2", StartedAt: at(2 * time.Second),
		FinishedAt: at(3 * time.Second), Outcome: store.OutcomeFailed, Result: lifecycle.Pending,
		Error:   &store.TaskError{Category: lifecycle.Timeout, Message: "lease", Reason: "HEARTBEAT_TIMEOUT", Retryable: &yes},
		Metrics: json.RawMessage("{\"cpu\":  0.5}")}
	a3 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 3, WorkerID: "w3", LeaseToken: "tok-3", StartedAt: at(4 * time.Second)}
	b1 := &store.Attempt{TaskID: ts["b"].ID, Attempt: 1, WorkerID: "w1", LeaseToken: "tok-b", StartedAt: at(time.Second)}
	inTx(t, st, func(tx store.Tx) error {
		for _, a := range []*store.Attempt{a3, b1, a1, a2} { // out of order
			if err := tx.InsertAttempt(ctx, a); err != nil {
				return err
			}
		}
		return nil
	})
	for _, want := range []*store.Attempt{a1, a2, a3, b1} {
		got, err := st.GetAttempt(ctx, want.TaskID, want.Attempt)
		if err != nil {
			t.Errorf("GetAttempt(%d): %v", want.Attempt, err)
			continue
		}
		checkSame(t, fmt.Sprintf("GetAttempt(%d)", want.Attempt), want, got)
	}

	list, err := st.ListAttempts(ctx, ts["a"].ID)
	if err != nil {
		t.Fatalf("ListAttempts: %v", err)
	}
	if len(list) != 3 {
		t.Fatalf("ListAttempts returned %d attempts, want 3", len(list))
	}
	for i, want := range []*store.Attempt{a1, a2, a3} {
		checkSame(t, fmt.Sprintf("ListAttempts[%d]", i), want, list[i])
	}

	// Finish attempt 1.
	u := *a1
	u.FinishedAt = at(90 * time.Second)
	u.Outcome = store.OutcomeSucceeded
	u.Result = lifecycle.Completed
	u.Metrics = json.RawMessage(`{"rows":3}`)
	u.Error = &store.TaskError{Category: lifecycle.DataQuality, Message: "warn", StackTrace: "s", Code: "C"}
	inTx(t, st, func(tx store.Tx) error { return tx.PutAttempts(ctx, []*store.Attempt{&u}) })
	got, err := st.GetAttempt(ctx, a1.TaskID, 1)
	if err != nil {
		t.Fatalf("GetAttempt after PutAttempts: %v", err)
	}
	checkSame(t, "after PutAttempts", &u, got)
	checkSame(t, "attempt 2 after updating 1", a2, mustAttempt(t, st, a2.TaskID, 2))
	checkSame(t, "other task's attempt 1", b1, mustAttempt(t, st, b1.TaskID, 1))

	inTx(t, st, func(tx store.Tx) error {
		list, err := tx.ListAttempts(ctx, ts["b"].ID)
		if err != nil {
			return err
		}
		if len(list) != 1 {
			t.Errorf("Tx.ListAttempts(b) = %d attempts, want 1", len(list))
		}
		return nil
	})
	if list, err := st.ListAttempts(ctx, uuid.NewString()); err != nil || len(list) != 0 {
		t.Errorf("ListAttempts(unknown) = %d, %v; want none", len(list), err)
	}
}

func mustAttempt(t *testing.T, st store.Store, taskID string, n int) *store.Attempt {
	t.Helper()
	a, err := st.GetAttempt(t.Context(), taskID, n)
	if err != nil {
		t.Fatalf("GetAttempt(%s, %d): %v", taskID, n, err)
	}
	return a
}

func testPutAttemptsInsertsOrReplaces(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("tenant")
	ts := seed(t, st, job, newTask(job.ID, "a"), newTask(job.ID, "b"))
	// Attempt 1 of a was stored while it ran, with the worker's trace context.
	a1 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 1, WorkerID: "w", LeaseToken: "tok", StartedAt: t0,
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	inTx(t, st, func(tx store.Tx) error { return tx.InsertAttempt(ctx, a1) })

	ended := *a1
	ended.Traceparent = "" // the end carries none: the stored one stays
	ended.FinishedAt, ended.Outcome, ended.Result = at(time.Second), store.OutcomeSucceeded, lifecycle.Completed
	ended.Metrics = json.RawMessage(`{"rows":1}`)
	b1 := &store.Attempt{TaskID: ts["b"].ID, Attempt: 1, WorkerID: "w2", LeaseToken: "tok-b", StartedAt: t0,
		FinishedAt: at(2 * time.Second), Outcome: store.OutcomeFailed, Result: lifecycle.Pending,
		Error: &store.TaskError{Category: lifecycle.Timeout, Message: "lease"}}
	a2 := &store.Attempt{TaskID: ts["a"].ID, Attempt: 2, WorkerID: "w3", LeaseToken: "tok-2", StartedAt: at(3 * time.Second),
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	inTx(t, st, func(tx store.Tx) error { return tx.PutAttempts(ctx, []*store.Attempt{&ended, b1, a2}) })

	want := ended
	want.Traceparent = a1.Traceparent
	checkSame(t, "a's attempt 1, replaced", &want, mustAttempt(t, st, a1.TaskID, 1))
	checkSame(t, "b's attempt 1, new", b1, mustAttempt(t, st, b1.TaskID, 1))
	checkSame(t, "a's attempt 2, new", a2, mustAttempt(t, st, a2.TaskID, 2))

	// A new trace context replaces the stored one.
	again := want
	again.Traceparent = "00-11111111111111111111111111111111-2222222222222222-01"
	inTx(t, st, func(tx store.Tx) error { return tx.PutAttempts(ctx, []*store.Attempt{&again}) })
	checkSame(t, "a's attempt 1, new trace context", &again, mustAttempt(t, st, a1.TaskID, 1))

	// Rolled back with its transaction, like any write.
	err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.PutAttempts(ctx, []*store.Attempt{{TaskID: ts["b"].ID, Attempt: 2, WorkerID: "w", LeaseToken: "t", StartedAt: t0}}); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("the transaction did not fail")
	}
	if _, err := st.GetAttempt(ctx, ts["b"].ID, 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAttempt(rolled back): %v, want ErrNotFound", err)
	}
}

func listEvents(t *testing.T, st store.Reader, jobID string, after int64, limit int) []*store.Event {
	t.Helper()
	evs, err := st.ListEvents(t.Context(), jobID, after, limit)
	if err != nil {
		t.Fatalf("ListEvents(%s, %d, %d): %v", jobID, after, limit, err)
	}
	return evs
}

func testEventsBulkInsertAndList(t *testing.T, st store.Store) {
	ctx := t.Context()
	jobA, jobB := newJob("tenant"), newJob("tenant")
	seed(t, st, jobA)
	seed(t, st, jobB)
	const n = 2500 // crosses the 1,000-row statement chunks
	var all, wantA, wantB []*store.Event
	for i := 0; i < n; i++ {
		e := &store.Event{JobID: jobA.ID, Type: fmt.Sprintf("Type %d", i), At: at(time.Duration(i) * time.Millisecond),
			Data: json.RawMessage(fmt.Sprintf(`{"i": %d,  "s":"x"}`, i))}
		if i%2 == 1 {
			e.TaskID, e.TaskKey = uuid.NewString(), fmt.Sprintf("task-%d", i)
		}
		if i%5 == 4 {
			e.JobID = jobB.ID
			wantB = append(wantB, e)
		} else {
			wantA = append(wantA, e)
		}
		all = append(all, e)
	}
	inTx(t, st, func(tx store.Tx) error { return tx.InsertEvents(ctx, all) })

	gotA := listEvents(t, st, jobA.ID, 0, 10_000)
	if len(gotA) != len(wantA) {
		t.Fatalf("ListEvents(A) returned %d events, want %d", len(gotA), len(wantA))
	}
	for i, g := range gotA {
		if i > 0 && g.ID <= gotA[i-1].ID {
			t.Fatalf("event ids not increasing: %d then %d", gotA[i-1].ID, g.ID)
		}
		checkSame(t, fmt.Sprintf("event A[%d]", i), wantA[i], g, "ID")
		if t.Failed() {
			t.FailNow()
		}
	}
	gotB := listEvents(t, st, jobB.ID, 0, 10_000)
	if len(gotB) != len(wantB) {
		t.Fatalf("ListEvents(B) returned %d events, want %d", len(gotB), len(wantB))
	}
	for i, g := range gotB {
		checkSame(t, fmt.Sprintf("event B[%d]", i), wantB[i], g, "ID")
		if t.Failed() {
			t.FailNow()
		}
	}

	// After an id, with a limit.
	page := listEvents(t, st, jobA.ID, gotA[99].ID, 50)
	if len(page) != 50 || page[0].ID != gotA[100].ID || page[49].ID != gotA[149].ID {
		t.Errorf("ListEvents(after #99, 50): %d events starting at %v", len(page), idsOf(page))
	}
	// An id of the other job as the cursor works too: ids are global.
	page = listEvents(t, st, jobA.ID, gotB[0].ID, 2)
	var wantIDs []int64
	for _, e := range gotA {
		if e.ID > gotB[0].ID && len(wantIDs) < 2 {
			wantIDs = append(wantIDs, e.ID)
		}
	}
	if !slices.Equal(idsOf(page), wantIDs) {
		t.Errorf("ListEvents(A, after B's first): %v, want %v", idsOf(page), wantIDs)
	}
	// Paging through everything.
	var paged []*store.Event
	for after := int64(0); ; {
		p := listEvents(t, st, jobA.ID, after, 333)
		if len(p) > 333 {
			t.Fatalf("page of limit 333 has %d events", len(p))
		}
		if len(p) == 0 {
			break
		}
		paged = append(paged, p...)
		after = p[len(p)-1].ID
	}
	if !slices.Equal(idsOf(paged), idsOf(gotA)) {
		t.Errorf("paging by 333 gave %d events, want %d in order", len(paged), len(gotA))
	}
	if got := listEvents(t, st, jobA.ID, gotA[len(gotA)-1].ID, 10); len(got) != 0 {
		t.Errorf("ListEvents after the last: %d events", len(got))
	}
	if got := listEvents(t, st, "job-"+uuid.NewString(), 0, 10); len(got) != 0 {
		t.Errorf("ListEvents(unknown job): %d events", len(got))
	}

	// Appending later continues after the last id; readable inside the transaction.
	more := &store.Event{JobID: jobA.ID, Type: "Job Completed", At: at(time.Hour), Data: json.RawMessage(`{}`)}
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.InsertEvents(ctx, []*store.Event{more}); err != nil {
			return err
		}
		got := listEvents(t, tx, jobA.ID, gotA[len(gotA)-1].ID, 10)
		if len(got) != 1 || got[0].Type != "Job Completed" {
			t.Errorf("Tx.ListEvents after insert: %d events", len(got))
		}
		return nil
	})
	got := listEvents(t, st, jobA.ID, gotA[len(gotA)-1].ID, 10)
	if len(got) != 1 {
		t.Fatalf("ListEvents after a later insert: %d events, want 1", len(got))
	}
	checkSame(t, "later event", more, got[0], "ID")
}

// testListTaskEvents: one task's events, oldest first, after an id and up to a limit; never
// another task's or another job's, nor the job's own.
func testListTaskEvents(t *testing.T, st store.Store) {
	ctx := t.Context()
	jobA, jobB := newJob("tenant"), newJob("tenant")
	seed(t, st, jobA)
	seed(t, st, jobB)
	taskX, taskY := uuid.NewString(), uuid.NewString()
	var all, wantX []*store.Event
	add := func(jobID, taskID, key, typ string) {
		e := &store.Event{JobID: jobID, TaskID: taskID, TaskKey: key, Type: typ, At: at(time.Duration(len(all)) * time.Millisecond),
			Data: json.RawMessage(fmt.Sprintf(`{"n": %d}`, len(all)))}
		all = append(all, e)
		if jobID == jobA.ID && taskID == taskX {
			wantX = append(wantX, e)
		}
	}
	add(jobA.ID, "", "", "Job Created")
	for i := 0; i < 5; i++ {
		add(jobA.ID, taskX, "x", fmt.Sprintf("X %d", i))
		add(jobA.ID, taskY, "y", fmt.Sprintf("Y %d", i))
		add(jobB.ID, taskX, "x", fmt.Sprintf("B %d", i)) // the same task id in another job: not listed
	}
	add(jobA.ID, "", "", "Job Completed")
	inTx(t, st, func(tx store.Tx) error { return tx.InsertEvents(ctx, all) })

	list := func(jobID, taskID string, after int64, limit int) []*store.Event {
		t.Helper()
		evs, err := st.ListTaskEvents(ctx, jobID, taskID, after, limit)
		if err != nil {
			t.Fatalf("ListTaskEvents(%s, %s, %d, %d): %v", jobID, taskID, after, limit, err)
		}
		return evs
	}
	got := list(jobA.ID, taskX, 0, 100)
	if len(got) != len(wantX) {
		t.Fatalf("ListTaskEvents returned %d events, want %d", len(got), len(wantX))
	}
	for i, g := range got {
		checkSame(t, fmt.Sprintf("task event %d", i), wantX[i], g, "ID")
		if i > 0 && g.ID <= got[i-1].ID {
			t.Errorf("ids not increasing: %v", idsOf(got))
		}
	}
	if page := list(jobA.ID, taskX, got[1].ID, 2); !slices.Equal(idsOf(page), idsOf(got[2:4])) {
		t.Errorf("after the second, 2: %v, want %v", idsOf(page), idsOf(got[2:4]))
	}
	if page := list(jobA.ID, taskX, got[4].ID, 10); len(page) != 0 {
		t.Errorf("after the last: %d events", len(page))
	}
	if page := list(jobA.ID, uuid.NewString(), 0, 10); len(page) != 0 {
		t.Errorf("unknown task: %d events", len(page))
	}
	if page := list(jobA.ID, "", 0, 10); len(page) != 0 {
		t.Errorf("an empty task id lists the job's own events: %d", len(page))
	}
}

func idsOf(evs []*store.Event) []int64 {
	ids := make([]int64, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

func outboxAfter(t *testing.T, st store.Reader, after int64, limit int) []*store.OutboxMessage {
	t.Helper()
	msgs, err := st.OutboxAfter(t.Context(), after, limit)
	if err != nil {
		t.Fatalf("OutboxAfter(%d, %d): %v", after, limit, err)
	}
	return msgs
}

func testOutbox(t *testing.T, st store.Store) {
	ctx := t.Context()
	if got := outboxAfter(t, st, 0, 10); len(got) != 0 {
		t.Fatalf("OutboxAfter on an empty store: %d messages", len(got))
	}
	first := []*store.OutboxMessage{
		{Topic: "task.ready", Key: "q1", Payload: json.RawMessage(`{"taskId": "t1"}`), AvailableAt: t0, CreatedAt: t0},
		{Topic: "task.ready", Key: "", Payload: json.RawMessage("[1,  2]"), AvailableAt: at(time.Minute), CreatedAt: at(time.Second)},
		{Topic: "job.done", Key: "tenant", Payload: json.RawMessage(`"x"`), AvailableAt: at(-time.Second), CreatedAt: at(2 * time.Second)},
	}
	inTx(t, st, func(tx store.Tx) error { return tx.InsertOutbox(ctx, first) })
	got := outboxAfter(t, st, 0, 10)
	if len(got) != len(first) {
		t.Fatalf("OutboxAfter(0) = %d messages, want %d", len(got), len(first))
	}
	for i, m := range got {
		if m.ID <= 0 || (i > 0 && m.ID <= got[i-1].ID) {
			t.Errorf("message %d: id %d not positive and increasing", i, m.ID)
		}
		checkSame(t, fmt.Sprintf("message %d", i), first[i], m, "ID")
	}
	page := outboxAfter(t, st, got[0].ID, 1)
	if len(page) != 1 || page[0].ID != got[1].ID {
		t.Errorf("OutboxAfter(first, 1) = %v", page)
	}
	if page := outboxAfter(t, st, got[2].ID, 10); len(page) != 0 {
		t.Errorf("OutboxAfter(last) = %d messages", len(page))
	}

	second := []*store.OutboxMessage{{Topic: "task.ready", Key: "q2", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0}}
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.InsertOutbox(ctx, second); err != nil {
			return err
		}
		if got := outboxAfter(t, tx, got[2].ID, 10); len(got) != 1 {
			t.Errorf("Tx.OutboxAfter after insert: %d messages", len(got))
		}
		return nil
	})
	page = outboxAfter(t, st, got[2].ID, 10)
	if len(page) != 1 {
		t.Fatalf("OutboxAfter(last of the first batch) = %d messages, want 1", len(page))
	}
	checkSame(t, "second batch", second[0], page[0], "ID")
}

// ---------------------------------------------------------------------------------------------
// Reaper queries

func testNextReapAtAndDueTasks(t *testing.T, st store.Store) {
	ctx := t.Context()
	next := func() (time.Time, bool) {
		t.Helper()
		at, ok, err := st.NextReapAt(ctx)
		if err != nil {
			t.Fatalf("NextReapAt: %v", err)
		}
		return at, ok
	}
	due := func(now time.Time, limit int) []string {
		t.Helper()
		ids, err := st.DueTasks(ctx, now, limit)
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
		tasks, err := st.ListDeadLetters(ctx, tenant, before, limit)
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
		_, err := tx.ResumeTasks(ctx, j2.ID, at(time.Hour))
		return err
	})
	checkIDs(t, "tenant-a after resuming f4's job", taskIDs(list("tenant-a", 0, 100)), []string{ts1["f3"].ID, ts1["f2"].ID, ts1["f1"].ID})
}

// ---------------------------------------------------------------------------------------------
// Transactions and volume

func testInTxRollsBackOnError(t *testing.T, st store.Store) {
	ctx := t.Context()
	existing := newJob("tenant")
	ets := seed(t, st, existing, newTask(existing.ID, "a"), newTask(existing.ID, "b", "a"))
	jobBefore := getJob(t, st, existing.ID)
	tasksBefore := snapshot(t, st, ets["a"], ets["b"])

	boom := errors.New("boom")
	fresh := newJob("tenant")
	fresh.IdempotencyKey = "once"
	freshTask := newTask(fresh.ID, "x")
	var claimed bool
	err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertJob(ctx, fresh); err != nil {
			return err
		}
		if err := tx.InsertTasks(ctx, []*store.Task{freshTask}); err != nil {
			return err
		}
		if err := tx.InsertDeps(ctx, []store.Dep{{JobID: existing.ID, ParentID: ets["b"].ID, ChildID: ets["a"].ID}}); err != nil {
			return err
		}
		if err := tx.InsertAttempt(ctx, &store.Attempt{TaskID: ets["a"].ID, Attempt: 1, WorkerID: "w", LeaseToken: "t", StartedAt: t0}); err != nil {
			return err
		}
		if err := tx.InsertEvents(ctx, []*store.Event{{JobID: existing.ID, Type: "Job Canceled", At: t0, Data: json.RawMessage(`{}`)}}); err != nil {
			return err
		}
		if err := tx.InsertOutbox(ctx, []*store.OutboxMessage{{Topic: "x", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0}}); err != nil {
			return err
		}
		j := *jobBefore
		j.Status, j.FinishedAt = lifecycle.JobCanceled, t0
		if err := tx.UpdateJob(ctx, &j); err != nil {
			return err
		}
		if _, err := tx.AddUnfinished(ctx, existing.ID, -1); err != nil {
			return err
		}
		var err error
		if _, claimed, err = tx.ClaimTask(ctx, store.ClaimTaskParams{ID: ets["a"].ID, Now: t0, WorkerID: "w", LeaseToken: "t"}); err != nil {
			return err
		}
		if _, err := tx.CancelIdle(ctx, store.CancelParams{JobID: existing.ID, Now: t0, Reason: "r"}); err != nil {
			return err
		}
		// The transaction sees its own writes.
		if _, err := tx.GetJob(ctx, fresh.ID); err != nil {
			return fmt.Errorf("own job not visible in the transaction: %w", err)
		}
		if _, err := tx.GetTask(ctx, freshTask.ID); err != nil {
			return fmt.Errorf("own task not visible in the transaction: %w", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx returned %v, want fn's error", err)
	}
	if !claimed {
		t.Errorf("claim inside the rolled-back transaction did not succeed")
	}
	if _, err := st.GetJob(ctx, fresh.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob(rolled-back job): %v, want ErrNotFound", err)
	}
	if _, err := st.JobByIdempotencyKey(ctx, "tenant", "once"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("JobByIdempotencyKey(rolled-back job): %v, want ErrNotFound", err)
	}
	if _, err := st.GetTask(ctx, freshTask.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTask(rolled-back task): %v, want ErrNotFound", err)
	}
	if _, err := st.GetAttempt(ctx, ets["a"].ID, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAttempt(rolled-back attempt): %v, want ErrNotFound", err)
	}
	if evs := listEvents(t, st, existing.ID, 0, 10); len(evs) != 0 {
		t.Errorf("rolled-back events are listed: %d", len(evs))
	}
	if msgs := outboxAfter(t, st, 0, 10); len(msgs) != 0 {
		t.Errorf("rolled-back outbox messages are listed: %d", len(msgs))
	}
	if outs, err := st.ParentOutputs(ctx, ets["a"].ID); err != nil || len(outs) != 0 {
		t.Errorf("rolled-back dep is visible: ParentOutputs(a) = %q, %v", outs, err)
	}
	checkSame(t, "job after rollback", jobBefore, getJob(t, st, existing.ID))
	checkUnchanged(t, st, "after rollback", tasksBefore)

	// The idempotency key and the ids are free again.
	seed(t, st, fresh, freshTask)
}

func testInTxCommitIsVisibleToReaders(t *testing.T, st store.Store) {
	ctx := t.Context()
	for i := 0; i < 20; i++ {
		job := newJob("tenant")
		job.IdempotencyKey = fmt.Sprintf("k%d", i)
		tk := newTask(job.ID, "a")
		inTx(t, st, func(tx store.Tx) error {
			if err := tx.InsertJob(ctx, job); err != nil {
				return err
			}
			if err := tx.InsertTasks(ctx, []*store.Task{tk}); err != nil {
				return err
			}
			return tx.InsertEvents(ctx, []*store.Event{{JobID: job.ID, Type: "Job Created", At: t0, Data: json.RawMessage(`{}`)}})
		})
		if _, err := st.GetJob(ctx, job.ID); err != nil {
			t.Fatalf("round %d: GetJob right after commit: %v", i, err)
		}
		if _, err := st.JobByIdempotencyKey(ctx, "tenant", job.IdempotencyKey); err != nil {
			t.Fatalf("round %d: JobByIdempotencyKey right after commit: %v", i, err)
		}
		if _, err := st.GetTask(ctx, tk.ID); err != nil {
			t.Fatalf("round %d: GetTask right after commit: %v", i, err)
		}
		if jobs := listJobs(t, st, store.ListJobsParams{Tenant: "tenant", Limit: 1}); len(jobs) != 1 || jobs[0].ID != job.ID {
			t.Fatalf("round %d: ListJobs right after commit does not start with the new job", i)
		}
		if evs := listEvents(t, st, job.ID, 0, 10); len(evs) != 1 {
			t.Fatalf("round %d: ListEvents right after commit: %d events", i, len(evs))
		}

		mustClaim(t, st, tk.ID, t0)
		if got := getTask(t, st, tk.ID); got.Status != lifecycle.Running {
			t.Fatalf("round %d: GetTask right after the claim committed: status %s", i, got.Status)
		}
		if _, ok, err := st.NextReapAt(ctx); err != nil || !ok {
			t.Fatalf("round %d: NextReapAt right after the claim committed: %v, %v", i, ok, err)
		}
		j := *job
		j.Status = lifecycle.JobCompleted
		inTx(t, st, func(tx store.Tx) error { return tx.UpdateJob(ctx, &j) })
		if got := getJob(t, st, job.ID); got.Status != lifecycle.JobCompleted {
			t.Fatalf("round %d: GetJob right after UpdateJob committed: status %s", i, got.Status)
		}
		setStatus(t, st, tk.ID, lifecycle.Completed, t0)
	}
}

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
		if err := tx.InsertJob(ctx, job); err != nil {
			return err
		}
		if err := tx.InsertTasks(ctx, tasks); err != nil { // one call
			return err
		}
		return tx.InsertDeps(ctx, deps) // one call
	})

	sums, err := st.JobTasks(ctx, job.ID)
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
		outs, err := st.ParentOutputs(ctx, tk.ID)
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
		refs, err = tx.SkipDescendants(ctx, tasks[0].ID, t0)
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

// ---------------------------------------------------------------------------------------------
// Outbox relay queries

// claimOutbox runs ClaimOutbox in a transaction it rolls back.
func claimOutbox(t *testing.T, st store.Store, now time.Time, limit int) []*store.OutboxMessage {
	t.Helper()
	rollback := errors.New("rollback")
	var out []*store.OutboxMessage
	err := st.InTx(t.Context(), func(tx store.Tx) error {
		var err error
		if out, err = tx.ClaimOutbox(t.Context(), now, limit, store.OutboxFilter{}); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("ClaimOutbox: %v", err)
	}
	return out
}

func outboxIDs(msgs []*store.OutboxMessage) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

func testOutboxRelayQueries(t *testing.T, st store.Store) {
	ctx := t.Context()
	in := []*store.OutboxMessage{
		{Topic: "task.ready", Key: "q1", Payload: json.RawMessage(`{"task_id":"a"}`), AvailableAt: t0, CreatedAt: t0},
		{Topic: "task.ready", Key: "q2", Payload: json.RawMessage(`{"task_id":"b"}`), AvailableAt: at(-time.Minute), CreatedAt: t0},
		{Topic: "task.ready", Key: "q3", Payload: json.RawMessage(`{"task_id":"c"}`), AvailableAt: at(time.Minute), CreatedAt: t0},
		{Topic: "buffer.batch", Key: "ds", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
	}
	inTx(t, st, func(tx store.Tx) error { return tx.InsertOutbox(ctx, in) })
	all := outboxAfter(t, st, 0, 10)
	if len(all) != 4 {
		t.Fatalf("OutboxAfter = %d messages, want 4", len(all))
	}
	a, b, c, d := all[0].ID, all[1].ID, all[2].ID, all[3].ID

	// Due and unsent only, oldest first, at most limit, every field read back.
	got := claimOutbox(t, st, t0, 10)
	if want := []int64{a, b, d}; !slices.Equal(outboxIDs(got), want) {
		t.Fatalf("ClaimOutbox(t0) = %v, want %v", outboxIDs(got), want)
	}
	checkSame(t, "claimed message", in[0], got[0], "ID")
	if got := claimOutbox(t, st, t0, 2); !slices.Equal(outboxIDs(got), []int64{a, b}) {
		t.Errorf("ClaimOutbox(t0, 2) = %v, want [%d %d]", outboxIDs(got), a, b)
	}

	// Sent messages are no longer claimable; unknown ids are ignored.
	inTx(t, st, func(tx store.Tx) error { return tx.MarkOutboxSent(ctx, []int64{a, d, 1 << 40}, t0) })
	inTx(t, st, func(tx store.Tx) error { return tx.MarkOutboxSent(ctx, nil, t0) })
	if got := claimOutbox(t, st, at(time.Hour), 10); !slices.Equal(outboxIDs(got), []int64{b, c}) {
		t.Errorf("ClaimOutbox after MarkOutboxSent = %v, want [%d %d]", outboxIDs(got), b, c)
	}

	// A retry sets the attempts and postpones the message.
	inTx(t, st, func(tx store.Tx) error { return tx.RetryOutbox(ctx, b, 3, at(2*time.Minute)) })
	if got := claimOutbox(t, st, at(time.Minute), 10); !slices.Equal(outboxIDs(got), []int64{c}) {
		t.Errorf("ClaimOutbox before the retry time = %v, want [%d]", outboxIDs(got), c)
	}
	got = claimOutbox(t, st, at(2*time.Minute), 10)
	if !slices.Equal(outboxIDs(got), []int64{b, c}) {
		t.Fatalf("ClaimOutbox at the retry time = %v, want [%d %d]", outboxIDs(got), b, c)
	}
	if got[0].Attempts != 3 || !got[0].AvailableAt.Equal(at(2*time.Minute)) {
		t.Errorf("retried message: attempts %d, available at %v; want 3, %v", got[0].Attempts, got[0].AvailableAt, at(2*time.Minute))
	}
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.RetryOutbox(ctx, 1<<40, 1, t0) })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RetryOutbox(unknown) = %v, want ErrNotFound", err)
	}

	// Pruning deletes sent messages older than the cutoff, never unsent ones, at most limit.
	inTx(t, st, func(tx store.Tx) error { return tx.MarkOutboxSent(ctx, []int64{c}, at(time.Hour)) })
	var n int
	inTx(t, st, func(tx store.Tx) error {
		var err error
		n, err = tx.DeleteSentOutbox(ctx, at(time.Minute), 1)
		return err
	})
	if n != 1 {
		t.Errorf("DeleteSentOutbox(limit 1) = %d, want 1", n)
	}
	inTx(t, st, func(tx store.Tx) error {
		var err error
		n, err = tx.DeleteSentOutbox(ctx, at(time.Minute), 10)
		return err
	})
	if n != 1 {
		t.Errorf("second DeleteSentOutbox = %d, want 1", n)
	}
	if left := outboxIDs(outboxAfter(t, st, 0, 10)); !slices.Equal(left, []int64{b, c}) {
		t.Errorf("after pruning: %v, want [%d %d] (unsent b, recently sent c)", left, b, c)
	}
}

// ---------------------------------------------------------------------------------------------
// The metrics' counts

func taskCounts(t *testing.T, st store.Store) map[store.TaskCount]bool {
	t.Helper()
	counts, err := st.TaskCounts(t.Context())
	if err != nil {
		t.Fatalf("TaskCounts: %v", err)
	}
	got := map[store.TaskCount]bool{}
	for _, c := range counts {
		if got[c] {
			t.Errorf("TaskCounts: %+v twice", c)
		}
		got[c] = true
	}
	return got
}

func testTaskCounts(t *testing.T, st store.Store) {
	if got := taskCounts(t, st); len(got) != 0 {
		t.Fatalf("TaskCounts on an empty store = %v, want none", got)
	}
	// A processing job: a ready task, one backing off (still pending), two waiting children,
	// one running task on another queue, one that completed and one dead-lettered.
	job := newJob("tenant-a")
	a, b, c := newTask(job.ID, "a"), newTask(job.ID, "b"), newTask(job.ID, "c")
	b.AvailableAt = at(time.Hour)
	c.Queue = "gpu"
	d, e := newTask(job.ID, "d", "a"), newTask(job.ID, "e", "a", "b")
	done, dead := newTask(job.ID, "done"), newTask(job.ID, "dead")
	dead.Queue = "gpu"
	seed(t, st, job, a, b, c, d, e, done, dead)
	mustClaim(t, st, c.ID, at(time.Second))
	setStatus(t, st, done.ID, lifecycle.Completed, at(time.Second))
	mutate(t, st, dead.ID, func(tk *store.Task) {
		tk.Status, tk.FinishedAt, tk.DeadLetteredAt = lifecycle.Failed, at(time.Second), at(time.Second)
	})
	// A finished job's dead letter counts; its completed and skipped tasks do not.
	old := newJob("tenant-b")
	old.Status = lifecycle.JobPartialFailure
	x, y, z := newTask(old.ID, "x"), newTask(old.ID, "y"), newTask(old.ID, "z", "x")
	seed(t, st, old, x, y, z)
	mutate(t, st, x.ID, func(tk *store.Task) {
		tk.Status, tk.FinishedAt, tk.DeadLetteredAt = lifecycle.Failed, at(time.Second), at(time.Second)
	})
	setStatus(t, st, y.ID, lifecycle.Completed, at(time.Second))
	setStatus(t, st, z.ID, lifecycle.Skipped, at(time.Second))

	want := map[store.TaskCount]bool{
		{Queue: "default", State: "pending", N: 2}:          true,
		{Queue: "default", State: "waiting", N: 2}:          true,
		{Queue: "gpu", State: "running", N: 1}:              true,
		{Queue: "gpu", State: store.DeadLettered, N: 1}:     true,
		{Queue: "default", State: store.DeadLettered, N: 1}: true,
	}
	if got := taskCounts(t, st); !maps.Equal(got, want) {
		t.Errorf("TaskCounts = %v, want %v", got, want)
	}
}

func testOutboxBacklog(t *testing.T, st store.Store) {
	ctx := t.Context()
	backlog := func() store.OutboxBacklog {
		t.Helper()
		b, err := st.OutboxBacklog(ctx)
		if err != nil {
			t.Fatalf("OutboxBacklog: %v", err)
		}
		return b
	}
	if b := backlog(); b != (store.OutboxBacklog{}) {
		t.Fatalf("OutboxBacklog of an empty outbox = %+v, want zero", b)
	}
	msgs := []*store.OutboxMessage{
		{Topic: "task.ready", Payload: json.RawMessage(`{}`), AvailableAt: at(time.Minute), CreatedAt: t0},
		{Topic: "task.ready", Payload: json.RawMessage(`{}`), AvailableAt: at(-time.Minute), CreatedAt: t0},
		{Topic: "task.ready", Payload: json.RawMessage(`{}`), AvailableAt: at(time.Hour), CreatedAt: t0},
	}
	inTx(t, st, func(tx store.Tx) error { return tx.InsertOutbox(ctx, msgs) })
	if b, want := backlog(), (store.OutboxBacklog{Unsent: 3, OldestAvailableAt: at(-time.Minute)}); !b.OldestAvailableAt.Equal(want.OldestAvailableAt) || b.Unsent != want.Unsent {
		t.Errorf("OutboxBacklog = %+v, want %+v", b, want)
	}
	// Sent messages leave the backlog, the oldest first here.
	sent := outboxAfter(t, st, 0, 10)
	inTx(t, st, func(tx store.Tx) error { return tx.MarkOutboxSent(ctx, []int64{sent[1].ID}, at(time.Second)) })
	if b := backlog(); b.Unsent != 2 || !b.OldestAvailableAt.Equal(at(time.Minute)) {
		t.Errorf("OutboxBacklog after one sent = %+v, want 2 unsent, the oldest available at %v", b, at(time.Minute))
	}
	inTx(t, st, func(tx store.Tx) error {
		return tx.MarkOutboxSent(ctx, []int64{sent[0].ID, sent[2].ID}, at(time.Second))
	})
	if b := backlog(); b != (store.OutboxBacklog{}) {
		t.Errorf("OutboxBacklog with everything sent = %+v, want zero", b)
	}
}
