package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Queries of a task: a task of a pipeline job runs read-only SQL over the datasets its job reads
// and writes with its capability token alone, through the Query Service (POST /internal/task-query
// on the internal listener, POST /v1/task/query on the public one; docs/contracts/query.md).

// QueryResult is the answer of a task's query: its columns and at most the limit's rows.
type QueryResult struct {
	Columns []QueryColumn `json:"columns"`
	// Rows hold each row's values in Columns' order, as JSON decodes them, except that numbers
	// are json.Number so that a 64-bit integer keeps every digit. docs/contracts/query.md says
	// how each engine type is written (a HUGEINT, such as sum() of a BIGINT column, is a string
	// of its digits).
	Rows [][]any `json:"rows"`
	// Truncated: the statement had more rows than the answer holds (the limit, or 10 MiB).
	Truncated  bool  `json:"truncated"`
	RowCount   int   `json:"row_count"`
	DurationMS int64 `json:"duration_ms"`
}

// QueryColumn is a column of a QueryResult: its name and the engine's name of its type.
type QueryColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// QueryOptions shape a task's query.
type QueryOptions struct {
	// Limit is the most rows answered: 1 to 10000 (0: the server's 1000).
	Limit int
	// DatasetID, a dataset's name or uuid, makes it readable also as the relation "dataset".
	DatasetID string
}

// queryTimeout bounds one query request: a task's statement may run 300 s, after waiting up to
// 10 s for a query slot.
const queryTimeout = 320 * time.Second

// Query runs one read-only SELECT over the datasets the task's job reads (at the versions its
// capability token pins) and writes (at their current versions), each a table under its name or
// its quoted uuid; a buffered input holds only the rows its where keeps. The server refuses a
// dataset the job neither reads nor writes (403), and any query once the attempt is no longer the
// current one under a live lease (404, 409, 410). A refusal is returned as an error that carries
// the server's code and message (sql_rejected, query_failed, query_busy, ...).
func (t *Task) Query(ctx context.Context, sql string, opts QueryOptions) (*QueryResult, error) {
	if sql == "" {
		return nil, errors.New("baton worker: Query: the SQL statement is empty")
	}
	if opts.Limit < 0 || opts.Limit > 10000 {
		return nil, fmt.Errorf("baton worker: Query: limit %d: want 1 to 10000 (0: the server's default)", opts.Limit)
	}
	if t.query == nil {
		return nil, errors.New("baton worker: Query: the task was not claimed by a Worker")
	}
	token, _ := t.Token()
	return t.query(ctx, token, sql, opts)
}

// runQuery sends a task's query with the attempt's fence and capability token.
func (a *attempt) runQuery(ctx context.Context, token, sql string, opts QueryOptions) (*QueryResult, error) {
	body := a.fence()
	body["sql"] = sql
	if opts.Limit > 0 {
		body["limit"] = opts.Limit
	}
	if opts.DatasetID != "" {
		body["dataset_id"] = opts.DatasetID
	}
	var raw json.RawMessage
	if err := a.api.postWith(ctx, queryTimeout, a.routes.query, []string{capabilityHeader, token}, body, &raw); err != nil {
		return nil, err
	}
	var res QueryResult
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("baton worker: %s: decode the answer: %w", a.routes.query, err)
	}
	return &res, nil
}
