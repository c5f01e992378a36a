// Fixtures, reads and comparisons shared by the contract tests of every aggregate.

package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

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
		if err := tx.JobInsert(t.Context(), job); err != nil {
			return err
		}
		if err := tx.TaskInsertMany(t.Context(), tasks); err != nil {
			return err
		}
		return tx.DepInsertMany(t.Context(), deps)
	})
	return byKey
}

func getTask(t testing.TB, st store.Store, id string) *store.Task {
	t.Helper()
	tk, err := st.TaskGet(t.Context(), id)
	if err != nil {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return tk
}

func getJob(t testing.TB, st store.Store, id string) *store.Job {
	t.Helper()
	j, err := st.JobGet(t.Context(), id)
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
		tk, err := tx.TaskGet(t.Context(), id)
		if err != nil {
			return err
		}
		fence := store.Fence{Status: tk.Status, Attempt: tk.Attempt}
		fn(tk)
		return tx.TaskUpdate(t.Context(), tk, fence)
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
		got, ok, err = tx.TaskClaim(t.Context(), store.ClaimTaskParams{
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
// Reads shared by the tests of several aggregates

func listJobs(t *testing.T, st store.Store, p store.ListJobsParams) []*store.Job {
	t.Helper()
	jobs, err := st.JobList(t.Context(), p)
	if err != nil {
		t.Fatalf("ListJobs(%+v): %v", p, err)
	}
	return jobs
}

func readyIDs(t *testing.T, st store.Store, queue string, now time.Time, limit int) []string {
	t.Helper()
	var ids []string
	inTx(t, st, func(tx store.Tx) error {
		var err error
		ids, err = tx.TaskListReadyIDs(t.Context(), store.TaskListReadyIDsParams{Queue: queue, Now: now, Limit: limit})
		return err
	})
	return ids
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

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func listEvents(t *testing.T, st store.Reader, jobID string, after int64, limit int) []*store.Event {
	t.Helper()
	evs, err := st.EventList(t.Context(), store.EventListParams{JobID: jobID, AfterID: after, Limit: limit})
	if err != nil {
		t.Fatalf("ListEvents(%s, %d, %d): %v", jobID, after, limit, err)
	}
	return evs
}

func outboxAfter(t *testing.T, st store.Reader, after int64, limit int) []*store.OutboxMessage {
	t.Helper()
	msgs, err := st.OutboxListAfter(t.Context(), after, limit)
	if err != nil {
		t.Fatalf("OutboxAfter(%d, %d): %v", after, limit, err)
	}
	return msgs
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
	tk, err := st.TaskGet(t.Context(), r.ID)
	if err != nil {
		t.Errorf("%s: ref %s: GetTask: %v", what, r.ID, err)
		return
	}
	want := &store.TaskRef{ID: tk.ID, JobID: tk.JobID, Key: tk.Key, Name: tk.Name, Queue: tk.Queue, Runtime: tk.Runtime, Status: tk.Status, AvailableAt: tk.AvailableAt}
	checkSame(t, what+": ref "+tk.Key, want, r)
}
