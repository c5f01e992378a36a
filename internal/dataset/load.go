package dataset

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/baton-dev/baton/internal/pipeline"
)

// Batch is one batch of rows to load into a dataset.
type Batch struct {
	ID          string // the publish record's id: the load's idempotency key
	Tenant      string // the org_id of every row
	DatasetUUID string
	// Version is the dataset version the batch is of: a batch of a version a reset retired
	// (Table.RetireVersion) is refused with ErrStaleVersion. "" loads whatever the version.
	Version string
	// Schema is the dataset's schema, which its table was ensured with (or is compatible with).
	Schema      *pipeline.Schema
	Rows        []Row
	FacetFields []string // columns whose distinct values among the inserted rows Load reports
}

// Loaded is what a load did.
type Loaded struct {
	// Cursor is the dataset's batch cursor given to the load, or 0 when it inserted no row.
	// Cursors increase with every load that inserts rows, in the order their transactions commit.
	Cursor   int64
	Inserted int // rows that were new
	// Facets holds, per facet field, the distinct non-null values of the inserted rows, sorted, as
	// Rows returns them. A field with more than MaxFacetValues distinct values is left out.
	Facets map[string][]any
	// Repeat says the batch had been loaded before: the fields are that load's, and nothing was
	// changed.
	Repeat bool
}

// MaxFacetValues bounds the distinct values Load reports per facet field.
const MaxFacetValues = 64

var (
	// ErrBadBatch: a batch that cannot be loaded as it is given.
	ErrBadBatch = errors.New("bad batch")
	// ErrBatchConflict: a batch id already loaded into another dataset, or for another tenant.
	ErrBatchConflict = errors.New("the batch id was loaded into another dataset or for another tenant")
	// ErrStaleVersion: the batch is of a dataset version a reset retired; nothing was loaded.
	ErrStaleVersion = errors.New("the batch's dataset version was retired by a reset of the dataset")
)

// Load inserts the batch's rows that are new to the dataset (by the tenant's unique key; the
// first of several rows with one key wins), all in one transaction, and records the load in the
// ledger under the batch id. A batch id already in the ledger is not loaded again: Load returns
// the first load's result with Repeat set. Of two concurrent loads of one batch, one loads it and
// the other waits for it and repeats.
//
// The rows of a load are numbered (see Rows) in the batch's order on SQLite, in the order of
// their unique key on PostgreSQL.
//
// A batch of a version a reset retired is refused with an error wrapping ErrStaleVersion, and
// nothing changes: see the package's comment for how a load and a concurrent reset are ordered.
// (A load that inserts no row takes no cursor, so it is not ordered with a reset: it may then
// commit its ledger entry, which changes no table.) A repeat is not checked: it changes nothing.
func (db *DB) Load(ctx context.Context, b Batch) (Loaded, error) {
	d, err := datasetOf(b.DatasetUUID)
	if err != nil {
		return Loaded{}, fmt.Errorf("%w: %w", ErrBadBatch, err)
	}
	if err := checkBatch(&b); err != nil {
		return Loaded{}, err
	}
	var res Loaded
	err = db.inTx(ctx, func(t tx) error {
		// The ledger entry comes first: a concurrent load of the same batch waits here, behind
		// the entry's key, until this one ends.
		var seq int64
		fresh, err := queryRow(ctx, t, `INSERT INTO baton_dataset_batches (batch_id, dataset_uuid, tenant)
			VALUES (`+db.b.ph(1)+`, `+db.b.ph(2)+`, `+db.b.ph(3)+`) ON CONFLICT (batch_id) DO NOTHING RETURNING seq`,
			[]any{b.ID, d.uuid, b.Tenant}, &seq)
		if err != nil {
			return fmt.Errorf("record the batch: %w", err)
		}
		if !fresh {
			res, err = db.loaded(ctx, t, d, &b)
			return err
		}
		ins := &insertion{table: d.table, schema: b.Schema, tenant: b.Tenant, seq: seq, rows: b.Rows, returning: b.FacetFields}
		inserted, returned, err := db.b.insertRows(ctx, t, ins)
		if err != nil {
			return fmt.Errorf("insert rows: %w", err)
		}
		res = Loaded{Inserted: inserted}
		if res.Facets, err = facets(b.Schema, b.FacetFields, returned); err != nil {
			return err
		}
		facetsJSON, err := json.Marshal(res.Facets)
		if err != nil {
			return fmt.Errorf("facets: %w", err)
		}
		// The cursor is taken last: its counter row stays locked until the commit, which orders
		// the loads' commits as their cursors, and the shorter the wait the better. A reset
		// locks that row before it deletes; so the retired versions are read after it, in a
		// statement of its own, which on PostgreSQL sees what a reset it waited for committed.
		if inserted > 0 {
			if _, err := queryRow(ctx, t, `INSERT INTO baton_dataset_cursors (dataset_uuid, cursor) VALUES (`+db.b.ph(1)+`, 1)
				ON CONFLICT (dataset_uuid) DO UPDATE SET cursor = baton_dataset_cursors.cursor + 1 RETURNING cursor`,
				[]any{d.uuid}, &res.Cursor); err != nil {
				return fmt.Errorf("take a cursor: %w", err)
			}
		}
		if b.Version != "" {
			var one int
			retired, err := queryRow(ctx, t, `SELECT 1 FROM baton_dataset_retired WHERE dataset_uuid = `+db.b.ph(1)+
				` AND version = `+db.b.ph(2), []any{d.uuid, b.Version}, &one)
			if err != nil {
				return fmt.Errorf("read the retired versions: %w", err)
			}
			if retired {
				return fmt.Errorf("%w: version %s", ErrStaleVersion, b.Version)
			}
		}
		_, err = t.exec(ctx, `UPDATE baton_dataset_batches SET cursor = `+db.b.ph(1)+`, inserted = `+db.b.ph(2)+`, facets = `+db.b.ph(3)+
			` WHERE seq = `+db.b.ph(4), res.Cursor, res.Inserted, string(facetsJSON), seq)
		if err != nil {
			return fmt.Errorf("record the load: %w", err)
		}
		return nil
	})
	if err != nil {
		return Loaded{}, fmt.Errorf("load batch %s into dataset %s: %w", b.ID, d.uuid, err)
	}
	return res, nil
}

func checkBatch(b *Batch) error {
	if b.ID == "" {
		return fmt.Errorf("%w: no batch id", ErrBadBatch)
	}
	if b.Tenant == "" {
		return fmt.Errorf("%w: no tenant", ErrBadBatch)
	}
	if err := checkSchema(b.Schema); err != nil {
		return err
	}
	for _, f := range b.FacetFields {
		if _, ok := column(b.Schema, f); !ok {
			return fmt.Errorf("%w: facet field %q is not a column", ErrBadBatch, f)
		}
	}
	return nil
}

// loaded reads the result of the batch's earlier load from the ledger.
func (db *DB) loaded(ctx context.Context, q querier, d dataset, b *Batch) (Loaded, error) {
	var (
		uuid, tenant, text string
		res                = Loaded{Repeat: true}
	)
	found, err := queryRow(ctx, q, `SELECT dataset_uuid, tenant, cursor, inserted, CAST(facets AS TEXT)
		FROM baton_dataset_batches WHERE batch_id = `+db.b.ph(1), []any{b.ID},
		&uuid, &tenant, &res.Cursor, &res.Inserted, &text)
	switch {
	case err != nil:
		return Loaded{}, fmt.Errorf("read the earlier load: %w", err)
	case !found:
		return Loaded{}, errors.New("read the earlier load: its ledger entry is gone")
	case uuid != d.uuid || tenant != b.Tenant:
		return Loaded{}, ErrBatchConflict
	}
	var stored map[string][]json.RawMessage
	if err := json.Unmarshal([]byte(text), &stored); err != nil {
		return Loaded{}, fmt.Errorf("the earlier load's facets: %w", err)
	}
	res.Facets = make(map[string][]any, len(stored))
	for field, raws := range stored {
		c, _ := column(b.Schema, field)
		vals := make([]any, len(raws))
		for i, raw := range raws {
			if vals[i], err = facetFromJSON(c.Type, raw); err != nil {
				return Loaded{}, fmt.Errorf("the earlier load's facet %s: %w", field, err)
			}
		}
		res.Facets[field] = vals
	}
	return res, nil
}

// facets collects the distinct values of each field among the returned rows (one value per field,
// in order, as the database returns them).
func facets(s *pipeline.Schema, fields []string, returned [][]any) (map[string][]any, error) {
	out := make(map[string][]any, len(fields))
	for i, f := range fields {
		c, _ := column(s, f)
		seen := make(map[any]bool)
		vals := []any{}
		for _, r := range returned {
			v, err := outValue(c.Type, r[i])
			if err != nil {
				return nil, fmt.Errorf("facet %s: %w", f, err)
			}
			if v == nil {
				continue
			}
			key := v
			if raw, ok := v.(json.RawMessage); ok {
				key = string(raw) // slices are not comparable
			}
			if !seen[key] {
				seen[key] = true
				vals = append(vals, v)
			}
			if len(vals) > MaxFacetValues {
				break
			}
		}
		if len(vals) > MaxFacetValues {
			continue
		}
		slices.SortFunc(vals, compareValues)
		out[f] = vals
	}
	return out, nil
}

// compareValues orders the values of one column.
func compareValues(a, b any) int {
	switch a := a.(type) {
	case string:
		return strings.Compare(a, b.(string))
	case int64:
		return cmp.Compare(a, b.(int64))
	case float64:
		return cmp.Compare(a, b.(float64))
	case bool:
		switch {
		case a == b.(bool):
			return 0
		case a:
			return 1
		}
		return -1
	case json.RawMessage:
		return bytes.Compare(a, b.(json.RawMessage))
	}
	return 0
}

// facetFromJSON reads a facet value the ledger keeps back as outValue made it.
func facetFromJSON(typ string, raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch typ {
	case pipeline.TypeInteger:
		if n, ok := v.(json.Number); ok {
			return n.Int64()
		}
	case pipeline.TypeNumber:
		if n, ok := v.(json.Number); ok {
			return n.Float64()
		}
	case pipeline.TypeJSON:
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, err
		}
		return json.RawMessage(b.Bytes()), nil
	default:
		return v, nil // strings (timestamps too) and bools
	}
	return nil, fmt.Errorf("%s is not of type %s", raw, typ)
}
