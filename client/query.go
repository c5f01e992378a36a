package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The codes (APIError.Code) of the Query Service's refusals.
const (
	// CodeQueryUnavailable (501): the server was built without cgo, so it has no query engine.
	CodeQueryUnavailable = "query_unavailable"
	// CodeSQLRejected (400): the statement is not one read-only SELECT of datasets by name.
	CodeSQLRejected = "sql_rejected"
	// CodeUnknownDataset (400): the statement reads a relation that is no published dataset.
	CodeUnknownDataset = "unknown_dataset"
	// CodeQueryFailed (400): the statement passed the gate and failed in the engine.
	CodeQueryFailed = "query_failed"
	// CodeDatasetNotReadable (422): a dataset the statement reads has nothing to read.
	CodeDatasetNotReadable = "dataset_not_readable"
	// CodeQueryTooLarge (422): the datasets the statement reads exceed a limit.
	CodeQueryTooLarge = "query_too_large"
	// CodeQueryTimeout (504): the statement ran past its time limit.
	CodeQueryTimeout = "query_timeout"
	// CodeQueryBusy (503): every query slot stayed taken; Query retries it.
	CodeQueryBusy = "query_busy"
	// CodeInvalidRequest (400): the request itself is malformed (a bad limit, an unknown member).
	CodeInvalidRequest = "invalid_request"
)

// QueryResult is the answer of a query: its columns and at most the limit's rows.
type QueryResult struct {
	Columns []QueryColumn `json:"columns"`
	// Rows hold each row's values in Columns' order, as JSON decodes them, except that numbers
	// are json.Number so that a 64-bit integer keeps every digit. docs/contracts/query.md says
	// how each engine type is written.
	Rows [][]any `json:"rows"`
	// Truncated: the statement had more rows than the answer holds (the limit, or 10 MiB).
	Truncated  bool  `json:"truncated"`
	RowCount   int   `json:"row_count"`
	DurationMS int64 `json:"duration_ms"`
}

// Duration is how long the query took on the server.
func (r *QueryResult) Duration() time.Duration {
	return time.Duration(r.DurationMS) * time.Millisecond
}

// QueryColumn is a column of a QueryResult: its name and the engine's name of its type
// (BIGINT, VARCHAR, TIMESTAMP WITH TIME ZONE...).
type QueryColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// QueryOption configures a query.
type QueryOption func(*queryConfig)

type queryConfig struct {
	limit     int
	datasetID string
}

// WithRowLimit answers at most n rows (1 to 10000; the server's default is 1000). A statement
// with more rows answers the first n and Truncated.
func WithRowLimit(n int) QueryOption {
	return func(c *queryConfig) { c.limit = n }
}

// WithDatasetID makes a dataset (by name or uuid) readable also as the relation "dataset", for
// statements written for a single relation of that name.
func WithDatasetID(id string) QueryOption {
	return func(c *queryConfig) { c.datasetID = id }
}

// Query runs one read-only SELECT over the tenant's published datasets, each read by its name
// at its current version (POST /v1/query). A refusal is an *APIError whose Code is one of the
// Code constants above; a server built without cgo answers CodeQueryUnavailable. A query only
// reads, so a 429 or 503 (CodeQueryBusy) is retried like a GET.
func (c *Client) Query(ctx context.Context, sql string, opts ...QueryOption) (*QueryResult, error) {
	var cfg queryConfig
	for _, o := range opts {
		o(&cfg)
	}
	req := struct {
		SQL       string `json:"sql"`
		Limit     int    `json:"limit,omitempty"`
		DatasetID string `json:"dataset_id,omitempty"`
	}{sql, cfg.limit, cfg.datasetID}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("baton: encode query: %w", err)
	}
	var raw json.RawMessage
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/query", body: body, retry: true}, &raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out QueryResult
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("baton: POST /v1/query: decode the answer: %w", err)
	}
	return &out, nil
}

// QueryAuditOptions selects a page of the query audit. Zero fields are left out.
type QueryAuditOptions struct {
	Before int64 // only records older than this id: the NextBefore of the previous page
	Limit  int   // 1 to 1000; the server's default is 100
}

// QueryAuditPage is a page of the query audit, newest first.
type QueryAuditPage struct {
	Queries []QueryAuditRecord `json:"queries"`
	// NextBefore is the Before of the next page; nil when this page is not full.
	NextBefore *int64 `json:"next_before"`
}

// QueryAuditRecord is one query as the audit keeps it: who ran it, the SHA-256 of its SQL (never
// the text), what it read and how it ended.
type QueryAuditRecord struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Caller is "key:{api key id}" for a query with an API key, "task:{task id}/{attempt}" for a
	// task's.
	Caller    string `json:"caller"`
	SQLSHA256 string `json:"sql_sha256"`
	// Datasets are the dataset versions the query was given; empty when it read none or was
	// refused before they were all resolved.
	Datasets []QueryAuditDataset `json:"datasets"`
	// Status is ok, or why it answered no rows: rejected, forbidden, not_found, not_readable,
	// too_large, timeout, busy, failed or error.
	Status     string `json:"status"`
	RowCount   int    `json:"row_count"`
	DurationMS int64  `json:"duration_ms"`
}

// QueryAuditDataset is a dataset version a query read.
type QueryAuditDataset struct {
	UUID    string `json:"uuid"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"` // none for a buffered dataset
}

// QueryAudit lists the tenant's query audit, newest first (GET /v1/query/audit).
func (c *Client) QueryAudit(ctx context.Context, opts QueryAuditOptions) (*QueryAuditPage, error) {
	q := url.Values{}
	if opts.Before > 0 {
		q.Set("before", strconv.FormatInt(opts.Before, 10))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	path := "/v1/query/audit"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out QueryAuditPage
	if _, err := c.do(ctx, get(path), &out); err != nil {
		return nil, err
	}
	return &out, nil
}
