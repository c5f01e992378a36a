package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/jonboulle/clockwork"
)

// Work is a transaction of the dispatcher in progress, as code outside the core sees it: what it
// appends to the audit log and the outbox besides its state writes, and what it wakes once it
// committed. Update and UpdateAlone hand one to their function.
type Work struct{ c *changes }

// Now is the transaction's time, at the store's millisecond precision.
func (w *Work) Now() time.Time { return w.c.now }

// Outbox appends m to the outbox, written in the same transaction.
func (w *Work) Outbox(m *store.OutboxMessage) { w.c.outbox = append(w.c.outbox, m) }

// Signal wakes what waits on s once the transaction committed (nothing if it rolls back).
func (w *Work) Signal(s *Signal) {
	if !slices.Contains(w.c.signals, s) {
		w.c.signals = append(w.c.signals, s)
	}
}

// Update runs fn as one store transaction, or a part of a group commit, that first locks the rows
// of locks and also writes what fn appended to w (see update). fn may run more than once.
func (d *Dispatcher) Update(ctx context.Context, locks store.LockSet, fn func(tx store.Tx, w *Work) error) error {
	return d.update(ctx, locks, func(tx store.Tx, c *changes) error { return fn(tx, &Work{c: c}) })
}

// UpdateAlone is Update in a transaction of its own, retried after transient failures.
func (d *Dispatcher) UpdateAlone(ctx context.Context, locks store.LockSet, fn func(tx store.Tx, w *Work) error) error {
	return d.updateAlone(ctx, locks, func(tx store.Tx, c *changes) error { return fn(tx, &Work{c: c}) })
}

// LockAttempt locks the task of f in tx and checks that f is its current, running attempt.
func (d *Dispatcher) LockAttempt(ctx context.Context, tx store.Tx, f Fence) (*store.Task, error) {
	return d.lockAttempt(ctx, tx, f)
}

// Now is the dispatcher's clock at the store's millisecond precision.
func (d *Dispatcher) Now() time.Time { return d.now() }

// InsertJobsIfAbsent stores the one-task jobs whose idempotency key is new, each with its task
// in tasks (by job id), with their audit events and wake-ups, and returns the jobs it stored.
// Jobs whose key exists already are left as they are.
func (w *Work) InsertJobsIfAbsent(ctx context.Context, tx store.Tx, jobs []*store.Job, tasks map[string]*store.Task) ([]*store.Job, error) {
	c := w.c
	if len(jobs) == 0 {
		return nil, nil
	}
	// The jobs in key order, so that concurrent callers wait on each other's keys without
	// deadlock; their tasks in the caller's order, which is the order they are claimed in (of
	// equal priority and readiness).
	sorted := slices.SortedFunc(slices.Values(jobs), func(a, b *store.Job) int { return strings.Compare(a.IdempotencyKey, b.IdempotencyKey) })
	inserted, err := tx.JobInsertManyIfAbsent(ctx, sorted)
	if err != nil {
		return nil, fmt.Errorf("insert %d one-task jobs: %w", len(jobs), err)
	}
	if len(inserted) == 0 {
		return nil, nil
	}
	fresh := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		fresh[id] = true
	}
	stored := make([]*store.Job, 0, len(inserted))
	created := make([]*store.Task, 0, len(inserted))
	for _, job := range jobs {
		if !fresh[job.ID] {
			continue
		}
		id, t := job.ID, tasks[job.ID]
		stored = append(stored, job)
		created = append(created, t)
		c.event(id, "", "", EventJobCreated, map[string]any{"jobId": id, "totalTasks": 1, "pipeline": job.Pipeline,
			"pipelineVersion": job.PipelineVersion, "pipelineJob": job.PipelineJob, "routeKey": job.IdempotencyKey,
			"tasks": []map[string]any{{"taskId": t.Key, "name": t.Name, "dependsOn": []string{}, "input": t.Input}}})
		c.event(id, t.ID, t.Key, EventTaskPending, map[string]any{"requestId": t.Key, "jobId": id, "name": t.Name, "dependsOn": []string{}})
		c.wake(t.ID, t.Queue, t.Runtime, t.AvailableAt)
	}
	if err := tx.TaskInsertMany(ctx, created); err != nil {
		return nil, fmt.Errorf("insert the tasks of %d new one-task jobs: %w", len(created), err)
	}
	return stored, nil
}

// NoteJobs keeps the refs of jobs that a committed transaction created, so that the claims of
// their tasks do not read the job rows back (see JobRef): every routed task is a new job.
func (d *Dispatcher) NoteJobs(jobs []*store.Job) {
	d.jobs.mu.Lock()
	defer d.jobs.mu.Unlock()
	for _, job := range jobs {
		if d.jobs.m == nil || len(d.jobs.m) >= maxJobRefs {
			d.jobs.m = map[string]JobRef{}
		}
		d.jobs.m[job.ID] = JobRef{ID: job.ID, Tenant: job.Tenant, Name: job.Name}
	}
}

// Signal wakes the goroutines waiting for something a transaction did, once it committed: the
// data plane's router waits on one for new dataset events, its sinks on another for new batches.
// The zero value is ready to use.
type Signal struct{ n notifier }

// Wait returns a channel that is closed the next time a transaction that signalled s commits.
// Take it before looking for work, so that a commit between the look and the wait is not missed.
func (s *Signal) Wait() <-chan struct{} { return s.n.wait() }

// Notify wakes the waiters of s now.
func (s *Signal) Notify() { s.n.notify() }

// Hook is how the data plane takes part in the transitions of a task: the core calls it inside
// the transaction of a worker's report that carries dataset events or published dataset versions,
// so that they are stored exactly when the report is. A dispatcher without a hook refuses such
// reports.
type Hook interface {
	// RecordEvents stores the events of t's current attempt and returns how many were new.
	RecordEvents(ctx context.Context, tx store.Tx, w *Work, t *store.Task, events []report.Event) (int, error)
	// RegisterVersions registers the dataset versions the successful attempt of t wrote.
	RegisterVersions(ctx context.Context, tx store.Tx, w *Work, t *store.Task, pub []report.Published) error
}

// EventChecker is implemented by a hook whose RecordEvents needs to know what lies outside the
// store, in object storage, about some events: it must look before the report's transaction, never
// while the transaction holds the task's row. Complete calls CheckEvents with the report's fence
// before its transaction and hands RecordEvents the events it returns; its error
// refuses the report, which then changes nothing. CheckEvents must leave a report it cannot judge
// (an unknown task, a stale fence) to the transaction, which answers it as it would any other.
type EventChecker interface {
	CheckEvents(ctx context.Context, f Fence, events []report.Event) ([]report.Event, error)
}

// checkEvents runs the hook's EventChecker, if it has one, on a report's events.
func (d *Dispatcher) checkEvents(ctx context.Context, f Fence, events []report.Event) ([]report.Event, error) {
	ck, ok := d.hook.(EventChecker)
	if !ok || len(events) == 0 {
		return events, nil
	}
	return ck.CheckEvents(ctx, f, events)
}

// SetHook makes h the dispatcher's hook. Call it before the dispatcher serves.
func (d *Dispatcher) SetHook(h Hook) { d.hook = h }

// errNoDataPlane refuses dataset events and versions on a dispatcher without a hook.
var errNoDataPlane = &InvalidError{Message: "this server runs no data plane: dataset events and published versions are refused"}

func (d *Dispatcher) recordEvents(ctx context.Context, tx store.Tx, c *changes, t *store.Task, events []report.Event) (int, error) {
	if d.hook == nil {
		return 0, errNoDataPlane
	}
	return d.hook.RecordEvents(ctx, tx, &Work{c: c}, t, events)
}

func (d *Dispatcher) registerVersions(ctx context.Context, tx store.Tx, c *changes, t *store.Task, pub []report.Published) error {
	if len(pub) == 0 {
		return nil
	}
	if d.hook == nil {
		return errNoDataPlane
	}
	return d.hook.RegisterVersions(ctx, tx, &Work{c: c}, t, pub)
}

// Clock returns the dispatcher's clock.
func (d *Dispatcher) Clock() clockwork.Clock { return d.clock }

// Logger returns the dispatcher's logger.
func (d *Dispatcher) Logger() *slog.Logger { return d.log }
