-- +goose Up
-- Fewer writes per task on the hot path. A claim or a completion changes a task's status, which
-- the partial indexes depend on, so each writes a new row version into every full index of the
-- table: the index on seq was one more for every transition, and nothing looks a task up by seq
-- (the lists that page by it have their own indexes or a job's few tasks to sort). The foreign
-- key on job_id looked the job up and share-locked its row for every task inserted: a third of
-- the cost of creating a job's tasks. Tasks are only ever inserted by the transaction that
-- creates their job or holds it locked, so the check never failed. id stays unique and not null,
-- and is the replica identity (what logical replication matches rows by).
-- rolling-upgrade: safe because the previous release only loses a check that never failed: it
-- inserts tasks in the transaction that creates their job or holds it locked, and never deletes jobs.
ALTER TABLE tasks DROP CONSTRAINT tasks_job_id_fkey;
-- rolling-upgrade: safe because the previous release names the key in no ON CONFLICT and looks no
-- task up by seq alone: its seq orderings are served by tasks_ready, tasks_dead and UNIQUE (job_id, task_key).
ALTER TABLE tasks DROP CONSTRAINT tasks_pkey;
ALTER TABLE tasks REPLICA IDENTITY USING INDEX tasks_id_key;

-- +goose Down
ALTER TABLE tasks REPLICA IDENTITY DEFAULT;
ALTER TABLE tasks ADD PRIMARY KEY (seq);
ALTER TABLE tasks ADD CONSTRAINT tasks_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs (id) NOT VALID;
