// Package assignment renders a claimed task into what each worker dialect hands out: the
// stream-worker dialect's claim, the internal dialect's claim and task, and the push envelope.
// Every dialect renders the same claim (dispatch.Claim: the task, its job, its decoded route and
// its parents' outputs, read in the claim's transaction) and the same capability token, so no
// dialect reads the task again after the claim or assembles a payload of its own.
package assignment

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// Assignment is a claimed attempt with its capability token.
type Assignment struct {
	*dispatch.Claim
	Token        string
	TokenExpires time.Time
}

// Stream is the stream-worker dialect's claim; messageID is the wake-up entry to acknowledge
// ("" for none).
func (a Assignment) Stream(messageID string) *wire.StreamClaim {
	t := a.Task
	payload := t.Input
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	deps := a.DependencyOutputs
	if deps == nil {
		deps = map[string]json.RawMessage{}
	}
	out := &wire.StreamClaim{
		Claimed:                  true,
		JobID:                    t.ID,
		AttemptID:                t.Attempt,
		LeaseToken:               t.LeaseToken,
		Stream:                   t.Queue,
		MessageID:                messageID,
		Payload:                  payload,
		TaskID:                   t.ID,
		TaskKey:                  t.Key,
		TaskName:                 t.Name,
		RunID:                    t.JobID,
		DependencyOutputs:        deps,
		LeaseTTLSeconds:          t.HeartbeatTimeout.Seconds(),
		HeartbeatIntervalSeconds: a.HeartbeatInterval.Seconds(),
		LeaseExpiresAt:           wire.MilliTime{Time: t.LeaseExpiresAt},
		CapabilityToken:          a.Token,
		CapabilityTokenExpiresAt: wire.MilliTime{Time: a.TokenExpires},
		Traceparent:              t.Traceparent,
	}
	if t.Timeout > 0 {
		secs := t.Timeout.Seconds()
		out.TimeoutSeconds = &secs
	}
	if r := a.Route; r != nil {
		out.Job, out.Operator, out.Config, out.Inputs, out.Outputs = &r.Job, t.Name, payload, &r.Inputs, &r.Outputs
		if len(r.Trigger) > 0 {
			out.Trigger = r.Trigger
		}
	}
	return out
}

// Internal is the internal dialect's claim.
func (a Assignment) Internal() *wire.InternalClaim {
	t := a.Task
	return &wire.InternalClaim{
		Status:                   "Claimed",
		TaskID:                   t.ID,
		Attempt:                  t.Attempt,
		LeaseToken:               t.LeaseToken,
		LeaseExpiresAt:           wire.Time{Time: t.LeaseExpiresAt},
		CapabilityToken:          a.Token,
		CapabilityTokenExpiresAt: wire.Time{Time: a.TokenExpires},
		HeartbeatIntervalSeconds: max(int64(a.HeartbeatInterval/time.Second), 1),
		LeaseTTLSeconds:          int64(t.HeartbeatTimeout / time.Second),
		Task:                     Task(t, a.Job, a.Route, a.DependencyOutputs),
		Traceparent:              t.Traceparent,
	}
}

// Task is the internal dialect's task object of t, a task of job with route (nil for a task
// that is not a pipeline task) and its parents' outputs deps.
func Task(t *store.Task, job dispatch.JobRef, route *wire.Route, deps map[string]json.RawMessage) *wire.Task {
	config := t.Input
	if len(config) == 0 {
		config = json.RawMessage("{}")
	}
	out := &wire.Task{
		TaskID:            t.ID,
		Attempt:           t.Attempt,
		TaskKey:           t.Key,
		Job:               wire.TaskJob{JobID: job.ID, Name: t.Key},
		Operator:          t.Name,
		Config:            config,
		DependencyOutputs: make(map[string]json.RawMessage, len(deps)),
		Queue:             t.Queue,
		Traceparent:       t.Traceparent,
	}
	if job.Name != "" {
		out.Job.DAGName = &job.Name
	}
	if t.Timeout > 0 {
		secs := int64(t.Timeout / time.Second)
		out.TimeoutSeconds = &secs
	}
	keys := slices.Sorted(maps.Keys(deps))
	parents := make([]wire.ParentOutput, len(keys))
	for i, k := range keys {
		parents[i] = wire.ParentOutput{TaskID: k, Output: rawOrNull(deps[k])}
		out.DependencyOutputs[k] = rawOrNull(deps[k])
	}
	var inputs any = parents
	if r := route; r != nil {
		// A pipeline task: its inputs are the datasets it reads, and it has outputs.
		out.Job = wire.TaskJob{JobID: job.ID, DAGName: &r.Job.DAGName, Name: r.Job.Name, Version: r.Job.Version,
			IdleTimeoutSeconds: r.Job.IdleTimeoutSeconds, UpdateStrategy: r.Job.UpdateStrategy, UniqueKey: r.Job.UniqueKey}
		out.Config = rawOrNull(t.Input)
		inputs, out.Outputs = r.Inputs, &r.Outputs
		if len(r.Trigger) > 0 {
			out.Trigger = r.Trigger
		}
	}
	b, err := json.Marshal(inputs)
	if err != nil {
		// Parents' outputs were stored as JSON and dataset inputs are plain values.
		panic("assignment: marshal inputs: " + err.Error())
	}
	out.Inputs = b
	return out
}

// Push is the push envelope of the assignment, for a target that reports back at callbackBase;
// key is the delivery's idempotency key.
func (a Assignment) Push(callbackBase, key string) *wire.PushEnvelope {
	t := a.Task
	deps := make(map[string]json.RawMessage, len(a.DependencyOutputs))
	for k, v := range a.DependencyOutputs {
		deps[k] = rawOrNull(v)
	}
	env := &wire.PushEnvelope{
		TaskID:              t.ID,
		RunID:               t.JobID,
		TaskKey:             t.Key,
		TaskName:            t.Name,
		Queue:               t.Queue,
		TenantID:            a.Job.Tenant,
		Attempt:             t.Attempt,
		AttemptID:           t.LeaseToken,
		LeaseToken:          t.LeaseToken,
		LeaseExpiresAt:      wire.Time{Time: t.LeaseExpiresAt},
		EnqueuedAt:          wire.Time{Time: t.AvailableAt},
		Deadline:            wire.Time{Time: t.DeadlineAt},
		Input:               rawOrNull(t.Input),
		DependencyOutputs:   deps,
		CallbackBaseURL:     callbackBase,
		TaskToken:           a.Token,
		TokenExpiresAt:      wire.Time{Time: a.TokenExpires},
		HeartbeatIntervalMs: a.HeartbeatInterval.Milliseconds(),
		HeartbeatTimeoutMs:  t.HeartbeatTimeout.Milliseconds(),
		CancelGracePeriodMs: t.CancelGrace.Milliseconds(),
		IdempotencyKey:      key,
		Traceparent:         t.Traceparent,
	}
	if r := a.Route; r != nil {
		env.Job, env.Operator, env.Config = &r.Job, t.Name, rawOrNull(t.Input)
		env.Inputs, env.Outputs, env.Trigger = r.Inputs, r.Outputs, r.Trigger
	}
	return env
}

// rawOrNull is b, or JSON null when b is empty.
func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
