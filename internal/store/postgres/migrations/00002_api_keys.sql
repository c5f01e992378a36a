-- +goose Up
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE, -- hex SHA-256 of the secret; the secret itself is never stored
    prefix      TEXT NOT NULL,        -- the secret's first characters, to tell keys apart in lists
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

-- Requests per key and UTC day, for the daily quota; shared by every replica.
CREATE TABLE api_key_usage (
    key_id TEXT NOT NULL,
    day    TEXT NOT NULL,
    count  BIGINT NOT NULL,
    PRIMARY KEY (key_id, day)
);

-- +goose Down
DROP TABLE api_key_usage;
DROP TABLE api_keys;
