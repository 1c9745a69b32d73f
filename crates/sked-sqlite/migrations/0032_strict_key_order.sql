-- Strict order per key: in a queue whose key_order is 'strict', a key's tasks start one after
-- another in the order they were enqueued. The index finds each key's first task that holds
-- the others back (unfinished, or dead until retried or deleted); tasks without a key are not
-- in it. The rowid orders each key's entries.
ALTER TABLE queues ADD COLUMN key_order TEXT;
CREATE INDEX tasks_key_holding ON tasks (queue, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND (state = 'waiting' OR state = 'scheduled'
        OR state = 'available' OR state = 'running' OR state = 'retrying' OR state = 'dead');
