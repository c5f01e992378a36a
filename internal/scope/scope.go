// Package scope decides what one attempt of a task may touch. A Scope is derived once, from the
// task, its tenant and the route the task was created with; the attempt's capability token is
// minted from it, and every task-scoped and internal route asks it: which datasets the attempt
// may read (and at which versions), which it writes and may publish batches into, which partitions
// it commits, which object storage it is granted, which bundle it may download, and which secrets
// its runtime may receive.
package scope

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// Access is what an attempt may do with a dataset of its scope.
type Access string

const (
	// Read: an input of the task's job, read at the version the route pins, through the input's
	// where.
	Read Access = "read"
	// Write: an output of the task's job, at the version the route pins. The attempt writes it
	// (its files under its own prefix, its events, its batches when it is buffered) and may read it
	// back.
	Write Access = "write"
)

// Dataset is one dataset of a scope.
type Dataset struct {
	UUID    string
	Name    string // its published name; "" when it has none
	Version string // the version the route pins
	Access  Access
	// Buffered: a buffered output, which the attempt may publish batches into.
	Buffered bool
	// Input is the route's input, for a Read dataset: its where, and the event that started the
	// task (cursor, partition) when it is the input that fired.
	Input *wire.DatasetInput
	// Output is the route's output, for a Write dataset.
	Output *wire.DatasetOutput
}

// Scope is what one attempt of a task may touch.
type Scope struct {
	Tenant  string
	TaskID  string
	Attempt int
	// Datasets are the datasets of the task's job, inputs first, then outputs; none for a task
	// that is not a pipeline task.
	Datasets []Dataset
	// Runtime is the pipeline job's runtime; "" for a task of a submitted job.
	Runtime string
	// Bundle is the user code bundle the attempt may download: its job's udf; "" none.
	Bundle string
	// Secrets are the names of the secrets the attempt's runtime may receive: the job's, for a
	// platform operator that runs no user code; none for user code.
	Secrets []string
	// Replace: the job writes with update_strategy replace, committing whole partitions of its
	// non-buffered outputs.
	Replace bool

	storage grant.Attempt
}

// Of returns the scope of t's current attempt, t being a task of tenant.
func Of(t *store.Task, tenant string) *Scope {
	return FromRoute(t, tenant, dispatch.DecodeRoute(t))
}

// FromRoute is Of with t's route already decoded (nil: t is no pipeline task).
func FromRoute(t *store.Task, tenant string, r *wire.Route) *Scope {
	s := &Scope{Tenant: tenant, TaskID: t.ID, Attempt: t.Attempt, storage: grant.Attempt{TaskID: t.ID, Attempt: t.Attempt}}
	if r == nil {
		return s
	}
	for i := range r.Inputs {
		in := &r.Inputs[i]
		s.Datasets = append(s.Datasets, Dataset{UUID: in.DatasetUUID, Name: in.DatasetName, Version: in.DatasetVersion,
			Access: Read, Input: in})
		s.storage.Inputs = append(s.storage.Inputs, grant.Input{DatasetUUID: in.DatasetUUID, StorageRef: in.StorageRef})
	}
	for i := range r.Outputs {
		o := &r.Outputs[i]
		buffered := o.WriteMode == pipeline.WriteBuffered
		s.Datasets = append(s.Datasets, Dataset{UUID: o.DatasetUUID, Name: o.DatasetName, Version: o.DatasetVersion,
			Access: Write, Buffered: buffered, Output: o})
		s.storage.Outputs = append(s.storage.Outputs, grant.Output{DatasetUUID: o.DatasetUUID, Buffered: buffered})
	}
	s.Runtime, s.Bundle = r.Job.Runtime, r.Job.Bundle
	s.Replace = r.Job.UpdateStrategy == pipeline.UpdateReplace
	if trusted(r.Job.Runtime) && r.Job.Bundle == "" {
		s.Secrets = r.Job.Secrets
	}
	return s
}

// trusted reports whether a runtime runs the platform's own operators, which may receive their
// job's secrets; user code (a bundle, or the untrusted runtime) never does.
func trusted(runtime string) bool {
	switch runtime {
	case pipeline.RuntimeECSPlatform, pipeline.RuntimeLambda, pipeline.RuntimeDispatcher:
		return true
	}
	return false
}

// Storage is what the attempt's storage grant is derived from (grant.Derive): its pinned input
// versions and its output datasets. A task that is not a pipeline task reads nothing and writes
// only its scratch space.
func (s *Scope) Storage() grant.Attempt { return s.storage }

// Readable returns the dataset of the scope named ref (by uuid or published name) that the
// attempt may read: an input — the one whose event started the task when several read it, else
// the first — or else an output. ok is false for any other dataset.
func (s *Scope) Readable(ref string) (d Dataset, ok bool) {
	for _, x := range s.Datasets {
		if x.UUID != ref && (x.Name == "" || x.Name != ref) {
			continue
		}
		if x.Access == Read && (!ok || (!fired(d) && fired(x))) {
			d, ok = x, true
		}
		if x.Access == Write && !ok {
			return x, true
		}
	}
	return d, ok
}

// fired reports whether d is an input whose event started the task.
func fired(d Dataset) bool {
	return d.Input != nil && (d.Input.Cursor != nil || d.Input.PartitionKey != "")
}

// Publishable returns the buffered output datasetUUID the attempt may publish batches into, and
// whether there is one.
func (s *Scope) Publishable(datasetUUID string) (Dataset, bool) {
	for _, x := range s.Datasets {
		if x.Access == Write && x.Buffered && x.UUID == datasetUUID {
			return x, true
		}
	}
	return Dataset{}, false
}

// Commits returns the outputs whose partitions the attempt commits, by dataset uuid: those of a
// job with update_strategy replace that are not buffered (a buffered dataset's rows are appended
// by its sink). Nil for any other job.
func (s *Scope) Commits() map[string]*wire.DatasetOutput {
	if !s.Replace {
		return nil
	}
	out := map[string]*wire.DatasetOutput{}
	for _, x := range s.Datasets {
		if x.Access == Write && !x.Buffered {
			out[x.UUID] = x.Output
		}
	}
	return out
}

// Running returns the scope of the attempt f names, which must be the current one, running
// under a live lease (a requested cancellation still counts: dispatch.Dispatcher.RunningAttempt):
// what every task-scoped read asks before it answers.
func Running(ctx context.Context, d *dispatch.Dispatcher, f dispatch.Fence) (*Scope, error) {
	t, err := d.RunningAttempt(ctx, f)
	if err != nil {
		return nil, err
	}
	job, err := d.JobRef(ctx, t.JobID)
	if err != nil {
		return nil, fmt.Errorf("task %s: job %s: %w", t.ID, t.JobID, err)
	}
	return Of(t, job.Tenant), nil
}
