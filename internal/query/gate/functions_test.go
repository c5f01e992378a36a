//go:build cgo

package gate

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/query"
)

// refusedFunctions are the functions of the engine outside allowedFunctions, by group, each with
// the reason none of it may be called. A name that ends with * stands for every name it begins.
var refusedFunctions = []struct {
	why   string
	names []string
}{
	{"it takes SQL text, or runs SQL of its own, which the gate never reads", []string{
		"json_serialize_sql", "json_serialize_plan", "json_deserialize_sql", "json_execute_serialized_sql",
		"query", "query_table", "sql_auto_complete", "check_peg_parser", "enable_peg_parser",
		"disable_peg_parser"}},
	{"it reads files, or other databases", []string{
		"read_*", "glob", "parquet_*", "sniff_csv", "arrow_scan", "arrow_scan_dumb", "copy_database",
		"import_database", "add_parquet_key"}},
	{"it reads the engine's settings, variables, secrets, environment or session", []string{
		"current_setting", "getvariable", "current_query", "current_query_id", "current_connection_id",
		"current_transaction_id", "txid_current", "current_user", "current_role", "session_user", "user",
		"inet_client_addr", "inet_client_port", "inet_server_addr", "inet_server_port", "version",
		"platform", "user_agent", "extension_versions", "which_secret", "get_block_size",
		"all_profiling_output"}},
	{"it reads the engine's catalog: its databases, schemas, tables, views, types, functions, sequences", []string{
		"duckdb_*", "pragma_*", "current_catalog", "current_database", "current_schema", "current_schemas",
		"in_search_path", "nextval", "currval", "col_description", "obj_description", "shobj_description",
		"format_type", "format_pg_type", "map_to_pg_oid", "has_*_privilege", "collations", "database_list",
		"database_size", "functions", "metadata_info", "show", "show_databases", "show_tables",
		"show_tables_expanded", "storage_info", "table_info", "seq_scan"}},
	{"it is one of pg_catalog's helpers for PostgreSQL clients: catalog lookups and constants, and the rest under DuckDB's own names", []string{
		"pg_*"}},
	{"it has effects on the session or the engine: the random generator, a checkpoint, logs, profiling, settings of the optimizer, sleeping", []string{
		"setseed", "checkpoint", "force_checkpoint", "enable_logging", "disable_logging",
		"truncate_duckdb_logs", "write_log", "sleep_ms", "enable_*", "disable_*", "verify_*"}},
	{"it is a table function, and FROM reads only range, generate_series and unnest", []string{
		"json_each", "json_tree", "repeat_row", "summary", "test_all_types", "test_vector_types",
		"histogram_values", "icu_calendar_names"}},
	{"it is an engine internal, a collation (COLLATE names one) or a helper for debugging", []string{
		"__internal_*", "combine", "finalize", "constant_or_null", "create_sort_key", "stats", "vector_type",
		"timetz_byte_comparable", "unpivot_list", "sum_no_overflow", "variant_bytes_to_variant",
		"variant_to_parquet_variant", "parse_duckdb_log_message", "alias", "icu_sort_key",
		"icu_collate_*", "make_type", "get_type", "replace_type", "is_histogram_other_bin"}},
	{"it is a function of geometries, of no family a read-only analysis of datasets needs", []string{
		"st_*"}},
}

// refusedBecause is why name is refused, or "".
func refusedBecause(name string) string {
	for _, g := range refusedFunctions {
		for _, n := range g.names {
			if n == name || matchesPattern(n, name) {
				return g.why
			}
		}
	}
	return ""
}

// matchesPattern says whether name matches a pattern with one *.
func matchesPattern(pattern, name string) bool {
	before, after, ok := strings.Cut(pattern, "*")
	return ok && len(name) >= len(before)+len(after) && strings.HasPrefix(name, before) && strings.HasSuffix(name, after)
}

// engineFunctions are the names of every function of the linked DuckDB, lower-cased, and of its
// macros their definitions.
func engineFunctions(t *testing.T) (names map[string]bool, macros map[string][]string) {
	t.Helper()
	rows, err := plainDuckDB(t).QueryContext(t.Context(),
		"SELECT function_name, function_type, coalesce(macro_definition, '') FROM duckdb_functions()")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	names, macros = map[string]bool{}, map[string][]string{}
	for rows.Next() {
		var name, typ, def string
		if err := rows.Scan(&name, &typ, &def); err != nil {
			t.Fatal(err)
		}
		name = lowerASCII(name)
		names[name] = true
		if typ == "macro" {
			macros[name] = append(macros[name], def)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(names) < 500 {
		t.Fatalf("only %d functions", len(names))
	}
	return names, macros
}

// Every function of the linked DuckDB is judged: allowed, or refused with a reason. A DuckDB
// upgrade that brings a function fails here until it is.
func TestAllowlistCoversEveryFunctionOfTheEngine(t *testing.T) {
	names, _ := engineFunctions(t)
	for _, name := range slices.Sorted(maps.Keys(names)) {
		switch ok, why := allowedFunctions[name], refusedBecause(name); {
		case !ok && why == "":
			t.Errorf("function %s of DuckDB is neither allowed (allowedFunctions) nor refused with a reason (refusedFunctions): judge it", name)
		case ok && why != "":
			t.Errorf("function %s is both allowed and refused (%s)", name, why)
		}
	}
	for _, g := range refusedFunctions {
		for _, n := range g.names {
			found := names[n]
			for m := range names {
				found = found || matchesPattern(n, m)
			}
			if !found {
				t.Errorf("refused function %s is no function of DuckDB", n)
			}
		}
	}
}

// Every allowed name is a function of DuckDB's, or one its binder knows without a catalog entry.
func TestAllowedFunctionsExist(t *testing.T) {
	names, _ := engineFunctions(t)
	binder := map[string]bool{"unlist": true} // unnest's alias in a select list
	for name := range allowedFunctions {
		if !names[name] && !binder[name] {
			t.Errorf("allowed function %s is no function of DuckDB", name)
		}
	}
	for name := range binder {
		if err := runAll(t.Context(), plainDuckDB(t), "SELECT "+name+"([1])"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// An allowed macro calls only allowed functions: the gate lets its definition through.
func TestAllowedMacrosCallOnlyAllowedFunctions(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, macros := engineFunctions(t)
	n := 0
	for name, defs := range macros {
		if !allowedFunctions[name] {
			continue
		}
		for _, def := range defs {
			n++
			if _, err := g.Check(t.Context(), "SELECT "+def); err != nil {
				t.Errorf("allowed macro %s is %s: %v", name, def, err)
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d definitions of allowed macros", n)
	}
}

// Every refused function is refused by the gate, with the same reason, at the top as at any depth.
func TestGateRefusesFunctionsOutsideTheAllowlist(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	names, _ := engineFunctions(t)
	for name := range names {
		if allowedFunctions[name] {
			continue
		}
		for _, text := range []string{
			"SELECT " + ident(name) + "()",
			"SELECT list_transform([1], x -> " + ident(name) + "(x))",
			"WITH t AS (SELECT 1 AS v) SELECT * FROM t WHERE v IN (SELECT " + ident(name) + "('x'))",
		} {
			_, err := g.Check(t.Context(), text)
			want := "sql rejected: function " + name + " is not allowed: a query may call only the functions of a read-only analysis " +
				"(arithmetic, string, date and time, regular expression, list and struct, JSON value, aggregate and window functions)"
			var rejected *query.RejectedError
			if !errors.As(err, &rejected) || err.Error() != want {
				t.Errorf("gate(%q) = %v, want %q", text, err, want)
			}
		}
	}
}
