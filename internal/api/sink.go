package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/api/codec"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// The Buffer Queue's endpoints. On the internal listener (mTLS), the trusted sink claims messages,
// extends its claim of each while it loads it, then commits or fails each. On the producer
// listener, a tenant reads its buffered datasets' rows and dead-lettered batches, and puts a dead
// batch back on the queue.

// POST /internal/sink/claim {"max": n, "visibility_seconds": s, "wait_seconds": w, "id": id}: all
// optional. It waits up to wait_seconds (at most 30) for a message when none is ready.
func (s *Server) sinkClaim(w http.ResponseWriter, r *http.Request) (any, error) {
	f, err := readWorker(r)
	if err != nil {
		return nil, err
	}
	p := bufferqueue.ClaimParams{Max: deref(f.Int("max")), ID: deref(f.Int64("id")),
		Visibility: time.Duration(deref(f.Int("visibility_seconds"))) * time.Second,
		Wait:       time.Duration(min(deref(f.Int("wait_seconds")), 30)) * time.Second}
	if f.Err != nil {
		return nil, f.Err
	}
	request.HoldOpen(w, p.Wait)
	// A wait ends early, with no message, when the server starts shutting down.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	msgs, err := s.dp.Buffers().Claim(ctx, p)
	if err != nil && !(r.Context().Err() == nil && s.drainCtx.Err() != nil) {
		return nil, err
	}
	return wire.SinkClaim{Messages: bufferqueue.WireMessages(msgs)}, nil
}

func (s *Server) sinkCommit(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	var c wire.SinkCommit
	if err := codec.DecodeInto(body, &c); err != nil {
		return nil, err
	}
	if c.ID <= 0 {
		return nil, codec.InvalidRequest("id is required")
	}
	if err := s.dp.Buffers().Commit(r.Context(), c.ID, bufferqueue.Loaded{Cursor: c.Cursor, Inserted: c.Inserted, Facets: c.Facets}); err != nil {
		return nil, err
	}
	return map[string]any{"ok": true}, nil
}

func (s *Server) sinkFail(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	var f wire.SinkFail
	if err := codec.DecodeInto(body, &f); err != nil {
		return nil, err
	}
	if f.ID <= 0 || f.ReceiveCount <= 0 {
		return nil, codec.InvalidRequest("id and receive_count are required")
	}
	dead, err := s.dp.Buffers().Fail(r.Context(), f.ID, f.ReceiveCount, f.Error)
	if err != nil {
		return nil, err
	}
	return wire.SinkFailed{OK: true, Dead: dead}, nil
}

func (s *Server) sinkExtend(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := request.ReadBody(r)
	if err != nil {
		return nil, err
	}
	var e wire.SinkExtend
	if err := codec.DecodeInto(body, &e); err != nil {
		return nil, err
	}
	if e.ID <= 0 || e.ReceiveCount <= 0 {
		return nil, codec.InvalidRequest("id and receive_count are required")
	}
	if e.VisibilitySeconds < 1 || e.VisibilitySeconds > 3600 {
		return nil, codec.InvalidRequest("visibility_seconds must be an integer from 1 to 3600")
	}
	until, err := s.dp.Buffers().Extend(r.Context(), e.ID, e.ReceiveCount, time.Duration(e.VisibilitySeconds)*time.Second)
	if err != nil {
		return nil, err
	}
	return map[string]any{"ok": true, "visible_until": until.UTC()}, nil
}

// GET /datasets/{name}/rows?limit=&after=&cursor=&where=: a page of a buffered dataset's rows,
// where being a JSON object with the rules of an input's where.
func (s *Server) datasetRows(w http.ResponseWriter, r *http.Request) (any, error) {
	q, _, err := codec.RowQuery(r)
	if err != nil {
		return nil, err
	}
	page, err := s.dp.Reads().DatasetRows(r.Context(), tenantOf(r), r.PathValue("name"), q)
	if err != nil {
		return nil, err
	}
	return rowPage(page), nil
}

// GET /v1/task/datasets/{dataset}/rows and GET /internal/task-datasets/{dataset}/rows, with the
// capability token: a page of the rows of a buffered dataset the token's attempt reads or writes
// (dataplane.TaskRows), in the shape of GET /datasets/{name}/rows.
func (s *Server) taskRows(w http.ResponseWriter, r *http.Request) (any, error) {
	c := capability.Claims(r)
	q, cursorSet, err := codec.RowQuery(r)
	if err != nil {
		return nil, err
	}
	tq := reads.TaskRowQuery{Where: q.Where, After: q.After, Limit: q.Limit}
	if cursorSet {
		tq.Cursor = &q.Cursor
	}
	f := dispatch.Fence{TaskID: c.TaskID, Attempt: c.Attempt, LeaseToken: c.LeaseToken}
	page, err := s.dp.Reads().TaskRows(r.Context(), f, r.PathValue("dataset"), tq)
	if err != nil {
		return nil, err
	}
	return rowPage(page), nil
}

// rowPage is the answer of both rows endpoints.
func rowPage(page reads.RowPage) map[string]any {
	out := map[string]any{"rows": orEmpty(page.Rows), "next_after": nil}
	if page.Next > 0 {
		out["next_after"] = page.Next
	}
	return out
}

// GET /datasets/{name}/dead-letters?after=&limit=
func (s *Server) batchDeadLetters(w http.ResponseWriter, r *http.Request) (any, error) {
	qs := r.URL.Query()
	var after int64
	limit := 100
	var err error
	if v := qs.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, request.Errorf(http.StatusBadRequest, "after must be an integer")
		}
	}
	if v := qs.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 1000 {
			return nil, request.Errorf(http.StatusBadRequest, "limit must be an integer from 1 to 1000")
		}
	}
	recs, err := s.dp.Buffers().DeadLetters(r.Context(), tenantOf(r), r.PathValue("name"), after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(recs))
	for i, b := range recs {
		out[i] = batchView(b)
	}
	return map[string]any{"dead_letters": out}, nil
}

// POST /datasets/{name}/dead-letters/{id}/retry: no body.
func (s *Server) retryBatch(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := request.NoBody(r); err != nil {
		return nil, err
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return nil, request.Errorf(http.StatusNotFound, "Buffer batch not found")
	}
	b, err := s.dp.Buffers().Retry(r.Context(), tenantOf(r), r.PathValue("name"), id)
	if err != nil {
		return nil, err
	}
	return batchView(b), nil
}

func batchView(b *store.BufferPublish) map[string]any {
	return map[string]any{"id": b.ID, "state": b.State, "batch_uri": b.BatchURI, "dataset_uuid": b.DatasetUUID,
		"dataset_version": b.DatasetVersion, "record_count": b.RecordCount, "receive_count": b.ReceiveCount,
		"last_error": nullable(b.LastError), "producer": map[string]any{"task_id": b.TaskID, "attempt": b.Attempt},
		"created_at": snakeTime(b.CreatedAt), "finished_at": snakeTime(b.FinishedAt)}
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
