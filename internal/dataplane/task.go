package dataplane

import (
	"encoding/json"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/google/uuid"
)

// newPipelineTask builds a pending task of pipeline job js and its one-task job, keyed for
// idempotency by key.
func (dp *Plane) newPipelineTask(spec *specs.Pipeline, js *specs.Job, now time.Time, key string) (*store.Job, *store.Task) {
	def := dp.d.Defaults()
	job := &store.Job{
		ID:              "job-" + uuid.Must(uuid.NewV7()).String(),
		Tenant:          spec.Tenant,
		Name:            spec.Name + "." + js.Name,
		Status:          lifecycle.JobProcessing,
		IdempotencyKey:  key,
		TotalTasks:      1,
		UnfinishedTasks: 1,
		CreatedAt:       now,
		Pipeline:        spec.Name,
		PipelineVersion: spec.Version,
		PipelineJob:     js.Name,
	}
	t := &store.Task{
		ID:               uuid.Must(uuid.NewV7()).String(),
		JobID:            job.ID,
		Key:              js.Name,
		Name:             js.Operator,
		Queue:            js.TaskQueue(),
		Priority:         js.Priority,
		Runtime:          js.TaskRuntime(dp.cfg.LambdaOnPull),
		Input:            js.Config,
		DependsOn:        []string{},
		Status:           lifecycle.Pending,
		MaxAttempts:      cmpOr(js.MaxAttempts, def.MaxAttempts),
		AvailableAt:      now,
		BackoffBase:      def.BackoffBase,
		BackoffMax:       def.BackoffMax,
		Timeout:          time.Duration(js.TimeoutSeconds) * time.Second,
		HeartbeatTimeout: cmpOr(time.Duration(js.HeartbeatTimeoutSeconds)*time.Second, def.HeartbeatTimeout),
		CancelGrace:      def.CancelGrace,
		CreatedAt:        now,
		LastEventType:    dispatch.EventTaskPending,
		LastEventAt:      now,
	}
	if len(t.Input) == 0 {
		t.Input = json.RawMessage("{}")
	}
	if js.MaxConcurrency > 0 {
		t.ConcurrencyKey, t.ConcurrencyLimit = spec.Tenant+"/"+spec.Name+"/"+js.Name, js.MaxConcurrency
	}
	return job, t
}

// pipelineTask builds the task of job js of version spec and its one-task job, keyed for
// idempotency by key, with its route: started by event e on input fired (e nil, fired -1: a
// source's task, with trigger describing what started it), its datasets at the versions known
// holds as current, but those pins names (a build's task).
func (dp *Plane) pipelineTask(spec *specs.Pipeline, js *specs.Job, known *specs.Known, fired int, e *intake.Routed,
	trigger json.RawMessage, pins map[string]string, now time.Time, key string) (*store.Job, *store.Task) {
	job, task := dp.newPipelineTask(spec, js, now, key)
	task.Route = js.Route(spec, known, fired, e, trigger, pins)
	return job, task
}
