//go:build cgo

package engine

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/baton-dev/baton/internal/query"
)

// MaxSQLBytes is the longest SQL the gate reads.
const MaxSQLBytes = 64 << 10

// gate decides, before anything runs, whether SQL may run: it reads the statement with
// DuckDB's own parser (json_serialize_sql, which parses and never binds or executes) and walks
// the whole tree, refusing anything it does not know to be a read of named relations. A lexer
// would have to guess where a relation may appear; the parser knows, at every depth.
type gate struct {
	db *sql.DB
}

func newGate() (*gate, error) {
	// The parser's own database holds nothing and can reach nothing.
	c, err := duckdb.NewConnector("?autoinstall_known_extensions=false&autoload_known_extensions=false&enable_external_access=false&threads=1", nil)
	if err != nil {
		return nil, fmt.Errorf("query gate: open DuckDB: %w", err)
	}
	db := sql.OpenDB(c)
	if _, err := db.Exec("SET lock_configuration = true"); err != nil {
		db.Close()
		return nil, fmt.Errorf("query gate: lock DuckDB: %w", err)
	}
	return &gate{db: db}, nil
}

func (g *gate) close() error { return g.db.Close() }

// check gates text. A refusal is a *query.RejectedError that says why.
func (g *gate) check(ctx context.Context, text string) (*query.Statement, error) {
	switch {
	case strings.TrimSpace(text) == "":
		return nil, query.Rejectf("the statement is empty")
	case len(text) > MaxSQLBytes:
		return nil, query.Rejectf("the statement is %d bytes; at most %d", len(text), MaxSQLBytes)
	case !utf8.ValidString(text):
		return nil, query.Rejectf("the statement is not valid UTF-8")
	case strings.ContainsRune(text, 0):
		return nil, query.Rejectf("the statement holds a NUL character")
	}
	var tree string
	if err := g.db.QueryRowContext(ctx, "SELECT json_serialize_sql(?::VARCHAR)::VARCHAR", text).Scan(&tree); err != nil {
		return nil, fmt.Errorf("query gate: parse: %w", err)
	}
	return readTree(text, []byte(tree))
}

// readTree gates the parse tree json_serialize_sql wrote for text.
func readTree(text string, tree []byte) (*query.Statement, error) {
	var doc struct {
		Error      bool              `json:"error"`
		ErrorType  string            `json:"error_type"`
		Message    string            `json:"error_message"`
		Statements []json.RawMessage `json:"statements"`
	}
	dec := json.NewDecoder(bytes.NewReader(tree))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("query gate: read the parse tree: %w", err)
	}
	switch {
	case doc.Error && strings.Contains(doc.Message, "Only SELECT statements"):
		return nil, query.Rejectf("only a read-only SELECT (or WITH … SELECT) may run")
	case doc.Error:
		return nil, query.Rejectf("%s", strings.TrimSpace(doc.Message))
	case len(doc.Statements) == 0:
		return nil, query.Rejectf("the statement is empty")
	case len(doc.Statements) > 1:
		return nil, query.Rejectf("%d statements: one SELECT may run at a time", len(doc.Statements))
	}
	var root any
	dec = json.NewDecoder(bytes.NewReader(doc.Statements[0]))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("query gate: read the parse tree: %w", err)
	}
	w := &walker{tables: map[string]bool{}, ctes: map[string]bool{}, aliases: map[string]bool{}, names: map[string]bool{}, single: map[string]bool{}}
	if err := w.walk(root); err != nil {
		return nil, err
	}
	st := &query.Statement{SQL: text, Names: w.names, AllColumns: w.all}
	for name := range w.single {
		if w.tables[name] || w.aliases[name] || w.ctes[name] {
			st.AllColumns = true // a relation named as a value: its whole row
		}
	}
	for name := range w.tables {
		if w.ctes[name] {
			st.Optional = append(st.Optional, name)
		} else {
			st.Relations = append(st.Relations, name)
		}
	}
	slices.Sort(st.Relations)
	slices.Sort(st.Optional)
	return st, nil
}

// walker walks a parse tree: every object in it, at every depth.
type walker struct {
	tables  map[string]bool // names read as tables
	ctes    map[string]bool // names the statement defines as CTEs
	aliases map[string]bool // aliases of relations
	names   map[string]bool // the parts of every column reference
	single  map[string]bool // column references of one part
	all     bool            // the statement may read columns it does not name
}

// Kinds of parse tree nodes, as json_serialize_sql names them.
var (
	// queryNodes may appear; any other query node is refused.
	queryNodes = map[string]bool{"SELECT_NODE": true, "SET_OPERATION_NODE": true, "RECURSIVE_CTE_NODE": true, "CTE_NODE": true}
	// tableRefs are the kinds of relation a FROM clause may hold; the kinds DuckDB has beyond
	// them (SHOW_REF for DESCRIBE and SUMMARIZE, COLUMN_DATA, DELIM_GET, BOUND_REF...) are refused.
	tableRefs = map[string]bool{"BASE_TABLE": true, "SUBQUERY": true, "JOIN": true, "TABLE_FUNCTION": true,
		"EXPRESSION_LIST": true, "EMPTY_FROM": true, "EMPTY": true, "PIVOT": true}
	knownRefKinds = map[string]bool{"INVALID": true, "CTE": true, "SHOW_REF": true, "COLUMN_DATA": true,
		"DELIM_GET": true, "BOUND_REF": true}
	// tableFunctions may be read in FROM: they make rows from their arguments and read nothing.
	tableFunctions = map[string]bool{"range": true, "generate_series": true, "unnest": true}
	// deniedFunctions read files, settings or the environment, or run SQL of their own.
	deniedFunctions = map[string]bool{"getenv": true, "current_setting": true, "query": true, "query_table": true,
		"glob": true, "checkpoint": true, "force_checkpoint": true, "getvariable": true, "load_extension": true,
		"enable_logging": true, "disable_logging": true, "truncate_duckdb_logs": true}
	deniedPrefixes = []string{"read_", "write_", "parquet_", "sqlite_", "postgres_", "mysql_", "delta_", "iceberg_",
		"pragma_", "duckdb_", "json_execute", "http", "s3", "file", "copy"}
	// relationName is how a relation is named: a dataset's name, or its uuid.
	relationName = regexp.MustCompile(`^([a-z][a-z0-9_]{0,127}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)
)

func (w *walker) walk(v any) error {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			if err := w.walk(e); err != nil {
				return err
			}
		}
	case map[string]any:
		if err := w.node(v); err != nil {
			return err
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the same refusal for the same statement
		for _, k := range keys {
			if err := w.walk(v[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// node checks one object of the tree.
func (w *walker) node(n map[string]any) error {
	if m, ok := n["cte_map"].(map[string]any); ok {
		entries, _ := m["map"].([]any)
		for _, e := range entries {
			if e, ok := e.(map[string]any); ok {
				if k, ok := e["key"].(string); ok {
					w.ctes[strings.ToLower(k)] = true
				}
			}
		}
	}
	typ, _ := n["type"].(string)
	if class, ok := n["class"].(string); ok {
		w.columns(class, n)
		return w.expression(class, n)
	}
	switch {
	case typ == "":
		return nil
	case strings.HasSuffix(typ, "_NODE") && !queryNodes[typ]:
		return query.Rejectf("a %s is not allowed: only SELECT queries may run", strings.ToLower(strings.TrimSuffix(typ, "_NODE")))
	case knownRefKinds[typ] && n["alias"] != nil:
		return query.Rejectf("%s is not allowed in a query", describeRef(typ))
	case !tableRefs[typ] || n["alias"] == nil:
		return nil // not a relation: a modifier, an order, a join condition's kind...
	}
	if alias, _ := n["alias"].(string); alias != "" {
		w.aliases[strings.ToLower(alias)] = true
	}
	if renamed, _ := n["column_name_alias"].([]any); len(renamed) > 0 {
		w.all = true // columns renamed by position
	}
	switch typ {
	case "JOIN":
		if ref, _ := n["ref_type"].(string); ref != "REGULAR" && ref != "CROSS" && ref != "" {
			w.all = true // a natural (or other) join matches columns it does not name
		}
		using, _ := n["using_columns"].([]any)
		for _, c := range using {
			if c, ok := c.(string); ok {
				w.names[strings.ToLower(c)] = true
			}
		}
	case "BASE_TABLE":
		name, _ := n["table_name"].(string)
		schema, _ := n["schema_name"].(string)
		catalog, _ := n["catalog_name"].(string)
		if schema != "" || catalog != "" {
			return query.Rejectf("relation %q is named with a schema or catalog: name a dataset alone", strings.Trim(catalog+"."+schema+"."+name, "."))
		}
		lower := strings.ToLower(name)
		if !relationName.MatchString(lower) {
			return query.Rejectf("%q is not a dataset's name: a query reads only datasets, by their names (no files, no paths)", name)
		}
		w.tables[lower] = true
	case "TABLE_FUNCTION":
		f, _ := n["function"].(map[string]any)
		name, _ := f["function_name"].(string)
		if !tableFunctions[strings.ToLower(name)] {
			return query.Rejectf("table function %s is not allowed: a query reads only datasets, by their names", name)
		}
	}
	return nil
}

// columns notes the columns an expression node may read.
func (w *walker) columns(class string, n map[string]any) {
	switch class {
	case "COLUMN_REF":
		parts, _ := n["column_names"].([]any)
		for _, p := range parts {
			if p, ok := p.(string); ok {
				w.names[strings.ToLower(p)] = true
				if len(parts) == 1 {
					w.single[strings.ToLower(p)] = true
				}
			}
		}
	case "STAR", "POSITIONAL_REFERENCE":
		w.all = true
	}
}

// expression checks an expression node: a function call must be allowed.
func (w *walker) expression(class string, n map[string]any) error {
	if class != "FUNCTION" && class != "AGGREGATE" && class != "WINDOW" {
		return nil
	}
	name, _ := n["function_name"].(string)
	schema, _ := n["schema"].(string)
	catalog, _ := n["catalog"].(string)
	lower := strings.ToLower(name)
	// DuckDB's parser itself names some functions it writes in main (a list literal is
	// main.list_value); a name is judged alone, wherever it says it lives.
	if (schema != "" && schema != "main") || catalog != "" {
		return query.Rejectf("function %s is named with a schema or catalog", strings.Trim(catalog+"."+schema+"."+name, "."))
	}
	if deniedFunctions[lower] {
		return query.Rejectf("function %s is not allowed: it reads files, settings or the environment", name)
	}
	for _, p := range deniedPrefixes {
		if strings.HasPrefix(lower, p) {
			return query.Rejectf("function %s is not allowed: it reads files, settings or the environment", name)
		}
	}
	return nil
}

func describeRef(typ string) string {
	if typ == "SHOW_REF" {
		return "DESCRIBE, SHOW or SUMMARIZE"
	}
	return "a " + strings.ToLower(typ) + " relation"
}
