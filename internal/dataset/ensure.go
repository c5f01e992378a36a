package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/baton-dev/baton/internal/pipeline"
)

// Ensure creates the dataset's table for s, or migrates it to s: it adds the columns s adds
// (all optional, or s is refused) and creates the indexes it lacks. An s that the table cannot
// serve (see Compatible) is refused with an error wrapping ErrIncompatible, and nothing changes.
//
// Calling it again with the same schema changes nothing and costs one read, so a sink may call it
// before every load. Concurrent calls for one dataset, from any process, run one after the other.
func (db *DB) Ensure(ctx context.Context, datasetUUID string, s *pipeline.Schema) error {
	d, err := datasetOf(datasetUUID)
	if err != nil {
		return err
	}
	if err := checkSchema(s); err != nil {
		return err
	}
	want := schemaJSON(s)
	if old, err := db.ensured(ctx, db.b.reader(), d); err != nil {
		return fmt.Errorf("ensure dataset %s: %w", d.uuid, err)
	} else if old != nil && bytes.Equal(schemaJSON(old), want) {
		return nil
	}
	err = db.inTx(ctx, func(t tx) error {
		if err := db.b.lockDataset(ctx, t, d); err != nil {
			return err
		}
		old, err := db.ensured(ctx, t, d)
		if err != nil {
			return err
		}
		var stmts []string
		switch {
		case old == nil:
			stmts = db.b.createTable(d, s)
		case bytes.Equal(schemaJSON(old), want):
			return nil // another call got here first
		default:
			if err := Compatible(old, s); err != nil {
				return err
			}
			for _, c := range s.Columns {
				if _, ok := column(old, c.Name); !ok {
					stmts = append(stmts, "ALTER TABLE "+quote(d.table)+" ADD COLUMN "+quote(c.Name)+" "+db.b.columnType(c.Type))
				}
			}
		}
		stmts = append(stmts, indexes(d, s)...)
		for _, stmt := range stmts {
			if _, err := t.exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		_, err = t.exec(ctx, `INSERT INTO baton_dataset_tables (dataset_uuid, schema) VALUES (`+db.b.ph(1)+`, `+db.b.ph(2)+`)
			ON CONFLICT (dataset_uuid) DO UPDATE SET schema = excluded.schema, ensured_at = excluded.ensured_at`,
			d.uuid, string(want))
		return err
	})
	if err != nil {
		return fmt.Errorf("ensure dataset %s: %w", d.uuid, err)
	}
	return nil
}

// ensured is the schema the dataset's table was last ensured with, or nil when it has no table.
func (db *DB) ensured(ctx context.Context, q querier, d dataset) (*pipeline.Schema, error) {
	var text string
	found, err := queryRow(ctx, q, `SELECT CAST(schema AS TEXT) FROM baton_dataset_tables WHERE dataset_uuid = `+db.b.ph(1),
		[]any{d.uuid}, &text)
	if err != nil || !found {
		return nil, err
	}
	var s pipeline.Schema
	if err := json.Unmarshal([]byte(text), &s); err != nil {
		return nil, fmt.Errorf("the recorded schema: %w", err)
	}
	return &s, nil
}

// indexes is the statements that create the indexes of the dataset's table that are missing:
// one on _batch, for reading a load's rows, and one per declared index, after org_id since every
// read is a tenant's.
func indexes(d dataset, s *pipeline.Schema) []string {
	stmts := []string{"CREATE INDEX IF NOT EXISTS " + quote(d.table+"_batch") + " ON " + quote(d.table) + " (_batch, _row)"}
	for _, cols := range s.Indexes {
		stmts = append(stmts, "CREATE INDEX IF NOT EXISTS "+quote(indexName(d.table, cols))+" ON "+quote(d.table)+
			" (org_id, "+quoteList(cols)+")")
	}
	return stmts
}
