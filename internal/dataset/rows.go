package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/pipeline"
)

// Query selects rows of one tenant in a dataset.
type Query struct {
	Tenant string
	// Where keeps the rows whose column equals the value, or one of the values of a []any (IN),
	// for every key. Values are scalars of the column's type, as pipeline.CheckWhere accepts them
	// (a timestamp as an RFC 3339 string, a number as a json.Number or a Go number).
	Where  map[string]any
	Cursor int64 // only the rows of the load given this cursor; 0: all
	// CursorEnd, when above Cursor, widens Cursor to the loads given every cursor from Cursor
	// to CursorEnd.
	CursorEnd int64
	// After keeps the rows after this one: a Page's Next. Rows are numbered as they are inserted,
	// but become visible as their loads commit: a page read while loads run may miss rows of a
	// load that commits later with lower numbers. To follow a dataset as it grows, read each new
	// cursor's rows instead.
	After int64
	Limit int // 1 to MaxLimit rows; 0: DefaultLimit
}

// Limits of a Query.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxWhereValues caps the values of a Query's Where, a list counting each of its values: each
	// is a statement parameter, and SQLite takes at most 32,766 of them.
	MaxWhereValues = 1000
)

// Page is the rows a Query selected, oldest first.
type Page struct {
	// Rows holds each row's declared columns, null ones as nil, and its load's cursor as
	// "_cursor" (int64). Values are string, int64, float64, bool, a timestamp as an RFC 3339
	// string in UTC with nine fraction digits, json as json.RawMessage.
	Rows []map[string]any
	Next int64 // the After of the next page, or 0 when there are no more rows
}

// ErrBadQuery: a Query that cannot be run, such as one with a where on an unknown column.
var ErrBadQuery = errors.New("bad dataset query")

// Rows reads the rows of q.Tenant in the dataset, oldest first, read with schema s. The SQL is
// built from s's names and this package's only; every value is an argument.
func (db *DB) Rows(ctx context.Context, datasetUUID string, s *pipeline.Schema, q Query) (Page, error) {
	d, err := datasetOf(datasetUUID)
	if err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrBadQuery, err)
	}
	if err := checkSchema(s); err != nil {
		return Page{}, err
	}
	limit := q.Limit
	switch {
	case q.Tenant == "":
		return Page{}, fmt.Errorf("%w: no tenant", ErrBadQuery)
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return Page{}, fmt.Errorf("%w: limit %d is not between 1 and %d", ErrBadQuery, limit, MaxLimit)
	}
	if q.Cursor < 0 || q.After < 0 || q.CursorEnd < 0 {
		return Page{}, fmt.Errorf("%w: cursor and after must not be negative", ErrBadQuery)
	}

	st, err := db.selectRows(d, s, q.Tenant, cursors{q.Cursor, max(q.Cursor, q.CursorEnd)}, q.Where)
	if err != nil {
		return Page{}, err
	}
	st.add(" AND t._row > ", st.p(q.After), " ORDER BY t._row LIMIT ", st.p(limit+1))

	rows, err := db.b.reader().query(ctx, st.sql.String(), st.args...)
	if err != nil {
		return Page{}, fmt.Errorf("read dataset %s: %w", d.uuid, err)
	}
	defer rows.Close()
	page := Page{Rows: []map[string]any{}}
	var last int64
	vals := make([]any, len(s.Columns)+2)
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	for rows.Next() {
		if len(page.Rows) == limit {
			page.Next = last
			break
		}
		if err := rows.Scan(dest...); err != nil {
			return Page{}, fmt.Errorf("read dataset %s: %w", d.uuid, err)
		}
		row := make(map[string]any, len(s.Columns)+1)
		last = vals[0].(int64)
		row["_cursor"] = vals[1].(int64)
		for i, c := range s.Columns {
			if row[c.Name], err = outValue(c.Type, vals[i+2]); err != nil {
				return Page{}, fmt.Errorf("read dataset %s: column %s: %w", d.uuid, c.Name, err)
			}
		}
		page.Rows = append(page.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("read dataset %s: %w", d.uuid, err)
	}
	return page, nil
}

// Scan reads the given columns of every row of tenant in the dataset that where keeps, in no
// particular order, read with schema s, in one statement (one snapshot of the table), and hands each row's
// values, in the order of columns, to yield. A column is one of s's, or "_cursor": the row's
// load's cursor (int64). Values are nil, string, int64, float64, bool, time.Time (UTC) and, for
// json, the document's text. Scan stops with yield's error when yield fails.
func (db *DB) Scan(ctx context.Context, datasetUUID string, s *pipeline.Schema, tenant string, where map[string]any, columns []string, yield func(vals []any) error) error {
	d, err := datasetOf(datasetUUID)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadQuery, err)
	}
	if err := checkSchema(s); err != nil {
		return err
	}
	if tenant == "" {
		return fmt.Errorf("%w: no tenant", ErrBadQuery)
	}
	types := make([]string, len(columns))
	st := &sqlText{b: db.b}
	st.add("SELECT 0")
	ledger := false // the join with the ledger costs a lookup per row: only for a cursor
	for i, name := range columns {
		if name == "_cursor" {
			types[i], ledger = pipeline.TypeInteger, true
			st.add(", l.cursor")
			continue
		}
		c, ok := column(s, name)
		if !ok {
			return fmt.Errorf("%w: unknown column %q", ErrBadQuery, name)
		}
		types[i] = c.Type
		if c.Type == pipeline.TypeJSON {
			st.add(", CAST(t.", quote(c.Name), " AS TEXT)")
		} else {
			st.add(", t.", quote(c.Name))
		}
	}
	if err := db.whereRows(st, d, s, tenant, cursors{}, where, ledger); err != nil {
		return err
	}
	rows, err := db.b.reader().query(ctx, st.sql.String(), st.args...)
	if err != nil {
		return fmt.Errorf("read dataset %s: %w", d.uuid, err)
	}
	defer rows.Close()
	vals := make([]any, len(columns)+1)
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	out := make([]any, len(columns))
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("read dataset %s: %w", d.uuid, err)
		}
		for i, typ := range types {
			if out[i], err = scanValue(typ, vals[i+1]); err != nil {
				return fmt.Errorf("read dataset %s: column %s: %w", d.uuid, columns[i], err)
			}
		}
		if err := yield(out); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read dataset %s: %w", d.uuid, err)
	}
	return nil
}

// scanValue is a value as a database returns it, as Scan yields it.
func scanValue(typ string, v any) (any, error) {
	if t, ok := v.(time.Time); ok && typ == pipeline.TypeTimestamp {
		return t.UTC(), nil
	}
	v, err := outValue(typ, v)
	switch v := v.(type) {
	case json.RawMessage:
		return string(v), err
	case string:
		if typ == pipeline.TypeTimestamp {
			return time.Parse(time.RFC3339Nano, v)
		}
	}
	return v, err
}

// selectRows is the head of a statement that selects the rows of tenant in dataset d, read with
// schema s, as (_row, cursor, columns...): those whereRows keeps.
// cursors are the loads a read keeps: those given a cursor from from to to; from 0: every load.
type cursors struct{ from, to int64 }

func (db *DB) selectRows(d dataset, s *pipeline.Schema, tenant string, cursor cursors, where map[string]any) (*sqlText, error) {
	st := &sqlText{b: db.b}
	st.add("SELECT t._row, l.cursor")
	for _, c := range s.Columns {
		if c.Type == pipeline.TypeJSON {
			st.add(", CAST(t.", quote(c.Name), " AS TEXT)")
		} else {
			st.add(", t.", quote(c.Name))
		}
	}
	return st, db.whereRows(st, d, s, tenant, cursor, where, true)
}

// whereRows adds to a statement's select list the FROM and WHERE clauses that keep the rows of
// tenant in dataset d (t, joined with its load's ledger entry l when ledger is set): those of the loads given cursor
// whose columns equal where's values. The SQL is built from s's names and this
// package's only; every value is an argument.
func (db *DB) whereRows(st *sqlText, d dataset, s *pipeline.Schema, tenant string, cursor cursors, where map[string]any, ledger bool) error {
	st.add(" FROM ", quote(d.table), " t")
	if ledger {
		st.add(" JOIN baton_dataset_batches l ON l.seq = t._batch")
	}
	st.add(" WHERE t.org_id = ", st.p(tenant))
	switch {
	case cursor.from > 0 && cursor.to > cursor.from:
		st.add(" AND t._batch IN (SELECT seq FROM baton_dataset_batches WHERE dataset_uuid = ", st.p(d.uuid),
			" AND cursor BETWEEN ", st.p(cursor.from), " AND ", st.p(cursor.to), ")")
	case cursor.from > 0:
		st.add(" AND t._batch = (SELECT seq FROM baton_dataset_batches WHERE dataset_uuid = ", st.p(d.uuid),
			" AND cursor = ", st.p(cursor.from), ")")
	}
	keys := make([]string, 0, len(where))
	values := 0
	for k, v := range where {
		keys = append(keys, k)
		values++
		if list, ok := v.([]any); ok {
			values += len(list) - 1
		}
	}
	if values > MaxWhereValues {
		return fmt.Errorf("%w: where holds %d values; at most %d in all", ErrBadQuery, values, MaxWhereValues)
	}
	slices.Sort(keys) // the same query, the same SQL: statements are cached by their text
	for _, k := range keys {
		c, ok := column(s, k)
		if !ok {
			return fmt.Errorf("%w: where: unknown column %q", ErrBadQuery, k)
		}
		vals, isList := where[k].([]any)
		if !isList {
			vals = []any{where[k]}
		}
		if len(vals) == 0 {
			return fmt.Errorf("%w: where %s: an empty list", ErrBadQuery, k)
		}
		st.add(" AND t.", quote(k))
		for i, v := range vals {
			w, err := whereValue(c.Type, v)
			if err != nil {
				return fmt.Errorf("%w: where %s: %w", ErrBadQuery, k, err)
			}
			switch {
			case !isList:
				st.add(" = ", st.p(db.b.arg(w)))
			case i == 0:
				st.add(" IN (", st.p(db.b.arg(w)))
			default:
				st.add(", ", st.p(db.b.arg(w)))
			}
		}
		if isList {
			st.add(")")
		}
	}
	return nil
}

// outValue is a value as a database returns it, as Rows returns it.
func outValue(typ string, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch typ {
	case pipeline.TypeString:
		switch v := v.(type) {
		case string:
			return v, nil
		case []byte:
			return string(v), nil
		}
	case pipeline.TypeInteger:
		if v, ok := v.(int64); ok {
			return v, nil
		}
	case pipeline.TypeNumber:
		switch v := v.(type) {
		case float64:
			return v, nil
		case int64:
			return float64(v), nil
		}
	case pipeline.TypeBoolean:
		switch v := v.(type) {
		case bool:
			return v, nil
		case int64:
			return v != 0, nil
		}
	case pipeline.TypeTimestamp:
		switch v := v.(type) {
		case time.Time:
			return formatTime(v), nil
		case string:
			return v, nil
		}
	case pipeline.TypeJSON:
		var raw []byte
		switch v := v.(type) {
		case string:
			raw = []byte(v)
		case []byte:
			raw = v
		default:
			return nil, fmt.Errorf("unexpected %T", v)
		}
		var b bytes.Buffer // PostgreSQL writes jsonb with spaces
		if err := json.Compact(&b, raw); err != nil {
			return nil, err
		}
		return json.RawMessage(b.Bytes()), nil
	}
	return nil, fmt.Errorf("unexpected %T for a column of type %s", v, typ)
}

// whereValue is a where value as a Row holds a value of a column of type typ.
func whereValue(typ string, v any) (any, error) {
	bad := func(want string) error { return fmt.Errorf("%v (%T) is not %s", v, v, want) }
	if s, ok := v.(string); ok && strings.ContainsRune(s, 0) {
		return nil, fmt.Errorf("%q contains a NUL character, which no column holds", s)
	}
	switch typ {
	case pipeline.TypeString:
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, bad("a string")
	case pipeline.TypeInteger:
		switch n := v.(type) {
		case json.Number:
			if json.Valid([]byte(n)) {
				if i, reason := integer(string(n)); reason == "" {
					return i, nil
				}
			}
		case int:
			return int64(n), nil
		case int32:
			return int64(n), nil
		case int64:
			return n, nil
		case uint32:
			return int64(n), nil
		case float64:
			if n == math.Trunc(n) && n >= math.MinInt64 && n < math.MaxInt64 {
				return int64(n), nil
			}
		}
		return nil, bad("an integer")
	case pipeline.TypeNumber:
		switch n := v.(type) {
		case json.Number:
			if f, err := strconv.ParseFloat(string(n), 64); err == nil {
				return f, nil
			}
		case float64:
			return n, nil
		case float32:
			return float64(n), nil
		case int:
			return float64(n), nil
		case int64:
			return float64(n), nil
		}
		return nil, bad("a number")
	case pipeline.TypeBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, bad("a boolean")
	case pipeline.TypeTimestamp:
		switch t := v.(type) {
		case time.Time:
			return t.UTC().Truncate(time.Microsecond), nil
		case string:
			if p, err := time.Parse(time.RFC3339Nano, t); err == nil {
				return p.UTC().Truncate(time.Microsecond), nil
			}
		}
		return nil, bad("an RFC 3339 timestamp")
	case pipeline.TypeJSON:
		switch v.(type) {
		case string, bool, json.Number, float64, int, int64:
			b, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			return json.RawMessage(b), nil
		}
		return nil, bad("a scalar")
	}
	return nil, fmt.Errorf("unknown column type %s", typ)
}
