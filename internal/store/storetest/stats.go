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

	got, err := st.QueueStats(t.Context(), "tenant-a", now, window)
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

	if got, err = st.QueueStats(t.Context(), "tenant-c", now, window); err != nil || len(got.Queues)+len(got.Workers) != 0 {
		t.Errorf("QueueStats(tenant-c) = %+v, %v; want nothing", got, err)
	}
}
