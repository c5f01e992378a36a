// Package gate decides whether SQL may run in the Query Service, before anything runs: one
// read-only SELECT of datasets by name, calling only the functions of a read-only analysis (the
// allowlist), with CTE scope tracked as DuckDB binds it. It reads the statement with DuckDB's own
// parser, so it needs cgo; without it the package is empty and the engine answers
// query.ErrUnavailable.
package gate
