-- Built CONCURRENTLY, outside a transaction, so that replicas of the previous release keep
-- writing jobs while the index builds on a large table. IF NOT EXISTS lets a migration that was
-- interrupted run again (drop an index left INVALID by a failed build by hand first).
-- +goose NO TRANSACTION

-- +goose Up
-- Retention finds finished jobs by finish time, oldest first, without reading the jobs that are
-- still processing (finished_at is NULL until a job finishes, and again after a resume).
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobs_finished;
