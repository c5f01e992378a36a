-- +goose Up
-- The push dispatcher claims ready push tasks of every queue; tasks_ready (00001) serves pull claims.
CREATE INDEX tasks_ready_push ON tasks (priority DESC, available_at, seq) WHERE status = 'pending' AND runtime = 'push';

-- +goose Down
DROP INDEX tasks_ready_push;
