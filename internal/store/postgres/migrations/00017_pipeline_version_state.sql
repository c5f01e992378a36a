-- +goose Up
-- A pipeline version's state beside being active or not: '' for a deployed version,
-- 'rolled_back' for one a rollback replaced (what its tasks report afterwards is stored but not
-- routed) until it is made active again.
ALTER TABLE pipeline_versions ADD COLUMN state TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE pipeline_versions DROP COLUMN state;
