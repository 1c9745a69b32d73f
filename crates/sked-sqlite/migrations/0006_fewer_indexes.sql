-- Fewer indexes for a task to move through. Every index a task enters or leaves costs a b-tree
-- write in the statement that changes its state, and a task that runs at once and succeeds
-- used to enter or leave ten entries over its life. Now it is six:
--
-- * Finished tasks have one index, led by the queue and the state as the counts need, then the
--   finish time, which retention and the activity chart range over queue by queue (walking the
--   distinct queues the way the counts do: one probe per queue).
-- * Available tasks have one index, led by the queue. A claim over several or all queues
--   reads each queue's first tasks in claim order from it and merges them. (Migration 7
--   brings back the index over all queues: the merge read queues × batch entries per claim.
--   With it, such a task enters or leaves eight entries.)
DROP INDEX tasks_finished;
DROP INDEX tasks_finished_queue;
CREATE INDEX tasks_finished ON tasks (queue, state, finished_at)
    WHERE (state = 'succeeded' OR state = 'dead' OR state = 'cancelled');
DROP INDEX tasks_available;
