-- Concurrency keys: a task may carry a key (a tenant, say); a queue's per-key limit caps the
-- running tasks of each key, and claims take keys in turn from after the last one served
-- (key_cursor). Only keyed available tasks are in the new index; its predicate tests the key
-- first, so a write of a task without one settles it at the first term.
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
CREATE INDEX tasks_available_key ON tasks (queue, priority, concurrency_key, run_at, id)
    WHERE concurrency_key IS NOT NULL AND state = 'available';
ALTER TABLE queues ADD COLUMN per_key_limit INTEGER;
ALTER TABLE queues ADD COLUMN key_cursor TEXT;
