package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// Sources starts the tasks of the source jobs of active pipeline versions that start by
// themselves: a cron job gets one task per tick of its schedule, an always_on job one task at a
// time (a new one when the last one completed or failed for good; a task whose lease expired is
// retried as any task, which keeps its task id as the source's run id). Every replica runs
// Sources; a tick or a replacement is keyed, so two replicas start it once.
type Sources struct {
	dp     *Plane
	mu     sync.Mutex
	next   map[string]time.Time // cron job → its next tick
	scheds map[string]pipeline.Schedule
	*service.Periodic
}

// NewSources returns a stopped Sources over dp.
func (dp *Plane) NewSources() *Sources {
	s := &Sources{dp: dp, next: map[string]time.Time{}, scheds: map[string]pipeline.Schedule{}}
	s.Periodic = dp.every("pipeline sources", time.Second, func(ctx context.Context) error {
		_, err := s.RunOnce(ctx)
		return err
	})
	return s
}

// RunOnce starts what is due now and returns how many tasks it created.
func (s *Sources) RunOnce(ctx context.Context) (int, error) {
	ps, err := s.dp.store.PipelineListActive(ctx)
	if err != nil {
		return 0, err
	}
	now := s.dp.now()
	created := 0
	var errs []error
	for _, p := range ps {
		spec, err := s.dp.specs.Get(ctx, s.dp.store, p.Tenant, p.Name, p.ActiveVersion)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, js := range spec.Jobs {
			var n int
			switch js.SourceKind {
			case pipeline.SourceCron:
				n, err = s.cron(ctx, spec, js, now)
			case pipeline.SourceAlwaysOn:
				n, err = s.alwaysOn(ctx, spec, js, p.BuildingVersion)
			}
			created += n
			if err != nil {
				errs = append(errs, fmt.Errorf("pipeline %s job %s: %w", spec.Name, js.Name, err))
			}
		}
	}
	return created, errors.Join(errs...)
}

// cron starts the task of the latest tick at or before now that this process has not started
// yet. A tick that passed while no replica ran is not made up for.
func (s *Sources) cron(ctx context.Context, spec *specs.Pipeline, js *specs.Job, now time.Time) (int, error) {
	key := spec.Tenant + "\x00" + spec.Name + "\x00" + spec.Version + "\x00" + js.Name
	s.mu.Lock()
	sched, ok := s.scheds[key]
	if !ok {
		var err error
		if sched, err = pipeline.ParseSchedule(js.Schedule); err != nil {
			s.mu.Unlock()
			return 0, err
		}
		s.scheds[key] = sched
	}
	next, seen := s.next[key]
	if !seen {
		next = sched.Next(now.Add(-time.Millisecond)) // a tick at this very moment counts
		s.next[key] = next
	}
	s.mu.Unlock()
	if next.IsZero() || next.After(now) {
		return 0, nil
	}
	tick := next
	for n := sched.Next(tick); !n.IsZero() && !n.After(now); n = sched.Next(n) {
		tick = n // the latest tick that is due
	}
	trigger, _ := json.Marshal(map[string]any{"kind": pipeline.SourceCron, "schedule": js.Schedule, "scheduled_at": tick.UTC().Format(time.RFC3339)})
	n, err := s.dp.startSource(ctx, spec, js, "cron:"+strconv.FormatInt(tick.Unix(), 10), trigger, nil)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.next[key] = sched.Next(tick)
	s.mu.Unlock()
	return n, nil
}

// alwaysOn starts a task of js unless one is waiting, pending or running. The key numbers the
// run: replicas that see the same jobs start one task between them. The number is the count of
// the job's tasks so far, or one more than the latest run's if that is more: retention deletes
// old runs, which lowers the count, but keeps the latest job of a pipeline job, so a number
// never comes back while its run is kept.
func (s *Sources) alwaysOn(ctx context.Context, spec *specs.Pipeline, js *specs.Job, building string) (int, error) {
	job := store.PipelineJobKey{Tenant: spec.Tenant, Pipeline: spec.Name, Job: js.Name}
	total, live, err := s.dp.store.PipelineJobTasks(ctx, job)
	if err != nil {
		return 0, fmt.Errorf("count its runs: %w", err)
	}
	if building != "" && live > 0 {
		// The run a build started of the job (Builds) runs beside the active version's runs.
		counts, err := s.dp.store.PipelineVersionTaskCounts(ctx, store.PipelineVersionKey{Tenant: spec.Tenant, Pipeline: spec.Name, Version: building})
		if err != nil {
			return 0, fmt.Errorf("count its build's runs: %w", err)
		}
		for _, c := range counts {
			if c.Job == js.Name {
				total -= c.Count
				if !c.Status.Terminal() {
					live -= c.Count
				}
			}
		}
	}
	if live > 0 {
		return 0, nil
	}
	run := total
	latest, err := s.dp.store.PipelineJobLatest(ctx, job)
	switch {
	case err == nil:
		prefix := sourceKey(spec, js, alwaysOnKey)
		if n, perr := strconv.Atoi(strings.TrimPrefix(latest.IdempotencyKey, prefix)); perr == nil && strings.HasPrefix(latest.IdempotencyKey, prefix) {
			run = max(run, n+1)
		}
	case !errors.Is(err, store.ErrNotFound):
		return 0, fmt.Errorf("its latest run: %w", err)
	}
	trigger, _ := json.Marshal(map[string]any{"kind": pipeline.SourceAlwaysOn, "run": run + 1})
	return s.dp.startSource(ctx, spec, js, alwaysOnKey+strconv.Itoa(run), trigger, nil)
}

// alwaysOnKey starts the key of an always_on job's run.
const alwaysOnKey = "always_on:"

// sourceKey is the idempotency key of the run of source job js keyed by key.
func sourceKey(spec *specs.Pipeline, js *specs.Job, key string) string {
	return "pipeline:" + spec.Name + ":" + js.Name + ":" + key
}

// startSource creates a task of source job js, keyed by key (once per key), and returns how many
// it created (0 or 1). pins, when set, are the dataset versions its route names instead of the
// current ones (a build's run: see specs.Job.route).
func (dp *Plane) startSource(ctx context.Context, spec *specs.Pipeline, js *specs.Job, key string, trigger json.RawMessage, pins map[string]string) (int, error) {
	var n int
	err := dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		known := specs.NewKnown()
		if err := known.Load(ctx, tx, spec.DatasetUUIDs()); err != nil {
			return fmt.Errorf("run %s: load the datasets of version %s: %w", key, spec.Version, err)
		}
		job, task := dp.pipelineTask(spec, js, known, -1, nil, trigger, pins, c.Now(), sourceKey(spec, js, key))
		created, err := c.InsertJobsIfAbsent(ctx, tx, []*store.Job{job}, map[string]*store.Task{job.ID: task})
		if err != nil {
			return fmt.Errorf("run %s: %w", key, err)
		}
		n = len(created)
		return nil
	})
	return n, err
}

// RunSourceParams asks for a task of a manual or webhook source job.
type RunSourceParams struct {
	Tenant, Pipeline, Job string
	// WebhookPath, when set, names the job by its webhook path instead of Job.
	WebhookPath string
	// Key makes the request idempotent: a repeat with the same key starts no second task. Empty:
	// every request starts a task.
	Key     string
	Trigger map[string]any // what the task sees as its trigger, besides kind
}

// RunSourceResult names the task a run started.
type RunSourceResult struct {
	JobID, TaskID string
	Pipeline, Job string
	Created       bool // false: a request with the same key started it before
}

// RunSource starts a task of a manual source job (POST /pipelines/{name}/jobs/{job}/run) or of
// the webhook source job whose path is p.WebhookPath, in the pipelines' active versions.
func (dp *Plane) RunSource(ctx context.Context, p RunSourceParams) (*RunSourceResult, error) {
	spec, js, err := dp.findSource(ctx, p)
	if err != nil {
		return nil, err
	}
	kind := pipeline.SourceManual
	if p.WebhookPath != "" {
		kind = pipeline.SourceWebhook
	}
	trigger := map[string]any{"kind": kind}
	for k, v := range p.Trigger {
		trigger[k] = v
	}
	raw, err := json.Marshal(trigger)
	if err != nil {
		return nil, &dispatch.InvalidError{Message: "the trigger is not JSON: " + err.Error()}
	}
	key := cmp.Or(p.Key, uuid.NewString())
	idem := "pipeline:" + spec.Name + ":" + js.Name + ":" + kind + ":" + key
	n, err := dp.startSource(ctx, spec, js, kind+":"+key, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s job %s: %w", spec.Name, js.Name, err)
	}
	job, err := dp.store.JobGetByIdempotencyKey(ctx, p.Tenant, idem)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s job %s: the job of run %s:%s: %w", spec.Name, js.Name, kind, key, err)
	}
	tasks, err := dp.store.TaskListByJob(ctx, job.ID)
	if err != nil {
		return nil, fmt.Errorf("the task of job %s: %w", job.ID, err)
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("job %s has no task", job.ID)
	}
	return &RunSourceResult{JobID: job.ID, TaskID: tasks[0].ID, Pipeline: spec.Name, Job: js.Name, Created: n == 1}, nil
}

// findSource finds the job a RunSource names.
func (dp *Plane) findSource(ctx context.Context, p RunSourceParams) (*specs.Pipeline, *specs.Job, error) {
	var ps []*store.Pipeline
	if p.WebhookPath == "" {
		one, err := dp.store.PipelineGet(ctx, p.Tenant, p.Pipeline)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, ErrPipelineNotFound
		}
		if err != nil {
			return nil, nil, fmt.Errorf("pipeline %s: %w", p.Pipeline, err)
		}
		ps = []*store.Pipeline{one}
	} else {
		var err error
		if ps, err = dp.store.PipelineList(ctx, p.Tenant); err != nil {
			return nil, nil, err
		}
	}
	for _, pl := range ps {
		spec, err := dp.specs.Get(ctx, dp.store, p.Tenant, pl.Name, pl.ActiveVersion)
		if err != nil {
			return nil, nil, err
		}
		for _, js := range spec.Jobs {
			switch {
			case p.WebhookPath != "" && js.SourceKind == pipeline.SourceWebhook && js.WebhookPath == p.WebhookPath:
				return spec, js, nil
			case p.WebhookPath == "" && js.Name == p.Job:
				if js.SourceKind != pipeline.SourceManual {
					return nil, nil, &dispatch.InvalidError{Message: fmt.Sprintf("job %q of pipeline %q is not a manual source (activation %s, source %q): only manual sources run on request",
						js.Name, spec.Name, js.Activation, js.SourceKind)}
				}
				return spec, js, nil
			}
		}
	}
	if p.WebhookPath != "" {
		return nil, nil, ErrWebhookNotFound
	}
	return nil, nil, ErrPipelineJobNotFound
}

// ErrWebhookNotFound: no active pipeline of the tenant has a webhook source at that path.
var ErrWebhookNotFound = errors.New("no webhook source at that path")

// ErrPipelineJobNotFound: the pipeline's active version has no job of that name.
var ErrPipelineJobNotFound = errors.New("pipeline job not found")
