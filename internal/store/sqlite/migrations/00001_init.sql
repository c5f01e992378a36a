-- +goose Up
-- Times are Unix milliseconds; JSON is stored verbatim as text.
CREATE TABLE jobs (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    id                  TEXT NOT NULL UNIQUE,
    tenant              TEXT NOT NULL,
    name                TEXT NOT NULL DEFAULT '',
    status              TEXT NOT NULL,
    idempotency_key     TEXT,
    request_hash        TEXT NOT NULL DEFAULT '',
    total_tasks         INTEGER NOT NULL,
    unfinished_tasks    INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    finished_at         INTEGER,
    cancel_requested_at INTEGER,
    failure_detected_at INTEGER
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_tenant_seq ON jobs (tenant, seq);
CREATE INDEX jobs_tenant_status_seq ON jobs (tenant, status, seq);

CREATE TABLE tasks (
    seq                  INTEGER PRIMARY KEY AUTOINCREMENT,
    id                   TEXT NOT NULL UNIQUE,
    job_id               TEXT NOT NULL REFERENCES jobs (id),
    task_key             TEXT NOT NULL,
    name                 TEXT NOT NULL,
    queue                TEXT NOT NULL,
    priority             INTEGER NOT NULL DEFAULT 0,
    runtime              TEXT NOT NULL DEFAULT 'pull',
    input                TEXT NOT NULL,
    depends_on           TEXT NOT NULL,
    unfinished_parents   INTEGER NOT NULL,
    status               TEXT NOT NULL,
    attempt              INTEGER NOT NULL DEFAULT 0,
    retry_base           INTEGER NOT NULL DEFAULT 0,
    max_attempts         INTEGER NOT NULL,
    available_at         INTEGER NOT NULL,
    lease_token          TEXT NOT NULL DEFAULT '',
    lease_expires_at     INTEGER,
    worker_id            TEXT NOT NULL DEFAULT '',
    started_at           INTEGER,
    heartbeat_at         INTEGER,
    deadline_at          INTEGER,
    reap_at              INTEGER,
    cancel_requested_at  INTEGER,
    cancel_reason        TEXT NOT NULL DEFAULT '',
    output               TEXT,
    error                TEXT,
    backoff_base_ms      INTEGER NOT NULL,
    backoff_max_ms       INTEGER NOT NULL,
    timeout_ms           INTEGER NOT NULL,
    heartbeat_timeout_ms INTEGER NOT NULL,
    cancel_grace_ms      INTEGER NOT NULL,
    created_at           INTEGER NOT NULL,
    finished_at          INTEGER,
    dead_lettered_at     INTEGER,
    last_event_type      TEXT,
    last_event_at        INTEGER,
    UNIQUE (job_id, task_key)
);
CREATE INDEX tasks_ready ON tasks (queue, priority DESC, available_at, seq) WHERE status = 'pending';
CREATE INDEX tasks_reap ON tasks (reap_at) WHERE status = 'running';
CREATE INDEX tasks_dead ON tasks (seq) WHERE dead_lettered_at IS NOT NULL;

CREATE TABLE task_deps (
    child_id  TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    job_id    TEXT NOT NULL,
    PRIMARY KEY (child_id, parent_id)
) WITHOUT ROWID;
CREATE INDEX task_deps_parent ON task_deps (parent_id);

CREATE TABLE attempts (
    task_id     TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    worker_id   TEXT NOT NULL,
    lease_token TEXT NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    outcome     TEXT NOT NULL DEFAULT '',
    result      TEXT NOT NULL DEFAULT '',
    error       TEXT,
    metrics     TEXT,
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;

CREATE TABLE events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id   TEXT NOT NULL,
    task_id  TEXT NOT NULL DEFAULT '',
    task_key TEXT NOT NULL DEFAULT '',
    type     TEXT NOT NULL,
    at       INTEGER NOT NULL,
    data     TEXT NOT NULL
);
CREATE INDEX events_job ON events (job_id, id);

CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    topic        TEXT NOT NULL,
    msg_key      TEXT NOT NULL DEFAULT '',
    payload      TEXT NOT NULL,
    available_at INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    sent_at      INTEGER
);
CREATE INDEX outbox_unsent ON outbox (available_at) WHERE sent_at IS NULL;

-- +goose Down
DROP TABLE outbox;
DROP TABLE events;
DROP TABLE attempts;
DROP TABLE task_deps;
DROP TABLE tasks;
DROP TABLE jobs;
