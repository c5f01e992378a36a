-- +goose Up
-- The relay prunes sent messages by age; outbox_unsent (00001) serves its claims.
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;

-- +goose Down
DROP INDEX outbox_sent;
