package worker

import (
	"context"
	"encoding/json"

	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/wire"
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
		case <-w.idle.stop:
			return
		}
		a, woken, err := w.wakeClaim(ctx, queues, c)
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
			} else if !woken && w.idle.empty() {
				return
			}
			continue
		}
		b.reset()
		w.start(a)
	}
}

// wakeClaim waits for one wake-up and claims its task; it returns nil when nothing was claimed,
// and whether a wake-up came. A wake-up whose claim failed is left unacknowledged, for the
// transport to deliver again.
func (w *Worker) wakeClaim(ctx context.Context, queues []string, c transport.Consumer) (*attempt, bool, error) {
	ds, err := c.Receive(ctx, queues, 1, w.cfg.pollWait)
	if err != nil || len(ds) == 0 {
		return nil, false, err
	}
	d := ds[0]
	var ans internalClaimAnswer
	body := map[string]any{"task_id": d.TaskID(), "worker_id": w.cfg.workerID}
	if w.cfg.isolation != "" {
		body["isolation"] = w.cfg.isolation
	}
	if err := w.post(ctx, requestTimeout, pathTaskClaim, body, &ans); err != nil {
		return nil, true, err
	}
	if ans.Status != "Claimed" {
		w.log.DebugContext(ctx, "wake-up for a task not claimable", "task_id", d.TaskID(), "reason", ans.Reason)
		if err := d.Ack(ctx); err != nil {
			w.log.WarnContext(ctx, "wake-up: acknowledge", "task_id", d.TaskID(), "err", err)
		}
		return nil, true, nil
	}
	queue := d.Queue()
	a := w.newAttempt(ctx, ans.claimAnswer(d.TaskID(), queue))
	a.wake = d
	return a, true, nil
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

// internalClaimAnswer is /internal/task-claim's answer (the internal dialect): a claim, or a
// refusal with its reason.
type internalClaimAnswer struct {
	wire.InternalClaim
	Reason string `json:"reason"` // why the task was not claimed
}

// claimAnswer is the same claim as the stream-worker dialect would have answered it, so that the
// attempt is run and reported the same way (stream-worker reports carry the stream: the queue).
func (a internalClaimAnswer) claimAnswer(taskID, queue string) claimAnswer {
	var c claimAnswer
	task := a.Task
	if task == nil {
		task = &wire.Task{}
	}
	c.Claimed = true
	c.JobID = taskID
	c.AttemptID = a.Attempt
	c.LeaseToken = a.LeaseToken
	c.Stream = queue
	c.TaskID = task.TaskID
	c.TaskKey = task.TaskKey
	c.RunID = task.Job.JobID
	c.TaskName = task.Operator
	c.Payload = task.Config
	c.DependencyOutputs = task.DependencyOutputs
	if task.TimeoutSeconds != nil {
		secs := float64(*task.TimeoutSeconds)
		c.TimeoutSeconds = &secs
	}
	c.LeaseTTLSeconds = float64(a.LeaseTTLSeconds)
	c.HeartbeatIntervalSeconds = float64(a.HeartbeatIntervalSeconds)
	c.LeaseExpiresAt.Time = a.LeaseExpiresAt.Time
	c.CapabilityToken = a.CapabilityToken
	c.CapabilityTokenExpiresAt.Time = a.CapabilityTokenExpiresAt.Time
	c.Traceparent = a.Traceparent
	if j := task.Job; j.Version != "" {
		// A pipeline task: its inputs are datasets (other tasks' inputs are parents' outputs).
		dag := ""
		if j.DAGName != nil {
			dag = *j.DAGName
		}
		c.Job = &PipelineJob{DAGName: dag, Name: j.Name, Version: j.Version, IdleTimeoutSeconds: j.IdleTimeoutSeconds,
			UpdateStrategy: j.UpdateStrategy, UniqueKey: j.UniqueKey}
		c.Operator, c.Outputs, c.Trigger = task.Operator, task.Outputs, task.Trigger
		var inputs []DatasetInput
		_ = json.Unmarshal(task.Inputs, &inputs)
		c.Inputs = &inputs
	}
	return c
}
