-- Concurrency keys: a task may carry a key (a tenant, say); a queue's per-key limit caps the
-- running tasks of each key, and claims take keys in turn from after the last one served
-- (key_cursor). Only keyed available tasks are in the new index, so other tasks pay nothing.
ALTER TABLE sked_tasks ADD COLUMN concurrency_key text;
CREATE INDEX sked_tasks_available_key ON sked_tasks (queue, priority, concurrency_key, run_at, id)
    WHERE state = 'available' AND concurrency_key IS NOT NULL;
ALTER TABLE sked_queues ADD COLUMN per_key_limit integer, ADD COLUMN key_cursor text;
-- A per-key rate limit: at most per_key_rate_limit starts of one key in any window of
-- per_key_rate_period_ms, each claim's starts logged per key.
ALTER TABLE sked_queues ADD COLUMN per_key_rate_limit integer,
    ADD COLUMN per_key_rate_period_ms bigint;
CREATE TABLE sked_queue_key_starts (
    queue           text        NOT NULL,
    concurrency_key text        NOT NULL,
    started_at      timestamptz NOT NULL,
    n               integer     NOT NULL
);
CREATE INDEX sked_queue_key_starts_window ON sked_queue_key_starts (queue, started_at);
ANALYZE sked_queues;
