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
// on _batch. Four bookkeeping tables sit beside the datasets' tables:
//
//	baton_dataset_tables   the schema each table was last ensured with
//	baton_dataset_batches  the ledger: one entry per load, keyed by the batch id, with its result
//	baton_dataset_cursors  each dataset's last batch cursor
//	baton_dataset_retired  the dataset versions a reset retired: batches of them no longer load
//
// A load's cursor lives in its ledger entry, not in its rows: the cursor is taken at the very end
// of the load's transaction, and stamping it on rows already inserted would write every row twice.
// Rows joins the ledger to report each row's cursor.
//
// A batch is of one version of its dataset. A reset (EnsureAll with a Table's ClearTenant and
// RetireVersion) removes a tenant's rows and retires the version they were of, so that a batch of
// that version still on its way (a sink claimed it before the reset) cannot land in the emptied
// table, which readers of the next version see: its Load fails with ErrStaleVersion. The
// dataset's cursor row orders the two: the reset locks it before it deletes, and a load takes it
// at its end, then reads the retired versions in a statement of its own. A load that took the
// cursor first commits first: the reset waits for it at the cursor row, and the reset's delete,
// which comes after, removes the load's rows. A load that waits for the reset's lock reads, once
// the reset committed, that its version is retired, and rolls back. On SQLite the write
// transactions run one at a time, in either order.
//
// The database is PostgreSQL in production and a SQLite file in development. Both run the same
// statements but for the bulk insert: COPY into a temporary table and one INSERT ... SELECT on
// PostgreSQL, multi-row INSERTs on SQLite.
package dataset
