//go:build cgo

package gate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/baton-dev/baton/internal/query"
)

// hostile are statements the gate must refuse before anything runs: everything that is not one
// read-only SELECT of datasets by name, at any depth, however it is spelled.
var hostile = []string{
	// Statements other than SELECT.
	"COPY alerts TO '/tmp/x.csv'",
	"COPY (SELECT * FROM alerts) TO '/tmp/x.parquet' (FORMAT parquet)",
	"COPY alerts FROM '/etc/passwd'",
	"ATTACH '/tmp/evil.db' AS evil",
	"ATTACH ':memory:' AS m",
	"DETACH evil",
	"INSTALL httpfs",
	"LOAD httpfs",
	"FORCE INSTALL httpfs FROM 'http://example.com'",
	"PRAGMA enable_profiling",
	"PRAGMA database_list",
	"SET enable_external_access = true",
	"SET lock_configuration = false",
	"RESET memory_limit",
	"CREATE TABLE x AS SELECT 1",
	"CREATE MACRO m(a) AS a",
	"CREATE SECRET (TYPE s3, KEY_ID 'a', SECRET 'b')",
	"INSERT INTO alerts VALUES (1)",
	"UPDATE alerts SET a = 1",
	"DELETE FROM alerts",
	"DROP TABLE alerts",
	"ALTER TABLE alerts ADD COLUMN b INT",
	"EXPORT DATABASE '/tmp/out'",
	"IMPORT DATABASE '/tmp/out'",
	"CALL pragma_version()",
	"EXPLAIN SELECT 1",
	"EXPLAIN ANALYZE SELECT * FROM alerts",
	"VACUUM",
	"CHECKPOINT",
	"BEGIN TRANSACTION",
	"USE memory",
	"DESCRIBE alerts",
	"SUMMARIZE alerts",
	"SHOW TABLES",
	"SET VARIABLE x = 1",
	"PREPARE p AS SELECT 1",
	"EXECUTE p",
	// More than one statement, however they are hidden.
	"SELECT 1; SELECT 2",
	"SELECT 1; COPY alerts TO '/tmp/x'",
	"SELECT 1; ; SELECT 2",
	"SELECT * FROM alerts; -- \n DROP TABLE alerts",
	"SELECT 1 /* ; */; INSTALL httpfs",
	// Files as relations, at every depth.
	"SELECT * FROM '/etc/passwd'",
	"FROM '/etc/passwd'",
	"SELECT * FROM 'x.csv'",
	`SELECT * FROM "/etc/passwd"`,
	"SELECT * FROM (SELECT * FROM 'x.csv')",
	"WITH t AS (SELECT * FROM 's3://b/k.parquet') SELECT * FROM t",
	"WITH t AS (SELECT * FROM (SELECT * FROM '/etc/passwd')) SELECT * FROM t",
	"SELECT * FROM alerts WHERE a IN (SELECT * FROM '/etc/passwd')",
	"SELECT (SELECT count(*) FROM '/etc/shadow')",
	"SELECT * FROM alerts JOIN '/etc/passwd' p ON true",
	"SELECT * FROM alerts, '/etc/hosts'",
	"SELECT * FROM alerts UNION ALL SELECT * FROM 'x.csv'",
	"SELECT * FROM main.alerts",
	"SELECT * FROM memory.main.alerts",
	"SELECT * FROM system.main.duckdb_settings",
	// Table functions that read files, settings or other databases.
	"SELECT * FROM read_csv('/etc/passwd')",
	"SELECT * FROM read_csv_auto('/etc/passwd', sep=':')",
	"SELECT * FROM read_text('/etc/passwd')",
	"SELECT * FROM read_blob('/etc/passwd')",
	"SELECT * FROM read_json('/etc/passwd')",
	"SELECT * FROM read_parquet('s3://bucket/key.parquet')",
	"SELECT * FROM parquet_scan('/tmp/x.parquet')",
	"SELECT * FROM parquet_metadata('/tmp/x.parquet')",
	"SELECT * FROM glob('/etc/*')",
	"SELECT * FROM sqlite_scan('/tmp/x.db', 't')",
	"SELECT * FROM postgres_scan('host=x', 'public', 't')",
	"SELECT * FROM duckdb_settings()",
	"SELECT * FROM duckdb_extensions()",
	"SELECT * FROM pragma_table_info('alerts')",
	"SELECT * FROM query('SELECT * FROM read_csv(''/etc/passwd'')')",
	"SELECT * FROM query_table('alerts')",
	"SELECT * FROM (SELECT * FROM read_csv('/etc/passwd'))",
	"WITH t AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM t",
	"SELECT * FROM alerts WHERE EXISTS (SELECT 1 FROM read_blob('/etc/passwd'))",
	`SELECT * FROM "read_csv"('/etc/passwd')`,
	"SELECT * FROM READ_CSV('/etc/passwd')",
	"SELECT * FROM read_csv /* comment */ ('/etc/passwd')",
	// Scalar functions that read the environment or settings, or run SQL of their own.
	"SELECT getenv('HOME')",
	"SELECT GETENV('AWS_SECRET_ACCESS_KEY')",
	`SELECT "getenv"('HOME')`,
	"SELECT current_setting('temp_directory')",
	"SELECT json_execute_serialized_sql('{}')",
	"SELECT * FROM alerts WHERE a = getenv('X')",
	"SELECT main.getenv('HOME')",
	"SELECT list_transform([1], x -> getenv('HOME'))",
	// Functions outside the allowlist, at every depth: SQL text the gate never sees (which the
	// planner folds into a constant: json_serialize_plan's optimizer reads a setting), settings,
	// variables, the catalog, the session.
	"SELECT json_serialize_plan('SELECT current_setting(''secret_directory'')', optimize := true)",
	"SELECT json_serialize_sql('SELECT 1')",
	"SELECT json_deserialize_sql(json_serialize_sql('SELECT 1'))",
	"SELECT JSON_SERIALIZE_PLAN('SELECT 1')",
	`SELECT "json_serialize_sql"('SELECT 1')`,
	"SELECT current_setting('secret_directory')",
	"SELECT main.current_setting('secret_directory')",
	"SELECT system.main.current_setting('secret_directory')",
	"SELECT getvariable('x')",
	"SELECT current_schema(), current_database()",
	"SELECT current_schemas(true)",
	"SELECT current_query()",
	"SELECT version()",
	"SELECT current_connection_id(), txid_current()",
	"SELECT in_search_path('memory', 'main')",
	"SELECT get_block_size('memory')",
	"SELECT nextval('s')",
	"SELECT currval('s')",
	"SELECT col_description(1, 1)",
	"SELECT pg_get_viewdef(1)",
	"SELECT pg_catalog.pg_get_viewdef(1)",
	"SELECT has_table_privilege('alerts', 'select')",
	"SELECT format_type(16, 0)",
	"SELECT setseed(0.5)",
	"SELECT sleep_ms(100000)",
	"SELECT pg_sleep(100)",
	"SELECT write_log('x')",
	"SELECT stats(1)",
	"SELECT make_type('INTEGER')",
	"SELECT duckdb_settings()",
	"SELECT query('SELECT 1')",
	"SELECT no_such_function(1)",
	"SELECT list_transform([1], x -> json_serialize_sql('SELECT 1'))",
	"SELECT list_filter([1], lambda x: current_setting('temp_directory') IS NOT NULL)",
	"SELECT [x FOR x IN [1] IF getvariable('x') IS NULL]",
	"SELECT * FROM alerts WHERE severity = (SELECT current_setting('temp_directory'))",
	"SELECT 1 WHERE 'x' IN (SELECT json_serialize_plan('SELECT 1'))",
	"SELECT * FROM alerts WHERE EXISTS (SELECT 1 FROM blocks WHERE hash = current_setting('temp_directory'))",
	"WITH t AS (SELECT json_serialize_plan('SELECT 1') AS p) SELECT * FROM t",
	"WITH t AS (SELECT 1) SELECT * FROM t, (WITH u AS (SELECT current_setting('temp_directory')) SELECT * FROM u)",
	"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL SELECT length(current_setting('temp_directory')) FROM t WHERE false) SELECT * FROM t",
	"SELECT row_number() OVER (PARTITION BY current_setting('temp_directory')) FROM alerts",
	"SELECT lag(json_serialize_sql('SELECT 1')) OVER () FROM alerts",
	"SELECT sum(1) OVER (ORDER BY getvariable('x')) FROM alerts",
	"SELECT sum(1) OVER w FROM alerts WINDOW w AS (ORDER BY current_setting('temp_directory'))",
	"SELECT * FROM alerts ORDER BY current_setting('temp_directory')",
	"SELECT * FROM alerts LIMIT length(current_setting('temp_directory'))",
	"SELECT count(*) FILTER (WHERE current_setting('temp_directory') <> '') FROM alerts",
	"SELECT string_agg(severity, ',' ORDER BY current_setting('temp_directory')) FROM alerts",
	"SELECT severity FROM alerts GROUP BY severity HAVING max(current_setting('temp_directory')) <> ''",
	"SELECT severity FROM alerts GROUP BY current_setting('temp_directory')",
	"SELECT * FROM alerts QUALIFY current_setting('temp_directory') <> ''",
	"SELECT * FROM alerts a JOIN blocks b ON current_setting('temp_directory') <> ''",
	"SELECT * FROM range(length(current_setting('temp_directory')))",
	"SELECT * FROM (VALUES (json_serialize_sql('SELECT 1'))) v(x)",
	"SELECT CASE WHEN true THEN current_setting('temp_directory') END",
	"SELECT CAST(current_setting('temp_directory') AS VARCHAR)",
	"SELECT COALESCE(NULL, json_serialize_plan('SELECT 1'))",
	"SELECT [current_setting('temp_directory')], {'a': getvariable('x')}",
	"SELECT * FROM alerts UNPIVOT (v FOR k IN (severity)) WHERE v = current_setting('temp_directory')",
	"SELECT * FROM alerts WHERE payload->>'$.a' = current_setting('temp_directory')",
	// PIVOT in either form, at every depth (its UNPIVOT passes).
	"PIVOT alerts ON severity USING count(*)",
	"PIVOT alerts ON severity IN ('high', 'low') USING count(*)",
	"PIVOT_WIDER alerts ON severity IN ('high', 'low') USING count(*)",
	"SELECT * FROM (PIVOT alerts ON severity IN ('high', 'low') USING count(*))",
	"FROM alerts PIVOT (count(*) FOR severity IN ('high', 'low'))",
	"SELECT * FROM alerts PIVOT (sum(score) FOR severity IN ('high', 'low'))",
	"WITH p AS (PIVOT alerts ON severity IN ('high') USING count(*)) SELECT * FROM p",
	"SELECT (SELECT count(*) FROM (PIVOT alerts ON severity IN ('high') USING count(*)))",
	"SELECT * FROM blocks WHERE EXISTS (FROM alerts PIVOT (count(*) FOR severity IN ('high')))",
	"SELECT * FROM blocks JOIN (FROM alerts PIVOT (count(*) FOR severity IN ('high'))) p ON true",
	"SELECT * FROM blocks UNION ALL BY NAME FROM alerts PIVOT (count(*) FOR severity IN ('high'))",
	"FROM alerts PIVOT (count(*) FOR severity IN ('high')) UNPIVOT (n FOR k IN (high))",
	// Malformed: syntax errors, unterminated input, not UTF-8, NUL, empty.
	"",
	"   ",
	"-- only a comment",
	"SELECT 'unterminated",
	"SELECT /* unterminated",
	"SELECT \"unterminated",
	"SELECT \xff\xfe FROM alerts",
	"SELECT 1\x00; DROP TABLE alerts",
	"SELEC 1",
}

func TestGateRefusesHostileStatementsBeforeTheyRun(t *testing.T) {
	if len(hostile) < 60 {
		t.Fatalf("only %d hostile statements", len(hostile))
	}
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, sql := range hostile {
		st, err := g.Check(t.Context(), sql)
		var rejected *query.RejectedError
		if !errors.As(err, &rejected) {
			t.Errorf("gate(%q) = %+v, %v; want a refusal", sql, st, err)
			continue
		}
		if rejected.Reason == "" {
			t.Errorf("gate(%q) refused without a reason", sql)
		}
	}
}

// The reasons of refusals, exactly as the contract (docs/contracts/query.md) quotes them.
func TestGateSaysWhyItRefuses(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const (
		pivot    = "sql rejected: PIVOT is not allowed in a query: write each of its columns as an aggregate with FILTER (WHERE …)"
		function = " is not allowed: a query may call only the functions of a read-only analysis (arithmetic, string, date and time, regular expression, list and struct, JSON value, aggregate and window functions)"
	)
	for text, want := range map[string]string{
		"SELECT json_serialize_plan('SELECT current_setting(''secret_directory'')', optimize := true)": "sql rejected: function json_serialize_plan" + function,
		"SELECT * FROM alerts WHERE severity = current_setting('temp_directory')":                      "sql rejected: function current_setting" + function,
		"SELECT GETVARIABLE('x')":                                                    "sql rejected: function getvariable" + function,
		"SELECT pg_catalog.pg_get_viewdef(1)":                                        "sql rejected: function pg_catalog.pg_get_viewdef is named with a schema or catalog",
		"SELECT * FROM (PIVOT alerts ON severity IN ('high', 'low') USING count(*))": pivot,
		"FROM alerts PIVOT (count(*) FOR severity IN ('high', 'low'))":               pivot,
		"WITH p AS (PIVOT alerts ON severity IN ('high') USING count(*)) SELECT 1":   pivot,
		"PIVOT alerts ON severity USING count(*)":                                    "sql rejected: only a read-only SELECT (or WITH … SELECT) may run",
		"SELECT * FROM json_each('{}')":                                              "sql rejected: table function json_each is not allowed: a query reads only datasets, by their names",
		"SELECT * FROM main.pg_settings":                                             `sql rejected: relation "main.pg_settings" is named with a schema or catalog: name a dataset alone`,
	} {
		if _, err := g.Check(t.Context(), text); err == nil || err.Error() != want {
			t.Errorf("gate(%q) = %v, want %q", text, err, want)
		}
	}
}

// allowed are statements the gate lets through, with the relations each reads: ordinary reads
// of datasets, in every family of functions a read-only analysis calls, and names the statement
// defines as CTEs read in and out of their scope. TestAllowedStatementsRun runs each (but those
// the engine bounds) on DuckDB, given exactly its relations.
var allowed = []struct {
	sql  string
	rels []string
	// bounded: the gate lets it through and the engine bounds it: its worker process is killed
	// at the deadline and capped in memory (contain_test.go runs such statements).
	bounded bool
}{
	{sql: "SELECT 1"},
	{sql: "SELECT * FROM alerts", rels: []string{"alerts"}},
	{sql: "select * from Alerts where severity = 'high';", rels: []string{"alerts"}},
	{sql: "FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT severity, count(*) FROM alerts GROUP BY ALL ORDER BY 2 DESC LIMIT 5", rels: []string{"alerts"}},
	{sql: "SELECT a.x, b.y FROM alerts a JOIN blocks b ON a.block = b.number", rels: []string{"alerts", "blocks"}},
	{sql: "WITH high AS (SELECT * FROM alerts WHERE severity = 'high') SELECT count(*) FROM high", rels: []string{"alerts"}},
	{sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT * FROM n"},
	{sql: "SELECT * FROM alerts WHERE block IN (SELECT number FROM blocks)", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM range(10)"},
	{sql: "SELECT * FROM generate_series(1, 3), alerts", rels: []string{"alerts"}},
	{sql: "SELECT 'https://example.com/x.csv' AS url, '/etc/passwd' AS path"},
	{sql: "SELECT row_number() OVER (PARTITION BY severity ORDER BY block) FROM alerts", rels: []string{"alerts"}},
	{sql: `SELECT * FROM "6f1c1e9a-3b0e-4a8e-9b1a-2f4c5d6e7f80"`, rels: []string{"6f1c1e9a-3b0e-4a8e-9b1a-2f4c5d6e7f80"}},
	{sql: "SELECT * FROM alerts UNION SELECT * FROM alerts_archive", rels: []string{"alerts", "alerts_archive"}},
	{sql: "SELECT list_filter([1, 2, 3], x -> x > 1), filter([1], x -> true)"},
	{sql: "WITH alerts AS (SELECT 1) SELECT * FROM alerts"}, // the CTE, never the dataset
	{sql: "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(n, s)"},
	{sql: "SELECT json_extract(payload, '$.a') FROM alerts", rels: []string{"alerts"}},

	// Arithmetic and math.
	{sql: "SELECT block + 1, block - 1, block * 2, score / 2, block // 2, block % 3, 2 ** 3, 2 ^ 3, @ -1, 5 !, 6 & 3, 6 | 3, 1 << 2, 8 >> 1, ~1, xor(6, 3), -score, +score FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT abs(score), round(score, 2), ceil(score), floor(score), trunc(score), sqrt(abs(score)), cbrt(8), ln(1 + abs(score)), log(100), log10(100), log2(8), exp(1), pow(2, 10), power(2, 3), pi(), sin(0), cos(0), atan2(1, 1), degrees(pi()), sign(-3), isnan(score), isinf(score), random() < 2 FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT gcd(12, 18), lcm(4, 6), factorial(5), even(3.5), bit_count(7), round_even(2.5, 0), fdiv(7, 2), fmod(7, 2), mod(7, 2), greatest(1, 2, 3), least(1, 2, 3), nextafter(1, 2) > 1"},
	// Comparison and logic.
	{sql: "SELECT * FROM alerts WHERE severity = 'high' AND score > 0.5 OR NOT (block BETWEEN 1 AND 10) AND source IS NOT NULL AND severity IN ('high', 'low') AND block NOT IN (3, 4) AND payload IS NULL", rels: []string{"alerts"}},
	{sql: "SELECT CASE WHEN score > 0.9 THEN 'hot' WHEN score > 0.5 THEN 'warm' ELSE 'cold' END, CASE severity WHEN 'high' THEN 1 ELSE 0 END, COALESCE(source, 'none'), IFNULL(source, '?'), NULLIF(severity, 'low'), IF(score > 0.5, 1, 0), score IS DISTINCT FROM NULL, score IS NOT DISTINCT FROM 1, (score > 0.5) IS TRUE, switch(block, MAP {1: 'one'}, 'other') FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT severity LIKE 'h%', severity NOT LIKE '%x', severity ILIKE 'H%', severity NOT ILIKE 'x%', severity GLOB 'h*', severity SIMILAR TO 'h.*', severity NOT SIMILAR TO 'x', severity LIKE 'h!%' ESCAPE '!', severity ILIKE 'H!%' ESCAPE '!', severity ~ '^h', severity !~ '^x' FROM alerts", rels: []string{"alerts"}},
	// Strings.
	{sql: "SELECT severity || '-' || source, concat(severity, source), concat_ws(',', severity, source), upper(severity), lower(severity), length(severity), len(severity), substring(severity, 1, 2), substr(severity, 2), left(severity, 1), right(severity, 1), lpad(severity, 6, '*'), rpad(severity, 6, '*'), trim('  x  '), ltrim(' x'), rtrim('x '), replace(severity, 'h', 'H'), reverse(severity), repeat('ab', 3), translate(severity, 'ih', 'IH') FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT position('i' IN severity), strpos(severity, 'i'), instr(severity, 'i'), contains(severity, 'ig'), starts_with(severity, 'h'), ends_with(severity, 'h'), severity ^@ 'h', prefix(severity, 'h'), split_part('a,b', ',', 2), string_split('a,b', ','), str_split('a,b', ','), string_to_array('a,b', ','), format('{}-{}', severity, block), printf('%s-%d', severity, block), levenshtein(severity, 'low'), damerau_levenshtein(severity, 'low'), hamming('ab', 'ac'), jaccard(severity, 'low'), jaro_winkler_similarity(severity, 'high'), strip_accents('é'), ascii('a'), chr(65), unicode('a'), ord('a') FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT TRIM(BOTH 'x' FROM 'xax'), TRIM(LEADING 'x' FROM 'xax'), TRIM(TRAILING FROM 'xax '), SUBSTRING('abc' FROM 1 FOR 2), url_encode('a b'), url_decode('a%20b'), format_bytes(1024), formatReadableSize(1024), parse_filename('a/b.csv'), parse_path('a/b'), bar(0.5, 0, 1, 10), octet_length('abc'::BLOB), md5('a'), nfc_normalize('é'), length_grapheme('é'), lcase('A'), ucase('a'), $$dollar 'quoted'$$"},
	// Regular expressions.
	{sql: "SELECT regexp_matches(source, '^s'), regexp_extract(source, '([a-z]+)', 1), regexp_replace(source, '[0-9]', '#', 'g'), regexp_full_match(source, '[a-z0-9-]+'), regexp_split_to_array(source, '-'), regexp_extract_all(source, '[a-z]'), regexp_escape('a.b'), string_split_regex(source, '[-_]'), str_split_regex(source, '-') FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT regexp_split_to_table('a-b', '-')"},
	// Dates and times.
	{sql: "SELECT date_trunc('hour', ts), date_part('year', ts), EXTRACT(month FROM ts), year(ts), quarter(ts), month(ts), week(ts), day(ts), hour(ts), minute(ts), second(ts), dayofweek(ts), isodow(ts), dayofyear(ts), dayname(ts), monthname(ts), strftime(ts, '%Y-%m-%d'), epoch(ts), epoch_ms(ts), ts + INTERVAL 1 DAY, ts - INTERVAL '2 hours', ts + INTERVAL (block) HOUR, age(ts, ts), date_diff('day', ts, ts), datediff('hour', ts, ts), date_sub('minute', ts, ts), time_bucket(INTERVAL 15 MINUTE, ts), last_day(ts::DATE), ts AT TIME ZONE 'UTC', ts::DATE, ts::TIMESTAMP::TIME FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT DATE '2024-01-01', TIMESTAMP '2024-01-01 00:00:00', TIMESTAMPTZ '2024-01-01 00:00:00+00', INTERVAL '1 day', INTERVAL 3 MONTH, now() > DATE '2000-01-01', current_date, current_timestamp, localtimestamp, today(), make_date(2024, 1, 1), make_timestamp(2024, 1, 1, 0, 0, 0), strptime('2024-01-01', '%Y-%m-%d'), try_strptime('x', '%Y'), to_timestamp(0), epoch_ms(0), to_days(3), to_hours(2), date_add(DATE '2024-01-01', INTERVAL 1 DAY), ago(INTERVAL 1 DAY) < now(), '2024-01-01'::DATE + 1"},
	{sql: "SELECT * FROM alerts WHERE ts >= current_timestamp - INTERVAL 7 DAY OR ts < TIMESTAMPTZ '2100-01-01' ORDER BY ts DESC", rels: []string{"alerts"}},
	// Lists and arrays.
	{sql: "SELECT tags, tags[1], tags[1:2], tags[-1], len(tags), list_contains(tags, 'x'), list_transform(tags, x -> upper(x)), list_filter(tags, x -> x <> 'y'), list_transform(tags, lambda x: x || '!'), list_sort(tags), list_distinct(tags), list_has_any(tags, ['x']), array_to_string(tags, ','), tags && ['x'], tags @> ['x'], tags <@ ['x', 'y', 'z'], unnest(tags) FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT list_reduce([1, 2, 3], (a, b) -> a + b), list_reduce([1, 2, 3], lambda a, b: a * b), [x + 1 FOR x IN [1, 2, 3] IF x > 1], list_aggregate([1, 2], 'sum'), list_sum([1, 2]), list_max([1, 2]), array_length([1, 2]), flatten([[1], [2]]), list_concat([1], [2]), list_append([1], 2), list_prepend(0, [1]), list_value(1, 2), array_value(1, 2), range(3), generate_series(1, 3), list_zip([1], ['a'])::VARCHAR, list_position([1, 2], 2), list_slice([1, 2, 3], 1, 2), list_cosine_similarity([1.0, 2.0], [2.0, 1.0]), [1.0, 2.0] <-> [2.0, 3.0], apply([1], x -> x), reduce([1, 2], (a, b) -> a + b)"},
	{sql: "SELECT unnest([1, 2, 3]) AS n, unnest(['a', 'b', 'c']) AS s"},
	{sql: "SELECT * FROM unnest([1, 2, 3]) u(n)"},
	{sql: "SELECT unnest([[1, 2], [3]], recursive := true), generate_subscripts([4, 5], 1)"},
	// Structs, maps, unions.
	{sql: "SELECT {'a': 1, 'b': 'x'} AS s, ({'a': 1}).a, {'a': 1}['a'], struct_extract({'a': 1}, 'a'), struct_pack(x := 1), row(1, 2)::VARCHAR, (1, 'a')::VARCHAR, struct_insert({'a': 1}, b := 2), struct_keys({'a': 1}), MAP {'k': 1}, MAP(['k'], [1]), map_keys(MAP {'k': 1}), map_values(MAP {'k': 1}), map_extract(MAP {'k': 1}, 'k'), MAP {'k': 1}['k'], element_at(MAP {'k': 1}, 'k'), map_from_entries([('k', 1)]), cardinality(MAP {'k': 1}), union_value(n := 1), union_tag(union_value(n := 1))"},
	// JSON values.
	{sql: "SELECT payload->>'$.kind', payload->'$.n', payload ->> 'kind', payload -> 'n', json_extract(payload, '$.n'), json_extract_string(payload, '$.kind'), json_value(payload, '$.kind'), json_exists(payload, '$.n'), json_keys(payload), json_type(payload), json_valid(payload), json_array_length('[1, 2]'), json_structure(payload), json_transform(payload, '{\"n\": \"INTEGER\"}'), from_json(payload, '{\"n\": \"INTEGER\"}'), json_contains(payload, '1'), to_json({'a': 1}), json_object('a', 1), json_array(1, 2), json_merge_patch('{}', payload), json(payload::VARCHAR), payload::VARCHAR FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT json_group_array(severity), json_group_object(id, severity), json_group_structure(payload) FROM alerts", rels: []string{"alerts"}},
	// Conversion.
	{sql: "SELECT CAST(block AS VARCHAR), block::DOUBLE, TRY_CAST(source AS INTEGER), TRY(CAST(source AS INTEGER)), '42'::INTEGER, score::DECIMAL(10, 2), tags::VARCHAR, hex(255), unhex('FF'), to_base64('abc'::BLOB), from_base64('YWJj'), encode('abc'), decode('abc'::BLOB), typeof(block), to_binary(5), bin(5), to_hex(255), from_hex('FF'), '\\xAA'::BLOB, x'AB', E'a\\nb' FROM alerts", rels: []string{"alerts"}},
	// Hashing.
	{sql: "SELECT hash(severity), md5(severity), sha256(severity), sha1(severity), md5_number(severity), uuid() IS NOT NULL, gen_random_uuid() IS NOT NULL FROM alerts", rels: []string{"alerts"}},
	// Aggregates.
	{sql: "SELECT severity, count(*), count(), count(DISTINCT source), count(source), sum(score), avg(score), mean(score), min(ts), max(ts), stddev(score), stddev_pop(score), variance(score), var_pop(score), median(score), quantile_cont(score, 0.9), quantile_disc(score, [0.25, 0.5]), approx_count_distinct(source), approx_quantile(score, 0.5), mode(source), string_agg(source, ',' ORDER BY source), group_concat(source), list(block ORDER BY ts), array_agg(block), arg_max(source, score), arg_min(source, score), max_by(block, ts), min_by(block, ts), first(source), last(source), any_value(source) FROM alerts GROUP BY severity HAVING count(*) > 0 ORDER BY severity", rels: []string{"alerts"}},
	{sql: "SELECT bool_or(score > 0.5), bool_and(score > 0), count(*) FILTER (WHERE score > 0.5), sum(score) FILTER (WHERE severity = 'high'), histogram(severity), product(block), corr(score, block), covar_pop(score, block), regr_slope(score, block), regr_intercept(score, block), entropy(severity), mad(score), kurtosis(score), skewness(score), approx_top_k(source, 2), bit_or(block), geomean(abs(score) + 1), weighted_avg(score, block), count_if(score > 0.5), sumkahan(score), percentile_cont(0.5) WITHIN GROUP (ORDER BY score), percentile_disc(0.5) WITHIN GROUP (ORDER BY score), mode() WITHIN GROUP (ORDER BY severity) FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT severity, source, count(*) FROM alerts GROUP BY ALL ORDER BY ALL", rels: []string{"alerts"}},
	{sql: "SELECT severity, source, count(*) FROM alerts GROUP BY GROUPING SETS ((severity), (source), ())", rels: []string{"alerts"}},
	{sql: "SELECT severity, count(*), grouping(severity) FROM alerts GROUP BY ROLLUP (severity)", rels: []string{"alerts"}},
	{sql: "SELECT severity, source, count(*) FROM alerts GROUP BY CUBE (severity, source)", rels: []string{"alerts"}},
	{sql: "SELECT severity, count(*) AS n FROM alerts GROUP BY 1 ORDER BY n DESC NULLS LAST LIMIT 10 OFFSET 0", rels: []string{"alerts"}},
	// Window functions.
	{sql: "SELECT block, row_number() OVER w, rank() OVER w, dense_rank() OVER w, percent_rank() OVER w, cume_dist() OVER w, ntile(4) OVER w, lag(score) OVER w, lead(score, 2, 0) OVER w, first_value(score) OVER w, last_value(score) OVER w, nth_value(score, 2) OVER w FROM alerts WINDOW w AS (PARTITION BY severity ORDER BY ts)", rels: []string{"alerts"}},
	{sql: "SELECT sum(score) OVER (ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), avg(score) OVER (PARTITION BY severity ORDER BY ts RANGE BETWEEN INTERVAL 1 HOUR PRECEDING AND CURRENT ROW), count(*) OVER (), max(score) OVER (ORDER BY block GROUPS BETWEEN 1 PRECEDING AND 1 FOLLOWING EXCLUDE CURRENT ROW), sum(score) FILTER (WHERE severity = 'high') OVER (ORDER BY ts), first_value(score IGNORE NULLS) OVER (ORDER BY ts) FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT * FROM alerts QUALIFY row_number() OVER (PARTITION BY severity ORDER BY ts DESC) = 1", rels: []string{"alerts"}},
	// Stars, joins, set operations, samples and the rest of SELECT.
	{sql: "SELECT * EXCLUDE (payload) FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT * REPLACE (upper(severity) AS severity) FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT COLUMNS('sev.*'), COLUMNS(c -> c LIKE 'sc%') FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT max(COLUMNS(* EXCLUDE (payload, tags))) FROM alerts", rels: []string{"alerts"}},
	{sql: "SELECT alerts.*, b.* FROM alerts, blocks AS b WHERE alerts.block = b.number", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts LEFT JOIN blocks ON alerts.block = blocks.number", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts FULL OUTER JOIN blocks ON alerts.block = blocks.number", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts NATURAL JOIN blocks", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts CROSS JOIN blocks", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts POSITIONAL JOIN blocks", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts a ASOF JOIN blocks b ON a.block = b.number AND a.ts >= b.ts", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts SEMI JOIN blocks ON alerts.block = blocks.number", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts ANTI JOIN blocks ON alerts.block = blocks.number", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts a, LATERAL (SELECT * FROM blocks b WHERE b.number = a.block) l", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT severity FROM alerts INTERSECT SELECT severity FROM alerts_archive EXCEPT ALL SELECT hash FROM blocks", rels: []string{"alerts", "alerts_archive", "blocks"}},
	{sql: "SELECT severity FROM alerts UNION ALL BY NAME SELECT hash AS severity FROM blocks", rels: []string{"alerts", "blocks"}},
	{sql: "SELECT * FROM alerts USING SAMPLE 10%", rels: []string{"alerts"}},
	{sql: "SELECT * FROM alerts TABLESAMPLE reservoir(2 ROWS)", rels: []string{"alerts"}},
	{sql: "SELECT DISTINCT ON (severity) * FROM alerts ORDER BY severity, ts DESC", rels: []string{"alerts"}},
	{sql: "SELECT score > ALL (SELECT score FROM alerts_archive), block = ANY (SELECT number FROM blocks) FROM alerts", rels: []string{"alerts", "alerts_archive", "blocks"}},
	{sql: "SELECT severity COLLATE nocase AS s FROM alerts ORDER BY 1", rels: []string{"alerts"}},
	{sql: "FROM alerts SELECT severity WHERE score > 0.5", rels: []string{"alerts"}},
	{sql: "FROM alerts LIMIT 3 OFFSET 1", rels: []string{"alerts"}},
	{sql: "VALUES (1, 'a'), (2, 'b')"},
	{sql: `SELECT 'a' AS "quoted name", 1 AS "SELECT"`},
	// UNPIVOT, in either form, at every depth (PIVOT is refused).
	{sql: "UNPIVOT alerts ON severity, source INTO NAME k VALUE v", rels: []string{"alerts"}},
	{sql: "FROM alerts UNPIVOT (v FOR k IN (severity, source))", rels: []string{"alerts"}},
	{sql: "SELECT * FROM (UNPIVOT alerts ON COLUMNS('^s[eo]') INTO NAME k VALUE v)", rels: []string{"alerts"}},
	{sql: "WITH u AS (UNPIVOT alerts ON severity, source INTO NAME k VALUE v) SELECT k, count(*) FROM u GROUP BY k", rels: []string{"alerts"}},
	{sql: "SELECT (SELECT count(*) FROM alerts UNPIVOT (v FOR k IN (severity, source))), * FROM blocks", rels: []string{"alerts", "blocks"}},

	// Names the statement defines as CTEs are relations where no CTE of the name is in scope:
	// there they are bound by the catalog of the engine (settings, paths, the databases), so
	// each must name a dataset. TestGateScopesCTEsAsDuckDBDoes holds these rules to DuckDB's.
	{sql: "SELECT * FROM (WITH pg_settings AS (SELECT 1 AS x) SELECT * FROM pg_settings) q, pg_settings", rels: []string{"pg_settings"}},
	{sql: "SELECT * FROM (WITH duckdb_tables AS (SELECT 1 AS x) SELECT * FROM duckdb_tables) q, duckdb_tables", rels: []string{"duckdb_tables"}},
	{sql: "SELECT * FROM (WITH duckdb_columns AS (SELECT 1 AS x) SELECT * FROM duckdb_columns) q, duckdb_columns", rels: []string{"duckdb_columns"}},
	{sql: "SELECT * FROM (WITH pg_class AS (SELECT 1 AS x) SELECT * FROM pg_class) q, pg_class", rels: []string{"pg_class"}},
	{sql: "SELECT * FROM (WITH duckdb_settings AS (SELECT 1 AS x) SELECT * FROM duckdb_settings) q, duckdb_settings", rels: []string{"duckdb_settings"}},
	{sql: "SELECT * FROM pg_settings UNION ALL (WITH pg_settings AS (SELECT 1) SELECT * FROM pg_settings)", rels: []string{"pg_settings"}},
	{sql: "(WITH duckdb_views AS (SELECT 1) SELECT * FROM duckdb_views) UNION ALL SELECT * FROM duckdb_views", rels: []string{"duckdb_views"}},
	{sql: "WITH a AS (SELECT * FROM pg_settings), pg_settings AS (SELECT 1) SELECT * FROM a", rels: []string{"pg_settings"}},
	{sql: "WITH pg_settings AS (SELECT * FROM pg_settings) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT * FROM pg_settings) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT * FROM pg_settings UNION ALL SELECT * FROM pg_settings WHERE false) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT 1 AS x UNION ALL BY NAME SELECT x FROM pg_settings) SELECT * FROM pg_settings", rels: []string{"pg_settings"}},
	{sql: "WITH a AS (WITH duckdb_databases AS (SELECT 1) SELECT * FROM duckdb_databases), b AS (SELECT * FROM duckdb_databases) SELECT * FROM a, b", rels: []string{"duckdb_databases"}},
	{sql: "SELECT * FROM alerts, (WITH alerts AS (SELECT 1 AS x) SELECT * FROM alerts) q JOIN blocks ON true", rels: []string{"alerts", "blocks"}},
	{sql: "WITH \u212aey AS (SELECT 1) SELECT * FROM key", rels: []string{"key"}}, // a Kelvin sign: to DuckDB no k
	{sql: "WITH duckdb_views AS (SELECT 1) SELECT * FROM (SELECT * FROM duckdb_views) a, (WITH x AS (SELECT 1) SELECT * FROM duckdb_views) b"},
	{sql: "WITH RECURSIVE pg_settings AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM pg_settings WHERE v < 3) SELECT * FROM pg_settings"},
	{sql: `WITH "PG_SETTINGS" AS (SELECT 1) SELECT * FROM pg_settings`},

	// The gate lets these through: containing them (the planner's time, the memory of a value)
	// is the engine's work, its worker process's deadline and memory cap, not the gate's.
	{sql: "SELECT " + strings.Repeat("(SELECT ", 30) + "1" + strings.Repeat(")", 30), bounded: true},
	{sql: "SELECT length(range(100000000))", bounded: true},
	{sql: "SELECT repeat('x', 1000000000)", bounded: true},
}

func TestGateLetsReadsOfDatasetsThrough(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range allowed {
		st, err := g.Check(t.Context(), c.sql)
		if err != nil {
			t.Errorf("gate(%q): %v", c.sql, err)
			continue
		}
		if !slices.Equal(st.Relations, c.rels) {
			t.Errorf("gate(%q) relations %q, want %q", c.sql, st.Relations, c.rels)
		}
	}
}

// A name a statement defines as a CTE in one place and reads as a table in another is a
// relation wherever no CTE of the name is in scope, and the caller must be able to read it.
func TestGateReadsNamesOutsideTheirCTEsScopeAsRelations(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st, err := g.Check(t.Context(), "SELECT * FROM alerts, (WITH alerts AS (SELECT 1 AS x) SELECT * FROM alerts) q JOIN blocks ON true")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Relations, []string{"alerts", "blocks"}) {
		t.Errorf("relations %q, want [alerts blocks]", st.Relations)
	}
	st, err = g.Check(t.Context(), "WITH alerts AS (SELECT 1 AS x) SELECT * FROM alerts, (SELECT * FROM alerts) q JOIN blocks ON true")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Relations, []string{"blocks"}) {
		t.Errorf("relations %q, want [blocks]", st.Relations)
	}
}

// plainDuckDB opens an in-memory DuckDB with nothing in it, as a caller's statement would find
// the engine's database but for its relations.
func plainDuckDB(t *testing.T) *sql.DB {
	t.Helper()
	c, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// execAll runs statements on db, failing the test on the first error.
func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// runAll runs text on db and reads its whole answer.
func runAll(ctx context.Context, db *sql.DB, text string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, text)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// The statements the gate lets through are ones DuckDB runs, given exactly the relations the
// gate names: the allowlist holds every function they call, however the parser writes it.
func TestAllowedStatementsRun(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	fixtures := map[string]string{
		"alerts": "CREATE TABLE alerts AS SELECT i AS id, ['high', 'low', 'mid'][i % 3 + 1] AS severity, " +
			"'src-' || i AS source, i AS block, i / 10 AS score, TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_hours(i) AS ts, " +
			"json_object('kind', 'k' || i, 'n', i) AS payload, ['x', 'y', 'z'][1:i % 3 + 1] AS tags, i AS x FROM range(1, 6) r(i)",
		"blocks": "CREATE TABLE blocks AS SELECT i AS number, 'h' || i AS hash, " +
			"TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_hours(i) AS ts, i AS y FROM range(0, 6) r(i)",
	}
	for _, c := range allowed {
		if c.bounded {
			continue
		}
		st, err := g.Check(t.Context(), c.sql)
		if err != nil {
			continue // TestGateLetsReadsOfDatasetsThrough says so
		}
		db := plainDuckDB(t)
		execAll(t, db, fixtures["alerts"]) // the model of the other relations
		for _, r := range st.Relations {
			switch f, ok := fixtures[r]; {
			case ok && r != "alerts":
				execAll(t, db, f)
			case strings.HasPrefix(r, "alerts_") || strings.Count(r, "-") == 4: // an archive, a uuid
				execAll(t, db, "CREATE TABLE "+ident(r)+" AS FROM alerts")
			case !ok:
				execAll(t, db, "CREATE TABLE "+ident(r)+" AS SELECT 1 AS x")
			}
		}
		if !slices.Contains(st.Relations, "alerts") {
			execAll(t, db, "DROP TABLE alerts")
		}
		if err := runAll(t.Context(), db, c.sql); err != nil {
			t.Errorf("%q: %v", c.sql, err)
		}
	}
}

// scopes are statements that define CTEs and read tables of the same names, and the relations
// each reads, which TestGateScopesCTEsAsDuckDBDoes holds to what DuckDB binds. Every CTE and
// table has one column, v.
var scopes = []struct {
	sql  string
	rels []string
}{
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t", nil},
	{"SELECT * FROM (WITH t AS (SELECT 1 AS v) SELECT * FROM t) q, t", []string{"t"}},
	// A CTE is in scope in the CTEs defined after it in the same WITH, not before, not in itself.
	{"WITH t AS (SELECT 1 AS v), u AS (SELECT * FROM t) SELECT * FROM u", nil},
	{"WITH u AS (SELECT * FROM t), t AS (SELECT 1 AS v) SELECT * FROM u", []string{"t"}},
	{"WITH t AS (SELECT * FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM (WITH t AS (SELECT v + 1 AS v FROM t) SELECT * FROM t)", nil},
	{"WITH u AS (WITH t AS (SELECT 1 AS v) SELECT * FROM t), w AS (SELECT * FROM t) SELECT * FROM u, w", []string{"t"}},
	// WITH RECURSIVE: only a UNION [ALL] body is recursive, and only its right side sees the CTE;
	// a later CTE stays out of scope.
	{"WITH RECURSIVE t AS (SELECT * FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM t WHERE v < 3) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION SELECT v + 1 FROM t WHERE v < 3) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT * FROM t UNION ALL SELECT v FROM t WHERE v < 0) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM (SELECT * FROM t) s WHERE v < 3) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM t WHERE v < (SELECT 3 FROM t LIMIT 1)) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL (SELECT v + 1 FROM t WHERE v < 3 UNION ALL SELECT 0 WHERE false)) SELECT * FROM t", nil},
	{"WITH RECURSIVE t AS (SELECT 1 AS v UNION ALL BY NAME SELECT v FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v EXCEPT SELECT v FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE t AS (SELECT 1 AS v INTERSECT SELECT v FROM t) SELECT * FROM t", []string{"t"}},
	{"WITH RECURSIVE u AS (SELECT 1 AS v UNION ALL SELECT v FROM w WHERE false), w AS (SELECT * FROM u) SELECT * FROM w", []string{"w"}},
	{"WITH RECURSIVE u AS (SELECT 1 AS v UNION ALL SELECT v + 1 FROM u WHERE v < 3), w AS (SELECT * FROM u) SELECT * FROM w", nil},
	{"WITH RECURSIVE u AS (WITH x AS (SELECT 1 AS v) SELECT v FROM x UNION ALL SELECT v FROM x WHERE false) SELECT * FROM u", nil},
	{"WITH RECURSIVE t(v) USING KEY (v) AS (SELECT 1 UNION SELECT v + 1 FROM t WHERE v < 3) SELECT * FROM t", nil},
	// A set operation's CTEs are in scope on both sides; a side's own only on that side.
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t UNION ALL SELECT * FROM t", nil},
	{"(WITH t AS (SELECT 1 AS v) SELECT * FROM t) UNION ALL SELECT * FROM t", []string{"t"}},
	{"SELECT * FROM t UNION ALL (WITH t AS (SELECT 1 AS v) SELECT * FROM t)", []string{"t"}},
	{"SELECT * FROM t EXCEPT SELECT * FROM (WITH t AS (SELECT 2 AS v) SELECT * FROM t)", []string{"t"}},
	// Materialized or not, the same.
	{"WITH t AS MATERIALIZED (SELECT 1 AS v) SELECT * FROM t, (SELECT * FROM t) s", nil},
	{"WITH u AS MATERIALIZED (SELECT * FROM t), t AS NOT MATERIALIZED (SELECT 1 AS v) SELECT * FROM u", []string{"t"}},
	// In scope in every clause of the node, at any depth.
	{"WITH t AS (SELECT 1 AS v) SELECT (SELECT max(v) FROM t), * FROM (SELECT * FROM t) s WHERE EXISTS (SELECT * FROM t) ORDER BY (SELECT min(v) FROM t)", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT count(*) FROM t GROUP BY (SELECT max(v) FROM t) HAVING (SELECT max(v) FROM t) > 0", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t WHERE v IN (SELECT v FROM u)", []string{"u"}},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM range((SELECT max(v) FROM t)) r, LATERAL (SELECT * FROM t) l", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT sum(v) OVER (ORDER BY (SELECT max(v) FROM t)) FROM t QUALIFY (SELECT max(v) FROM t) > 0", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT count(*) FILTER (WHERE (SELECT max(v) FROM t) > 0) FROM t", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM (VALUES ((SELECT max(v) FROM t))) x(v)", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t JOIN u USING (v) JOIN t AS w ON (SELECT max(v) FROM t) = 1", []string{"u"}},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t LIMIT (SELECT max(v) FROM t)", nil},
	{"WITH t AS (SELECT 1 AS v) UNPIVOT t ON v INTO NAME n VALUE w", nil},
	{"WITH t AS (SELECT 1 AS v) SELECT * FROM t UNPIVOT (w FOR n IN (v))", nil},
	{"SELECT * FROM t UNPIVOT (w FOR n IN (v)), (WITH t AS (SELECT 2 AS v) SELECT * FROM t) s", []string{"t"}},
	// Names are matched with their ASCII letters folded, as DuckDB matches them.
	{"WITH T AS (SELECT 1 AS v) SELECT * FROM t", nil},
	{`WITH "T" AS (SELECT 1 AS v) SELECT * FROM "t"`, nil},
	{"WITH \u212a AS (SELECT 1 AS v) SELECT * FROM k", []string{"k"}},
}

// The gate's rule of CTE scope is DuckDB's: given exactly the relations the gate names, each
// statement binds every other name to a CTE (no "does not exist"), and without any one of them it
// cannot run (the table does not exist, or is a CTE's reference to itself where the CTE is out of
// scope), so that name is no CTE where it is read.
func TestGateScopesCTEsAsDuckDBDoes(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range scopes {
		st, err := g.Check(t.Context(), c.sql)
		if err != nil {
			t.Errorf("gate(%q): %v", c.sql, err)
			continue
		}
		if !slices.Equal(st.Relations, c.rels) {
			t.Errorf("gate(%q) relations %q, want %q", c.sql, st.Relations, c.rels)
		}
		for _, without := range append([]string{""}, st.Relations...) {
			db := plainDuckDB(t)
			for _, r := range st.Relations {
				if r != without {
					execAll(t, db, "CREATE TABLE "+ident(r)+" AS SELECT 1 AS v")
				}
			}
			err := runAll(t.Context(), db, c.sql)
			switch {
			case without == "" && err != nil:
				t.Errorf("%q with relations %q: %v", c.sql, st.Relations, err)
			case without != "" && (err == nil || !strings.Contains(err.Error(), "Table with name "+without+" does not exist") &&
				!strings.Contains(err.Error(), `Circular reference to CTE "`+without+`"`)):
				t.Errorf("%q without relation %s: %v, want that it does not exist", c.sql, without, err)
			}
		}
	}
}

// Every name of the engine's own catalog (its views, the pg_catalog, information_schema and
// duckdb_ names, its table functions, schemas and databases), read outside the scope of a CTE of
// the name, is a relation the statement needs: the data plane attaches it or refuses the
// statement, and the engine's own object under the name is never read. In a plain DuckDB each
// view of main and pg_catalog is read.
func TestGateReadsCatalogNamesOutsideTheirCTEsAsRelations(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	db := plainDuckDB(t)
	rows, err := db.QueryContext(t.Context(), `
		SELECT view_name, schema_name IN ('main', 'pg_catalog') FROM duckdb_views()
		UNION SELECT function_name, false FROM duckdb_functions()
			WHERE function_type IN ('table', 'table_macro') OR schema_name = 'pg_catalog'
		UNION SELECT schema_name, false FROM duckdb_schemas()
		UNION SELECT database_name, false FROM duckdb_databases()`)
	if err != nil {
		t.Fatal(err)
	}
	reachable := map[string]bool{}
	for rows.Next() {
		var name string
		var view bool
		if err := rows.Scan(&name, &view); err != nil {
			t.Fatal(err)
		}
		reachable[name] = reachable[name] || view
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(reachable) < 150 {
		t.Fatalf("only %d names of the catalog", len(reachable))
	}
	read := 0
	for _, name := range slices.Sorted(maps.Keys(reachable)) {
		text := fmt.Sprintf("SELECT * FROM (WITH %[1]s AS (SELECT 1) SELECT * FROM %[1]s) q, %[1]s", ident(name))
		st, err := g.Check(t.Context(), text)
		switch {
		case !relationName.MatchString(lowerASCII(name)):
			if err == nil {
				t.Errorf("gate(%q) let a name that names no dataset through", text)
			}
		case err != nil:
			t.Errorf("gate(%q): %v", text, err)
		case !slices.Equal(st.Relations, []string{lowerASCII(name)}):
			t.Errorf("gate(%q) relations %q, want [%s]", text, st.Relations, name)
		}
		err = runAll(t.Context(), db, text)
		if err == nil {
			read++
		}
		if reachable[name] && err != nil {
			t.Errorf("%q: %v, want the catalog's %s read in a plain DuckDB", text, err, name)
		}
	}
	t.Logf("%d of %d names of the catalog, outside their CTE, read the catalog of a plain DuckDB; the gate names each a relation", read, len(reachable))
}

// FuzzGate: the gate never panics and never lets through a statement that names a file, a
// table function or a function it refuses, whatever the input.
func FuzzGate(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Add("SELECT * FROM alerts WHERE a = 1")
	f.Add("WITH t AS (SELECT 1) SELECT * FROM t")
	g, err := Open()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.Close() })
	f.Fuzz(func(t *testing.T, sql string) {
		st, err := g.Check(t.Context(), sql)
		if err != nil {
			var rejected *query.RejectedError
			if !errors.As(err, &rejected) {
				t.Fatalf("gate(%q) failed without a refusal: %v", sql, err)
			}
			return
		}
		for _, r := range st.Relations {
			if !relationName.MatchString(r) {
				t.Fatalf("gate(%q) let relation %q through", sql, r)
			}
		}
		lower := strings.ToLower(sql)
		for _, word := range []string{"copy ", "attach ", "install ", "pragma "} {
			if strings.HasPrefix(strings.TrimSpace(lower), word) {
				t.Fatalf("gate(%q) let a %s statement through", sql, word)
			}
		}
	})
}

// The gate notes the columns a statement names, and when it may read others: an engine then
// attaches a buffered relation with only the named columns, and the statement reads the same.
func TestGateNamesTheColumnsAStatementReads(t *testing.T) {
	g, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range []struct {
		sql   string
		reads []string // columns it must read; "*": all of them
	}{
		{"SELECT severity, count(*) FROM alerts GROUP BY severity", []string{"severity"}},
		{"SELECT count(*) FROM alerts", nil},
		{"SELECT a.block, s.f.g FROM alerts a JOIN blocks b ON a.block = b.number", []string{"block", "number", "s", "f", "g"}},
		{"SELECT x FROM alerts JOIN blocks USING (k)", []string{"x", "k"}},
		{"SELECT * FROM alerts", []string{"*"}},
		{"SELECT * EXCLUDE (a) FROM alerts", []string{"*"}},
		{"SELECT COLUMNS('sev.*') FROM alerts", []string{"*"}},
		{"SELECT a FROM alerts a", []string{"*"}},
		{"SELECT alerts FROM alerts", []string{"*"}},
		{"SELECT #1 FROM alerts", []string{"*"}},
		{"SELECT x FROM alerts NATURAL JOIN blocks", []string{"*"}},
		{"SELECT x FROM alerts AS a(x, y)", []string{"*"}},
		{"WITH t AS (SELECT block FROM alerts) SELECT t FROM t", []string{"*"}},
	} {
		st, err := g.Check(t.Context(), c.sql)
		if err != nil {
			t.Errorf("gate(%q): %v", c.sql, err)
			continue
		}
		if len(c.reads) == 1 && c.reads[0] == "*" {
			if !st.AllColumns {
				t.Errorf("gate(%q) does not read every column", c.sql)
			}
			continue
		}
		if st.AllColumns {
			t.Errorf("gate(%q) reads every column, want only %q", c.sql, c.reads)
		}
		for _, col := range c.reads {
			if !st.Reads(col) {
				t.Errorf("gate(%q) does not read %s", c.sql, col)
			}
		}
		if st.Reads("unnamed") {
			t.Errorf("gate(%q) reads a column it never names", c.sql)
		}
	}
}

// ident quotes a name as a DuckDB identifier.
func ident(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
