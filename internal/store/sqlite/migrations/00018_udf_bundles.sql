-- +goose Up
-- User code bundles: immutable zip archives in object storage, each a tenant's, recorded with
-- who uploaded it and when. A bundle uploaded in two steps (a pre-signed PUT, then finalize) is
-- pending until finalized: sha256, size, language and entrypoint are then what its archive holds.
-- A disabled bundle's tasks fail instead of running it.
CREATE TABLE udf_bundles (
    tenant       TEXT NOT NULL,
    id           TEXT NOT NULL,
    object_key   TEXT NOT NULL,  -- the archive's key in object storage
    sha256       TEXT NOT NULL DEFAULT '',
    size         INTEGER NOT NULL DEFAULT 0,
    language     TEXT NOT NULL DEFAULT '',
    entrypoint   TEXT NOT NULL DEFAULT '',
    manifest     TEXT NOT NULL DEFAULT '',
    uploaded_by  TEXT NOT NULL,  -- the API key's id
    created_at   INTEGER NOT NULL,
    finalized_at INTEGER,
    disabled_at  INTEGER,
    disabled_by  TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, id)
);
CREATE INDEX udf_bundles_newest ON udf_bundles (tenant, created_at, id);

-- +goose Down
DROP TABLE udf_bundles;
