-- +goose Up
-- Upstream dataset events reported by tasks (internal and task-scoped dialects). At-least-once and
-- idempotent: a repeat of the same event by the same task is stored once.
CREATE TABLE dataset_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    dedupe_key      TEXT NOT NULL UNIQUE,
    job_id          TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    dataset_uuid    TEXT NOT NULL,
    dataset_version TEXT NOT NULL,
    cursor          INTEGER,
    partition_key   TEXT,
    range_start     INTEGER,
    range_end       INTEGER,
    created_at      INTEGER NOT NULL
);
CREATE INDEX dataset_events_task ON dataset_events (task_id, id);

-- Buffered dataset publishes (buffer-publish); the sink reads the batch later.
CREATE TABLE buffer_publishes (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id          TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    batch_uri        TEXT NOT NULL,
    job_id           TEXT NOT NULL,
    tenant           TEXT NOT NULL,
    dataset_uuid     TEXT NOT NULL DEFAULT '',
    dataset_version  TEXT NOT NULL DEFAULT '',
    record_count     INTEGER,
    content_type     TEXT NOT NULL DEFAULT '',
    batch_size_bytes INTEGER,
    dedupe_scope     TEXT NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    UNIQUE (task_id, attempt, batch_uri)
);

-- HMAC keys that sign capability tokens. Several verify at once during a rotation; the newest
-- unretired one signs.
CREATE TABLE signing_keys (
    kid        TEXT PRIMARY KEY,
    secret     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER
);

-- +goose Down
DROP TABLE signing_keys;
DROP TABLE buffer_publishes;
DROP TABLE dataset_events;
