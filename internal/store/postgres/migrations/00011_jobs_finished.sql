-- +goose Up
-- Retention finds finished jobs by finish time, oldest first, without reading the jobs that are
-- still processing (finished_at is NULL until a job finishes, and again after a resume).
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX jobs_finished;
