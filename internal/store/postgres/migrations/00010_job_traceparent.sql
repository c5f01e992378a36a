-- +goose Up
-- The W3C trace context (traceparent) a job was submitted under, so that the spans of its tasks'
-- workers join the producer's trace. Each task keeps a copy, written when the task is inserted,
-- so that a claim hands it to the worker from the task row it already returns, without reading
-- the job. Defaulted to '' (no trace context): a server that does not know the columns inserts
-- and reads rows as before.
ALTER TABLE jobs ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE tasks DROP COLUMN traceparent;
ALTER TABLE jobs DROP COLUMN traceparent;
