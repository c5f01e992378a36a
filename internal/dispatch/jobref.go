package dispatch

import (
	"context"
	"sync"

	"github.com/baton-dev/baton/internal/store"
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
func (d *Dispatcher) JobRef(ctx context.Context, id string) (JobRef, error) {
	return d.jobRef(ctx, d.store, id)
}

// jobRef is JobRef reading through r (a claim's transaction) on a miss.
func (d *Dispatcher) jobRef(ctx context.Context, r store.Reader, id string) (JobRef, error) {
	d.jobs.mu.Lock()
	ref, ok := d.jobs.m[id]
	d.jobs.mu.Unlock()
	if ok {
		return ref, nil
	}
	job, err := r.GetJob(ctx, id)
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
