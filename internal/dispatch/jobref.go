package dispatch

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// JobRef is what a task's payload says of its job: its id, tenant and name. They never change
// after the job is created, so the dispatcher keeps those it has read: a claim then hands out its
// task's job without reading the job row again.
type JobRef struct {
	ID     string
	Tenant string
	Name   string // the job's name (a DAG's); "" when it has none
}

// maxJobRefs bounds the job cache; it is emptied when full.
const maxJobRefs = 100_000

type jobRefs struct {
	mu sync.Mutex
	m  map[string]JobRef
}

// JobRef returns the ref of job id, read from the store on a miss; store.ErrNotFound for a job
// that does not exist.
//
// A claim calls it while its transaction holds the claimed tasks' rows, and still reads outside
// that transaction: inside it, reading a job locks the job's row (FOR UPDATE on PostgreSQL), and
// a group commit that then locks another transition's dependents would break the lock order
// (jobs last) and could deadlock. What it reads is safe to read outside: a job's id, tenant and
// name are committed with its tasks and never change.
func (d *Dispatcher) JobRef(ctx context.Context, id string) (JobRef, error) {
	d.jobs.mu.Lock()
	ref, ok := d.jobs.m[id]
	d.jobs.mu.Unlock()
	if ok {
		return ref, nil
	}
	job, err := d.store.JobGet(ctx, id)
	if err != nil {
		return JobRef{}, err
	}
	ref = JobRef{ID: job.ID, Tenant: job.Tenant, Name: job.Name}
	d.jobs.mu.Lock()
	if d.jobs.m == nil || len(d.jobs.m) >= maxJobRefs {
		d.jobs.m = map[string]JobRef{}
	}
	d.jobs.m[id] = ref
	d.jobs.mu.Unlock()
	return ref, nil
}

// DecodeRoute reads a task's route; nil for a task that is not a pipeline task.
func DecodeRoute(t *store.Task) *wire.Route {
	if len(t.Route) == 0 {
		return nil
	}
	var r wire.Route
	if json.Unmarshal(t.Route, &r) != nil {
		return nil
	}
	return &r
}
