-- +goose Up
-- Backpressure's coalesce mode: a held routing can absorb later events of its scope (the same
-- partition, or the next cursors of the same dataset version), so it counts the events it
-- covers; a partition's routing is found again by its key.
ALTER TABLE held_routings ADD COLUMN events INTEGER NOT NULL DEFAULT 1;
CREATE INDEX held_routings_key ON held_routings (tenant, pipeline, job, key);

-- +goose Down
DROP INDEX held_routings_key;
ALTER TABLE held_routings DROP COLUMN events;
