package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/request"
)

// settleWindow is how long after delivering an event the stream keeps re-reading from before it.
// On PostgreSQL event ids come from a sequence, so an event can commit after one with a higher id
// is already visible; re-reading a short window, and skipping ids already sent, catches it.
const settleWindow = 5 * time.Second

// keepAlive is how often an idle stream sends a comment so that proxies keep it open.
const keepAlive = 15 * time.Second

// streamEvents sends a job's events after `after` as Server-Sent Events (id, event type, JSON
// data) as they are committed, and ends once the job has finished and everything is sent.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, jobID string, after int64) error {
	ctx, tenant := r.Context(), tenantOf(r)
	if _, _, err := s.d.GetJob(ctx, tenant, jobID); err != nil {
		return err
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return request.Errorf(http.StatusNotAcceptable, "this connection cannot stream events")
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	// The stream lasts until the job ends, past the listener's write timeout: each write gets
	// request.AnswerWindow instead (a keep-alive at least every 15 s extends it), so that a client
	// that stops reading is still cut off.
	request.HoldOpen(w, 0)
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	type delivered struct {
		id int64
		at time.Time
	}
	var recent []delivered // ids sent within the settle window, oldest first
	sent := map[int64]bool{}
	floor := after // every event with id <= floor was sent (or precedes the stream)
	lastWrite := time.Now()
	ticker := time.NewTicker(s.poll)
	defer ticker.Stop()
	for {
		job, _, err := s.d.GetJob(ctx, tenant, jobID)
		if err != nil {
			return nil // the stream is open; a 404 can no longer be sent
		}
		finished := job.Status != lifecycle.JobProcessing
		request.HoldOpen(w, 0)
		for {
			events, err := s.d.JobEvents(ctx, tenant, jobID, floor, 1000)
			if err != nil {
				return nil
			}
			n := 0
			for _, e := range events {
				if sent[e.ID] {
					continue
				}
				data, _ := json.Marshal(eventView(e))
				if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data); err != nil {
					return nil
				}
				sent[e.ID] = true
				recent = append(recent, delivered{e.ID, time.Now()})
				n++
			}
			if n > 0 {
				flusher.Flush()
				lastWrite = time.Now()
			}
			if len(events) < 1000 {
				break
			}
			floor = events[len(events)-1].ID
		}
		// Advance the floor past ids delivered longer ago than the settle window.
		cutoff := time.Now().Add(-settleWindow)
		for len(recent) > 0 && recent[0].at.Before(cutoff) {
			if recent[0].id > floor {
				floor = recent[0].id
			}
			delete(sent, recent[0].id)
			recent = recent[1:]
		}
		if finished {
			end, _ := json.Marshal(map[string]any{"jobId": job.ID, "status": job.Status})
			fmt.Fprintf(w, "event: end\ndata: %s\n\n", end)
			flusher.Flush()
			return nil
		}
		if time.Since(lastWrite) >= keepAlive {
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
			lastWrite = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.drainCtx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
