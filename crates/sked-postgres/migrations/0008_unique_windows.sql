-- Dedup windows: a task enqueued with unique_for holds its unique key until unique_until,
-- finished or not. Only such tasks have it, so the index stays small.
ALTER TABLE sked_tasks ADD COLUMN unique_until timestamptz;
CREATE INDEX sked_tasks_unique_until ON sked_tasks (unique_key, unique_until)
    WHERE unique_until IS NOT NULL;
