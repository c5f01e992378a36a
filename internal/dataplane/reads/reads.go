// Package reads answers reads of datasets — a page of a buffered dataset's rows, a query through
// the Query Service — for producers, over their tenant's datasets, and for attempts, over the
// datasets their task's route lets them read or write.
package reads

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/store"
	"github.com/google/uuid"
)

// Config is what a Reader reads through. Zero fields take their defaults.
type Config struct {
	// Tables reads buffered datasets' rows in the data database; nil: no dataset has rows.
	Tables Tables
	// Blob is the object storage of datasets' files; nil: only buffered datasets can be queried.
	Blob *blob.Store
	// Query is the Query Service's engine; nil answers every query query.ErrUnavailable.
	Query query.Engine
	// QueryTimeout and TaskQueryTimeout are how long a user's and a task's statement may run
	// (default query.UserTimeout and query.TaskTimeout).
	QueryTimeout, TaskQueryTimeout time.Duration
}

// Tables reads buffered datasets' tables in the data database.
type Tables interface {
	// Rows reads a page of the dataset's rows of one tenant, oldest first.
	Rows(ctx context.Context, datasetUUID string, s *pipeline.Schema, q RowQuery) (RowPage, error)
	// Scan hands every row of tenant in the dataset that where keeps to yield, from one
	// snapshot: the values of columns, where "_cursor" is its load's cursor (dataset.DB.Scan).
	Scan(ctx context.Context, datasetUUID string, s *pipeline.Schema, tenant string, where map[string]any, columns []string, yield func([]any) error) error
}

// Reader answers the reads of datasets of one server.
type Reader struct {
	d   *dispatch.Dispatcher
	st  store.Store
	log *slog.Logger
	cfg Config
}

// New returns the reader of the datasets d's store holds.
func New(d *dispatch.Dispatcher, cfg Config) *Reader {
	return &Reader{d: d, st: d.Store(), log: d.Logger(), cfg: cfg}
}

// ErrDatasetNotFound: the tenant has no dataset of that name or uuid.
var ErrDatasetNotFound = errors.New("dataset not found")

// Find finds a tenant's dataset by name, or by uuid.
func Find(ctx context.Context, st store.Reader, tenant, ref string) (*store.Dataset, error) {
	x, err := st.DatasetGetByName(ctx, tenant, ref)
	if errors.Is(err, store.ErrNotFound) && uuid.Validate(ref) == nil {
		var ds []*store.Dataset
		if ds, err = st.DatasetGetMany(ctx, []string{ref}); err == nil && len(ds) == 1 && ds[0].Tenant == tenant {
			return ds[0], nil
		}
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrDatasetNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", ref, err)
	}
	return x, nil
}

// Label names a dataset in a message: by its name, or its uuid when it has none.
func Label(ds *store.Dataset) string {
	if ds.Name != "" {
		return ds.Name
	}
	return ds.UUID
}

// Allowlist is the fields a stored dataset may be filtered on. A stored schema or filter fields
// that cannot be read are an error that names the dataset.
func Allowlist(x *store.Dataset) (pipeline.Allowlist, error) {
	p := &pipeline.Publish{Dataset: x.Name}
	if len(x.Schema) > 0 {
		p.Schema = &pipeline.Schema{}
		if err := json.Unmarshal(x.Schema, p.Schema); err != nil {
			return pipeline.Allowlist{}, fmt.Errorf("dataset %s: decode its stored schema: %w", x.UUID, err)
		}
	}
	if len(x.FilterFields) > 0 {
		if err := json.Unmarshal(x.FilterFields, &p.FilterFields); err != nil {
			return pipeline.Allowlist{}, fmt.Errorf("dataset %s: decode its stored filter fields: %w", x.UUID, err)
		}
	}
	return p.Allowlist(), nil
}

// RowQuery selects rows of a buffered dataset.
type RowQuery struct {
	Tenant string
	Where  map[string]any // column → value or list of values: AND of equality / IN
	Cursor int64          // only the rows of the batch with this dataset cursor; 0: every batch
	// CursorEnd, when above Cursor, widens Cursor to the batches of every cursor from Cursor to
	// CursorEnd.
	CursorEnd int64
	After     int64 // the page after the one whose Next this is
	Limit     int
}

// RowPage is a page of rows: each row's columns and its batch's "_cursor".
type RowPage struct {
	Rows []map[string]any
	Next int64 // 0 on the last page
}

// DatasetRows reads a page of a tenant's buffered dataset (named or by uuid). The where clause
// follows the rules of an input's where on that dataset.
func (rd *Reader) DatasetRows(ctx context.Context, tenant, dataset string, q RowQuery) (RowPage, error) {
	ds, err := Find(ctx, rd.st, tenant, dataset)
	if err != nil {
		return RowPage{}, err
	}
	if ds.WriteMode != pipeline.WriteBuffered || len(ds.Schema) == 0 || rd.cfg.Tables == nil {
		return RowPage{}, &dispatch.InvalidError{Message: fmt.Sprintf("dataset %q is not a buffered dataset: Baton keeps no rows of it", dataset)}
	}
	allow, err := Allowlist(ds)
	if err != nil {
		return RowPage{}, err
	}
	if ps := pipeline.CheckWhere("where", q.Where, allow); len(ps) > 0 {
		return RowPage{}, &dispatch.ValidationError{Errors: ps.Strings()}
	}
	if q.Limit < 0 || q.Limit > 1000 || q.Cursor < 0 || q.After < 0 {
		return RowPage{}, &dispatch.InvalidError{Message: "limit must be 1 to 1000, and cursor and after must not be negative"}
	}
	var s pipeline.Schema
	if err := json.Unmarshal(ds.Schema, &s); err != nil {
		return RowPage{}, fmt.Errorf("dataset %s: decode schema: %w", ds.UUID, err)
	}
	q.Tenant, q.Limit = tenant, cmp.Or(q.Limit, 100)
	return rd.cfg.Tables.Rows(ctx, ds.UUID, &s, q)
}
