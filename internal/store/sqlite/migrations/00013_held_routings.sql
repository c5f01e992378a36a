-- +goose Up
-- Backpressure: the routings of dataset events to a pipeline job that its max_queue_depth or
-- max_queue_age held instead of creating tasks. The router releases them in id order once the
-- job's backlog has drained; the row is deleted in the transaction that creates the task.
CREATE TABLE held_routings (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant       TEXT NOT NULL,
    pipeline     TEXT NOT NULL,
    version      TEXT NOT NULL,
    job          TEXT NOT NULL,
    input_index  INTEGER NOT NULL,
    key          TEXT NOT NULL,
    event        TEXT NOT NULL,
    held_at      INTEGER NOT NULL,
    paused_since INTEGER NOT NULL
);
CREATE INDEX held_routings_job ON held_routings (tenant, pipeline, job, id);

-- +goose Down
DROP TABLE held_routings;
