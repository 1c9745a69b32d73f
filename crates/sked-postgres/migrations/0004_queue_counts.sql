-- Queue counts per state, read by the dashboard, `sked top` and /metrics every few seconds:
-- with this index they walk the distinct queues and count each state only up to a limit,
-- instead of scanning every task ever kept (a GROUP BY over 1,000,000 tasks took 350 ms).
CREATE INDEX sked_tasks_queue_state ON sked_tasks (queue, state);
