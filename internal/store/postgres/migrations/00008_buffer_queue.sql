-- +goose Up
-- The Buffer Queue: each buffered publish is a message for the trusted sink. Its state lives on
-- the publish record itself: queued (claimable once visible_at has passed), committed (the sink
-- loaded it; batch_cursor and rows_inserted say what it added) or dead (it failed every receive).
-- receive_count counts claims; a claim makes the message invisible until visible_at.
ALTER TABLE buffer_publishes ADD COLUMN state TEXT NOT NULL DEFAULT 'queued';
ALTER TABLE buffer_publishes ADD COLUMN receive_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE buffer_publishes ADD COLUMN visible_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE buffer_publishes ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
ALTER TABLE buffer_publishes ADD COLUMN batch_cursor BIGINT;
ALTER TABLE buffer_publishes ADD COLUMN rows_inserted BIGINT;
ALTER TABLE buffer_publishes ADD COLUMN finished_at BIGINT;
CREATE INDEX buffer_publishes_queued ON buffer_publishes (visible_at, id) WHERE state = 'queued';
CREATE INDEX buffer_publishes_dead ON buffer_publishes (dataset_uuid, id) WHERE state = 'dead';

-- +goose Down
DROP INDEX buffer_publishes_dead;
DROP INDEX buffer_publishes_queued;
ALTER TABLE buffer_publishes DROP COLUMN finished_at;
ALTER TABLE buffer_publishes DROP COLUMN rows_inserted;
ALTER TABLE buffer_publishes DROP COLUMN batch_cursor;
ALTER TABLE buffer_publishes DROP COLUMN last_error;
ALTER TABLE buffer_publishes DROP COLUMN visible_at;
ALTER TABLE buffer_publishes DROP COLUMN receive_count;
ALTER TABLE buffer_publishes DROP COLUMN state;
