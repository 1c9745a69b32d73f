-- Dedup windows: a task enqueued with unique_for holds its unique key until unique_until
-- (microseconds), finished or not. Only such tasks have it, so the index stays small.
ALTER TABLE tasks ADD COLUMN unique_until INTEGER;
CREATE INDEX tasks_unique_until ON tasks (unique_key, unique_until) WHERE unique_until IS NOT NULL;
