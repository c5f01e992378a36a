//go:build cgo

package gate

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

// Gate decides, before anything runs, whether SQL may run: it reads the statement with
// DuckDB's own parser (json_serialize_sql, which parses and never binds or executes) and walks
// the whole tree, refusing anything it does not know to be a read of named relations. A lexer
// would have to guess where a relation may appear; the parser knows, at every depth.
type Gate struct {
	db *sql.DB
}

// Open opens a gate: a DuckDB of its own that holds nothing, for its parser.
func Open() (*Gate, error) {
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
	return &Gate{db: db}, nil
}

// Close closes the gate's parser.
func (g *Gate) Close() error { return g.db.Close() }

// Check gates text. A refusal is a *query.RejectedError that says why.
func (g *Gate) Check(ctx context.Context, text string) (*query.Statement, error) {
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
	if err := w.walk(root, nil); err != nil {
		return nil, err
	}
	st := &query.Statement{SQL: text, Names: w.names, AllColumns: w.all}
	for name := range w.single {
		if w.tables[name] || w.aliases[name] || w.ctes[name] {
			st.AllColumns = true // a relation named as a value: its whole row
		}
	}
	for name := range w.tables {
		st.Relations = append(st.Relations, name)
	}
	slices.Sort(st.Relations)
	return st, nil
}

// walker walks a parse tree: every object in it, at every depth.
type walker struct {
	tables  map[string]bool // names read as tables where no CTE of the name is in scope
	ctes    map[string]bool // names the statement defines as CTEs, wherever
	aliases map[string]bool // aliases of relations
	names   map[string]bool // the parts of every column reference
	single  map[string]bool // column references of one part
	all     bool            // the statement may read columns it does not name
}

// scope is the CTEs in scope at a place of the tree, innermost first.
type scope struct {
	name string
	up   *scope
}

func (s *scope) with(name string) *scope { return &scope{name: name, up: s} }

func (s *scope) has(name string) bool {
	for ; s != nil; s = s.up {
		if s.name == name {
			return true
		}
	}
	return false
}

// Kinds of parse tree nodes, as json_serialize_sql names them.
var (
	// queryNodes may appear; any other query node is refused. The parser writes a statement's
	// CTEs as the cte_map of the node they belong to, and a recursive CTE's body as a
	// RECURSIVE_CTE_NODE; a CTE_NODE, which it does not write, is refused with the others.
	queryNodes = map[string]bool{"SELECT_NODE": true, "SET_OPERATION_NODE": true, "RECURSIVE_CTE_NODE": true}
	// tableRefs are the kinds of relation a FROM clause may hold; the kinds DuckDB has beyond
	// them (SHOW_REF for DESCRIBE and SUMMARIZE, COLUMN_DATA, DELIM_GET, BOUND_REF...) are refused.
	tableRefs = map[string]bool{"BASE_TABLE": true, "SUBQUERY": true, "JOIN": true, "TABLE_FUNCTION": true,
		"EXPRESSION_LIST": true, "EMPTY_FROM": true, "EMPTY": true, "PIVOT": true}
	knownRefKinds = map[string]bool{"INVALID": true, "CTE": true, "SHOW_REF": true, "COLUMN_DATA": true,
		"DELIM_GET": true, "BOUND_REF": true}
	// tableFunctions may be read in FROM: they make rows from their arguments and read nothing.
	tableFunctions = map[string]bool{"range": true, "generate_series": true, "unnest": true}
	// relationName is how a relation is named: a dataset's name, or its uuid.
	relationName = regexp.MustCompile(`^([a-z][a-z0-9_]{0,127}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)
)

// walk walks v, in scope the CTEs of in.
//
// Where a CTE is in scope is DuckDB's rule (TestGateScopesCTEsAsDuckDBDoes holds the gate to it
// on a real database): a CTE of a query node's cte_map is in scope in the whole node (its select
// list, FROM, WHERE, GROUP BY, HAVING, QUALIFY, ORDER BY and LIMIT, both sides of a set
// operation) and everything nested in it, and in the CTEs of the same WITH defined after it,
// never in those before it nor in its own body; except that the body of a recursive CTE (WITH
// RECURSIVE and a UNION [ALL], a RECURSIVE_CTE_NODE) sees the CTE itself in the right side of
// the UNION. A CTE defined inside a subquery is in scope in that subquery only. Every other
// name read as a table is a relation the statement needs: bound by no CTE, it would be bound by
// whatever the engine's catalog holds under the name.
func (w *walker) walk(v any, in *scope) error {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			if err := w.walk(e, in); err != nil {
				return err
			}
		}
	case map[string]any:
		if err := w.node(v, in); err != nil {
			return err
		}
		if m, ok := v["cte_map"].(map[string]any); ok {
			entries, _ := m["map"].([]any)
			for _, e := range entries {
				e, _ := e.(map[string]any)
				if err := w.walk(e["value"], in); err != nil {
					return err
				}
				if k, ok := e["key"].(string); ok {
					name := lowerASCII(k)
					w.ctes[name] = true
					in = in.with(name)
				}
			}
		}
		recursive := in
		if typ, _ := v["type"].(string); typ == "RECURSIVE_CTE_NODE" {
			if name, ok := v["cte_name"].(string); ok {
				recursive = in.with(lowerASCII(name))
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the same refusal for the same statement
		for _, k := range keys {
			sc := in
			switch k {
			case "cte_map":
				continue
			case "right":
				sc = recursive
			}
			if err := w.walk(v[k], sc); err != nil {
				return err
			}
		}
	}
	return nil
}

// node checks one object of the tree, in scope the CTEs of in.
func (w *walker) node(n map[string]any, in *scope) error {
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
		w.aliases[lowerASCII(alias)] = true
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
		lower := lowerASCII(name)
		if !relationName.MatchString(lower) {
			return query.Rejectf("%q is not a dataset's name: a query reads only datasets, by their names (no files, no paths)", name)
		}
		if !in.has(lower) {
			w.tables[lower] = true
		}
	case "TABLE_FUNCTION":
		f, _ := n["function"].(map[string]any)
		name, _ := f["function_name"].(string)
		if !tableFunctions[lowerASCII(name)] {
			return query.Rejectf("table function %s is not allowed: a query reads only datasets, by their names", name)
		}
	case "PIVOT":
		if isPivot(n) {
			return query.Rejectf("%s", pivotRefused)
		}
	}
	return nil
}

// pivotRefused is the reason a PIVOT is refused.
const pivotRefused = "PIVOT is not allowed in a query: write each of its columns as an aggregate with FILTER (WHERE …)"

// isPivot says whether a PIVOT relation is a PIVOT; the parser writes an UNPIVOT as one too,
// with the names of its value columns, and no aggregates nor pivoted expressions.
func isPivot(n map[string]any) bool {
	if names, _ := n["unpivot_names"].([]any); len(names) == 0 {
		return true
	}
	if aggs, _ := n["aggregates"].([]any); len(aggs) > 0 {
		return true
	}
	pivots, _ := n["pivots"].([]any)
	for _, p := range pivots {
		p, _ := p.(map[string]any)
		if exprs, _ := p["pivot_expressions"].([]any); len(exprs) > 0 {
			return true
		}
	}
	return false
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

// functionRefused is the reason a function outside allowedFunctions is refused.
const functionRefused = "a query may call only the functions of a read-only analysis (arithmetic, string, date and time, regular expression, list and struct, JSON value, aggregate and window functions)"

// expression checks an expression node: a function it calls must be allowed.
func (w *walker) expression(class string, n map[string]any) error {
	if class != "FUNCTION" && class != "AGGREGATE" && class != "WINDOW" {
		return nil
	}
	name, _ := n["function_name"].(string)
	schema, _ := n["schema"].(string)
	catalog, _ := n["catalog"].(string)
	// DuckDB's parser itself names some functions it writes in main (a list literal is
	// main.list_value); a name is judged alone, wherever it says it lives.
	if (schema != "" && schema != "main") || catalog != "" {
		return query.Rejectf("function %s is named with a schema or catalog", strings.Trim(catalog+"."+schema+"."+name, "."))
	}
	if !allowedFunctions[lowerASCII(name)] {
		return query.Rejectf("function %s is not allowed: %s", name, functionRefused)
	}
	return nil
}

// lowerASCII lower-cases the ASCII letters of s, as DuckDB folds the case of a name: to DuckDB
// a CTE named "Key" with a Kelvin sign (U+212A), which Unicode lower-cases to k, is not key.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func describeRef(typ string) string {
	if typ == "SHOW_REF" {
		return "DESCRIBE, SHOW or SUMMARIZE"
	}
	return "a " + strings.ToLower(typ) + " relation"
}
