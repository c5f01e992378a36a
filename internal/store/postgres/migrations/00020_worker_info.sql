-- +goose Up
-- What each worker said of itself when it last claimed: the isolation level its untrusted
-- children get. Written when it changes, read by the dashboard's worker list.
CREATE TABLE worker_info (
    worker_id TEXT PRIMARY KEY,
    isolation TEXT NOT NULL,
    seen_at   BIGINT NOT NULL
);

-- +goose Down
DROP TABLE worker_info;
