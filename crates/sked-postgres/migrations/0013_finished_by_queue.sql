-- Finished tasks in one index instead of two. Every task that ends entered both
-- `sked_tasks_finished` (by finish time, for retention and activity) and
-- `sked_tasks_finished_queue` (by queue and state, for counts): an ending wrote one more index
-- entry than the keeping of its outcome needs. One index by queue, state and finish time serves
-- all three: counts read its first two columns, and retention and activity walk the queues and
-- read each queue's finished tasks by time.
DROP INDEX sked_tasks_finished;
DROP INDEX sked_tasks_finished_queue;
CREATE INDEX sked_tasks_finished_queue ON sked_tasks (queue, state, finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');
