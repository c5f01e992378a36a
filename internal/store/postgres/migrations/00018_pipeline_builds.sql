-- +goose Up
-- A changed deploy rebuilds the jobs its change affects beside the active version before it
-- takes over: building_version names the version being built (at most one per pipeline), a
-- version's build holds how far the build has come, and its pointers the dataset versions its
-- pipeline's outputs had when it was last active (a rollback to it restores them).
ALTER TABLE pipelines ADD COLUMN building_version TEXT NOT NULL DEFAULT '';
ALTER TABLE pipeline_versions ADD COLUMN build TEXT NOT NULL DEFAULT '';
ALTER TABLE pipeline_versions ADD COLUMN pointers TEXT NOT NULL DEFAULT '';
-- The tasks an activation canceled because the build ran their updates: resumed if their
-- version is made active again.
CREATE INDEX tasks_replaced ON tasks (job_id) WHERE status = 'canceled' AND cancel_reason = 'pipeline_version_replaced';

-- +goose Down
DROP INDEX tasks_replaced;
ALTER TABLE pipeline_versions DROP COLUMN pointers;
ALTER TABLE pipeline_versions DROP COLUMN build;
ALTER TABLE pipelines DROP COLUMN building_version;
