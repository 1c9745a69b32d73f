-- Concurrency keys: a task may carry a key (a tenant, say); a queue's per-key limit caps the
-- running tasks of each key, and claims take keys in turn from after the last one served
-- (key_cursor). Only keyed available tasks are in the new index; its predicate tests the key
-- first, so a write of a task without one settles it at the first term.
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
CREATE INDEX tasks_available_key ON tasks (queue, priority, concurrency_key, run_at, id)
    WHERE concurrency_key IS NOT NULL AND state = 'available';
ALTER TABLE queues ADD COLUMN per_key_limit INTEGER;
ALTER TABLE queues ADD COLUMN key_cursor TEXT;
-- A per-key rate limit: at most per_key_rate_limit starts of one key in any window of
-- per_key_rate_period_ms, each claim's starts logged per key (microseconds).
ALTER TABLE queues ADD COLUMN per_key_rate_limit INTEGER;
ALTER TABLE queues ADD COLUMN per_key_rate_period_ms INTEGER;
CREATE TABLE queue_key_starts (
    queue           TEXT    NOT NULL,
    concurrency_key TEXT    NOT NULL,
    started_at      INTEGER NOT NULL,
    n               INTEGER NOT NULL
);
CREATE INDEX queue_key_starts_window ON queue_key_starts (queue, started_at);
