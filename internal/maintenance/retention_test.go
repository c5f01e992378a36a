package maintenance_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/maintenance"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/metrics/metricstest"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// infoRecorder keeps the messages of the records logged at info and above.
type infoRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *infoRecorder) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (l *infoRecorder) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *infoRecorder) WithGroup(string) slog.Handler                 { return l }
func (l *infoRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *infoRecorder) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return count(l.msgs, msg)
}

// canceledJob submits a job of three tasks and cancels it: it finishes at once, at the clock's now.
func (e *env) canceledJob() *store.Job {
	e.t.Helper()
	job := e.submit(spec("a"), spec("b", "a"), spec("c", "a"))
	if _, err := e.d.CancelJob(e.ctx, tenant, job.ID, "done with it"); err != nil {
		e.t.Fatalf("cancel: %v", err)
	}
	if j := e.job(job.ID); j.Status != lifecycle.JobCanceled || j.FinishedAt.IsZero() {
		e.t.Fatalf("canceled job: status %s, finished %v", j.Status, j.FinishedAt)
	}
	return job
}

func (e *env) exists(job *store.Job) bool {
	e.t.Helper()
	_, err := e.st.JobGet(e.ctx, job.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func TestRetentionLoopDeletesExpiredJobsOnItsClock(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	logs := &infoRecorder{}
	e := newEnv(t, storetest.OpenSQLite(t), func(c *dispatch.Config) { c.Logger = slog.New(logs) })
	var old []*store.Job
	for range 5 {
		old = append(old, e.canceledJob())
	}
	e.clock.Advance(30 * time.Minute)
	later := e.canceledJob()
	running := e.submit(spec("a"))

	r, err := maintenance.NewRetention(e.maint(), maintenance.RetentionConfig{Retention: time.Hour, DeadLetterRetention: 2 * time.Hour,
		Every: time.Minute, Batch: 2, Pause: time.Second, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r.Start(ctx)
	defer r.Stop()
	// waitPass waits until the loop sleeps between passes or batches, and advances the clock by d.
	waitPass := func(d time.Duration) {
		t.Helper()
		if err := e.clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("the loop never slept: %v", err)
		}
		e.clock.Advance(d)
	}
	// Passes at +30m and +31m: nothing has expired.
	waitPass(time.Minute)
	waitPass(30 * time.Minute) // now +1h1m: the first five have expired, later has not
	// Jobs that finished at one instant go in id order, which is not their order in old.
	anyOld := func() bool { return slices.ContainsFunc(old, e.exists) }
	for i := 0; anyOld(); i++ {
		if i == 20 {
			t.Fatal("the old jobs were never deleted")
		}
		waitPass(time.Second) // the pause between batches
	}
	// The pass logs its line once its last batch, a short one, is counted: wait for it.
	for deadline := time.Now().Add(10 * time.Second); logs.count("retention deleted expired jobs") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the pass that deleted the old jobs never logged its line")
		}
		time.Sleep(time.Millisecond)
	}
	for _, j := range old {
		if e.exists(j) {
			t.Errorf("expired job %s is still there", j.ID)
		}
	}
	if !e.exists(later) || !e.exists(running) {
		t.Fatal("a job within its retention, or still processing, was deleted")
	}
	if got := metricstest.Sample(t, m.Registry(), "baton_retention_deleted_total", "table", "jobs"); got != 5 {
		t.Errorf("baton_retention_deleted_total{table=jobs} = %v, want 5", got)
	}
	if got := metricstest.Sample(t, m.Registry(), "baton_retention_deleted_total", "table", "tasks"); got != 15 {
		t.Errorf("baton_retention_deleted_total{table=tasks} = %v, want 15", got)
	}
	if got := logs.count("retention deleted expired jobs"); got != 1 {
		t.Errorf("logged %d retention lines, want 1 (one per pass that deleted something)", got)
	}

	e.clock.Advance(30 * time.Minute) // later has expired; the next pass takes it
	for i := 0; e.exists(later); i++ {
		if i == 20 {
			t.Fatal("the later job was never deleted")
		}
		waitPass(time.Minute)
	}
	if !e.exists(running) {
		t.Error("a processing job was deleted")
	}
}

func TestRetentionConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  maintenance.RetentionConfig
		ok   bool
	}{
		{"zero: off", maintenance.RetentionConfig{}, true},
		{"defaults", maintenance.RetentionConfig{Retention: maintenance.DefaultRetention, DeadLetterRetention: maintenance.DefaultDeadLetterRetention}, true},
		{"dead letters kept until resumed", maintenance.RetentionConfig{Retention: time.Hour}, true},
		{"negative", maintenance.RetentionConfig{Retention: -time.Hour}, false},
		{"negative dead-letter", maintenance.RetentionConfig{DeadLetterRetention: -time.Hour}, false},
		{"negative tenant", maintenance.RetentionConfig{Tenants: map[string]time.Duration{"a": -1}}, false},
		{"dead-letter below retention", maintenance.RetentionConfig{Retention: 2 * time.Hour, DeadLetterRetention: time.Hour}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestRetentionReplicasShareTheWork runs the deletion on several replicas of one PostgreSQL
// database at once: none waits for long, fails or deadlocks, and each expired job is deleted by
// exactly one of them.
func TestRetentionReplicasShareTheWork(t *testing.T) {
	t.Parallel()
	const replicas, expired = 4, 300
	stores := storetest.OpenPostgresReplicas(t, replicas)
	e := newEnv(t, stores[0])
	var jobs []*store.Job
	for range expired {
		jobs = append(jobs, e.canceledJob())
	}
	var kept []*store.Job
	for range 20 {
		kept = append(kept, e.submit(spec("a"), spec("b", "a")))
	}
	now := epoch.Add(2 * time.Hour)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total store.RetentionCounts
		errs  []error
	)
	for i := range replicas {
		r, err := maintenance.NewRetention(maintenance.Env{Store: stores[i], Clock: clockwork.NewFakeClockAt(now), Logger: quiet},
			maintenance.RetentionConfig{Retention: time.Hour, Batch: 10})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := r.DeleteBatch(t.Context())
				mu.Lock()
				total.Add(n)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				if n.Jobs == 0 {
					// Nothing this replica could take: done once no expired job is left.
					left, err := stores[i].JobList(t.Context(), store.ListJobsParams{Tenant: tenant, Status: lifecycle.JobCanceled, Limit: 1})
					if err != nil || len(left) == 0 {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("replicas failed: %v", errors.Join(errs...))
	}
	want := store.RetentionCounts{Jobs: expired, Tasks: 3 * expired, TaskDeps: 2 * expired}
	// Each canceled job has its Job Created, three Task Pending/Canceled events and Job Canceled:
	// count them on a job that is left alone.
	probe := e.canceledJob()
	evs, err := e.st.EventList(e.ctx, store.EventListParams{JobID: probe.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want.Events = len(evs) * expired
	if total != want {
		t.Errorf("deleted %+v in all, want %+v (each job exactly once)", total, want)
	}
	for _, j := range jobs {
		if e.exists(j) {
			t.Errorf("expired job %s is still there", j.ID)
		}
	}
	for _, j := range kept {
		if !e.exists(j) {
			t.Errorf("processing job %s was deleted", j.ID)
		}
		if _, tasks, err := e.d.GetJob(e.ctx, tenant, j.ID); err != nil || len(tasks) != 2 {
			t.Errorf("processing job %s: %d tasks, %v", j.ID, len(tasks), err)
		}
	}
}
