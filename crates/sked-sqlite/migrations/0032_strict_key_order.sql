-- Strict order per key: in a queue whose key_order is 'strict', a key runs one task at a time,
-- and a task that started keeps its key until it ends well. The index finds, per key, the
-- tasks that hold it that way: started (attempt > 0), not running, not ended well (waiting to
-- retry or due again, or dead until retried or deleted). Tasks that never started or that
-- succeeded are not in it, so work that does not fail costs it nothing. The rowid orders each
-- key's entries.
ALTER TABLE queues ADD COLUMN key_order TEXT;
CREATE INDEX tasks_key_holding ON tasks (queue, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND attempt > 0
      AND (state = 'scheduled' OR state = 'available' OR state = 'retrying' OR state = 'dead');
