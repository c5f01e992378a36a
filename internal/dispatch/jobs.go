package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store"
)

// CreateJobParams is a job submission.
type CreateJobParams struct {
	Tenant string
	Name   string
	// IdempotencyKey, when set, makes a repeated submission return the first job; RequestHash
	// (of the request body) tells a true repeat from a different request reusing the key.
	IdempotencyKey string
	RequestHash    string
	Tasks          []lifecycle.TaskSpec
	// Traceparent is the W3C trace context to keep with the job, "" for none: each of its tasks
	// hands it to the workers that claim it, so that their spans join the producer's trace. The
	// caller passes only a valid one.
	Traceparent string
}

// CreateJobResult is the created (or, on an idempotent repeat, the original) job.
type CreateJobResult struct {
	Job       *store.Job
	RootTasks []string // keys of the tasks with no parents
	Replayed  bool     // an earlier request with the same idempotency key created Job
}

// CreateJob validates a DAG and stores it; its root tasks become pending at once.
func (d *Dispatcher) CreateJob(ctx context.Context, p CreateJobParams) (_ *CreateJobResult, rerr error) {
	defer func() { d.count(metrics.Create, rerr) }()
	if p.IdempotencyKey != "" {
		if res, err := d.replay(ctx, p); res != nil || err != nil {
			return res, err
		}
	}
	v := lifecycle.ValidateDAG(p.Tasks, nil, d.cfg.MaxTasksPerJob)
	if len(v.Errors) > 0 {
		return nil, &ValidationError{Errors: v.Errors}
	}
	if msg := lifecycle.CheckName(p.Name); msg != "" {
		return nil, &InvalidError{Message: "job name " + msg}
	}
	var (
		job   *store.Job
		roots []string
		// Chosen once: if a try commits but its answer is lost with the connection, the next try
		// meets this id and knows the job was created.
		jobID = "job-" + uuid.NewString()
	)
	// A new job has no rows to lock in advance; only a concurrent request with the same
	// idempotency key waits, on the key.
	var locks store.LockSet
	if p.IdempotencyKey != "" {
		locks.Keys = []string{fmt.Sprintf("job:%d:%s:%s", len(p.Tenant), p.Tenant, p.IdempotencyKey)}
	}
	err := d.update(ctx, locks, func(tx store.Tx, c *changes) error {
		now := c.now
		job = &store.Job{
			ID:              jobID,
			Tenant:          p.Tenant,
			Name:            p.Name,
			Status:          lifecycle.JobProcessing,
			IdempotencyKey:  p.IdempotencyKey,
			RequestHash:     p.RequestHash,
			TotalTasks:      len(p.Tasks),
			UnfinishedTasks: len(p.Tasks),
			CreatedAt:       now,
			Traceparent:     p.Traceparent,
		}
		tasks, ids := d.newTasks(job.ID, p.Tasks, now)
		for _, t := range tasks {
			t.Traceparent = job.Traceparent
		}
		deps := edges(job.ID, p.Tasks, ids)
		roots = nil
		created := make([]map[string]any, len(p.Tasks))
		for i, t := range tasks {
			created[i] = map[string]any{"taskId": t.Key, "name": t.Name, "dependsOn": t.DependsOn, "input": t.Input}
			if len(t.DependsOn) == 0 {
				roots = append(roots, t.Key)
			}
		}
		c.event(job.ID, "", "", EventJobCreated, map[string]any{"jobId": job.ID, "tasks": created, "totalTasks": len(tasks)})
		for _, t := range tasks {
			if t.Status == lifecycle.Pending {
				c.event(job.ID, t.ID, t.Key, EventTaskPending, map[string]any{"requestId": t.Key, "jobId": job.ID, "name": t.Name, "dependsOn": t.DependsOn})
				c.wake(t.ID, t.Queue, t.Runtime, now)
			}
		}
		if err := tx.JobInsert(ctx, job); err != nil {
			return fmt.Errorf("job %s: %w", job.ID, err)
		}
		if err := tx.TaskInsertMany(ctx, tasks); err != nil {
			return fmt.Errorf("job %s: insert %d tasks: %w", job.ID, len(tasks), err)
		}
		if err := tx.DepInsertMany(ctx, deps); err != nil {
			return fmt.Errorf("job %s: insert the tasks' dependencies: %w", job.ID, err)
		}
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		if created, gerr := d.store.JobGet(ctx, jobID); gerr == nil {
			return &CreateJobResult{Job: created, RootTasks: roots}, nil
		}
	}
	if errors.Is(err, store.ErrConflict) && p.IdempotencyKey != "" {
		// A concurrent request with the same key won the race.
		if res, err := d.replay(ctx, p); res != nil || err != nil {
			return res, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create job: %w", err)
	}
	return &CreateJobResult{Job: job, RootTasks: roots}, nil
}

func (d *Dispatcher) replay(ctx context.Context, p CreateJobParams) (*CreateJobResult, error) {
	job, err := d.store.JobGetByIdempotencyKey(ctx, p.Tenant, p.IdempotencyKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up idempotency key: %w", err)
	}
	if job.RequestHash != p.RequestHash {
		return nil, ErrIdempotencyMismatch
	}
	var roots []string
	for _, t := range p.Tasks {
		if len(t.DependsOn) == 0 {
			roots = append(roots, t.Key)
		}
	}
	return &CreateJobResult{Job: job, RootTasks: roots, Replayed: true}, nil
}

// newTasks builds the rows of new tasks, all pending or waiting by their parent count; the caller
// adjusts those whose parents already ran. ids maps each new key to its task id.
func (d *Dispatcher) newTasks(jobID string, specs []lifecycle.TaskSpec, now time.Time) ([]*store.Task, map[string]string) {
	def := d.cfg.Defaults
	tasks := make([]*store.Task, len(specs))
	ids := make(map[string]string, len(specs))
	for i, s := range specs {
		id := uuid.Must(uuid.NewV7()).String()
		ids[s.Key] = id
		t := &store.Task{
			ID:                id,
			JobID:             jobID,
			Key:               s.Key,
			Name:              s.Name,
			Queue:             s.Queue,
			Priority:          s.Priority,
			Runtime:           s.Runtime,
			Input:             s.Input,
			DependsOn:         s.DependsOn,
			UnfinishedParents: len(s.DependsOn),
			Status:            lifecycle.Waiting,
			MaxAttempts:       optional(s.MaxAttempts, def.MaxAttempts),
			AvailableAt:       now,
			BackoffBase:       optionalMs(s.BackoffBaseMs, def.BackoffBase),
			BackoffMax:        optionalMs(s.BackoffMaxMs, def.BackoffMax),
			Timeout:           optionalSeconds(s.TimeoutSeconds, 0),
			HeartbeatTimeout:  optionalSeconds(s.HeartbeatTimeoutSeconds, def.HeartbeatTimeout),
			CancelGrace:       optionalSeconds(s.CancelGraceSeconds, def.CancelGrace),
			CreatedAt:         now,
		}
		if t.Queue == "" {
			t.Queue = t.Name
		}
		if t.Runtime == "" {
			t.Runtime = "pull"
		}
		if len(t.Input) == 0 {
			t.Input = json.RawMessage("{}")
		}
		if t.DependsOn == nil {
			t.DependsOn = []string{}
		}
		// A task-level base above the server-wide cap raises the cap with it.
		if s.BackoffMaxMs == nil && t.BackoffMax < t.BackoffBase {
			t.BackoffMax = t.BackoffBase
		}
		if len(s.DependsOn) == 0 {
			t.Status = lifecycle.Pending
			t.LastEventType, t.LastEventAt = EventTaskPending, now
		}
		tasks[i] = t
	}
	return tasks, ids
}

func edges(jobID string, specs []lifecycle.TaskSpec, ids map[string]string) []store.Dep {
	var deps []store.Dep
	for _, s := range specs {
		for _, parent := range s.DependsOn {
			deps = append(deps, store.Dep{JobID: jobID, ParentID: ids[parent], ChildID: ids[s.Key]})
		}
	}
	return deps
}

func optional(v *int, def int) int {
	if v == nil {
		return def
	}
	return *v
}

func optionalMs(v *int64, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	return time.Duration(*v) * time.Millisecond
}

func optionalSeconds(v *int, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	return time.Duration(*v) * time.Second
}

// AddTasksParams adds tasks to a running job.
type AddTasksParams struct {
	Tenant string
	JobID  string
	Tasks  []lifecycle.TaskSpec
}

// AddTasksResult answers AddTasks in the producer contract's terms.
type AddTasksResult struct {
	Job              *store.Job
	AddedTasks       []string
	ImmediatelyReady []string
	TotalTasksNow    int
}

// AddTasks adds tasks that may depend on the job's tasks and on each other. A new task whose
// parents all completed is pending at once; one with a failed, canceled or skipped parent is
// skipped at once (docs/lifecycle.md#dependents).
func (d *Dispatcher) AddTasks(ctx context.Context, p AddTasksParams) (_ *AddTasksResult, rerr error) {
	defer func() { d.count(metrics.AddTasks, rerr) }()
	var res *AddTasksResult
	// A transaction on a whole job runs alone, never in a group commit: it locks the job row
	// before its end, which a group, whose job rows come last, could not keep in order.
	err := d.updateAlone(ctx, store.LockSet{Jobs: []string{p.JobID}}, func(tx store.Tx, c *changes) error {
		job, err := d.lockJob(ctx, tx, p.Tenant, p.JobID)
		if err != nil {
			return fmt.Errorf("job %s: add tasks: %w", p.JobID, err)
		}
		if job.Status != lifecycle.JobProcessing || !job.CancelRequestedAt.IsZero() {
			return ErrJobFinished
		}
		existing, err := tx.TaskListByJob(ctx, job.ID)
		if err != nil {
			return fmt.Errorf("job %s: add tasks: %w", job.ID, err)
		}
		keys := make([]string, len(existing))
		state := make(map[string]lifecycle.TaskStatus, len(existing)+len(p.Tasks))
		ids := make(map[string]string, len(existing)+len(p.Tasks))
		for i, t := range existing {
			keys[i] = t.Key
			state[t.Key] = t.Status
			ids[t.Key] = t.ID
		}
		v := lifecycle.ValidateDAG(p.Tasks, keys, d.cfg.MaxTasksPerJob)
		if len(v.Errors) > 0 {
			return &ValidationError{Errors: v.Errors}
		}
		now := c.now
		tasks, newIDs := d.newTasks(job.ID, p.Tasks, now)
		for _, t := range tasks {
			t.Traceparent = job.Traceparent // added tasks join the job's trace
		}
		byKey := make(map[string]*store.Task, len(tasks))
		for _, t := range tasks {
			byKey[t.Key] = t
			ids[t.Key] = newIDs[t.Key]
		}
		// Parents first, so that a new parent's state is known before its children's.
		for _, key := range v.Order {
			t := byKey[key]
			t.Status, t.UnfinishedParents = lifecycle.Waiting, 0
			dead := false
			for _, parent := range t.DependsOn {
				s := state[parent]
				dead = dead || s.Unsuccessful()
				if s != lifecycle.Completed {
					t.UnfinishedParents++
				}
			}
			switch {
			case dead:
				t.Status, t.FinishedAt = lifecycle.Skipped, now
				t.LastEventType, t.LastEventAt = EventTaskSkipped, now
			case t.UnfinishedParents == 0:
				t.Status = lifecycle.Pending
				t.LastEventType, t.LastEventAt = EventTaskPending, now
			default:
				t.LastEventType, t.LastEventAt = "", time.Time{}
			}
			state[key] = t.Status
		}
		res = &AddTasksResult{Job: job, AddedTasks: make([]string, len(tasks)), ImmediatelyReady: []string{}}
		added := make([]map[string]any, len(tasks))
		skipped := 0
		for i, t := range tasks {
			res.AddedTasks[i] = t.Key
			added[i] = map[string]any{"taskId": t.Key, "name": t.Name, "dependsOn": t.DependsOn, "input": t.Input}
		}
		c.event(job.ID, "", "", EventJobTasksAdded, map[string]any{"jobId": job.ID, "newTasks": added,
			"previousTotalTasks": job.TotalTasks, "totalTasksNow": job.TotalTasks + len(tasks)})
		for _, t := range tasks {
			switch t.Status {
			case lifecycle.Pending:
				res.ImmediatelyReady = append(res.ImmediatelyReady, t.Key)
				c.event(job.ID, t.ID, t.Key, EventTaskPending, map[string]any{"requestId": t.Key, "jobId": job.ID, "name": t.Name, "dependsOn": t.DependsOn})
				c.wake(t.ID, t.Queue, t.Runtime, now)
			case lifecycle.Skipped:
				skipped++
				c.event(job.ID, t.ID, t.Key, EventTaskSkipped, map[string]any{"reason": "a parent failed, was canceled or was skipped"})
			}
		}
		if err := tx.TaskInsertMany(ctx, tasks); err != nil {
			return fmt.Errorf("job %s: insert %d added tasks: %w", job.ID, len(tasks), err)
		}
		if err := tx.DepInsertMany(ctx, edges(job.ID, p.Tasks, ids)); err != nil {
			return fmt.Errorf("job %s: insert the added tasks' dependencies: %w", job.ID, err)
		}
		job.TotalTasks += len(tasks)
		job.UnfinishedTasks += len(tasks) - skipped
		if err := tx.JobUpdate(ctx, job); err != nil {
			return fmt.Errorf("job %s: count the added tasks: %w", job.ID, err)
		}
		res.TotalTasksNow = job.TotalTasks
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// lockJob loads (and, on PostgreSQL, locks) a job, hiding other tenants' jobs. An empty tenant
// is the trusted, internal view of all jobs.
func (d *Dispatcher) lockJob(ctx context.Context, tx store.Tx, tenant, id string) (*store.Job, error) {
	job, err := tx.JobGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && tenant != "" && job.Tenant != tenant) {
		return nil, ErrJobNotFound
	}
	return job, err
}

// CancelJob cancels a job (docs/lifecycle.md#cancellation): waiting and pending tasks are canceled
// at once, running ones are asked to stop and get their cancel grace. Canceling a job already
// being canceled changes nothing.
func (d *Dispatcher) CancelJob(ctx context.Context, tenant, id, reason string) (_ *store.Job, rerr error) {
	defer func() { d.count(metrics.Cancel, rerr) }()
	if reason == "" {
		reason = "user_requested"
	}
	var job *store.Job
	// A transaction on a whole job runs alone, never in a group commit: it locks the job row
	// before its end, which a group, whose job rows come last, could not keep in order.
	err := d.updateAlone(ctx, store.LockSet{Jobs: []string{id}}, func(tx store.Tx, c *changes) error {
		var err error
		job, err = d.lockJob(ctx, tx, tenant, id)
		if err != nil {
			return fmt.Errorf("job %s: cancel: %w", id, err)
		}
		if job.Status != lifecycle.JobProcessing {
			return ErrJobFinished
		}
		if !job.CancelRequestedAt.IsZero() {
			return nil
		}
		now := c.now
		scope := store.CancelParams{JobID: id, Now: now, Reason: reason}
		canceled, err := tx.TaskCancelIdle(ctx, scope)
		if err != nil {
			return err
		}
		for _, r := range canceled {
			c.event(id, r.ID, r.Key, EventTaskCanceled, map[string]any{"reason": reason})
		}
		if _, err := tx.TaskRequestCancel(ctx, scope); err != nil {
			return err
		}
		job.CancelRequestedAt = now
		job, err = d.settleJob(ctx, tx, c, job, id, len(canceled), "")
		if err != nil {
			return err
		}
		return nil
	})
	return job, err
}

// settle ends a transaction (a group commit's, or a transition's alone) with what its transitions
// left for the end, in the lock order every transaction keeps (see store.LockSet). First the
// dependents: the children of the tasks that completed and the descendants of those that failed or
// were canceled, locked together in id order, then released (a child whose parents all completed
// becomes pending) or skipped (docs/lifecycle.md#dependents). Then the jobs, a job at a time in id
// order: each job row is written once per transaction, however many of its tasks the transaction
// finished. Dependents are waiting or pending tasks, which transitions seldom name (a claim or a
// cancel of one task by id): their locks come after those of the named tasks; job rows come last.
func (d *Dispatcher) settle(ctx context.Context, tx store.Tx, c *changes) error {
	// Released together, but per traceparent, so that each child's Task Pending carries the
	// trace of the completion that released it (usually there is none: one statement).
	byTrace := map[string][]string{}
	for _, r := range c.released {
		byTrace[r.traceparent] = append(byTrace[r.traceparent], r.id)
	}
	// Only one release and nothing to skip: TaskReleaseChildrenMany locks the children itself, in
	// the same order, and a flat job (no children) costs one statement instead of two.
	if len(c.ended) > 0 || len(byTrace) > 1 {
		var locks store.LockSet
		for _, r := range c.released {
			locks.Releasing = append(locks.Releasing, r.id)
		}
		for _, e := range c.ended {
			locks.Ending = append(locks.Ending, e.id)
		}
		if err := tx.RowsLock(ctx, locks); err != nil {
			return fmt.Errorf("the dependents of %d completed and %d ended tasks: %w", len(c.released), len(c.ended), err)
		}
	}
	for _, tp := range slices.Sorted(maps.Keys(byTrace)) {
		refs, err := tx.TaskReleaseChildrenMany(ctx, byTrace[tp], c.now)
		if err != nil {
			return fmt.Errorf("%d completed tasks: %w", len(byTrace[tp]), err)
		}
		c.withTraceparent(tp, func() {
			for _, r := range refs {
				if r.Status == lifecycle.Pending {
					c.event(r.JobID, r.ID, r.Key, EventTaskPending, map[string]any{"requestId": r.Key, "jobId": r.JobID, "name": r.Name})
					c.wake(r.ID, r.Queue, r.Runtime, c.now)
				}
			}
		})
	}
	for _, e := range c.ended {
		skipped, err := tx.TaskSkipDescendants(ctx, e.id, c.now)
		if err != nil {
			return fmt.Errorf("job %s: %w", e.jobID, err)
		}
		c.withTraceparent(e.traceparent, func() {
			for _, r := range skipped {
				c.event(e.jobID, r.ID, r.Key, EventTaskSkipped, map[string]any{"reason": fmt.Sprintf("parent %s %s", e.key, e.status), "cause": e.key})
			}
			if len(skipped) > 0 {
				c.finish(e.jobID, len(skipped), "")
			}
		})
	}
	c.released, c.ended = nil, nil
	ids := slices.Sorted(maps.Keys(c.finished))
	if len(ids) > 1 {
		if err := d.settleJobs(ctx, tx, c, ids); err != nil {
			return err
		}
		c.finished = nil
		return nil
	}
	for _, id := range ids {
		p := c.finished[id]
		var err error
		c.withTraceparent(p.traceparent, func() { _, err = d.settleJob(ctx, tx, c, nil, id, p.finished, p.failedKey) })
		if err != nil {
			return err
		}
	}
	c.finished = nil
	return nil
}

// settleJobs is settleJob for the jobs of ids (sorted) in c.finished, in a few statements
// whatever their number: one reads the jobs and locks them in id order (as settleJob one job after
// another would), one reads which of those left with no task unfinished have a task that did not
// complete, and one writes the jobs. A transaction finishes tasks of many jobs when they are
// pipeline jobs of one task each, routed from dataset events.
func (d *Dispatcher) settleJobs(ctx context.Context, tx store.Tx, c *changes, ids []string) error {
	jobs, err := tx.JobLockMany(ctx, ids)
	if err != nil {
		return fmt.Errorf("settle %d jobs: %w", len(ids), err)
	}
	if len(jobs) != len(ids) {
		return fmt.Errorf("settle %d jobs: %d of them: %w", len(ids), len(ids)-len(jobs), store.ErrNotFound)
	}
	var ending []string
	for _, job := range jobs {
		job.UnfinishedTasks -= c.finished[job.ID].finished
		if job.UnfinishedTasks == 0 && job.Status == lifecycle.JobProcessing {
			ending = append(ending, job.ID)
		}
	}
	incomplete := map[string]bool{}
	if len(ending) > 0 {
		notCompleted, err := tx.TaskJobsNotCompleted(ctx, ending)
		if err != nil {
			return fmt.Errorf("settle %d jobs: %w", len(ids), err)
		}
		for _, id := range notCompleted {
			incomplete[id] = true
		}
	}
	for _, job := range jobs {
		p := c.finished[job.ID]
		c.withTraceparent(p.traceparent, func() {
			// Never fails: whether every task completed is known already.
			_, _ = settled(c, job, p.failedKey, func() (bool, error) { return !incomplete[job.ID], nil })
		})
	}
	if err := tx.JobUpdateMany(ctx, jobs); err != nil {
		return fmt.Errorf("settle %d jobs: %w", len(ids), err)
	}
	return nil
}

// settleJob records that `finished` more tasks of a job reached a terminal state. The caller
// passes the job if it holds it locked already (its counters are then adjusted here), or nil and
// its id. failedKey names a task that just failed, for Job Failure Detected: emitted once per run
// of a job, and not while it is being canceled. When no task is left unfinished the job
// finishes (docs/lifecycle.md#job-status-and-resume).
func (d *Dispatcher) settleJob(ctx context.Context, tx store.Tx, c *changes, job *store.Job, jobID string, finished int, failedKey string) (*store.Job, error) {
	dirty := true // job holds changes not yet written
	if job == nil {
		var err error
		if job, err = tx.JobAddUnfinished(ctx, jobID, -finished); err != nil {
			return nil, fmt.Errorf("settle job %s: %w", jobID, err)
		}
		dirty = false // JobAddUnfinished wrote the count
	} else {
		job.UnfinishedTasks -= finished
	}
	changed, err := settled(c, job, failedKey, func() (bool, error) {
		tasks, err := tx.TaskListByJob(ctx, job.ID)
		if err != nil {
			return false, err
		}
		allCompleted := true
		for _, t := range tasks {
			allCompleted = allCompleted && t.Status == lifecycle.Completed
		}
		return allCompleted, nil
	})
	if err != nil {
		return nil, fmt.Errorf("settle job %s: %w", job.ID, err)
	}
	if !dirty && !changed {
		return job, nil
	}
	if err := tx.JobUpdate(ctx, job); err != nil {
		return job, fmt.Errorf("settle job %s: %w", job.ID, err)
	}
	return job, nil
}

// settled applies to job, whose counters are up to date, what its tasks' ends mean: Job Failure
// Detected for failedKey, a task that failed for good (once per run of a job, and not while it is
// being canceled), and the job's end when no task is left unfinished (allCompleted tells whether
// every task completed; it is asked only then). It reports whether it changed the job.
func settled(c *changes, job *store.Job, failedKey string, allCompleted func() (bool, error)) (bool, error) {
	changed := false
	if failedKey != "" && job.FailureDetectedAt.IsZero() && job.CancelRequestedAt.IsZero() {
		changed = true
		job.FailureDetectedAt = c.now
		c.event(job.ID, "", "", EventJobFailure, map[string]any{"jobId": job.ID, "taskId": failedKey})
	}
	if job.UnfinishedTasks == 0 && job.Status == lifecycle.JobProcessing {
		all, err := allCompleted()
		if err != nil {
			return false, err
		}
		changed = true
		job.Status = lifecycle.FinishedJobStatus(!job.CancelRequestedAt.IsZero(), all)
		job.FinishedAt = c.now
		switch job.Status {
		case lifecycle.JobCompleted:
			c.event(job.ID, "", "", EventJobCompleted, map[string]any{"jobId": job.ID, "status": job.Status, "totalTasks": job.TotalTasks})
		case lifecycle.JobCanceled:
			c.event(job.ID, "", "", EventJobCanceled, map[string]any{"jobId": job.ID, "status": job.Status, "totalTasks": job.TotalTasks})
		}
	}
	return changed, nil
}

// ResumeResult lists what a resume put back to work.
type ResumeResult struct {
	Job     *store.Job
	Resumed []string // keys of the tasks resumed
}

// ResumeJob resumes a job (docs/lifecycle.md#job-status-and-resume): a finished job's failed,
// canceled and skipped tasks go back to pending or waiting with a fresh retry budget; attempt
// numbers keep increasing.
func (d *Dispatcher) ResumeJob(ctx context.Context, tenant, id string) (_ *ResumeResult, rerr error) {
	defer func() { d.count(metrics.Resume, rerr) }()
	var res *ResumeResult
	// A transaction on a whole job runs alone, never in a group commit: it locks the job row
	// before its end, which a group, whose job rows come last, could not keep in order.
	err := d.updateAlone(ctx, store.LockSet{Jobs: []string{id}}, func(tx store.Tx, c *changes) error {
		job, err := d.lockJob(ctx, tx, tenant, id)
		if err != nil {
			return fmt.Errorf("job %s: resume: %w", id, err)
		}
		if job.Status == lifecycle.JobProcessing {
			return ErrJobNotFinished
		}
		now := c.now
		refs, err := tx.TaskResume(ctx, id, now)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			return ErrNothingToResume
		}
		res = &ResumeResult{Job: job, Resumed: make([]string, len(refs))}
		for i, r := range refs {
			res.Resumed[i] = r.Key
		}
		c.event(id, "", "", EventJobResumed, map[string]any{"jobId": id, "tasks": res.Resumed})
		for _, r := range refs {
			if r.Status == lifecycle.Pending {
				c.event(id, r.ID, r.Key, EventTaskPending, map[string]any{"requestId": r.Key, "jobId": id, "name": r.Name, "resumed": true})
				c.wake(r.ID, r.Queue, r.Runtime, now)
			}
		}
		job.Status = lifecycle.JobProcessing
		job.UnfinishedTasks += len(refs)
		job.FinishedAt, job.CancelRequestedAt, job.FailureDetectedAt = time.Time{}, time.Time{}, time.Time{}
		if err := tx.JobUpdate(ctx, job); err != nil {
			return fmt.Errorf("job %s: resume: %w", id, err)
		}
		return nil
	})
	return res, err
}
