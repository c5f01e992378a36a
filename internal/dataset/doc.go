// Package dataset is the data database: one table per buffered dataset, created and migrated from
// its schema, loaded a batch at a time, and read back with where filters.
//
// Many untrusted tasks add rows to one buffered dataset without touching a database: each writes
// a JSONL batch to object storage, and the trusted sink reads it (ParseBatch checks every row
// against the dataset's schema) and loads it (Load) in one transaction. The tenant of every row is
// the publisher's, never a value of the rows.
//
// A dataset's table, "ds_" followed by the 32 hex digits of its uuid, holds:
//
//	_row     a row number, increasing in insertion order: the order Rows reads and pages by
//	org_id   the tenant
//	...      the declared columns; required ones NOT NULL, and so are the unique key's
//	_batch   the load that inserted the row (the seq of its baton_dataset_batches entry)
//
// with UNIQUE (org_id, unique key...), an index (org_id, columns...) per declared index and one
// on _batch. Three bookkeeping tables sit beside the datasets' tables:
//
//	baton_dataset_tables   the schema each table was last ensured with
//	baton_dataset_batches  the ledger: one entry per load, keyed by the batch id, with its result
//	baton_dataset_cursors  each dataset's last batch cursor
//
// A load's cursor lives in its ledger entry, not in its rows: the cursor is taken at the very end
// of the load's transaction, and stamping it on rows already inserted would write every row twice.
// Rows joins the ledger to report each row's cursor.
//
// The database is PostgreSQL in production and a SQLite file in development. Both run the same
// statements but for the bulk insert: COPY into a temporary table and one INSERT ... SELECT on
// PostgreSQL, multi-row INSERTs on SQLite.
package dataset
