package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/pipeline"
)

// ErrBadSchema: a schema that no table can be made for. Schemas of parsed pipeline documents
// never are; the check guards the SQL, whose identifiers come from the schema.
var ErrBadSchema = errors.New("bad dataset schema")

// columnName is the pattern of a declared column: the pipeline's, less the names beginning with
// "_", which the table keeps for itself.
var columnName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// TableName is the name of the dataset's table: "ds_" followed by the 32 hex digits of its uuid,
// or "" when datasetUUID is not a uuid.
func TableName(datasetUUID string) string {
	id, err := uuid.Parse(datasetUUID)
	if err != nil {
		return ""
	}
	return "ds_" + strings.ReplaceAll(id.String(), "-", "")
}

// dataset names one dataset's table.
type dataset struct {
	uuid  string // canonical: lower case, with dashes
	table string
}

func datasetOf(datasetUUID string) (dataset, error) {
	id, err := uuid.Parse(datasetUUID)
	if err != nil {
		return dataset{}, fmt.Errorf("dataset uuid %q: %w", datasetUUID, err)
	}
	return dataset{uuid: id.String(), table: TableName(datasetUUID)}, nil
}

// checkSchema refuses a schema whose names could not be column names of a table, or whose unique
// key and indexes do not name its columns.
func checkSchema(s *pipeline.Schema) error {
	if s == nil || len(s.Columns) == 0 {
		return fmt.Errorf("%w: no columns", ErrBadSchema)
	}
	seen := make(map[string]bool, len(s.Columns))
	for _, c := range s.Columns {
		switch {
		case c.Name == "org_id" || !columnName.MatchString(c.Name):
			return fmt.Errorf("%w: column name %q is not allowed", ErrBadSchema, c.Name)
		case seen[c.Name]:
			return fmt.Errorf("%w: duplicate column %q", ErrBadSchema, c.Name)
		case !knownType(c.Type):
			return fmt.Errorf("%w: column %q has unknown type %q", ErrBadSchema, c.Name, c.Type)
		}
		seen[c.Name] = true
	}
	if len(s.Unique) == 0 {
		return fmt.Errorf("%w: no unique key", ErrBadSchema)
	}
	for _, cols := range append([][]string{s.Unique}, s.Indexes...) {
		if len(cols) == 0 {
			return fmt.Errorf("%w: an index names no column", ErrBadSchema)
		}
		for _, name := range cols {
			if !seen[name] {
				return fmt.Errorf("%w: unknown column %q in a key", ErrBadSchema, name)
			}
		}
	}
	return nil
}

func knownType(t string) bool {
	switch t {
	case pipeline.TypeString, pipeline.TypeInteger, pipeline.TypeNumber, pipeline.TypeBoolean,
		pipeline.TypeTimestamp, pipeline.TypeJSON:
		return true
	}
	return false
}

// column finds a column of s by name.
func column(s *pipeline.Schema, name string) (pipeline.Column, bool) {
	i := slices.IndexFunc(s.Columns, func(c pipeline.Column) bool { return c.Name == name })
	if i < 0 {
		return pipeline.Column{}, false
	}
	return s.Columns[i], true
}

// notNull reports whether the column may not hold null: it is required, or part of the unique
// key. A null in the key would never conflict (SQL nulls are distinct), so the row would be
// inserted again by every load that carries it.
func notNull(s *pipeline.Schema, c pipeline.Column) bool {
	return c.Required || slices.Contains(s.Unique, c.Name)
}

// schemaJSON is the schema as the bookkeeping table keeps it; two schemas are the same when their
// JSON is.
func schemaJSON(s *pipeline.Schema) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // strings and bools only
	}
	return b
}

// quote quotes an identifier. Identifiers come only from checked schemas and from this package,
// so none holds a quote.
func quote(name string) string { return `"` + name + `"` }

// quoteList quotes names and joins them with ", ".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	return strings.Join(q, ", ")
}

// indexName names the index of table on cols after the columns, so that ensuring the same index
// twice finds it.
func indexName(table string, cols []string) string {
	h := fnv.New64a()
	h.Write([]byte(strings.Join(cols, ",")))
	return fmt.Sprintf("%s_%016x", table, h.Sum64())
}

// timeLayout writes timestamps in UTC with nine fraction digits, so that they sort as text (SQLite
// keeps them so) and read alike from both databases.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
