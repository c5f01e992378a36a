package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/baton-dev/baton/client"
)

// verify waits for every accepted job to finish (or for stuckAfter to pass after the last fault
// with no task finishing), then checks the
// invariants through the public API and the execution log, and fills in rep.
func (r *run) verify(ctx context.Context, lastHeal time.Time, rep *Report) error {
	c := r.clientOf(r.servers[0])
	jobs := r.load.jobs()
	rep.Jobs = len(jobs)
	final, err := r.awaitJobs(ctx, c, jobs, lastHeal.Add(stuckAfter))
	if err != nil {
		return err
	}
	execs, err := readLog(r.execLog)
	if err != nil {
		return err
	}
	byTask := map[[2]string][]execution{} // job id, task key → its executions
	for _, e := range execs {
		k := [2]string{e.Job, e.Task}
		byTask[k] = append(byTask[k], e)
	}
	var finishedAt int64
	firstAfter := int64(math.MaxInt64) // the first completion after lastHeal
	for _, j := range jobs {
		rep.Tasks += len(j.tasks)
		got := final[j.id]
		if got == nil {
			rep.Lost += len(j.tasks)
			rep.problem("job %s: the API no longer knows it", j.id)
			continue
		}
		if got.CompletedAt != nil {
			finishedAt = max(finishedAt, *got.CompletedAt)
		}
		completions, err := r.completions(ctx, c, j.id)
		if err != nil {
			return err
		}
		committed := map[string]Output{} // task key → its committed output
		for _, t := range got.Tasks {
			var o Output
			if t.Status == client.TaskCompleted {
				if err := json.Unmarshal(t.Output, &o); err != nil {
					rep.Wrong++
					rep.problem("job %s task %s: output %s is not a chaos output", j.id, t.TaskID, t.Output)
				}
				committed[t.TaskID] = o
			}
		}
		for key, parents := range j.tasks {
			t := taskOf(got, key)
			switch {
			case t == nil:
				rep.Lost++
				rep.problem("job %s task %s: the API no longer knows it", j.id, key)
				continue
			case t.Status == client.TaskFailed || t.Status == client.TaskSkipped || t.Status == client.TaskCanceled:
				rep.Lost++
				rep.problem("job %s task %s: %s (%+v)", j.id, key, t.Status, t.Error)
				continue
			case t.Status != client.TaskCompleted:
				rep.Stuck++
				rep.problem("job %s task %s: still %s, and no task finished for %s", j.id, key, t.Status, stuckAfter)
				continue
			}
			if t.LastEventAt != nil && lastHeal.Before(time.UnixMilli(*t.LastEventAt)) {
				rep.Backlog++
				firstAfter = min(firstAfter, *t.LastEventAt)
			}
			ex := byTask[[2]string{j.id, key}]
			rep.Executions += len(ex)
			rep.DuplicateExecutions += max(len(ex)-1, 0)
			if n := len(completions[key]); n != 1 {
				if n > 1 {
					rep.DuplicateCompletions++
				} else {
					rep.Wrong++
				}
				rep.problem("job %s task %s: %d Task Completed events, want 1", j.id, key, n)
			}
			out := committed[key]
			if !r.fromCommittedAttempt(rep, j.id, key, t, out, completions[key], ex) {
				continue
			}
			// Every execution of the task was handed its parents' committed outputs, and only those.
			for _, e := range ex {
				if len(e.Parents) != len(parents) {
					rep.Wrong++
					rep.problem("job %s task %s attempt %d: handed %d parent outputs, want %d", j.id, key, e.Attempt, len(e.Parents), len(parents))
					continue
				}
				for _, p := range parents {
					if e.Parents[p] != committed[p].Nonce {
						rep.Wrong++
						rep.problem("job %s task %s attempt %d: handed output %q of parent %s, whose committed output is %q",
							j.id, key, e.Attempt, e.Parents[p], p, committed[p].Nonce)
					}
				}
			}
		}
	}
	if r.pipeline != nil {
		select { // its last tasks may have been in flight at the crash-all
		case <-ctx.Done():
			return ctx.Err()
		case <-r.pipelineDone:
		}
		if execs, err = readLog(r.execLog); err != nil { // with what ran since
			return err
		}
		if err := r.verifyPipeline(ctx, c, r.pipeline, execs, rep); err != nil {
			return err
		}
	}
	if finishedAt > 0 {
		rep.Recovery = max(time.UnixMilli(finishedAt).Sub(lastHeal), 0)
	}
	if rep.Backlog > 0 {
		rep.Resumed = time.UnixMilli(firstAfter).Sub(lastHeal)
	}
	return nil
}

// fromCommittedAttempt checks that a completed task's output is the one its committed attempt
// produced: the attempt the task and its Task Completed event name, and an execution of that
// attempt with that output's nonce.
func (r *run) fromCommittedAttempt(rep *Report, jobID, key string, t *client.JobTask, out Output, completed []int, ex []execution) bool {
	if out.Task != key || out.Attempt != t.Attempt || (len(completed) > 0 && completed[0] != t.Attempt) {
		rep.Wrong++
		rep.problem("job %s task %s: output of %s attempt %d, but the task's attempt is %d and its completion names %v",
			jobID, key, out.Task, out.Attempt, t.Attempt, completed)
		return false
	}
	for _, e := range ex {
		if e.Attempt == out.Attempt && e.Nonce == out.Nonce {
			return true
		}
	}
	rep.Wrong++
	rep.problem("job %s task %s: output %+v was produced by no recorded execution of attempt %d", jobID, key, out, out.Attempt)
	return false
}

func taskOf(j *client.Job, key string) *client.JobTask {
	for i := range j.Tasks {
		if j.Tasks[i].TaskID == key {
			return &j.Tasks[i]
		}
	}
	return nil
}

// awaitJobs polls the jobs until every one has finished or the deadline passes, and returns
// each job as last seen; a job the API answers 404 for is left out.
func (r *run) awaitJobs(ctx context.Context, c *client.Client, jobs []*job, deadline time.Time) (map[string]*client.Job, error) {
	final := map[string]*client.Job{}
	pending := jobs
	finished := -1 // tasks of pending jobs in a final state at the last look; more means progress
	for {
		var still []*job
		now := 0
		for _, j := range pending {
			got, err := c.GetJob(ctx, j.id)
			switch {
			case client.IsNotFound(err):
				continue
			case err != nil:
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("chaos: GET /jobs/%s: %w\n%s", j.id, err, r.outputs())
				}
				still = append(still, j) // the server may still be recovering
				continue
			}
			final[j.id] = got
			if !got.Finished() {
				still = append(still, j)
			}
			for _, st := range []string{client.TaskCompleted, client.TaskFailed, client.TaskCanceled, client.TaskSkipped} {
				now += got.Progress[st]
			}
		}
		// A machine loaded by other work makes the backlog drain slower, not stop: while tasks
		// keep finishing, the round waits; stuck means no task finished for stuckAfter.
		if finished >= 0 && now > finished {
			deadline = time.Now().Add(stuckAfter)
		}
		finished = now
		if len(still) == 0 || time.Now().After(deadline) {
			return final, nil
		}
		pending = still
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// completions reads a job's whole audit log and returns, by task key, the attempt each of its
// Task Completed events names.
func (r *run) completions(ctx context.Context, c *client.Client, jobID string) (map[string][]int, error) {
	out := map[string][]int{}
	var after int64
	for {
		events, next, err := c.Events(ctx, jobID, after)
		if err != nil {
			return nil, fmt.Errorf("chaos: the events of job %s: %w", jobID, err)
		}
		for _, e := range events {
			if e.Type != "Task Completed" {
				continue
			}
			var data struct {
				Attempt int `json:"attempt"`
			}
			if err := json.Unmarshal(e.Data, &data); err != nil {
				return nil, fmt.Errorf("chaos: job %s event %d: %w", jobID, e.ID, err)
			}
			out[e.TaskID] = append(out[e.TaskID], data.Attempt)
		}
		if len(events) == 0 || next == after {
			return out, nil
		}
		after = next
	}
}
