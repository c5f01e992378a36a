package sink

import (
	"context"
	"errors"

	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
)

// Tables serves the dispatcher's view of the data database (dispatch.DatasetTables): the tables a
// deploy creates, and the rows a tenant reads back.
type Tables struct{ DB *dataset.DB }

var _ dispatch.DatasetTables = Tables{}

func (t Tables) Ensure(ctx context.Context, datasetUUID string, s *pipeline.Schema) error {
	err := t.DB.Ensure(ctx, datasetUUID, s)
	if errors.Is(err, dataset.ErrIncompatible) {
		return incompatible{err}
	}
	return err
}

// incompatible is the data database's refusal of a schema, as the dispatcher knows it; its text
// is the data database's own.
type incompatible struct{ error }

func (e incompatible) Unwrap() []error { return []error{e.error, dispatch.ErrIncompatibleSchema} }

// Rows reads a page of rows. A query the data database refuses (a where value that passed
// pipeline.CheckWhere but that no column of its type can hold, such as an integer beyond 64 bits)
// is the caller's mistake: an InvalidError, not a failure of the database.
func (t Tables) Rows(ctx context.Context, datasetUUID string, s *pipeline.Schema, q dispatch.RowQuery) (dispatch.RowPage, error) {
	page, err := t.DB.Rows(ctx, datasetUUID, s, dataset.Query{Tenant: q.Tenant, Where: q.Where, Cursor: q.Cursor,
		After: q.After, Limit: q.Limit})
	if errors.Is(err, dataset.ErrBadQuery) {
		return dispatch.RowPage{}, &dispatch.InvalidError{Message: err.Error()}
	}
	return dispatch.RowPage{Rows: page.Rows, Next: page.Next}, err
}
