-- Strict order per key: in a queue whose key_order is 'strict', a key's tasks start one after
-- another in the order they were enqueued. The index finds each key's first task that holds
-- the others back (unfinished, or dead until retried or deleted); tasks without a key are not
-- in it.
ALTER TABLE sked_queues ADD COLUMN key_order text;
CREATE INDEX sked_tasks_key_holding ON sked_tasks (queue, concurrency_key, id)
    WHERE concurrency_key IS NOT NULL
      AND state IN ('waiting', 'scheduled', 'available', 'running', 'retrying', 'dead');
