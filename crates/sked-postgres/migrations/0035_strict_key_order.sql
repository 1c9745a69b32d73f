-- Strict order per key: in a queue whose key_order is 'strict', a key runs one task at a time,
-- and a task that started keeps its key until it ends well. The index finds, per key, the
-- tasks that hold it that way: started (attempt > 0), not running, not ended well (waiting to
-- retry or due again, or dead until retried or deleted). Tasks that never started or that
-- succeeded are not in it, so work that does not fail costs it nothing.
ALTER TABLE sked_queues ADD COLUMN key_order text;
CREATE INDEX sked_tasks_key_holding ON sked_tasks (queue, concurrency_key, id)
    WHERE concurrency_key IS NOT NULL AND attempt > 0
      AND state IN ('scheduled', 'available', 'retrying', 'dead');
