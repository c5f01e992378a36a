// Contract of the metrics' counts: jobs, queues and tasks.

package storetest

import (
	"maps"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

func testJobCounts(t *testing.T, st store.Store) {
	for _, s := range []lifecycle.JobStatus{lifecycle.JobProcessing, lifecycle.JobProcessing, lifecycle.JobCompleted, lifecycle.JobPartialFailure} {
		j := newJob("tenant-a")
		j.Status = s
		seed(t, st, j)
	}
	seed(t, st, newJob("tenant-b"))
	counts, err := st.JobCounts(t.Context(), "tenant-a")
	if err != nil {
		t.Fatalf("JobCounts: %v", err)
	}
	if want := map[lifecycle.JobStatus]int{lifecycle.JobProcessing: 2, lifecycle.JobCompleted: 1, lifecycle.JobPartialFailure: 1}; !maps.Equal(counts, want) {
		t.Errorf("JobCounts(tenant-a) = %v, want %v", counts, want)
	}
	if counts, err = st.JobCounts(t.Context(), "tenant-c"); err != nil || len(counts) != 0 {
		t.Errorf("JobCounts(tenant-c) = %v, %v; want none", counts, err)
	}
}

func testQueueStats(t *testing.T, st store.Store) {
	now, window := at(time.Minute), time.Minute // the window starts at t0
	inQueue := func(tk *store.Task, queue string, available time.Time) *store.Task {
		tk.Queue, tk.AvailableAt = queue, available
		return tk
	}
	j := newJob("tenant-a")
	ts := seed(t, st, j,
		inQueue(newTask(j.ID, "ready-1"), "alpha", t0),
		inQueue(newTask(j.ID, "ready-2"), "alpha", at(30*time.Second)),
		inQueue(newTask(j.ID, "backing-off"), "alpha", at(10*time.Minute)),
		inQueue(newTask(j.ID, "running"), "alpha", t0),
		inQueue(newTask(j.ID, "done-in-window"), "alpha", t0),
		inQueue(newTask(j.ID, "done-before"), "alpha", t0),
		inQueue(newTask(j.ID, "dead"), "beta", t0),
		inQueue(newTask(j.ID, "waiting", "ready-1"), "gamma", t0),
	)
	claim(t, st, ts["running"].ID, at(20*time.Second), "w1")
	claim(t, st, ts["done-in-window"].ID, at(10*time.Second), "w2")
	mutate(t, st, ts["done-in-window"].ID, func(tk *store.Task) { tk.Status, tk.FinishedAt = lifecycle.Completed, at(50*time.Second) })
	claim(t, st, ts["done-before"].ID, at(-2*time.Second), "w3")
	mutate(t, st, ts["done-before"].ID, func(tk *store.Task) { tk.Status, tk.FinishedAt = lifecycle.Completed, at(-time.Second) })
	mutate(t, st, ts["dead"].ID, func(tk *store.Task) {
		tk.Status, tk.FinishedAt, tk.DeadLetteredAt = lifecycle.Failed, t0, t0
	})
	// A job that finished before the window: its tasks are neither completions nor workers seen.
	old := newJob("tenant-a")
	old.Status, old.FinishedAt = lifecycle.JobCompleted, at(-time.Hour)
	ots := seed(t, st, old, inQueue(newTask(old.ID, "old"), "alpha", at(-2*time.Hour)))
	claim(t, st, ots["old"].ID, at(-2*time.Hour), "w4")
	mutate(t, st, ots["old"].ID, func(tk *store.Task) { tk.Status, tk.FinishedAt = lifecycle.Completed, at(-time.Hour) })
	// Another tenant's tasks are not counted.
	other := newJob("tenant-b")
	ots = seed(t, st, other, inQueue(newTask(other.ID, "theirs"), "alpha", t0), inQueue(newTask(other.ID, "running"), "alpha", t0))
	claim(t, st, ots["running"].ID, at(30*time.Second), "w5")

	got, err := st.QueueStats(t.Context(), store.QueueStatsParams{Tenant: "tenant-a", Now: now, Window: window})
	if err != nil {
		t.Fatalf("QueueStats: %v", err)
	}
	checkSame(t, "queue stats", &store.QueueStats{
		Queues: []*store.QueueStat{
			{Queue: "alpha", Ready: 2, Delayed: 1, Running: 1, OldestReady: t0, Completed: 1},
			{Queue: "beta", DeadLettered: 1},
		},
		Workers: []*store.WorkerSeen{
			{WorkerID: "w1", Queue: "alpha", LastClaim: at(20 * time.Second), Running: 1},
			{WorkerID: "w2", Queue: "alpha", LastClaim: at(10 * time.Second)},
		},
	}, got)

	if got, err = st.QueueStats(t.Context(), store.QueueStatsParams{Tenant: "tenant-c", Now: now, Window: window}); err != nil || len(got.Queues)+len(got.Workers) != 0 {
		t.Errorf("QueueStats(tenant-c) = %+v, %v; want nothing", got, err)
	}
}

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
