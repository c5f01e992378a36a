package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/baton-dev/baton/internal/pipeline"
)

// Table is a dataset's table as a schema wants it.
type Table struct {
	DatasetUUID string
	Schema      *pipeline.Schema
	// ClearTenant, when set, names a tenant whose rows EnsureAll removes from the table, in the
	// transaction that ensures it. The dataset's batch cursor and its ledger stay: cursors keep
	// increasing across the clear, so a cursor never names two loads, and a batch loaded before
	// the clear is not loaded again.
	ClearTenant string
	// RetireVersion, when set, is a version of the dataset that EnsureAll retires, in the same
	// transaction: from its commit on, Load refuses the batches of that version (ErrStaleVersion),
	// such as those a sink claimed before a reset and loads after it. The transaction takes the
	// dataset's cursor row before it deletes ClearTenant's rows, so that every load either commits
	// before the delete, which then removes its rows, or after the commit, and is refused.
	RetireVersion string
}

// Cleared counts, by dataset uuid, the rows EnsureAll removed for the Tables with ClearTenant.
type Cleared map[string]int64

// IncompatibleError lists every table of an EnsureAll that cannot serve its new schema.
type IncompatibleError struct {
	// Datasets holds, by dataset uuid, why its table cannot serve the schema: an error wrapping
	// ErrIncompatible that lists every reason (see Compatible).
	Datasets map[string]error
}

func (e *IncompatibleError) Error() string {
	var b strings.Builder
	for i, id := range slices.Sorted(maps.Keys(e.Datasets)) {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("dataset " + id + ": " + e.Datasets[id].Error())
	}
	return b.String()
}

func (e *IncompatibleError) Unwrap() error { return ErrIncompatible }

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
		return fmt.Errorf("ensure dataset %s: %w", d.uuid, err)
	}
	err = db.EnsureAll(ctx, []Table{{DatasetUUID: datasetUUID, Schema: s}}, nil)
	var inc *IncompatibleError
	if errors.As(err, &inc) {
		err = inc.Datasets[d.uuid]
	}
	if err != nil {
		return fmt.Errorf("ensure dataset %s: %w", d.uuid, err)
	}
	return nil
}

// planned is one table of an ensure: its dataset, the schema it wants, and that schema's JSON.
type planned struct {
	d      dataset
	s      *pipeline.Schema
	want   []byte
	clear  string // the tenant whose rows to remove, or ""
	retire string // the version to retire, or ""
}

// EnsureAll is Ensure for several datasets at once, all or nothing: it plans every table's
// change (a new table, added columns, new indexes) and checks all of them before it makes any, so
// that when one table cannot serve its schema nothing changes, and the *IncompatibleError names
// every such table. It then makes the changes and records the schemas in one transaction.
//
// A Table with ClearTenant has that tenant's rows removed once its changes are made, and one with
// RetireVersion has that version retired.
//
// during, when not nil, runs once the changes are made but not committed, with the rows each
// clear removed, and EnsureAll commits only if it returns nil; its error is returned as it is. The transaction holds the datasets'
// locks (on SQLite, the file's write lock) while during runs, so that a caller recording the
// schemas elsewhere records them in the order the tables took them: no other Ensure or EnsureAll
// of these datasets runs in between. Keep during short: on SQLite every other write to the data
// database waits for it.
//
// A table whose schema is already recorded still costs the transaction and its locks when
// during is given; without during, EnsureAll of tables that need nothing costs one read each.
func (db *DB) EnsureAll(ctx context.Context, tables []Table, during func(Cleared) error) error {
	plan := make([]planned, 0, len(tables))
	seen := make(map[string]bool, len(tables))
	clears := false
	for _, tb := range tables {
		d, err := datasetOf(tb.DatasetUUID)
		if err != nil {
			return err
		}
		if seen[d.uuid] {
			return fmt.Errorf("%w: dataset %s is listed twice", ErrBadSchema, d.uuid)
		}
		seen[d.uuid] = true
		if err := checkSchema(tb.Schema); err != nil {
			return fmt.Errorf("dataset %s: %w", d.uuid, err)
		}
		plan = append(plan, planned{d: d, s: tb.Schema, want: schemaJSON(tb.Schema), clear: tb.ClearTenant, retire: tb.RetireVersion})
		clears = clears || tb.ClearTenant != "" || tb.RetireVersion != ""
	}
	if len(plan) == 0 && during == nil {
		return nil
	}
	if during == nil && !clears {
		done := true
		for _, p := range plan {
			old, err := db.ensured(ctx, db.b.reader(), p.d)
			if err != nil {
				return fmt.Errorf("dataset %s: %w", p.d.uuid, err)
			}
			if old == nil || !bytes.Equal(schemaJSON(old), p.want) {
				done = false
				break
			}
		}
		if done {
			return nil
		}
	}
	t, err := db.b.begin(ctx)
	if err != nil {
		return err
	}
	defer t.rollback(ctx)
	ds := make([]dataset, len(plan))
	for i, p := range plan {
		ds[i] = p.d
	}
	if err := db.b.lockDatasets(ctx, t, ds); err != nil {
		return fmt.Errorf("lock the datasets: %w", err)
	}
	// Plan every change under the locks, from the schemas the tables were last ensured with, and
	// refuse them all if one table cannot serve its schema.
	var stmts []statement
	incompatible := map[string]error{}
	for _, p := range plan {
		old, err := db.ensured(ctx, t, p.d)
		if err != nil {
			return fmt.Errorf("dataset %s: %w", p.d.uuid, err)
		}
		more, err := db.changes(p, old)
		if err != nil {
			incompatible[p.d.uuid] = err
			continue
		}
		stmts = append(stmts, more...)
	}
	if len(incompatible) > 0 {
		return &IncompatibleError{Datasets: incompatible}
	}
	for _, stmt := range stmts {
		if _, err := t.exec(ctx, stmt.sql, stmt.args...); err != nil {
			return fmt.Errorf("%s: %w", stmt.sql, err)
		}
	}
	cleared := Cleared{}
	for _, p := range plan {
		if p.clear == "" && p.retire == "" {
			continue
		}
		// The cursor row first, after the tables' changes (an ALTER TABLE waits for the loads
		// that inserted rows, and those loads then wait for the cursor row): a load holding it
		// commits before the delete below reads the rows, and a load that waits for it reads the
		// retired version once this commits.
		if _, err := t.exec(ctx, `INSERT INTO baton_dataset_cursors (dataset_uuid, cursor) VALUES (`+db.b.ph(1)+`, 0)
			ON CONFLICT (dataset_uuid) DO UPDATE SET cursor = baton_dataset_cursors.cursor`, p.d.uuid); err != nil {
			return fmt.Errorf("lock the cursor of dataset %s: %w", p.d.uuid, err)
		}
		if p.retire != "" {
			if _, err := t.exec(ctx, `INSERT INTO baton_dataset_retired (dataset_uuid, version) VALUES (`+db.b.ph(1)+`, `+db.b.ph(2)+`)
				ON CONFLICT (dataset_uuid, version) DO NOTHING`, p.d.uuid, p.retire); err != nil {
				return fmt.Errorf("retire version %s of dataset %s: %w", p.retire, p.d.uuid, err)
			}
		}
		if p.clear == "" {
			continue
		}
		n, err := t.exec(ctx, "DELETE FROM "+quote(p.d.table)+" WHERE org_id = "+db.b.ph(1), p.clear)
		if err != nil {
			return fmt.Errorf("clear the rows of dataset %s: %w", p.d.uuid, err)
		}
		cleared[p.d.uuid] = n
	}
	if during != nil {
		if err := during(cleared); err != nil {
			return err
		}
	}
	if err := t.commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// statement is one statement of a plan.
type statement struct {
	sql  string
	args []any
}

// changes is the statements that bring the dataset's table, last ensured with old (nil: it has
// none), to p's schema and record it; none when old is p's schema. A schema the table cannot
// serve is an error wrapping ErrIncompatible.
func (db *DB) changes(p planned, old *pipeline.Schema) ([]statement, error) {
	var ddl []string
	switch {
	case old == nil:
		ddl = db.createTable(p.d, p.s)
	case bytes.Equal(schemaJSON(old), p.want):
		return nil, nil
	default:
		if err := Compatible(old, p.s); err != nil {
			return nil, err
		}
		for _, c := range p.s.Columns {
			if _, ok := column(old, c.Name); !ok {
				ddl = append(ddl, "ALTER TABLE "+quote(p.d.table)+" ADD COLUMN "+quote(c.Name)+" "+db.b.columnType(c.Type))
			}
		}
	}
	ddl = append(ddl, indexes(p.d, p.s)...)
	stmts := make([]statement, 0, len(ddl)+1)
	for _, s := range ddl {
		stmts = append(stmts, statement{sql: s})
	}
	return append(stmts, statement{
		sql: `INSERT INTO baton_dataset_tables (dataset_uuid, schema) VALUES (` + db.b.ph(1) + `, ` + db.b.ph(2) + `)
			ON CONFLICT (dataset_uuid) DO UPDATE SET schema = excluded.schema, ensured_at = excluded.ensured_at`,
		args: []any{p.d.uuid, string(p.want)},
	}), nil
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
