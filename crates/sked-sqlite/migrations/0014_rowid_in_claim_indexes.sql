-- Every index of a rowid table ends with the rowid, which `id` is: the claim indexes that named
-- `id` as their last column held it twice, 4 to 5 bytes of a 33-byte entry, written by every
-- enqueue and read by every claim. Without it they order the same (the rowid still breaks ties
-- in run time) and still answer `id` from the index alone.
DROP INDEX tasks_available_queue;
CREATE INDEX tasks_available_queue ON tasks (queue, priority DESC, run_at) WHERE state = 'available';
DROP INDEX tasks_available_key;
CREATE INDEX tasks_available_key ON tasks (queue, priority, concurrency_key, run_at)
    WHERE concurrency_key IS NOT NULL AND state = 'available';
