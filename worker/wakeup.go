package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/baton-dev/baton/internal/transport"
)

// pathTaskClaim is the internal dialect's claim by task id (docs/contracts/internal.md), used
// after a wake-up.
const pathTaskClaim = "/internal/task-claim"

// wakeLoop receives a wake-up whenever a slot is free and claims its task, until ctx ends.
func (w *Worker) wakeLoop(ctx context.Context, queues []string, c transport.Consumer) {
	var b backoff
	for {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		a, err := w.wakeClaim(ctx, queues, c)
		if err != nil || a == nil {
			<-w.slots
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				w.log.WarnContext(ctx, "wake-up claim failed", "err", err)
				if !sleep(ctx, b.after(err)) {
					return
				}
			}
			continue
		}
		b.reset()
		w.attempts.Add(1)
		go func() {
			defer w.attempts.Done()
			defer func() { <-w.slots }()
			w.run(a)
		}()
	}
}

// wakeClaim waits for one wake-up and claims its task; it returns nil when nothing was claimed.
// A wake-up whose claim failed is left unacknowledged, for the transport to deliver again.
func (w *Worker) wakeClaim(ctx context.Context, queues []string, c transport.Consumer) (*attempt, error) {
	ds, err := c.Receive(ctx, queues, 1, w.cfg.pollWait)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	d := ds[0]
	var ans internalClaimAnswer
	body := map[string]any{"task_id": d.TaskID(), "worker_id": w.cfg.workerID}
	if err := w.post(ctx, requestTimeout, pathTaskClaim, body, &ans); err != nil {
		return nil, err
	}
	if ans.Status != "Claimed" {
		w.log.DebugContext(ctx, "wake-up for a task not claimable", "task_id", d.TaskID(), "reason", ans.Reason)
		if err := d.Ack(ctx); err != nil {
			w.log.WarnContext(ctx, "wake-up: acknowledge", "task_id", d.TaskID(), "err", err)
		}
		return nil, nil
	}
	queue := d.Queue()
	a := w.newAttempt(ctx, ans.claimAnswer(d.TaskID(), queue))
	a.wake = d
	return a, nil
}

// ackWake acknowledges the wake-up of a settled attempt, unless its outcome could not be
// reported: then the wake-up stays pending, to be reclaimed once the server requeues the task.
func (w *Worker) ackWake(a *attempt) {
	if a.wake == nil || a.abandoned.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(w.runCtx, requestTimeout)
	defer cancel()
	if err := a.wake.Ack(ctx); err != nil {
		a.log.WarnContext(ctx, "wake-up: acknowledge", "err", err)
	}
}

// internalClaimAnswer is /internal/task-claim's answer (the internal dialect).
type internalClaimAnswer struct {
	Status                   string    `json:"status"`
	Reason                   string    `json:"reason"`
	Attempt                  int       `json:"attempt"`
	LeaseToken               string    `json:"lease_token"`
	LeaseExpiresAt           time.Time `json:"lease_expires_at"`
	CapabilityToken          string    `json:"capability_token"`
	CapabilityTokenExpiresAt time.Time `json:"capability_token_expires_at"`
	HeartbeatIntervalSeconds float64   `json:"heartbeat_interval_seconds"`
	LeaseTTLSeconds          float64   `json:"lease_ttl_seconds"`
	Traceparent              string    `json:"traceparent"`
	Task                     struct {
		TaskID  string `json:"task_id"`
		TaskKey string `json:"task_key"`
		Job     struct {
			JobID   string `json:"job_id"`
			DAGName string `json:"dag_name"`
			Name    string `json:"name"`
			Version string `json:"pipeline_version"`
		} `json:"job"`
		Operator          string                     `json:"operator"`
		Inputs            json.RawMessage            `json:"inputs"`
		Outputs           []DatasetOutput            `json:"outputs"`
		Trigger           json.RawMessage            `json:"trigger"`
		Config            json.RawMessage            `json:"config"`
		DependencyOutputs map[string]json.RawMessage `json:"dependency_outputs"`
		TimeoutSeconds    *float64                   `json:"timeout_seconds"`
	} `json:"task"`
}

// claimAnswer is the same claim as the stream-worker dialect would have answered it, so that the
// attempt is run and reported the same way (stream-worker reports carry the stream: the queue).
func (a internalClaimAnswer) claimAnswer(taskID, queue string) claimAnswer {
	var c claimAnswer
	c.Claimed = true
	c.JobID = taskID
	c.AttemptID = a.Attempt
	c.LeaseToken = a.LeaseToken
	c.Stream = queue
	c.TaskID = a.Task.TaskID
	c.TaskKey = a.Task.TaskKey
	c.RunID = a.Task.Job.JobID
	c.TaskName = a.Task.Operator
	c.Payload = a.Task.Config
	c.DependencyOutputs = a.Task.DependencyOutputs
	c.TimeoutSeconds = a.Task.TimeoutSeconds
	c.LeaseTTLSeconds = a.LeaseTTLSeconds
	c.HeartbeatIntervalSeconds = a.HeartbeatIntervalSeconds
	c.LeaseExpiresAt = a.LeaseExpiresAt
	c.CapabilityToken = a.CapabilityToken
	c.CapabilityTokenExpiresAt = a.CapabilityTokenExpiresAt
	c.Traceparent = a.Traceparent
	if j := a.Task.Job; j.Version != "" {
		// A pipeline task: its inputs are datasets (other tasks' inputs are parents' outputs).
		c.Job = &PipelineJob{DAGName: j.DAGName, Name: j.Name, Version: j.Version}
		c.Operator, c.Outputs, c.Trigger = a.Task.Operator, a.Task.Outputs, a.Task.Trigger
		_ = json.Unmarshal(a.Task.Inputs, &c.Inputs)
	}
	return c
}
