-- +goose Up
-- update_strategy replace: each commit of a partition of a dataset version, written in the
-- transaction that stores the partition's dataset event. Every commit is kept; a partition's
-- current commit is its newest (the highest id). A staging folder that any commit names is never
-- collected.
CREATE TABLE partition_commits (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT NOT NULL,
    dataset_uuid    TEXT NOT NULL,
    dataset_version TEXT NOT NULL,
    partition_key   TEXT NOT NULL,
    partition_start INTEGER NOT NULL,
    partition_end   INTEGER NOT NULL,
    location        TEXT NOT NULL,
    row_count       INTEGER,
    bytes           INTEGER NOT NULL,
    task_id         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    committed_at    INTEGER NOT NULL
);
-- A repeated report of the same attempt's partition commits nothing new.
CREATE UNIQUE INDEX partition_commits_location
    ON partition_commits (tenant, dataset_uuid, dataset_version, partition_key, location);
-- The dataset view walks a version's partitions in order and finds each one's newest commit.
CREATE INDEX partition_commits_order
    ON partition_commits (tenant, dataset_uuid, dataset_version, partition_start, partition_end, partition_key, id);
-- The staging collector asks which attempts of a dataset committed anything.
CREATE INDEX partition_commits_attempt ON partition_commits (dataset_uuid, task_id, attempt);

-- +goose Down
DROP TABLE partition_commits;
