package dataplane

import (
	"context"
	"errors"
	"strings"

	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
)

// DatasetTables holds buffered datasets' tables in the data database.
type DatasetTables interface {
	// EnsureTables plans the change of every table of a deploy (a new table, added columns, new
	// indexes), checks all of them, and makes them in one transaction of the data database, or
	// none: tables that cannot serve their schemas are refused with an *IncompatibleTablesError
	// that names each of them, and nothing changes. during runs while that transaction is open,
	// holding the datasets' locks, and the transaction commits only when during returns nil;
	// during's error is returned as it is. A table with ClearTenant has that tenant's rows
	// removed in the same transaction, before during runs; cleared counts them by dataset uuid.
	// A table with RetireVersion has that version retired in it: from the commit on, no batch of
	// it is loaded (a load already under way either commits first, and its rows are among those
	// removed, or is refused).
	EnsureTables(ctx context.Context, tables []DatasetTable, during func(cleared map[string]int64) error) error
	// Rows and Scan read the tables' rows (reads.Tables).
	reads.Tables
}

// DatasetDB is the data database as the dispatcher sees it (DatasetTables): the tables a deploy
// creates, and the rows a tenant reads back.

// DatasetDB is the DatasetTables of a data database.
type DatasetDB struct{ DB *dataset.DB }

var _ DatasetTables = DatasetDB{}

// EnsureTables changes the tables of a deploy's buffered datasets, and clears the ones it resets
// and retires their versions, in one transaction of the data database, or none
// (dataset.DB.EnsureAll), committed only if during succeeds.
func (t DatasetDB) EnsureTables(ctx context.Context, tables []DatasetTable, during func(cleared map[string]int64) error) error {
	want := make([]dataset.Table, len(tables))
	for i, x := range tables {
		want[i] = dataset.Table{DatasetUUID: x.DatasetUUID, Schema: x.Schema, ClearTenant: x.ClearTenant, RetireVersion: x.RetireVersion}
	}
	var run func(dataset.Cleared) error
	if during != nil {
		run = func(c dataset.Cleared) error { return during(c) }
	}
	err := t.DB.EnsureAll(ctx, want, run)
	var inc *dataset.IncompatibleError
	if errors.As(err, &inc) {
		reasons := make(map[string]string, len(inc.Datasets))
		for id, e := range inc.Datasets {
			reasons[id] = e.Error()
		}
		return &IncompatibleTablesError{Reasons: reasons}
	}
	return err
}

// Rows reads a page of rows. A query the data database refuses (a where value that passed
// pipeline.CheckWhere but that no column of its type can hold, such as an integer beyond 64 bits)
// is the caller's mistake: a dispatch.InvalidError, not a failure of the database.
func (t DatasetDB) Rows(ctx context.Context, datasetUUID string, s *pipeline.Schema, q reads.RowQuery) (reads.RowPage, error) {
	page, err := t.DB.Rows(ctx, datasetUUID, s, dataset.Query{Tenant: q.Tenant, Where: q.Where, Cursor: q.Cursor, CursorEnd: q.CursorEnd,
		After: q.After, Limit: q.Limit})
	if errors.Is(err, dataset.ErrBadQuery) {
		return reads.RowPage{}, &dispatch.InvalidError{Message: err.Error()}
	}
	return reads.RowPage{Rows: page.Rows, Next: page.Next}, err
}

// Scan reads columns of every row of tenant that where keeps, from one snapshot (dataset.DB.Scan).
func (t DatasetDB) Scan(ctx context.Context, datasetUUID string, s *pipeline.Schema, tenant string, where map[string]any, columns []string, yield func([]any) error) error {
	err := t.DB.Scan(ctx, datasetUUID, s, tenant, where, columns, yield)
	if errors.Is(err, dataset.ErrBadQuery) {
		return &dispatch.InvalidError{Message: err.Error()}
	}
	return err
}

// ErrIncompatibleSchema: a buffered dataset's new schema cannot serve its existing table.
var ErrIncompatibleSchema = errors.New("incompatible schema")

// DatasetTable is a buffered dataset's table as a deploy wants it.
type DatasetTable struct {
	DatasetUUID string
	Schema      *pipeline.Schema
	// ClearTenant, when set, is the tenant whose rows the deploy removes: the dataset is an
	// output of a source job whose bootstrap.reset_outputs runs.
	ClearTenant string
	// RetireVersion, when set, is the dataset version the reset replaces: from the data
	// database's commit on, batches of it are no longer loaded (dataset.Table.RetireVersion).
	RetireVersion string
}

// IncompatibleTablesError: tables that cannot serve the schemas a deploy gives their datasets.
type IncompatibleTablesError struct {
	Reasons map[string]string // by dataset uuid: every reason, in the data database's words
}

func (e *IncompatibleTablesError) Error() string {
	var b strings.Builder
	for i, id := range sortedKeys(e.Reasons) {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString("dataset " + id + ": " + e.Reasons[id])
	}
	return b.String()
}

func (e *IncompatibleTablesError) Unwrap() error { return ErrIncompatibleSchema }
