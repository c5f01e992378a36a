package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// jobsPage is the size of a page of the jobs list.
const jobsPage = 50

// jobStatuses are the job statuses in the order the filter shows them.
var jobStatuses = []lifecycle.JobStatus{lifecycle.JobProcessing, lifecycle.JobCompleted, lifecycle.JobPartialFailure, lifecycle.JobCanceled}

// taskStatuses are the task statuses in the order a job's progress shows them.
var taskStatuses = []lifecycle.TaskStatus{lifecycle.Waiting, lifecycle.Pending, lifecycle.Running, lifecycle.Completed,
	lifecycle.Failed, lifecycle.Canceled, lifecycle.Skipped}

type statusCount struct {
	Status string
	Count  int
	Href   string
	Active bool
}

type jobRow struct {
	Job  *store.Job
	Done int
}

type jobsData struct {
	Counts      []statusCount
	Status, Q   string
	Jobs        []jobRow
	Next, First string
	NotFound    string
}

// GET /ui/jobs: newest first, with counts by status, a status filter, search by id and pages.
func (u *UI) jobs(r *http.Request, s *session) (*view, error) {
	q := r.URL.Query()
	status, search := q.Get("status"), strings.TrimSpace(q.Get("q"))
	if status != "" && !validJobStatus(status) {
		return nil, fmt.Errorf("%w: status", errNotFound)
	}
	d := &jobsData{Status: status, Q: search}
	if search != "" {
		if _, err := u.d.Job(r.Context(), s.key.Tenant, search); err == nil {
			return &view{redirect: "/ui/jobs/" + url.PathEscape(search)}, nil
		} else if !errors.Is(err, dispatch.ErrJobNotFound) {
			return nil, err
		}
		d.NotFound = search
	}
	counts, err := u.d.JobCounts(r.Context(), s.key.Tenant)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, st := range jobStatuses {
		total += counts[st]
	}
	d.Counts = append(d.Counts, statusCount{Status: "all", Count: total, Href: "/ui/jobs", Active: status == ""})
	for _, st := range jobStatuses {
		d.Counts = append(d.Counts, statusCount{Status: string(st), Count: counts[st], Href: "/ui/jobs?status=" + string(st), Active: status == string(st)})
	}
	jobs, next, err := u.d.ListJobs(r.Context(), dispatch.ListJobsParams{Tenant: s.key.Tenant,
		Status: lifecycle.JobStatus(status), Cursor: q.Get("cursor"), Limit: jobsPage})
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		d.Jobs = append(d.Jobs, jobRow{Job: j, Done: j.TotalTasks - j.UnfinishedTasks})
	}
	base := url.Values{}
	if status != "" {
		base.Set("status", status)
	}
	if next != "" {
		nq := url.Values{"cursor": {next}}
		if status != "" {
			nq.Set("status", status)
		}
		d.Next = "/ui/jobs?" + nq.Encode()
	}
	if q.Get("cursor") != "" {
		d.First = "/ui/jobs?" + base.Encode()
	}
	return &view{page: "jobs", title: "Jobs", nav: "jobs", data: d, live: true}, nil
}

func validJobStatus(s string) bool {
	for _, st := range jobStatuses {
		if string(st) == s {
			return true
		}
	}
	return false
}

type jobData struct {
	Job         *store.Job
	Tasks       []*store.TaskSummary
	Counts      []statusCount
	Done        int
	DAG         *dagLayout
	CanCancel   bool
	CanResume   bool
	Cancelling  bool
	Pipeline    string
	TaskHref    map[string]string
	LiveURL     string
	StatusLabel string
}

// GET /ui/jobs/{id}: the DAG, progress, the tasks, and cancel and resume.
func (u *UI) job(r *http.Request, s *session) (*view, error) {
	job, tasks, err := u.d.GetJob(r.Context(), s.key.Tenant, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	d := &jobData{Job: job, Tasks: tasks, Done: job.TotalTasks - job.UnfinishedTasks, TaskHref: map[string]string{},
		LiveURL: "/ui/jobs/" + url.PathEscape(job.ID) + "/live"}
	counts := map[lifecycle.TaskStatus]int{}
	dt := make([]dagTask, len(tasks))
	for i, t := range tasks {
		counts[t.Status]++
		dt[i] = dagTask{ID: t.ID, Key: t.Key, Status: string(t.Status), DependsOn: t.DependsOn}
		d.TaskHref[t.ID] = "/ui/jobs/" + url.PathEscape(job.ID) + "/tasks/" + url.PathEscape(t.ID)
	}
	for _, st := range taskStatuses {
		d.Counts = append(d.Counts, statusCount{Status: string(st), Count: counts[st]})
	}
	d.DAG = layoutDAG(dt)
	d.Cancelling = !job.CancelRequestedAt.IsZero()
	d.CanCancel = job.Status == lifecycle.JobProcessing && !d.Cancelling
	d.CanResume = job.Status == lifecycle.JobPartialFailure || job.Status == lifecycle.JobCanceled
	return &view{page: "job", title: "Job " + job.ID, nav: "jobs", data: d}, nil
}

type attemptRow struct {
	*store.Attempt
	Bar        timelineBar
	DurationMS int64
}

// timelineBar places an attempt on the task's timeline, in percent of its width.
type timelineBar struct {
	X, W    float64
	Running bool
}

type taskData struct {
	Task         *store.Task
	JobHref      string
	Attempts     []attemptRow
	Input        string
	Output       string
	Outputs      []namedJSON
	Events       []eventRow
	TimelineFrom time.Time
	TimelineTo   time.Time
	BackingOff   bool // pending, not claimable before AvailableAt
}

type namedJSON struct {
	Name, JSON string
	Large      bool
}

type eventRow struct {
	*store.Event
	Data string
}

// GET /ui/jobs/{id}/tasks/{task}: a task in full, by its global id or its key in the job.
func (u *UI) task(r *http.Request, s *session) (*view, error) {
	ctx, tenant, jobID := r.Context(), s.key.Tenant, r.PathValue("id")
	id, err := u.d.TaskInJob(ctx, tenant, jobID, r.PathValue("task"))
	if err != nil {
		return nil, err
	}
	t, err := u.d.GetTask(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	events, err := u.d.TaskEvents(ctx, tenant, jobID, id, 0, 500)
	if err != nil {
		return nil, err
	}
	d := &taskData{Task: t.Task, JobHref: "/ui/jobs/" + url.PathEscape(jobID), Input: prettyJSON(t.Task.Input),
		Output: prettyJSON(t.Task.Output)}
	for k, v := range t.DependencyOutputs {
		js := prettyJSON(v)
		d.Outputs = append(d.Outputs, namedJSON{Name: k, JSON: js, Large: len(js) > 2000})
	}
	slices.SortFunc(d.Outputs, func(a, b namedJSON) int { return strings.Compare(a.Name, b.Name) })
	now := time.Now()
	d.BackingOff = t.Task.Status == lifecycle.Pending && t.Task.AvailableAt.After(now)
	if len(t.Attempts) > 0 {
		d.TimelineFrom, d.TimelineTo = t.Attempts[0].StartedAt, t.Attempts[0].StartedAt
		for _, a := range t.Attempts {
			d.TimelineTo = later(d.TimelineTo, a.FinishedAt, a.StartedAt)
			if a.FinishedAt.IsZero() {
				d.TimelineTo = later(d.TimelineTo, now)
			}
		}
	}
	span := max(d.TimelineTo.Sub(d.TimelineFrom), time.Millisecond)
	for _, a := range t.Attempts {
		end := a.FinishedAt
		if end.IsZero() {
			end = now
		}
		x := 100 * float64(a.StartedAt.Sub(d.TimelineFrom)) / float64(span)
		w := max(100*float64(end.Sub(a.StartedAt))/float64(span), 0.5)
		d.Attempts = append(d.Attempts, attemptRow{Attempt: a, Bar: timelineBar{X: x, W: min(w, 100-x), Running: a.FinishedAt.IsZero()},
			DurationMS: end.Sub(a.StartedAt).Milliseconds()})
	}
	for _, e := range events {
		d.Events = append(d.Events, eventRow{Event: e, Data: compactJSON(e.Data)})
	}
	return &view{page: "task", title: "Task " + t.Task.Key, nav: "jobs", data: d}, nil
}

func later(t time.Time, others ...time.Time) time.Time {
	for _, o := range others {
		if o.After(t) {
			t = o
		}
	}
	return t
}

// queueWindow is how far back the queues page counts completions and lists workers.
const queueWindow = 5 * time.Minute

type queuesData struct {
	Queues  []*store.QueueStat
	Workers []*store.WorkerSeen
	// Isolation is the isolation level each worker said its untrusted children get, by id.
	Isolation map[string]string
	Window    time.Duration
	Now       time.Time
}

// GET /ui/queues: per queue what is ready, backing off, running and dead, and recent workers.
func (u *UI) queues(r *http.Request, s *session) (*view, error) {
	st, err := u.d.QueueStats(r.Context(), s.key.Tenant, queueWindow)
	if err != nil {
		return nil, err
	}
	d := &queuesData{Queues: st.Queues, Workers: st.Workers, Isolation: map[string]string{}, Window: queueWindow, Now: time.Now()}
	if u.workers != nil && len(st.Workers) > 0 {
		ids := make([]string, 0, len(st.Workers))
		for _, w := range st.Workers {
			ids = append(ids, w.WorkerID)
		}
		info, err := u.workers.WorkerInfoList(r.Context(), ids)
		if err != nil {
			return nil, err
		}
		for _, w := range info {
			d.Isolation[w.WorkerID] = w.Isolation
		}
	}
	return &view{page: "queues", title: "Queues", nav: "queues", live: true, data: d}, nil
}

type deadLettersData struct {
	Tasks       []*store.Task
	Next, First string
}

// deadLettersPage is the size of a page of dead letters.
const deadLettersPage = 50

// GET /ui/dead-letters: failed tasks with their last error, newest first, each with a resume.
func (u *UI) deadLetters(r *http.Request, s *session) (*view, error) {
	before := int64(0)
	if c := r.URL.Query().Get("before"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n <= 0 {
			return nil, dispatch.ErrInvalidCursor
		}
		before = n
	}
	tasks, err := u.d.DeadLetters(r.Context(), s.key.Tenant, before, deadLettersPage+1)
	if err != nil {
		return nil, err
	}
	d := &deadLettersData{Tasks: tasks}
	if len(tasks) > deadLettersPage {
		d.Tasks = tasks[:deadLettersPage]
		d.Next = "/ui/dead-letters?before=" + strconv.FormatInt(d.Tasks[deadLettersPage-1].Seq, 10)
	}
	if before != 0 {
		d.First = "/ui/dead-letters"
	}
	return &view{page: "deadletters", title: "Dead letters", nav: "dead-letters", data: d, live: true}, nil
}

// POST /ui/jobs/{id}/cancel
func (u *UI) cancel(r *http.Request, s *session) (string, string, error) {
	id := r.PathValue("id")
	to := "/ui/jobs/" + url.PathEscape(id)
	_, err := u.d.CancelJob(r.Context(), s.key.Tenant, id, "canceled from the dashboard")
	switch {
	case errors.Is(err, dispatch.ErrJobFinished):
		return to, "finished", nil
	case err != nil:
		return "", "", err
	}
	return to, "canceled", nil
}

// POST /ui/jobs/{id}/resume; the form's "back" field may send the browser back to the dead letters.
func (u *UI) resume(r *http.Request, s *session) (string, string, error) {
	id := r.PathValue("id")
	to := "/ui/jobs/" + url.PathEscape(id)
	if r.PostFormValue("back") == "dead-letters" {
		to = "/ui/dead-letters"
	}
	_, err := u.d.ResumeJob(r.Context(), s.key.Tenant, id)
	switch {
	case errors.Is(err, dispatch.ErrJobNotFinished):
		return to, "not-finished", nil
	case errors.Is(err, dispatch.ErrNothingToResume):
		return to, "nothing", nil
	case err != nil:
		return "", "", err
	}
	return to, "resumed", nil
}
