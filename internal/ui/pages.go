package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
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
	Window  time.Duration
	Now     time.Time
}

// GET /ui/queues: per queue what is ready, backing off, running and dead, and recent workers.
func (u *UI) queues(r *http.Request, s *session) (*view, error) {
	st, err := u.d.QueueStats(r.Context(), s.key.Tenant, queueWindow)
	if err != nil {
		return nil, err
	}
	return &view{page: "queues", title: "Queues", nav: "queues", live: true,
		data: &queuesData{Queues: st.Queues, Workers: st.Workers, Window: queueWindow, Now: time.Now()}}, nil
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

// GET /ui/pipelines
func (u *UI) pipelines(r *http.Request, s *session) (*view, error) {
	ps, err := u.dp.ListPipelines(r.Context(), s.key.Tenant)
	if err != nil {
		return nil, err
	}
	return &view{page: "pipelines", title: "Pipelines", nav: "pipelines", data: ps}, nil
}

type pipelineData struct {
	View     *dataplane.PipelineView
	Jobs     []dataplane.PipelineJobView
	Versions []versionRow
	Document string
	// Build is the version a changed deploy is building beside the active one; nil when none is.
	Build *dataplane.BuildView
	// BuildFailed counts the build's tasks that failed for good: while there are any, the build
	// does not get ready.
	BuildFailed int
}

// versionRow is one version of a pipeline's version list, with its state as the list shows it.
type versionRow struct {
	*store.PipelineVersion
	State string // active, building, ready, deployed, rolled_back or abandoned
}

// versionRows gives each version its state: the active one is active, the one being built is
// building or ready (its build's state), the others keep the state the store records.
func versionRows(v *dataplane.PipelineView, versions []*store.PipelineVersion) []versionRow {
	rows := make([]versionRow, len(versions))
	for i, pv := range versions {
		state := pv.State
		switch {
		case pv.Version == v.Pipeline.ActiveVersion:
			state = "active"
		case v.Build != nil && pv.Version == v.Build.Version:
			state = v.Build.State
		case state == store.VersionDeployed:
			state = "deployed"
		}
		rows[i] = versionRow{PipelineVersion: pv, State: state}
	}
	return rows
}

// GET /ui/pipelines/{name}
func (u *UI) pipeline(r *http.Request, s *session) (*view, error) {
	name := r.PathValue("name")
	v, err := u.dp.GetPipeline(r.Context(), s.key.Tenant, name)
	if err != nil {
		return nil, err
	}
	versions, err := u.dp.PipelineVersions(r.Context(), s.key.Tenant, name)
	if err != nil {
		return nil, err
	}
	d := &pipelineData{View: v, Jobs: v.Jobs(), Versions: versionRows(v, versions), Document: string(v.Active.Document), Build: v.Build}
	if v.Build != nil {
		for _, j := range v.Build.Jobs {
			d.BuildFailed += j.Counts["failed"]
		}
	}
	return &view{page: "pipeline", title: "Pipeline " + name, nav: "pipelines", live: true, data: d}, nil
}

// POST /ui/pipelines/{name}/versions/{version}/activate: cuts over to the version a changed deploy
// built, once its build is ready.
func (u *UI) activate(r *http.Request, s *session) (string, string, error) {
	name, version := r.PathValue("name"), r.PathValue("version")
	to := "/ui/pipelines/" + url.PathEscape(name)
	res, _, err := u.dp.Activate(r.Context(), s.key.Tenant, name, version, false)
	if flash, ok := buildRefusal(err); ok {
		return to, flash, nil
	}
	if err != nil && res != nil {
		// The version is active; only canceling the replaced version's rebuilt tasks failed.
		u.log.ErrorContext(r.Context(), "ui: activate", "pipeline", name, "version", version, "err", err)
		return to, "activated-cancel-failed", nil
	}
	if err != nil {
		return "", "", err
	}
	return to, "activated", nil
}

// POST /ui/pipelines/{name}/versions/{version}/abandon: stops the build of the version.
func (u *UI) abandon(r *http.Request, s *session) (string, string, error) {
	name, version := r.PathValue("name"), r.PathValue("version")
	to := "/ui/pipelines/" + url.PathEscape(name)
	_, err := u.dp.Abandon(r.Context(), s.key.Tenant, name, version)
	if flash, ok := buildRefusal(err); ok {
		return to, flash, nil
	}
	if err != nil {
		return "", "", err
	}
	return to, "abandoned", nil
}

// buildRefusal is the message of the data plane's refusal to activate or abandon a build: the
// build is not ready, or the version is no longer being built (the page was stale).
func buildRefusal(err error) (string, bool) {
	var c *dispatch.ConflictError
	if !errors.As(err, &c) {
		return "", false
	}
	switch c.Code {
	case "pipeline_version_not_ready":
		return "not-ready", true
	case "pipeline_version_not_building":
		return "not-building", true
	}
	return "", false
}

// GET /ui/datasets
func (u *UI) datasets(r *http.Request, s *session) (*view, error) {
	ds, err := u.dp.ListDatasets(r.Context(), s.key.Tenant)
	if err != nil {
		return nil, err
	}
	return &view{page: "datasets", title: "Datasets", nav: "datasets", data: ds}, nil
}

// GET /ui/datasets/{name}: by name, or by uuid for an unpublished job output.
func (u *UI) dataset(r *http.Request, s *session) (*view, error) {
	v, err := u.dp.GetDataset(r.Context(), s.key.Tenant, r.PathValue("name"), 50)
	if err != nil {
		return nil, err
	}
	return &view{page: "dataset", title: "Dataset " + cmpStr(v.Dataset.Name, v.Dataset.UUID), nav: "datasets", data: v}, nil
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// prettyJSON indents a JSON document for display; "" for none.
func prettyJSON(b json.RawMessage) string {
	if len(b) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

func compactJSON(b json.RawMessage) string {
	if len(b) == 0 || string(b) == "null" || string(b) == "{}" {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// funcs are the templates' helpers.
func (u *UI) funcs() template.FuncMap {
	return template.FuncMap{
		// Times are rendered absolute, in a <time> element that the page's script turns into "12s
		// ago" (or, for ages, "12s") and keeps current: a live page's HTML then changes only when
		// its data does.
		"ago": func(t time.Time) template.HTML { return timeElement(t, "ago") },
		"age": func(t time.Time) template.HTML { return timeElement(t, "age") },
		"stamp": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
		},
		"ms": func(n int64) string { return since(time.Duration(n) * time.Millisecond) },
		"pct": func(a, b int) int {
			if b == 0 {
				return 0
			}
			return 100 * a / b
		},
		"perMinute": func(n int, window time.Duration) string {
			return strconv.FormatFloat(float64(n)/window.Minutes(), 'f', 1, 64)
		},
		"minutes": func(d time.Duration) string { return fmt.Sprintf("%g minutes", d.Minutes()) },
		"f1":      func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
		"short":   func(s string) string { return truncate(s, 13) },
		"plus":    func(a, b int) int { return a + b },
		"half":    func(n int) int { return n / 2 },
		"nodeW":   func() int { return nodeW },
		"nodeH":   func() int { return nodeH },
		"asset":   func(name string) string { return u.assets[name] },
		"jobURL":  func(id string) string { return "/ui/jobs/" + url.PathEscape(id) },
		"taskURL": func(jobID, taskID string) string {
			return "/ui/jobs/" + url.PathEscape(jobID) + "/tasks/" + url.PathEscape(taskID)
		},
		"pathEscape": url.PathEscape,
		"deref": func(p *int64) string {
			if p == nil {
				return ""
			}
			return strconv.FormatInt(*p, 10)
		},
	}
}

// timeElement is t as a <time> element of the given class; a dash for the zero time.
func timeElement(t time.Time, class string) template.HTML {
	if t.IsZero() {
		return "—"
	}
	u := t.UTC()
	return template.HTML(fmt.Sprintf(`<time class="%s" datetime="%s" title="%s">%s</time>`, class,
		u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05.000 UTC"), u.Format("Jan 2 15:04:05")))
}

// since says a duration the way a person reads it: 850ms, 12s, 4m 10s, 3h 5m, 2d 4h.
func since(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}
