-- +goose Up
-- The W3C trace context (traceparent) a worker reports an attempt under, kept for tracing.
ALTER TABLE attempts ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE attempts DROP COLUMN traceparent;
