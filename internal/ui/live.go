package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// keepAlive is how often an idle stream sends a comment, so that proxies keep it open.
const keepAlive = 15 * time.Second

// sse is an open Server-Sent Events answer.
type sse struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	lastWrite time.Time
}

// startSSE answers 200 with an event stream. The stream outlives the listener's write timeout:
// each write moves the deadline instead, so a browser that stops reading is still cut off.
func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	s := &sse{w: w, rc: http.NewResponseController(w)}
	s.rc.SetWriteDeadline(time.Now().Add(time.Minute))
	w.WriteHeader(http.StatusOK)
	s.rc.Flush()
	s.lastWrite = time.Now()
	return s
}

// send writes one event whose data is v in JSON.
func (s *sse) send(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.rc.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	s.lastWrite = time.Now()
	return s.rc.Flush()
}

// idle keeps the stream open when nothing was sent for a while.
func (s *sse) idle() error {
	if time.Since(s.lastWrite) < keepAlive {
		return nil
	}
	s.rc.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := fmt.Fprint(s.w, ": keep-alive\n\n"); err != nil {
		return err
	}
	s.lastWrite = time.Now()
	return s.rc.Flush()
}

// wait sleeps one poll; false when the stream must end (the browser left, the server stops).
func (u *UI) wait(r *http.Request, t *time.Ticker) bool {
	select {
	case <-r.Context().Done():
		return false
	case <-u.done:
		return false
	case <-t.C:
		return true
	}
}

// streamMain keeps a live list page current: it renders the page's main part every poll and
// sends it (event "main", the HTML as a JSON string) whenever it changed.
func (u *UI) streamMain(w http.ResponseWriter, r *http.Request, s *session, fn func(*http.Request, *session) (*view, error)) {
	stream := startSSE(w)
	ticker := time.NewTicker(u.poll)
	defer ticker.Stop()
	var last []byte
	for {
		v, err := fn(r, s)
		if err != nil {
			return // the stream is open: an error page can no longer be sent
		}
		var buf bytes.Buffer
		d := pageData{Title: v.title, Nav: v.nav, Live: true, Data: v.data, Assets: u.assets, Tenant: s.key.Tenant, CSRF: s.csrf}
		if err := u.pages[v.page].ExecuteTemplate(&buf, "main", d); err != nil {
			u.log.ErrorContext(r.Context(), "ui: render", "page", v.page, "err", err)
			return
		}
		if !bytes.Equal(buf.Bytes(), last) {
			if stream.send("main", buf.String()) != nil {
				return
			}
			last = buf.Bytes()
		} else if stream.idle() != nil {
			return
		}
		if !u.wait(r, ticker) {
			return
		}
	}
}

// jobState is an update of the job page: the job's progress and the tasks whose status changed.
type jobState struct {
	Status     lifecycle.JobStatus `json:"status"`
	Done       int                 `json:"done"`
	Total      int                 `json:"total"`
	Cancelling bool                `json:"cancelling"`
	CanResume  bool                `json:"canResume"`
	Tasks      map[string]string   `json:"tasks"`  // task id → status
	Counts     map[string]int      `json:"counts"` // status → tasks
}

// resync is how often the job stream re-reads the tasks even without a new event: on PostgreSQL
// an event can commit after one with a higher id was read.
const resync = 5 * time.Second

// GET /ui/jobs/{id}/live: the job page's stream. It follows the job's audit events and, when
// there are new ones, sends the tasks whose status changed (event "state"); it ends (event "end")
// once the job has finished and the last state is sent.
func (u *UI) jobLive(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, tenant, id := r.Context(), s.key.Tenant, r.PathValue("id")
	if _, err := u.d.Job(ctx, tenant, id); err != nil {
		u.fail(w, r, s, err)
		return
	}
	stream := startSSE(w)
	ticker := time.NewTicker(min(u.poll, 500*time.Millisecond))
	defer ticker.Stop()
	sent := map[string]string{}
	var lastJob string // the job-level part of the last state sent
	var lastEvent int64
	var lastRead time.Time
	first := true
	for {
		events, err := u.d.JobEvents(ctx, tenant, id, lastEvent, 1000)
		if err != nil {
			return
		}
		if len(events) > 0 {
			lastEvent = events[len(events)-1].ID
		}
		if first || len(events) > 0 || time.Since(lastRead) >= resync {
			job, tasks, err := u.d.GetJob(ctx, tenant, id)
			if err != nil {
				return
			}
			lastRead = time.Now()
			st := jobState{Status: job.Status, Done: job.TotalTasks - job.UnfinishedTasks, Total: job.TotalTasks,
				Cancelling: !job.CancelRequestedAt.IsZero(), CanResume: job.Status == lifecycle.JobPartialFailure || job.Status == lifecycle.JobCanceled,
				Tasks: map[string]string{}, Counts: map[string]int{}}
			for _, t := range tasks {
				st.Counts[string(t.Status)]++
				if sent[t.ID] != string(t.Status) {
					st.Tasks[t.ID] = string(t.Status)
					sent[t.ID] = string(t.Status)
				}
			}
			jobPart := fmt.Sprint(st.Status, st.Done, st.Cancelling)
			if first || len(st.Tasks) > 0 || jobPart != lastJob {
				lastJob = jobPart
				if stream.send("state", st) != nil {
					return
				}
			}
			first = false
			if job.Status != lifecycle.JobProcessing {
				stream.send("end", st)
				return
			}
		}
		if stream.idle() != nil || !u.wait(r, ticker) {
			return
		}
	}
}
