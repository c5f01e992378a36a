-- +goose Up
-- Pipelines: deployed DAG documents, their immutable versions (content hashes) and which one is
-- active; datasets (every job output, and named buffered datasets) with their versions; and the
-- inputs of each version, which routing looks up by dataset.
CREATE TABLE pipelines (
    tenant         TEXT NOT NULL,
    name           TEXT NOT NULL,
    active_version TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE pipeline_versions (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant       TEXT NOT NULL,
    pipeline     TEXT NOT NULL,
    version      TEXT NOT NULL,
    document     TEXT NOT NULL,
    content_type TEXT NOT NULL,
    spec         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (tenant, pipeline, version)
);

CREATE TABLE datasets (
    uuid            TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    producer        TEXT NOT NULL,
    name            TEXT,
    pipeline        TEXT NOT NULL DEFAULT '',
    job             TEXT NOT NULL DEFAULT '',
    output_index    INTEGER NOT NULL DEFAULT 0,
    current_version TEXT NOT NULL,
    storage         TEXT NOT NULL DEFAULT '',
    write_mode      TEXT NOT NULL DEFAULT '',
    schema          TEXT,
    filter_fields   TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (tenant, producer)
);
CREATE UNIQUE INDEX datasets_name ON datasets (tenant, name) WHERE name IS NOT NULL;

CREATE TABLE dataset_versions (
    dataset_uuid TEXT NOT NULL,
    version      TEXT NOT NULL,
    storage_ref  TEXT,
    config_hash  TEXT NOT NULL DEFAULT '',
    range_start  INTEGER,
    range_end    INTEGER,
    task_id      TEXT NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (dataset_uuid, version)
);

CREATE TABLE pipeline_inputs (
    dataset_uuid TEXT NOT NULL,
    tenant       TEXT NOT NULL,
    pipeline     TEXT NOT NULL,
    version      TEXT NOT NULL,
    job          TEXT NOT NULL,
    input_index  INTEGER NOT NULL,
    PRIMARY KEY (dataset_uuid, tenant, pipeline, version, job, input_index)
);

-- A routed or source task's job names its pipeline; the task carries its data-plane payload.
ALTER TABLE jobs ADD COLUMN pipeline TEXT;
ALTER TABLE jobs ADD COLUMN pipeline_version TEXT;
ALTER TABLE jobs ADD COLUMN pipeline_job TEXT;
CREATE INDEX jobs_pipeline ON jobs (tenant, pipeline, pipeline_job) WHERE pipeline IS NOT NULL;
ALTER TABLE tasks ADD COLUMN route TEXT;

-- scaling.max_concurrency: tasks of one concurrency key run at most concurrency_limit at a time.
-- A claim of such a task locks its key's row in concurrency_groups, so that claims on every
-- replica count the key's running tasks one after the other.
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
ALTER TABLE tasks ADD COLUMN concurrency_limit INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_concurrency ON tasks (concurrency_key) WHERE status = 'running' AND concurrency_key IS NOT NULL;
CREATE TABLE concurrency_groups (
    group_key TEXT PRIMARY KEY
);
CREATE INDEX dataset_events_dataset ON dataset_events (dataset_uuid, id);
-- The router claims the outbox's unsent dataset events by topic, past the other topics' rows.
CREATE INDEX outbox_unsent_topic ON outbox (topic, id) WHERE sent_at IS NULL;

-- +goose Down
DROP INDEX outbox_unsent_topic;
DROP INDEX dataset_events_dataset;
DROP TABLE concurrency_groups;
DROP INDEX tasks_concurrency;
ALTER TABLE tasks DROP COLUMN concurrency_limit;
ALTER TABLE tasks DROP COLUMN concurrency_key;
ALTER TABLE tasks DROP COLUMN route;
DROP INDEX jobs_pipeline;
ALTER TABLE jobs DROP COLUMN pipeline_job;
ALTER TABLE jobs DROP COLUMN pipeline_version;
ALTER TABLE jobs DROP COLUMN pipeline;
DROP TABLE pipeline_inputs;
DROP TABLE dataset_versions;
DROP TABLE datasets;
DROP TABLE pipeline_versions;
DROP TABLE pipelines;
