-- A task enqueued with a dedup window (`unique_until` set) holds its key until the window
-- closes, whatever its state, and no longer: it leaves the index of unfinished holders, which
-- keeps only the tasks that hold their key while unfinished.
DROP INDEX tasks_unique_key;
CREATE UNIQUE INDEX tasks_unique_key ON tasks (unique_key)
    WHERE unique_key IS NOT NULL AND unique_until IS NULL
      AND (state = 'waiting' OR state = 'scheduled' OR state = 'available' OR state = 'running' OR state = 'retrying');
