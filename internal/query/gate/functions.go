//go:build cgo

package gate

// allowedFunctions are the functions a statement may call, by their lower-case names: those of
// a read-only analysis of the datasets it reads. Every other function is refused, whatever it
// does; among them everything that takes SQL text, reads files, settings, variables, the
// environment or the engine's catalog, or has effects on the session. The names are DuckDB's
// own, as its parser writes them: an operator under its symbol (LIKE is ~~, x[1] is
// array_extract), a list literal as list_value, count(*) as count_star. The table functions a
// FROM may read are tableFunctions (gate.go).
//
// TestAllowlistCoversEveryFunctionOfTheEngine fails on a function of the linked DuckDB that is
// neither allowed here nor refused with a reason, so that each new one is judged; and
// TestAllowedFunctionsExist on an allowed name DuckDB does not know.
//
// A bare name that names no column is read by DuckDB as a call without arguments of a few
// functions (current_date, current_timestamp, localtime..., and current_catalog,
// current_schema, current_user, current_role, session_user, user): the gate sees a column,
// and those answer constants of the engine's fresh database ("memory", "main", "duckdb").
var allowedFunctions = map[string]bool{
	// Arithmetic and math: the operators (+, -, *, /, // for integer division, %, ** and ^ for
	// powers, @ for the absolute value, ! for the factorial, &, |, <<, >>, ~ and xor on bits)
	// and the numeric functions.
	"+": true, "-": true, "*": true, "/": true, "//": true, "%": true, "**": true, "^": true, "@": true,
	"!__postfix": true, "&": true, "|": true, "<<": true, ">>": true, "~": true, "xor": true,
	"add": true, "subtract": true, "multiply": true, "divide": true, "mod": true, "fdiv": true, "fmod": true,
	"abs": true, "sign": true, "signbit": true, "ceil": true, "ceiling": true, "floor": true, "round": true,
	"round_even": true, "roundbankers": true, "trunc": true, "even": true, "sqrt": true, "cbrt": true,
	"exp": true, "ln": true, "log": true, "log10": true, "log2": true, "pow": true, "power": true,
	"pi": true, "sin": true, "cos": true, "tan": true, "cot": true, "asin": true, "acos": true,
	"atan": true, "atan2": true, "sinh": true, "cosh": true, "tanh": true, "asinh": true, "acosh": true,
	"atanh": true, "degrees": true, "radians": true, "factorial": true, "gamma": true, "lgamma": true,
	"gcd": true, "greatest_common_divisor": true, "lcm": true, "least_common_multiple": true,
	"isfinite": true, "isinf": true, "isnan": true, "nextafter": true, "random": true,
	"equi_width_bins": true, "bit_count": true, "bit_position": true, "get_bit": true, "set_bit": true,
	"bitstring": true,

	// Comparison and logic beyond the comparison operators, AND, OR, NOT, IN, BETWEEN, IS NULL,
	// CASE and COALESCE (which are no functions): LIKE (~~), NOT LIKE (!~~), ILIKE (~~*), NOT
	// ILIKE (!~~*), GLOB (~~~), their ESCAPE forms, greatest, least, nullif, switch (a CASE over
	// a map), and error, which fails the statement with a message of its own.
	"~~": true, "!~~": true, "~~*": true, "!~~*": true, "~~~": true,
	"like_escape": true, "not_like_escape": true, "ilike_escape": true, "not_ilike_escape": true,
	"greatest": true, "least": true, "nullif": true, "switch": true, "error": true,

	// Strings: concatenation (||), starts-with (^@), case, length, padding and trimming,
	// searching, splitting, similarity, formatting, and paths and URLs as text.
	"||": true, "^@": true, "concat": true, "concat_ws": true, "lower": true, "lcase": true, "upper": true,
	"ucase": true, "length": true, "len": true, "strlen": true, "char_length": true,
	"character_length": true, "octet_length": true, "bit_length": true, "length_grapheme": true,
	"left": true, "left_grapheme": true, "right": true, "right_grapheme": true, "substr": true,
	"substring": true, "substring_grapheme": true, "lpad": true, "rpad": true, "trim": true,
	"ltrim": true, "rtrim": true, "repeat": true, "replace": true, "reverse": true, "translate": true,
	"strip_accents": true, "nfc_normalize": true, "ascii": true, "chr": true, "ord": true,
	"unicode": true, "contains": true, "instr": true, "position": true, "strpos": true,
	"starts_with": true, "prefix": true, "ends_with": true, "suffix": true, "split": true,
	"split_part": true, "str_split": true, "string_split": true, "string_to_array": true,
	"levenshtein": true, "damerau_levenshtein": true, "editdist3": true, "hamming": true,
	"mismatches": true, "jaccard": true, "jaro_similarity": true, "jaro_winkler_similarity": true,
	"format": true, "printf": true, "bar": true, "format_bytes": true, "formatreadablesize": true,
	"formatreadabledecimalsize": true, "parse_formatted_bytes": true, "url_encode": true,
	"url_decode": true, "parse_path": true, "parse_dirname": true, "parse_dirpath": true,
	"parse_filename": true,

	// Regular expressions (SIMILAR TO and ~ are regexp_full_match).
	"regexp_matches": true, "regexp_full_match": true, "regexp_extract": true,
	"regexp_extract_all": true, "regexp_replace": true, "regexp_escape": true,
	"regexp_split_to_array": true, "regexp_split_to_table": true, "string_split_regex": true,
	"str_split_regex": true,

	// Dates and times: the current date and time, parts, truncation, arithmetic, formatting and
	// parsing, and the intervals (INTERVAL 1 DAY is to_days).
	"now": true, "today": true, "current_date": true, "get_current_time": true,
	"get_current_timestamp": true, "current_localtime": true, "current_localtimestamp": true,
	"transaction_timestamp": true, "date_part": true, "datepart": true, "date_trunc": true,
	"datetrunc": true, "date_diff": true, "datediff": true, "date_sub": true, "datesub": true,
	"date_add": true, "age": true, "ago": true, "time_bucket": true, "last_day": true,
	"days_in_month": true, "strftime": true, "strptime": true, "try_strptime": true,
	"epoch": true, "epoch_ms": true, "epoch_us": true, "epoch_ns": true, "to_timestamp": true,
	"make_date": true, "make_time": true, "make_timestamp": true, "make_timestamp_ms": true,
	"make_timestamp_ns": true, "make_timestamptz": true, "timezone": true, "timezone_hour": true,
	"timezone_minute": true, "era": true, "millennium": true, "century": true, "decade": true,
	"year": true, "isoyear": true, "quarter": true, "month": true, "monthname": true, "week": true,
	"weekofyear": true, "yearweek": true, "day": true, "dayname": true, "dayofmonth": true,
	"dayofweek": true, "dayofyear": true, "weekday": true, "isodow": true, "julian": true,
	"hour": true, "minute": true, "second": true, "millisecond": true, "microsecond": true,
	"nanosecond": true, "normalized_interval": true, "to_millennia": true, "to_centuries": true,
	"to_decades": true, "to_years": true, "to_quarters": true, "to_months": true, "to_weeks": true,
	"to_days": true, "to_hours": true, "to_minutes": true, "to_seconds": true,
	"to_milliseconds": true, "to_microseconds": true,

	// Lists and arrays: literals ([1, 2] is list_value), unnest in a select list, ranges,
	// element access and slices (x[1], x[1:2]), the list functions with lambdas (list_transform,
	// list_filter, list_reduce), list_aggregate (its second argument names an aggregate, and
	// every aggregate of the engine is one below), containment (<@, @>, &&) and distances (<->,
	// <=>).
	"list_value": true, "list_pack": true, "array_value": true, "unnest": true, "unlist": true,
	"range": true, "generate_series": true, "generate_subscripts": true, "cardinality": true,
	"flatten": true, "apply": true, "filter": true, "reduce": true, "aggregate": true,
	"grade_up": true, "<@": true, "@>": true, "&&": true, "<->": true, "<=>": true,
	"list_aggr": true, "list_aggregate": true, "list_any_value": true, "list_append": true,
	"list_apply": true, "list_approx_count_distinct": true, "list_avg": true, "list_bit_and": true,
	"list_bit_or": true, "list_bit_xor": true, "list_bool_and": true, "list_bool_or": true,
	"list_cat": true, "list_concat": true, "list_contains": true, "list_cosine_distance": true,
	"list_cosine_similarity": true, "list_count": true, "list_distance": true, "list_distinct": true,
	"list_dot_product": true, "list_element": true, "list_entropy": true, "list_extract": true,
	"list_filter": true, "list_first": true, "list_grade_up": true, "list_has": true,
	"list_has_all": true, "list_has_any": true, "list_histogram": true, "list_indexof": true,
	"list_inner_product": true, "list_intersect": true, "list_kurtosis": true,
	"list_kurtosis_pop": true, "list_last": true, "list_mad": true, "list_max": true,
	"list_median": true, "list_min": true, "list_mode": true, "list_negative_dot_product": true,
	"list_negative_inner_product": true, "list_position": true, "list_prepend": true,
	"list_product": true, "list_reduce": true, "list_resize": true, "list_reverse": true,
	"list_reverse_sort": true, "list_select": true, "list_sem": true, "list_skewness": true,
	"list_slice": true, "list_sort": true, "list_stddev_pop": true, "list_stddev_samp": true,
	"list_string_agg": true, "list_sum": true, "list_transform": true, "list_unique": true,
	"list_var_pop": true, "list_var_samp": true, "list_where": true, "list_zip": true,
	"array_aggr": true, "array_aggregate": true, "array_append": true, "array_apply": true,
	"array_cat": true, "array_concat": true, "array_contains": true, "array_cosine_distance": true,
	"array_cosine_similarity": true, "array_cross_product": true, "array_distance": true,
	"array_distinct": true, "array_dot_product": true, "array_extract": true, "array_filter": true,
	"array_grade_up": true, "array_has": true, "array_has_all": true, "array_has_any": true,
	"array_indexof": true, "array_inner_product": true, "array_intersect": true,
	"array_length": true, "array_negative_dot_product": true, "array_negative_inner_product": true,
	"array_pop_back": true, "array_pop_front": true, "array_position": true, "array_prepend": true,
	"array_push_back": true, "array_push_front": true, "array_reduce": true, "array_resize": true,
	"array_reverse": true, "array_reverse_sort": true, "array_select": true, "array_slice": true,
	"array_sort": true, "array_to_string": true, "array_to_string_comma_default": true,
	"array_transform": true, "array_unique": true, "array_where": true, "array_zip": true,

	// Structs, maps, unions and variants: literals ({'a': 1} is struct_pack, (1, 2) is row),
	// field and key access, and their parts.
	"struct_pack": true, "row": true, "struct_extract": true, "struct_extract_at": true,
	"struct_concat": true, "struct_contains": true, "struct_has": true, "struct_indexof": true,
	"struct_position": true, "struct_insert": true, "struct_update": true, "struct_keys": true,
	"struct_values": true, "remap_struct": true, "map": true, "map_from_entries": true,
	"map_concat": true, "map_contains": true, "map_contains_entry": true,
	"map_contains_value": true, "map_entries": true, "map_extract": true,
	"map_extract_value": true, "map_keys": true, "map_values": true, "element_at": true,
	"union_value": true, "union_extract": true, "union_tag": true, "variant_extract": true,
	"variant_typeof": true, "variant_normalize": true,

	// JSON values: extraction (->> is json_extract_string; -> is written as a lambda and
	// bound as json_extract), tests, structure, and JSON made from values. None of them takes
	// SQL text.
	"->>": true, "json": true, "json_extract": true, "json_extract_string": true,
	"json_extract_path": true, "json_extract_path_text": true, "json_value": true,
	"json_exists": true, "json_contains": true, "json_array_length": true, "json_keys": true,
	"json_type": true, "json_valid": true, "json_structure": true, "json_transform": true,
	"json_transform_strict": true, "from_json": true, "from_json_strict": true,
	"json_array": true, "json_object": true, "json_quote": true, "json_merge_patch": true,
	"json_pretty": true, "to_json": true, "array_to_json": true, "row_to_json": true,
	"json_group_array": true, "json_group_object": true, "json_group_structure": true,

	// Conversion and types: encodings (base64, hex, binary), text to and from blobs, a
	// value's type, enum values, the parts of a UUID.
	"base64": true, "to_base64": true, "from_base64": true, "hex": true, "to_hex": true,
	"from_hex": true, "unhex": true, "bin": true, "to_binary": true, "from_binary": true,
	"unbin": true, "to_base": true, "encode": true, "decode": true, "typeof": true,
	"can_cast_implicitly": true, "cast_to_type": true, "enum_code": true, "enum_first": true,
	"enum_last": true, "enum_range": true, "enum_range_boundary": true,
	"uuid_extract_timestamp": true, "uuid_extract_version": true,

	// Hashing and identifiers.
	"hash": true, "md5": true, "md5_number": true, "md5_number_lower": true,
	"md5_number_upper": true, "sha1": true, "sha256": true, "uuid": true, "gen_random_uuid": true,
	"uuidv4": true, "uuidv7": true,

	// Aggregates (count(*) is count_star; percentile_cont(…) WITHIN GROUP is quantile_cont).
	"count": true, "count_star": true, "count_if": true, "countif": true, "sum": true,
	"sumkahan": true, "kahan_sum": true, "fsum": true, "product": true, "avg": true, "mean": true,
	"favg": true, "wavg": true, "weighted_avg": true, "geomean": true, "geometric_mean": true,
	"min": true, "max": true, "min_by": true, "max_by": true, "arg_min": true, "arg_max": true,
	"argmin": true, "argmax": true, "arg_min_null": true, "arg_max_null": true,
	"arg_min_nulls_last": true, "arg_max_nulls_last": true, "first": true, "last": true,
	"any_value": true, "arbitrary": true, "list": true, "array_agg": true, "string_agg": true,
	"group_concat": true, "listagg": true, "bool_and": true, "bool_or": true, "bit_and": true,
	"bit_or": true, "bit_xor": true, "bitstring_agg": true, "stddev": true, "stddev_pop": true,
	"stddev_samp": true, "variance": true, "var_pop": true, "var_samp": true, "sem": true,
	"skewness": true, "kurtosis": true, "kurtosis_pop": true, "entropy": true, "mad": true,
	"median": true, "mode": true, "quantile": true, "quantile_cont": true, "quantile_disc": true,
	"approx_quantile": true, "reservoir_quantile": true, "approx_count_distinct": true,
	"approx_top_k": true, "histogram": true, "histogram_exact": true, "corr": true,
	"covar_pop": true, "covar_samp": true, "regr_avgx": true, "regr_avgy": true,
	"regr_count": true, "regr_intercept": true, "regr_r2": true, "regr_slope": true,
	"regr_sxx": true, "regr_sxy": true, "regr_syy": true,

	// Window functions (an aggregate may be one too, with OVER).
	"row_number": true, "rank": true, "dense_rank": true, "rank_dense": true,
	"percent_rank": true, "cume_dist": true, "ntile": true, "lag": true, "lead": true,
	"first_value": true, "last_value": true, "nth_value": true, "fill": true,
}
