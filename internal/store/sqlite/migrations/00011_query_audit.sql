-- +goose Up
-- The Query Service's audit trail: one row per query, with a hash of its SQL and the dataset
-- versions it read (a JSON array), never the SQL text or a value.
CREATE TABLE query_audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT NOT NULL,
    at          INTEGER NOT NULL,
    caller      TEXT NOT NULL,
    sql_hash    TEXT NOT NULL,
    datasets    TEXT NOT NULL,
    status      TEXT NOT NULL,
    row_count   INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL
);
CREATE INDEX query_audit_tenant ON query_audit (tenant, id);
CREATE INDEX query_audit_at ON query_audit (at);

-- +goose Down
DROP TABLE query_audit;
