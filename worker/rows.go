package worker

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/url"
	"strconv"
)

// Rows of buffered datasets: a task of a pipeline job reads the rows of the buffered datasets its
// job reads or writes with its capability token alone (GET /internal/task-datasets/{dataset}/rows
// on the internal listener; untrusted code calls GET /v1/task/datasets/{dataset}/rows). The
// server applies the input's where, which a reader can narrow but not widen.

// Row is one row of a buffered dataset: each column of its schema (nil when the row has none)
// and "_cursor", the dataset cursor of the batch that loaded it. Integers are json.Number.
type Row map[string]any

// RowsOptions narrows a read of a dataset's rows.
type RowsOptions struct {
	// Where is a filter with the rules of an input's where (column → value, or a list of
	// values), ANDed with the input's own.
	Where map[string]any
	// Cursor, when set, reads the batch with this dataset cursor (0: every batch). Unset, an
	// input that started the task reads the rows of the batch whose event started it, and any
	// other input, or an output, reads every batch.
	Cursor *int64
	// PageSize is how many rows each request asks for: 1 to 1000 (0: the server's 100).
	PageSize int
}

// pathTaskRows is the internal dialect's read of a task's dataset rows: {dataset}/rows follows.
const pathTaskRows = "/internal/task-datasets/"

// Rows iterates over the rows of in, a dataset the task reads (one of t.Pipeline.Inputs) or
// writes (set DatasetUUID to one of its outputs'), oldest first, a page at a time: by default the
// rows that the event which started the task brought, filtered by the input's where. It stops at
// the first error, which it yields; the server refuses a dataset the task's job neither reads nor
// writes (403), and any read once the attempt is no longer the current one.
func (t *Task) Rows(ctx context.Context, in DatasetInput, opts RowsOptions) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		if t.rows == nil {
			yield(nil, errors.New("baton worker: Rows: the task was not claimed by a Worker"))
			return
		}
		if in.DatasetUUID == "" {
			yield(nil, errors.New("baton worker: Rows: the input has no dataset_uuid"))
			return
		}
		q := url.Values{}
		if opts.Where != nil {
			b, err := json.Marshal(opts.Where)
			if err != nil {
				yield(nil, err)
				return
			}
			q.Set("where", string(b))
		}
		if opts.Cursor != nil {
			q.Set("cursor", strconv.FormatInt(*opts.Cursor, 10))
		}
		if opts.PageSize > 0 {
			q.Set("limit", strconv.Itoa(opts.PageSize))
		}
		for {
			token, _ := t.Token()
			page, err := t.rows(ctx, token, url.PathEscape(in.DatasetUUID)+"/rows?"+q.Encode())
			if err != nil {
				yield(nil, err)
				return
			}
			for _, r := range page.Rows {
				if !yield(r, nil) {
					return
				}
			}
			if page.NextAfter == nil {
				return
			}
			q.Set("after", strconv.FormatInt(*page.NextAfter, 10))
		}
	}
}

// rowPage is a page of rows as the server answers it.
type rowPage struct {
	Rows      []Row  `json:"rows"`
	NextAfter *int64 `json:"next_after"`
}

// readRows GETs one page of rows ({dataset}/rows?query) with the attempt's capability token.
func (a *attempt) readRows(ctx context.Context, token, path string) (*rowPage, error) {
	var page rowPage
	if err := a.api.getWith(ctx, requestTimeout, a.routes.rows+path, []string{capabilityHeader, token}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}
