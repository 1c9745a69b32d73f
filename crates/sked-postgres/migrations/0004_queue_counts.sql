-- Queue counts per state, read by the dashboard, `sked top` and /metrics every few seconds.
-- With these (and the available and running indexes, which already lead with the queue) every
-- state's tasks sit in a partial index that leads with the queue: the counts walk the distinct
-- queues and count each state only up to a limit, instead of scanning every task kept (a
-- GROUP BY over 1,000,000 tasks took 105 ms, on both cores). Partial, so that a task that runs
-- at once and succeeds adds one index entry (when it finishes), not one per state change.
CREATE INDEX sked_tasks_waiting_queue ON sked_tasks (queue, state) WHERE state IN ('scheduled', 'retrying');
CREATE INDEX sked_tasks_finished_queue ON sked_tasks (queue, state) WHERE state IN ('succeeded', 'dead', 'cancelled');
