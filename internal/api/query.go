package api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
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
		return nil, err
	}
	f := &request.Fields{Obj: obj, Where: "body"}
	text, limit, err := readQuery(f, "sql", "limit")
	if err != nil {
		return nil, err
	}
	res, err := s.dp.Query(r.Context(), tenantOf(r), keyOf(r), text, limit)
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
		text, limit, err := readQuery(b.Fields, "sql", "limit", "task_id", "attempt", "lease_token")
		if err != nil {
			return nil, err
		}
		f, err := b.resolve(r, fence)
		if err != nil {
			return nil, err
		}
		res, err := s.dp.TaskQuery(r.Context(), f, text, limit)
		if err != nil {
			return nil, queryError(err)
		}
		return queryAnswer(res), nil
	}
}

// readQuery reads a query body's sql and limit; known names the body's members, any other is
// refused.
func readQuery(f *request.Fields, known ...string) (string, int, error) {
	for name := range f.Obj {
		if !slices.Contains(known, name) {
			return "", 0, queryRefusal(http.StatusBadRequest, "invalid_request", "body."+name+" is not a member of a query: send sql and, optionally, limit")
		}
	}
	text := f.Str("sql")
	limit := f.Int("limit")
	switch {
	case f.Err != nil:
		return "", 0, queryRefusal(http.StatusBadRequest, "invalid_request", errorText(f.Err))
	case text == "":
		return "", 0, queryRefusal(http.StatusBadRequest, "invalid_request", "body.sql is required: one SELECT statement")
	case limit != nil && (*limit < 1 || *limit > query.MaxRows):
		return "", 0, queryRefusal(http.StatusBadRequest, "invalid_request", "body.limit must be an integer from 1 to "+strconv.Itoa(query.MaxRows))
	}
	if limit == nil {
		return text, query.DefaultRows, nil
	}
	return text, *limit, nil
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
		unknown  *dataplane.QueryUnknownError
		notRead  *dataplane.QueryNotReadableError
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
	case errors.As(err, &tooLarge):
		return queryRefusal(http.StatusUnprocessableEntity, "query_too_large", tooLarge.Error())
	case errors.Is(err, query.ErrTimeout):
		return queryRefusal(http.StatusGatewayTimeout, "query_timeout", "the query ran past its time limit and was stopped")
	case errors.Is(err, query.ErrBusy):
		he := queryRefusal(http.StatusServiceUnavailable, "query_busy", err.Error())
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
			return nil, request.Errorf(http.StatusBadRequest, "before must be a positive integer")
		}
	}
	if v := qs.Get("limit"); v != "" {
		if p.Limit, err = strconv.Atoi(v); err != nil || p.Limit < 1 || p.Limit > 1000 {
			return nil, request.Errorf(http.StatusBadRequest, "limit must be an integer from 1 to 1000")
		}
	}
	recs, err := s.dp.QueryAudit(r.Context(), p)
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
