-- +goose Up
-- bootstrap.reset_outputs: one row per dataset a source job's reset emptied, written in the
-- transaction of the deploy that activated the version. Read by pipeline, it is the pipeline's
-- history of resets; read by dataset, the invalidation its consumers see.
CREATE TABLE output_resets (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant            TEXT NOT NULL,
    pipeline          TEXT NOT NULL,
    version           TEXT NOT NULL,
    job               TEXT NOT NULL,
    api_key           TEXT NOT NULL DEFAULT '',
    dataset_uuid      TEXT NOT NULL,
    dataset_name      TEXT NOT NULL DEFAULT '',
    output_index      INTEGER NOT NULL,
    previous_version  TEXT NOT NULL,
    dataset_version   TEXT NOT NULL,
    rows_removed      INTEGER NOT NULL,
    batches_discarded INTEGER NOT NULL,
    at                INTEGER NOT NULL
);
CREATE INDEX output_resets_pipeline ON output_resets (tenant, pipeline, id);
CREATE INDEX output_resets_dataset ON output_resets (dataset_uuid, id);

-- +goose Down
DROP TABLE output_resets;
