package api

import (
	"context"
	"net/http"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/sse"
)

// streamEvents sends a job's events after `after` as Server-Sent Events (id, event type, JSON
// data) as they are committed, and ends once the job has finished and everything is sent
// (sse.Follow), or when the server starts shutting down.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, jobID string, after int64) error {
	ctx, tenant := r.Context(), tenantOf(r)
	if _, _, err := s.d.GetJob(ctx, tenant, jobID); err != nil {
		return err
	}
	return sse.Follow(w, r, jobLog{d: s.d, tenant: tenant, jobID: jobID}, after, s.poll, s.drainCtx.Done())
}

// jobLog is a job's audit log as an event stream follows it.
type jobLog struct {
	d             *dispatch.Dispatcher
	tenant, jobID string
}

// Ended: the job has finished; the end event names it and its status.
func (l jobLog) Ended(ctx context.Context) (bool, any, error) {
	job, _, err := l.d.GetJob(ctx, l.tenant, l.jobID)
	if err != nil {
		return false, nil, err
	}
	return job.Status != lifecycle.JobProcessing, map[string]any{"jobId": job.ID, "status": job.Status}, nil
}

func (l jobLog) After(ctx context.Context, after int64, limit int) ([]sse.Entry, error) {
	events, err := l.d.JobEvents(ctx, l.tenant, l.jobID, after, limit)
	if err != nil {
		return nil, err
	}
	entries := make([]sse.Entry, len(events))
	for i, e := range events {
		entries[i] = sse.Entry{ID: e.ID, Event: e.Type, Data: eventView(e)}
	}
	return entries, nil
}
