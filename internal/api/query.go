package api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
)

// The Query Service (docs/contracts/query.md): read-only SQL over the datasets a caller may
// read, with an API key (POST /v1/query) or a task's capability token (POST /v1/task/query,
// POST /internal/task-query). Every refusal is {"error": code, "message": text}.

// POST /v1/query: {sql, limit?}.
func (s *Server) userQuery(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, coded(err)
	}
	p, err := readQuery(&request.Fields{Obj: obj, Where: "body"}, true)
	if err != nil {
		return nil, err
	}
	holdOpen(w, s.dp.Reads().QueryTimeout(false))
	res, err := s.dp.Reads().Query(r.Context(), tenantOf(r), keyOf(r), p)
	if err != nil {
		return nil, queryError(err)
	}
	return queryAnswer(res), nil
}

// POST /v1/task/query and POST /internal/task-query: {task_id, attempt, lease_token, sql,
// limit?}, fenced like every call about an attempt.
func (s *Server) fencedQuery(fence fenceFunc) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		b, err := readFenced(r)
		if err != nil {
			return nil, err
		}
		p, err := readQuery(b.Fields, false)
		if err != nil {
			return nil, err
		}
		f, err := b.resolve(r, fence)
		if err != nil {
			return nil, err
		}
		holdOpen(w, s.dp.Reads().QueryTimeout(true))
		res, err := s.dp.Reads().TaskQuery(r.Context(), f, p)
		if err != nil {
			return nil, queryError(err)
		}
		return queryAnswer(res), nil
	}
}

// holdOpen lets a query's answer be written past the listener's write timeout, which bounds
// ordinary requests: until its statement's timeout plus the longest wait for a slot have
// passed, so that every query gets its answer (its rows, or its 504) on the wire.
func holdOpen(w http.ResponseWriter, timeout time.Duration) {
	request.HoldOpen(w, timeout+query.MaxSlotWait)
}

// readQuery reads a query body's sql, limit and dataset_id. strict refuses any other member
// (the producer API's rule); without it (the worker dialects' rule) others are ignored.
func readQuery(f *request.Fields, strict bool) (reads.QueryParams, error) {
	var p reads.QueryParams
	if strict {
		for name := range f.Obj {
			if !slices.Contains([]string{"sql", "limit", "dataset_id"}, name) {
				return p, queryRefusal(http.StatusBadRequest, "invalid_request", "body."+name+" is not a member of a query: send sql and, optionally, limit and dataset_id")
			}
		}
	}
	p.SQL, p.DatasetID = f.Str("sql"), f.Str("dataset_id")
	limit := f.Int("limit")
	switch {
	case f.Err != nil:
		return p, queryRefusal(http.StatusBadRequest, "invalid_request", errorText(f.Err))
	case p.SQL == "":
		return p, queryRefusal(http.StatusBadRequest, "invalid_request", "body.sql is required: one SELECT statement")
	case limit != nil && (*limit < 1 || *limit > query.MaxRows):
		return p, queryRefusal(http.StatusBadRequest, "invalid_request", "body.limit must be an integer from 1 to "+strconv.Itoa(query.MaxRows))
	}
	p.Limit = query.DefaultRows
	if limit != nil {
		p.Limit = *limit
	}
	return p, nil
}

// coded is a request error in the Query Service's shape: its text as the message, with the code
// invalid_request.
func coded(err error) error {
	var he *request.Error
	if errors.As(err, &he) {
		if _, ok := he.Body["message"]; !ok {
			out := queryRefusal(he.Status, "invalid_request", errorText(err))
			out.Header = he.Header
			return out
		}
	}
	return err
}

// errorText is the message of a request error.
func errorText(err error) string {
	var he *request.Error
	if errors.As(err, &he) {
		if m, ok := he.Body["error"].(string); ok {
			return m
		}
	}
	return err.Error()
}

func queryRefusal(status int, code, message string) *request.Error {
	return &request.Error{Status: status, Body: map[string]any{"error": code, "message": message}}
}

// queryError is the answer to a query that did not run; other errors (the fence's, the
// store's) go on to the dialect's own mapping.
func queryError(err error) error {
	var (
		rejected *query.RejectedError
		failed   *query.FailedError
		tooLarge *query.TooLargeError
		unknown  *reads.QueryUnknownError
		notRead  *reads.QueryNotReadableError
		engRead  *query.NotReadableError
	)
	switch {
	case errors.Is(err, query.ErrUnavailable):
		return queryRefusal(http.StatusNotImplemented, "query_unavailable", err.Error())
	case errors.As(err, &rejected):
		return queryRefusal(http.StatusBadRequest, "sql_rejected", rejected.Error())
	case errors.As(err, &unknown):
		return queryRefusal(http.StatusBadRequest, "unknown_dataset", unknown.Error())
	case errors.As(err, &failed):
		return queryRefusal(http.StatusBadRequest, "query_failed", failed.Error())
	case errors.As(err, &notRead):
		return queryRefusal(http.StatusUnprocessableEntity, "dataset_not_readable", notRead.Error())
	case errors.As(err, &engRead):
		return queryRefusal(http.StatusUnprocessableEntity, "dataset_not_readable", engRead.Error())
	case errors.As(err, &tooLarge):
		return queryRefusal(http.StatusUnprocessableEntity, "query_too_large", tooLarge.Error())
	case errors.Is(err, query.ErrTimeout):
		return queryRefusal(http.StatusGatewayTimeout, "query_timeout", "the query ran past its time limit and was stopped")
	case errors.Is(err, query.ErrBusy):
		he := queryRefusal(http.StatusServiceUnavailable, "query_busy", err.Error())
		he.Header = http.Header{"Retry-After": {"1"}}
		return he
	case errors.Is(err, query.ErrStopped):
		he := queryRefusal(http.StatusServiceUnavailable, "query_stopped", err.Error())
		he.Header = http.Header{"Retry-After": {"1"}}
		return he
	}
	return err
}

func queryAnswer(res *query.Result) map[string]any {
	return map[string]any{"columns": res.Columns, "rows": res.Rows, "truncated": res.Truncated,
		"row_count": res.RowCount, "duration_ms": res.Duration.Milliseconds()}
}

// GET /v1/query/audit?before=&limit=: the tenant's query audit, newest first.
func (s *Server) queryAudit(w http.ResponseWriter, r *http.Request) (any, error) {
	qs := r.URL.Query()
	p := store.QueryAuditListParams{Tenant: tenantOf(r), Limit: 100}
	var err error
	if v := qs.Get("before"); v != "" {
		if p.BeforeID, err = strconv.ParseInt(v, 10, 64); err != nil || p.BeforeID < 1 {
			return nil, queryRefusal(http.StatusBadRequest, "invalid_request", "before must be a positive integer")
		}
	}
	if v := qs.Get("limit"); v != "" {
		if p.Limit, err = strconv.Atoi(v); err != nil || p.Limit < 1 || p.Limit > 1000 {
			return nil, queryRefusal(http.StatusBadRequest, "invalid_request", "limit must be an integer from 1 to 1000")
		}
	}
	recs, err := s.dp.Reads().QueryAudit(r.Context(), p)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(recs))
	for i, a := range recs {
		out[i] = map[string]any{"id": a.ID, "at": a.At.UTC().Format(time.RFC3339Nano), "caller": a.Caller,
			"sql_sha256": a.SQLHash, "datasets": a.Datasets, "status": a.Status, "row_count": a.RowCount,
			"duration_ms": a.DurationMS}
	}
	next := any(nil)
	if len(recs) == p.Limit {
		next = recs[len(recs)-1].ID
	}
	return map[string]any{"queries": out, "next_before": next}, nil
}
