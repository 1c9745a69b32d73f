-- Queue counts per state, read by the dashboard, `sked top` and /metrics every few seconds:
-- with this index they walk the distinct queues and count each state only up to a limit,
-- instead of scanning every task ever kept.
CREATE INDEX tasks_queue_state ON tasks (queue, state);
